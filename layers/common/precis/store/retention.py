"""Retention: a session's messages expire N days after they were stored (docs/design.md, "Retention").

A message keeps its expiry in `retain_until` (epoch seconds), written with it: every read hides it from then on. It is
not the table's TTL attribute: a message the TTL service removed would leave only its keys on the stream (NEW_IMAGE)
and a hole at its seq. The TTL works on one small marker per session and expiry day instead (`EXPIRY#{day}`, its
`expires_at` the end of that day): its removal, a REMOVE record made by the TTL service, wakes the deriver, which
deletes the session's expired messages one by one as a message delete does (store.forget), so an expiry cleans exactly
what a delete cleans, through the same tombstone and cascade.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from precis.store import keys
from precis.store.db import Db, error_code, from_item, query_all, to_item

DAY_S = 86_400
MARKER = "EXPIRY#"  # the sort-key prefix of a session's expiry markers (and of its running expiry, `EXPIRY#run`)
RUN_SK = f"{MARKER}run"
TTL_SERVICE = "dynamodb.amazonaws.com"  # the userIdentity.principalId of a record the TTL service made
_PAGE = 100

# Where the store reads the time for retention (a test's clock replaces it; every reader goes through `now`).
clock: Callable[[], float] = time.time


def now() -> float:
    return clock()


def retain_until(days: int | None, stored_at: float) -> int | None:
    """The epoch second a message stored at `stored_at` expires, under a setting of `days` (None: never)."""
    return None if not days else int(stored_at) + days * DAY_S


def expired(item: Mapping[str, Any], at: float | None = None) -> bool:
    """Whether a stored message has expired (hidden from every read from that second on)."""
    until = item.get("retain_until")
    return until is not None and float(until) <= (now() if at is None else at)


def marker_day(until: int) -> int:
    """The expiry day (epoch days) whose marker covers a message expiring at `until`."""
    return until // DAY_S


def marker_actions(
    db: Db, ws: str, session_id: str, session: Mapping[str, Any], until: int, first_seq: Callable[[], int]
) -> list[dict[str, Any]]:
    """The writes (none, or two) that make sure a marker fires at or after `until`: only the first batch of a session
    on each new expiry day writes them (the session item notes the last day marked, `expiry_day`, and from the first,
    `expiry_from`: the seq the session's messages may expire from, `first_seq()`, read then only)."""
    day = marker_day(until)
    if int(session.get("expiry_day") or 0) >= day:
        return []
    return [
        {
            "Update": {
                "TableName": db.table,
                "Key": to_item(keys.session(ws, session_id)),
                "UpdateExpression": "SET expiry_day = :d, expiry_from = if_not_exists(expiry_from, :f)",
                "ConditionExpression": "attribute_exists(PK) AND (attribute_not_exists(expiry_day) OR expiry_day < :d)",
                "ExpressionAttributeValues": to_item({":d": day, ":f": first_seq()}),
            }
        },
        {"Put": {"TableName": db.table, "Item": to_item(marker_item(ws, session_id, day))}},
    ]


def marker_item(ws: str, session_id: str, day: int) -> dict[str, Any]:
    """The session's marker of expiry day `day` (epoch days): the TTL service removes it once that day has ended."""
    return {
        "PK": keys.session_pk(ws, session_id),
        "SK": f"{MARKER}{day:08d}",
        "kind": "expiry_marker",
        "expires_at": (day + 1) * DAY_S,  # the table's TTL attribute
    }


def mark(
    db: Db, ws: str, session_id: str, session: Mapping[str, Any], until: int, first_seq: Callable[[], int]
) -> None:
    """Write the marker `marker_actions` asks for (a concurrent writer that marked the day first wins)."""
    actions = marker_actions(db, ws, session_id, session, until, first_seq)
    if not actions:
        return
    try:
        db.client.transact_write_items(TransactItems=actions)  # type: ignore[arg-type]
    except ClientError as exc:
        if error_code(exc) != "TransactionCanceledException":
            raise


@dataclass(frozen=True)
class ExpiryTarget:
    """A session whose expired messages the deriver deletes (`expire_session`)."""

    workspace: str
    session: str


def expiry_target(event_name: str, image: Mapping[str, Any]) -> ExpiryTarget | None:
    """The session a stream record asks to expire: its marker removed by the TTL service (a REMOVE record: its keys
    and `userIdentity`, the service's principal), or its running expiry stored again; else None."""
    sk, pk = str(image.get("SK") or ""), str(image.get("PK") or "")
    if not sk.startswith(MARKER):
        return None
    if event_name == "REMOVE" and (sk == RUN_SK or image.get("userIdentity") != TTL_SERVICE):
        return None
    if event_name != "REMOVE" and (sk != RUN_SK or image.get("kind") != "expiry"):
        return None
    return ExpiryTarget(*keys.parse_session_pk(pk))


def oldest_expired(db: Db, ws: str, session_id: str, session: Mapping[str, Any]) -> int | None:
    """The seq of the session's oldest message still stored and expired (its expiry not carried out yet), if its oldest
    message is one: a summary covering it is hidden. One small Query, only for a session that ever had retention."""
    if not session.get("expiry_day"):
        return None
    for item in page(db, ws, session_id, int(session.get("expiry_from") or 1), limit=10):
        if item.get("kind") == "message" and item.get("retain_until") is not None:
            return int(item["seq"]) if expired(item) else None
    return None


def hide_expired(db: Db, ws: str, session_id: str, session: Mapping[str, Any], items: list[Any]) -> list[Any]:
    """`items` (messages of one seq range, read from an index that does not hold `retain_until`), those expired as
    holes (their place only, no id: as a deleted message's tombstone): one Query of the range's keys, only for a
    session that ever had retention."""
    if not items or not session.get("expiry_day"):
        return items
    seqs = [int(i["seq"]) for i in items]
    found = query_all(
        db,
        KeyConditionExpression="PK = :pk AND SK BETWEEN :a AND :b",
        ExpressionAttributeValues={
            ":pk": {"S": keys.session_pk(ws, session_id)},
            ":a": {"S": keys.message_sk(min(seqs))},
            ":b": {"S": keys.message_sk(max(seqs))},
            ":now": {"N": str(now())},
        },
        FilterExpression="retain_until <= :now",
        ProjectionExpression="#s",
        ExpressionAttributeNames={"#s": "seq"},
        ConsistentRead=True,
    )
    gone = {int(i["seq"]) for i in found}
    place = ("PK", "SK", "seq", "token_count", "start_tokens", "run_start_seq", "run_index", "run_id")
    return [{k: v for k, v in i.items() if k in place} if int(i["seq"]) in gone else i for i in items]


def page(
    db: Db, ws: str, session_id: str, first: int, limit: int = _PAGE, *, whole: bool = False
) -> list[dict[str, Any]]:
    """Up to `limit` of the session's items under MSG# from seq `first` (messages, tombstones, a fence): what the
    expiry rules read of each, or (`whole`) whole items, as a delete takes them (the same read units)."""
    fields: dict[str, Any] = {
        "ProjectionExpression": "#s, #k, #i, #r",
        "ExpressionAttributeNames": {"#s": "seq", "#k": "kind", "#i": "id", "#r": "retain_until"},
    }
    out = db.client.query(
        TableName=db.table,
        KeyConditionExpression="PK = :pk AND SK BETWEEN :a AND :b",
        ExpressionAttributeValues={
            ":pk": {"S": keys.session_pk(ws, session_id)},
            ":a": {"S": keys.message_sk(first)},
            ":b": {"S": keys.message_sk(keys.MAX_SEQ)},
        },
        ConsistentRead=True,
        Limit=limit,
        **({} if whole else fields),
    )
    return [item for item in (from_item(i) for i in out.get("Items", ())) if item is not None]
