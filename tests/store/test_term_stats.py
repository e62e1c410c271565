"""A corpus's term statistics (store.term_stats) against moto: what one count adds, across several updates."""

from __future__ import annotations

from collections import Counter

from precis.lexical import Document
from precis.store import term_stats
from precis.store.db import get_db

KEY = {"PK": "WS#ws1#TERMS", "SK": "MESSAGES"}


def test_counts_add_up_across_calls_and_past_one_updates_limit(aws):
    db = get_db()
    assert term_stats.read(db, KEY).documents == 0
    # 400 distinct words touch far more counters than one UpdateItem may add (DynamoDB: 300 operators).
    first = [Document.of(" ".join(f"word{i}x{j}" for j in range(4))) for i in range(100)]
    second = [Document.of("alice likes ramen"), Document.of("alice moved to lisbon", speaker="alice")]
    term_stats.count(db, KEY, first)
    term_stats.count(db, KEY, second)
    stats = term_stats.read(db, KEY)
    expected = Counter(slot for d in first + second for slot in d.df_slots())
    assert len(expected) > 300
    assert stats.documents == 102 and stats.total_length == sum(d.length for d in first + second)
    assert stats.df == dict(expected)


def test_nothing_to_count_writes_nothing(aws):
    db = get_db()
    term_stats.count(db, KEY, [])
    assert "Item" not in db.client.get_item(TableName=db.table, Key={k: {"S": v} for k, v in KEY.items()})
