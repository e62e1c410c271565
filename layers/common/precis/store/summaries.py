"""Summary items and failed-job markers, written only for the session incarnation they were computed for, and the
lease that lets one invocation at a time summarize a session.

A summary is written only when it covers a later message than the stored one (monotonic), and only while the
session item still carries the incarnation the summarizer read (not deleted, purged or created again since).
A short cadence summary is written with the list of short summaries since the last long one (`SummaryPart`, one
item beside it, in the same transaction): the long summary is built from them instead of the messages.
The lease is bound to no incarnation: it lives only while its holder runs, and a purge removes it with the rest of
the partition (a lease taken after a purge, by a late record of the deleted incarnation, is what `_reincarnate` finds
as a write that slipped past the purge: the id waits for another purge).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Sequence
from enum import Enum
from typing import Any, NamedTuple, NotRequired, TypedDict, cast

from botocore.exceptions import ClientError

from precis.errors import NotFound
from precis.schemas.summary_settings import LONG, ROLLING, SHORT
from precis.store import keys
from precis.store.db import (
    Db,
    batch_get,
    cancellation_codes,
    error_code,
    from_item,
    returned_item,
    to_item,
    transact,
)
from precis.store.records import utcnow
from precis.store.resources import SessionItem, WorkspaceItem, as_session, as_workspace

SUMMARY_TYPES = (SHORT, LONG, ROLLING)


class SummaryItem(TypedDict):
    """A session's summary of its messages 1..`covers_seq` as the store reads it (decoded: plain values)."""

    PK: str
    SK: str
    kind: str
    summary_type: str
    content: str
    token_count: int
    covers_seq: int
    end_tokens: int
    message_id: str  # the id of message `covers_seq`
    created_at: str
    job_through_seq: NotRequired[int]  # a step short of its job's end: the job goes on to this seq


class SummaryFailureItem(TypedDict):
    """The marker of a summary job that failed for good (SK `SUMMARY#{type}#FAILED`), read with the summaries."""

    PK: str
    SK: str
    kind: str
    summary_type: str
    first_seq: int
    through_seq: int
    fingerprint: str
    failures: int
    retry_at: float
    reason: str
    failed_at: str


class SummaryPart(TypedDict):
    """A short summary as the long one is built from it: its text, what its step read (messages first_seq..covers_seq
    after the previous short summary), its tokens."""

    first_seq: int
    covers_seq: int
    content: str
    token_count: int


class SummaryState(NamedTuple):
    """A session's summaries, failed-job markers and short summaries since the long one (parts), each by type."""

    summaries: dict[str, SummaryItem]
    markers: dict[str, SummaryFailureItem]
    parts: dict[str, list[SummaryPart]]


# The one place a decoded SUMMARY# item (`db.from_item`'s dict) is taken to be of its shape.
def as_summary(item: dict[str, Any]) -> SummaryItem:
    return cast(SummaryItem, item)


def as_summary_failure(item: dict[str, Any]) -> SummaryFailureItem:
    return cast(SummaryFailureItem, item)


class Put(Enum):
    """How a bound write ended; truthy only when it was written."""

    WRITTEN = "written"
    STALE = "stale"  # the stored summary covers as much or more (a replay, a retry or a concurrent invocation)
    SESSION_GONE = "session_gone"  # deleted, purged or created again since the summary was computed

    def __bool__(self) -> bool:
        return self is Put.WRITTEN


