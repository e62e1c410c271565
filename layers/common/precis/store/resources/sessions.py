"""Sessions on the table: the session item's reads and writes, its incarnations, and the purges it asks for."""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError

from precis.configuration import check_configuration
from precis.errors import Conflict, NotFound
from precis.settings import get_settings
from precis.store import filters as filtering
from precis.store import keys
from precis.store.db import (
    Db,
    batch_get,
    cancellation_codes,
    error_code,
    from_item,
    query_all,
    to_item,
    transact,
)
from precis.store.records import json_object, json_text, page, utcnow
from precis.store.resources.items import (
    SessionItem,
    WorkspaceItem,
    as_session,
    as_workspace,
    page_of_ids,
    partition_items,
    read_item,
    session_view,
    update_item,
)
from precis.store.resources.peers import peer_session_ids
from precis.store.resources.workspaces import create_in_workspace, require_workspace, workspace_open

# A session id can be deleted and created again. Each creation is a new *incarnation* (a random token on the
# session item); everything the stream consumers do for a session is bound to the incarnation they were asked
# for, so a replayed purge or a late summary never touches a newer one. A delete marks the session and puts a
# *fence* item at the seq after its last message in the same transaction: every append claims the next seq with
# a conditional put, so none can commit after the delete. The purge removes everything but the session item and
# the fence, which stay as a tombstone until the id is created again (at least PURGE_GRACE_S after the delete,
# when no request that began before it can still be running).


def session_item(db: Db, ws: str, session_id: str) -> SessionItem | None:
    """The session's item, deleted or not, or None: one batch read."""
    return next((as_session(i) for i in batch_get(db, [keys.session(ws, session_id)])), None)


def gone_sessions(db: Db, ws: str, session_ids: Iterable[str]) -> set[str]:
    """Which of `session_ids` are deleted (`deleted_at`, set in the transaction the delete answers after) or absent:
    what every read leaves out from then on, not from the purge. One consistent BatchGetItem per 100 ids."""
    wanted = sorted(set(session_ids))
    if not wanted:
        return set()
    found = {i["id"]: i for i in batch_get(db, [keys.session(ws, s) for s in wanted], ("id", "deleted_at"))}
    return {s for s in wanted if s not in found or "deleted_at" in found[s]}


def hidden_sources(db: Db, ws: str, session_ids: Iterable[str]) -> tuple[set[str], dict[str, set[str]]]:
    """(the sessions of `session_ids` deleted or absent, the ids of the messages being deleted in the others, by
    session): what a read of conclusions leaves out, from the moment each delete answers. One consistent
    BatchGetItem per 100 ids, as `gone_sessions`."""
    wanted = sorted(set(session_ids))
    if not wanted:
        return set(), {}
    found = {
        i["id"]: i for i in batch_get(db, [keys.session(ws, s) for s in wanted], ("id", "deleted_at", "forgetting"))
    }
    gone = {s for s in wanted if s not in found or "deleted_at" in found[s]}
    forgetting = {s: set(found[s]["forgetting"]) for s in wanted if s not in gone and found[s].get("forgetting")}
    return gone, forgetting


def read_session_item(db: Db, ws: str, session_id: str) -> SessionItem | None:
    """The session's item, deleted or not, or None: one strongly consistent GetItem."""
    item = read_item(db, keys.session(ws, session_id))
    return None if item is None else as_session(item)


def session_and_workspace(db: Db, ws: str, session_id: str) -> tuple[SessionItem | None, WorkspaceItem | None]:
    """The session's item (deleted or not) and its workspace's, each None when absent: one batch read."""
    found = {i["SK"]: i for i in batch_get(db, [keys.session(ws, session_id), keys.workspace(ws)])}
    session, workspace = found.get(f"SESSION#{session_id}"), found.get("WS")
    return (
        None if session is None else as_session(session),
        None if workspace is None else as_workspace(workspace),
    )


