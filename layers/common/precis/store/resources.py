"""Workspaces, peers, sessions and session membership on the table."""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Callable, Iterable, Mapping, Set
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any, NotRequired, TypedDict, cast

from botocore.exceptions import ClientError

from precis.configuration import check_configuration, merge_configuration
from precis.errors import Conflict, Invalid, NotFound
from precis.settings import get_settings
from precis.sizes import fit_page
from precis.store import filters as filtering
from precis.store import keys
from precis.store.db import (
    Db,
    batch_get,
    cancellation_codes,
    error_code,
    from_item,
    projection,
    query_all,
    returned_item,
    to_item,
    transact,
)
from precis.store.records import delete_keys, json_object, json_text, page, utcnow


class WorkspaceItem(TypedDict):
    """A workspace's item as the store reads it (decoded: plain values). `metadata` and `configuration` are the JSON
    texts stored (`records.json_object` reads them)."""

    PK: str
    SK: str
    kind: str
    list_key: str
    id: str
    metadata: str
    configuration: str
    created_at: str
    updated_at: NotRequired[str]
    deleting_until: NotRequired[int]  # a delete under way, until this epoch second (store.purge)


class PeerItem(TypedDict):
    """A peer's item as the store reads it."""

    PK: str
    SK: str
    kind: str
    id: str
    workspace_id: str
    metadata: str
    configuration: str
    created_at: str
    updated_at: NotRequired[str]


class SessionItem(TypedDict):
    """A session's item as the store reads it: the live session, or a deleted one's tombstone (`deleted_at`)."""

    PK: str
    SK: str
    kind: str
    id: str
    workspace_id: str
    is_active: bool
    metadata: str
    configuration: str
    created_at: str
    incarnation: NotRequired[str]  # absent only on items written before incarnations existed
    updated_at: NotRequired[str]
    # a delete (store.purge): its time, the fence's seq, the purge's end and the purges asked again
    deleted_at: NotRequired[str]
    fence_seq: NotRequired[int]
    purged_at: NotRequired[str]
    purge_rounds: NotRequired[int]
    # a clone (store.clones): its parent, where it derives from, and its base while its copy runs
    cloned_from: NotRequired[str]
    derive_from: NotRequired[int]
    base_session: NotRequired[str]
    base_through: NotRequired[int]
    base_incarnation: NotRequired[str]
    copied_through: NotRequired[int]
    copy_rounds: NotRequired[int]  # bumped by each step that stops, so its update writes a stream record
    copied_at: NotRequired[str]


class MemberItem(TypedDict):
    """A session member's item (in the session's partition, SK `PEER#{peer_id}`); a flag not stored falls back to
    the peer's configuration."""

    PK: str
    SK: str
    kind: str
    peer_id: str
    joined_at: str
    observe_me: NotRequired[bool]
    observe_others: NotRequired[bool]
    updated_at: NotRequired[str]


# The one place each family's decoded item (`db.from_item`'s dict) is taken to be of its shape. A projected read
# holds only the fields it asked for: the shape names what the item may hold.
def as_workspace(item: dict[str, Any]) -> WorkspaceItem:
    return cast(WorkspaceItem, item)


def as_peer(item: dict[str, Any]) -> PeerItem:
    return cast(PeerItem, item)


def as_session(item: dict[str, Any]) -> SessionItem:
    return cast(SessionItem, item)


def as_member(item: dict[str, Any]) -> MemberItem:
    return cast(MemberItem, item)


def is_condition_failure(exc: ClientError) -> bool:
    return exc.response["Error"]["Code"] == "ConditionalCheckFailedException"


def workspace_view(item: WorkspaceItem) -> dict[str, Any]:
    return {
        "id": item["id"],
        "metadata": json_object(item.get("metadata")),
        "configuration": json_object(item.get("configuration")),
        "created_at": item["created_at"],
    }


def peer_view(item: PeerItem) -> dict[str, Any]:
    return {
        "id": item["id"],
        "workspace_id": item["workspace_id"],
        "metadata": json_object(item.get("metadata")),
        "configuration": json_object(item.get("configuration")),
        "created_at": item["created_at"],
    }