def put_summary(
    db: Db,
    ws: str,
    session_id: str,
    *,
    incarnation: str | None,
    summary_type: str,
    content: str,
    token_count: int,
    covers_seq: int,
    end_tokens: int,
    message_id: str,
    extra: dict[str, Any] | None = None,
    parts: Sequence[SummaryPart] | None = None,
) -> Put:
    """Store a summary of messages 1..covers_seq of incarnation `incarnation` unless the stored one covers as much.

    Stream delivery is at-least-once and invocations can overlap: the conditions make replays, retries and
    races unable to regress, duplicate or interleave a session's summary, or to put one into a session that was
    deleted or created again meanwhile (one transaction: a check of the session item, and the put).
    `incarnation` None stands for a session item written before incarnations existed (it has none).
    `parts`: the type's parts item (`SummaryPart`s, oldest first) replaced in the same transaction, so it changes
    exactly when the summary is written.
    """
    item = {
        **keys.summary(ws, session_id, summary_type),
        "kind": "summary",
        "summary_type": summary_type,
        "content": content,
        "token_count": token_count,
        "covers_seq": covers_seq,
        "end_tokens": end_tokens,
        "message_id": message_id,
        "created_at": utcnow(),
        **(extra or {}),
    }
    puts = [
        {
            "TableName": db.table,
            "Item": to_item(item),
            "ConditionExpression": "attribute_not_exists(PK) OR covers_seq < :c",
            "ExpressionAttributeValues": {":c": {"N": str(covers_seq)}},
        }
    ]
    if parts is not None:
        parts_item = {
            **keys.summary_parts(ws, session_id, summary_type),
            "kind": "summary_parts",
            "summary_type": summary_type,
            "parts": list(parts),
        }
        puts.append({"TableName": db.table, "Item": to_item(parts_item)})
    return _bound_put(db, ws, session_id, incarnation, *puts)


def session_with_summaries(
    db: Db, ws: str, session_id: str, fields: tuple[str, ...] | None = None, peers: tuple[str, ...] = ()
) -> tuple[SessionItem | None, dict[str, SummaryItem], WorkspaceItem | None]:
    """(session, its summaries by type, workspace) in one BatchGetItem, `fields` of each; with `peers`, their items
    too: NotFound for one the (existing) workspace lacks."""
    wanted = [
        keys.session(ws, session_id),
        keys.workspace(ws),
        *(keys.summary(ws, session_id, t) for t in SUMMARY_TYPES),
        *(keys.peer(ws, p) for p in peers),
    ]
    found = batch_get(db, wanted, fields)
    missing = sorted(set(peers) - {i["SK"].removeprefix("PEER#") for i in found if i["SK"].startswith("PEER#")})
    if missing and any(i["SK"] == "WS" for i in found):
        raise NotFound(f"peer '{missing[0]}' not found in workspace '{ws}'")
    session = next((as_session(i) for i in found if i["SK"].startswith("SESSION#")), None)
    workspace = next((as_workspace(i) for i in found if i["SK"] == "WS"), None)
    summaries = {i["summary_type"]: as_summary(i) for i in found if i["SK"].startswith("SUMMARY#")}
    return session, summaries, workspace


def read_summary(db: Db, ws: str, session_id: str, summary_type: str) -> SummaryItem | None:
    """The session's `summary_type` summary, strongly consistent (one GetItem), or None."""
    key = to_item(keys.summary(ws, session_id, summary_type))
    item = from_item(db.client.get_item(TableName=db.table, Key=key, ConsistentRead=True).get("Item"))
    return None if item is None else as_summary(item)


def get_summaries(db: Db, ws: str, session_id: str) -> dict[str, SummaryItem]:
    """The session's stored summaries by type."""
    return read_summary_state(db, ws, session_id)[0]


def read_summary_state(
    db: Db, ws: str, session_id: str
) -> tuple[dict[str, SummaryItem], dict[str, SummaryFailureItem]]:
    """(summaries, failed-job markers), each by summary type: one consistent query of the session's SUMMARY# items."""
    state = read_summary_items(db, ws, session_id)
    return state.summaries, state.markers


def read_summary_items(db: Db, ws: str, session_id: str) -> SummaryState:
    """The session's summaries, markers and parts: one consistent query of its SUMMARY# items (a few, each bounded:
    one summary, marker and parts item per type)."""
    out = db.client.query(
        TableName=db.table,
        KeyConditionExpression="PK = :pk AND begins_with(SK, :s)",
        ConsistentRead=True,
        ExpressionAttributeValues={":pk": {"S": keys.session_pk(ws, session_id)}, ":s": {"S": "SUMMARY#"}},
    )
    items = [from_item(i) for i in out["Items"]]
    return SummaryState(
        {i["summary_type"]: as_summary(i) for i in items if i.get("kind") == "summary"},
        {i["summary_type"]: as_summary_failure(i) for i in items if i.get("kind") == "summary_failure"},
        {i["summary_type"]: cast(list[SummaryPart], i["parts"]) for i in items if i.get("kind") == "summary_parts"},
    )


