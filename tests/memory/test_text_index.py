"""The exact lexical index in the table (precis.store.text_index): what it ranks is a brute-force BM25 over the raw
texts, its statistics are the corpus's exact counts, a message is found as soon as its post answers, a unit counts
once however often (or however far) it is indexed, deletes take back exactly what they remove, and a failure while
indexing loses nothing.

The brute force here is written from the textbook (k1 0.9, b 0.4, Lucene's idf, the speaker counted twice, the
scope's own N, average length and document frequencies, ties by (session, seq)); only the tokenizer is Precis's
(`precis.lexical.terms`). DynamoDB's failures are played at botocore's seam on the real client: Precis runs unchanged.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest
from botocore.exceptions import ClientError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from local.template import template
from precis.lexical import Document, terms
from precis.store import keys, message_search, text_index
from precis.store.db import Db, from_item, get_db
from tests.handlers import call, dynamodb_requests, invoke
from tests.handlers import post_messages as post
from tests.stream import message_records, stream_record

K1, B = 0.9, 0.4
SPEAKER_TIMES = 2
GROUP_CAP = 9  # postings are grouped by count 1..8 and "9 or more"
W = "/v3/workspaces/ws1"

# ---------------------------------------------------------------- brute force, from the raw texts


@dataclass(frozen=True)
class Msg:
    session: str
    seq: int
    peer: str
    content: str

    @property
    def key(self) -> tuple[str, int]:
        return self.session, self.seq

    def bag(self) -> Counter[str]:
        """The message's terms with their counts: its words, and its speaker's name twice."""
        return Counter(terms(self.content) + terms(self.peer) * SPEAKER_TIMES)


def bm25(scope: list[Msg], query: str, k: int) -> list[tuple[tuple[str, int], float]]:
    """The k best of `scope` for `query` by Okapi BM25 over exactly `scope`, best first, ties by (session, seq)."""
    if not scope:
        return []
    bags = {m.key: m.bag() for m in scope}
    n = len(bags)
    average = sum(sum(b.values()) for b in bags.values()) / n
    asked = Counter(terms(query))
    df = {t: sum(1 for b in bags.values() if t in b) for t in asked}
    scored = {}
    for key, bag in bags.items():
        length = sum(bag.values())
        score = 0.0
        for term, said in asked.items():
            tf = bag[term]
            if tf == 0:
                continue
            inverse = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
            score += inverse * said * (tf * (K1 + 1) / (tf + K1 * (1 - B + B * length / average)))
        if score > 0:
            scored[key] = score
    return sorted(scored.items(), key=lambda hit: (-hit[1], hit[0]))[:k]


def brute_counters(corpus: list[Msg]) -> dict[str, tuple[dict[str, int], set[int]]]:
    """Counter sort key -> (its counts, its postings' groups), for what `corpus` says (statistics under '#')."""
    stats: Counter[str] = Counter()
    counts: dict[str, Counter[str]] = {}
    groups: dict[str, set[int]] = {}
    for m in corpus:
        bag = m.bag()
        length = sum(bag.values())
        stats.update({"n": 1, "len": length, f"n:{m.peer}": 1, f"len:{m.peer}": length})
        for term, said in bag.items():
            counts.setdefault(term, Counter()).update({"n": 1, f"p:{m.peer}": 1})
            groups.setdefault(term, set()).add(min(said, GROUP_CAP))
    out = {term: (dict(c), groups[term]) for term, c in counts.items()}
    if corpus:
        out[keys.TEXT_STATS] = (dict(stats), set())
    return out


def brute_postings(ws: str, corpus: list[Msg]) -> set[tuple[str, str, int, int, str]]:
    """(PK, SK, count, length, peer) of each (term, message)."""
    out = set()
    for m in corpus:
        bag = m.bag()
        length = sum(bag.values())
        for term, said in bag.items():
            out.add(
                (
                    keys.text_postings_pk(ws, term),
                    f"{min(said, GROUP_CAP)}#{length:07d}#{m.session}#{m.seq:012d}",
                    said,
                    length,
                    m.peer,
                )
            )
    return out


# ---------------------------------------------------------------- what the table holds


def counter_items(db: Db, ws: str) -> dict[str, dict]:
    """The workspace's counters and statistics with each peer's folded in, as one logical item per sort key: a
    peer's `n` appears as `p:{peer}` on a term's counter and as `n:{peer}` / `len:{peer}` on the statistics; marks
    (`u:`) of any of the items."""
    out = db.client.query(
        TableName=db.table,
        KeyConditionExpression="PK = :p",
        ConsistentRead=True,
        ExpressionAttributeValues={":p": {"S": keys.text_counters_pk(ws)}},
    )
    assert "LastEvaluatedKey" not in out
    merged = {i["SK"]: dict(i) for i in map(from_item, out["Items"])}
    prefix = keys.text_peer_counters_pk(ws, "")
    for item in scan(db, "begins_with(PK, :p)", {":p": {"S": prefix}}):
        peer, entry = item["PK"].removeprefix(prefix), merged.setdefault(item["SK"], {"SK": item["SK"]})
        for name, value in item.items():
            if name == "n":
                entry[f"n:{peer}" if item["SK"] == keys.TEXT_STATS else f"p:{peer}"] = value
            elif name == "len":
                entry[f"len:{peer}"] = value
            elif name.startswith("u:"):
                entry[name] = value
    return merged


def counters(db: Db, ws: str, *, groups_at_least: bool = False) -> dict[str, tuple[dict[str, int], set[int]]]:
    """The counters partition as counts (zeros left out, as a brute force has no zero) and groups; an item whose
    counts are all zero is as good as absent."""
    out = {}
    for sk, item in counter_items(db, ws).items():
        counts = {
            name: value
            for name, value in item.items()
            if (name in ("n", "len") or name.startswith(("n:", "len:", "p:"))) and value != 0
        }
        assert all(v > 0 for v in counts.values()), (sk, counts)  # never below zero
        if counts:
            out[sk] = (counts, set(item.get("g") or ()))
    return out


def marks(db: Db, ws: str) -> dict[str, set[str]]:
    """Counter sort key -> the units marked on it."""
    found = {sk: {name[2:] for name in item if name.startswith("u:")} for sk, item in counter_items(db, ws).items()}
    return {sk: units for sk, units in found.items() if units}


def postings(db: Db, ws: str) -> set[tuple[str, str, int, int, str]]:
    prefix = keys.text_postings_pk(ws, "")
    items = scan(db, "begins_with(PK, :p)", {":p": {"S": prefix}})
    return {(i["PK"], i["SK"], i["n"], int(i["SK"].split("#")[1]), i["p"]) for i in items}


def texts(db: Db, ws: str, session_id: str) -> dict[int, dict]:
    out = db.client.query(
        TableName=db.table,
        KeyConditionExpression="PK = :p",
        ConsistentRead=True,
        ExpressionAttributeValues={":p": {"S": keys.text_docs_pk(ws, session_id)}},
    )
    return {i["seq"]: i for i in map(from_item, out["Items"])}


def scan(db: Db, condition: str, values: dict) -> list[dict]:
    items, request = [], {"TableName": db.table, "FilterExpression": condition, "ExpressionAttributeValues": values}
    while True:
        out = db.client.scan(**request)
        items += map(from_item, out["Items"])
        if "LastEvaluatedKey" not in out:
            return items
        request["ExclusiveStartKey"] = out["LastEvaluatedKey"]


def approx_hits(hits: list[tuple[tuple[str, int], float]]) -> list[tuple[tuple[str, int], object]]:
    return [(key, pytest.approx(score, rel=1e-9)) for key, score in hits]


# ---------------------------------------------------------------- 1. exactness, in moto

PEERS = ["user", "assistant", "alice", "agent_7"]
COMMON = ["coffee", "meeting", "tomorrow"]
RARE = [
    "lisbon",
    "greyhound",
    "budget",
    "violin",
    "tram",
    "printer",
    "sister",
    "bread",
    "thursday",
    "garden",
    "adopted",
    "adoption",
    "ramen",
    "python",
]
STOP = ["the", "and", "it", "was"]
word = st.one_of(
    st.sampled_from(COMMON),
    st.sampled_from(COMMON),
    st.sampled_from(RARE),
    st.sampled_from(STOP + ["user", "assistant"]),
)
content = st.one_of(
    st.lists(word, min_size=1, max_size=12).map(" ".join),
    # a word said 8-12 times: the groups 8 and "9 or more"
    st.builds(
        lambda w, n, rest: " ".join([w] * n + rest),
        st.sampled_from(COMMON + RARE),
        st.integers(7, 12),
        st.lists(word, max_size=3),
    ),
    st.lists(st.sampled_from(STOP), min_size=1, max_size=3).map(" ".join),  # only stopwords: then they count
)
session_messages = st.lists(
    st.tuples(st.sampled_from(PEERS), content, st.booleans(), st.booleans()), min_size=1, max_size=8
)  # (peer, text, a unit ends after it, its unit is sent twice)
queries = st.lists(
    st.lists(
        st.sampled_from(COMMON + RARE + STOP + ["user", "assistant", "alice", "agent", "unheard"]),
        min_size=1,
        max_size=4,
    ).map(" ".join),
    min_size=1,
    max_size=3,
)
_WORKSPACES = itertools.count()


@pytest.fixture
def db(aws) -> Db:
    return Db(client=aws["dynamodb"], s3=aws["s3"], table=template().table_name, bucket=template().bucket_name)


def index_corpus(db: Db, ws: str, sessions: list[list[tuple[str, str, bool, bool]]]) -> dict[Msg, str]:
    """Index each session's messages through `index_texts`, in units (some sent twice); each message's unit."""
    corpus: dict[Msg, str] = {}
    for number, messages in enumerate(sessions):
        session_id = f"s{number}"
        unit: list[Msg] = []
        for seq, (peer, text, ends, twice) in enumerate(messages, start=1):
            unit.append(Msg(session_id, seq, peer, text))
            if ends or seq == len(messages):
                name = f"{session_id}:{unit[0].seq}:n{number}"
                parts = [text_index.Text(m.seq, m.peer, m.content) for m in unit]
                assert text_index.index_texts(db, ws, session_id, name, parts) == len(unit)
                if twice:
                    assert text_index.index_texts(db, ws, session_id, name, parts) == 0
                corpus |= dict.fromkeys(unit, name)
                unit = []
    return corpus


@given(sessions=st.lists(session_messages, min_size=1, max_size=4), asked=queries, k=st.integers(1, 8))
@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
def test_every_scope_ranks_exactly_the_brute_force_top_k_and_counts_exactly(db, sessions, asked, k):
    ws = f"x{next(_WORKSPACES)}"
    units = index_corpus(db, ws, sessions)
    corpus = list(units)

    assert counters(db, ws) == brute_counters(corpus)
    expected_marks: dict[str, set[str]] = {keys.TEXT_STATS: set(units.values())}
    for m, unit in units.items():
        for term in m.bag():
            expected_marks.setdefault(term, set()).add(unit)
    assert marks(db, ws) == expected_marks  # each counter names the units it counted (settled later)
    assert postings(db, ws) == brute_postings(ws, corpus)
    for number in range(len(sessions)):
        stored = texts(db, ws, f"s{number}")
        mine = [m for m in corpus if m.session == f"s{number}"]
        assert {
            seq: (
                t["peer"],
                t["tlen"],
                Counter(dict((p.partition(":")[0], int(p.partition(":")[2] or 1)) for p in t["tsig"].split())),
            )
            for seq, t in stored.items()
        } == {m.seq: (m.peer, sum(m.bag().values()), m.bag()) for m in mine}

    for query in asked:
        assert text_index.rank_workspace(db, ws, query, k) == approx_hits(bm25(corpus, query, k)), query
        for peer in PEERS:
            assert text_index.rank_workspace(db, ws, query, k, peer=peer) == approx_hits(
                bm25([m for m in corpus if m.peer == peer], query, k)
            ), (query, peer)
        for number in range(len(sessions)):
            session_id = f"s{number}"
            assert message_search.lexical_rank(db, ws, query, k, session_id=session_id) == approx_hits(
                bm25([m for m in corpus if m.session == session_id], query, k)
            ), (query, session_id)
            assert message_search.lexical_rank(db, ws, query, k) == approx_hits(bm25(corpus, query, k))


def test_a_word_common_to_thousands_of_texts_still_ranks_exactly(db):
    """Deep postings: a common word read past its first pages, a peer's share of it, ties broken by key."""
    corpus = []
    for session_number in range(3):
        session_id = f"s{session_number}"
        batch = []
        for seq in range(1, 301):
            peer = PEERS[(seq + session_number) % len(PEERS)]
            words = ["coffee"] * (1 + seq % 11) + [RARE[(seq * 7 + session_number) % len(RARE)]] * (seq % 3)
            batch.append(Msg(session_id, seq, peer, " ".join(words)))
        corpus += batch
        for start in range(0, len(batch), 100):
            chunk = batch[start : start + 100]
            text_index.index_texts(
                db,
                "deep",
                session_id,
                f"{session_id}:{chunk[0].seq}:n",
                [text_index.Text(m.seq, m.peer, m.content) for m in chunk],
            )
    assert counters(db, "deep") == brute_counters(corpus)
    for query, k in (
        ("coffee", 10),
        ("coffee coffee lisbon", 25),
        ("budget coffee", 3),
        ("alice coffee", 100),
        ("user", 7),
    ):
        assert text_index.rank_workspace(db, "deep", query, k) == approx_hits(bm25(corpus, query, k)), query
        for peer in ("alice", "agent_7"):
            assert text_index.rank_workspace(db, "deep", query, k, peer=peer) == approx_hits(
                bm25([m for m in corpus if m.peer == peer], query, k)
            ), (query, peer)


# ---------------------------------------------------------------- through the routes


@pytest.fixture
def ws(aws, monkeypatch) -> Db:
    """Workspace ws1, and the handlers' own client (failures are played on it)."""
    monkeypatch.setenv("PRECIS_PURGE_GRACE_S", "0")
    get_db.cache_clear()
    assert call("POST", "/v3/workspaces", {"id": "ws1"}).status == 201
    yield get_db()
    get_db.cache_clear()


def search(path: str, query: str, limit: int = 10) -> list[dict]:
    reply = call("POST", path, {"query": query, "limit": limit})
    assert reply.status == 200, reply.body
    return reply.body


def stored(db: Db, session: str = "s1") -> list[dict]:
    out = db.client.query(
        TableName=db.table,
        KeyConditionExpression="PK = :p AND begins_with(SK, :m)",
        ConsistentRead=True,
        ExpressionAttributeValues={":p": {"S": keys.session_pk("ws1", session)}, ":m": {"S": "MSG#"}},
    )
    return [from_item(i) for i in out["Items"]]


def corpus_of(db: Db, *sessions: str) -> list[Msg]:
    return [Msg(s, m["seq"], m["peer_id"], m["content"]) for s in sessions for m in stored(db, s)]


def derive(db: Db, session: str = "s1") -> None:
    """The DeriveFunction, handed the session's message inserts as the stream hands them."""
    assert invoke("DeriveFunction", {"Records": message_records(db.client, session_id=session)}) == {
        "batchItemFailures": []
    }


def purge(db: Db, session: str) -> dict:
    """The SummarizeFunction, handed the session's delete (its MODIFY record): it purges the session; the record."""
    item = db.client.get_item(
        TableName=db.table, Key={"PK": {"S": "WS#ws1"}, "SK": {"S": f"SESSION#{session}"}}, ConsistentRead=True
    )["Item"]
    record = stream_record(item, "MODIFY")
    assert invoke("SummarizeFunction", {"Records": [record]}) == {"batchItemFailures": []}
    return record


def ids_of(db: Db, hits: list[tuple[tuple[str, int], float]]) -> list[str]:
    by_key = {(s, m["seq"]): m["id"] for s in {key[0] for key, _ in hits} for m in stored(db, s)}
    return [by_key[key] for key, _ in hits]


def is_text_put(params: dict) -> bool:
    return any(
        r.get("PutRequest", {}).get("Item", {}).get("kind") == {"S": "xdoc"}
        for requests in params["RequestItems"].values()
        for r in requests
    )


@contextmanager
def refused(db: Db, operation: str, when: Callable[[dict], bool]) -> Iterator[list[dict]]:
    """DynamoDB refuses the `operation` requests `when` picks (as an InternalServerError past botocore's retries)."""
    refusals: list[dict] = []

    def refuse(params: dict, **_) -> None:
        if when(params):
            refusals.append(params)
            raise ClientError({"Error": {"Code": "InternalServerError", "Message": "refused by the test"}}, operation)

    db.client.meta.events.register(f"provide-client-params.dynamodb.{operation}", refuse)
    try:
        yield refusals
    finally:
        db.client.meta.events.unregister(f"provide-client-params.dynamodb.{operation}", refuse)


def never_sleep(seconds: float) -> None:
    raise AssertionError(f"waited {seconds} s for a request whose deadline had passed")


CONVERSATION = [
    ("s1", [("user", "I adopted a greyhound named Biscuit"), ("assistant", "A greyhound! How is Biscuit settling in")]),
    ("s2", [("alice", "the budget meeting moved to thursday")]),
    ("s1", [("user", "Biscuit sleeps all day on the sofa, the greyhound way")]),
    (
        "s3",
        [
            ("assistant", "reminder: coffee with alice on thursday"),
            ("alice", "coffee and the budget, thursday"),
            ("user", "my sister adopted a cat"),
        ],
    ),
    ("s2", [("user", "the tram to Lisbon was late again")]),
    ("s1", [("assistant", "greyhounds love sofas; was adoption hard")]),
]


def test_a_message_is_found_by_every_search_as_soon_as_its_post_answers(ws):
    """No deriver run, no index settling: each search right after a post ranks exactly as the brute force ranks
    everything posted so far."""
    sent: list[Msg] = []
    for session, batch in CONVERSATION:
        views = post(session, *batch)
        sent += [Msg(session, v["seq"], v["peer_id"], v["content"]) for v in views]
        ids = {
            (m.session, m.seq): v["id"]
            for m in sent
            for v in [next(x for x in stored(ws, m.session) if x["seq"] == m.seq)]
        }
        for view in views:
            query = " ".join(terms(view["content"])[:3])
            peer = view["peer_id"]
            for path, scope in (
                (f"{W}/search", sent),
                (f"{W}/sessions/{session}/search", [m for m in sent if m.session == session]),
                (f"{W}/peers/{peer}/search", [m for m in sent if m.peer == peer]),
            ):
                found = search(path, query)
                assert view["id"] in [m["id"] for m in found], (path, query)
                assert [m["id"] for m in found] == [ids[key] for key, _ in bm25(scope, query, 10)], (path, query)


def test_the_same_unit_indexed_again_changes_nothing(db):
    unit = [
        text_index.Text(seq, peer, text)
        for seq, (peer, text) in enumerate(
            [("user", "coffee coffee at noon"), ("alice", "the budget, again"), ("user", "coffee")], 1
        )
    ]
    assert text_index.index_texts(db, "w", "s1", "s1:1:ab", unit) == 3
    before = counter_items(db, "w"), postings(db, "w"), texts(db, "w", "s1")
    assert text_index.index_texts(db, "w", "s1", "s1:1:ab", unit) == 0
    assert text_index.index_texts(db, "w", "s1", "s1:1:ab", unit[1:]) == 0
    assert (counter_items(db, "w"), postings(db, "w"), texts(db, "w", "s1")) == before
    assert counters(db, "w") == brute_counters([Msg("s1", t.seq, t.peer, t.content) for t in unit])


def test_a_unit_whose_texts_were_written_in_part_is_finished_and_counted_once(db):
    unit = [
        text_index.Text(seq, "user" if seq % 3 else "alice", f"coffee number {seq} " + "tea " * (seq % 10))
        for seq in range(1, 61)
    ]  # three BatchWriteItems of texts

    def last_chunk(params: dict) -> bool:
        return is_text_put(params) and any(
            r["PutRequest"]["Item"]["seq"] == {"N": "60"} for rs in params["RequestItems"].values() for r in rs
        )

    with refused(db, "BatchWriteItem", last_chunk) as refusals, pytest.raises(ClientError):
        text_index.index_texts(db, "w", "s1", "s1:1:ab", unit)
    written = len(texts(db, "w", "s1"))
    assert refusals and 0 < written < 60  # interrupted among its texts
    assert text_index.index_texts(db, "w", "s1", "s1:1:ab", unit) == 60 - written  # the missing ones only
    assert sorted(texts(db, "w", "s1")) == list(range(1, 61))
    assert counters(db, "w") == brute_counters([Msg("s1", t.seq, t.peer, t.content) for t in unit])


def test_delivering_the_stream_batch_again_changes_no_counter_and_settling_removes_the_marks(ws):
    post("s1", ("user", "coffee with alice tomorrow"), ("alice", "coffee, or tea?"))
    post("s1", ("user", "tea it is, tomorrow"))
    post("s2", ("alice", "tomorrow the budget"))
    corpus = corpus_of(ws, "s1", "s2")
    assert counters(ws, "ws1") == brute_counters(corpus)
    units = {m["ib"] for s in ("s1", "s2") for m in stored(ws, s)}
    assert len(units) == 3 and set(marks(ws, "ws1")[keys.TEXT_STATS]) == units  # counted, not settled yet
    derive(ws, "s1")
    derive(ws, "s2")
    assert marks(ws, "ws1") == {}  # the deriver saw the texts: each unit's marks are gone
    settled = counter_items(ws, "ws1"), postings(ws, "ws1"), texts(ws, "ws1", "s1")
    assert counters(ws, "ws1") == brute_counters(corpus)
    derive(ws, "s1")  # the stream delivers the batch again
    derive(ws, "s2")
    assert (counter_items(ws, "ws1"), postings(ws, "ws1"), texts(ws, "ws1", "s1")) == settled


FAILURES = {
    "every counter": ("UpdateItem", lambda p: p["Key"]["PK"]["S"] == keys.text_counters_pk("ws1")),
    "the statistics": (
        "UpdateItem",
        lambda p: p["Key"]["PK"]["S"] == keys.text_counters_pk("ws1") and p["Key"]["SK"]["S"] == keys.TEXT_STATS,
    ),
    "one term's counter": (
        "UpdateItem",
        lambda p: p["Key"] == {"PK": {"S": keys.text_counters_pk("ws1")}, "SK": {"S": "greyhound"}},
    ),
    "the postings": (
        "BatchWriteItem",
        lambda p: any(
            r.get("PutRequest", {})
            .get("Item", {})
            .get("PK", {})
            .get("S", "")
            .startswith(keys.text_postings_pk("ws1", ""))
            for rs in p["RequestItems"].values()
            for r in rs
        ),
    ),
    "the texts": ("BatchWriteItem", is_text_put),
}


def answers_without_5xx(session: str, peer: str, query: str) -> None:
    for path in (f"{W}/search", f"{W}/sessions/{session}/search", f"{W}/peers/{peer}/search"):
        search(path, query)
    reply = call("GET", f"{W}/sessions/{session}/context", search_query=query)
    assert reply.status == 200, reply.body


@pytest.mark.parametrize("failing", FAILURES)
def test_a_post_whose_indexing_fails_answers_201_and_the_deriver_indexes_it_once(ws, failing):
    post("s1", ("user", "coffee tomorrow"))
    operation, when = FAILURES[failing]
    batch = [("user", "I adopted a greyhound"), ("alice", "a greyhound, lovely"), ("user", "coffee and greyhound")]
    with refused(ws, operation, when) as refusals:
        reply = call(
            "POST", f"{W}/sessions/s1/messages", {"messages": [{"peer_id": p, "content": c} for p, c in batch]}
        )
    assert refusals and reply.status == 201, reply.body
    messages = stored(ws)
    assert [(m["peer_id"], m["content"]) for m in messages] == [("user", "coffee tomorrow"), *batch]  # once
    assert [m["id"] for m in messages[1:]] == [v["id"] for v in reply.body]
    assert sorted(texts(ws, "ws1", "s1")) == [1]  # its texts never came: the unit is not done
    answers_without_5xx("s1", "alice", "greyhound")

    deadline = max(m["ibu"] for m in messages[1:])
    written = message_search.ensure_indexed(ws, "ws1", "s1", messages, now=lambda: deadline + 1, sleep=never_sleep)
    assert written == 3
    corpus = corpus_of(ws, "s1")
    assert counters(ws, "ws1") == brute_counters(corpus)
    assert postings(ws, "ws1") == brute_postings("ws1", corpus)
    for path, scope in (
        (f"{W}/search", corpus),
        (f"{W}/sessions/s1/search", corpus),
        (f"{W}/peers/alice/search", [m for m in corpus if m.peer == "alice"]),
    ):
        assert [m["id"] for m in search(path, "greyhound coffee")] == ids_of(ws, bm25(scope, "greyhound coffee", 10))
    assert (
        message_search.ensure_indexed(ws, "ws1", "s1", messages, now=lambda: deadline + 1, sleep=never_sleep) == 0
    )  # done: nothing more to write
    derive(ws)  # then the stream's delivery settles it
    assert marks(ws, "ws1") == {} and counters(ws, "ws1") == brute_counters(corpus)


def test_the_deriver_waits_for_a_request_still_writing_its_index(ws):
    with refused(ws, "BatchWriteItem", is_text_put):
        views = post("s1", ("user", "coffee tomorrow"), ("alice", "tomorrow, then"))
    messages = stored(ws)
    deadline = messages[0]["ibu"]
    clock = [deadline - 5.0]

    def sleep(seconds: float) -> None:  # the live request finishes its texts while the deriver waits
        assert seconds > 0
        if clock[0] == deadline - 5.0:
            assert (
                text_index.index_texts(
                    ws,
                    "ws1",
                    "s1",
                    messages[0]["ib"],
                    [text_index.Text(v["seq"], v["peer_id"], v["content"]) for v in views],
                )
                == 2
            )
        clock[0] += seconds

    assert message_search.ensure_indexed(ws, "ws1", "s1", messages, now=lambda: clock[0], sleep=sleep) == 0
    assert deadline - 5.0 < clock[0] < deadline  # it waited, and no longer than the texts took
    assert counters(ws, "ws1") == brute_counters(corpus_of(ws, "s1"))


def test_the_deriver_repairs_a_dead_request_once_its_deadline_has_passed(ws):
    with refused(ws, "BatchWriteItem", is_text_put):
        post("s1", ("user", "coffee tomorrow"), ("alice", "tomorrow, then"))
    messages = stored(ws)
    deadline = messages[0]["ibu"]
    clock = [deadline - 3.0]

    def sleep(seconds: float) -> None:
        assert seconds > 0
        clock[0] += seconds

    assert message_search.ensure_indexed(ws, "ws1", "s1", messages, now=lambda: clock[0], sleep=sleep) == 2
    assert clock[0] >= deadline  # waited the request's deadline out, then indexed its unit
    assert sorted(texts(ws, "ws1", "s1")) == [1, 2]
    assert counters(ws, "ws1") == brute_counters(corpus_of(ws, "s1"))


def age_deadlines(db: Db, session: str = "s1") -> None:
    """The wall clock passes the stored messages' index deadline (`ibu`): the request that stored them is over."""
    for m in stored(db, session):
        db.client.update_item(
            TableName=db.table,
            Key={"PK": {"S": m["PK"]}, "SK": {"S": m["SK"]}},
            UpdateExpression="SET ibu = :past",
            ExpressionAttributeValues={":past": {"N": "1"}},
        )


def test_the_derive_function_indexes_what_a_dead_request_left_and_leaves_no_mark(ws):
    post("s2", ("alice", "coffee, always coffee"))
    derive(ws, "s2")
    with refused(ws, "BatchWriteItem", is_text_put):
        post("s1", ("user", "coffee tomorrow"), ("alice", "tomorrow, then"))
    age_deadlines(ws)
    derive(ws)  # the stream's delivery: settles what it can, then derives (indexing first)
    corpus = corpus_of(ws, "s1", "s2")
    assert sorted(texts(ws, "ws1", "s1")) == [1, 2]
    assert counters(ws, "ws1") == brute_counters(corpus)
    assert [m["id"] for m in search(f"{W}/sessions/s1/search", "tomorrow")] == ids_of(
        ws, bm25(corpus_of(ws, "s1"), "tomorrow", 10)
    )
    # Every unit is counted and its texts are there: nothing is left for a mark to guard.
    assert marks(ws, "ws1") == {}


def test_a_unit_whose_insert_the_deriver_saw_before_its_texts_leaves_no_mark(ws):
    """The stream is fast: the deriver gets a batch's inserts while its request is still writing the texts. It waits
    for them (the request's deadline has not passed), then settles: nothing is left for a mark to guard."""
    import threading

    images: list[dict] = []
    deriver = threading.Thread(target=lambda: message_search.index_messages(ws, images))

    def deriver_first(params: dict) -> bool:
        if not images:  # the insert came down the stream before the texts were written
            images.extend(from_item(r["dynamodb"]["NewImage"]) for r in message_records(ws.client, session_id="s1"))
            deriver.start()  # (polls for the texts until the request's deadline)
        return False  # then the texts are written

    with refused(ws, "BatchWriteItem", lambda p: is_text_put(p) and deriver_first(p)):
        post("s1", ("user", "coffee tomorrow"), ("alice", "tomorrow, then"))
    deriver.join()
    messages = stored(ws)
    assert images and sorted(texts(ws, "ws1", "s1")) == [1, 2]
    assert (
        message_search.ensure_indexed(ws, "ws1", "s1", messages, now=lambda: messages[0]["ibu"] - 1, sleep=never_sleep)
        == 0
    )  # the deriver's derivation: nothing to wait for
    assert counters(ws, "ws1") == brute_counters(corpus_of(ws, "s1"))
    assert marks(ws, "ws1") == {}


@pytest.mark.parametrize(
    "settled",
    [
        True,
        False,
    ],
    ids=["settled before the delete", "delivered to the deriver after it"],
)
def test_deleting_a_session_takes_back_exactly_its_counts_postings_and_texts(ws, settled):
    post("s1", ("user", "coffee with alice tomorrow"), ("alice", "coffee coffee coffee, or tea?"))
    post("s1", ("user", "greyhound " * 12 + "tomorrow"))
    post("s2", ("alice", "tomorrow the budget, and coffee"), ("user", "tea"))
    post("s3", ("assistant", "the greyhound again"))
    inserts = {s: message_records(ws.client, session_id=s) for s in ("s1", "s2", "s3")}
    if settled:
        for session in ("s1", "s2", "s3"):
            derive(ws, session)
    remaining = corpus_of(ws, "s2", "s3")
    assert call("DELETE", f"{W}/sessions/s1").status == 202
    delete = purge(ws, "s1")

    after = counters(ws, "ws1")
    expected = brute_counters(remaining)
    assert {sk: counts for sk, (counts, _) in after.items()} == {sk: counts for sk, (counts, _) in expected.items()}
    assert all(after[sk][1] >= groups for sk, (_, groups) in expected.items())
    assert postings(ws, "ws1") == brute_postings("ws1", remaining)
    assert texts(ws, "ws1", "s1") == {}
    for query in ("coffee", "greyhound tomorrow", "alice"):
        assert text_index.rank_workspace(ws, "ws1", query, 10) == approx_hits(bm25(remaining, query, 10))
        assert text_index.rank_workspace(ws, "ws1", query, 10, peer="alice") == approx_hits(
            bm25([m for m in remaining if m.peer == "alice"], query, 10)
        )
    purged = counter_items(ws, "ws1")
    assert invoke("SummarizeFunction", {"Records": [delete]}) == {"batchItemFailures": []}  # delivered again
    assert counter_items(ws, "ws1") == purged
    if not settled:  # the stream's inserts reach the deriver after the delete (it skips a deleted session)
        for session in ("s1", "s2", "s3"):
            assert invoke("DeriveFunction", {"Records": inserts[session]}) == {"batchItemFailures": []}
        assert {sk: counts for sk, (counts, _) in counters(ws, "ws1").items()} == {
            sk: counts for sk, (counts, _) in expected.items()
        }
    # Nothing of s1 is left on the counters: neither its counts nor its units' marks.
    assert not [(sk, unit) for sk, units in marks(ws, "ws1").items() for unit in units if unit.startswith("s1:")]


def test_deleting_the_workspace_removes_its_counters(ws):
    post("s1", ("user", "coffee with alice tomorrow"))
    post("s2", ("alice", "tomorrow the budget"))
    derive(ws, "s1")
    for session in ("s1", "s2"):
        assert call("DELETE", f"{W}/sessions/{session}").status == 202
        purge(ws, session)
    assert counter_items(ws, "ws1")  # (zeros, until the workspace goes)
    assert call("DELETE", W).status == 202
    assert counter_items(ws, "ws1") == {} and postings(ws, "ws1") == set()
    assert scan(ws, "begins_with(PK, :p)", {":p": {"S": "WS#ws1"}}) == []


def test_a_purge_that_ends_after_its_workspace_was_deleted_leaves_no_counter_behind(ws):
    post("s1", ("user", "coffee with alice tomorrow"))
    derive(ws, "s1")
    assert call("DELETE", f"{W}/sessions/s1").status == 202
    assert call("DELETE", W).status == 202  # the session is deleted, not yet purged: it does not block
    purge(ws, "s1")
    assert counter_items(ws, "ws1") == {}
    # The id is free again: a new workspace of that name starts from nothing.
    assert call("POST", "/v3/workspaces", {"id": "ws1"}).status == 201
    post("s9", ("user", "coffee"))
    assert counters(ws, "ws1") == brute_counters(corpus_of(ws, "s9"))


def test_deleting_a_conclusion_removes_its_term_counts(ws):
    assert call("POST", f"{W}/peers", {"id": "alice"}).status == 201
    reply = call(
        "POST",
        f"{W}/conclusions",
        {
            "conclusions": [
                {"content": "alice adopted a greyhound", "observer_id": "alice", "observed_id": "alice"},
                {"content": "alice drinks coffee", "observer_id": "alice", "observed_id": "alice"},
            ]
        },
    )
    assert reply.status == 201, reply.body
    greyhound, coffee = (c["id"] for c in reply.body)

    def text_item(cid: str) -> dict | None:
        return from_item(
            ws.client.get_item(
                TableName=ws.table,
                ConsistentRead=True,
                Key={k: {"S": v} for k, v in keys.conclusion_text("ws1", "alice", "alice", cid).items()},
            ).get("Item")
        )

    def query(text: str) -> list[str]:
        answer = call(
            "POST",
            f"{W}/conclusions/query",
            {"query": text, "filters": {"observer_id": "alice", "observed_id": "alice"}},
        )
        assert answer.status == 200, answer.body
        return [c["id"] for c in answer.body]

    assert text_item(greyhound)["tsig"] == "adopt alic greyhound"
    assert query("greyhound")[:1] == [greyhound]
    assert call("DELETE", f"{W}/conclusions/{greyhound}").status == 204
    assert text_item(greyhound) is None and text_item(coffee) is not None
    assert greyhound not in query("greyhound")


def test_a_post_saying_more_words_than_a_request_indexes_is_indexed_by_the_deriver(ws):
    """A batch of more distinct words than a post indexes before answering (each costs a posting and two counter
    updates) is stored and answered at once; the deriver indexes it once its request is done."""
    from precis.lexical import Document
    from precis.messages.ingest import INLINE_INDEX_MAX_WRITES

    wide = [" ".join(f"w{m}x{i}q" for i in range(1001)) + " kayak" for m in range(2)]
    cost = text_index.index_cost([("user", Document.of(text, speaker="user")) for text in wide])
    assert cost == 2 * 1003 + 2 + text_index.UPDATE_COST * 2 * 2005 > INLINE_INDEX_MAX_WRITES  # (terms, stats)
    post("s1", *(("user", text) for text in wide))
    assert texts(ws, "ws1", "s1") == {} and search(f"{W}/search", "kayak") == []  # not indexed by the post
    age_deadlines(ws)
    derive(ws)
    assert [m["seq"] for m in search(f"{W}/search", "kayak")] == [1, 2]
    assert counters(ws, "ws1") == brute_counters(corpus_of(ws, "s1"))
    assert marks(ws, "ws1") == {}


# ---------------------------------------------------------------- bounded work (issue 46, reproduction 6)


def items_written(requests: list[tuple[str, dict]]) -> dict[str, int]:
    """The items the recorded DynamoDB requests write, by operation (a batch's or a transaction's items each)."""
    written: Counter[str] = Counter()
    for operation, params in requests:
        if operation == "BatchWriteItem":
            written[operation] += sum(len(r) for r in params["RequestItems"].values())
        elif operation == "TransactWriteItems":
            written[operation] += len(params["TransactItems"])
        elif operation in ("PutItem", "UpdateItem", "DeleteItem"):
            written[operation] += 1
    return dict(written)


def test_a_post_of_words_its_messages_share_indexes_no_more_than_its_write_budget(ws):
    """100 messages sharing 1,000 words say 1,001 distinct terms (a budget of terms let them through) but are 100,100
    postings and 2,004 counter updates: more than a post can write before its timeout. It is stored and answered
    with none of them written; the deriver indexes it."""
    from precis.messages.ingest import INLINE_INDEX_MAX_WRITES

    shared = " ".join(f"w{i}x" for i in range(1000))
    with dynamodb_requests() as seen:
        body = post("s1", *(("user", shared) for _ in range(100)))
    assert [m["seq"] for m in body] == list(range(1, 101))
    written = items_written(seen)
    assert sum(written.values()) < 1_000 < INLINE_INDEX_MAX_WRITES, written  # the batch (100) and its bookkeeping
    assert texts(ws, "ws1", "s1") == {} and postings(ws, "ws1") == set()


TWENTY = [f"note {i}: " + " ".join(f"t{i}x{j} c{j % 4}z" for j in range(8)) for i in range(20)]


def counter_updates(requests: list[tuple[str, dict]]) -> int:
    return sum(
        1
        for operation, params in requests
        if operation == "UpdateItem" and params["Key"]["PK"]["S"].startswith(keys.text_counters_pk("ws1"))
    )


@pytest.mark.parametrize("settled", [True, False], ids=["settled", "unsettled"])
def test_a_session_purge_updates_only_the_counters_it_counted_and_the_marks_they_hold(ws, settled):
    """20 single-message posts (20 units, one purge block): the purge takes back each counter the block counted once
    and removes the marks that are there, not every (unit x counter) pair of the block."""
    for i, text in enumerate(TWENTY):
        post("s1", ("user" if i % 2 else "alice", text))
    post("s2", ("alice", "c1z and the rest"))
    if settled:
        derive(ws, "s1")
    corpus = corpus_of(ws, "s1")
    touched = len({(m.peer, t) for m in corpus for t in m.bag()} | {(None, t) for m in corpus for t in m.bag()})
    touched += 3  # the statistics: the workspace's and each of the two peers'
    held = sum(len(units) for units in marks(ws, "ws1").values())  # (as counter_items folds them: a lower bound)
    assert call("DELETE", f"{W}/sessions/s1").status == 202
    with dynamodb_requests() as seen:
        purge(ws, "s1")
    # Each counter: its count taken back (marked with the purge's unit), then that mark removed; and the marks the
    # block's units still held (none once settled).
    assert counter_updates(seen) <= 2 * touched + (0 if settled else 2 * held), (counter_updates(seen), touched)
    remaining = corpus_of(ws, "s2")
    assert {sk: c for sk, (c, _) in counters(ws, "ws1").items()} == {
        sk: c for sk, (c, _) in brute_counters(remaining).items()
    }
    assert not [unit for units in marks(ws, "ws1").values() for unit in units if unit.startswith("s1:")]


@pytest.mark.parametrize("where", ["counters", "marks"])
def test_a_purge_out_of_time_mid_block_stops_asks_again_and_ends_with_the_counters_of_a_workspace_without_it(ws, where):
    """A purge whose deadline passes in the middle of a block (among its counters, or among the marks it removes
    once its counts are back) stops there and touches the session (its MODIFY record continues it); the next
    invocation finishes it, taking back each count once: the counters are those of the same workspace in which the
    session never existed, and no mark of the session is left."""
    from precis.store.purge import purge_session

    for i, text in enumerate(TWENTY):
        post("s1", ("user" if i % 2 else "alice", text))
    post("s2", ("alice", "c1z and the rest"), ("user", "t3x1 again"))
    if where == "counters":
        derive(ws, "s1")  # (settled: 382 marks to remove, one chunk; unsettled, 1,022: two)
    before = counter_items(ws, "ws1")
    assert call("DELETE", f"{W}/sessions/s1").status == 202
    session = ws.client.get_item(
        TableName=ws.table, Key={"PK": {"S": "WS#ws1"}, "SK": {"S": "SESSION#s1"}}, ConsistentRead=True
    )["Item"]
    incarnation = session["incarnation"]["S"]

    # Out of time from the start (each call does a first chunk), or once the counters (4 chunks) and the first
    # chunk of marks are done.
    clock = iter([] if where == "counters" else [math.inf] * 4)
    first = purge_session(ws, "ws1", "s1", incarnation, time_left=lambda: next(clock, 0.0))
    assert not first.done
    session = from_item(
        ws.client.get_item(
            TableName=ws.table, Key={"PK": {"S": "WS#ws1"}, "SK": {"S": "SESSION#s1"}}, ConsistentRead=True
        )["Item"]
    )
    assert session["purge_rounds"] == 1 and "purged_at" not in session  # its continuation is asked for
    left = texts(ws, "ws1", "s1")
    assert counter_items(ws, "ws1") != before and sorted(left) == list(range(1, 21))  # some counts back, not all
    s1_marks = [u for units in marks_by_item(ws, "ws1").values() for u in units if u.startswith("s1:")]
    if where == "marks":  # every count is back and the texts say so; some marks are gone, not all
        assert all(t.get("tb") == 1 for t in left.values()) and 0 < len(s1_marks) < 1_022

    again = purge_session(ws, "ws1", "s1", incarnation)
    assert again.done
    remaining = corpus_of(ws, "s2")
    assert {sk: c for sk, (c, _) in counters(ws, "ws1").items()} == {
        sk: c for sk, (c, _) in brute_counters(remaining).items()
    }
    assert postings(ws, "ws1") == brute_postings("ws1", remaining) and texts(ws, "ws1", "s1") == {}
    assert not [unit for units in marks(ws, "ws1").values() for unit in units if unit.startswith("s1:")]
    assert call("POST", f"{W}/sessions", {"id": "s1"}).status == 201  # purged: the id is free again


def test_a_repair_stopped_midway_goes_on_from_its_marks_instead_of_sending_every_update_again(ws):
    """The deriver's repair of a unit dies after some of its counter updates (its timeout, a throttle): the next
    attempt reads which counters hold the unit's mark and updates only the others, so a unit too large for one
    invocation still gets indexed over a few, counted exactly once."""
    wide = [" ".join(f"r{m}x{i}q" for i in range(30)) + " kayak" for m in range(2)]

    def is_counter(params: dict) -> bool:
        return params["Key"]["PK"]["S"].startswith(keys.text_counters_pk("ws1"))

    with refused(ws, "UpdateItem", is_counter):  # the post's index fails: the deriver's to do
        post("s1", *(("user", text) for text in wide))
    age_deadlines(ws)
    messages = stored(ws)
    unit = messages[0]["ib"]
    attempts: list[int] = []
    with refused(ws, "UpdateItem", lambda p: is_counter(p) and (attempts.append(1) or len(attempts) > 40)):
        with pytest.raises(ClientError):
            message_search.ensure_indexed(ws, "ws1", "s1", messages, sleep=never_sleep)
        died()
    counted = sum(1 for units in marks_by_item(ws, "ws1").values() if unit in units)
    assert 0 < counted <= 40 and texts(ws, "ws1", "s1") == {}
    touched = len(text_index._tally("ws1", [(m.peer, Document.of(m.content, "user")) for m in corpus_of(ws, "s1")])[0])
    with dynamodb_requests() as seen:
        assert message_search.ensure_indexed(ws, "ws1", "s1", messages, sleep=never_sleep) == 2
    assert counter_updates(seen) == (touched - counted) + touched  # the rest, then settle's removal of every mark
    assert counters(ws, "ws1") == brute_counters(corpus_of(ws, "s1"))
    assert marks(ws, "ws1") == {}


def died() -> None:
    """The interrupted call's requests still in flight on the index's threads end (as an invocation's would with it):
    its pool is shut down, waiting for them, and the next call makes a new one."""
    text_index._pool().shutdown(wait=True)
    text_index._pool.cache_clear()


def marks_by_item(db: Db, ws: str) -> dict[tuple[str, str], set[str]]:
    """(partition, sort key) of each counter -> the units marked on it, the workspace's and each peer's apart."""
    items = scan(db, "begins_with(PK, :p)", {":p": {"S": keys.text_counters_pk(ws)}})
    return {(i["PK"], i["SK"]): {n[2:] for n in i if n.startswith("u:")} for i in items}


def test_a_session_purge_deletes_its_message_vectors_a_page_at_a_time_under_its_deadline(db):
    """A session's vectors (one per message) are deleted 1,000 keys a page: out of time, the purge stops after a
    page and the next call goes on, rather than reading the whole partition into one invocation."""
    vectors = [message_search.vector_item("ws1", "s1", seq, "user", [0.5] * 256) for seq in range(1, 1003)]
    for start in range(0, len(vectors), 25):
        db.client.batch_write_item(
            RequestItems={db.table: [{"PutRequest": {"Item": v}} for v in vectors[start : start + 25]]}
        )
    assert message_search.purge_vectors(db, "ws1", "s1", time_left=lambda: -1.0) == (1000, False)
    assert message_search.purge_vectors(db, "ws1", "s1", time_left=lambda: -1.0) == (2, True)
    assert message_search.purge_vectors(db, "ws1", "s1") == (0, True)


def test_the_deriver_does_not_wait_for_a_request_that_left_its_batch_to_it(ws):
    """100 messages sharing 200 words (202 distinct terms, but 20,200 postings) are past a post's budget: the post
    writes none of their index, and the deriver indexes the whole batch, exactly once, as soon as the stream brings
    it, without waiting for the request's deadline (it would sleep up to the ingest function's 15 s); then every
    search finds them."""
    shared = " ".join(f"w{i}x" for i in range(200))
    post("s1", *(("user", f"{shared} kayak{m}q") for m in range(100)))
    assert texts(ws, "ws1", "s1") == {} and search(f"{W}/search", "kayak7q") == []  # not indexed by the post
    messages = stored(ws)
    live = messages[0]["ibu"] - 1  # the request's deadline has not passed
    images = [from_item(r["dynamodb"]["NewImage"]) for r in message_records(ws.client, session_id="s1")]
    message_search.index_messages(ws, images, now=lambda: live, sleep=never_sleep)
    assert message_search.ensure_indexed(ws, "ws1", "s1", messages, now=lambda: live, sleep=never_sleep) == 100
    assert [m["seq"] for m in search(f"{W}/search", "kayak7q")] == [8]
    assert [m["seq"] for m in search(f"{W}/sessions/s1/search", "kayak42q w3x")][:1] == [43]
    assert counters(ws, "ws1") == brute_counters(corpus_of(ws, "s1"))
    assert marks(ws, "ws1") == {}


def test_a_large_settle_stopped_midway_removes_only_the_marks_left(ws):
    """A unit holding more than a thousand marks (a post of long messages) whose settle dies midway: the next settle
    reads which marks are left and removes those, instead of sending every removal again."""
    wide = " ".join(f"s{i}x" for i in range(600))
    post("s1", ("user", wide))
    held = sum(len(units) for units in marks_by_item(ws, "ws1").values())
    assert held == 2 * 602 > text_index.SETTLE_READ_FIRST  # (600 words, 'user', the statistics; twice)
    calls: list[int] = []
    with refused(ws, "UpdateItem", lambda p: bool(calls.append(1)) or len(calls) > 500):
        with pytest.raises(ClientError):
            text_index.settle(ws, "ws1", "s1", [1])
        died()
    left = sum(len(units) for units in marks_by_item(ws, "ws1").values())
    assert 0 < left < held
    with dynamodb_requests() as seen:
        assert text_index.settle(ws, "ws1", "s1", [1]) == left
    assert counter_updates(seen) == left and marks(ws, "ws1") == {}


def test_a_clone_copy_out_of_time_in_a_page_index_stops_and_the_next_step_finishes_it_exactly(ws):
    """A clone's copy indexes each page of 200 copied messages as one unit: a page of long messages can outlast the
    step. Out of time between two chunks of its counters, the step stops and asks for the next (its session item
    changes, so the stream brings a record); that one goes on from the marks, and the counters are exact."""
    from precis.store.clones import copy_base

    post("s1", *(("user" if m % 2 else "alice", " ".join(f"p{m}x{i}q" for i in range(40))) for m in range(4)))
    clone = call("POST", f"{W}/sessions/s1/clone").body["id"]
    clock = iter([100.0])  # enough for the page, then less than the margin: the index stops after its first chunk
    assert copy_base(ws, "ws1", clone, time_left=lambda: next(clock, 5.0)) is False
    item = from_item(
        ws.client.get_item(
            TableName=ws.table, Key={"PK": {"S": "WS#ws1"}, "SK": {"S": f"SESSION#{clone}"}}, ConsistentRead=True
        )["Item"]
    )
    assert item["copy_rounds"] == 1 and "base_session" in item and texts(ws, "ws1", clone) == {}
    assert copy_base(ws, "ws1", clone) is True
    assert sorted(texts(ws, "ws1", clone)) == [1, 2, 3, 4]
    assert counters(ws, "ws1") == brute_counters(corpus_of(ws, "s1", clone))
    assert not [unit for units in marks(ws, "ws1").values() for unit in units if unit.startswith(f"{clone}:")]