def require_session(db: Db, ws: str, session_id: str) -> SessionItem:
    item = read_item(db, keys.session(ws, session_id))
    if item is None or "deleted_at" in item:
        raise NotFound(f"session '{session_id}' not found in workspace '{ws}'")
    return as_session(item)


def session_values(
    ws: str, session_id: str, metadata: dict[str, Any] | None = None, configuration: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "kind": "session",
        "id": session_id,
        "workspace_id": ws,
        "is_active": True,
        "metadata": json_text(metadata or {}),
        "configuration": json_text(configuration or {}),
        "created_at": utcnow(),
        "incarnation": secrets.token_hex(8),
    }


def create_session_item(
    db: Db,
    ws: str,
    session_id: str,
    metadata: dict[str, Any] | None = None,
    configuration: dict[str, Any] | None = None,
) -> tuple[SessionItem, bool]:
    """Get or create the session item (a new incarnation); Conflict while an earlier one is being purged."""
    values = session_values(ws, session_id, metadata, configuration)
    item, created = create_in_workspace(db, ws, keys.session(ws, session_id), values)
    if "deleted_at" in item:
        return _reincarnate(db, ws, session_id, as_session(item), values), True
    return as_session(item), created


def _reincarnate(db: Db, ws: str, session_id: str, tombstone: SessionItem, values: dict[str, Any]) -> SessionItem:
    """Create a deleted session id again in place of its tombstone, once its purge is done and the grace is over."""
    grace = get_settings().purge_grace_s
    left = _deleted_epoch(tombstone) + grace - time.time()
    if not tombstone.get("purged_at"):
        raise Conflict(f"session '{session_id}' is being deleted; create it again once that finishes")
    if left > 0:
        raise Conflict(
            f"session '{session_id}' was deleted moments ago; it can be created again in {math.ceil(left)} s"
        )
    # Nothing may remain of the old incarnation but the fence. A write that slipped past the purge (one that read
    # the tail before the delete and committed after the purge removed its keys) is purged again first.
    fence = keys.fence(ws, session_id, tombstone["fence_seq"]) if tombstone.get("fence_seq") else None
    if any(k != fence for k in partition_keys(db, ws, session_id, limit=2)):
        request_purge(db, ws, session_id, tombstone.get("incarnation"))
        raise Conflict(f"session '{session_id}' is being deleted; create it again once that finishes")
    item = {**keys.session(ws, session_id), **values}
    actions: list[dict[str, Any]] = [
        {
            "Put": {
                "TableName": db.table,
                "Item": to_item(item),
                "ConditionExpression": "incarnation = :old AND attribute_exists(purged_at)",
                "ExpressionAttributeValues": {":old": {"S": tombstone["incarnation"]}},
            }
        },
        workspace_open(db, ws),
    ]
    if fence:
        actions.append({"Delete": {"TableName": db.table, "Key": to_item(fence)}})
    try:
        transact(db, actions)
    except ClientError as exc:
        if not cancellation_codes(exc):
            raise
        raise Conflict(f"session '{session_id}' was created or deleted concurrently; retry the request") from None
    return as_session(item)


def _deleted_epoch(item: SessionItem) -> float:
    return datetime.fromisoformat(item["deleted_at"]).timestamp()


def update_session(
    db: Db,
    ws: str,
    session_id: str,
    metadata: dict[str, Any] | None = None,
    configuration: dict[str, Any] | None = None,
) -> dict[str, Any]:
    if configuration is not None:
        check_configuration(json_object(require_workspace(db, ws).get("configuration")), configuration)
    item = update_item(
        db,
        keys.session(ws, session_id),
        {"metadata": json_text(metadata), "configuration": json_text(configuration)},
        condition="attribute_exists(PK) AND attribute_not_exists(deleted_at)",
    )
    if item is None:
        raise NotFound(f"session '{session_id}' not found in workspace '{ws}'")
    return session_view(as_session(item))


