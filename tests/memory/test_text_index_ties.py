"""Equal BM25 scores rank by key wherever the two messages are indexed (precis.store.text_index): a message merged into
a segment and its twin still fresh (the same speaker, words and counts) score the same to the last bit, so the one
with the smaller (session, seq) comes first, as the definition says; summed in different orders, the two scores could
differ in their last bit and the tie would go to whichever came out a hair larger."""

from __future__ import annotations

import itertools

import pytest

from local.template import template
from precis.store import text_index
from precis.store.db import Db
from precis.store.resources import get_or_create_session, get_or_create_workspace

WS = "ties"
MERGED, FRESH = "s1", "s2"  # shards 0 and 2: one merged, one left fresh
WORDS = ("lantern", "compass", "harbour", "violet", "granite")


@pytest.fixture
def db(aws) -> Db:
    db = Db(client=aws["dynamodb"], s3=aws["s3"], table=template().table_name, bucket=template().bucket_name)
    get_or_create_workspace(db, WS)
    for session in (MERGED, FRESH):
        get_or_create_session(db, WS, session)
    return db


def _twin(order: tuple[str, ...]) -> str:
    """The twins' text: each word a different number of times (1, 2, 3, ...), in `order`."""
    return " ".join(word for n, word in enumerate(order, start=1) for _ in range(n))


def test_twins_in_a_segment_and_in_a_fresh_shard_tie_and_rank_by_key(db):
    assert text_index.shard_of(MERGED) != text_index.shard_of(FRESH)
    twin = _twin(WORDS)
    filler = [text_index.Text(seq, "alice", f"filler words number {seq}") for seq in range(2, 121)]
    texts = [text_index.Text(1, "alice", twin), *filler]
    assert text_index.index_texts(db, WS, MERGED, f"{MERGED}:1:a", texts[:100]) == 100
    assert text_index.merge(db, WS, [MERGED]) == 100  # into a segment
    assert text_index.index_texts(db, WS, MERGED, f"{MERGED}:101:b", texts[100:]) == 20
    assert text_index.index_texts(db, WS, FRESH, f"{FRESH}:1:a", [text_index.Text(1, "alice", twin)]) == 1
    assert text_index.merge(db, WS, [FRESH]) == 0  # (fewer than a merge takes: stays fresh)
    assert len(text_index.read_manifest(db, WS).segments) == 1

    for asked in itertools.permutations(WORDS, 3):  # (the order a query says its words in is the order they add up)
        query = " ".join(asked)
        hits = text_index.rank_workspace(db, WS, query, 2)
        assert [key for key, _ in hits] == [(MERGED, 1), (FRESH, 1)], query
        assert hits[0][1] == hits[1][1], query


def thousand_ties(db: Db) -> list[str]:
    """50 sessions of 20 identical messages, merged into segments; the sessions."""
    sessions = [f"t{n:02d}" for n in range(50)]
    for session in sessions:
        get_or_create_session(db, WS, session)
        texts = [text_index.Text(seq, "alice", "kayak") for seq in range(1, 21)]
        assert text_index.index_texts(db, WS, session, f"{session}:1:a", texts) == 20
    text_index.merge(db, WS, sessions, min_docs=1)
    assert text_index.read_manifest(db, WS).documents == 1_000  # all in segments: each resolved through its table
    return sessions


def test_ties_past_the_budgets_resolve_bound_are_left_unread_and_the_budget_says_so(db):
    sessions = thousand_ties(db)
    bounded, default = text_index.Budget(resolve=100), text_index.Budget()
    hits = text_index.rank_workspace(db, WS, "kayak", 10, budget=bounded)
    assert len(hits) == 10 and bounded.exhausted  # k answers, from the first rounds' candidates
    assert [k for k, _ in text_index.rank_workspace(db, WS, "kayak", 10, budget=default)] == [
        (sessions[0], seq) for seq in range(1, 11)
    ]
    assert not default.exhausted and bounded.used_requests < default.used_requests


def test_a_thousand_messages_tied_at_the_kth_score_are_resolved_in_a_few_rounds(db):
    """Every message the same (a speaker's name alone, in a busy workspace): the k with the smallest keys are found by
    reading the doc tables and sessions of all the tied ones, in rounds that grow, not a session's worth at a time."""
    sessions = thousand_ties(db)

    seen: list[str] = []

    def record(model, **_) -> None:
        seen.append(model.name)

    db.client.meta.events.register("provide-client-params.dynamodb", record)
    try:
        hits = text_index.rank_workspace(db, WS, "kayak", 10)
    finally:
        db.client.meta.events.unregister("provide-client-params.dynamodb", record)
    assert [key for key, _ in hits] == [(sessions[0], seq) for seq in range(1, 11)]
    # the manifest twice, 8 fresh shards, the buckets, then each round's doc tables and sessions (20, 40, ... 1,280
    # candidates): not one round for each session's 20
    assert len(seen) <= 1 + 8 + 1 + 1 + 2 * 7, seen
