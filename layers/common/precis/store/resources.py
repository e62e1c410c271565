"""Workspaces, peers, sessions and session membership on the table."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError
from precis import filters as filtering
from precis.configuration import summary_config
from precis.errors import Conflict, NotFound
from precis.store import keys
from precis.store.db import Db, batch_get, from_item, query_all, to_item


def utcnow() -> str:
    return datetime.now(UTC).isoformat()


def _is_condition_failure(exc: ClientError) -> bool:
    return exc.response["Error"]["Code"] == "ConditionalCheckFailedException"


def _json(raw: str | None) -> dict[str, Any]:
    return json.loads(raw) if raw else {}


def workspace_view(item: dict[str, Any]) -> dict[str, Any]:
    return {"id": item["id"], "metadata": _json(item.get("metadata")),
            "configuration": _json(item.get("configuration")), "created_at": item["created_at"]}


def peer_view(item: dict[str, Any]) -> dict[str, Any]:
    return {"id": item["id"], "workspace_id": item["workspace_id"], "metadata": _json(item.get("metadata")),
            "configuration": _json(item.get("configuration")), "created_at": item["created_at"]}


def session_view(item: dict[str, Any]) -> dict[str, Any]:
    return {"id": item["id"], "is_active": item.get("is_active", True), "workspace_id": item["workspace_id"],
            "metadata": _json(item.get("metadata")), "configuration": _json(item.get("configuration")),
            "created_at": item["created_at"]}


def page(records: list[dict[str, Any]], page_no: int, size: int, reverse: bool = False) -> dict[str, Any]:
    """A Honcho page of already-filtered records (pages are exact)."""
    if reverse:
        records = records[::-1]
    start = (page_no - 1) * size
    return {"items": records[start:start + size] if start < len(records) else [], "total": len(records),
            "page": page_no, "size": size, "pages": math.ceil(len(records) / size)}


def _query_all(db: Db, pk: str, prefix: str = "") -> list[dict[str, Any]]:
    """Every item of partition `pk` whose SK starts with `prefix` (all of them for "")."""
    if not prefix:
        return query_all(db, KeyConditionExpression="PK = :pk", ExpressionAttributeValues={":pk": {"S": pk}})
    return query_all(db, KeyConditionExpression="PK = :pk AND begins_with(SK, :p)",
                     ExpressionAttributeValues={":pk": {"S": pk}, ":p": {"S": prefix}})


def _get(db: Db, key: dict[str, str]) -> dict[str, Any] | None:
    return from_item(db.client.get_item(TableName=db.table, Key=to_item(key), ConsistentRead=True).get("Item"))


def _create(db: Db, key: dict[str, str], values: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """Put `values` at `key` unless something is there; (the stored item, created?) in one request."""
    item = {**key, **values}
    try:
        db.client.put_item(TableName=db.table, Item=to_item(item), ConditionExpression="attribute_not_exists(PK)",
                           ReturnValuesOnConditionCheckFailure="ALL_OLD")
        return item, True
    except ClientError as exc:
        if not _is_condition_failure(exc):
            raise
        old = from_item(exc.response.get("Item")) or _get(db, key)
        return old, False


def _update(db: Db, key: dict[str, str], changes: dict[str, Any], *, condition: str = "attribute_exists(PK)",
            ) -> dict[str, Any] | None:
    """Set the non-None `changes` (and `updated_at`) on an existing item; the new item, or None when the
    condition fails. An update that changes nothing still checks the condition (a PUT of `{}` is valid)."""
    changes = {**{k: v for k, v in changes.items() if v is not None}, "updated_at": utcnow()}
    names = {f"#a{i}": k for i, k in enumerate(changes)}
    kwargs = {"UpdateExpression": "SET " + ", ".join(f"{n} = :v{i}" for i, n in enumerate(names)),
              "ExpressionAttributeNames": names,
              "ExpressionAttributeValues": to_item({f":v{i}": v for i, v in enumerate(changes.values())})}
    try:
        out = db.client.update_item(TableName=db.table, Key=to_item(key), ConditionExpression=condition,
                                    ReturnValues="ALL_NEW", **kwargs)
    except ClientError as exc:
        if _is_condition_failure(exc):
            return None
        raise
    return from_item(out["Attributes"])


def _dump(value: dict[str, Any] | None) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False, separators=(",", ":"))


# ---------------------------------------------------------------- workspaces

def require_workspace(db: Db, ws: str) -> dict[str, Any]:
    item = _get(db, keys.workspace(ws))
    if item is None:
        raise NotFound(f"workspace '{ws}' not found")
    return item


def get_or_create_workspace(db: Db, ws: str, metadata=None, configuration=None) -> tuple[dict[str, Any], bool]:
    summary_config(configuration)
    item, created = _create(db, keys.workspace(ws), {
        "kind": "workspace", "list_key": "workspaces", "id": ws, "metadata": _dump(metadata or {}),
        "configuration": _dump(configuration or {}), "created_at": utcnow()})
    return workspace_view(item), created


def update_workspace(db: Db, ws: str, metadata=None, configuration=None) -> dict[str, Any]:
    summary_config(configuration)
    item = _update(db, keys.workspace(ws), {"metadata": _dump(metadata), "configuration": _dump(configuration)})
    if item is None:
        raise NotFound(f"workspace '{ws}' not found")
    return workspace_view(item)


def list_workspaces(db: Db, filters, page_no: int, size: int, reverse: bool) -> dict[str, Any]:
    items = query_all(db, IndexName="ByListKey", KeyConditionExpression="list_key = :k",
                      ExpressionAttributeValues={":k": {"S": "workspaces"}})
    views = [v for v in map(workspace_view, items) if filtering.matches(filters, v)]
    return page(views, page_no, size, reverse)


def delete_workspace(db: Db, ws: str) -> None:
    require_workspace(db, ws)
    # Sessions already deleted do not block: the stream consumer is purging them.
    sessions = [s["id"] for s in _query_all(db, f"WS#{ws}", "SESSION#") if "deleted_at" not in s]
    if sessions:
        shown = ", ".join(sessions[:5]) + (", …" if len(sessions) > 5 else "")
        raise Conflict(f"workspace '{ws}' still has {len(sessions)} session(s) ({shown}); delete them first")
    rest = _query_all(db, f"WS#{ws}", "PEER#") + _query_all(db, f"WS#{ws}", "WS")
    _delete_keys(db, ({"PK": i["PK"], "SK": i["SK"]} for i in rest))


def _delete_keys(db: Db, key_iter: Iterable[dict[str, str]]) -> None:
    batch: list[dict[str, Any]] = []
    for key in key_iter:
        batch.append({"DeleteRequest": {"Key": to_item(key)}})
        if len(batch) == 25:
            _write_batch(db, batch)
            batch = []
    if batch:
        _write_batch(db, batch)


def _write_batch(db: Db, requests: list[dict[str, Any]]) -> None:
    pending = {db.table: requests}
    while pending:
        pending = db.client.batch_write_item(RequestItems=pending).get("UnprocessedItems") or {}


# ---------------------------------------------------------------- peers

def _peer_values(ws: str, peer_id: str, metadata=None, configuration=None) -> dict[str, Any]:
    return {"kind": "peer", "id": peer_id, "workspace_id": ws, "metadata": _dump(metadata or {}),
            "configuration": _dump(configuration or {}), "created_at": utcnow()}


def get_or_create_peer(db: Db, ws: str, peer_id: str, metadata=None, configuration=None):
    require_workspace(db, ws)
    item, created = _create(db, keys.peer(ws, peer_id), _peer_values(ws, peer_id, metadata, configuration))
    return peer_view(item), created


def ensure_peers(db: Db, ws: str, peer_ids: Iterable[str], known: set[str] = frozenset()) -> None:
    """Create the peers of `peer_ids` that are not in `known` (already read) and do not exist.

    One transaction of conditional puts per 100 peers; if one was created meanwhile, peer by peer.
    """
    missing = [p for p in dict.fromkeys(peer_ids) if p not in known]
    for start in range(0, len(missing), 100):
        chunk = missing[start:start + 100]
        try:
            db.client.transact_write_items(TransactItems=[
                {"Put": {"TableName": db.table, "Item": to_item({**keys.peer(ws, p), **_peer_values(ws, p)}),
                         "ConditionExpression": "attribute_not_exists(PK)"}} for p in chunk])
        except ClientError as exc:
            if exc.response["Error"]["Code"] not in ("TransactionCanceledException", "TransactionConflictException"):
                raise
            for peer_id in chunk:
                _create(db, keys.peer(ws, peer_id), _peer_values(ws, peer_id))


def update_peer(db: Db, ws: str, peer_id: str, metadata=None, configuration=None) -> dict[str, Any]:
    item = _update(db, keys.peer(ws, peer_id), {"metadata": _dump(metadata), "configuration": _dump(configuration)})
    if item is None:
        raise NotFound(f"peer '{peer_id}' not found in workspace '{ws}'")
    return peer_view(item)


def list_peers(db: Db, ws: str, filters, page_no: int, size: int, reverse: bool) -> dict[str, Any]:
    require_workspace(db, ws)
    views = [v for v in map(peer_view, _query_all(db, f"WS#{ws}", "PEER#")) if filtering.matches(filters, v)]
    return page(views, page_no, size, reverse)


def list_peer_sessions(db: Db, ws: str, peer_id: str, filters, page_no: int, size: int, reverse: bool):
    if _get(db, keys.peer(ws, peer_id)) is None:
        raise NotFound(f"peer '{peer_id}' not found in workspace '{ws}'")
    ids = [i["SK"].removeprefix("SESSION#") for i in _query_all(db, keys.peer_sessions_pk(ws, peer_id), "SESSION#")]
    sessions = batch_get(db, [keys.session(ws, s) for s in ids])
    views = [session_view(s) for s in sessions if "deleted_at" not in s]
    views.sort(key=lambda v: v["id"])
    return page([v for v in views if filtering.matches(filters, v)], page_no, size, reverse)


# ---------------------------------------------------------------- sessions

def require_session(db: Db, ws: str, session_id: str) -> dict[str, Any]:
    item = _get(db, keys.session(ws, session_id))
    if item is None or "deleted_at" in item:
        raise NotFound(f"session '{session_id}' not found in workspace '{ws}'")
    return item


def get_or_create_session(db: Db, ws: str, session_id: str, metadata=None, configuration=None,
                          peers: dict[str, dict[str, Any]] | None = None) -> tuple[dict[str, Any], bool]:
    workspace = require_workspace(db, ws)
    summary_config(_json(workspace.get("configuration")), configuration)
    item, created = create_session_item(db, ws, session_id, metadata, configuration)
    if peers:
        add_members(db, ws, session_id, peers)
    return session_view(item), created


def create_session_item(db: Db, ws: str, session_id: str, metadata=None, configuration=None,
                        ) -> tuple[dict[str, Any], bool]:
    """Get or create the session item of a workspace known to exist; Conflict while it is being purged."""
    item, created = _create(db, keys.session(ws, session_id), {
        "kind": "session", "id": session_id, "workspace_id": ws, "is_active": True,
        "metadata": _dump(metadata or {}), "configuration": _dump(configuration or {}), "created_at": utcnow()})
    if "deleted_at" in item:
        raise Conflict(f"session '{session_id}' is being deleted; create it again once that finishes")
    return item, created


def update_session(db: Db, ws: str, session_id: str, metadata=None, configuration=None) -> dict[str, Any]:
    if configuration is not None:
        summary_config(_json(require_workspace(db, ws).get("configuration")), configuration)
    item = _update(db, keys.session(ws, session_id), {"metadata": _dump(metadata), "configuration": _dump(configuration)},
                   condition="attribute_exists(PK) AND attribute_not_exists(deleted_at)")
    if item is None:
        raise NotFound(f"session '{session_id}' not found in workspace '{ws}'")
    return session_view(item)


def delete_session(db: Db, ws: str, session_id: str) -> None:
    """Mark the session deleted (it answers 404 at once); the stream consumer purges its data."""
    item = _update(db, keys.session(ws, session_id), {"deleted_at": utcnow(), "is_active": False},
                   condition="attribute_exists(PK) AND attribute_not_exists(deleted_at)")
    if item is None:
        raise NotFound(f"session '{session_id}' not found in workspace '{ws}'")


def purge_session(db: Db, ws: str, session_id: str) -> int:
    """Remove a deleted session's messages, summaries, members and finally the session item itself."""
    pk = keys.session_pk(ws, session_id)
    items = _query_all(db, pk)
    bodies = [i["body_key"] for i in items if i.get("body_key")]
    for start in range(0, len(bodies), 1000):
        db.s3.delete_objects(Bucket=db.bucket, Delete={"Objects": [{"Key": k} for k in bodies[start:start + 1000]]})
    members = [i["SK"].removeprefix("PEER#") for i in items if i["SK"].startswith("PEER#")]
    _delete_keys(db, [*({"PK": i["PK"], "SK": i["SK"]} for i in items),
                      *(keys.peer_session(ws, p, session_id) for p in members)])
    db.client.delete_item(TableName=db.table, Key=to_item(keys.session(ws, session_id)),
                          ConditionExpression="attribute_exists(deleted_at)")
    return len(items)


