"""Removing a deleted session's data: by keys only, resumably, and only for the incarnation that was deleted.

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
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError
from precis.store import keys
from precis.store.conclusions import purge_session_conclusions
from precis.store.db import Db, error_code, from_item, to_item
from precis.store.resources import delete_keys, utcnow

PAGE = 1000  # keys per query page: one page's deletes take well under the margin
MARGIN_S = 10.0  # stop when less than this is left of the invocation
_pool = ThreadPoolExecutor(max_workers=8)


@dataclass(frozen=True)
class PurgeResult:
    done: bool  # False: stopped for time; a new stream record continues it
    deleted_items: int
    deleted_objects: int


def purge_session(db: Db, ws: str, session_id: str, incarnation: str | None, *,
                  time_left: Callable[[], float] = lambda: math.inf, page_size: int = PAGE) -> PurgeResult:
    """Remove what incarnation `incarnation` of the session left; a no-op for any other incarnation."""
    session = from_item(db.client.get_item(TableName=db.table, Key=to_item(keys.session(ws, session_id)),
                                           ConsistentRead=True).get("Item"))
    if session is None or session.get("incarnation") != incarnation or "deleted_at" not in session:
        return PurgeResult(True, 0, 0)  # gone, created again, or never deleted: nothing of `incarnation` to remove
    if session.get("purged_at"):
        return PurgeResult(True, 0, 0)  # done already (a replayed record); asking again clears purged_at first
    from precis.store.clones import copying_clones

    if copying_clones(db, ws, session_id, incarnation):
        # A clone still reads its inherited messages from here: the end of its copy asks for this purge again.
        return PurgeResult(False, 0, 0)
    fence = keys.fence(ws, session_id, session["fence_seq"]) if session.get("fence_seq") else None
    # The conclusions drawn from the session go first: their DERIVED# items, which name them, are in the partition.
    deleted, done = purge_session_conclusions(db, ws, session_id, time_left=lambda: time_left() - MARGIN_S)
    if done:
        from precis.store.message_search import purge_vectors

        deleted += purge_vectors(db, ws, session_id)
    if not done:
        _continue_later(db, ws, session_id, incarnation)
        return PurgeResult(False, deleted, 0)
    request: dict[str, Any] = {"TableName": db.table, "KeyConditionExpression": "PK = :pk", "Limit": page_size,
                               "ProjectionExpression": "PK, SK", "ConsistentRead": True,
                               "ExpressionAttributeValues": {":pk": {"S": keys.session_pk(ws, session_id)}}}
    while True:
        out = db.client.query(**request)
        found = [k for k in map(from_item, out["Items"]) if k != fence]
        # A member has a reverse item in the peer's partition (a peer's session list).
        found += [keys.peer_session(ws, k["SK"].removeprefix("PEER#"), session_id)
                  for k in found if k["SK"].startswith("PEER#")]
        deleted += _delete_parallel(db, found)
        if "LastEvaluatedKey" not in out:
            break
        request["ExclusiveStartKey"] = out["LastEvaluatedKey"]
        if time_left() < MARGIN_S:
            _continue_later(db, ws, session_id, incarnation)
            return PurgeResult(False, deleted, 0)
    objects = sum(_delete_versions(db, prefix) for prefix in (keys.body_prefix(ws, session_id, incarnation or "_"),
                                                              keys.audit_prefix(ws, session_id, incarnation or "_")))
    _mark_purged(db, ws, session_id, incarnation)
    if db.client.get_item(TableName=db.table, Key=to_item(keys.workspace(ws)), ConsistentRead=True,
                          ProjectionExpression="PK").get("Item") is None:
        # The workspace was deleted meanwhile (it removes only tombstones already purged): nothing can reuse the id.
        delete_keys(db, [k for k in (fence, keys.session(ws, session_id)) if k])
    return PurgeResult(True, deleted, objects)


def _delete_parallel(db: Db, key_list: list[dict[str, str]]) -> int:
    chunks = [key_list[i:i + 25] for i in range(0, len(key_list), 25)]
    return sum(_pool.map(lambda chunk: delete_keys(db, chunk), chunks))


def _delete_versions(db: Db, prefix: str) -> int:
    """Delete every version and delete marker under `prefix`; raises if S3 refuses any of them."""
    deleted = 0
    paginator = db.s3.get_paginator("list_object_versions")
    for page in paginator.paginate(Bucket=db.bucket, Prefix=prefix):
        objects = [{"Key": v["Key"], "VersionId": v["VersionId"]}
                   for v in (*page.get("Versions", ()), *page.get("DeleteMarkers", ()))]
        for start in range(0, len(objects), 1000):
            out = db.s3.delete_objects(Bucket=db.bucket, Delete={"Objects": objects[start:start + 1000], "Quiet": True})
            if out.get("Errors"):
                first = out["Errors"][0]
                raise RuntimeError(f"S3 refused to delete {len(out['Errors'])} object(s) under {prefix}, e.g. "
                                   f"{first.get('Key')}: {first.get('Code')} {first.get('Message')}")
            deleted += len(objects[start:start + 1000])
    return deleted


def _continue_later(db: Db, ws: str, session_id: str, incarnation: str | None) -> None:
    """Touch the session item: its MODIFY record (still carrying deleted_at) runs the purge again."""
    _conditional_update(db, ws, session_id, incarnation, "ADD purge_rounds :one REMOVE purged_at", {":one": 1})


def _mark_purged(db: Db, ws: str, session_id: str, incarnation: str | None) -> None:
    _conditional_update(db, ws, session_id, incarnation, "SET purged_at = :now", {":now": utcnow()})


def _conditional_update(db: Db, ws: str, session_id: str, incarnation: str | None, expression: str,
                        values: dict[str, Any]) -> None:
    condition = "attribute_exists(deleted_at) AND " + (
        "incarnation = :inc" if incarnation is not None else "attribute_not_exists(incarnation)")
    if incarnation is not None:
        values = {**values, ":inc": incarnation}
    try:
        db.client.update_item(TableName=db.table, Key=to_item(keys.session(ws, session_id)),
                              UpdateExpression=expression, ConditionExpression=condition,
                              ExpressionAttributeValues=to_item(values))
    except ClientError as exc:
        if error_code(exc) != "ConditionalCheckFailedException":
            raise
        # The id was created again meanwhile: what this purge was for is done.


def request_purge(db: Db, ws: str, session_id: str, incarnation: str | None) -> None:
    """Ask the stream consumer to purge (again) what `incarnation` left, e.g. writes found after its purge."""
    _continue_later(db, ws, session_id, incarnation)
