"""The upgrade's backfill (deploy/reindex.py): every stored message of a session put into the index, under the
repair's lease."""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from precis.store import keys, text_index
from precis.store.db import Db, batch_get
from precis.store.message_search.repair import REPAIR_LEASE_S, index_unit, release_repair_lease, take_repair_lease
from precis.store.messages import MessageItem
from precis.store.resources import SessionItem, session_item

REINDEX_WINDOW = 1000  # seqs of a session the backfill reads at once: a multiple of 100, so a legacy block is whole
REBUILD_UNIT = 100  # texts of the release before segments indexed as one unit
_TEXT_FIELDS = ("seq", "peer", "tsig", "tlen", "u")


@dataclass
class Reindexed:
    """What `reindex_session` did to a session (or, dry, would do)."""

    messages: int = 0  # stored messages read
    indexed: int = 0  # messages indexed: texts written, or `rebuilt` (a unit's members with a text go in uncounted)
    units: int = 0  # units indexed
    rebuilt: int = 0  # of `indexed`, those whose text the release before segments wrote, indexed from it
    in_flight: int = 0  # messages of a batch whose request may still be indexing it: left to it (or the deriver)
    copying: int = 0  # a clone's messages while its copy runs (the copy indexes what it copies): left to a later run
    stopped: str | None = None  # why the walk stopped before the session's end


def reindex_session(
    db: Db,
    ws: str,
    session_id: str,
    *,
    dry_run: bool = False,
    on_unit: Callable[[str, int], None] | None = None,
    progress: Reindexed | None = None,
    holdings: text_index.Holdings | None = None,
    now: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    window: int = REINDEX_WINDOW,
) -> Reindexed:
    """Put every stored message of the session into the index. One without a text (stored before the exact index):
    whole units at a time exactly as the deriver's repair does (`index_unit`, under its lease). One whose text the
    release before segments wrote and the index does not hold (`holdings`, the workspace's, its sessions asked in
    order): from its text, REBUILD_UNIT a unit, under the same lease. The workspace's fresh shards are merged as they
    fill (no stream record of an old message comes again to do it).

    What the index holds is the progress: an interrupted walk is run again from the start and indexes each message
    once. `on_unit(unit, written)` after each unit indexed (raising there stops the walk between two units); counted
    into `progress` as it goes, when given."""
    from precis.store.messages import base_of, read_range, tail_seq

    done, seen = progress if progress is not None else Reindexed(), set()
    holdings = holdings if holdings is not None else text_index.Holdings(db, ws)
    claimed: set[int] = set()  # members of units with a message without a text: indexed (or left) whole, by unit
    last = tail_seq(db, ws, session_id)
    for start in range(1, last + 1, window):
        session = session_item(db, ws, session_id)
        if session is None or "deleted_at" in session:
            done.stopped = "deleted"  # (its purge takes back whatever was indexed)
            return done
        base, end = base_of(session), start + window - 1
        stored = read_range(db, ws, session_id, start, end)
        done.messages += len(stored)
        texts = {
            int(i["seq"]): i
            for i in batch_get(db, [keys.text_doc(ws, session_id, int(m["seq"])) for m in stored], _TEXT_FIELDS)
        }
        for unit in dict.fromkeys(text_index.unit_of(session_id, m) for m in stored):
            if unit in seen:
                continue  # (a batch across two windows: done, or left, in the first)
            seen.add(unit)
            first, through = text_index.unit_range(unit)
            whole = stored if start <= first and through <= end else read_range(db, ws, session_id, first, through)
            members = text_index.unit_members(session_id, unit, whole)
            seqs = [int(m["seq"]) for m in members]
            outside = [keys.text_doc(ws, session_id, s) for s in seqs if not start <= s <= end]
            around = {int(i["seq"]): i for i in batch_get(db, outside, _TEXT_FIELDS)} if outside else {}
            found = {s: t for s in seqs if (t := texts.get(s, around.get(s))) is not None}
            lacking = [s for s in seqs if s not in found]
            if not lacking:
                continue  # every member has its text: the index holds them, or they are rebuilt below
            # Indexing the unit indexes the texts it wrote before too (not another unit's: a clone's copy's): those
            # are not rebuilt.
            claimed.update(s for s in seqs if found.get(s, {}).get("u") in (None, unit))
            if max((float(m.get("ibu") or 0) for m in members), default=0.0) >= now():
                done.in_flight += len(lacking)
            elif base is not None and first <= base.through:
                done.copying += len(lacking)
            elif dry_run:
                done.units, done.indexed = done.units + 1, done.indexed + len(lacking)
            else:
                written = _backfill_unit(db, ws, session_id, unit, members, now, sleep)
                done.units, done.indexed = done.units + 1, done.indexed + written
                if on_unit is not None:
                    on_unit(unit, written)
        candidates = [texts[s] for s in sorted(texts) if s not in claimed]
        if candidates:
            _rebuild(db, ws, session_id, session, holdings, candidates, done, dry_run, on_unit, now, sleep)
    return done


