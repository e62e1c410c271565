"""A workspace's webhook endpoints: one item each in the workspace's partition (a workspace delete takes them), keyed
by the URL's hash, and a counter item that holds the limit under concurrent creates.

Costs: a create is a strongly consistent GetItem (1 RRU) and, when new, one transaction of three actions (~6 WRU); a
list, a delete's or a rotation's lookup one Query of at most `limit` small items; a delete a two-action transaction
(~4 WRU); a rotation, a re-registration that changes the endpoint (its event types, re-enabling it) or disabling it
one UpdateItem (1 WRU).
"""

from __future__ import annotations

import hashlib
from typing import Any, NotRequired, TypedDict, cast

from botocore.exceptions import ClientError

from precis.errors import Conflict, NotFound
from precis.store import keys
from precis.store.db import Db, cancellation_codes, read_item, to_item, transact
from precis.store.records import utcnow
from precis.store.resources import partition_items, require_workspace, workspace_open


class SecretEntry(TypedDict):
    secret: str  # whsec_…
    expires_at: NotRequired[int]  # epoch seconds; absent: the current secret


class WebhookItem(TypedDict):
    PK: str
    SK: str
    kind: str
    id: str
    url: str
    created_at: str
    secrets: list[SecretEntry]  # newest first
    version: int  # an optimistic lock over rotations
    event_types: NotRequired[list[str]]  # the event types it subscribes to; absent: every one
    disabled_at: NotRequired[str]  # set when its deliveries kept failing: nothing is sent to it until re-registered
    disabled_reason: NotRequired[str]
    disabled_by: NotRequired[str]  # the delivery whose last attempt failed


def as_webhook(item: dict[str, Any]) -> WebhookItem:
    return cast("WebhookItem", item)


def url_key(url: str) -> str:
    """The sort-key part of an endpoint: its URL's SHA-256 (a URL may be 2,048 characters; a sort key 1,024 bytes)."""
    return hashlib.sha256(url.encode("utf-8")).hexdigest()


def endpoints(db: Db, ws: str) -> list[WebhookItem]:
    """The workspace's endpoints, oldest first: one Query of at most the limit's items."""
    found = [as_webhook(i) for i in partition_items(db, f"WS#{ws}", f"{keys.WEBHOOKS_PREFIX}#")]
    return sorted(found, key=lambda e: (e["created_at"], e["id"]))


def endpoint(db: Db, ws: str, endpoint_id: str) -> WebhookItem:
    """One endpoint by id; NotFound (404) when the workspace has none of that id."""
    for item in endpoints(db, ws):
        if item["id"] == endpoint_id:
            return item
    raise NotFound(f"webhook endpoint '{endpoint_id}' not found in workspace '{ws}'")


def get_or_create(
    db: Db, ws: str, url: str, endpoint_id: str, secret: str, *, limit: int, event_types: list[str] | None = None
) -> tuple[WebhookItem, bool]:
    """The endpoint of `url`, made with `endpoint_id`, `secret` and `event_types` (None: every one) when the workspace
    has none (True) — Conflict (409) when it already has `limit`, NotFound when the workspace does not exist."""
    key = keys.webhook(ws, url_key(url))
    existing = read_item(db, key)
    if existing is not None:
        return as_webhook(existing), False
    item: WebhookItem = {
        **key,  # type: ignore[typeddict-item]
        "kind": "webhook",
        "id": endpoint_id,
        "url": url,
        "created_at": utcnow(),
        "secrets": [{"secret": secret}],
        "version": 1,
    }
    if event_types:
        item["event_types"] = event_types
    try:
        transact(
            db,
            [
                workspace_open(db, ws),
                {
                    "Put": {
                        "TableName": db.table,
                        "Item": to_item(item),
                        "ConditionExpression": "attribute_not_exists(SK)",
                    }
                },
                {
                    "Update": {
                        "TableName": db.table,
                        "Key": to_item(keys.webhook_count(ws)),
                        "UpdateExpression": "ADD endpoints :one",
                        "ConditionExpression": "attribute_not_exists(endpoints) OR endpoints < :limit",
                        "ExpressionAttributeValues": to_item({":one": 1, ":limit": limit}),
                    }
                },
            ],
        )
    except ClientError as exc:
        codes = cancellation_codes(exc)
        if not codes:
            raise
        if codes[0] == "ConditionalCheckFailed":
            require_workspace(db, ws)
            raise Conflict(f"workspace '{ws}' is being deleted") from None
        if codes[1] == "ConditionalCheckFailed":  # a concurrent create of the same URL won: it is the endpoint
            won = read_item(db, key)
            if won is not None:
                return as_webhook(won), False
            raise Conflict(f"webhook endpoint of this URL changed meanwhile in workspace '{ws}'; retry") from None
        if codes[2] == "ConditionalCheckFailed":
            raise Conflict(
                f"workspace '{ws}' already has the most webhook endpoints it may have ({limit}); delete one first"
            ) from None
        raise
    return item, True