def partition_keys(db: Db, ws: str, session_id: str, limit: int | None = None) -> list[dict[str, str]]:
    """Keys of the items in the session's partition (keys only: a purge never reads whole items)."""
    request: dict[str, Any] = {
        "KeyConditionExpression": "PK = :pk",
        "ProjectionExpression": "PK, SK",
        "ExpressionAttributeValues": {":pk": {"S": keys.session_pk(ws, session_id)}},
    }
    if limit:
        out = db.client.query(TableName=db.table, Limit=limit, **request)
        return [from_item(i) for i in out["Items"]]
    return query_all(db, **request)


def list_sessions(
    db: Db, ws: str, filters: dict[str, Any] | None, page_no: int, size: int, reverse: bool
) -> dict[str, Any]:
    require_workspace(db, ws)
    if not filters:
        found = partition_items(db, f"WS#{ws}", "SESSION#", ("id", "deleted_at"))
        ids = [i["id"] for i in found if "deleted_at" not in i]
        view_of = lambda i: session_view(as_session(i))  # noqa: E731
        return page_of_ids(db, ids, page_no, size, reverse, lambda s: keys.session(ws, s), view_of)
    items = [as_session(i) for i in partition_items(db, f"WS#{ws}", "SESSION#") if "deleted_at" not in i]
    views = [v for v in map(session_view, items) if filtering.matches(filters, v)]
    return page(views, page_no, size, reverse)


def list_peer_sessions(
    db: Db, ws: str, peer_id: str, filters: dict[str, Any] | None, page_no: int, size: int, reverse: bool
) -> dict[str, Any]:
    if read_item(db, keys.peer(ws, peer_id)) is None:
        raise NotFound(f"peer '{peer_id}' not found in workspace '{ws}'")
    ids = peer_session_ids(db, ws, peer_id)
    if not filters:
        return sessions_page(db, ws, ids, page_no, size, reverse)
    sessions = batch_get(db, [keys.session(ws, s) for s in ids])
    views = [session_view(as_session(s)) for s in sessions if "deleted_at" not in s]
    views.sort(key=lambda v: v["id"])
    return page([v for v in views if filtering.matches(filters, v)], page_no, size, reverse)


def sessions_page(db: Db, ws: str, ids: Iterable[str], page_no: int, size: int, reverse: bool) -> dict[str, Any]:
    """A page of the live sessions among `ids`, by id, reading whole only the page's (`page_of_ids`)."""
    found = batch_get(db, [keys.session(ws, s) for s in ids], ("id", "deleted_at"))
    live = sorted(i["id"] for i in found if "deleted_at" not in i)
    view_of = lambda i: session_view(as_session(i))  # noqa: E731
    return page_of_ids(db, live, page_no, size, reverse, lambda s: keys.session(ws, s), view_of)


def request_purge(db: Db, ws: str, session_id: str, incarnation: str | None) -> None:
    """Ask the stream consumer to purge (again) what `incarnation` left, e.g. writes found after its purge: touch the
    session item, whose MODIFY record (still carrying deleted_at) runs the purge again."""
    update_deleted_session(db, ws, session_id, incarnation, "ADD purge_rounds :one REMOVE purged_at", {":one": 1})


def update_deleted_session(
    db: Db, ws: str, session_id: str, incarnation: str | None, expression: str, values: dict[str, Any]
) -> None:
    """Update a deleted session item, only while it is incarnation `incarnation` and still deleted."""
    condition = "attribute_exists(deleted_at) AND " + (
        "incarnation = :inc" if incarnation is not None else "attribute_not_exists(incarnation)"
    )
    if incarnation is not None:
        values = {**values, ":inc": incarnation}
    try:
        db.client.update_item(
            TableName=db.table,
            Key=to_item(keys.session(ws, session_id)),
            UpdateExpression=expression,
            ConditionExpression=condition,
            ExpressionAttributeValues=to_item(values),
        )
    except ClientError as exc:
        if error_code(exc) != "ConditionalCheckFailedException":
            raise
        # The id was created again meanwhile: what this purge was for is done.