def list_sessions(db: Db, ws: str, filters, page_no: int, size: int, reverse: bool) -> dict[str, Any]:
    require_workspace(db, ws)
    items = [i for i in _query_all(db, f"WS#{ws}", "SESSION#") if "deleted_at" not in i]
    views = [v for v in map(session_view, items) if filtering.matches(filters, v)]
    return page(views, page_no, size, reverse)


# ---------------------------------------------------------------- session members

def _member_flags(item: dict[str, Any]) -> dict[str, bool]:
    return {"observe_me": item.get("observe_me", True), "observe_others": item.get("observe_others", False)}


def members(db: Db, ws: str, session_id: str) -> dict[str, dict[str, Any]]:
    return {i["SK"].removeprefix("PEER#"): i for i in _query_all(db, keys.session_pk(ws, session_id), "PEER#")}


def add_members(db: Db, ws: str, session_id: str, peers: dict[str, dict[str, Any]],
                known_peers: set[str] = frozenset()) -> None:
    """Make `peers` members (creating unknown peers); flags given here overwrite the stored ones."""
    ensure_peers(db, ws, peers, known_peers)
    now = utcnow()
    requests = []
    for peer_id, flags in peers.items():
        flags = {k: v for k, v in (flags or {}).items() if v is not None}
        requests.append({"PutRequest": {"Item": to_item({
            **keys.member(ws, session_id, peer_id), "kind": "member", "peer_id": peer_id, "joined_at": now,
            **{**{"observe_me": True, "observe_others": False}, **flags}})}})
        requests.append({"PutRequest": {"Item": to_item({
            **keys.peer_session(ws, peer_id, session_id), "kind": "peer_session", "session_id": session_id})}})
    for start in range(0, len(requests), 24):
        _write_batch(db, requests[start:start + 24])


