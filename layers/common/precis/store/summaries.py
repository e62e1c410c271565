"""Summary items and failed-job markers, written only for the session incarnation they were computed for.

A summary is written only when it covers a later message than the stored one (monotonic), and only while the
session item still carries the incarnation the summarizer read (not deleted, purged or created again since).
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from botocore.exceptions import ClientError
from precis.store import keys
from precis.store.db import Db, cancellation_codes, from_item, to_item, transact
from precis.store.resources import utcnow


class Put(Enum):
    """How a bound write ended; truthy only when it was written."""

    WRITTEN = "written"
    STALE = "stale"  # the stored summary covers as much or more (a replay, a retry or a concurrent invocation)
    SESSION_GONE = "session_gone"  # deleted, purged or created again since the summary was computed

    def __bool__(self) -> bool:
        return self is Put.WRITTEN


def put_summary(db: Db, ws: str, session_id: str, *, incarnation: str | None, summary_type: str, content: str,
                token_count: int, covers_seq: int, end_tokens: int, message_id: str,
                extra: dict[str, Any] | None = None) -> Put:
    """Store a summary of messages 1..covers_seq of incarnation `incarnation` unless the stored one covers as much.

    Stream delivery is at-least-once and invocations can overlap: the conditions make replays, retries and
    races unable to regress, duplicate or interleave a session's summary, or to put one into a session that was
    deleted or created again meanwhile (one transaction: a check of the session item, and the put).
    `incarnation` None stands for a session item written before incarnations existed (it has none).
    """
    item = {**keys.summary(ws, session_id, summary_type), "kind": "summary", "summary_type": summary_type,
            "content": content, "token_count": token_count, "covers_seq": covers_seq, "end_tokens": end_tokens,
            "message_id": message_id, "created_at": utcnow(), **(extra or {})}
    return _bound_put(db, ws, session_id, incarnation, {
        "TableName": db.table, "Item": to_item(item),
        "ConditionExpression": "attribute_not_exists(PK) OR covers_seq < :c",
        "ExpressionAttributeValues": {":c": {"N": str(covers_seq)}}})


def get_summaries(db: Db, ws: str, session_id: str) -> dict[str, dict[str, Any]]:
    """The session's stored summaries by type."""
    return read_summary_state(db, ws, session_id)[0]


def read_summary_state(db: Db, ws: str, session_id: str) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """(summaries, failed-job markers), each by summary type: one consistent query of the session's SUMMARY# items."""
    out = db.client.query(
        TableName=db.table, KeyConditionExpression="PK = :pk AND begins_with(SK, :s)", ConsistentRead=True,
        ExpressionAttributeValues={":pk": {"S": keys.session_pk(ws, session_id)}, ":s": {"S": "SUMMARY#"}})
    items = [from_item(i) for i in out["Items"]]
    return ({i["summary_type"]: i for i in items if i.get("kind") == "summary"},
            {i["summary_type"]: i for i in items if i.get("kind") == "summary_failure"})


def put_failure(db: Db, ws: str, session_id: str, *, incarnation: str | None, summary_type: str, first_seq: int,
                through_seq: int, fingerprint: str, failures: int, retry_at: float, reason: str) -> Put:
    """Remember that the `summary_type` job from `first_seq` failed for good (replacing an earlier marker).

    Bound to the incarnation like a summary, so no marker outlives a purge into a session created again.
    """
    item = {**keys.summary_failure(ws, session_id, summary_type), "kind": "summary_failure", "summary_type": summary_type,
            "first_seq": first_seq, "through_seq": through_seq, "fingerprint": fingerprint, "failures": failures,
            "retry_at": retry_at, "reason": reason[:2000], "failed_at": utcnow()}
    return _bound_put(db, ws, session_id, incarnation, {"TableName": db.table, "Item": to_item(item)})


def clear_failure(db: Db, ws: str, session_id: str, summary_type: str) -> None:
    """Forget a failed-job marker (the job has since succeeded)."""
    db.client.delete_item(TableName=db.table, Key=to_item(keys.summary_failure(ws, session_id, summary_type)))


def _bound_put(db: Db, ws: str, session_id: str, incarnation: str | None, put: dict[str, Any]) -> Put:
    """The put, in one transaction with a check that the session is still incarnation `incarnation`, not deleted."""
    if incarnation is None:
        check = {"ConditionExpression": "attribute_exists(PK) AND attribute_not_exists(incarnation) "
                                        "AND attribute_not_exists(deleted_at)"}
    else:
        check = {"ConditionExpression": "incarnation = :inc AND attribute_not_exists(deleted_at)",
                 "ExpressionAttributeValues": {":inc": {"S": incarnation}}}
    try:
        transact(db, [{"ConditionCheck": {"TableName": db.table, "Key": to_item(keys.session(ws, session_id)),
                                          **check}},
                      {"Put": put}])
    except ClientError as exc:
        codes = cancellation_codes(exc)
        if len(codes) != 2 or "ConditionalCheckFailed" not in codes:
            raise
        return Put.SESSION_GONE if codes[0] == "ConditionalCheckFailed" else Put.STALE
    return Put.WRITTEN
