"""Workspaces on the table: their items, lists, and the check that holds creates off a workspace being deleted."""

from __future__ import annotations

import time
from typing import Any

from botocore.exceptions import ClientError

from precis.configuration import check_configuration
from precis.errors import Conflict, Invalid, NotFound
from precis.store import filters as filtering
from precis.store import keys
from precis.store.db import (
    Db,
    batch_get,
    cancellation_codes,
    projection,
    query_all,
    to_item,
    transact,
)
from precis.store.records import json_object, json_text, page, utcnow
from precis.store.resources.items import (
    WorkspaceItem,
    as_workspace,
    create_item,
    page_of_ids,
    read_item,
    update_item,
    workspace_view,
)

# A workspace delete marks the workspace for this long while it checks for sessions and removes its peers;
# creates of sessions and peers check the mark in the same transaction, so none can slip in (no check-then-act).
DELETE_LEASE_S = 60


def workspace_item(db: Db, ws: str) -> WorkspaceItem | None:
    """The workspace's item, or None: one batch read."""
    return next((as_workspace(i) for i in batch_get(db, [keys.workspace(ws)])), None)


def workspace_items(db: Db, ids: list[str]) -> list[WorkspaceItem]:
    """The items of the workspaces of `ids` that exist: BatchGetItem, 100 keys a request."""
    return [as_workspace(i) for i in batch_get(db, [keys.workspace(ws) for ws in ids])]


def require_workspace(db: Db, ws: str) -> WorkspaceItem:
    item = read_item(db, keys.workspace(ws))
    if item is None:
        raise NotFound(f"workspace '{ws}' not found")
    return as_workspace(item)


def get_or_create_workspace(
    db: Db, ws: str, metadata: dict[str, Any] | None = None, configuration: dict[str, Any] | None = None
) -> tuple[dict[str, Any], bool]:
    check_configuration(configuration)
    item, created = create_item(
        db,
        keys.workspace(ws),
        {
            "kind": "workspace",
            "list_key": "workspaces",
            "id": ws,
            "metadata": json_text(metadata or {}),
            "configuration": json_text(configuration or {}),
            "created_at": utcnow(),
        },
    )
    return workspace_view(as_workspace(item)), created


def update_workspace(
    db: Db, ws: str, metadata: dict[str, Any] | None = None, configuration: dict[str, Any] | None = None
) -> dict[str, Any]:
    check_configuration(configuration)
    if configuration is not None:
        _check_sessions_under(db, ws, configuration)
    item = update_item(
        db, keys.workspace(ws), {"metadata": json_text(metadata), "configuration": json_text(configuration)}
    )
    if item is None:
        raise NotFound(f"workspace '{ws}' not found")
    return workspace_view(as_workspace(item))


def _check_sessions_under(db: Db, ws: str, configuration: dict[str, Any]) -> None:
    """Invalid (422) when the new workspace configuration makes a live session's merged settings invalid
    (e.g. a workspace `messages_per_long_summary` below a session's `messages_per_short_summary`)."""
    sessions = query_all(
        db,
        KeyConditionExpression="PK = :pk AND begins_with(SK, :p)",
        ExpressionAttributeValues={":pk": {"S": f"WS#{ws}"}, ":p": {"S": "SESSION#"}},
        **projection(("id", "configuration", "deleted_at")),
    )
    for session in sessions:
        own = json_object(session.get("configuration"))
        if "deleted_at" in session or not own:
            continue
        try:
            check_configuration(configuration, own)
        except Invalid as exc:
            raise Invalid(
                f"{exc.detail} (with the configuration of session '{session['id']}'; change that session first)"
            ) from None


def workspace_ids(db: Db) -> list[str]:
    """Every workspace's id (the ByListKey index)."""
    items = query_all(
        db,
        IndexName="ByListKey",
        KeyConditionExpression="list_key = :k",
        ExpressionAttributeValues=to_item({":k": "workspaces"}),
        ProjectionExpression="id",
    )
    return [i["id"] for i in items]


def list_workspaces(db: Db, filters: dict[str, Any] | None, page_no: int, size: int, reverse: bool) -> dict[str, Any]:
    request: dict[str, Any] = {
        "IndexName": "ByListKey",
        "KeyConditionExpression": "list_key = :k",
        "ExpressionAttributeValues": {":k": {"S": "workspaces"}},
    }
    if not filters:
        ids = [i["id"] for i in query_all(db, **request, **projection(("id",)))]
        return page_of_ids(db, ids, page_no, size, reverse, keys.workspace, lambda i: workspace_view(as_workspace(i)))
    items = query_all(db, **request)
    views = [v for v in (workspace_view(as_workspace(i)) for i in items) if filtering.matches(filters, v)]
    return page(views, page_no, size, reverse)


def workspace_open(db: Db, ws: str) -> dict[str, Any]:
    """A transaction action that holds only while the workspace exists and no delete of it is under way."""
    return {
        "ConditionCheck": {
            "TableName": db.table,
            "Key": to_item(keys.workspace(ws)),
            "ConditionExpression": "attribute_exists(PK) AND "
            "(attribute_not_exists(deleting_until) OR deleting_until < :now)",
            "ExpressionAttributeValues": {":now": {"N": str(int(time.time()))}},
        }
    }


def create_in_workspace(db: Db, ws: str, key: dict[str, str], values: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """Put `values` at `key` unless something is there, while the workspace exists and is not being deleted."""
    item = {**key, **values}
    try:
        transact(
            db,
            [
                {
                    "Put": {
                        "TableName": db.table,
                        "Item": to_item(item),
                        "ConditionExpression": "attribute_not_exists(PK)",
                    }
                },
                workspace_open(db, ws),
            ],
        )
        return item, True
    except ClientError as exc:
        codes = cancellation_codes(exc)
        if len(codes) == 2 and codes[1] == "ConditionalCheckFailed":
            require_workspace(db, ws)
            raise Conflict(f"workspace '{ws}' is being deleted") from None
        if not codes or codes[0] != "ConditionalCheckFailed":
            raise
    old = read_item(db, key)
    if old is None:  # deleted between the two requests
        raise Conflict(f"'{key['SK']}' was deleted while being read; retry the request")
    return old, False