def session_view(item: SessionItem) -> dict[str, Any]:
    return {
        "id": item["id"],
        "is_active": item.get("is_active", True),
        "workspace_id": item["workspace_id"],
        "metadata": json_object(item.get("metadata")),
        "configuration": json_object(item.get("configuration")),
        "created_at": item["created_at"],
    }


def partition_items(db: Db, pk: str, prefix: str = "", fields: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """Every item of partition `pk` whose SK starts with `prefix` (all of them for ""), only `fields` of each when
    given (capacity is the whole items', but only those bytes come back)."""
    condition, values = "PK = :pk", {":pk": {"S": pk}}
    if prefix:
        condition, values = "PK = :pk AND begins_with(SK, :p)", {**values, ":p": {"S": prefix}}
    if fields:
        return query_all(db, KeyConditionExpression=condition, ExpressionAttributeValues=values, **projection(fields))
    return query_all(db, KeyConditionExpression=condition, ExpressionAttributeValues=values)


def _get(db: Db, key: dict[str, str]) -> dict[str, Any] | None:
    return from_item(db.client.get_item(TableName=db.table, Key=to_item(key), ConsistentRead=True).get("Item"))


def _create(db: Db, key: dict[str, str], values: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """Put `values` at `key` unless something is there; (the stored item, created?) in one request."""
    item = {**key, **values}
    try:
        db.client.put_item(
            TableName=db.table,
            Item=to_item(item),
            ConditionExpression="attribute_not_exists(PK)",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
        return item, True
    except ClientError as exc:
        if not is_condition_failure(exc):
            raise
        old = returned_item(exc) or _get(db, key)
        if old is None:  # deleted between the two requests
            raise Conflict(f"'{key['SK']}' was deleted while being read; retry the request") from None
        return old, False


def _update(
    db: Db,
    key: dict[str, str],
    changes: dict[str, Any],
    *,
    condition: str = "attribute_exists(PK)",
    values: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    """Set the non-None `changes` (and `updated_at`) on an existing item; the new item, or None when the
    condition (its placeholders' `values`) fails. An update that changes nothing still checks the condition (a PUT
    of `{}` is valid)."""
    changes = {**{k: v for k, v in changes.items() if v is not None}, "updated_at": utcnow()}
    names = {f"#a{i}": k for i, k in enumerate(changes)}
    try:
        out = db.client.update_item(
            TableName=db.table,
            Key=to_item(key),
            ConditionExpression=condition,
            ReturnValues="ALL_NEW",
            UpdateExpression="SET " + ", ".join(f"{n} = :v{i}" for i, n in enumerate(names)),
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=to_item(
                {**{f":v{i}": v for i, v in enumerate(changes.values())}, **(values or {})}
            ),
        )
    except ClientError as exc:
        if is_condition_failure(exc):
            return None
        raise
    updated: dict[str, Any] = from_item(out["Attributes"])
    return updated


# ---------------------------------------------------------------- workspaces

# A workspace delete marks the workspace for this long while it checks for sessions and removes its peers;
# creates of sessions and peers check the mark in the same transaction, so none can slip in (no check-then-act).
DELETE_LEASE_S = 60


def require_peers(db: Db, ws: str, *peer_ids: str | None) -> None:
    """NotFound (404) naming the workspace or the first of `peer_ids` (None skipped) that does not exist: one read."""
    wanted = list(dict.fromkeys(p for p in peer_ids if p))
    found = {i["SK"] for i in batch_get(db, [keys.workspace(ws), *(keys.peer(ws, p) for p in wanted)])}
    if "WS" not in found:
        raise NotFound(f"workspace '{ws}' not found")
    for peer_id in wanted:
        if f"PEER#{peer_id}" not in found:
            raise NotFound(f"peer '{peer_id}' not found in workspace '{ws}'")


def peer_exists(db: Db, ws: str, peer_id: str) -> bool:
    """Whether the peer exists: one batch read."""
    return bool(batch_get(db, [keys.peer(ws, peer_id)]))


def workspace_item(db: Db, ws: str) -> WorkspaceItem | None:
    """The workspace's item, or None: one batch read."""
    return next((as_workspace(i) for i in batch_get(db, [keys.workspace(ws)])), None)


def workspace_items(db: Db, ids: list[str]) -> list[WorkspaceItem]:
    """The items of the workspaces of `ids` that exist: BatchGetItem, 100 keys a request."""
    return [as_workspace(i) for i in batch_get(db, [keys.workspace(ws) for ws in ids])]


def require_workspace(db: Db, ws: str) -> WorkspaceItem:
    item = _get(db, keys.workspace(ws))
    if item is None:
        raise NotFound(f"workspace '{ws}' not found")
    return as_workspace(item)


def get_or_create_workspace(
    db: Db, ws: str, metadata: dict[str, Any] | None = None, configuration: dict[str, Any] | None = None
) -> tuple[dict[str, Any], bool]:
    check_configuration(configuration)
    item, created = _create(
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
    item = _update(db, keys.workspace(ws), {"metadata": json_text(metadata), "configuration": json_text(configuration)})
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


def page_of_ids(
    db: Db,
    ids: list[str],
    page_no: int,
    size: int,
    reverse: bool,
    key_of: Callable[[str], dict[str, str]],
    view_of: Callable[[dict[str, Any]], dict[str, Any]],
) -> dict[str, Any]:
    """A page of an unfiltered list from its ids alone: only the page's items are read whole (one BatchGetItem), so
    a list of many large items (64 KiB of metadata each) never brings them all into memory."""
    shown = page(ids, page_no, size, reverse, fit=False)
    found = {i["id"]: i for i in batch_get(db, [key_of(i) for i in shown["items"]])}
    return fit_page({**shown, "items": [view_of(found[i]) for i in shown["items"] if i in found]})


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


# ---------------------------------------------------------------- peers


def _peer_values(
    ws: str, peer_id: str, metadata: dict[str, Any] | None = None, configuration: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "kind": "peer",
        "id": peer_id,
        "workspace_id": ws,
        "metadata": json_text(metadata or {}),
        "configuration": json_text(configuration or {}),
        "created_at": utcnow(),
    }


def get_or_create_peer(
    db: Db, ws: str, peer_id: str, metadata: dict[str, Any] | None = None, configuration: dict[str, Any] | None = None
) -> tuple[dict[str, Any], bool]:
    """Get or create the peer; an existing one takes the `metadata` and `configuration` sent in place of its own
    (Honcho's get-or-create), written only when they differ."""
    key = keys.peer(ws, peer_id)
    item, created = _create_in_workspace(db, ws, key, _peer_values(ws, peer_id, metadata, configuration))
    changes = {} if created else _changes(item, metadata, configuration)
    if changes:
        updated = _update(db, key, changes)
        if updated is None:  # only a workspace delete removes a peer
            raise Conflict(f"peer '{peer_id}' was deleted while being updated; retry the request")
        item = updated
    return peer_view(as_peer(item)), created


def _changes(
    item: Mapping[str, Any], metadata: dict[str, Any] | None = None, configuration: dict[str, Any] | None = None
) -> dict[str, str]:
    """The stored texts of the `metadata` and `configuration` given that differ from the item's."""
    sent = {"metadata": metadata, "configuration": configuration}
    return {
        name: json_text(value)
        for name, value in sent.items()
        if value is not None and value != json_object(item.get(name))
    }


def _create_in_workspace(db: Db, ws: str, key: dict[str, str], values: dict[str, Any]) -> tuple[dict[str, Any], bool]:
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
    old = _get(db, key)
    if old is None:  # deleted between the two requests
        raise Conflict(f"'{key['SK']}' was deleted while being read; retry the request")
    return old, False


def ensure_peers(db: Db, ws: str, peer_ids: Iterable[str], known: Set[str] = frozenset()) -> None:
    """Create the peers of `peer_ids` that are not in `known` (already read) and do not exist.

    One transaction of conditional puts per 99 peers (plus the workspace check); if one was created meanwhile,
    peer by peer.
    """
    missing = [p for p in dict.fromkeys(peer_ids) if p not in known]
    for start in range(0, len(missing), 99):
        chunk = missing[start : start + 99]
        try:
            transact(
                db,
                [
                    *(
                        {
                            "Put": {
                                "TableName": db.table,
                                "Item": to_item({**keys.peer(ws, p), **_peer_values(ws, p)}),
                                "ConditionExpression": "attribute_not_exists(PK)",
                            }
                        }
                        for p in chunk
                    ),
                    workspace_open(db, ws),
                ],
            )
        except ClientError as exc:
            codes = cancellation_codes(exc)
            if not codes:
                raise
            for peer_id in chunk:
                _create_in_workspace(db, ws, keys.peer(ws, peer_id), _peer_values(ws, peer_id))


def update_peer(
    db: Db, ws: str, peer_id: str, metadata: dict[str, Any] | None = None, configuration: dict[str, Any] | None = None
) -> dict[str, Any]:
    item = _update(
        db, keys.peer(ws, peer_id), {"metadata": json_text(metadata), "configuration": json_text(configuration)}
    )
    if item is None:
        raise NotFound(f"peer '{peer_id}' not found in workspace '{ws}'")
    return peer_view(as_peer(item))


def list_peers(
    db: Db, ws: str, filters: dict[str, Any] | None, page_no: int, size: int, reverse: bool
) -> dict[str, Any]:
    require_workspace(db, ws)
    if not filters:
        ids = [i["id"] for i in partition_items(db, f"WS#{ws}", "PEER#", ("id",))]
        return page_of_ids(db, ids, page_no, size, reverse, lambda p: keys.peer(ws, p), lambda i: peer_view(as_peer(i)))
    peers = (peer_view(as_peer(i)) for i in partition_items(db, f"WS#{ws}", "PEER#"))
    views = [v for v in peers if filtering.matches(filters, v)]
    return page(views, page_no, size, reverse)


def peer_session_ids(db: Db, ws: str, peer_id: str) -> list[str]:
    """The ids of the sessions the peer has joined (a deleted session's id lingers until its purge)."""
    items = partition_items(db, keys.peer_sessions_pk(ws, peer_id), "SESSION#")
    return [i["SK"].removeprefix("SESSION#") for i in items]


_pool = ThreadPoolExecutor(max_workers=4)  # the membership reads of one request, side by side


def sessions_by_peer(db: Db, ws: str, peer_ids: Iterable[str]) -> dict[str, set[str]]:
    """The ids of the sessions each peer has joined (one Query a peer, side by side; deleted sessions' ids linger
    until their purge)."""
    peer_ids = list(dict.fromkeys(peer_ids))
    read = (map if len(peer_ids) <= 1 else _pool.map)(lambda p: peer_session_ids(db, ws, p), peer_ids)
    return {p: set(ids) for p, ids in zip(peer_ids, read, strict=True)}


def list_peer_sessions(
    db: Db, ws: str, peer_id: str, filters: dict[str, Any] | None, page_no: int, size: int, reverse: bool
) -> dict[str, Any]:
    if _get(db, keys.peer(ws, peer_id)) is None:
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


# ---------------------------------------------------------------- sessions
#
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


def read_session_item(db: Db, ws: str, session_id: str) -> SessionItem | None:
    """The session's item, deleted or not, or None: one strongly consistent GetItem."""
    item = _get(db, keys.session(ws, session_id))
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
    item = _get(db, keys.session(ws, session_id))
    if item is None or "deleted_at" in item:
        raise NotFound(f"session '{session_id}' not found in workspace '{ws}'")
    return as_session(item)


def get_or_create_session(
    db: Db,
    ws: str,
    session_id: str,
    metadata: dict[str, Any] | None = None,
    configuration: dict[str, Any] | None = None,
    peers: dict[str, dict[str, Any]] | None = None,
) -> tuple[dict[str, Any], bool]:
    # One read for the workspace and the peers that exist already (an importer names the same two in every session):
    # only the others are created, instead of a create per peer that fails and a read after it.
    found = {i["SK"]: i for i in batch_get(db, [keys.workspace(ws), *(keys.peer(ws, p) for p in peers or {})])}
    if "WS" not in found:
        raise NotFound(f"workspace '{ws}' not found")
    workspace_configuration = json_object(found["WS"].get("configuration"))
    check_configuration(workspace_configuration, configuration)
    item, created = create_session_item(db, ws, session_id, metadata, configuration)
    if not created and (metadata is not None or configuration is not None):
        item = _update_existing_session(db, ws, item, metadata, configuration, workspace_configuration)
    if peers:
        add_members(
            db,
            ws,
            session_id,
            peers,
            {p for p in peers if keys.peer(ws, p)["SK"] in found},
            incarnation=item.get("incarnation"),
        )
    return session_view(item), created


def _update_existing_session(
    db: Db,
    ws: str,
    item: SessionItem,
    metadata: dict[str, Any] | None,
    configuration: dict[str, Any] | None,
    workspace_configuration: dict[str, Any],
) -> SessionItem:
    """Honcho's get-or-create of an existing session: `metadata` replaces the stored one, `configuration`'s keys are
    merged into the stored configuration. The merge is a read-modify-write, so it is conditioned on the configuration
    it read: a concurrent change is read again and merged into, never lost."""
    session_id = item["id"]
    for _ in range(5):
        stored = json_object(item.get("configuration"))
        merged = stored if configuration is None else merge_configuration(stored, configuration)
        if merged != stored:
            check_configuration(workspace_configuration, merged)
        changes = _changes(item, metadata, merged)
        if not changes:
            return item
        condition, values = ["attribute_not_exists(deleted_at)"], {}
        read: Mapping[str, Any] = item
        for name in ("incarnation", "configuration"):  # the same incarnation, still holding what was read
            if name in read:
                condition.append(f"{name} = :{name}")
                values[f":{name}"] = read[name]
            else:
                condition.append(f"attribute_not_exists({name})")
        updated = _update(db, keys.session(ws, session_id), changes, condition=" AND ".join(condition), values=values)
        if updated is not None:
            return as_session(updated)
        fresh = _get(db, keys.session(ws, session_id))
        if fresh is None or "deleted_at" in fresh:
            raise Conflict(f"session '{session_id}' was deleted while being updated; retry the request")
        item = as_session(fresh)
    raise Conflict(f"session '{session_id}': its configuration kept changing while being merged; retry the request")


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
    item, created = _create_in_workspace(db, ws, keys.session(ws, session_id), values)
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
    item = _update(
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


# ---------------------------------------------------------------- session members


def _member_flags(item: MemberItem) -> dict[str, bool]:
    return {"observe_me": item.get("observe_me", True), "observe_others": item.get("observe_others", False)}


def members(db: Db, ws: str, session_id: str) -> dict[str, MemberItem]:
    """The session's member items by peer id (strongly consistent: the deriver decides who observes from them)."""
    return {
        i["SK"].removeprefix("PEER#"): as_member(i)
        for i in query_all(
            db,
            KeyConditionExpression="PK = :pk AND begins_with(SK, :p)",
            ConsistentRead=True,
            ExpressionAttributeValues={":pk": {"S": keys.session_pk(ws, session_id)}, ":p": {"S": "PEER#"}},
        )
    }


def add_members(
    db: Db,
    ws: str,
    session_id: str,
    peers: dict[str, dict[str, Any]],
    known_peers: Set[str] = frozenset(),
    *,
    incarnation: str | None = None,
) -> None:
    """Make `peers` members (creating unknown peers); flags given here overwrite the stored ones.

    Each write is a transaction bound to the session's incarnation (read here unless given), so members never
    land in a session deleted meanwhile, nor in a newer one of the same id.
    """
    if incarnation is None:
        incarnation = require_session(db, ws, session_id)["incarnation"]
    ensure_peers(db, ws, peers, known_peers)
    now = utcnow()
    puts = []
    for peer_id, flags in peers.items():
        flags = {k: v for k, v in (flags or {}).items() if v is not None}
        # Only the flags given are stored: an unset observe_me falls back to the peer's configuration (deriver).
        puts.append(
            {**keys.member(ws, session_id, peer_id), "kind": "member", "peer_id": peer_id, "joined_at": now, **flags}
        )
        puts.append({**keys.peer_session(ws, peer_id, session_id), "kind": "peer_session", "session_id": session_id})
    live = {
        "ConditionCheck": {
            "TableName": db.table,
            "Key": to_item(keys.session(ws, session_id)),
            "ConditionExpression": "incarnation = :inc AND attribute_not_exists(deleted_at)",
            "ExpressionAttributeValues": {":inc": {"S": incarnation}},
        }
    }
    for start in range(0, len(puts), 98):  # 49 members (two items each) + the check: DynamoDB's 100-action limit
        try:
            transact(
                db, [*({"Put": {"TableName": db.table, "Item": to_item(i)}} for i in puts[start : start + 98]), live]
            )
        except ClientError as exc:
            if cancellation_codes(exc)[-1:] == ["ConditionalCheckFailed"]:
                raise NotFound(f"session '{session_id}' not found in workspace '{ws}'") from None
            raise


def remove_members(db: Db, ws: str, session_id: str, peer_ids: Iterable[str]) -> None:
    peer_ids = list(dict.fromkeys(peer_ids))
    delete_keys(
        db, [k for p in peer_ids for k in (keys.member(ws, session_id, p), keys.peer_session(ws, p, session_id))]
    )


def set_members(
    db: Db, ws: str, session_id: str, peers: dict[str, dict[str, Any]], *, incarnation: str | None = None
) -> None:
    if incarnation is None:
        incarnation = require_session(db, ws, session_id)["incarnation"]
    current = members(db, ws, session_id)
    remove_members(db, ws, session_id, [p for p in current if p not in peers])
    add_members(db, ws, session_id, peers, incarnation=incarnation)


def list_members(db: Db, ws: str, session_id: str, page_no: int, size: int) -> dict[str, Any]:
    require_session(db, ws, session_id)
    ids = sorted(members(db, ws, session_id))
    peers = {p["id"]: as_peer(p) for p in batch_get(db, [keys.peer(ws, p) for p in ids])}
    return page([peer_view(peers[p]) for p in ids if p in peers], page_no, size)


def member_config(db: Db, ws: str, session_id: str, peer_id: str) -> dict[str, bool]:
    require_session(db, ws, session_id)
    item = _get(db, keys.member(ws, session_id, peer_id))
    if item is None:
        raise NotFound(f"peer '{peer_id}' is not a member of session '{session_id}'")
    return _member_flags(as_member(item))


def set_member_config(db: Db, ws: str, session_id: str, peer_id: str, flags: dict[str, Any]) -> None:
    require_session(db, ws, session_id)
    if _update(db, keys.member(ws, session_id, peer_id), flags) is None:
        raise NotFound(f"peer '{peer_id}' is not a member of session '{session_id}'")


def is_member(db: Db, ws: str, session_id: str, peer_id: str | None) -> bool:
    """Whether `peer_id` belongs to the live session (a deleted session's members linger until its purge)."""
    return session_id in PeerSessions(db, ws, peer_id).among([session_id])


class PeerSessions:
    """A peer's sessions as a key's reach reads them (precis.auth.Membership): nothing read until asked."""

    def __init__(self, db: Db, ws: str, peer: str | None):
        self.db, self.ws, self.peer = db, ws, peer

    def among(self, sessions: Iterable[str]) -> set[str]:
        """Those of `sessions` the peer belongs to and that are live (a deleted session's members linger until its
        purge): one BatchGetItem per 50 sessions, a member item and a session item each."""
        wanted = list(dict.fromkeys(sessions))
        if self.peer is None or not wanted:
            return set()
        asked = {s: (keys.member(self.ws, s, self.peer), keys.session(self.ws, s)) for s in wanted}
        found = {
            (i["PK"], i["SK"]): i
            for i in batch_get(self.db, [key for pair in asked.values() for key in pair], ("PK", "SK", "deleted_at"))
        }

        def live_member(member: dict[str, str], session: dict[str, str]) -> bool:
            item = found.get((session["PK"], session["SK"]))
            return (member["PK"], member["SK"]) in found and item is not None and "deleted_at" not in item

        return {s for s, (member, session) in asked.items() if live_member(member, session)}

    def joined(self) -> list[str]:
        """The sessions the peer has joined (one Query; a deleted session's id lingers until its purge)."""
        return peer_session_ids(self.db, self.ws, self.peer) if self.peer is not None else []


# ---------------------------------------------------------------- deleted sessions


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
