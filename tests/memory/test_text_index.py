"""The exact lexical index in the table (precis.store.text_index): what it ranks is a brute-force BM25 over the raw
texts whatever is fresh, merged into segments or compacted, a message is found as soon as its post answers, every
message is counted once however often (or however concurrently) it is indexed or merged, deletes take out exactly
what they remove (once a session's purge ends, the statistics are those of the live messages alone), and a failure
while indexing loses nothing.

The brute force here is written from the textbook (k1 0.9, b 0.4, Lucene's idf, the speaker counted twice, the
scope's own N, average length and document frequencies); only the tokenizer is Precis's (`precis.lexical.terms`).
What the index holds is read back raw (its packed items decoded here, zlib JSON), not through the module. DynamoDB's
failures and races are played at botocore's seam on the real client: Precis runs unchanged.
"""

from __future__ import annotations

import itertools
import json
import math
import threading
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest
from botocore.exceptions import ClientError
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from local.template import template
from precis.lexical import Document, terms
from precis.store import keys, message_search, text_index
from precis.store.db import Db, from_item, get_db, to_item
from tests.handlers import call, dynamodb_requests, invoke
from tests.handlers import post_messages as post
from tests.stream import message_records, stream_record

K1, B = 0.9, 0.4
SPEAKER_TIMES = 2
ITEM_MAX_BYTES = 400 * 1024
W = "/v3/workspaces/ws1"

# ---------------------------------------------------------------- brute force, from the raw texts


@dataclass(frozen=True)
class Msg:
    session: str
    seq: int
    peer: str
    content: str
    incarnation: str = ""  # (of its session: a deleted incarnation's message and a new one's can share a key)

    @property
    def key(self) -> tuple[str, int]:
        return self.session, self.seq

    @property
    def row(self) -> tuple[str, int, str]:
        return self.session, self.seq, self.incarnation

    def bag(self) -> Counter[str]:
        """The message's terms with their counts: its words, and its speaker's name twice."""
        return Counter(terms(self.content) + terms(self.peer) * SPEAKER_TIMES)


def bm25(
    scope: list[Msg], query: str, k: int | None = None, counted: list[Msg] | None = None
) -> list[tuple[tuple[str, int], float]]:
    """The k best of `scope` for `query` by Okapi BM25, best first, ties by (session, seq), with the statistics (N,
    average length, document frequencies) of the messages `counted` (`scope` itself when None)."""
    counted = scope if counted is None else counted
    if not scope or not counted:
        return []
    n = len(counted)
    average = sum(sum(m.bag().values()) for m in counted) / n
    asked = Counter(terms(query))
    df = {t: sum(1 for m in counted if t in m.bag()) for t in asked}
    scored = {}
    for m in scope:
        bag = m.bag()
        length = sum(bag.values())
        score = 0.0
        for term, said in asked.items():
            tf = bag[term]
            if tf == 0:
                continue
            inverse = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
            score += inverse * said * (tf * (K1 + 1) / (tf + K1 * (1 - B + B * length / average)))
        if score > 0:
            scored[m.key] = score
    return sorted(scored.items(), key=lambda hit: (-hit[1], hit[0]))[:k]


def assert_ranks(got: list, expected: list, k: int, context: object = None) -> None:
    """`got` is the top k of the full ranking `expected`: the same length, scores equal position by position, each
    key's score its own (so the same keys in the same order, up to scores equal to the last bit of a float)."""
    scores = dict(expected)
    assert len(got) == len(expected[:k]), (context, got, expected[:k])
    assert [s for _, s in got] == pytest.approx([s for _, s in expected[:k]], rel=1e-9), (context, got, expected[:k])
    assert all(key in scores and s == pytest.approx(scores[key], rel=1e-9) for key, s in got), (context, got)
    assert len({key for key, _ in got}) == len(got), (context, got)


# ---------------------------------------------------------------- what the table holds, decoded here


def unpack(data: bytes):
    return json.loads(zlib.decompress(data))


def partition(db: Db, pk: str) -> list[dict]:
    items, request = (
        [],
        {
            "TableName": db.table,
            "KeyConditionExpression": "PK = :p",
            "ConsistentRead": True,
            "ExpressionAttributeValues": {":p": {"S": pk}},
        },
    )
    while True:
        out = db.client.query(**request)
        items += map(from_item, out["Items"])
        if "LastEvaluatedKey" not in out:
            return items
        request["ExclusiveStartKey"] = out["LastEvaluatedKey"]


def scan(db: Db, condition: str, values: dict) -> list[dict]:
    items, request = [], {"TableName": db.table, "FilterExpression": condition, "ExpressionAttributeValues": values}
    while True:
        out = db.client.scan(**request)
        items += map(from_item, out["Items"])
        if "LastEvaluatedKey" not in out:
            return items
        request["ExclusiveStartKey"] = out["LastEvaluatedKey"]


def live_segments(db: Db, ws: str) -> list[dict]:
    """The manifest's segments (its JSON, read raw)."""
    item = db.client.get_item(TableName=db.table, Key=to_item(keys.text_manifest(ws)), ConsistentRead=True)
    return json.loads(item["Item"]["segs"]["S"]) if "Item" in item and "segs" in item["Item"] else []


def noted(db: Db, ws: str, name: str) -> set[str]:
    """The manifest's set `name`: "tmp", segments being written; "old", segments replaced, their items to delete."""
    item = db.client.get_item(TableName=db.table, Key=to_item(keys.text_manifest(ws)), ConsistentRead=True)
    return set(item.get("Item", {}).get(name, {}).get("SS", []))


def stale_clock() -> float:
    """A clock past the time any writer of a segment noted as being written could still be running."""
    return time.time() + text_index.STALE_BUILD_S + 1


def segment_rows(db: Db, ws: str) -> list[tuple[str, int, str]]:
    """(session, seq, incarnation) of each doc of each live segment, from its doc tables."""
    rows = []
    for segment in live_segments(db, ws):
        for item in partition(db, keys.text_segment_pk(ws, segment["id"])):
            if item["SK"].startswith("D"):
                rows += [tuple(row) for row in unpack(item["z"])]
    return rows


def fresh_rows(db: Db, ws: str) -> list[tuple[str, int, str | None, str]]:
    """(session, seq, incarnation named or None, unit) of each message packed in a fresh item."""
    return [
        (item["s"], int(entry[0]), item.get("i"), item["u"])
        for shard in range(text_index.FRESH_SHARDS)
        for item in partition(db, keys.text_fresh_pk(ws, shard))
        for entry in unpack(item["z"])
    ]


def segment_partitions(db: Db, ws: str) -> set[str]:
    """The ids of every segment partition holding an item, live or not."""
    prefix = f"WS#{ws}#XG#"
    return {i["PK"].removeprefix(prefix) for i in scan(db, "begins_with(PK, :p)", {":p": {"S": prefix}})}


def index_snapshot(db: Db, ws: str, *sessions: str) -> tuple:
    """Everything the workspace's index holds (the manifest, segments, fresh units, the sessions' texts)."""
    return (
        sorted(map(json.dumps, live_segments(db, ws))),
        sorted(segment_rows(db, ws)),
        sorted(fresh_rows(db, ws), key=repr),
        {s: texts(db, ws, s) for s in sessions},
    )


def texts(db: Db, ws: str, session_id: str) -> dict[int, dict]:
    return {i["seq"]: i for i in partition(db, keys.text_docs_pk(ws, session_id))}


def counted_once(db: Db, ws: str, live: list[Msg], dead: list[Msg] = ()) -> list[Msg]:
    """Asserts each live message is in the index exactly once (a segment's doc or a fresh unit's), its text there,
    and nothing else is but messages of `dead` (deleted incarnations) still in a segment, at most once each, none
    fresh: a session deleted whose purge has not yet rewritten its segments. Those (the statistics count them)."""
    current = {m.session: m.incarnation for m in live}
    rows = Counter(segment_rows(db, ws))
    fresh = Counter((s, seq, current.get(s) if i is None else i) for s, seq, i, _ in fresh_rows(db, ws))
    wanted = {m.row for m in live}
    both = rows + fresh
    assert {row: n for row, n in both.items() if row in wanted} == dict.fromkeys(wanted, 1), both
    by_row = {m.row: m for m in dead}
    stale = {row: n for row, n in both.items() if row not in wanted}
    assert set(stale) <= set(by_row) and set(stale.values()) <= {1} and not set(stale) & set(fresh), stale
    for session in {m.session for m in [*live, *dead]}:
        mine = {m.seq: m for m in live if m.session == session}
        found = texts(db, ws, session)
        assert {seq: (t["peer"], t["tlen"]) for seq, t in found.items()} == {
            seq: (m.peer, sum(m.bag().values())) for seq, m in mine.items()
        }, session
    return [by_row[row] for row in stale]


# ---------------------------------------------------------------- the routes, the functions, the seam


@pytest.fixture
def ws(aws, monkeypatch) -> Db:
    """Workspace ws1, and the handlers' own client (failures and races are played on it)."""
    monkeypatch.setenv("PRECIS_PURGE_GRACE_S", "0")
    get_db.cache_clear()
    assert call("POST", "/v3/workspaces", {"id": "ws1"}).status == 201
    yield get_db()
    get_db.cache_clear()


def search(path: str, query: str, limit: int = 10) -> list[dict]:
    reply = call("POST", path, {"query": query, "limit": limit})
    assert reply.status == 200, reply.body
    return reply.body


