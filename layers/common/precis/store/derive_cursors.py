"""The deriver's cursors: one item per (session, sender) in the session's partition (`keys.derive_cursor`), so a
purge removes it with the session.

A cursor holds `through_seq` (every message of the sender up to it is derived, or was not to be), `derived` (how
many), while a batch waits `pending`/`due_at` (the ByDue index), and during a derivation the stored `job` and the
`applied` set of its written chunks. Every write but the failure mark is conditional on the cursor being where the
deriver saw it (`seen`: the cursor as read, or None when there was none) or on the job's token: a write that finds
it moved raises `Moved`, and the deriver reads it again.
"""

from __future__ import annotations

import heapq
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from botocore.exceptions import ClientError

from precis.store import keys
from precis.store.db import (
    Db,
    batch_get,
    error_code,
    from_item,
    mark_applied,
    query_all,
    raise_if_throttled,
    to_item,
)
from precis.store.resources import PeerItem, SessionItem, WorkspaceItem, as_peer, as_session, as_workspace

NOTHING_DUE = "~"  # due_at of a cursor with nothing waiting: sorts after every timestamp
# due_at of a cursor applying a job with no batch waiting: after every timestamp (the flush never takes it), before
# NOTHING_DUE, so that a workspace's cursors with work come first in the ByDue index (the queue status reads those).
RUNNING = "}"
WORKSPACE_READ_MAX = 1_000  # cursors one workspace-wide queue status reads (docs/design.md, "Limits")
# A cursor's place in the ByDue index is one of DUE_SHARDS partitions of its workspace, by session: every derivation
# writes its cursor (and the index's copy of it, 1-6 KB), so one partition for the workspace would cap it at about
# 1,000 / 5.75 WRU a message ≈ 170 messages/s in posts of one (`make bench cost`). Dreams keep the workspace's own.
DUE_SHARDS = 16

# What every write of a cursor sets, so that whichever writes it first makes a whole cursor: whose it is (and its
# place in the ByDue index), and its counts from zero.
_WHO = "due_ws = :ws, sender = :sender, kind = :kind, session_id = :s"
_FROM_ZERO = "through_seq = if_not_exists(through_seq, :zero), derived = if_not_exists(derived, :zero)"


class Target(Protocol):
    @property
    def workspace(self) -> str: ...
    @property
    def session(self) -> str: ...
    @property
    def sender(self) -> str: ...


class Moved(Exception):
    """The cursor changed under us (another deriver moved it): read it again."""


def _key(target: Target) -> dict[str, Any]:
    return to_item(keys.derive_cursor(target.workspace, target.session, target.sender))


def due_partition(ws: str, session_id: str) -> str:
    """The ByDue index partition of a session's cursors."""
    return f"{ws}#{zlib.crc32(session_id.encode('utf-8', 'surrogatepass')) % DUE_SHARDS:02d}"


def due_partitions(ws: str) -> list[str]:
    """Every ByDue partition a workspace's cursors and dreams may be in: its own (dreams, and cursors an earlier
    release wrote) and its cursors' shards."""
    return [ws, *(f"{ws}#{shard:02d}" for shard in range(DUE_SHARDS))]


def _who(target: Target) -> dict[str, Any]:
    return {
        ":ws": due_partition(target.workspace, target.session),
        ":sender": target.sender,
        ":kind": "derive_cursor",
        ":s": target.session,
        ":zero": 0,
    }


def _at(seen: dict[str, Any] | None) -> tuple[str, dict[str, Any]]:
    """A condition that the cursor is still where `seen` saw it (absent, or at its through_seq with no job, and no
    message deleted since: `forgets`, which a message delete adds to, so a derivation that read it stores nothing)."""
    if seen is None:
        return "attribute_not_exists(PK)", {}
    condition = "through_seq = :seen AND attribute_not_exists(job)"
    if "forgets" not in seen:
        return f"{condition} AND attribute_not_exists(forgets)", {":seen": seen.get("through_seq", 0)}
    return f"{condition} AND forgets = :forgets", {":seen": seen.get("through_seq", 0), ":forgets": seen["forgets"]}


