"""The deriver's part of the exact index: merging fresh shards as inserts come down the stream, and indexing the
batches whose request died before it could, under the session's repair lease."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from precis.store import keys, leases, text_index
from precis.store.db import Db
from precis.store.messages import MessageItem, with_bodies
from precis.store.resources import session_item

REPAIR_LEASE_S = 60  # how long one deriver holds a session's index repair
_POLL_S = 0.2  # how often the deriver looks again for texts a live request is still writing


MERGE_CHECK_EVERY = 10  # a shard is looked at when a batch brings this many of its messages, or a seq that divides


def merge_fresh(db: Db, images: Iterable[dict[str, Any]]) -> int:
    """Once per stream batch (its inserted messages' images): merge their sessions' fresh index shards into
    segments once they hold enough (`text_index.merge`); how many messages were merged. A shard is looked at (a
    consistent Query of what it holds) about once per MERGE_CHECK_EVERY of its messages, not once per post: when the
    batch brings that many, or one whose seq MERGE_CHECK_EVERY divides (each session's tenth, twentieth, ...)."""
    by_shard: dict[tuple[str, int], list[tuple[str, int]]] = {}
    for image in images:
        ws, session_id = keys.parse_session_pk(image["PK"])
        by_shard.setdefault((ws, text_index.shard_of(session_id)), []).append((session_id, int(image["seq"])))
    return sum(
        text_index.merge_shard(db, ws, shard)
        for (ws, shard), brought in sorted(by_shard.items())
        if len(brought) >= MERGE_CHECK_EVERY or any(seq % MERGE_CHECK_EVERY == 0 for _, seq in brought)
    )


def ensure_indexed(
    db: Db,
    ws: str,
    session_id: str,
    messages: Sequence[MessageItem],
    *,
    now: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Before the deriver derives `messages` (stored items of one session): index those whose request died before
    its index was written, whole units at a time; a request still running (its `ibu` deadline not passed) is waited
    for. How many texts were written. A failure raises: the derivation fails with it and is retried."""
    found_missing = text_index.missing_texts(db, ws, session_id, (int(m["seq"]) for m in messages))
    if not found_missing:
        return 0
    missing = _wait_for_texts(db, ws, session_id, messages, now, sleep, missing=found_missing)
    # Another deriver (another sender's, or the upgrade's backfill) may hold the session's repair: wait while it
    # does, then index what is still missing (it may have done it); past its lease, fail to be retried.
    give_up = now() + REPAIR_LEASE_S
    while missing and not take_repair_lease(db, ws, session_id, now()):
        if now() >= give_up:
            raise RepairBusy(f"session '{session_id}' of workspace '{ws}' is being indexed by another deriver; retry")
        sleep(_POLL_S)
        missing = text_index.missing_texts(db, ws, session_id, missing)
    if not missing:
        return 0
    from precis.store.messages import read_range

    written = 0
    try:
        units = dict.fromkeys(text_index.unit_of(session_id, m) for m in messages if int(m["seq"]) in missing)
        for unit in units:
            stored = read_range(db, ws, session_id, *text_index.unit_range(unit))
            members = text_index.unit_members(session_id, unit, stored)
            written += index_unit(db, ws, session_id, unit, members)
    finally:
        release_repair_lease(db, ws, session_id)
    return written


def index_unit(db: Db, ws: str, session_id: str, unit: str, members: Sequence[MessageItem]) -> int:
    """Index a unit of stored messages, given all its members (`text_index.unit_members`): the deriver's repair and
    the upgrade's backfill both index through here, so they pass `index_texts` the same texts for the same unit.
    A member whose text a clone's copy wrote under its own unit is left out (its words are counted there already;
    found among the unit's texts it would make `index_texts` take the unit for counted). How many texts were written."""
    found = text_index.texts_at(db, ws, session_id, (int(m["seq"]) for m in members))
    elsewhere = {int(i["seq"]) for i in found if i.get("u") not in (None, unit)}
    batch = [m for m in members if int(m["seq"]) not in elsewhere]
    texts = [
        text_index.Text(int(v["seq"]), v["peer_id"], v.get("content") or "")
        for v in with_bodies(db, batch, ws, session_id)
    ]
    session = session_item(db, ws, session_id)
    if session is None or "deleted_at" in session:
        return 0
    return text_index.index_texts(db, ws, session_id, unit, texts, incarnation=session["incarnation"])


def release_repair_lease(db: Db, ws: str, session_id: str) -> None:
    leases.release(db, keys.text_repair_lease(ws, session_id))


class RepairBusy(RuntimeError):
    """A session's index repair is held by another deriver."""


def _wait_for_texts(
    db: Db,
    ws: str,
    session_id: str,
    messages: Sequence[MessageItem],
    now: Callable[[], float],
    sleep: Callable[[float], None],
    *,
    missing: set[int] | None = None,
) -> set[int]:
    """The seqs of `messages` whose text is still missing once every request that may still write one (its `ibu`
    deadline not passed) has written it or died (`missing`: those known missing already, not read again)."""
    if missing is None:
        missing = text_index.missing_texts(db, ws, session_id, (int(m["seq"]) for m in messages))
    deadline = max((float(m.get("ibu") or 0) for m in messages if int(m["seq"]) in missing), default=0.0)
    while missing and now() < deadline:
        sleep(_POLL_S)
        missing = text_index.missing_texts(db, ws, session_id, missing)
    return missing


def take_repair_lease(db: Db, ws: str, session_id: str, now: float) -> bool:
    return leases.take(db, keys.text_repair_lease(ws, session_id), now + REPAIR_LEASE_S, now)
