"""The shapes of workspace, peer, session and member items, their views, and the reads and writes all four share."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NotRequired, TypedDict, cast

from botocore.exceptions import ClientError

from precis.errors import Conflict
from precis.sizes import fit_page
from precis.store.db import (
    Db,
    batch_get,
    from_item,
    projection,
    query_all,
    read_item,
    returned_item,
    to_item,
)
from precis.store.records import json_object, json_text, page, utcnow


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
    erasing: NotRequired[list[str]]  # peers whose erasure runs (store.erase): reads that list the workspace skip them


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
    # message deletes (store.forget): the ids whose cascade is still running, and how many messages were deleted
    forgetting: NotRequired[list[str]]
    erasing: NotRequired[list[str]]  # peers whose erasure is deleting their messages here (store.erase)
    forgotten: NotRequired[int]
    expiry_day: NotRequired[int]  # retention (store.retention): the last expiry day marked, epoch days
    expiry_from: NotRequired[int]  # the seq its messages may expire from (its expiry's progress)


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


def create_item(db: Db, key: dict[str, str], values: dict[str, Any]) -> tuple[dict[str, Any], bool]:
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
        old = returned_item(exc) or read_item(db, key)
        if old is None:  # deleted between the two requests
            raise Conflict(f"'{key['SK']}' was deleted while being read; retry the request") from None
        return old, False


def update_item(
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


def changed_texts(
    item: Mapping[str, Any], metadata: dict[str, Any] | None = None, configuration: dict[str, Any] | None = None
) -> dict[str, str]:
    """The stored texts of the `metadata` and `configuration` given that differ from the item's."""
    sent = {"metadata": metadata, "configuration": configuration}
    return {
        name: json_text(value)
        for name, value in sent.items()
        if value is not None and value != json_object(item.get(name))
    }
