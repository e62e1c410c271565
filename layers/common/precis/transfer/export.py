"""An export's step: the lines that follow the job's position, up to one part, written as one object.

The walk is a function of the position alone (peers by id, sessions by id and their messages by seq, collections by
key and their conclusions by id): a step run again from the same position writes the same part under the same name.
Each session's messages are those up to its last seq when its line was written, so a session written to meanwhile
is exported as it was then.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from precis.errors import NotFound, Throttled
from precis.store import transfer
from precis.store.db import Db
from precis.store.messages import base_of, is_placeholder, read_from, read_tail, with_bodies
from precis.store.resources import session_item, workspace_item
from precis.store.scopes import PREFIX as SCOPE_PREFIX
from precis.transfer import lines

PART_LINES = 2_000  # lines per part (a message is one line): a part is read, built and written well inside a step
PART_BYTES = 4_000_000
PAGE = 100  # items per query


def walk(
    db: Db, ws: str, position: dict[str, Any], seen: dict[str, int] | None = None
) -> Iterator[tuple[dict[str, Any] | None, dict[str, Any]]]:
    """(line, the position after it) from `position` on (`{}`: the start) to the end line; the line is None for what
    is passed over (a deleted session, a scope's collection), so that a step's budget bounds those too. `seen` gets
    each session's count of deleted messages as read before its messages are."""
    stage = position.get("stage", "head")
    if stage == "head":
        workspace = workspace_item(db, ws)
        if workspace is None:
            raise NotFound(f"workspace '{ws}' not found")
        yield lines.header(dict(workspace)), {"stage": "peers"}
        stage, position = "peers", {}
    if stage == "peers":
        after = position.get("after")
        while True:
            peers = transfer.peers_after(db, ws, after, PAGE)
            for peer in peers:
                after = peer["id"]
                yield lines.peer(dict(peer)), {"stage": "peers", "after": after}
            if len(peers) < PAGE:
                break
        stage, position = "sessions", {}
    if stage == "sessions":
        yield from _sessions(db, ws, position, seen)
        stage, position = "collections", {}
    if stage == "collections":
        yield from _collections(db, ws, position)
    yield {"kind": lines.END}, {"stage": "done"}


def _sessions(
    db: Db, ws: str, position: dict[str, Any], seen: dict[str, int] | None
) -> Iterator[tuple[dict[str, Any] | None, dict[str, Any]]]:
    after, current = position.get("after"), position.get("open")
    seq, last = int(position.get("seq", 0)), int(position.get("last", 0))
    while True:
        if current is None:
            found = transfer.sessions_after(db, ws, after, 1)
            if not found:
                return
            item = found[0]
            if "deleted_at" in item:  # a deleted session's tombstone: nothing of it is exported
                after = item["id"]
                yield None, {"stage": "sessions", "after": after}  # (a step's budget counts what it skips)
                continue
            current, seq = item["id"], 0
            last = read_tail(db, ws, current).seq
            members = [dict(m) for m in transfer.session_members(db, ws, current)]
            summaries, parts = transfer.session_summaries(db, ws, current)
            summary_lines = [
                lines.summary(dict(s), [dict(p) for p in parts[t]] if t in parts else None)
                for t, s in sorted(summaries.items())
                if not s.get("job_through_seq") and int(s["covers_seq"]) <= last
            ]
            derived = transfer.derived_through(db, ws, current)
            line = lines.session(dict(item), last, members, summary_lines, derived)
            yield line, {"stage": "sessions", "after": after, "open": current, "seq": 0, "last": last}
        session = session_item(db, ws, current)
        if seen is not None and session is not None:
            seen.setdefault(current, int(session.get("forgotten", 0)))  # read before its messages are (`step`)
        base = base_of(session)
        while seq < last:
            read = read_from(db, ws, current, seq + 1, limit=PAGE, base=base, gaps=True)
            items = [m for m in read if m["seq"] <= last]
            if not items:
                break
            views = iter(with_bodies(db, [m for m in items if not is_placeholder(m)], ws, current))
            for place in items:
                seq = place["seq"]
                at = {"stage": "sessions", "after": after, "open": current, "seq": seq, "last": last}
                if is_placeholder(place):  # a deleted message: its place only (a clone's inherited one not counted)
                    inherited = transfer.inherited(ws, current, dict(place))
                    yield lines.forgotten({**place, "inherited": inherited}, current), at
                else:
                    yield lines.message(next(views)), at
        after, current = current, None


def _collections(db: Db, ws: str, position: dict[str, Any]) -> Iterator[tuple[dict[str, Any] | None, dict[str, Any]]]:
    after = tuple(position["after"]) if position.get("after") else None
    current = tuple(position["open"]) if position.get("open") else None
    last_id = position.get("c")
    while True:
        if current is None:
            found = transfer.collections_after(db, ws, after, 1)
            if not found:
                return
            if found[0][0].startswith(SCOPE_PREFIX):  # a scope's copies: scopes are not exported
                after = found[0]
                yield None, _at(after, None, None)
                continue
            current, last_id = found[0], None
            card = transfer.card_item(db, ws, *current)
            yield lines.collection(*current, card), _at(after, current, None)
        while True:
            items = transfer.conclusions_after(db, ws, current[0], current[1], last_id, PAGE)
            for item in items:
                last_id = item["id"]
                yield lines.conclusion(item), _at(after, current, last_id)
            if len(items) < PAGE:
                break
        after, current = current, None


def _at(after: Any, current: Any, last_id: str | None) -> dict[str, Any]:
    return {
        "stage": "collections",
        "after": list(after) if after else None,
        "open": list(current) if current else None,
        "c": last_id,
    }


def step(db: Db, job: transfer.JobItem, position: dict[str, Any], counts: dict[str, int]) -> tuple[dict, bool, int]:
    """Write the next part from `position` (counting its lines into `counts`): (the position after it, whether the
    export is complete, the parts written so far). A message deleted before the part is written is not in it: when a
    session of the part counts more deletes once the part is stored than before its messages were read, that version
    of the part is deleted and the part made again (a part stored before a delete answered is the user's copy)."""
    ws = job["PK"].removeprefix("WS#")
    parts = int(job["parts"])
    for _ in range(_REWRITES):
        seen: dict[str, int] = {}
        tally = dict(counts)
        body, reached = _part(db, ws, position, tally, seen)
        if not body:
            break
        version = transfer.put_part(db, ws, job["id"], parts + 1, b"".join(body))
        if transfer.forgotten_counts(db, ws, sorted(seen)) == seen:
            counts.clear()
            counts.update(tally)
            return reached, reached.get("stage") == "done", parts + 1
        transfer.delete_part_version(db, ws, job["id"], parts + 1, version)  # it may hold what was just deleted
    else:
        raise Throttled(f"messages of workspace '{ws}' kept being deleted while its export read them; retried later")
    counts.update(tally)
    return reached, reached.get("stage") == "done", parts


_REWRITES = 5  # a part made again this often before the step is left to the stream's retry


def _part(
    db: Db, ws: str, position: dict[str, Any], counts: dict[str, int], seen: dict[str, int]
) -> tuple[list[bytes], dict[str, Any]]:
    body: list[bytes] = []
    size, reached, passed = 0, position, 0
    for line, after in walk(db, ws, position, seen):
        if line is None:
            passed, reached = passed + 1, after
            if len(body) + passed >= PART_LINES:
                break
            continue
        kind = line["kind"]
        if kind in lines.KINDS:
            counts[kind] = counts.get(kind, 0) + 1
        if kind == lines.END:
            line["counts"] = dict(sorted(counts.items()))
        text = lines.dump(line)
        body.append(text)
        size, reached = size + len(text), after
        if len(body) + passed >= PART_LINES or size >= PART_BYTES:
            break
    return body, reached
