"""A webhook endpoint's delivery log: one item per delivery in the workspace's partition (a workspace delete takes
them), sorted by when the delivery was made, gone with the table's TTL DELIVERY_TTL_S after its last attempt.

Costs: each attempt is one UpdateItem of a small item (1 WRU); a page of the log one Query of at most `limit` items
(newest first, ~0.5 RRU per 4 KB eventually consistent: an item is at most ~0.6 KB, its error excerpt 256 bytes).
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from precis.store.db import Db, from_item, to_item

DELIVERY_TTL_S = 3 * 24 * 3600
PREFIX = "HOOKLOG"


def _sk(endpoint_id: str, created: str = "", delivery_id: str = "") -> str:
    return f"{PREFIX}#{endpoint_id}#{created}#{delivery_id}" if created else f"{PREFIX}#{endpoint_id}#"


def record(
    db: Db,
    ws: str,
    endpoint_id: str,
    delivery_id: str,
    created: str,
    *,
    event_type: str,
    status: str,
    attempt: int,
    now: int,
    http_status: int | None = None,
    error: str | None = None,
) -> None:
    """Record one attempt of a delivery: its status, the attempts so far, the receiver's status and the last error
    excerpt. An attempt older than the one recorded (SQS delivers at least once) changes nothing."""
    values: dict[str, Any] = {
        ":kind": "webhook_delivery",
        ":id": delivery_id,
        ":endpoint": endpoint_id,
        ":type": event_type,
        ":status": status,
        ":attempt": attempt,
        ":created": created,
        ":now": now,
        ":exp": now + DELIVERY_TTL_S,
    }
    sets = [
        "kind = :kind",
        "id = :id",
        "endpoint_id = :endpoint",
        "event_type = :type",
        "#s = :status",
        "attempts = :attempt",
        "created_at = :created",
        "updated_at = :now",
        "expires_at = :exp",
    ]
    removes = []
    for name, value in (("http_status", http_status), ("last_error", error)):
        if value is None:
            removes.append(name)
        else:
            sets.append(f"{name} = :{name}")
            values[f":{name}"] = value
    try:
        db.client.update_item(
            TableName=db.table,
            Key=to_item({"PK": f"WS#{ws}", "SK": _sk(endpoint_id, created, delivery_id)}),
            UpdateExpression="SET " + ", ".join(sets) + (" REMOVE " + ", ".join(removes) if removes else ""),
            ConditionExpression="attribute_not_exists(attempts) OR attempts <= :attempt",
            ExpressionAttributeNames={"#s": "status"},
            ExpressionAttributeValues=to_item(values),
        )
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
            raise


def deliveries(db: Db, ws: str, endpoint_id: str, *, limit: int) -> list[dict[str, Any]]:
    """The endpoint's latest `limit` deliveries, newest first: one Query."""
    answer = db.client.query(
        TableName=db.table,
        KeyConditionExpression="PK = :pk AND begins_with(SK, :sk)",
        ExpressionAttributeValues=to_item({":pk": f"WS#{ws}", ":sk": _sk(endpoint_id)}),
        ScanIndexForward=False,
        Limit=limit,
    )
    return [from_item(i) or {} for i in answer.get("Items", [])]