def stored(db: Db, session: str = "s1", ws: str = "ws1") -> list[dict]:
    return [i for i in partition(db, keys.session_pk(ws, session)) if i["SK"].startswith("MSG#") and "content" in i]


def incarnation_of(db: Db, session: str, ws: str = "ws1") -> str:
    item = db.client.get_item(
        TableName=db.table, Key={"PK": {"S": f"WS#{ws}"}, "SK": {"S": f"SESSION#{session}"}}, ConsistentRead=True
    )["Item"]
    return item["incarnation"]["S"]


def corpus_of(db: Db, *sessions: str, ws: str = "ws1") -> list[Msg]:
    return [
        Msg(s, m["seq"], m["peer_id"], m["content"], incarnation_of(db, s, ws))
        for s in sessions
        for m in stored(db, s, ws)
    ]


def derive(db: Db, session: str = "s1") -> None:
    """The DeriveFunction, handed the session's message inserts as the stream hands them."""
    assert invoke("DeriveFunction", {"Records": message_records(db.client, session_id=session)}) == {
        "batchItemFailures": []
    }


def delete_session(db: Db, session: str, ws: str = "ws1") -> dict:
    """The session's DELETE, then the SummarizeFunction handed its MODIFY record (it purges the session); the
    record."""
    assert call("DELETE", f"/v3/workspaces/{ws}/sessions/{session}").status == 202
    item = db.client.get_item(
        TableName=db.table, Key={"PK": {"S": f"WS#{ws}"}, "SK": {"S": f"SESSION#{session}"}}, ConsistentRead=True
    )["Item"]
    record = stream_record(item, "MODIFY")
    assert invoke("SummarizeFunction", {"Records": [record]}) == {"batchItemFailures": []}
    return record


def ids_of(db: Db, hits: list[tuple[tuple[str, int], float]]) -> list[str]:
    by_key = {(s, m["seq"]): m["id"] for s in {key[0] for key, _ in hits} for m in stored(db, s)}
    return [by_key[key] for key, _ in hits]


def puts_of(params: dict, kind: str) -> bool:
    """Whether a BatchWriteItem puts an item of `kind` ("xdoc": a text, "xfresh": a fresh unit)."""
    return any(
        r.get("PutRequest", {}).get("Item", {}).get("kind") == {"S": kind}
        for requests in params["RequestItems"].values()
        for r in requests
    )


def is_text_put(params: dict) -> bool:
    return puts_of(params, "xdoc")


def is_merge(params: dict) -> bool:
    """A TransactWriteItems of a merge (the manifest and fresh deletes), not of a compaction (the manifest alone)."""
    return len(params["TransactItems"]) > 1


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


@contextmanager
def first(db: Db, operation: str, when: Callable[[dict], bool], meanwhile: Callable[[], object]) -> Iterator[list]:
    """Another process's step comes between: `meanwhile()` runs once, just before the first `operation` request
    `when` picks is sent (its own requests go through)."""
    seen: list[dict] = []

    def hook(params: dict, **_) -> None:
        if not seen and when(params):
            seen.append(params)
            meanwhile()

    db.client.meta.events.register(f"provide-client-params.dynamodb.{operation}", hook)
    try:
        yield seen
    finally:
        db.client.meta.events.unregister(f"provide-client-params.dynamodb.{operation}", hook)


def never_sleep(seconds: float) -> None:
    raise AssertionError(f"waited {seconds} s for a request whose deadline had passed")


def died() -> None:
    """The interrupted call's requests still in flight on the index's threads end (as an invocation's would with it):
    its pool is shut down, waiting for them, and the next call makes a new one."""
    text_index.items.pool().shutdown(wait=True)
    text_index.items.pool.cache_clear()


def merge_all(db: Db, ws: str = "ws1") -> int:
    """Every fresh shard merged into a segment, however few it holds (the deriver waits for MERGE_MIN_DOCS)."""
    return sum(text_index.merge_shard(db, ws, shard, min_docs=1) for shard in range(text_index.FRESH_SHARDS))


def assert_every_scope_exact(db: Db, ws: str, live: list[Msg], counted: list[Msg], query: str, k: int) -> None:
    """The workspace's, each peer's and a `keep`'s ranking equal the brute force's over `live`, with the statistics
    of `counted`; each session's, the brute force's over its own live messages."""
    assert_ranks(text_index.rank_workspace(db, ws, query, k), bm25(live, query, None, counted), k, query)
    for peer in PEERS:
        assert_ranks(
            text_index.rank_workspace(db, ws, query, k, peer=peer),
            bm25([m for m in live if m.peer == peer], query, None, [m for m in counted if m.peer == peer]),
            k,
            (query, peer),
        )
    sessions = sorted({m.session for m in live})
    chosen = set(sessions[::2])
    assert_ranks(
        text_index.rank_workspace(db, ws, query, k, keep=lambda key: key[0] in chosen),
        bm25([m for m in live if m.session in chosen], query, None, counted),
        k,
        (query, chosen),
    )
    for session in sessions:
        assert_ranks(
            message_search.lexical_rank(db, ws, query, k, session_id=session),
            bm25([m for m in live if m.session == session], query),
            k,
            (query, session),
        )


# ---------------------------------------------------------------- 1. exactness, whatever the index's state

PEERS = ["user", "assistant", "alice"]
COMMON = ["coffee", "meeting", "tomorrow"]
RARE = ["lisbon", "greyhound", "budget", "violin", "tram", "sister", "bread", "adopted", "adoption", "ramen"]
STOP = ["the", "and", "it", "was"]
word = st.one_of(st.sampled_from(COMMON), st.sampled_from(RARE), st.sampled_from(STOP + ["user", "assistant"]))
content = st.one_of(
    st.lists(word, min_size=1, max_size=10).map(" ".join),
    st.builds(  # a word said many times
        lambda w, n, rest: " ".join([w] * n + rest),
        st.sampled_from(COMMON + RARE),
        st.integers(5, 12),
        st.lists(word, max_size=3),
    ),
    st.lists(st.sampled_from(STOP), min_size=1, max_size=3).map(" ".join),  # only stopwords: then they count
)
SESSIONS = ["s1", "s2", "s9"]  # s2 and s9 share a fresh shard, s1 has its own
step = st.tuples(  # a post to a session, then: nothing, its shard merged however few it holds, a compaction, or the
    # session deleted and purged (a later post creates the id again)
    st.sampled_from(SESSIONS),
    st.lists(st.tuples(st.sampled_from(PEERS), content), min_size=1, max_size=3),
    st.sampled_from(["", "merge", "merge", "compact", "delete"]),
)
queries = st.lists(
    st.lists(
        st.sampled_from(COMMON + RARE + STOP + ["user", "assistant", "alice", "unheard"]), min_size=1, max_size=4
    ).map(" ".join),
    min_size=1,
    max_size=2,
)
_WORKSPACES = itertools.count()
M = [("user", "greyhound coffee"), ("alice", "coffee coffee tram"), ("assistant", "the greyhound budget")]


class Model:
    """What the test sent: each session's live messages (with its incarnation) and those of deleted incarnations."""

    def __init__(self, db: Db, ws: str) -> None:
        self.db, self.ws = db, ws
        self.live: dict[str, list[Msg]] = {}
        self.dead: list[Msg] = []
        self.gone: set[str] = set()

    def post(self, session: str, batch: list[tuple[str, str]]) -> None:
        if session in self.gone:  # purged: the id is free again
            assert call("POST", f"/v3/workspaces/{self.ws}/sessions", {"id": session}).status == 201
            self.gone.discard(session)
        views = post(session, *batch, workspace=self.ws)
        incarnation = incarnation_of(self.db, session, self.ws)
        self.live.setdefault(session, []).extend(
            Msg(session, v["seq"], v["peer_id"], v["content"], incarnation) for v in views
        )

    def delete(self, session: str) -> None:
        if session in self.live:
            delete_session(self.db, session, self.ws)
            self.dead += self.live.pop(session)
            self.gone.add(session)

    @property
    def messages(self) -> list[Msg]:
        return [m for batch in self.live.values() for m in batch]