def put_failure(
    db: Db,
    ws: str,
    session_id: str,
    *,
    incarnation: str | None,
    summary_type: str,
    first_seq: int,
    through_seq: int,
    fingerprint: str,
    failures: int,
    retry_at: float,
    reason: str,
) -> Put:
    """Remember that the `summary_type` job from `first_seq` failed for good (replacing an earlier marker).

    Bound to the incarnation like a summary, so no marker outlives a purge into a session created again.
    """
    item = {
        **keys.summary_failure(ws, session_id, summary_type),
        "kind": "summary_failure",
        "summary_type": summary_type,
        "first_seq": first_seq,
        "through_seq": through_seq,
        "fingerprint": fingerprint,
        "failures": failures,
        "retry_at": retry_at,
        "reason": reason[:2000],
        "failed_at": utcnow(),
    }
    return _bound_put(db, ws, session_id, incarnation, {"TableName": db.table, "Item": to_item(item)})


def clear_failure(db: Db, ws: str, session_id: str, summary_type: str) -> None:
    """Forget a failed-job marker (the job has since succeeded)."""
    db.client.delete_item(TableName=db.table, Key=to_item(keys.summary_failure(ws, session_id, summary_type)))


def _bound_put(db: Db, ws: str, session_id: str, incarnation: str | None, *puts: dict[str, Any]) -> Put:
    """The puts, in one transaction with a check that the session is still incarnation `incarnation`, not deleted, and
    deleting no message (`forgetting`: a summary read before a message delete may hold it; the delete's cascade
    summarizes again, under the lease, once it is done) (the first put's condition is the one that can fail: STALE)."""
    check: dict[str, Any]
    if incarnation is None:
        check = {
            "ConditionExpression": "attribute_exists(PK) AND attribute_not_exists(incarnation) "
            "AND attribute_not_exists(deleted_at) AND attribute_not_exists(forgetting)"
        }
    else:
        check = {
            "ConditionExpression": "incarnation = :inc AND attribute_not_exists(deleted_at) "
            "AND attribute_not_exists(forgetting)",
            "ExpressionAttributeValues": {":inc": {"S": incarnation}},
        }
    try:
        transact(
            db,
            [
                {"ConditionCheck": {"TableName": db.table, "Key": to_item(keys.session(ws, session_id)), **check}},
                *({"Put": put} for put in puts),
            ],
        )
    except ClientError as exc:
        codes = cancellation_codes(exc)
        if len(codes) != 1 + len(puts) or "ConditionalCheckFailed" not in codes:
            raise
        return Put.SESSION_GONE if codes[0] == "ConditionalCheckFailed" else Put.STALE
    return Put.WRITTEN


# --- the summarizer's lease ---------------------------------------------------------------------------------------

# Times a take may find the lease changing hands (let go, expired, taken) before the caller's records fail instead.
LEASE_ATTEMPTS = 8
# Placeholders for the lease's attributes: OWNER is a DynamoDB reserved word.
_LEASE_NAMES = {"#owner": "owner", "#until": "lease_until", "#dirty": "dirty", "#record": "record"}


def take_summary_lease(
    db: Db,
    ws: str,
    session_id: str,
    *,
    owner: str,
    until: float,
    clock: Callable[[], float],
    records: Collection[str] = (),
) -> bool:
    """Take the session's summarizer lease for `owner` until `until` (epoch seconds, `clock`'s); False when another
    invocation holds it.

    A holder found is marked `dirty` (only while it still holds the lease), so it summarizes once more before letting
    go: the caller may acknowledge its records. A lease held for one of `records` (stream sequence numbers of the
    caller's batch for this session) is taken over at once: Lambda sends a batch again only after the invocation
    that had it ended, so that holder ended without letting go (it crashed) and will not run again.
    """
    key = keys.summary_lease(ws, session_id)
    item = {**key, "kind": "summary_lease", "owner": owner, "lease_until": until, "record": next(iter(records), None)}
    for _ in range(LEASE_ATTEMPTS):
        now = clock()
        held = _put_lease(db, item, "attribute_not_exists(PK) OR #until < :now", {":now": now})
        if held is None:
            return True
        if not held:
            continue  # let go between the put and its answer
        if held.get("record") in records:
            if _put_lease(db, item, "#owner = :holder", {":holder": held["owner"]}) is None:
                return True
        elif _update_lease(
            db,
            key,
            "SET #dirty = :yes",
            "#owner = :holder AND #until >= :now",
            {":yes": True, ":holder": held["owner"], ":now": now},
        ):
            return False
        # The holder let go, or its lease expired, or someone else took it over meanwhile: look again.
    raise RuntimeError(
        f"session '{session_id}': its summarizer lease changed hands {LEASE_ATTEMPTS} times while being taken"
    )