def _rebuild(
    db: Db,
    ws: str,
    session_id: str,
    session: SessionItem,
    holdings: text_index.Holdings,
    texts: Sequence[Mapping[str, Any]],
    done: Reindexed,
    dry_run: bool,
    on_unit: Callable[[str, int], None] | None,
    now: Callable[[], float],
    sleep: Callable[[float], None],
) -> None:
    """Index those of a window's `texts` (read before this is called) the index does not hold, REBUILD_UNIT a unit:
    looked up first, then again under the session's repair lease (a run that finds all of them held writes nothing).
    While a clone's copy runs, its texts of what it copies are left (the copy indexes its pages whole, theirs too)."""
    from precis.store.messages import base_of

    incarnation, base = session.get("incarnation") or "", base_of(session)

    def todo() -> tuple[list[Mapping[str, Any]], int]:
        """The texts to index, and how many more are a clone's copy's."""
        held = holdings.held(session_id, incarnation)
        left = [t for t in texts if int(t["seq"]) not in held]
        through = base.through if base is not None else 0
        return [t for t in left if int(t["seq"]) > through], sum(int(t["seq"]) <= through for t in left)

    wanted, lent = todo()
    if wanted and dry_run:
        done.units += math.ceil(len(wanted) / REBUILD_UNIT)
        done.indexed, done.rebuilt = done.indexed + len(wanted), done.rebuilt + len(wanted)
    elif wanted:
        with _repair_lease(db, ws, session_id, now, sleep):
            wanted, lent = todo()
            for start in range(0, len(wanted), REBUILD_UNIT):
                chunk = wanted[start : start + REBUILD_UNIT]
                unit = f"{session_id}:{int(chunk[0]['seq'])}:r{secrets.token_hex(4)}"
                written = text_index.index_stored(db, ws, session_id, unit, chunk, incarnation=incarnation)
                done.units, done.indexed, done.rebuilt = done.units + 1, done.indexed + written, done.rebuilt + written
                if on_unit is not None:
                    on_unit(unit, written)
        text_index.merge(db, ws, [session_id])
    done.copying += lent


@contextmanager
def _repair_lease(
    db: Db, ws: str, session_id: str, now: Callable[[], float], sleep: Callable[[float], None]
) -> Iterator[None]:
    """The session's repair lease, held while the block runs (a deriver repairing the session meanwhile waits)."""
    deadline = now() + 2 * REPAIR_LEASE_S
    while not take_repair_lease(db, ws, session_id, now()):
        if now() > deadline:
            raise TimeoutError(
                f"session {ws}/{session_id}: its index repair lease stayed taken for "
                f"{2 * REPAIR_LEASE_S} s (a deriver repairing it?); run the backfill again"
            )
        sleep(1.0)
    try:
        yield
    finally:
        release_repair_lease(db, ws, session_id)


def _backfill_unit(
    db: Db,
    ws: str,
    session_id: str,
    unit: str,
    members: Sequence[MessageItem],
    now: Callable[[], float],
    sleep: Callable[[float], None],
) -> int:
    """One unit under the repair's lease (a deriver repairing the session meanwhile waits, and finds it done); the
    session's fresh shard is merged once it holds enough."""
    with _repair_lease(db, ws, session_id, now, sleep):
        written = index_unit(db, ws, session_id, unit, members)
        text_index.merge(db, ws, [session_id])
    return written