@given(steps=st.lists(step, min_size=4, max_size=14), asked=queries, k=st.integers(1, 6))
@example(  # four segments compacted into one, a session of it deleted (its purge rewrites it), the id created again
    steps=[
        ("s1", M, "merge"),
        ("s2", M[1:], "merge"),
        ("s9", M[:2], "merge"),
        ("s1", M[::-1], "merge"),
        ("s1", M[:1], "delete"),
        ("s1", M[1:], "merge"),
        ("s2", M[:1], ""),
    ],
    asked=["greyhound coffee", "tram alice"],
    k=3,
)
@settings(
    max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
def test_every_scope_ranks_exactly_the_brute_force_whatever_is_fresh_merged_compacted_or_deleted(ws, steps, asked, k):
    """Posts in units, shards merged into segments however few they hold, compactions, sessions deleted (and purged)
    and created again, in any order: after each step every live message is counted once and no deleted one is in the
    index at all (its purge rewrote the segments that held it); each scope ranks as the brute force over the live
    messages, with their statistics alone. No segment's items are left behind, none is noted as being written or
    replaced."""
    name = f"x{next(_WORKSPACES)}"
    assert call("POST", "/v3/workspaces", {"id": name}).status == 201
    model = Model(ws, name)
    for session, batch, then in steps:
        model.post(session, batch)
        if then == "merge":
            text_index.merge_shard(ws, name, text_index.shard_of(session), min_docs=1)
        elif then == "compact":
            text_index.compact(ws, name)
        elif then == "delete":
            model.delete(session)
        counted_once(ws, name, model.messages)  # (no dead message anywhere)
        assert_ranks(
            text_index.rank_workspace(ws, name, asked[0], k),
            bm25(model.messages, asked[0]),
            k,
            (session, then, asked[0]),
        )
    for query in asked:
        assert_every_scope_exact(ws, name, model.messages, model.messages, query, k)
    assert segment_partitions(ws, name) == {s["id"] for s in live_segments(ws, name)}  # no segment left behind
    assert noted(ws, name, "tmp") == noted(ws, name, "old") == set()


def test_the_example_rewrites_the_compacted_segment_without_the_deleted_session(ws):
    """(The property's example reaches what it is there for: the deleted session's messages, compacted with two other
    sessions' into one segment, leave it with the session's purge, which rewrites it at its level; the id's new
    incarnation is merged beside it; the statistics are the live messages' alone all along.)"""
    model = Model(ws, "ws1")
    for session, batch in (("s1", M), ("s2", M[1:]), ("s9", M[:2]), ("s1", M[::-1])):
        model.post(session, batch)
        text_index.merge_shard(ws, "ws1", text_index.shard_of(session), min_docs=1)
    (compacted,) = live_segments(ws, "ws1")
    assert compacted["lv"] == 1 and compacted["n"] == 10
    model.post("s1", M[:1])
    model.delete("s1")
    (rewritten,) = live_segments(ws, "ws1")
    assert rewritten["lv"] == 1 and rewritten["n"] == 4 and rewritten["id"] != compacted["id"]
    assert {row[0] for row in segment_rows(ws, "ws1")} == {"s2", "s9"}
    counted_once(ws, "ws1", model.messages)
    for query in ("greyhound coffee", "tram alice"):
        assert_every_scope_exact(ws, "ws1", model.messages, model.messages, query, 3)
    model.post("s1", M[1:])
    text_index.merge_shard(ws, "ws1", text_index.shard_of("s1"), min_docs=1)
    assert sorted(s["lv"] for s in live_segments(ws, "ws1")) == [0, 1]
    counted_once(ws, "ws1", model.messages)
    for query in ("greyhound coffee", "tram alice"):
        assert_every_scope_exact(ws, "ws1", model.messages, model.messages, query, 3)
    assert segment_partitions(ws, "ws1") == {s["id"] for s in live_segments(ws, "ws1")}
    assert noted(ws, "ws1", "tmp") == noted(ws, "ws1", "old") == set()


def test_identical_texts_tie_in_key_order_fresh_or_merged(ws):
    """Equal scores are ordered by (session, seq) whether the texts are fresh, in one segment or in two."""
    post("s1", *[("user", "coffee and lisbon")] * 3)
    post("s2", *[("user", "coffee and lisbon")] * 2)
    for merged in ((), ("s1",), ("s2",)):
        for session in merged:
            text_index.merge_shard(ws, "ws1", text_index.shard_of(session), min_docs=1)
        hits = text_index.rank_workspace(ws, "ws1", "lisbon coffee", 10)
        assert [key for key, _ in hits] == [("s1", 1), ("s1", 2), ("s1", 3), ("s2", 1), ("s2", 2)], merged


# ---------------------------------------------------------------- very long postings lists


def item_bytes(item: dict) -> int:
    """An item's size as DynamoDB counts it (names, strings, binaries, numbers ~ their digits)."""
    size = 0
    for name, value in item.items():
        ((kind, v),) = value.items()
        size += len(name.encode()) + (len(v.encode()) if kind == "S" else len(v) if kind == "B" else len(v) // 2 + 2)
    return size


def test_a_word_common_to_tens_of_thousands_of_texts_is_chunked_and_still_ranks_exactly(ws):
    """A segment of 24,000 messages, all saying "coffee": its postings list is split into `W…` chunks (best postings
    first), every item fits DynamoDB's 400 KB, the segment's items give back exactly its docs, and searches over it
    (with fresh messages beside it) rank exactly as the brute force."""
    sessions = ["s1", "s2", "s3"]
    for session in sessions:
        post(session, ("user", "hello"))  # (the sessions, and a fresh message each)
    incarnations = {s: incarnation_of(ws, s) for s in sessions}
    corpus = [Msg(s, 1, "user", "hello", incarnations[s]) for s in sessions]
    docs = []
    for number in range(24_000):
        session, seq = sessions[number % 3], 2 + number // 3
        peer = PEERS[(number * 7) % 3]
        words = ["coffee"] * (1 + number % 11) + [RARE[(number * 7) % len(RARE)]] * (number % 3) + ["w" + str(number)]
        m = Msg(session, seq, peer, " ".join(words), incarnations[session])
        corpus.append(m)
        docs.append(text_index.Doc(session, seq, m.incarnation, peer, Document.of(m.content, speaker=peer)))
    segment = text_index.Segment.of(docs, 0)
    entry, items = segment.build("ws1")
    (coffee,) = terms("coffee")
    chunks = sorted(from_item(i)["SK"] for i in items if from_item(i)["SK"].startswith("W"))
    assert chunks == [f"W{coffee}#0000", f"W{coffee}#0001"]  # (24,000 postings: two chunks)
    assert max(map(item_bytes, items)) < ITEM_MAX_BYTES
    assert text_index.segments.segment_docs(map(from_item, items)) == list(segment.docs)  # the round trip
    first_chunk = unpack(next(from_item(i)["z"] for i in items if from_item(i)["SK"] == f"W{coffee}#0000"))
    counts = [first_chunk[i + 1] for i in range(0, len(first_chunk), 4)]
    assert counts == sorted(counts, reverse=True) and counts[0] == 11  # the best postings first

    for start in range(0, len(items), 25):
        ws.client.batch_write_item(RequestItems={ws.table: [{"PutRequest": {"Item": i}} for i in items[start:][:25]]})
    assert text_index.manifest.commit(ws, "ws1", text_index.read_manifest(ws, "ws1"), [entry], (), ())
    for query, k in (("coffee", 10), ("coffee coffee lisbon", 25), ("budget coffee", 3), ("alice coffee", 40)):
        budget = text_index.Budget()
        assert_ranks(text_index.rank_workspace(ws, "ws1", query, k, budget=budget), bm25(corpus, query), k, query)
        assert not budget.exhausted, query
        for peer in ("alice", "user"):
            assert_ranks(
                text_index.rank_workspace(ws, "ws1", query, k, peer=peer),
                bm25([m for m in corpus if m.peer == peer], query),
                k,
                (query, peer),
            )


def test_a_segment_of_thirty_thousand_sessions_fits_its_items_and_a_purge_finds_each_in_one_part(ws):
    """A segment of 30,000 messages from as many sessions (ids of 40 characters: 1.3 MB of them) keeps every item
    under DynamoDB's 400 KB and its header, which every peer search reads, to a few KB: the ids are in parts, the
    header names each part's first. A purge's look for a session reads the headers and the one part that could hold
    it: each session of the segment is found, no other id is."""
    ids = sorted(f"{n:06d}-" + zlib.crc32(str(n).encode()).to_bytes(4).hex() * 4 + "x" for n in range(30_000))
    docs = [text_index.Doc(s, 1, "i", "user", Document.of(f"coffee {s[:6]}", speaker="user")) for s in ids]
    entry, items = text_index.Segment.of(docs, 4).build("ws1")
    assert max(map(item_bytes, items)) < ITEM_MAX_BYTES
    (head,) = [i for i in items if i["SK"]["S"] == "H"]
    assert item_bytes(head) < 4_000
    parts = sorted((i for i in items if i["SK"]["S"].startswith("S")), key=lambda i: i["SK"]["S"])
    lists = [unpack(from_item(i)["z"]) for i in parts]
    assert len(lists) > 30 and [x for part in lists for x in part] == ids
    for start in range(0, len(items), 25):
        ws.client.batch_write_item(RequestItems={ws.table: [{"PutRequest": {"Item": i}} for i in items[start:][:25]]})
    assert text_index.manifest.commit(ws, "ws1", text_index.read_manifest(ws, "ws1"), [entry], (), ())
    manifest = text_index.read_manifest(ws, "ws1")
    edges = [part[0] for part in lists] + [part[-1] for part in lists]
    for session in sorted({*edges, *ids[::997]}):
        with dynamodb_requests() as seen:
            assert text_index.merging._holding(ws, "ws1", manifest, session) == {entry["id"]}, session
        assert [op for op, _ in seen] == ["BatchGetItem", "BatchGetItem"]
        assert [len(wanted["Keys"]) for wanted in seen[1][1]["RequestItems"].values()] == [1]  # one part
    for other in ("0", "~", ids[0][:-1], ids[4_000] + "0", ids[-1] + "0"):
        assert text_index.merging._holding(ws, "ws1", manifest, other) == set(), other


# ---------------------------------------------------------------- read-your-writes, through the routes

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
    """No deriver run, no merge: each search right after a post ranks exactly as the brute force ranks everything
    posted so far."""
    sent: list[Msg] = []
    for session, batch in CONVERSATION:
        views = post(session, *batch)
        sent += [Msg(session, v["seq"], v["peer_id"], v["content"]) for v in views]
        ids = {(m.session, m.seq): x["id"] for m in sent for x in stored(ws, m.session) if x["seq"] == m.seq}
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


def test_a_post_writes_one_fresh_item_and_a_text_a_message_whatever_its_words(ws):
    """100 messages sharing 1,000 words (100,100 postings in a posting-per-word index) are indexed by their post in
    100 texts and a fresh item or two (their 700 KB of terms packed, 300 KB of JSON an item): their own bytes, not an
    item per word."""
    shared = " ".join(f"w{i}x" for i in range(1000))
    with dynamodb_requests() as seen:
        body = post("s1", *(("user", f"{shared} kayak{m}q") for m in range(100)))
    assert [m["seq"] for m in body] == list(range(1, 101))
    index_puts = Counter(
        r["PutRequest"]["Item"]["kind"]["S"]
        for operation, params in seen
        if operation == "BatchWriteItem"
        for rs in params["RequestItems"].values()
        for r in rs
        if r["PutRequest"]["Item"].get("kind", {}).get("S") in ("xdoc", "xfresh")
    )
    assert index_puts["xdoc"] == 100 and 1 <= index_puts["xfresh"] <= 3, index_puts
    fresh = [
        i
        for n in range(text_index.FRESH_SHARDS)
        for i in ws.client.query(
            TableName=ws.table,
            KeyConditionExpression="PK = :p",
            ExpressionAttributeValues={":p": {"S": keys.text_fresh_pk("ws1", n)}},
        )["Items"]
    ]
    assert len(fresh) == index_puts["xfresh"] and max(map(item_bytes, fresh)) < ITEM_MAX_BYTES
    assert [m["seq"] for m in search(f"{W}/search", "kayak7q")] == [8]
    counted_once(ws, "ws1", corpus_of(ws, "s1"))


# ---------------------------------------------------------------- 2. exactly once


def test_the_same_unit_indexed_again_changes_nothing(ws):
    post("s1", ("user", "hello"))
    unit = [
        text_index.Text(seq, peer, text)
        for seq, (peer, text) in enumerate(
            [("user", "coffee coffee at noon"), ("alice", "the budget, again"), ("user", "coffee")], 2
        )
    ]
    incarnation = incarnation_of(ws, "s1")
    assert text_index.index_texts(ws, "ws1", "s1", "s1:2:ab", unit, incarnation=incarnation) == 3
    before = index_snapshot(ws, "ws1", "s1")
    assert text_index.index_texts(ws, "ws1", "s1", "s1:2:ab", unit, incarnation=incarnation) == 0
    assert text_index.index_texts(ws, "ws1", "s1", "s1:2:ab", unit[1:]) == 0
    assert index_snapshot(ws, "ws1", "s1") == before
    merge_all(ws)
    merged = index_snapshot(ws, "ws1", "s1")
    assert text_index.index_texts(ws, "ws1", "s1", "s1:2:ab", unit, incarnation=incarnation) == 0  # merged: still
    assert index_snapshot(ws, "ws1", "s1") == merged
    counted_once(
        ws, "ws1", [*corpus_of(ws, "s1")[:1], *(Msg("s1", t.seq, t.peer, t.content, incarnation) for t in unit)]
    )


def test_a_unit_whose_texts_were_written_in_part_is_finished_and_counted_once(ws):
    post("s1", ("user", "hello"))
    incarnation = incarnation_of(ws, "s1")
    unit = [
        text_index.Text(seq, "user" if seq % 3 else "alice", f"coffee number {seq} " + "tea " * (seq % 10))
        for seq in range(2, 62)
    ]  # three BatchWriteItems of texts

    def last_chunk(params: dict) -> bool:
        return is_text_put(params) and any(
            r["PutRequest"]["Item"]["seq"] == {"N": "61"} for rs in params["RequestItems"].values() for r in rs
        )

    with refused(ws, "BatchWriteItem", last_chunk) as refusals, pytest.raises(ClientError):
        text_index.index_texts(ws, "ws1", "s1", "s1:2:ab", unit, incarnation=incarnation)
    died()
    written = len(texts(ws, "ws1", "s1")) - 1
    assert refusals and 0 < written < 60  # interrupted among its texts
    assert text_index.index_texts(ws, "ws1", "s1", "s1:2:ab", unit, incarnation=incarnation) == 60 - written
    corpus = [*corpus_of(ws, "s1")[:1], *(Msg("s1", t.seq, t.peer, t.content, incarnation) for t in unit)]
    counted_once(ws, "ws1", corpus)
    merge_all(ws)
    counted_once(ws, "ws1", corpus)
    assert_ranks(text_index.rank_workspace(ws, "ws1", "tea coffee", 10), bm25(corpus, "tea coffee"), 10)


def test_delivering_the_stream_batch_again_merges_nothing_twice(ws):
    """The deriver merges a shard once it holds MERGE_MIN_DOCS messages; the same stream batch delivered again finds
    nothing to merge, and every message is counted once."""
    post("s1", *(("user" if m % 2 else "alice", f"coffee note {m} lisbon" * (1 + m % 3)) for m in range(60)))
    derive(ws, "s1")
    assert live_segments(ws, "ws1") == [] and len(fresh_rows(ws, "ws1")) == 60  # too few to merge
    post("s1", *(("user", f"tea note {m}") for m in range(50)))
    derive(ws, "s1")
    assert [s["n"] for s in live_segments(ws, "ws1")] == [110] and fresh_rows(ws, "ws1") == []
    merged = index_snapshot(ws, "ws1", "s1")
    derive(ws, "s1")  # the stream delivers the batch again
    assert index_snapshot(ws, "ws1", "s1") == merged
    corpus = corpus_of(ws, "s1")
    counted_once(ws, "ws1", corpus)
    assert_ranks(text_index.rank_workspace(ws, "ws1", "lisbon note", 10), bm25(corpus, "lisbon note"), 10)


def shard_of_s1() -> int:
    return text_index.shard_of("s1")


@pytest.mark.parametrize("where", ["before its transaction", "between its manifest and its fresh reads"])
def test_two_merges_of_one_shard_count_every_message_once(ws, where):
    """A merge that read the manifest before another merge of the same shard committed (a stale manifest) loses its
    transaction, takes its segment back and tries again from the new manifest: every message is counted once, and no
    segment item is left behind."""
    post("s1", *M)
    post("s1", ("user", "a second unit, greyhound"))
    merged: list[int] = []

    def other() -> None:
        merged.append(text_index.merge_shard(ws, "ws1", shard_of_s1(), min_docs=1))
        post("s1", ("alice", "posted after the other merge: greyhound tram"))

    if where == "before its transaction":
        seam = first(ws, "TransactWriteItems", is_merge, other)
    else:
        seam = first(ws, "Query", lambda p: keys.text_fresh_pk("ws1", shard_of_s1()) in json.dumps(p), other)
    with seam as seen:
        mine = text_index.merge_shard(ws, "ws1", shard_of_s1(), min_docs=1)
    assert seen and merged == [4] and mine == 1  # the other took the first two units, this one the last
    corpus = corpus_of(ws, "s1")
    counted_once(ws, "ws1", corpus)
    assert fresh_rows(ws, "ws1") == [] and len(live_segments(ws, "ws1")) == 2
    assert segment_partitions(ws, "ws1") == {s["id"] for s in live_segments(ws, "ws1")}
    assert_ranks(text_index.rank_workspace(ws, "ws1", "greyhound tram", 10), bm25(corpus, "greyhound tram"), 10)


def test_a_merge_that_dies_before_its_transaction_changes_nothing_and_the_next_completes_it(ws):
    """A merge whose invocation ends after writing its segment's items, before the transaction that makes it live:
    every search answers as before, the units stay fresh, and the next merge takes them, counting each once. The dead
    attempt's segment is noted in the manifest as being written, and deleted by the first compaction that runs once no
    writer can still be at it."""
    post("s1", *M)
    post("s2", ("alice", "budget coffee"))
    before = {q: text_index.rank_workspace(ws, "ws1", q, 10) for q in ("greyhound coffee", "budget")}
    with refused(ws, "TransactWriteItems", is_merge), pytest.raises(ClientError):
        text_index.merge_shard(ws, "ws1", shard_of_s1(), min_docs=1)
    died()
    assert {q: text_index.rank_workspace(ws, "ws1", q, 10) for q in before} == before
    assert live_segments(ws, "ws1") == [] and len(fresh_rows(ws, "ws1")) == 4
    assert text_index.merge_shard(ws, "ws1", shard_of_s1(), min_docs=1) == 3
    corpus = corpus_of(ws, "s1", "s2")
    counted_once(ws, "ws1", corpus)
    live = {s["id"] for s in live_segments(ws, "ws1")}
    (dead,) = segment_partitions(ws, "ws1") - live
    assert noted(ws, "ws1", "tmp") == {dead}  # (the next merge's compaction: too early to tell it from a slow writer)
    text_index.compact(ws, "ws1", now=stale_clock)
    assert segment_partitions(ws, "ws1") == live and noted(ws, "ws1", "tmp") == set()
    for query in before:
        assert_ranks(text_index.rank_workspace(ws, "ws1", query, 10), bm25(corpus, query), 10, query)


def four_segments(db: Db) -> None:
    """Three level-0 segments of s1, s2, s3, and a fresh unit of s4 whose merge makes the fourth (and compacts)."""
    for session, batch in (("s1", M), ("s2", M[1:]), ("s3", M[:1])):
        post(session, *batch)
        text_index.merge_shard(db, "ws1", text_index.shard_of(session), min_docs=1)
    assert len(live_segments(db, "ws1")) == 3
    post("s4", ("alice", "the fourth greyhound"))


def test_a_compaction_that_loses_to_a_merge_leaves_every_message_counted_once(ws):
    four_segments(ws)
    other: list[int] = []

    def meanwhile() -> None:  # another shard's merge (and its own compaction) commits first
        post("s5", ("user", "coffee, greyhound"))
        other.append(text_index.merge_shard(ws, "ws1", text_index.shard_of("s5"), min_docs=1))

    with first(ws, "TransactWriteItems", lambda p: not is_merge(p), meanwhile) as seen:
        assert text_index.merge_shard(ws, "ws1", text_index.shard_of("s4"), min_docs=1) == 1
    assert seen and other == [1]
    corpus = corpus_of(ws, "s1", "s2", "s3", "s4", "s5")
    counted_once(ws, "ws1", corpus)
    assert sorted(s["lv"] for s in live_segments(ws, "ws1")) == [0, 1]
    assert segment_partitions(ws, "ws1") == {s["id"] for s in live_segments(ws, "ws1")}
    assert_ranks(text_index.rank_workspace(ws, "ws1", "greyhound coffee", 10), bm25(corpus, "greyhound coffee"), 10)


@pytest.mark.parametrize("dies", ["before its transaction", "before deleting what it replaced"])
def test_a_compaction_that_dies_changes_no_search_and_leaves_nothing_behind_once_the_next_runs(ws, dies):
    four_segments(ws)
    if dies == "before its transaction":
        refusal = refused(ws, "TransactWriteItems", lambda p: not is_merge(p))
    else:  # its transaction committed; the deletes of the four segments it merged fail
        refusal = refused(ws, "BatchWriteItem", lambda p: "DeleteRequest" in repr(p))
    with refusal as refusals, pytest.raises(ClientError):
        text_index.merge_shard(ws, "ws1", text_index.shard_of("s4"), min_docs=1)
    died()
    assert refusals
    corpus = corpus_of(ws, "s1", "s2", "s3", "s4")
    counted_once(ws, "ws1", corpus)
    assert_ranks(text_index.rank_workspace(ws, "ws1", "greyhound coffee", 10), bm25(corpus, "greyhound coffee"), 10)
    post("s5", ("user", "coffee, greyhound"))
    # The next merge (and its compaction); a segment being written is deleted only once no writer can be at it, one
    # replaced at once.
    now = stale_clock if dies == "before its transaction" else time.time
    text_index.merge_shard(ws, "ws1", text_index.shard_of("s5"), min_docs=1, now=now)
    corpus += corpus_of(ws, "s5")
    counted_once(ws, "ws1", corpus)
    assert segment_partitions(ws, "ws1") == {s["id"] for s in live_segments(ws, "ws1")}
    assert noted(ws, "ws1", "tmp") == noted(ws, "ws1", "old") == set()
    assert_ranks(text_index.rank_workspace(ws, "ws1", "greyhound coffee", 10), bm25(corpus, "greyhound coffee"), 10)


def test_a_compaction_leaves_alone_a_segment_another_merge_is_still_writing(ws):
    """A compaction (its sweep of dead writers' segments) running while a merge has written its segment's items but
    not yet committed: the merge's segment is left whole, and made live."""
    post("s1", *M)
    with first(ws, "TransactWriteItems", is_merge, lambda: text_index.compact(ws, "ws1")) as seen:
        assert text_index.merge_shard(ws, "ws1", shard_of_s1(), min_docs=1) == 3
    assert seen
    corpus = corpus_of(ws, "s1")
    counted_once(ws, "ws1", corpus)
    assert_ranks(text_index.rank_workspace(ws, "ws1", "greyhound coffee", 10), bm25(corpus, "greyhound coffee"), 10)


def test_a_repair_that_read_the_texts_missing_before_a_merge_took_the_unit_counts_it_once(ws):
    """A request dies between its unit's fresh item and its texts. The deriver's repair finds the texts missing; a
    merge of the shard (another session's stream batch) takes the fresh unit meanwhile; the repair then writes the
    unit again: it must not be counted twice."""
    post("s2", ("alice", "coffee elsewhere"))
    with refused(ws, "BatchWriteItem", is_text_put):
        post("s1", *M)
    messages = stored(ws)
    incarnation = incarnation_of(ws, "s1")
    with first(
        ws,
        "BatchWriteItem",
        lambda p: puts_of(p, "xfresh"),
        lambda: text_index.merge_shard(ws, "ws1", shard_of_s1(), min_docs=1),
    ) as seen:
        message_search.ensure_indexed(ws, "ws1", "s1", messages, now=lambda: messages[0]["ibu"] + 1, sleep=never_sleep)
    assert seen
    merge_all(ws)
    corpus = corpus_of(ws, "s1", "s2")
    assert {m.incarnation for m in corpus if m.session == "s1"} == {incarnation}
    counted_once(ws, "ws1", corpus)
    assert_ranks(text_index.rank_workspace(ws, "ws1", "greyhound coffee", 10), bm25(corpus, "greyhound coffee"), 10)


# ---------------------------------------------------------------- 3. deletes, purges and their races


@pytest.mark.parametrize("merged", [True, False], ids=["merged before the delete", "fresh at the delete"])
def test_deleting_a_session_takes_out_exactly_its_messages(ws, merged):
    """Deleted, its messages are never found; purged, they are nowhere in the index (merged, the segment it shares
    with s16 is rewritten without them), and every scope ranks as the brute force over the rest, with their
    statistics alone. The purge's record and the session's inserts delivered again change nothing."""
    post("s1", ("user", "coffee with alice tomorrow"), ("alice", "coffee coffee coffee, or tea?"))
    post("s1", ("user", "greyhound " * 12 + "tomorrow"))
    post("s2", ("alice", "tomorrow the budget, and coffee"), ("user", "tea"))
    post("s3", ("assistant", "the greyhound again"))
    post("s16", ("user", "greyhound coffee, tomorrow"))  # (s1's fresh shard: merged, in s1's segment)
    sessions = ("s1", "s2", "s3", "s16")
    inserts = {s: message_records(ws.client, session_id=s) for s in sessions}
    if merged:
        merge_all(ws)
        assert {row[0] for row in segment_rows(ws, "ws1")} == set(sessions)
    remaining = corpus_of(ws, "s2", "s3", "s16")
    assert call("DELETE", f"{W}/sessions/s1").status == 202
    for query in ("coffee", "greyhound tomorrow"):  # deleted, not yet purged: never found
        assert "s1" not in {key[0] for key, _ in text_index.rank_workspace(ws, "ws1", query, 10)}
    item = ws.client.get_item(
        TableName=ws.table, Key={"PK": {"S": "WS#ws1"}, "SK": {"S": "SESSION#s1"}}, ConsistentRead=True
    )["Item"]
    record = stream_record(item, "MODIFY")
    assert invoke("SummarizeFunction", {"Records": [record]}) == {"batchItemFailures": []}

    counted_once(ws, "ws1", remaining)  # (no message of s1 anywhere: fresh, merged or text)
    assert texts(ws, "ws1", "s1") == {}
    assert {row[0] for row in segment_rows(ws, "ws1")} == ({"s2", "s3", "s16"} if merged else set())
    assert segment_partitions(ws, "ws1") == {s["id"] for s in live_segments(ws, "ws1")}
    assert noted(ws, "ws1", "tmp") == noted(ws, "ws1", "old") == set()
    for query in ("coffee", "greyhound tomorrow", "alice"):
        assert_every_scope_exact(ws, "ws1", remaining, remaining, query, 10)
    purged = index_snapshot(ws, "ws1", *sessions)
    assert invoke("SummarizeFunction", {"Records": [record]}) == {"batchItemFailures": []}  # delivered again
    for session in sessions:  # the inserts reach the deriver after the delete
        assert invoke("DeriveFunction", {"Records": inserts[session]}) == {"batchItemFailures": []}
    assert index_snapshot(ws, "ws1", *sessions) == purged


def header(db: Db, ws: str, segment: str) -> dict:
    item = db.client.get_item(
        TableName=db.table, Key=to_item({"PK": keys.text_segment_pk(ws, segment), "SK": "H"}), ConsistentRead=True
    )["Item"]
    return unpack(from_item(item)["z"])


def test_a_sessions_purge_rewrites_each_segment_holding_it_at_its_level_and_drops_those_it_alone_filled(ws):
    """Three sessions deleted, each with messages in a different kind of segment: a compacted one (level 1) shared
    with others, a level-0 one shared with s5, a level-0 one of its own. Once purged, the first two are rewritten at
    their level without them (sizes, lengths and header the live messages' own), the third is gone, nothing else
    changed; no item of a replaced segment is left."""
    four_segments(ws)
    text_index.merge_shard(ws, "ws1", text_index.shard_of("s4"), min_docs=1)  # the fourth: compacted with the others
    post("s5", *M)
    post("s12", ("alice", "the budget tram"), ("user", "greyhound"))  # (s5's fresh shard)
    post("s8", ("user", "coffee coffee tram"))
    for session in ("s5", "s8"):
        text_index.merge_shard(ws, "ws1", text_index.shard_of(session), min_docs=1)
    before = {s["id"]: s for s in live_segments(ws, "ws1")}
    assert sorted(s["lv"] for s in before.values()) == [0, 0, 1]
    for session in ("s2", "s12", "s8"):
        delete_session(ws, session)
    remaining = corpus_of(ws, "s1", "s3", "s4", "s5")
    counted_once(ws, "ws1", remaining)
    after = live_segments(ws, "ws1")
    assert not {s["id"] for s in after} & set(before)  # (the two rewritten are new segments)
    by_level = {s["lv"]: s for s in after}
    assert sorted(by_level) == [0, 1]
    for level, sessions in ((1, {"s1", "s3", "s4"}), (0, {"s5"})):
        mine = [m for m in remaining if m.session in sessions]
        segment = by_level[level]
        assert (segment["n"], segment["len"]) == (len(mine), sum(sum(m.bag().values()) for m in mine))
        lists = [unpack(i["z"]) for i in partition(ws, keys.text_segment_pk("ws1", segment["id"])) if i["SK"][0] == "S"]
        assert lists == [sorted(sessions)] and header(ws, "ws1", segment["id"])["sf"] == [min(sessions)]
        peers = sorted({m.peer for m in mine})
        assert header(ws, "ws1", segment["id"])["p"] == peers
        assert header(ws, "ws1", segment["id"])["s"] == [
            [sum(1 for m in mine if m.peer == p), sum(sum(m.bag().values()) for m in mine if m.peer == p)]
            for p in peers
        ]
    assert segment_partitions(ws, "ws1") == {s["id"] for s in after}
    assert noted(ws, "ws1", "tmp") == noted(ws, "ws1", "old") == set()
    for query in ("greyhound coffee", "tram", "alice budget"):
        assert_every_scope_exact(ws, "ws1", remaining, remaining, query, 10)


def test_after_a_purge_every_score_is_the_brute_force_over_the_live_messages_alone(ws):
    """s1's messages merged into segments it shares with others (a compacted one with s2, s3, s4 and s16, a level-0
    one with s16); s1 deleted and purged: every scope's scores are the brute force's over the live messages with their
    statistics alone (N, lengths, document frequencies), which differ from those still counting s1's."""
    post("s1", *(("user" if m % 3 else "alice", "coffee " * (1 + m % 4) + f"greyhound n{m}") for m in range(12)))
    post("s16", ("alice", "tram budget"), ("user", "a long coffee " + "and the rest " * 8))
    text_index.merge_shard(ws, "ws1", text_index.shard_of("s1"), min_docs=1)
    for session, batch in (("s2", M), ("s3", M[1:]), ("s4", M[:2])):
        post(session, *batch)
        text_index.merge_shard(ws, "ws1", text_index.shard_of(session), min_docs=1)
    post("s1", ("assistant", "greyhound tram"), ("user", "coffee"))
    post("s16", ("user", "greyhound"))
    text_index.merge_shard(ws, "ws1", text_index.shard_of("s1"), min_docs=1)
    assert sorted(s["lv"] for s in live_segments(ws, "ws1")) == [0, 1]
    assert {row[0] for row in segment_rows(ws, "ws1")} == {"s1", "s2", "s3", "s4", "s16"}
    dead = corpus_of(ws, "s1")
    delete_session(ws, "s1")
    remaining = corpus_of(ws, "s2", "s3", "s4", "s16")
    assert {row[0] for row in segment_rows(ws, "ws1")} == {"s2", "s3", "s4", "s16"}
    for query in ("coffee", "greyhound tram", "alice budget coffee", "user greyhound"):
        exact = bm25(remaining, query)
        assert [s for _, s in exact] != pytest.approx(
            [s for _, s in bm25(remaining, query, None, remaining + dead)], rel=1e-9
        )  # (s1's statistics would change the scores)
        assert_every_scope_exact(ws, "ws1", remaining, remaining, query, 10)


def test_a_recreated_session_id_finds_its_new_messages_and_not_the_old(ws):
    post("s1", ("user", "I adopted a greyhound"), ("alice", "a greyhound, lovely"))
    merge_all(ws)
    post("s1", ("user", "and the greyhound sleeps"))  # fresh at the delete
    delete_session(ws, "s1")
    assert call("POST", f"{W}/sessions", {"id": "s1"}).status == 201
    views = post("s1", ("user", "greyhound"), ("assistant", "a cat this time"))
    assert [v["seq"] for v in views] == [1, 2]  # the same keys as the deleted incarnation's
    corpus = corpus_of(ws, "s1")
    for path in (f"{W}/search", f"{W}/sessions/s1/search", f"{W}/peers/user/search"):
        assert [m["id"] for m in search(path, "greyhound")] == [views[0]["id"]], path
    assert [key for key, _ in text_index.rank_workspace(ws, "ws1", "lovely", 10)] == []
    merge_all(ws)
    assert [m["id"] for m in search(f"{W}/search", "greyhound")] == [views[0]["id"]]
    assert texts(ws, "ws1", "s1").keys() == {1, 2}
    counted_once(ws, "ws1", corpus)  # (the old incarnation's merged messages left their segment with the purge)
    assert set(segment_rows(ws, "ws1")) == {m.row for m in corpus}


@pytest.mark.parametrize("lands", ["after the delete", "after the purge", "after the id is created again"])
def test_an_index_write_landing_after_its_sessions_delete_leaves_nothing(ws, lands):
    """A request (or a repair) whose index writes land after its session's delete (the purge comes after them), or
    after its purge, or once the id was created again: it takes back what it wrote, and the id's new messages are
    found."""
    post("s1", ("user", "coffee"))
    old = incarnation_of(ws, "s1")
    late = [text_index.Text(2, "user", "the late greyhound"), text_index.Text(3, "alice", "a late tram")]

    def purge() -> None:
        item = ws.client.get_item(
            TableName=ws.table, Key={"PK": {"S": "WS#ws1"}, "SK": {"S": "SESSION#s1"}}, ConsistentRead=True
        )["Item"]
        assert invoke("SummarizeFunction", {"Records": [stream_record(item, "MODIFY")]}) == {"batchItemFailures": []}

    def meanwhile() -> None:
        assert call("DELETE", f"{W}/sessions/s1").status == 202
        if lands != "after the delete":
            purge()
        if lands == "after the id is created again":
            assert call("POST", f"{W}/sessions", {"id": "s1"}).status == 201

    # The delete (and purge) come between the unit's first index write and the check that follows its writes.
    with first(ws, "BatchWriteItem", lambda p: puts_of(p, "xfresh") and f"s1:2:{old}" in repr(p), meanwhile) as seen:
        assert text_index.index_texts(ws, "ws1", "s1", f"s1:2:{old}", late, incarnation=old) == 0
    assert seen
    if lands == "after the delete":
        purge()
    counted_once(ws, "ws1", [])
    assert texts(ws, "ws1", "s1") == {} and text_index.rank_workspace(ws, "ws1", "late", 10) == []
    if lands == "after the id is created again":
        views = post("s1", ("alice", "new coffee"), ("user", "new tea"), ("user", "new greyhound"))
        counted_once(ws, "ws1", corpus_of(ws, "s1"))
        for path in (f"{W}/search", f"{W}/sessions/s1/search"):
            assert [m["id"] for m in search(path, "greyhound")] == [views[2]["id"]]


def test_a_merge_racing_a_sessions_purge_leaves_no_text_of_it(ws):
    """A unit whose request died before its texts, merged while its session is deleted and purged: no text of the
    deleted session outlives the purge (one would hold its seq against the id's next incarnation)."""
    with refused(ws, "BatchWriteItem", is_text_put):
        post("s1", *M)
    post("s2", ("alice", "coffee"))

    def meanwhile() -> None:
        delete_session(ws, "s1")

    # (between the merge's read of the session, live, and its look for the unit's texts)
    with first(ws, "Query", lambda p: keys.text_docs_pk("ws1", "s1") in json.dumps(p), meanwhile) as seen:
        merge_all(ws)
    assert seen
    counted_once(ws, "ws1", corpus_of(ws, "s2"))
    assert texts(ws, "ws1", "s1") == {}
    assert call("POST", f"{W}/sessions", {"id": "s1"}).status == 201
    views = post("s1", ("user", "a greyhound again"))
    assert [m["id"] for m in search(f"{W}/search", "greyhound")] == [views[0]["id"]]
    counted_once(ws, "ws1", corpus_of(ws, "s1", "s2"))


def is_note(name: str, action: str) -> Callable[[dict], bool]:
    """An UpdateItem of the manifest's set `name` ("tmp", "old") by `action` ("ADD", "DELETE")."""
    return lambda p: (
        p.get("UpdateExpression", "").startswith(action) and name in p.get("ExpressionAttributeNames", {}).values()
    )


def test_a_compaction_between_two_rewrites_of_a_purge_counts_nothing_twice(ws):
    """Two segments hold s1's messages with s16's. The purge rewrites the first; before it reads the manifest again, a
    merge's compaction replaces the second (with two others) and dies before deleting their items. The purge must not
    rewrite the second from its items still there: its live messages are in the compaction's segment already."""
    for i in range(2):
        post("s1", ("user", f"greyhound {i}"), ("alice", "coffee"))
        post("s16", ("alice", f"tram {i} coffee"))
        text_index.merge_shard(ws, "ws1", text_index.shard_of("s1"), min_docs=1)
    post("s2", *M)
    text_index.merge_shard(ws, "ws1", text_index.shard_of("s2"), min_docs=1)
    assert [s["lv"] for s in live_segments(ws, "ws1")] == [0, 0, 0]
    post("s3", ("user", "greyhound coffee"))
    compactions: list[int] = []

    def meanwhile() -> None:  # s3's merge makes a fourth level-0 segment: compacted, and its deletes refused
        with refused(ws, "BatchWriteItem", lambda p: "DeleteRequest" in repr(p)), pytest.raises(ClientError):
            text_index.merge_shard(ws, "ws1", text_index.shard_of("s3"), min_docs=1)
        compactions.append(len(live_segments(ws, "ws1")))

    # (the purge's first rewrite committed and its old items deleted; the note of that comes next)
    with first(ws, "UpdateItem", is_note("old", "DELETE"), meanwhile) as seen:
        delete_session(ws, "s1")
    assert seen and compactions == [1]
    remaining = corpus_of(ws, "s2", "s3", "s16")
    counted_once(ws, "ws1", remaining)
    for query in ("greyhound coffee", "tram"):
        assert_every_scope_exact(ws, "ws1", remaining, remaining, query, 10)
    text_index.compact(ws, "ws1")  # (deletes what the dead compaction replaced)
    assert segment_partitions(ws, "ws1") == {s["id"] for s in live_segments(ws, "ws1")}
    assert noted(ws, "ws1", "tmp") == noted(ws, "ws1", "old") == set()


def manifest_in(params: dict) -> bool:
    return keys.text_manifest("ws1")["PK"] in json.dumps(params)


def test_a_purge_out_of_time_mid_vacuum_stops_asks_again_and_ends_with_no_index_of_the_session(ws):
    """Two segments hold s1's messages (each with s16's); the purge's deadline passes while it rewrites the first: it
    stops before the second, keeps the texts, and touches the session (its MODIFY record continues it); meanwhile no
    search finds s1, and only the second segment still counts its messages. The next invocation rewrites the second
    and deletes the texts: no index of the session, the statistics the live messages' alone, s2's segment untouched."""
    from precis.store.purge import purge_session

    for i in range(2):
        post("s1", *(("user" if m % 2 else "alice", f"note {i} {m} coffee") for m in range(10)))
        post("s16", ("alice", f"c1z {i} and the rest"), ("user", "coffee again"))
        text_index.merge_shard(ws, "ws1", text_index.shard_of("s1"), min_docs=1)
    post("s2", ("user", "coffee, tram"))
    text_index.merge_shard(ws, "ws1", text_index.shard_of("s2"), min_docs=1)
    post("s1", ("user", "fresh coffee"))
    s2_segment = next(s["id"] for s in live_segments(ws, "ws1") if s["n"] == 1)
    dead, remaining = corpus_of(ws, "s1"), corpus_of(ws, "s2", "s16")
    assert call("DELETE", f"{W}/sessions/s1").status == 202
    incarnation = incarnation_of(ws, "s1")
    left = [math.inf]
    # The deadline passes during the first segment's rewrite (as its transaction is sent: it commits).
    with first(ws, "TransactWriteItems", manifest_in, lambda: left.__setitem__(0, -1.0)) as seen:
        first_call = purge_session(ws, "ws1", "s1", incarnation, time_left=lambda: left[0])
    assert seen and not first_call.done
    session = from_item(
        ws.client.get_item(
            TableName=ws.table, Key={"PK": {"S": "WS#ws1"}, "SK": {"S": "SESSION#s1"}}, ConsistentRead=True
        )["Item"]
    )
    assert session["purge_rounds"] == 1 and "purged_at" not in session  # its continuation is asked for
    still = [row for row in segment_rows(ws, "ws1") if row[0] == "s1"]
    assert len(still) == 10 and len({seq // 11 for _, seq, _ in still}) == 1  # one batch: the second segment's
    assert not [r for r in fresh_rows(ws, "ws1") if r[0] == "s1"] and len(texts(ws, "ws1", "s1")) == 21
    counted = remaining + [m for m in dead if m.row in set(still)]
    for query in ("coffee", "note coffee alice"):
        assert_ranks(text_index.rank_workspace(ws, "ws1", query, 10), bm25(remaining, query, None, counted), 10)
    again = purge_session(ws, "ws1", "s1", incarnation)
    assert again.done
    counted_once(ws, "ws1", remaining)
    assert texts(ws, "ws1", "s1") == {}
    assert s2_segment in {s["id"] for s in live_segments(ws, "ws1")}
    assert segment_partitions(ws, "ws1") == {s["id"] for s in live_segments(ws, "ws1")}
    assert noted(ws, "ws1", "tmp") == noted(ws, "ws1", "old") == set()
    for query in ("coffee", "note coffee alice", "c1z"):
        assert_every_scope_exact(ws, "ws1", remaining, remaining, query, 10)
    assert call("POST", f"{W}/sessions", {"id": "s1"}).status == 201  # purged: the id is free again


def requests_by_partition(seen: list[tuple[str, dict]]) -> dict[str, set[tuple[str, str | None]]]:
    """partition -> {(operation, sort key)} of each request in `seen` (a Query's sort key None; a batch's or a
    transaction's writes named Put, Delete or Update)."""
    out: dict[str, set[tuple[str, str | None]]] = {}

    def add(operation: str, key: dict) -> None:
        out.setdefault(key["PK"]["S"], set()).add((operation, key["SK"]["S"]))

    for operation, params in seen:
        if operation == "Query":
            name = params["KeyConditionExpression"].split("PK = ")[1].split()[0]
            out.setdefault(params["ExpressionAttributeValues"][name]["S"], set()).add(("Query", None))
        elif operation == "BatchGetItem":
            for wanted in params["RequestItems"].values():
                for key in wanted["Keys"]:
                    add(operation, key)
        elif operation == "BatchWriteItem":
            for requests in params["RequestItems"].values():
                for r in requests:
                    if "PutRequest" in r:
                        add("Put", r["PutRequest"]["Item"])
                    else:
                        add("Delete", r["DeleteRequest"]["Key"])
        elif operation == "TransactWriteItems":
            for action in params["TransactItems"]:
                ((kind, body),) = action.items()
                add(kind, body.get("Key") or body["Item"])
        else:
            add(operation, params.get("Key") or params["Item"])
    return out


def test_a_session_purge_touches_only_its_fresh_shard_its_texts_and_the_segments_holding_it(ws):
    """A purge deletes the session's fresh units and texts, reads the manifest, the segments' headers (and the part of
    their session lists that could name it), and rewrites the segments that hold the session (read, replaced by a new
    one through the manifest, deleted); nothing else of the index: no other fresh shard, no other session's texts, no
    other segment but its header and session list."""
    post("s1", *M)
    post("s16", ("alice", "tram"))  # (s1's fresh shard: merged into s1's segment)
    post("s2", *M)
    merge_all(ws)
    (shared,) = [s["id"] for s in live_segments(ws, "ws1") if s["n"] == 4]
    (other,) = [s["id"] for s in live_segments(ws, "ws1") if s["id"] != shared]
    for session in ("s1", "s16", "s2"):
        post(session, ("user", "fresh greyhound"))
    assert call("DELETE", f"{W}/sessions/s1").status == 202
    incarnation = incarnation_of(ws, "s1")
    from precis.store.purge import purge_session

    with dynamodb_requests() as seen:
        assert purge_session(ws, "ws1", "s1", incarnation).done
    (rewritten,) = [s["id"] for s in live_segments(ws, "ws1") if s["id"] != other]
    touched = {pk: ops for pk, ops in requests_by_partition(seen).items() if "#X" in pk}  # (the index's)

    def kinds(pk: str) -> set[str]:
        return {op for op, _ in touched.pop(pk)}

    assert kinds(keys.text_fresh_pk("ws1", text_index.shard_of("s1"))) == {"Query", "Delete"}
    assert kinds(keys.text_docs_pk("ws1", "s1")) == {"Query", "Delete"}
    assert kinds(keys.text_manifest("ws1")["PK"]) == {"BatchGetItem", "UpdateItem", "Update"}  # (notes, commit)
    read = touched.pop(keys.text_segment_pk("ws1", other))
    assert ("BatchGetItem", "H") in read  # its header, and at most the part of its session list that could name s1
    assert read <= {("BatchGetItem", "H"), ("BatchGetItem", "S00000")}
    assert kinds(keys.text_segment_pk("ws1", shared)) == {"BatchGetItem", "Query", "Delete"}
    assert kinds(keys.text_segment_pk("ws1", rewritten)) == {"Put", "BatchGetItem"}  # (its header: s1 is gone)
    assert touched == {}  # nothing else: no other fresh shard, no other session's texts, no other segment
    counted_once(ws, "ws1", corpus_of(ws, "s16", "s2"))


def test_deleting_the_workspace_removes_its_whole_index(ws):
    post("s1", ("user", "coffee with alice tomorrow"))
    post("s2", ("alice", "tomorrow the budget"))
    merge_all(ws)
    post("s3", ("alice", "fresh"))
    with refused(ws, "TransactWriteItems", is_merge), pytest.raises(ClientError):  # a dead merge's segment too
        merge_all(ws)
    died()
    assert live_segments(ws, "ws1") and fresh_rows(ws, "ws1")
    for session in ("s1", "s2", "s3"):
        delete_session(ws, session)
    assert call("DELETE", W).status == 202
    assert scan(ws, "begins_with(PK, :p)", {":p": {"S": "WS#ws1"}}) == []


def test_a_purge_that_ends_after_its_workspace_was_deleted_leaves_no_index_behind(ws):
    post("s1", ("user", "coffee with alice tomorrow"))
    merge_all(ws)
    assert call("DELETE", f"{W}/sessions/s1").status == 202
    assert call("DELETE", W).status == 202  # the session is deleted, not yet purged: it does not block
    item = ws.client.get_item(
        TableName=ws.table, Key={"PK": {"S": "WS#ws1"}, "SK": {"S": "SESSION#s1"}}, ConsistentRead=True
    )["Item"]
    assert invoke("SummarizeFunction", {"Records": [stream_record(item, "MODIFY")]}) == {"batchItemFailures": []}
    assert scan(ws, "begins_with(PK, :p)", {":p": {"S": "WS#ws1#"}}) == []
    # The id is free again: a new workspace of that name starts from nothing.
    assert call("POST", "/v3/workspaces", {"id": "ws1"}).status == 201
    post("s9", ("user", "coffee"))
    counted_once(ws, "ws1", corpus_of(ws, "s9"))
    assert [key for key, _ in text_index.rank_workspace(ws, "ws1", "coffee", 10)] == [("s9", 1)]


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


def test_a_session_purge_deletes_its_message_vectors_a_page_at_a_time_under_its_deadline(aws):
    """A session's vectors (one per message) are deleted 1,000 keys a page: out of time, the purge stops after a
    page and the next call goes on, rather than reading the whole partition into one invocation."""
    db = Db(client=aws["dynamodb"], s3=aws["s3"], table=template().table_name, bucket=template().bucket_name)
    vectors = [message_search.vector_item("ws1", "s1", seq, "user", [0.5] * 256) for seq in range(1, 1003)]
    for start in range(0, len(vectors), 25):
        db.client.batch_write_item(
            RequestItems={db.table: [{"PutRequest": {"Item": v}} for v in vectors[start : start + 25]]}
        )
    assert message_search.purge_vectors(db, "ws1", "s1", time_left=lambda: -1.0) == (1000, False)
    assert message_search.purge_vectors(db, "ws1", "s1", time_left=lambda: -1.0) == (2, True)
    assert message_search.purge_vectors(db, "ws1", "s1") == (0, True)


def test_a_clone_copy_stopped_between_pages_indexes_each_copied_message_once(ws):
    """A clone's copy indexes each page it copies (200 messages) as one unit of the clone's incarnation: stopped for
    time after its first page and continued, each copied message is counted once, and found in the clone."""
    from precis.store.clones import copy_base

    for first in range(0, 210, 100):
        post(
            "s1", *(("user" if m % 2 else "alice", f"p{m}x note {m % 7}") for m in range(first, min(first + 100, 210)))
        )
    clone = call("POST", f"{W}/sessions/s1/clone").body["id"]
    clock = iter([100.0])  # enough for a page, then less than the step's margin
    assert copy_base(ws, "ws1", clone, time_left=lambda: next(clock, 5.0)) is False
    assert sorted(texts(ws, "ws1", clone)) == list(range(1, 201))
    assert copy_base(ws, "ws1", clone) is True
    assert copy_base(ws, "ws1", clone) is True  # again: nothing more
    incarnation = incarnation_of(ws, clone)
    corpus = corpus_of(ws, "s1") + [Msg(clone, m.seq, m.peer, m.content, incarnation) for m in corpus_of(ws, "s1")]
    counted_once(ws, "ws1", corpus)
    merge_all(ws)
    counted_once(ws, "ws1", corpus)
    assert [m["seq"] for m in search(f"{W}/sessions/{clone}/search", "p205x")] == [206]
    assert_ranks(text_index.rank_workspace(ws, "ws1", "p205x note", 10), bm25(corpus, "p205x note"), 10)


# ---------------------------------------------------------------- 4. a failure while indexing


def is_alive_check(params: dict) -> bool:
    """The BatchGetItem of the session that follows a unit's writes (whether it still lives, in which incarnation)."""
    (wanted,) = params["RequestItems"].values()
    names = set(wanted.get("ExpressionAttributeNames", {}).values())
    return [k["SK"]["S"] for k in wanted["Keys"]] == ["SESSION#s1"] and names == {"incarnation", "deleted_at"}


FAILURES = {
    "the fresh item": ("BatchWriteItem", lambda p: puts_of(p, "xfresh")),
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
    died()
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
    counted_once(ws, "ws1", corpus)
    for path, scope in (
        (f"{W}/search", corpus),
        (f"{W}/sessions/s1/search", corpus),
        (f"{W}/peers/alice/search", [m for m in corpus if m.peer == "alice"]),
    ):
        assert [m["id"] for m in search(path, "greyhound coffee")] == ids_of(ws, bm25(scope, "greyhound coffee", 10))
    assert (
        message_search.ensure_indexed(ws, "ws1", "s1", messages, now=lambda: deadline + 1, sleep=never_sleep) == 0
    )  # done: nothing more to write
    derive(ws)  # then the stream's delivery
    merge_all(ws)
    counted_once(ws, "ws1", corpus)


def test_a_post_whose_check_after_its_index_fails_answers_201_and_is_found(ws):
    """The session read that follows a unit's writes fails: the post still answers 201, its unit is whole (fresh
    item and texts), found at once, and the deriver has nothing to do."""
    with refused(ws, "BatchGetItem", is_alive_check) as refusals:
        views = post("s1", ("user", "I adopted a greyhound"), ("alice", "lovely"))
    died()
    assert refusals
    messages = stored(ws)
    assert [m["id"] for m in search(f"{W}/search", "greyhound")] == [views[0]["id"]]
    assert message_search.ensure_indexed(ws, "ws1", "s1", messages, now=lambda: 1e12, sleep=never_sleep) == 0
    counted_once(ws, "ws1", corpus_of(ws, "s1"))


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
    counted_once(ws, "ws1", corpus_of(ws, "s1"))


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
    counted_once(ws, "ws1", corpus_of(ws, "s1"))


def age_deadlines(db: Db, session: str = "s1") -> None:
    """The wall clock passes the stored messages' index deadline (`ibu`): the request that stored them is over."""
    for m in stored(db, session):
        db.client.update_item(
            TableName=db.table,
            Key={"PK": {"S": m["PK"]}, "SK": {"S": m["SK"]}},
            UpdateExpression="SET ibu = :past",
            ExpressionAttributeValues={":past": {"N": "1"}},
        )


def test_the_derive_function_indexes_what_a_dead_request_left(ws):
    post("s2", ("alice", "coffee, always coffee"))
    derive(ws, "s2")
    with refused(ws, "BatchWriteItem", is_text_put):
        post("s1", ("user", "coffee tomorrow"), ("alice", "tomorrow, then"))
    age_deadlines(ws)
    derive(ws)  # the stream's delivery: the deriver repairs, then derives
    corpus = corpus_of(ws, "s1", "s2")
    counted_once(ws, "ws1", corpus)
    assert [m["id"] for m in search(f"{W}/sessions/s1/search", "tomorrow")] == ids_of(
        ws, bm25(corpus_of(ws, "s1"), "tomorrow", 10)
    )
    assert_ranks(text_index.rank_workspace(ws, "ws1", "coffee tomorrow", 10), bm25(corpus, "coffee tomorrow"), 10)


def test_a_unit_whose_insert_the_deriver_saw_before_its_texts_is_waited_for_and_written_once(ws):
    """The stream is fast: the deriver gets a batch's inserts while its request is still writing the texts. It waits
    for them (the request's deadline has not passed): nothing is written twice."""
    images: list[dict] = []
    written: list[int] = []

    def deriver_first(params: dict) -> bool:
        if not images:  # the insert came down the stream before the texts were written
            images.extend(from_item(r["dynamodb"]["NewImage"]) for r in message_records(ws.client, session_id="s1"))
            deriver.start()  # (polls for the texts until the request's deadline)
        return False  # then the texts are written

    deriver = threading.Thread(target=lambda: written.append(message_search.ensure_indexed(ws, "ws1", "s1", images)))
    with refused(ws, "BatchWriteItem", lambda p: is_text_put(p) and deriver_first(p)):
        post("s1", ("user", "coffee tomorrow"), ("alice", "tomorrow, then"))
    deriver.join()
    assert images and written == [0]
    counted_once(ws, "ws1", corpus_of(ws, "s1"))


# ---------------------------------------------------------------- 5. bounded reads


def test_a_search_under_a_tiny_budget_answers_what_it_read_and_says_so(ws):
    post("s1", *M)
    merge_all(ws)
    post("s2", ("user", "the fresh greyhound"), ("alice", "coffee"))
    budget = text_index.Budget(requests=3)
    hits = text_index.rank_workspace(ws, "ws1", "greyhound", 10, budget=budget)
    assert budget.exhausted and budget.used_requests > 0
    assert [key for key, _ in hits] == [("s2", 1)]  # the fresh message read; the segment's postings were not
    full = text_index.Budget()
    corpus = corpus_of(ws, "s1", "s2")
    assert_ranks(text_index.rank_workspace(ws, "ws1", "greyhound", 10, budget=full), bm25(corpus, "greyhound"), 10)
    assert not full.exhausted and full.used_requests <= full.requests


def test_a_search_route_says_when_its_budget_ran_out(ws, monkeypatch):
    post("s1", *M)
    merge_all(ws)
    post("s2", ("user", "the fresh greyhound"))
    reply = call("POST", f"{W}/search", {"query": "greyhound"})
    assert reply.status == 200 and len(reply.body) == 3
    assert "x-precis-search-budget" not in {h.lower() for h in reply.headers}
    monkeypatch.setenv("PRECIS_SEARCH_MAX_REQUESTS", "3")
    for path in (f"{W}/search", f"{W}/peers/user/search"):
        reply = call("POST", path, {"query": "greyhound"})
        assert reply.status == 200 and [m["session_id"] for m in reply.body] == ["s2"], (path, reply.body)
        header = {h.lower(): v for h, v in reply.headers.items()}["x-precis-search-budget"]
        assert header.startswith("exhausted;") and "requests=" in header, header