def remove_members(db: Db, ws: str, session_id: str, peer_ids: Iterable[str]) -> None:
    peer_ids = list(dict.fromkeys(peer_ids))
    _delete_keys(db, [k for p in peer_ids for k in (keys.member(ws, session_id, p), keys.peer_session(ws, p, session_id))])


def set_members(db: Db, ws: str, session_id: str, peers: dict[str, dict[str, Any]]) -> None:
    current = members(db, ws, session_id)
    remove_members(db, ws, session_id, [p for p in current if p not in peers])
    add_members(db, ws, session_id, peers)


def list_members(db: Db, ws: str, session_id: str, page_no: int, size: int) -> dict[str, Any]:
    require_session(db, ws, session_id)
    ids = sorted(members(db, ws, session_id))
    peers = {p["id"]: p for p in batch_get(db, [keys.peer(ws, p) for p in ids])}
    return page([peer_view(peers[p]) for p in ids if p in peers], page_no, size)


def member_config(db: Db, ws: str, session_id: str, peer_id: str) -> dict[str, bool]:
    require_session(db, ws, session_id)
    item = _get(db, keys.member(ws, session_id, peer_id))
    if item is None:
        raise NotFound(f"peer '{peer_id}' is not a member of session '{session_id}'")
    return _member_flags(item)


def set_member_config(db: Db, ws: str, session_id: str, peer_id: str, flags: dict[str, Any]) -> None:
    require_session(db, ws, session_id)
    if _update(db, keys.member(ws, session_id, peer_id), flags) is None:
        raise NotFound(f"peer '{peer_id}' is not a member of session '{session_id}'")



def is_member(db: Db, ws: str, session_id: str, peer_id: str | None) -> bool:
    """Whether `peer_id` belongs to the (live) session."""
    if peer_id is None:
        return False
    return _get(db, keys.member(ws, session_id, peer_id)) is not None