def release_summary_lease(db: Db, ws: str, session_id: str, *, owner: str) -> bool:
    """Let go of the lease unless it was marked dirty; then clear the mark and answer False: summarize again (what
    the marks were for), then release again.

    True as well when the lease is no longer `owner`'s (it expired and was taken over, or a purge removed it): its
    new holder took it after every mark made on this one, so its own run reads what they were for.
    """
    key = keys.summary_lease(ws, session_id)
    held = _delete_lease(db, key, "#owner = :me AND attribute_not_exists(#dirty)", {":me": owner})
    if held is None or held.get("owner") != owner:
        return True
    return not _update_lease(db, key, "REMOVE #dirty", "#owner = :me", {":me": owner})


def drop_summary_lease(db: Db, ws: str, session_id: str, *, owner: str) -> None:
    """Let go of the lease, marked or not (the holder failed its records: their retry summarizes again)."""
    _delete_lease(db, keys.summary_lease(ws, session_id), "#owner = :me", {":me": owner})


def _lease_request(condition: str, values: dict[str, Any]) -> dict[str, Any]:
    return {
        "ConditionExpression": condition,
        "ExpressionAttributeValues": to_item(values),
        "ExpressionAttributeNames": {n: a for n, a in _LEASE_NAMES.items() if n in condition},
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }


def _put_lease(db: Db, item: dict[str, Any], condition: str, values: dict[str, Any]) -> dict[str, Any] | None:
    """Put the lease item if `condition` holds: None when it did, else the item in the way ({} if there is none)."""
    try:
        db.client.put_item(TableName=db.table, Item=to_item(item), **_lease_request(condition, values))
    except ClientError as exc:
        if error_code(exc) != "ConditionalCheckFailedException":
            raise
        return returned_item(exc) or {}
    return None


def _delete_lease(db: Db, key: dict[str, str], condition: str, values: dict[str, Any]) -> dict[str, Any] | None:
    """Delete the lease item if `condition` holds: None when it did, else the item in the way ({} if there is none)."""
    try:
        db.client.delete_item(TableName=db.table, Key=to_item(key), **_lease_request(condition, values))
    except ClientError as exc:
        if error_code(exc) != "ConditionalCheckFailedException":
            raise
        return returned_item(exc) or {}
    return None


def _update_lease(db: Db, key: dict[str, str], update: str, condition: str, values: dict[str, Any]) -> bool:
    """Update the lease item if `condition` holds; whether it did."""
    request = _lease_request(condition, values)
    request["ExpressionAttributeNames"] = {n: a for n, a in _LEASE_NAMES.items() if n in condition or n in update}
    try:
        db.client.update_item(TableName=db.table, Key=to_item(key), UpdateExpression=update, **request)
    except ClientError as exc:
        if error_code(exc) != "ConditionalCheckFailedException":
            raise
        return False
    return True


def write_audit(
    db: Db,
    ws: str,
    session_id: str,
    summary_type: str,
    covers_seq: int,
    name: str,
    record: dict[str, Any],
    *,
    incarnation: str,
) -> None:
    """A summary step's audit record, a JSON object in the bucket (`keys.audit_object`)."""
    key = keys.audit_object(ws, session_id, summary_type, covers_seq, name, incarnation=incarnation)
    db.s3.put_object(
        Bucket=db.bucket, Key=key, Body=json.dumps(record, ensure_ascii=False).encode(), ContentType="application/json"
    )