def _update(
    db: Db, target: Target, update: str, condition: str, values: dict[str, Any], names: dict[str, str] | None = None
) -> None:
    request: dict[str, Any] = {
        "TableName": db.table,
        "Key": _key(target),
        "UpdateExpression": update,
        "ConditionExpression": condition,
        "ExpressionAttributeValues": to_item(values),
    }
    if names:
        request["ExpressionAttributeNames"] = names
    try:
        db.client.update_item(**request)
    except ClientError as exc:
        raise_if_throttled(exc)
        if error_code(exc) == "ConditionalCheckFailedException":
            raise Moved() from None
        raise


def read_session(
    db: Db, ws: str, session_id: str
) -> tuple[SessionItem | None, WorkspaceItem | None, dict[str, dict[str, Any]]]:
    """(session, workspace, the session's cursors by sender): one BatchGetItem and one Query (strongly consistent)."""
    wanted = [keys.session(ws, session_id), keys.workspace(ws)]
    found = {(i["PK"], i["SK"]): i for i in batch_get(db, wanted)}
    session, workspace = (found.get((k["PK"], k["SK"])) for k in wanted)
    return (
        None if session is None else as_session(session),
        None if workspace is None else as_workspace(workspace),
        {c["sender"]: c for c in cursors(db, ws, session_id) if c.get("sender")},
    )


def read_peers(db: Db, ws: str, peer_ids: Iterable[str]) -> dict[str, PeerItem]:
    """The peer items of `peer_ids` that exist, by id (strongly consistent)."""
    return {i["SK"].removeprefix("PEER#"): as_peer(i) for i in batch_get(db, [keys.peer(ws, p) for p in peer_ids])}


def clear_due(db: Db, target: Target, seen: dict[str, Any] | None) -> None:
    """Nothing waits any more."""
    condition, values = _at(seen)
    _update(db, target, "SET due_at = :none, pending = :zero", condition, {**values, ":none": NOTHING_DUE, ":zero": 0})


def wait(db: Db, target: Target, seen: dict[str, Any] | None, incarnation: str, due_at: str, pending: int) -> None:
    """`pending` messages wait for their batch until `due_at` (the schedule's flush comes back for them)."""
    condition, values = _at(seen)
    _update(
        db,
        target,
        f"SET due_at = :due, pending = :n, incarnation = :inc, {_WHO}, {_FROM_ZERO}",
        condition,
        {**values, **_who(target), ":inc": incarnation, ":due": due_at, ":n": pending},
    )


def store_job(db: Db, target: Target, seen: dict[str, Any] | None, incarnation: str, job: dict[str, Any]) -> None:
    """Step 1: the engine's answer, stored before anything of it is written."""
    condition, values = _at(seen)
    waiting = str((seen or {}).get("due_at", NOTHING_DUE))  # a waiting batch's time stays: the flush retries a job
    _update(
        db,
        target,
        f"SET job = :job, due_at = :due, incarnation = :inc, {_WHO}, {_FROM_ZERO}",
        condition,
        {**values, **_who(target), ":inc": incarnation, ":job": job, ":due": min(waiting, RUNNING)},
    )


def applied_mark(db: Db, target: Target, token: str, name: str) -> dict[str, Any]:
    """Step 2: the transaction action that records chunk `name` of job `token` as written (at most once)."""
    return mark_applied(db, _key(target), token, name)


