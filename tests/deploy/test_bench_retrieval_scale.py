"""The workspace-scale bench's own parts (bench/retrieval_scale.py): its corpus, its reference BM25 and its bulk
loader's client, without moto."""

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


def _update(table: DictTable, unit: str, counts: dict[str, int], groups: list[int] | None = None) -> None:
    names = {"#w": f"u:{unit}", **{f"#a{i}": name for i, name in enumerate(counts)}}
    values = {":one": {"N": "1"}, **{f":a{i}": {"N": str(n)} for i, n in enumerate(counts.values())}}
    adds = [f"#a{i} :a{i}" for i in range(len(counts))]
    if groups:
        names["#g"], values[":g"] = "g", {"NS": [str(g) for g in groups]}
        adds.append("#g :g")
    table.update_item(
        TableName="t",
        Key={"PK": {"S": "WS#w#XC"}, "SK": {"S": "kayak"}},
        UpdateExpression=f"ADD {', '.join(adds)} SET #w = :one",
        ConditionExpression="attribute_not_exists(#w)",
        ExpressionAttributeNames=names,
        ExpressionAttributeValues=values,
    )


def test_dict_table_adds_a_units_counts_once_bills_the_refusal_and_settle_removes_its_mark():
    table = DictTable("t")
    _update(table, "s:1:a", {"n": 2, "p:user": 1}, [1])
    _update(table, "s:51:b", {"n": 3}, [2, 1])
    with pytest.raises(ClientError) as refused:
        _update(table, "s:1:a", {"n": 2, "p:user": 1}, [1])
    assert refused.value.response["Error"]["Code"] == "ConditionalCheckFailedException"
    table.update_item(
        TableName="t",
        Key={"PK": {"S": "WS#w#XC"}, "SK": {"S": "kayak"}},
        UpdateExpression="REMOVE #w",
        ConditionExpression="attribute_exists(#w)",
        ExpressionAttributeNames={"#w": "u:s:1:a"},
    )
    item = table.items["WS#w#XC", "kayak"]
    assert item["n"] == {"N": "5"} and item["p:user"] == {"N": "1"} and item["g"] == {"NS": ["1", "2"]}
    assert "u:s:1:a" not in item and "u:s:51:b" in item
    assert table.wru == {"counters": 3, "marks removed (deriver)": 1} and table.writes["counters"] == 3
