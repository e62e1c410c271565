"""Exactly-once message creation: an Idempotency-Key claims a record; a repeat replays the first answer.

The record lives in its own partition (per session and key), expires after 24 hours through the table's
TTL, and is checked for expiry on read because TTL deletion lags by up to a couple of days.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError
from precis.errors import Conflict
from precis.store import keys
from precis.store.db import Db, from_item, to_item

TTL_SECONDS = 24 * 3600


def run_once(db: Db, ws: str, session_id: str, key: str, fingerprint: str,
             work: Callable[[], tuple[int, Any]], *, now: Callable[[], float] = time.time,
             ) -> tuple[int, Any, bool]:
    """(status, stored answer, replayed?) for `work()` run at most once per key and fingerprint."""
    record_key = keys.idempotency(ws, session_id, key)
    started = int(now())
    try:
        db.client.put_item(
            TableName=db.table, Item=to_item({**record_key, "kind": "idempotency", "state": "in_progress",
                                              "fingerprint": fingerprint, "expires_at": started + TTL_SECONDS}),
            ConditionExpression="attribute_not_exists(PK) OR expires_at < :now",
            ExpressionAttributeValues={":now": {"N": str(started)}},
            ReturnValuesOnConditionCheckFailure="ALL_OLD")
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
            raise
        old = from_item(exc.response.get("Item")) or from_item(
            db.client.get_item(TableName=db.table, Key=to_item(record_key), ConsistentRead=True).get("Item"))
        if old is None:  # expired and removed between the two reads: the caller may simply retry
            raise Conflict(f"Idempotency-Key '{key}' is being reused; retry the request") from exc
        if old["fingerprint"] != fingerprint:
            raise Conflict(f"Idempotency-Key '{key}' was already used with a different request body; "
                           "use a new key for a new request") from exc
        if old["state"] != "done":
            raise Conflict(f"a request with Idempotency-Key '{key}' is still being processed; retry shortly") from exc
        return old["status"], json.loads(old["answer"]), True
    try:
        status, answer = work()
    except BaseException:
        # Nothing was stored for this key, so the client may retry with it.
        db.client.delete_item(TableName=db.table, Key=to_item(record_key))
        raise
    db.client.update_item(
        TableName=db.table, Key=to_item(record_key), UpdateExpression="SET #s = :done, #st = :status, answer = :a",
        ExpressionAttributeNames={"#s": "state", "#st": "status"},
        ExpressionAttributeValues=to_item({":done": "done", ":status": status,
                                           ":a": json.dumps(answer, separators=(",", ":"))}))
    return status, answer, False