def finish(
    db: Db,
    target: Target,
    incarnation: str,
    to_seq: int,
    count: int,
    now: str,
    *,
    seen: dict[str, Any] | None = None,
    token: str | None = None,
) -> None:
    """Step 3: move past `count` messages to `to_seq` and drop the job: on condition the job `token` is still the one
    stored, or (no job: messages nobody observes) that the cursor is where `seen` saw it. `observed` on the cursor
    says which (a job's messages were derived: its unit's catching up is a `queue.empty`)."""
    if token is not None:
        condition, values, names = "job.#token = :token", {":token": token}, {"#token": "token"}
    else:
        (condition, values), names = _at(seen), None
    # (a move past no message of the sender's says nothing of whether they are observed: `observed` stays)
    observed = {":obs": token is not None} if token is not None or count else {}
    _update(
        db,
        target,
        "SET through_seq = :to, derived = if_not_exists(derived, :zero) + :n, due_at = :none, "
        f"pending = :zero, updated_at = :now, incarnation = :inc, {'observed = :obs, ' if observed else ''}{_WHO} "
        "REMOVE job, applied",
        condition,
        {
            **values,
            **_who(target),
            **observed,
            ":inc": incarnation,
            ":to": to_seq,
            ":n": count,
            ":none": NOTHING_DUE,
            ":now": now,
        },
        names,
    )


def mark_due(db: Db, target: Target, due_at: str) -> str | None:
    """Make the cursor due at `due_at` whatever it holds (after a failed derivation); the error code when the write
    failed (best effort), else None."""
    try:
        db.client.update_item(
            TableName=db.table,
            Key=_key(target),
            UpdateExpression=f"SET due_at = :due, {_WHO}, {_FROM_ZERO}",
            ExpressionAttributeValues=to_item({**_who(target), ":due": due_at}),
        )
    except ClientError as exc:
        return error_code(exc)
    return None


def hold(db: Db, target: Target, due_at: str, new: int) -> str | None:
    """Leave the cursor where it is, due at `due_at`, counting `new` more messages as pending (a workspace whose token
    budget is spent: memory.token_budget); the error code when the write failed (best effort), else None. A replayed
    record counts twice until the cursor moves: the queue status may say too much, never too little."""
    try:
        db.client.update_item(
            TableName=db.table,
            Key=_key(target),
            UpdateExpression=f"SET due_at = :due, pending = if_not_exists(pending, :zero) + :n, {_WHO}, {_FROM_ZERO}",
            ExpressionAttributeValues=to_item({**_who(target), ":due": due_at, ":n": new, ":zero": 0}),
        )
    except ClientError as exc:
        return error_code(exc)
    return None


def due(db: Db, workspaces: Iterable[str], now: str) -> list[tuple[str, str, str]]:
    """(workspace, session, sender) of the cursors whose waiting batch (or failed derivation) is due by `now`."""
    found = []
    for ws in workspaces:
        items = [
            item
            for partition in due_partitions(ws)
            for item in query_all(
                db,
                IndexName="ByDue",
                KeyConditionExpression="due_ws = :ws AND due_at <= :now",
                ExpressionAttributeValues=to_item({":ws": partition, ":now": now}),
            )
        ]
        found += [
            (ws, i["session_id"], i["sender"])
            for i in items
            if i.get("kind", "derive_cursor") == "derive_cursor" and i.get("session_id")
        ]
    return found


def cursors(db: Db, ws: str, session_id: str) -> list[dict[str, Any]]:
    """A session's cursors (strongly consistent); a workspace's are read bounded (`workspace_cursors`)."""
    return query_all(
        db,
        KeyConditionExpression="PK = :pk AND begins_with(SK, :p)",
        ConsistentRead=True,
        ExpressionAttributeValues=to_item({":pk": keys.session_pk(ws, session_id), ":p": "DERIVE#"}),
    )