def delete(db: Db, ws: str, endpoint_id: str) -> None:
    """Delete one endpoint and count it out; NotFound when there is none of that id."""
    item = endpoint(db, ws, endpoint_id)
    try:
        transact(
            db,
            [
                {
                    "Delete": {
                        "TableName": db.table,
                        "Key": to_item({"PK": item["PK"], "SK": item["SK"]}),
                        "ConditionExpression": "id = :id",
                        "ExpressionAttributeValues": to_item({":id": endpoint_id}),
                    }
                },
                {
                    "Update": {
                        "TableName": db.table,
                        "Key": to_item(keys.webhook_count(ws)),
                        "UpdateExpression": "ADD endpoints :minus",
                        "ExpressionAttributeValues": to_item({":minus": -1}),
                    }
                },
            ],
        )
    except ClientError as exc:
        if cancellation_codes(exc)[:1] == ["ConditionalCheckFailed"]:  # deleted meanwhile
            raise NotFound(f"webhook endpoint '{endpoint_id}' not found in workspace '{ws}'") from None
        raise


def replace_secrets(db: Db, item: WebhookItem, secrets: list[SecretEntry]) -> WebhookItem:
    """Store `secrets` in place of the endpoint's, if no rotation changed them since `item` was read (else Conflict)."""
    try:
        db.client.update_item(
            TableName=db.table,
            Key=to_item({"PK": item["PK"], "SK": item["SK"]}),
            UpdateExpression="SET secrets = :s, version = :next",
            ConditionExpression="version = :v",
            ExpressionAttributeValues=to_item({":s": secrets, ":v": item["version"], ":next": item["version"] + 1}),
        )
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
            raise Conflict(f"webhook endpoint '{item['id']}' changed meanwhile (deleted or rotated); retry") from None
        raise
    return {**item, "secrets": secrets, "version": item["version"] + 1}


def _update(db: Db, item: WebhookItem, expression: str, values: dict[str, Any], condition: str = "id = :id") -> bool:
    """Update the endpoint in place if it is still the one of `item`'s id; False when it is gone (or the condition
    fails)."""
    try:
        db.client.update_item(
            TableName=db.table,
            Key=to_item({"PK": item["PK"], "SK": item["SK"]}),
            UpdateExpression=expression,
            ConditionExpression=condition,
            ExpressionAttributeValues=to_item({":id": item["id"], **values}),
        )
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
            return False
        raise
    return True


def reregister(db: Db, item: WebhookItem, event_types: list[str] | None) -> WebhookItem:
    """The endpoint registered again: enabled, subscribed to `event_types` (None: every one); NotFound when it was
    deleted meanwhile."""
    sets, removes, values = [], ["disabled_at", "disabled_reason", "disabled_by"], {}
    if event_types:
        sets.append("event_types = :types")
        values[":types"] = event_types
    else:
        removes.append("event_types")
    expression = ("SET " + ", ".join(sets) + " " if sets else "") + "REMOVE " + ", ".join(removes)
    if not _update(db, item, expression, values):
        raise NotFound(f"webhook endpoint '{item['id']}' was deleted meanwhile")
    updated = cast("dict[str, Any]", {k: v for k, v in item.items() if k not in removes})
    return as_webhook({**updated, **({"event_types": event_types} if event_types else {})})


def disable(db: Db, item: WebhookItem, *, at: str, reason: str, by: str) -> bool:
    """Mark the endpoint disabled by delivery `by` (deliveries to it are dropped until it is registered again); False
    when it was deleted or already disabled."""
    return _update(
        db,
        item,
        "SET disabled_at = :at, disabled_reason = :why, disabled_by = :by",
        {":at": at, ":why": reason, ":by": by},
        "id = :id AND attribute_not_exists(disabled_at)",
    )
