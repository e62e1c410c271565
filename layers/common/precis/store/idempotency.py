"""Exactly-once message creation: an Idempotency-Key claims a record; a repeat replays the first answer.

The record lives in its own partition (per session and key), expires after 24 hours through the table's TTL, and
is checked for expiry on read because TTL deletion lags by up to a couple of days.

Why not Powertools' Idempotency utility: it deletes its record whenever the function raises, so a request whose
transaction committed but whose answer was lost (a timeout, a 5xx after botocore's retries) would run again and
store the batch twice, and it cannot ask the table what was written. What it does well is kept: a claim is a
*lease* that ends with the function's remaining time (a crashed request frees its key within the function's
timeout, not after 24 h), and the payload is validated (another body with the same key is a 409).

Exactly once: before each transaction attempt the claim records the seq it starts at, and every message carries
the claim's token. When the outcome is unknown — the work raised something that is not a definite refusal, or a
later request finds a claim whose lease ran out — the messages at that seq tell whether the batch committed: if
they carry the token, the answer is rebuilt from them; if not, the key is released (or taken over).
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

from precis.errors import Conflict
from precis.store import keys
from precis.store.db import Db, error_code, from_item, returned_item, to_item

TTL_SECONDS = 24 * 3600
DEFAULT_LEASE_S = 30.0

# work(batch_token, on_attempt) -> (status, answer); on_attempt(first_seq) is called before each transaction attempt.
Work = Callable[[str, Callable[[int], None]], tuple[int, Any]]
# find_committed(first_seq, batch_token) -> the stored answer if that attempt committed, else None.
FindCommitted = Callable[[int, str], Any]


def run_once(
    db: Db,
    ws: str,
    session_id: str,
    key: str,
    fingerprint: str,
    work: Work,
    *,
    find_committed: FindCommitted,
    lease_s: float = DEFAULT_LEASE_S,
    now: Callable[[], float] = time.time,
) -> tuple[int, Any, bool]:
    """(status, stored answer, replayed?) for `work` run at most once per key and fingerprint."""
    record_key = keys.idempotency(ws, session_id, key)
    token = secrets.token_hex(8)
    started = now()
    try:
        db.client.put_item(
            TableName=db.table,
            Item=to_item(
                {
                    **record_key,
                    "kind": "idempotency",
                    "state": "in_progress",
                    "fingerprint": fingerprint,
                    "token": token,
                    "expires_at": int(started) + TTL_SECONDS,
                    "lease_until": started + lease_s,
                }
            ),
            ConditionExpression="attribute_not_exists(PK) OR expires_at < :now",
            ExpressionAttributeValues={":now": {"N": str(int(started))}},
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
    except ClientError as exc:
        if error_code(exc) != "ConditionalCheckFailedException":
            raise
        old = returned_item(exc) or _read(db, record_key)
        replay = _existing(db, record_key, key, fingerprint, old, token, started, lease_s, find_committed)
        if replay is not None:
            return replay
    return _run(db, record_key, token, work, find_committed)


def _existing(
    db: Db,
    record_key: dict[str, str],
    key: str,
    fingerprint: str,
    old: dict[str, Any] | None,
    token: str,
    now: float,
    lease_s: float,
    find_committed: FindCommitted,
) -> tuple[int, Any, bool] | None:
    """The replay for a key already claimed; None when this request has taken over a dead claim and should run."""
    if old is None:  # expired and removed between the two reads: the caller may simply retry
        raise Conflict(f"Idempotency-Key '{key}' is being reused; retry the request")
    if old["fingerprint"] != fingerprint:
        raise Conflict(
            f"Idempotency-Key '{key}' was already used with a different request body; use a new key for a new request"
        )
    if old["state"] == "done":
        return old["status"], json.loads(old["answer"]), True
    if old.get("lease_until", 0) > now:
        raise Conflict(f"a request with Idempotency-Key '{key}' is still being processed; retry shortly")
    # The claim's request died (crash or timeout) without finishing: did its batch commit?
    if old.get("first_seq") is not None:
        answer = find_committed(old["first_seq"], old["token"])
        if answer is not None:
            _finish(db, record_key, old["token"], 201, answer)
            return 201, answer, True
    try:
        db.client.update_item(
            TableName=db.table,
            Key=to_item(record_key),
            UpdateExpression="SET #t = :new, lease_until = :lease REMOVE first_seq",
            ConditionExpression="#t = :old AND #s = :progress",
            ExpressionAttributeNames={"#t": "token", "#s": "state"},
            ExpressionAttributeValues=to_item(
                {":new": token, ":lease": now + lease_s, ":old": old["token"], ":progress": "in_progress"}
            ),
        )
    except ClientError as exc:
        if error_code(exc) != "ConditionalCheckFailedException":
            raise
        raise Conflict(f"a request with Idempotency-Key '{key}' is still being processed; retry shortly") from None
    return None


def _run(
    db: Db, record_key: dict[str, str], token: str, work: Work, find_committed: FindCommitted
) -> tuple[int, Any, bool]:
    def on_attempt(first_seq: int) -> None:
        db.client.update_item(
            TableName=db.table,
            Key=to_item(record_key),
            UpdateExpression="SET first_seq = :s",
            ConditionExpression="#t = :t",
            ExpressionAttributeNames={"#t": "token"},
            ExpressionAttributeValues=to_item({":s": first_seq, ":t": token}),
        )

    try:
        status, answer = work(token, on_attempt)
    except Exception:
        # The outcome may be unknown (a timeout after the transaction was sent): look before releasing the key.
        record = _read(db, record_key) or {}
        first_seq = record.get("first_seq") if record.get("token") == token else None
        answer = find_committed(first_seq, token) if first_seq is not None else None
        if answer is None:
            _release(db, record_key, token)
            raise
        status = 201
    _finish(db, record_key, token, status, answer)
    return status, answer, False


def _read(db: Db, record_key: dict[str, str]) -> dict[str, Any] | None:
    return from_item(db.client.get_item(TableName=db.table, Key=to_item(record_key), ConsistentRead=True).get("Item"))


def _finish(db: Db, record_key: dict[str, str], token: str, status: int, answer: Any) -> None:
    db.client.update_item(
        TableName=db.table,
        Key=to_item(record_key),
        UpdateExpression="SET #s = :done, #st = :status, answer = :a",
        ConditionExpression="#t = :t",
        ExpressionAttributeNames={"#s": "state", "#st": "status", "#t": "token"},
        ExpressionAttributeValues=to_item(
            {":done": "done", ":status": status, ":t": token, ":a": json.dumps(answer, separators=(",", ":"))}
        ),
    )


def _release(db: Db, record_key: dict[str, str], token: str) -> None:
    """Nothing was stored for this key: free it so the client may retry with it."""
    try:
        db.client.delete_item(
            TableName=db.table,
            Key=to_item(record_key),
            ConditionExpression="#t = :t",
            ExpressionAttributeNames={"#t": "token"},
            ExpressionAttributeValues={":t": {"S": token}},
        )
    except ClientError as exc:
        if error_code(exc) != "ConditionalCheckFailedException":
            raise