def workspace_cursors(db: Db, ws: str, limit: int = WORKSPACE_READ_MAX) -> tuple[list[dict[str, Any]], str | None]:
    """A workspace's derive cursors and dreams (the ByDue index) in its order, those with work first (due or waiting,
    then running, then idle), at most `limit` of them and only what the queue status counts; with the `due_at` of the
    first one left unread (None: none was), which says whether work may lie beyond (anything before NOTHING_DUE)."""
    # The partitions merged in due_at order, each read a page at a time (8 items, then twice as many each time): the
    # items read are those kept plus at most a page beyond in each partition, whatever the workspace holds.
    streams = [_ByDue(db, partition) for partition in due_partitions(ws)]
    heap = [(item.get("due_at", NOTHING_DUE), n, item) for n, stream in enumerate(streams) if (item := stream.next())]
    heapq.heapify(heap)
    found: list[dict[str, Any]] = []
    while heap and len(found) <= limit:
        _due, n, item = heapq.heappop(heap)
        found.append(item)
        if (following := streams[n].next()) is not None:
            heapq.heappush(heap, (following.get("due_at", NOTHING_DUE), n, following))
    beyond = found[limit].get("due_at", NOTHING_DUE) if len(found) > limit else None
    return found[:limit], beyond


class _ByDue:
    """One ByDue partition's items in due_at order, read a page at a time as they are asked for."""

    def __init__(self, db: Db, partition: str):
        self.db, self.partition = db, partition
        self.buffer: list[dict[str, Any]] = []
        self.start: dict[str, Any] | None = None
        self.done, self.page = False, 8

    def next(self) -> dict[str, Any] | None:
        if not self.buffer and not self.done:
            request: dict[str, Any] = {
                "TableName": self.db.table,
                "IndexName": "ByDue",
                "KeyConditionExpression": "due_ws = :ws",
                "ExpressionAttributeValues": to_item({":ws": self.partition}),
                "Limit": self.page,
                # not the job's conclusions, nor the applied set: the counts only (capacity is the whole item's)
                "ProjectionExpression": (
                    "session_id, sender, kind, observer, derived, pending, due_at, job.#token, job.#count"
                ),
                "ExpressionAttributeNames": {"#token": "token", "#count": "count"},
            }
            if self.start:
                request["ExclusiveStartKey"] = self.start
            out = self.db.client.query(**request)
            self.buffer = [from_item(i) for i in out["Items"]]
            self.start = out.get("LastEvaluatedKey")
            self.done, self.page = not self.start, min(self.page * 2, 512)
        return self.buffer.pop(0) if self.buffer else None


def forget_actions(db: Db, ws: str, session_id: str, seq: int, sender: str) -> list[dict[str, Any]]:
    """Transaction actions for deleting messages of `sender` up to seq `seq` (the newest deleted): every cursor of the
    session not past it counts the delete (`forgets`: a derivation that read a message fails its next write, reads
    again and skips it) and drops a stored job that may hold what was drawn from it (the job is derived again without
    it); the sender's cursor is made when there is none, for a derivation that read a message before any cursor
    existed. One consistent Query of the session's cursors (one per sender)."""
    found = {c["sender"]: c for c in cursors(db, ws, session_id) if c.get("sender")}
    actions: list[dict[str, Any]] = []
    for peer in sorted(set(found) | {sender}):
        cursor = found.get(peer)
        if cursor is not None and int(cursor.get("through_seq", 0)) >= seq:
            continue  # derived past it: what it drew is found through the session's provenance
        target = _Sender(ws, session_id, peer)
        update = f"SET due_at = if_not_exists(due_at, :none), {_WHO}, {_FROM_ZERO} ADD forgets :one"
        values = {**_who(target), ":none": NOTHING_DUE, ":one": 1}
        names = None
        if cursor is None:
            condition = "attribute_not_exists(PK)"
        elif cursor.get("job"):
            update += " REMOVE job, applied"
            condition, values, names = (
                "job.#token = :token",
                {**values, ":token": cursor["job"]["token"]},
                {"#token": "token"},
            )
        else:
            condition = "attribute_exists(PK) AND attribute_not_exists(job)"
        action: dict[str, Any] = {
            "TableName": db.table,
            "Key": _key(target),
            "UpdateExpression": update,
            "ConditionExpression": condition,
            "ExpressionAttributeValues": to_item(values),
        }
        if names:
            action["ExpressionAttributeNames"] = names
        actions.append({"Update": action})
    return actions


@dataclass(frozen=True)
class _Sender:
    workspace: str
    session: str
    sender: str
