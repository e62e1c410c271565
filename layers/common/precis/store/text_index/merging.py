"""Merging (the deriver): a fresh shard into a segment, segments into larger ones, a deleted session's messages out
of the segments holding them, and what dead writers left."""

from __future__ import annotations

import bisect
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from precis.lexical import Document
from precis.store import keys
from precis.store.db import Db, batch_get, query_first, to_item
from precis.store.records import delete_keys
from precis.store.text_index.items import (
    FAN_IN,
    MAX_SEGMENT_DOCS,
    MERGE_MIN_DOCS,
    MERGE_UNITS,
    STALE_BUILD_S,
    Doc,
    shard_of,
    unpack,
    write,
)
from precis.store.text_index.manifest import Manifest, commit, note, read_manifest, segment_items
from precis.store.text_index.segments import Segment, segment_docs
from precis.store.text_index.texts import session_states, texts_at


def _built_at(segment: str) -> float:
    """When a segment's id was made (epoch seconds): `{level}.{milliseconds}.{random}`."""
    return int(segment.split(".")[1]) / 1000


def _sweep(db: Db, ws: str, manifest: Manifest, now: float) -> int:
    """Delete the items of the segments a compaction replaced and of those whose writer died before it made them
    live (written for longer than any invocation runs); how many segments."""
    live = {s["id"] for s in manifest.segments}
    dead = [s for s in manifest.building if s not in live and now - _built_at(s) > STALE_BUILD_S]
    old = [s for s in manifest.replaced if s not in live]
    for segment in dead + old:
        delete_keys(db, [{"PK": i["PK"], "SK": i["SK"]} for i in segment_items(db, ws, segment, keys_only=True)])
    note(db, ws, "DELETE", "tmp", dead)
    note(db, ws, "DELETE", "old", old)
    return len(dead) + len(old)


def merge(db: Db, ws: str, session_ids: Iterable[str], *, min_docs: int = MERGE_MIN_DOCS) -> int:
    """Merge the fresh shards of `session_ids` that hold `min_docs` messages or more into segments, then compact;
    how many messages were merged."""
    return sum(merge_shard(db, ws, shard, min_docs=min_docs) for shard in sorted({shard_of(s) for s in session_ids}))


def merge_shard(
    db: Db,
    ws: str,
    shard: int,
    *,
    min_docs: int = MERGE_MIN_DOCS,
    attempts: int = 3,
    now: Callable[[], float] = time.time,
) -> int:
    """Merge a fresh shard's units (MERGE_UNITS at most) into a new segment, when they hold `min_docs` messages or
    more: its items, then the manifest and the fresh items' deletes in one transaction; compacts after. How many
    messages were merged (0: too few, or another merge kept winning)."""
    for _ in range(attempts):
        manifest = read_manifest(db, ws)
        fresh = query_first(
            db,
            MERGE_UNITS,
            KeyConditionExpression="PK = :pk",
            ConsistentRead=True,
            ExpressionAttributeValues=to_item({":pk": keys.text_fresh_pk(ws, shard)}),
        )
        if not fresh or sum(int(i["n"]) for i in fresh) < min_docs:
            return 0
        docs, taken = _fresh_docs(db, ws, fresh)
        if not taken:
            return 0
        entry, items = Segment.of(docs, 0).build(ws) if docs else ({}, [])
        _write_segment(db, ws, entry, items)
        if commit(db, ws, manifest, [entry] if docs else [], (), taken):
            compact(db, ws, now=now)
            return len(docs)
        _take_back(db, ws, entry, items)
    return 0


def _write_segment(db: Db, ws: str, entry: Mapping[str, Any], items: Sequence[dict[str, Any]]) -> None:
    """A new segment's items, its id noted in the manifest first (a writer that dies leaves no unknown items)."""
    if items:
        note(db, ws, "ADD", "tmp", [entry["id"]])
        write(db, [{"PutRequest": {"Item": item}} for item in items])


