"""The workspace-scale bench's own parts (bench/retrieval_scale.py): its corpus, its reference BM25 and its bulk
loader's client (`DictTable`: alone, and against botocore and moto on one session)."""

from __future__ import annotations

import math
import re
from collections import Counter

import pytest
from botocore.exceptions import ClientError

from bench.retrieval_scale import (
    K1,
    PEERS,
    PLANTED,
    SMALL_SESSIONS,
    STOPWORDS,
    B,
    DictTable,
    Message,
    Reference,
    check_direct,
    corpus,
    queries,
    reference_terms,
    stem,
)


@pytest.fixture(scope="module")
def small():
    return corpus(SMALL_SESSIONS)


def test_a_smaller_corpus_is_the_larger_ones_first_sessions(small):
    assert corpus(2).messages == small.messages[:200]


def test_each_planted_word_is_said_once_by_user(small):
    said = Counter(w for m in small.messages for w in re.findall(r"[a-z]+", m.text.lower()))
    assert set(small.planted) == set(PLANTED)
    for word, key in small.planted.items():
        assert said[word] == 1
        message = next(m for m in small.messages if m.key == key)
        assert message.peer == "user" and word in message.text.lower()


def test_vocabulary_words_are_letters_their_own_stems_and_no_stopwords(small):
    assert len(small.words) == len(set(small.words)) >= 30_000
    for word in small.words[::97]:
        assert word.isalpha() and word not in STOPWORDS and stem(word) == word


def test_queries_cover_every_planted_word_and_name_sessions_of_the_corpus(small):
    asked = queries(small)
    assert sorted(q.planted for q in asked if q.kind == "planted") == sorted(PLANTED)
    sessions = {m.session for m in small.messages}
    assert all(q.session in sessions for q in asked)


def _brute_force(messages: list[Message], query: str) -> list[tuple[tuple[str, int], float]]:
    """BM25 as the textbook writes it, one message at a time."""
    docs = [Counter(reference_terms(m.text) + reference_terms(m.peer) * 2) for m in messages]
    lengths = [sum(d.values()) for d in docs]
    average = sum(lengths) / len(docs)
    scored = []
    for message, doc, length in zip(messages, docs, lengths):
        total = 0.0
        for term, said in Counter(reference_terms(query)).items():
            if term in doc:
                df = sum(term in d for d in docs)
                idf = math.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
                total += idf * said * doc[term] * (K1 + 1) / (doc[term] + K1 * (1 - B + B * length / average))
        if total > 0:
            scored.append((message.key, total))
    return sorted(scored, key=lambda hit: (-hit[1], hit[0]))


def test_reference_scores_as_bm25_message_by_message(small):
    messages = small.messages[:300]
    reference = Reference(messages)
    for query in (
        "what about the kayak?",
        f"{small.words[0]} and {small.words[40]}, {small.words[40]}",
        "what did the user say?",
        f"assistant {small.words[2]} {small.words[900]}",
    ):
        want = _brute_force(messages, query)[:10]
        got = reference.rank(query)
        assert [key for key, _ in got] == [key for key, _ in want]
        assert [s for _, s in got] == pytest.approx([s for _, s in want])


def test_reference_breaks_ties_by_session_then_seq():
    messages = [
        Message("s0002", 1, PEERS[0], "kayak trip"),
        Message("s0001", 7, PEERS[0], "kayak trip"),
        Message("s0001", 3, PEERS[0], "kayak trip"),
    ]
    assert [key for key, _ in Reference(messages).rank("kayak")] == [("s0001", 3), ("s0001", 7), ("s0002", 1)]


WS_PK = "WS#w"
MANIFEST = (f"{WS_PK}#XM", "#")
FRESH = f"{WS_PK}#XF#03"


def _table() -> DictTable:
    """A manifest at version 2 and two fresh items, the second over 1 KB (binary as DynamoDB carries it: bytes)."""
    table = DictTable("t")
    puts = [
        {"PK": {"S": MANIFEST[0]}, "SK": {"S": "#"}, "v": {"N": "2"}, "segs": {"S": "[]"}},
        {"PK": {"S": FRESH}, "SK": {"S": "s1:1:a#000"}, "s": {"S": "s1"}, "z": {"B": b"x" * 100}},
        {"PK": {"S": FRESH}, "SK": {"S": "s1:51:b#000"}, "s": {"S": "s1"}, "z": {"B": b"y" * 1500}},
    ]
    table.batch_write_item(RequestItems={"t": [{"PutRequest": {"Item": item}} for item in puts]})
    table.wru.clear()
    table.by_kind.clear()
    return table


