"""Erasing a peer (docs/design.md, "Erasing a peer"): the request, the job's steps (run by `precis.transfer.jobs` on
the table's stream, as an export's) and the receipt. Each step does a bounded amount of work and returns where the
next starts; the job's conditional update makes each exactly once."""

from __future__ import annotations

import time
from typing import Any

from precis.errors import NotFound
from precis.store import erase, transfer
from precis.store.db import Db
from precis.transfer.status import view

# The phases, in order: the peer's messages and membership session by session, the collections, the peer item.
ERASE = erase.ERASE
# The peer's messages session by session; then waiting for their cascades (which rebuild cards of collections about
# the peer: those go after them); the peer's membership; the collections; the peer item.
SESSIONS, SETTLE, MEMBERSHIP, COLLECTIONS, PEER = "sessions", "settle", "membership", "collections", "peer"


def start(db: Db, ws: str, peer_id: str) -> tuple[int, dict[str, Any]]:
    """(HTTP status, the erasure's status): 202 while it runs (started now or before), 200 with its receipt once
    done."""
    job, _ = erase.start_erasure(db, ws, peer_id)
    return (202 if job["status"] == transfer.RUNNING else 200), view(job)


def status(db: Db, ws: str, peer_id: str) -> dict[str, Any]:
    """The erasure of the peer: its progress, or its receipt."""
    job = transfer.read_job(db, ws, erase.erasure_id(ws, peer_id), erase.ERASE)
    if job is None:
        raise NotFound(f"no erasure of peer '{peer_id}' in workspace '{ws}'")
    return view(job)


def step(
    db: Db, job: transfer.JobItem, position: dict[str, Any], counts: dict[str, int]
) -> tuple[dict[str, Any], bool, int]:
    """One bounded step from `position` (counts updated in place); (the next position, done?, parts)."""
    ws, peer = job["PK"].removeprefix("WS#"), position["peer"]
    phase = position.get("phase", SESSIONS)
    if phase == SESSIONS:
        if position.get("vacuum"):  # the session done: its deleted messages out of the index's segments, a page a step
            going = erase.vacuum_page(db, ws, position["vacuum"], int(position.get("from", 0)))
            if going is not None:
                return position | {"from": going}, False, 0
            return {k: v for k, v in position.items() if k not in ("vacuum", "from")}, False, 0
        if position.get("summarize"):  # (a step of its own: a summary cut short is made again by the step run again)
            _summarize(db, ws, position["summarize"])
            return {"peer": peer, "phase": SESSIONS, "after": position["after"]}, False, 0
        current = position.get("session") or erase.next_session(db, ws, peer, position.get("after"))
        if current is None:
            return {"peer": peer, "phase": SETTLE}, False, 0
        sk, session = current  # (its sort key in the peer's partition: a session joined, or one left)
        erased, seq = erase.erase_messages(db, ws, session, peer, int(position.get("seq", 0)))
        _add(counts, "messages", erased)
        if seq is not None:
            moved = {"peer": peer, "phase": SESSIONS, "session": [sk, session], "seq": seq}
            # Nothing deleted (the session's cascades are behind): this invocation yields, the next goes on.
            return (moved | {"wait": True} if not erased else moved), False, 0
        _add(counts, "sessions", 1)  # (counted here, with the step that moves past it: exactly once)
        moved = {"peer": peer, "phase": SESSIONS, "after": sk, "vacuum": session, "from": 0}
        if erase.finish_session(db, ws, session, peer):
            moved["summarize"] = session  # no delete's cascade is left to summarize it: the next step does
        return moved, False, 0
    if phase == SETTLE:
        sessions, after = erase.sessions_page(db, ws, peer, position.get("after"))
        if sessions and erase.still_forgetting(db, ws, sessions):
            return {"peer": peer, "phase": SETTLE, "after": position.get("after"), "wait": True}, False, 0
        if after is not None:
            return {"peer": peer, "phase": SETTLE, "after": after}, False, 0
        return {"peer": peer, "phase": MEMBERSHIP}, False, 0
    if phase == MEMBERSHIP:
        page, after = erase.sessions_page(db, ws, peer, None)  # (each page left is gone: always the first)
        for session in dict.fromkeys(page):  # (a session left and joined again is named twice)
            erase.leave_session(db, ws, session, peer)
        return {"peer": peer, "phase": MEMBERSHIP if after is not None else COLLECTIONS}, False, 0
    if phase == COLLECTIONS:
        current = position.get("collection")
        if current is not None:
            _, conclusions, done = erase.erase_collection(db, ws, *current)
            _add(counts, "conclusions", conclusions)
            if not done:
                return position, False, 0
            _add(counts, "collections", 1)
        queue = [c for c in position.get("queue", []) if c != current]
        after = position.get("after")
        if not queue and position.get("more", True):
            found, after = erase.collections_page(db, ws, peer, after)
            queue = [list(c) for c in found]
            more = after is not None
        else:
            more = position.get("more", True)
        if queue:
            return (
                {
                    "peer": peer,
                    "phase": COLLECTIONS,
                    "collection": queue[0],
                    "queue": queue,
                    "after": after,
                    "more": more,
                },
                False,
                0,
            )
        if more:
            return {"peer": peer, "phase": COLLECTIONS, "after": after}, False, 0
        return {"peer": peer, "phase": PEER}, False, 0
    erase.remove_peer(db, ws, peer, job["id"])
    _add(counts, "peers", 1)
    _announce(db, ws, job, counts)
    return {}, True, 0  # the receipt names no one: its position is cleared


def _summarize(db: Db, ws: str, session_id: str) -> None:
    """The session summarized again from what is left (what its deletes' cascades do when no erasure marks it), its
    summaries announced as any."""
    from precis.events import publish_configured
    from precis.settings import get_settings
    from precis.summaries.runner.session import summarize_under_lease

    publish_configured(db, summarize_under_lease(db, get_settings(), ws, session_id).events)


def _add(counts: dict[str, int], kind: str, n: int) -> None:
    counts[kind] = counts.get(kind, 0) + n


def _announce(db: Db, ws: str, job: transfer.JobItem, counts: dict[str, int]) -> None:
    """`peer.deleted`: the erasure id and its counts (not the peer: an event is stored where it is delivered)."""
    from precis.events import peer_deleted, publish_configured

    publish_configured(
        db, [peer_deleted(ws, job["id"], started=job["created_at"], counts=dict(counts), now=time.time())]
    )