def _take_back(db: Db, ws: str, entry: Mapping[str, Any], items: Sequence[dict[str, Any]]) -> None:
    """Delete the items of a segment that lost its transaction, then its note."""
    if items:
        delete_keys(db, [{"PK": i["PK"]["S"], "SK": i["SK"]["S"]} for i in items])
        note(db, ws, "DELETE", "tmp", [entry["id"]])


def _fresh_docs(db: Db, ws: str, fresh: Sequence[Mapping[str, Any]]) -> tuple[list[Doc], list[Mapping[str, Any]]]:
    """(the docs to merge, the fresh items to take): the docs of the units whose session is live in their incarnation
    and whose texts are all written; the units of deleted sessions and earlier incarnations are taken with no doc.
    A unit whose texts are not all written is left fresh: its request is still writing them, or died and the
    deriver's repair writes them after writing the unit's fresh item again; taken, it would be counted twice (in the
    segment, and fresh again), and a text written here could land after its session's purge."""
    sessions = session_states(db, ws, {i["s"] for i in fresh})
    taken: list[Mapping[str, Any]] = []
    live: list[tuple[Mapping[str, Any], list[Doc]]] = []
    for item in fresh:
        session = sessions.get(item["s"])
        incarnation = (session or {}).get("incarnation") or ""
        if session is None or "deleted_at" in session or item.get("i") not in (None, incarnation):
            taken.append(item)
            continue
        live.append(
            (
                item,
                [
                    Doc(item["s"], int(seq), incarnation, peer, Document.parse(signature, int(length)))
                    for seq, peer, length, signature in unpack(item["z"])
                ],
            )
        )
    by_session: dict[str, list[int]] = {}
    for _, docs in live:
        for d in docs:
            by_session.setdefault(d.session, []).append(d.seq)
    present = {
        (session, int(i["seq"])) for session, seqs in by_session.items() for i in texts_at(db, ws, session, seqs)
    }
    merged: list[Doc] = []
    for item, docs in live:
        if all(d.key in present for d in docs):
            taken.append(item)
            merged += docs
    return merged, taken


def compact(db: Db, ws: str, *, rounds: int = 2, now: Callable[[], float] = time.time) -> int:
    """Merge FAN_IN segments of the lowest level that has as many into one of the next (their messages of deleted
    sessions and earlier incarnations left out), `rounds` times at most, after deleting what dead writers left
    (`_sweep`); how many segments were merged."""
    merged = 0
    for round_ in range(rounds):
        manifest = read_manifest(db, ws)
        if round_ == 0 and _sweep(db, ws, manifest, now()):
            manifest = read_manifest(db, ws)
        by_level: dict[int, list[dict[str, Any]]] = {}
        for segment in manifest.segments:
            by_level.setdefault(int(segment["lv"]), []).append(segment)
        chosen = next(
            (
                sorted(group, key=lambda s: s["id"])[:FAN_IN]
                for level, group in sorted(by_level.items())
                if len(group) >= FAN_IN
                and sum(int(s["n"]) for s in sorted(group, key=lambda s: s["id"])[:FAN_IN]) <= MAX_SEGMENT_DOCS
            ),
            None,
        )
        if chosen is None:
            return merged
        if _replace(db, ws, manifest, chosen, max(int(s["lv"]) for s in chosen) + 1):
            merged += len(chosen)
    return merged


