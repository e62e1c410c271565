"""GET /queue/status: the background work still to do, counted as Precis does it (docs/design.md, "What the SDK sees").

A work unit is a message to derive (per sender; messages of an unobserved sender count as done once the deriver has
passed them) or a summary that is due and not yet written. For one session the count is exact, answered flat with
`sessions: null` as Honcho does: the session's cursors and the messages after them are read (strongly consistent), so a
message just posted counts as pending at once. For a whole workspace the deriver's cursors are summed (the ByDue index):
work the deriver has not yet seen (a few hundred milliseconds of stream delay) is not counted there, and summaries are
counted per session only. Dreams count in the workspace's totals while due or running: one armed and waiting for its
collection to be idle (an hour) is not work a client waiting for the queue to empty should wait for.

Both reads are bounded whatever the corpus (docs/design.md, "Limits"): one session's reads at most SESSION_READ_MAX
messages and counts those past them as pending (an overestimate: the SDK polls until nothing is pending, so the
count may say too much, never too little); a workspace's reads at most `WORKSPACE_READ_MAX` cursors, those with work
first, and says `sessions_capped` (ext) when there were more: its map and its completed count then leave out idle
sessions, and pending is at least 1 if work may lie among those unread.

A workspace whose monthly token budget is spent says `paused: "token_budget"` (ext): its pending work waits for the
next month or a larger budget (memory.token_budget); one Query of the month's usage, only when a budget is set.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from precis.errors import NotFound
from precis.memory import token_budget
from precis.store import messages, resources
from precis.store.db import Db
from precis.store.derive_cursors import NOTHING_DUE, cursors, workspace_cursors
from precis.store.resources import MemberItem, WorkspaceItem, require_workspace

SESSION_READ_MAX = 1_000  # messages one session's status reads past its least advanced cursor (whole items' capacity)


def _units(total_done: int, in_progress: int, pending: int) -> dict[str, int]:
    return {
        "total_work_units": total_done + in_progress + pending,
        "completed_work_units": total_done,
        "in_progress_work_units": in_progress,
        "pending_work_units": pending,
    }


def _observed_by(observer: str | None, members: Mapping[str, MemberItem], sender: str | None) -> bool:
    """Whether `observer` derives from `sender`'s messages here (itself, or a member observing others)."""
    if observer is None or observer == sender:
        return True
    member = members.get(observer)
    return member is not None and member.get("observe_others") is True


def _session_status(
    db: Db, ws: str, session_id: str, observer: str | None, sender: str | None, workspace: WorkspaceItem
) -> dict[str, int]:
    session = resources.session_item(db, ws, session_id)
    if session is None or "deleted_at" in session:
        raise NotFound(f"session '{session_id}' not found in workspace '{ws}'")
    by_sender = {c["sender"]: c for c in cursors(db, ws, session_id) if c.get("sender")}
    members = resources.members(db, ws, session_id)
    # Messages after the least advanced cursor (a sender the deriver has not met yet has messages after it too).
    # A clone's inherited messages were derived in its parent: its senders start at its own point.
    inherited = int(session.get("derive_from", 1)) - 1
    start = min((int(c.get("through_seq", 0)) for c in by_sender.values()), default=inherited) + 1
    start = max(start, inherited + 1)
    pending = in_progress = 0
    read = messages.senders_from(db, ws, session_id, start, limit=SESSION_READ_MAX)
    if len(read) == SESSION_READ_MAX:  # a backlog past what one request reads: the rest count as pending
        pending += max(0, messages.read_tail(db, ws, session_id).seq - int(read[-1]["seq"]))
    for m in read:
        peer = m.get("peer_id")
        if m.get("kind") != "message" or (sender and peer != sender) or not _observed_by(observer, members, peer):
            continue
        cursor = by_sender.get(peer) or {}
        if m["seq"] <= max(int(cursor.get("through_seq", 0)), inherited):
            continue
        job = cursor.get("job") or {}
        if job and m["seq"] <= int(job.get("to_seq", 0)):
            in_progress += 1
        else:
            pending += 1
    done = sum(
        int(c.get("derived", 0))
        for p, c in by_sender.items()
        if (not sender or p == sender) and _observed_by(observer, members, p)
    )
    if not sender and not observer:
        # the summary strategies: only this route's requests pay for them
        from precis.summaries.due import summaries_due

        pending += summaries_due(db, ws, session_id, session, workspace)
    return _units(done, in_progress, pending)


def queue_status(
    db: Db, ws: str, *, observer_id: str | None = None, sender_id: str | None = None, session_id: str | None = None
) -> dict[str, Any]:
    workspace = require_workspace(db, ws)
    for peer_id in {p for p in (observer_id, sender_id) if p}:
        if not resources.peer_exists(db, ws, peer_id):
            raise NotFound(f"peer '{peer_id}' not found in workspace '{ws}'")
    # (ext) a workspace whose monthly token budget is spent: its derivation waits (memory.token_budget)
    spent = token_budget.budget_of(db, workspace, datetime.now(UTC).date()).paused
    paused = {"paused": token_budget.PAUSED} if spent else {}
    if session_id is not None:
        # Honcho's shape for one session: its counts, flattened, and no per-session map.
        return {**_session_status(db, ws, session_id, observer_id, sender_id, workspace), "sessions": None} | paused
    sessions: dict[str, list[int]] = {}
    dreams = [0, 0, 0]
    now = datetime.now(UTC).isoformat()
    found, beyond = workspace_cursors(db, ws)
    for cursor in found:
        if cursor.get("kind") == "dream":  # a dream due or running: one work unit of its observer's
            due = cursor.get("job") or cursor.get("due_at", "~") <= now
            if due and not sender_id and observer_id in (None, cursor.get("observer")):
                dreams[1 if cursor.get("job") else 2] += 1
            continue
        sender = cursor.get("sender")
        if sender_id and sender != sender_id:
            continue
        if observer_id and observer_id != sender:
            continue  # a workspace-wide count by observer counts its own messages; a session's counts the rest too
        job = cursor.get("job") or {}
        counts = sessions.setdefault(cursor["session_id"], [0, 0, 0])
        counts[0] += int(cursor.get("derived", 0))
        counts[1] += int(job.get("count", 0)) if job else 0
        counts[2] += int(cursor.get("pending", 0))
    # Honcho's shape: each session's counts name it, and a workspace with none has no map (null, not {}).
    per_session = {s: {"session_id": s, **_units(*c)} for s, c in sorted(sessions.items())}
    total = [sum(c[i] for c in sessions.values()) + dreams[i] for i in range(3)]
    if beyond is not None and beyond < NOTHING_DUE and total[1] + total[2] == 0:
        total[2] = 1  # work may lie among the cursors not read: never say the queue is empty when it may not be
    answer = {**_units(*total), "sessions": per_session or None}
    if beyond is not None:
        answer["sessions_capped"] = True  # (ext) more cursors than one request reads: idle sessions are left out
    return answer | paused
