"""Summary items: written only when they cover a later message than the stored one (monotonic)."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError
from precis.store import keys
from precis.store.db import Db, from_item, to_item
from precis.store.resources import utcnow


def put_summary(db: Db, ws: str, session_id: str, *, summary_type: str, content: str, token_count: int,
                covers_seq: int, end_tokens: int, message_id: str, extra: dict[str, Any] | None = None) -> bool:
    """Store a summary of messages 1..covers_seq unless the stored one covers as much; True when written.

    Stream delivery is at-least-once and invocations can overlap: the condition makes replays, retries and
    races unable to regress, duplicate or interleave a session's summary.
    """
    item = {**keys.summary(ws, session_id, summary_type), "kind": "summary", "summary_type": summary_type,
            "content": content, "token_count": token_count, "covers_seq": covers_seq, "end_tokens": end_tokens,
            "message_id": message_id, "created_at": utcnow(), **(extra or {})}
    try:
        db.client.put_item(TableName=db.table, Item=to_item(item),
                           ConditionExpression="attribute_not_exists(PK) OR covers_seq < :c",
                           ExpressionAttributeValues={":c": {"N": str(covers_seq)}})
    except ClientError as exc:
        if exc.response["Error"]["Code"] == "ConditionalCheckFailedException":
            return False
        raise
    return True


def get_summaries(db: Db, ws: str, session_id: str) -> dict[str, dict[str, Any]]:
    """The session's stored summaries by type (one consistent query of the session's SUMMARY# items)."""
    out = db.client.query(
        TableName=db.table, KeyConditionExpression="PK = :pk AND begins_with(SK, :s)", ConsistentRead=True,
        ExpressionAttributeValues={":pk": {"S": keys.session_pk(ws, session_id)}, ":s": {"S": "SUMMARY#"}})
    return {i["summary_type"]: i for i in map(from_item, out["Items"])}