def _replace(
    db: Db,
    ws: str,
    manifest: Manifest,
    chosen: Sequence[Mapping[str, Any]],
    level: int,
    drop: frozenset[tuple[str, int]] = frozenset(),
) -> bool:
    """Replace the segments `chosen` by one of `level` holding their live messages (none: by nothing) but those at
    `drop`'s (session, seq) keys: its items, then the manifest, then their items; False when another merge changed
    the manifest first, or one of them is no longer live in `manifest`. With `drop` and none of them there: True,
    nothing written."""
    live_ids = {s["id"] for s in manifest.segments}
    if any(s["id"] not in live_ids for s in chosen):
        # Another compaction replaced it (a vacuum's later segments are from an earlier manifest): its items may
        # still be there, and its live messages are in the segment that replaced it already.
        return False
    read = [segment_items(db, ws, s["id"]) for s in chosen]
    docs = [d for items in read for d in segment_docs(items)]
    if drop and not any(d.key in drop for d in docs):
        return True
    docs = [d for d in docs if d.key not in drop]
    sessions = session_states(db, ws, {d.session for d in docs})
    live = [
        d
        for d in docs
        if d.session in sessions
        and "deleted_at" not in sessions[d.session]
        and (sessions[d.session].get("incarnation") or "") == d.incarnation
    ]
    entry, items = Segment.of(live, level).build(ws) if live else ({}, [])
    _write_segment(db, ws, entry, items)
    if not commit(db, ws, manifest, [entry] if live else [], [s["id"] for s in chosen], ()):
        _take_back(db, ws, entry, items)
        return False
    delete_keys(db, [{"PK": i["PK"], "SK": i["SK"]} for items_ in read for i in items_])
    note(db, ws, "DELETE", "old", [s["id"] for s in chosen])
    return True


def vacuum(
    db: Db, ws: str, session_id: str, *, time_left: Callable[[], float] = lambda: math.inf, attempts: int = 3
) -> bool:
    """Rewrite each segment holding messages of `session_id` (deleted) without them, so the statistics are again
    exactly the live messages'; whether every one was (out of time, or outrun by merges: ask again)."""
    for _ in range(attempts):
        manifest = read_manifest(db, ws)
        holding = _holding(db, ws, manifest, session_id)
        left = [s for s in manifest.segments if s["id"] in holding]
        if not left:
            return True
        for segment in left:
            if time_left() < 0:
                return False
            if not _replace(db, ws, manifest, [segment], int(segment["lv"])):
                break  # (another merge changed the manifest, or replaced this segment: read it again)
            manifest = read_manifest(db, ws)
    return False


def vacuum_messages(
    db: Db,
    ws: str,
    session_id: str,
    seqs: Iterable[int],
    *,
    time_left: Callable[[], float] = lambda: math.inf,
    attempts: int = 3,
) -> bool:
    """Rewrite the segment holding messages `seqs` of `session_id` (deleted one by one) without them, so the
    statistics are again exactly the live messages'; the segments whose session lists name the session are read,
    only one holding them is rewritten. Whether it is done (out of time, or outrun by merges: ask again)."""
    drop = frozenset((session_id, seq) for seq in seqs)
    for _ in range(attempts):
        manifest = read_manifest(db, ws)
        holding = _holding(db, ws, manifest, session_id)
        outrun = False
        for segment in (s for s in manifest.segments if s["id"] in holding):
            if time_left() < 0:
                return False
            if not _replace(db, ws, manifest, [segment], int(segment["lv"]), drop):
                outrun = True  # (another merge changed the manifest, or replaced this segment: read it again)
                break
            manifest = read_manifest(db, ws)
        if not outrun:
            return True
    return False


def _holding(db: Db, ws: str, manifest: Manifest, session_id: str) -> set[str]:
    """The manifest's segments whose session lists name `session_id`: their headers, then in each the one part of the
    list whose range could hold it (two BatchGetItems a hundred segments, a few KB a segment)."""
    headers = batch_get(db, [{"PK": keys.text_segment_pk(ws, s["id"]), "SK": "H"} for s in manifest.segments])
    parts = []
    for header in headers:
        part = bisect.bisect_right(unpack(header["z"]).get("sf") or [], session_id) - 1
        if part >= 0:
            parts.append({"PK": header["PK"], "SK": f"S{part:05d}"})
    return {i["PK"].rpartition("#XG#")[2] for i in batch_get(db, parts) if session_id in unpack(i["z"])}