def _merge(old: int, deletes: list[str], segs: str = '[{"id":"0.1"}]') -> list[dict]:
    """A merge's transaction as text_index sends it: the manifest from `old` to `old + 1`, and the fresh deletes."""
    return [
        {
            "Update": {
                "TableName": "t",
                "Key": {"PK": {"S": MANIFEST[0]}, "SK": {"S": "#"}},
                "UpdateExpression": "SET #v = :v, #s = :s",
                "ConditionExpression": "#v = :old",
                "ExpressionAttributeNames": {"#v": "v", "#s": "segs"},
                "ExpressionAttributeValues": {":v": {"N": str(old + 1)}, ":s": {"S": segs}, ":old": {"N": str(old)}},
            }
        },
        *(
            {
                "Delete": {
                    "TableName": "t",
                    "Key": {"PK": {"S": FRESH}, "SK": {"S": sk}},
                    "ConditionExpression": "attribute_exists(PK)",
                }
            }
            for sk in deletes
        ),
    ]


def _kb(size: int) -> int:
    return max(1, -(-size // 1024))


# Item sizes by DynamoDB's rule (names plus values; a number of one digit is 2 bytes), written out here.
MANIFEST_SIZE = len("PK") + len(MANIFEST[0]) + len("SK") + 1 + len("v") + 2 + len("segs") + 2
FRESH_SIZES = [
    len("PK") + len(FRESH) + len("SK") + len(sk) + 1 + 2 + 1 + n
    for sk, n in (("s1:1:a#000", 100), ("s1:51:b#000", 1500))
]


@pytest.mark.parametrize(
    "old, deletes, reasons",
    [
        (1, ["s1:1:a#000", "s1:51:b#000"], ["ConditionalCheckFailed", "None", "None"]),  # another merge came first
        (2, ["s1:1:a#000", "s1:9:gone#000"], ["None", "None", "ConditionalCheckFailed"]),  # a fresh item purged
    ],
    ids=["manifest moved", "fresh item gone"],
)
def test_a_merge_whose_condition_fails_applies_nothing_and_bills_every_action_twice(old, deletes, reasons):
    table = _table()
    before = {k: dict(v) for k, v in table.items.items()}
    with pytest.raises(ClientError) as cancelled:
        table.transact_write_items(TransactItems=_merge(old, deletes))
    assert cancelled.value.response["Error"]["Code"] == "TransactionCanceledException"
    assert [r["Code"] for r in cancelled.value.response["CancellationReasons"]] == reasons
    assert table.items == before
    # each action at the size of the item it names (a missing one: the minimum), doubled
    sizes = [MANIFEST_SIZE] + [dict(zip(("s1:1:a#000", "s1:51:b#000"), FRESH_SIZES)).get(sk, 0) for sk in deletes]
    assert sum(table.wru.values()) == sum(2 * _kb(size) for size in sizes)
    assert set(table.by_kind) == {("manifest", "refused"), ("fresh", "refused")}


def test_a_merge_that_holds_moves_the_manifest_deletes_the_fresh_items_and_bills_the_larger_image_twice():
    table = _table()
    segs = '[{"id":"0.1","lv":0,"n":100}]' + " " * 1100  # the manifest grows past 1 KB
    table.transact_write_items(TransactItems=_merge(2, ["s1:1:a#000", "s1:51:b#000"], segs))
    manifest = table.items[MANIFEST]
    assert manifest["v"] == {"N": "3"} and manifest["segs"] == {"S": segs}
    assert not [key for key in table.items if key[0] == FRESH]
    assert (
        table.query(TableName="t", KeyConditionExpression="PK = :pk", ExpressionAttributeValues={":pk": {"S": FRESH}})[
            "Items"
        ]
        == []
    )
    after = MANIFEST_SIZE - 2 + len(segs)
    assert table.by_kind == {
        ("manifest", "update"): 2 * _kb(after),
        ("fresh", "delete"): 2 * _kb(FRESH_SIZES[0]) + 2 * _kb(FRESH_SIZES[1]),
    }
    assert table.by_kind["fresh", "delete"] == 2 * 1 + 2 * 2


def test_dict_table_bills_puts_by_the_larger_image_and_a_failed_conditional_delete_as_a_delete():
    table = _table()
    key = {"PK": {"S": FRESH}, "SK": {"S": "s1:51:b#000"}}
    table.batch_write_item(RequestItems={"t": [{"PutRequest": {"Item": {**key, "z": {"B": b"z" * 10}}}}]})
    assert table.by_kind == {("fresh", "put"): 2}  # (the 1.5 KB item it replaced)
    with pytest.raises(ClientError) as refused:
        table.delete_item(
            TableName="t",
            Key=key,
            ConditionExpression="#u = :u",
            ExpressionAttributeNames={"#u": "u"},
            ExpressionAttributeValues={":u": {"S": "s1:51:b"}},
        )
    assert refused.value.response["Error"]["Code"] == "ConditionalCheckFailedException"
    assert table.by_kind[("fresh", "refused")] == 1 and (FRESH, "s1:51:b#000") in table.items
    table.batch_write_item(RequestItems={"t": [{"DeleteRequest": {"Key": key}}, {"DeleteRequest": {"Key": key}}]})
    assert (
        table.by_kind[("fresh", "delete")] == 2 and (FRESH, "s1:51:b#000") not in table.items
    )  # (gone: 1 all the same)


def test_dict_table_queries_page_by_limit_backward_filtered_and_projected():
    table = DictTable("t")
    items = [
        {"PK": {"S": "P"}, "SK": {"S": f"{n:03d}"}, "s": {"S": "a" if n % 2 else "b"}, "x": {"S": "-"}}
        for n in range(1, 8)
    ]
    table.batch_write_item(RequestItems={"t": [{"PutRequest": {"Item": i}} for i in items]})
    table.batch_write_item(RequestItems={"t": [{"PutRequest": {"Item": {"PK": {"S": "Q"}, "SK": {"S": "001"}}}}]})
    request = {
        "TableName": "t",
        "KeyConditionExpression": "PK = :pk AND SK <= :last",
        "ExpressionAttributeValues": {":pk": {"S": "P"}, ":last": {"S": "006"}, ":s": {"S": "a"}},
        "ScanIndexForward": False,
        "Limit": 3,
        "FilterExpression": "#s = :s",
        "ExpressionAttributeNames": {"#s": "s"},
        "ProjectionExpression": "SK, #s",
    }
    first = table.query(**request)
    assert [i["SK"]["S"] for i in first["Items"]] == ["005"] and (first["Count"], first["ScannedCount"]) == (1, 3)
    assert first["Items"][0] == {"SK": {"S": "005"}, "s": {"S": "a"}}
    assert first["LastEvaluatedKey"] == {"PK": {"S": "P"}, "SK": {"S": "004"}}
    second = table.query(**request, ExclusiveStartKey=first["LastEvaluatedKey"])
    assert [i["SK"]["S"] for i in second["Items"]] == ["003", "001"] and "LastEvaluatedKey" not in second


def test_dict_table_stops_a_page_at_a_megabyte():
    table = DictTable("t")
    big = [{"PK": {"S": "P"}, "SK": {"S": f"{n}"}, "z": {"B": b"0" * 300_000}} for n in range(5)]
    for item in big:
        table.batch_write_item(RequestItems={"t": [{"PutRequest": {"Item": item}}]})
    page = table.query(TableName="t", KeyConditionExpression="PK = :pk", ExpressionAttributeValues={":pk": {"S": "P"}})
    assert page["ScannedCount"] == 3 and page["LastEvaluatedKey"]["SK"] == {"S": "2"}


def test_the_dict_table_load_stores_and_bills_what_botocore_and_moto_do():
    """bench/retrieval_scale.py's own check on one session (two posts, one merge): the same items, the same units."""
    from bench.common import use_fake_aws

    use_fake_aws()
    checked = check_direct(corpus(1))
    assert checked["messages"] == 100 and checked["items"] > 200
    assert checked["differing_items"] == 0, checked["example"]
    assert checked["wru_direct"] == checked["wru_botocore"]
