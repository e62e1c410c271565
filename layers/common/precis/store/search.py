"""Message search's one face: what the rest of Precis calls to index messages, rank them, repair and rebuild the
index, and take a session or a workspace out of it. Behind it, `text_index` (the exact lexical index: texts, fresh
units, segments, the manifest) and `message_search` (semantic vectors, fusion, the deleted-session rule, the
deriver's and the backfill's part). Only this module is imported from outside them (tests/test_layout.py): a second
backend (Amazon OpenSearch Serverless, docs/design.md "Lexical ranking") would be a module behind these functions."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from precis.store import keys, message_search, text_index
from precis.store.db import Db
from precis.store.message_search import (
    MEANING_INDEX,
    Reindexed,
    RepairBusy,
    ensure_indexed,
    index_messages,
    merge_fresh,
    rank,
    read_views,
    reindex_session,
    search,
)
from precis.store.records import delete_keys
from precis.store.text_index import Budget, Holdings, Text, delete_old_index

__all__ = [
    "MEANING_INDEX",
    "Budget",
    "Holdings",
    "Reindexed",
    "RepairBusy",
    "Text",
    "delete_old_index",
    "delete_workspace",
    "forget_messages",
    "vacuum_messages",
    "message_unit",
    "message_units",
    "ensure_indexed",
    "index_batch",
    "index_messages",
    "merge_fresh",
    "purge_session",
    "rank",
    "read_views",
    "reindex_session",
    "search",
]


def index_batch(
    db: Db, ws: str, session_id: str, unit: str, texts: Sequence[Text], *, incarnation: str | None = None
) -> int:
    """Make a stored batch (a post's, a clone's copied page) searchable, exactly once; how many texts were written."""
    return text_index.index_texts(db, ws, session_id, unit, texts, incarnation=incarnation)


def purge_session(
    db: Db, ws: str, session_id: str, incarnation: str | None, *, time_left: Callable[[], float] = lambda: math.inf
) -> tuple[int, bool]:
    """Take a deleted session out of search, its vectors then its index, under `time_left`: (items, done?)."""
    vectors, done = message_search.purge_vectors(db, ws, session_id, time_left=time_left)
    if not done:
        return vectors, False
    indexed, done = text_index.purge_session(db, ws, session_id, incarnation, time_left=time_left)
    return vectors + indexed, done


def message_unit(session_id: str, message: Mapping[str, Any]) -> str:
    """The search-index unit a stored message belongs to (its post's, or its aligned block's)."""
    return text_index.unit_of(session_id, message)


def message_units(db: Db, ws: str, session_id: str, messages: Sequence[Mapping[str, Any]]) -> dict[int, str]:
    """The unit holding each stored message's text, by seq: the unit that wrote the text (one consistent read), else
    the message's own (`message_unit`: not indexed yet)."""
    # A clone's copy keeps its parent's `ib`, but the clone's copied page wrote its text: a delete naming `ib` left the
    # copy counted in its page for good (a unit missing a text is never merged) and, when the clone's fresh shard was
    # the parent's, took the parent's message out of the parent's unit.
    seqs = [int(m["seq"]) for m in messages]
    written = {int(t["seq"]): t["u"] for t in text_index.texts_at(db, ws, session_id, seqs) if t.get("u")}
    return {int(m["seq"]): written.get(int(m["seq"])) or message_unit(session_id, m) for m in messages}


def forget_messages(
    db: Db,
    ws: str,
    session_id: str,
    units: Mapping[int, str],
    *,
    time_left: Callable[[], float] = lambda: math.inf,
    vacuum: bool = True,
) -> bool:
    """Take deleted messages (seq: its unit) of one session out of search: their vectors and texts, their units'
    fresh items, the segment holding them (rewritten once without them; not `vacuum`: left to the caller's
    `vacuum_messages`, which drops many batches' at once); whether done (out of time, or outrun by merges: ask
    again)."""
    delete_keys(
        db,
        [
            k
            for seq in sorted(units)
            for k in (keys.message_vector(ws, session_id, seq), keys.text_doc(ws, session_id, seq))
        ],
    )
    by_unit: dict[str, list[int]] = {}
    for seq, unit in sorted(units.items()):
        by_unit.setdefault(unit, []).append(seq)
    for unit, seqs in by_unit.items():
        text_index.forget_in_unit(db, ws, session_id, unit, seqs)
    return not vacuum or text_index.vacuum_messages(db, ws, session_id, sorted(units), time_left=time_left)


def vacuum_messages(db: Db, ws: str, session_id: str, seqs: Iterable[int]) -> bool:
    """Rewrite the segments holding the session without deleted messages `seqs` (their texts and fresh items gone
    already); whether done (outrun by merges: ask again)."""
    return text_index.vacuum_messages(db, ws, session_id, seqs)


def delete_workspace(db: Db, ws: str, peers: Iterable[str]) -> int:
    """Delete a workspace's index (its sessions purged first); how many items."""
    return text_index.delete_index(db, ws, peers)
