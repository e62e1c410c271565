"""Deleting a workspace or a session, and removing a deleted session's data: by keys only, resumably, and only for
the incarnation that was deleted.

The stream delivers the delete (a MODIFY of the session item carrying `deleted_at` and the `incarnation`) at
least once, maybe long after a newer incarnation of the same id exists: a purge whose incarnation is no longer
the session item's does nothing. What it removes: the conclusions derived from the session (with their vectors,
dedupe keys and pointers), every item of the session's partition but the fence (messages, summaries, members and
their reverse items), the incarnation's large bodies and summary audit records in S3 (all
versions: the bucket is versioned), then it marks the session item `purged_at`. The session item and the fence stay
as a tombstone until the id is created again (store.resources), or go at once when the workspace is gone.

A purge that runs out of time stops between pages and touches the session item: the new MODIFY record starts the
next invocation where this one stopped, without spending one of the stream's retries.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError

from precis.errors import Conflict, Throttled
from precis.store import keys, leases
from precis.store.conclusions import delete_collections, purge_session_conclusions
from precis.store.db import Db, cancellation_codes, each, from_item, query_all, to_item, transact
from precis.store.messages import tail_seq
from precis.store.records import delete_keys, delete_versions, utcnow
from precis.store.resources import (
    DELETE_LEASE_S,
    partition_items,
    read_session_item,
    request_purge,
    require_session,
    require_workspace,
    update_deleted_session,
)

PAGE = 1000  # keys per query page: one page's deletes take well under the margin
MARGIN_S = 10.0  # stop when less than this is left of the invocation
_pool = ThreadPoolExecutor(max_workers=8)


@dataclass(frozen=True)
class PurgeResult:
    done: bool  # False: stopped for time; a new stream record continues it
    deleted_items: int
    deleted_objects: int


def purge_session(
    db: Db,
    ws: str,
    session_id: str,
    incarnation: str | None,
    *,
    time_left: Callable[[], float] = lambda: math.inf,
    page_size: int = PAGE,
) -> PurgeResult:
    """Remove what incarnation `incarnation` of the session left; a no-op for any other incarnation."""
    session = read_session_item(db, ws, session_id)
    if session is None or session.get("incarnation") != incarnation or "deleted_at" not in session:
        return PurgeResult(True, 0, 0)  # gone, created again, or never deleted: nothing of `incarnation` to remove
    if session.get("purged_at"):
        return PurgeResult(True, 0, 0)  # done already (a replayed record); asking again clears purged_at first
    if copying_clones(db, ws, session_id, incarnation):
        # A clone still reads its inherited messages from here: the end of its copy asks for this purge again.
        return PurgeResult(False, 0, 0)
    fence = keys.fence(ws, session_id, session["fence_seq"]) if session.get("fence_seq") else None
    # The conclusions drawn from the session go first: their DERIVED# items, which name them, are in the partition.
    deleted, done = purge_session_conclusions(db, ws, session_id, time_left=lambda: time_left() - MARGIN_S)
    if done:
        from precis.store import search

        indexed, done = search.purge_session(db, ws, session_id, incarnation, time_left=lambda: time_left() - MARGIN_S)
        deleted += indexed
    if not done:
        request_purge(db, ws, session_id, incarnation)
        return PurgeResult(False, deleted, 0)
    request: dict[str, Any] = {
        "TableName": db.table,
        "KeyConditionExpression": "PK = :pk",
        "Limit": page_size,
        "ProjectionExpression": "PK, SK",
        "ConsistentRead": True,
        "ExpressionAttributeValues": {":pk": {"S": keys.session_pk(ws, session_id)}},
    }
    while True:
        out = db.client.query(**request)
        found = [k for k in map(from_item, out["Items"]) if k != fence]
        # A member has a reverse item in the peer's partition (a peer's session list).
        found += [
            keys.peer_session(ws, k["SK"].removeprefix("PEER#"), session_id)
            for k in found
            if k["SK"].startswith("PEER#")
        ]
        # A peer that left has a note of it in its partition too (store.resources.remove_members).
        found += [
            keys.peer_left(ws, k["SK"].removeprefix("LEFT#"), session_id) for k in found if k["SK"].startswith("LEFT#")
        ]
        deleted += _delete_parallel(db, found)
        if "LastEvaluatedKey" not in out:
            break
        request["ExclusiveStartKey"] = out["LastEvaluatedKey"]
        if time_left() < MARGIN_S:
            request_purge(db, ws, session_id, incarnation)
            return PurgeResult(False, deleted, 0)
    objects = sum(
        delete_versions(db, prefix)
        for prefix in (
            keys.body_prefix(ws, session_id, incarnation or "_"),
            keys.audit_prefix(ws, session_id, incarnation or "_"),
        )
    )
    _mark_purged(db, ws, session_id, incarnation)
    if (
        db.client.get_item(
            TableName=db.table, Key=to_item(keys.workspace(ws)), ConsistentRead=True, ProjectionExpression="PK"
        ).get("Item")
        is None
    ):
        # The workspace was deleted meanwhile (it removes only tombstones already purged): nothing can reuse the id.
        delete_keys(db, [k for k in (fence, keys.session(ws, session_id)) if k])
    return PurgeResult(True, deleted, objects)


def _delete_parallel(db: Db, key_list: list[dict[str, str]]) -> int:
    chunks = [key_list[i : i + 25] for i in range(0, len(key_list), 25)]
    return sum(each(_pool, lambda chunk: delete_keys(db, chunk), chunks))


def _mark_purged(db: Db, ws: str, session_id: str, incarnation: str | None) -> None:
    update_deleted_session(db, ws, session_id, incarnation, "SET purged_at = :now", {":now": utcnow()})


def copying_clones(db: Db, ws: str, session_id: str, incarnation: str | None) -> list[str]:
    """The clones of this incarnation of the session still reading from it (its purge waits for them)."""
    refs = query_all(
        db,
        KeyConditionExpression="PK = :pk AND begins_with(SK, :c)",
        ConsistentRead=True,
        ExpressionAttributeValues=to_item({":pk": keys.session_pk(ws, session_id), ":c": "CLONE#"}),
    )
    waiting = []
    for ref in refs:
        clone = read_session_item(db, ws, ref["session_id"])
        if (
            clone
            and "deleted_at" not in clone
            and clone.get("base_session") == session_id
            and clone.get("base_incarnation") == incarnation
        ):
            waiting.append(ref["session_id"])
    return waiting


# ---------------------------------------------------------------- deletes


def delete_workspace(db: Db, ws: str) -> None:
    """Delete a workspace that has no live sessions: mark it (creates inside it then fail), check, remove."""
    now = int(time.time())
    if not leases.take(db, keys.workspace(ws), now + DELETE_LEASE_S, now, name="deleting_until", existing=True):
        require_workspace(db, ws)
        raise Conflict(f"workspace '{ws}' is already being deleted; retry in a minute")
    items = partition_items(db, f"WS#{ws}")
    # Sessions already deleted do not block: the stream consumer is purging them.
    sessions = [i["id"] for i in items if i["SK"].startswith("SESSION#") and "deleted_at" not in i]
    if sessions:
        leases.release(db, keys.workspace(ws), name="deleting_until")
        shown = ", ".join(sessions[:5]) + (", …" if len(sessions) > 5 else "")
        raise Conflict(f"workspace '{ws}' still has {len(sessions)} session(s) ({shown}); delete them first")
    # Purged sessions leave a tombstone (and its fence) until the id is reused; a workspace delete removes them.
    tombstones = [i for i in items if i["SK"].startswith("SESSION#") and i.get("purged_at")]
    fences = [keys.fence(ws, t["id"], t["fence_seq"]) for t in tombstones if t.get("fence_seq")]
    rest = [
        {"PK": i["PK"], "SK": i["SK"]}
        for i in items
        if i["SK"].startswith(("PEER#", keys.WEBHOOKS_PREFIX, "JOB#")) or i["SK"] == "WS" or i in tombstones
    ]  # (the webhook endpoints and their count go with the workspace: a new one of this id starts with none; so do
    # its export and import jobs)
    # Its exports' parts, every version, before the jobs that name them: a delete interrupted here is retried whole.
    delete_versions(db, keys.exports_prefix(ws))
    delete_collections(db, ws)
    from precis.store import search

    search.delete_workspace(db, ws, [i["SK"].removeprefix("PEER#") for i in items if i["SK"].startswith("PEER#")])
    from precis.store import usage  # its usage too: a workspace made again with this id starts with none

    usage.delete_workspace(db, ws, datetime.now(UTC).date())
    delete_keys(db, [*fences, *rest, keys.message_terms(ws)])


def delete_session(db: Db, ws: str, session_id: str) -> str:
    """Mark the session deleted and fence its messages in one transaction (it answers 404 at once); the stream
    consumer purges its data. The incarnation deleted."""
    for _ in range(25):
        session = require_session(db, ws, session_id)
        fence_seq = tail_seq(db, ws, session_id) + 1
        try:
            transact(
                db,
                [
                    {
                        "Update": {
                            "TableName": db.table,
                            "Key": to_item(keys.session(ws, session_id)),
                            "UpdateExpression": "SET deleted_at = :now, is_active = :f, fence_seq = :fence",
                            "ConditionExpression": "incarnation = :inc AND attribute_not_exists(deleted_at)",
                            "ExpressionAttributeValues": to_item(
                                {":now": utcnow(), ":f": False, ":fence": fence_seq, ":inc": session["incarnation"]}
                            ),
                        }
                    },
                    {
                        "Put": {
                            "TableName": db.table,
                            "Item": to_item(
                                {
                                    **keys.fence(ws, session_id, fence_seq),
                                    "kind": "fence",
                                    "seq": fence_seq,
                                    "incarnation": session["incarnation"],
                                }
                            ),
                            "ConditionExpression": "attribute_not_exists(SK)",
                        }
                    },
                ],
            )
            return str(session["incarnation"])
        except ClientError as exc:
            codes = cancellation_codes(exc)
            if not codes:
                raise
            # The session changed, or a message took the fence's seq: read again and retry.
            time.sleep(random.uniform(0, 0.05))
    raise Throttled(f"session '{session_id}' is busy; retry the delete")
