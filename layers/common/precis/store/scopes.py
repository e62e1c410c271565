"""Scopes: named sets of a workspace's sessions, each a view of what was said in them (docs/design.md, "Derived
memory", Scopes).

A scope observes its member sessions: every explicit conclusion derived in them is also kept in the collection
(`scope.{id}`, observed) — the deriver writes it there as it writes the observers' copies. A session added with
conclusions already derived has them copied in by a *backfill*: the membership item is written `pending`, its
stream record wakes the deriver, which copies in chunks that each mark themselves on the membership (exactly once,
resumable after a failure) and then marks it `completed` with `docs_copied`. Removing a session deletes the
copies that came from it.

Items: the scope `{WS#{ws}, SCOPE#{id}}`; a membership `{WS#{ws}#SCOPE#{id}, SESSION#{s}}` (state, docs_copied) and
its reverse in the session's partition `{session_pk, SCOPE#{id}}` (the deriver reads a session's scopes there; a
session's purge removes it).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError

from precis.errors import NotFound
from precis.store import conclusions, keys
from precis.store.db import Db, batch_get, error_code, from_item, query_all, query_first, raise_if_throttled, to_item
from precis.store.records import json_object, json_text, page
from precis.store.resources import require_workspace, sessions_page

PREFIX = "scope."  # the observer of a scope's collections; no peer id can start with it (ids have no ".")
CHUNK = 16


def observer(scope_id: str) -> str:
    return f"{PREFIX}{scope_id}"


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _scope_key(ws: str, scope_id: str) -> dict[str, str]:
    return {"PK": f"WS#{ws}", "SK": f"SCOPE#{scope_id}"}


def membership_key(ws: str, scope_id: str, session_id: str) -> dict[str, str]:
    return {"PK": f"WS#{ws}#SCOPE#{scope_id}", "SK": f"SESSION#{session_id}"}


def _reverse_key(ws: str, scope_id: str, session_id: str) -> dict[str, str]:
    return {"PK": keys.session_pk(ws, session_id), "SK": f"SCOPE#{scope_id}"}


def view(item: dict[str, Any]) -> dict[str, Any]:
    return {"id": item["id"], "metadata": json_object(item.get("metadata")), "created_at": item["created_at"]}


def get_or_create(
    db: Db, ws: str, scope_id: str, metadata: dict[str, Any] | None = None
) -> tuple[dict[str, Any], bool]:
    require_workspace(db, ws)
    item = {
        **_scope_key(ws, scope_id),
        "kind": "scope",
        "id": scope_id,
        "metadata": json_text(metadata or {}),
        "created_at": _now(),
    }
    try:
        db.client.put_item(TableName=db.table, Item=to_item(item), ConditionExpression="attribute_not_exists(PK)")
        return view(item), True
    except ClientError as exc:
        raise_if_throttled(exc)
        if error_code(exc) != "ConditionalCheckFailedException":
            raise
    existing = require(db, ws, scope_id)
    if metadata is not None and json_object(existing.get("metadata")) != metadata:
        db.client.update_item(
            TableName=db.table,
            Key=to_item(_scope_key(ws, scope_id)),
            UpdateExpression="SET metadata = :m",
            ExpressionAttributeValues=to_item({":m": json_text(metadata)}),
        )
        existing["metadata"] = json_text(metadata)
    return view(existing), False


def require(db: Db, ws: str, scope_id: str) -> dict[str, Any]:
    found = batch_get(db, [keys.workspace(ws), _scope_key(ws, scope_id)])
    if not any(i["SK"] == "WS" for i in found):
        raise NotFound(f"workspace '{ws}' not found")
    scope = next((i for i in found if i["SK"] == f"SCOPE#{scope_id}"), None)
    if scope is None:
        raise NotFound(f"scope '{scope_id}' not found in workspace '{ws}'")
    return scope


def list_scopes(db: Db, ws: str, page_no: int, size: int, reverse: bool) -> dict[str, Any]:
    require_workspace(db, ws)
    items = query_all(
        db,
        KeyConditionExpression="PK = :pk AND begins_with(SK, :p)",
        ExpressionAttributeValues=to_item({":pk": f"WS#{ws}", ":p": "SCOPE#"}),
    )
    return page([view(i) for i in items], page_no, size, reverse)


def _members(db: Db, ws: str, scope_id: str) -> list[dict[str, Any]]:
    return query_all(
        db,
        KeyConditionExpression="PK = :pk AND begins_with(SK, :p)",
        ConsistentRead=True,
        ExpressionAttributeValues=to_item({":pk": f"WS#{ws}#SCOPE#{scope_id}", ":p": "SESSION#"}),
    )


def member_sessions(db: Db, ws: str, scope_ids: list[str]) -> tuple[str, ...]:
    """The ids of the sessions in any of the scopes (404 for a scope that does not exist)."""
    for scope_id in scope_ids:
        require(db, ws, scope_id)
    return tuple(sorted({m["session_id"] for scope_id in scope_ids for m in _members(db, ws, scope_id)}))


def add_sessions(db: Db, ws: str, scope_id: str, session_ids: list[str]) -> None:
    """Make the sessions members (live ones only: 404 naming the first that is not); each new membership starts
    a backfill."""
    require(db, ws, scope_id)
    wanted = list(dict.fromkeys(session_ids))
    found = {i["id"]: i for i in batch_get(db, [keys.session(ws, s) for s in wanted])}
    for session_id in wanted:
        if session_id not in found or "deleted_at" in found[session_id]:
            raise NotFound(f"session '{session_id}' not found in workspace '{ws}'")
    existing = {
        i["SK"].removeprefix("SESSION#") for i in batch_get(db, [membership_key(ws, scope_id, s) for s in wanted])
    }
    now = _now()
    for session_id in wanted:
        if session_id in existing:
            continue
        db.client.transact_write_items(
            TransactItems=[
                {
                    "Put": {
                        "TableName": db.table,
                        "Item": to_item(
                            {
                                **membership_key(ws, scope_id, session_id),
                                "kind": "scope_session",
                                "scope_id": scope_id,
                                "session_id": session_id,
                                "workspace_id": ws,
                                "state": "pending",
                                "updated_at": now,
                            }
                        ),
                        "ConditionExpression": "attribute_not_exists(PK)",
                    }
                },
                {
                    "Put": {
                        "TableName": db.table,
                        "Item": to_item(
                            {**_reverse_key(ws, scope_id, session_id), "kind": "session_scope", "scope_id": scope_id}
                        ),
                    }
                },
                {
                    "ConditionCheck": {
                        "TableName": db.table,
                        "Key": to_item(keys.session(ws, session_id)),
                        "ConditionExpression": "incarnation = :inc AND attribute_not_exists(deleted_at)",
                        "ExpressionAttributeValues": {":inc": {"S": found[session_id]["incarnation"]}},
                    }
                },
            ]
        )


def remove_session(db: Db, ws: str, scope_id: str, session_id: str) -> None:
    """End a membership and delete the copies that came from the session."""
    require(db, ws, scope_id)
    member = batch_get(db, [membership_key(ws, scope_id, session_id)])
    if not member:
        raise NotFound(f"session '{session_id}' is not in scope '{scope_id}'")
    db.client.transact_write_items(
        TransactItems=[
            {"Delete": {"TableName": db.table, "Key": to_item(membership_key(ws, scope_id, session_id))}},
            {"Delete": {"TableName": db.table, "Key": to_item(_reverse_key(ws, scope_id, session_id))}},
        ]
    )
    conclusions.remove_session_copies(db, ws, session_id, observer(scope_id))


def list_sessions(db: Db, ws: str, scope_id: str, page_no: int, size: int, reverse: bool) -> dict[str, Any]:
    require(db, ws, scope_id)
    return sessions_page(db, ws, [m["session_id"] for m in _members(db, ws, scope_id)], page_no, size, reverse)


STATUS_MAX = 5_000  # sessions one scope status reads and answers (~250 bytes each; docs/design.md, "Limits")


def status(db: Db, ws: str, scope_id: str) -> dict[str, Any]:
    """Each member session's backfill, the first STATUS_MAX of them by id; `backfill_capped` (ext) when there are
    more (a read and an answer bounded whatever the scope holds)."""
    require(db, ws, scope_id)
    request: dict[str, Any] = {
        "KeyConditionExpression": "PK = :pk AND begins_with(SK, :p)",
        "ConsistentRead": True,
        "ExpressionAttributeValues": to_item({":pk": f"WS#{ws}#SCOPE#{scope_id}", ":p": "SESSION#"}),
    }
    members = query_first(db, STATUS_MAX + 1, **request)
    jobs = {}
    for member in members[:STATUS_MAX]:
        job = {"state": member["state"], "updated_at": member["updated_at"]}
        if member.get("docs_copied") is not None:
            job["docs_copied"] = member["docs_copied"]
        jobs[member["session_id"]] = job
    if len(members) > STATUS_MAX:
        return {"backfill_status": jobs, "backfill_capped": True}
    return {"backfill_status": jobs}


def session_scopes(db: Db, ws: str, session_id: str) -> list[str]:
    """The scopes a session belongs to (read from its own partition)."""
    items = query_all(
        db,
        KeyConditionExpression="PK = :pk AND begins_with(SK, :p)",
        ConsistentRead=True,
        ExpressionAttributeValues=to_item({":pk": keys.session_pk(ws, session_id), ":p": "SCOPE#"}),
    )
    return [i["scope_id"] for i in items]


# ---------------------------------------------------------------- the backfill (run by the deriver)


def backfill(db: Db, ws: str, scope_id: str, session_id: str, *, embedder: conclusions.EmbedsTexts) -> int:
    """Copy the session's explicit conclusions (each observed peer's own view of itself, one copy a fact) into the
    scope's collections, chunk by chunk, each chunk once; then mark the membership completed. How many were
    copied by this call."""
    key = to_item(membership_key(ws, scope_id, session_id))
    member = from_item(db.client.get_item(TableName=db.table, Key=key, ConsistentRead=True).get("Item"))
    if member is None or member.get("state") == "completed":
        return 0
    applied = set(member.get("applied") or ())
    by_observed = conclusions.session_explicit(db, ws, session_id)
    copied = 0
    for observed, items in sorted(by_observed.items()):
        for start in range(0, len(items), CHUNK):
            name = f"{observed}#{start}"
            if name in applied:
                continue
            mark = {
                "Update": {
                    "TableName": db.table,
                    "Key": key,
                    "UpdateExpression": "ADD applied :n, docs :c",
                    "ConditionExpression": "attribute_exists(PK) AND NOT contains(applied, :one)",
                    "ExpressionAttributeValues": {
                        ":n": {"SS": [name]},
                        ":one": {"S": name},
                        ":c": {"N": str(len(items[start : start + CHUNK]))},
                    },
                }
            }
            try:
                conclusions.write(
                    db, ws, observer(scope_id), observed, items[start : start + CHUNK], embedder=embedder, extra=[mark]
                )
                copied += len(items[start : start + CHUNK])
            except conclusions.ExtraConditionFailed:
                pass  # copied already, or the membership was removed meanwhile
    try:
        db.client.update_item(
            TableName=db.table,
            Key=key,
            ConditionExpression="attribute_exists(PK)",
            UpdateExpression="SET #s = :done, updated_at = :now, docs_copied = if_not_exists(docs, :z)",
            ExpressionAttributeNames={"#s": "state"},
            ExpressionAttributeValues=to_item({":done": "completed", ":now": _now(), ":z": 0}),
        )
    except ClientError as exc:
        raise_if_throttled(exc)
        if error_code(exc) != "ConditionalCheckFailedException":
            raise
    return copied


def mark_failed(db: Db, ws: str, scope_id: str, session_id: str) -> None:
    try:
        db.client.update_item(
            TableName=db.table,
            Key=to_item(membership_key(ws, scope_id, session_id)),
            ConditionExpression="attribute_exists(PK)",
            UpdateExpression="SET #s = :failed, updated_at = :now",
            ExpressionAttributeNames={"#s": "state"},
            ExpressionAttributeValues=to_item({":failed": "failed", ":now": _now()}),
        )
    except ClientError as exc:
        if error_code(exc) != "ConditionalCheckFailedException":
            raise
