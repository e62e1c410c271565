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
