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
from precis.lexical import terms
from precis.store import keys, message_search, text_index
from precis.store.db import Db, from_item, get_db

from local.template import template
from tests.handlers import call, invoke
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
            out.add((keys.text_postings_pk(ws, term),
                     f"{min(said, GROUP_CAP)}#{length:07d}#{m.session}#{m.seq:012d}", said, length, m.peer))
    return out


# ---------------------------------------------------------------- what the table holds


def counter_items(db: Db, ws: str) -> dict[str, dict]:
    out = db.client.query(TableName=db.table, KeyConditionExpression="PK = :p", ConsistentRead=True,
                          ExpressionAttributeValues={":p": {"S": keys.text_counters_pk(ws)}})
    assert "LastEvaluatedKey" not in out
    return {i["SK"]: i for i in map(from_item, out["Items"])}


def counters(db: Db, ws: str, *, groups_at_least: bool = False) -> dict[str, tuple[dict[str, int], set[int]]]:
    """The counters partition as counts (zeros left out, as a brute force has no zero) and groups; an item whose
    counts are all zero is as good as absent."""
    out = {}
    for sk, item in counter_items(db, ws).items():
        counts = {name: value for name, value in item.items()
                  if (name in ("n", "len") or name.startswith(("n:", "len:", "p:"))) and value != 0}
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
    return {(i["PK"], i["SK"], i["n"], i["l"], i["p"]) for i in items}


def texts(db: Db, ws: str, session_id: str) -> dict[int, dict]:
    out = db.client.query(TableName=db.table, KeyConditionExpression="PK = :p", ConsistentRead=True,
                          ExpressionAttributeValues={":p": {"S": keys.text_docs_pk(ws, session_id)}})
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
RARE = ["lisbon", "greyhound", "budget", "violin", "tram", "printer", "sister", "bread", "thursday", "garden",
        "adopted", "adoption", "ramen", "python"]
STOP = ["the", "and", "it", "was"]
word = st.one_of(st.sampled_from(COMMON), st.sampled_from(COMMON), st.sampled_from(RARE),
                 st.sampled_from(STOP + ["user", "assistant"]))
content = st.one_of(
    st.lists(word, min_size=1, max_size=12).map(" ".join),
    # a word said 8-12 times: the groups 8 and "9 or more"
    st.builds(lambda w, n, rest: " ".join([w] * n + rest), st.sampled_from(COMMON + RARE), st.integers(7, 12),
              st.lists(word, max_size=3)),
    st.lists(st.sampled_from(STOP), min_size=1, max_size=3).map(" ".join),  # only stopwords: then they count
)
session_messages = st.lists(st.tuples(st.sampled_from(PEERS), content, st.booleans(), st.booleans()),
                            min_size=1, max_size=8)  # (peer, text, a unit ends after it, its unit is sent twice)
queries = st.lists(st.lists(st.sampled_from(COMMON + RARE + STOP + ["user", "assistant", "alice", "agent",
                                                                    "unheard"]), min_size=1, max_size=4)
                   .map(" ".join), min_size=1, max_size=3)
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
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
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
        assert {seq: (t["peer"], t["tlen"], Counter(dict(
            (p.partition(":")[0], int(p.partition(":")[2] or 1)) for p in t["tsig"].split()))) for seq, t in
            stored.items()} == {m.seq: (m.peer, sum(m.bag().values()), m.bag()) for m in mine}

    for query in asked:
        assert text_index.rank_workspace(db, ws, query, k) == approx_hits(bm25(corpus, query, k)), query
        for peer in PEERS:
            assert text_index.rank_workspace(db, ws, query, k, peer=peer) == approx_hits(
                bm25([m for m in corpus if m.peer == peer], query, k)), (query, peer)
        for number in range(len(sessions)):
            session_id = f"s{number}"
            assert message_search.lexical_rank(db, ws, query, k, session_id=session_id) == approx_hits(
                bm25([m for m in corpus if m.session == session_id], query, k)), (query, session_id)
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
            chunk = batch[start:start + 100]
            text_index.index_texts(db, "deep", session_id, f"{session_id}:{chunk[0].seq}:n",
                                   [text_index.Text(m.seq, m.peer, m.content) for m in chunk])
    assert counters(db, "deep") == brute_counters(corpus)
    for query, k in (("coffee", 10), ("coffee coffee lisbon", 25), ("budget coffee", 3), ("alice coffee", 100),
                     ("user", 7)):
        assert text_index.rank_workspace(db, "deep", query, k) == approx_hits(bm25(corpus, query, k)), query
        for peer in ("alice", "agent_7"):
            assert text_index.rank_workspace(db, "deep", query, k, peer=peer) == approx_hits(
                bm25([m for m in corpus if m.peer == peer], query, k)), (query, peer)
