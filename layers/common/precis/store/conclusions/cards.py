"""Peer cards: a collection's card, as a client puts it or the deriver derives it, and what it is derived from."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast

from botocore.exceptions import ClientError

from precis.store import keys
from precis.store.conclusions.items import (
    CONDITION_FAILED,
    ConclusionItem,
    ExtraConditionFailed,
    as_conclusion,
    put_action,
    registry_item,
)
from precis.store.db import (
    Db,
    batch_get,
    cancellation_codes,
    error_code,
    from_item,
    query_all,
    raise_if_throttled,
    read_item,
    to_item,
    transact,
)

if TYPE_CHECKING:
    from types_boto3_dynamodb.type_defs import TransactWriteItemTypeDef


_ANY: Any = object()


def collection_contents(
    db: Db, ws: str, observer: str, observed: str, *, with_counts: bool = False
) -> list[ConclusionItem]:
    """Every conclusion of the collection, oldest first: its id, content and level (and `times_derived`), strongly
    consistent."""
    items = query_all(
        db,
        KeyConditionExpression="PK = :pk AND begins_with(SK, :c)",
        ConsistentRead=True,
        ProjectionExpression="id, content, #l" + (", times_derived" if with_counts else ""),
        ExpressionAttributeNames={"#l": "level"},
        ExpressionAttributeValues=to_item({":pk": keys.collection_pk(ws, observer, observed), ":c": "C#"}),
    )
    return [as_conclusion(i) for i in items]


def newest_contents(db: Db, ws: str, observer: str, observed: str, limit: int) -> list[str]:
    """The contents of the collection's `limit` newest conclusions, oldest first (one Query, strongly consistent)."""
    out = db.client.query(
        TableName=db.table,
        KeyConditionExpression="PK = :pk AND begins_with(SK, :c)",
        ConsistentRead=True,
        ScanIndexForward=False,
        Limit=limit,
        ProjectionExpression="content",
        ExpressionAttributeValues=to_item({":pk": keys.collection_pk(ws, observer, observed), ":c": "C#"}),
    )
    return [from_item(i)["content"] for i in reversed(out["Items"])]


def card_state(db: Db, ws: str, observer: str, observed: str) -> tuple[list[str] | None, dict[str, int], str | None]:
    """(entries, counts, source) of the collection's card: what the deriver updates from. A card marked by a message
    delete (`forget_pending`) reads as none until the delete's cascade rebuilds it (and the deriver's conditional
    write, which expects no card, leaves it alone meanwhile)."""
    item = read_item(db, keys.card(ws, observer, observed))
    if item is None or item.get("forget_pending"):
        return None, {}, None
    return item.get("entries"), item.get("counts") or {}, item.get("source")


def get_card(db: Db, ws: str, observer: str, observed: str) -> list[str] | None:
    return card_state(db, ws, observer, observed)[0]


def put_card(db: Db, ws: str, observer: str, observed: str, entries: list[str], *, source: str = "client") -> list[str]:
    """Replace the card (the caller checked the entries and the peers)."""
    _write_card(db, ws, observer, observed, entries, {}, source)
    return entries


def write_card(
    db: Db,
    ws: str,
    observer: str,
    observed: str,
    entries: list[str],
    counts: dict[str, int],
    *,
    previous: list[str] | None = _ANY,
    extra: Sequence[dict[str, Any]] = (),
) -> bool:
    """Store a derived card. With `previous` (the entries card_state read, None for no card) only while the card
    still holds them, so a client's PUT meanwhile is not overwritten: False when it was not written. `extra`
    actions go into the same transaction (ExtraConditionFailed when one of them refuses)."""
    condition = None
    if previous is not _ANY:
        condition = (
            ("attribute_not_exists(entries)", {}) if previous is None else ("entries = :prev", {":prev": previous})
        )
    return _write_card(db, ws, observer, observed, entries, counts, "derived", condition, extra)


def _write_card(
    db: Db,
    ws: str,
    observer: str,
    observed: str,
    entries: list[str],
    counts: dict[str, int],
    source: str,
    condition: tuple[str, dict[str, Any]] | None = None,
    extra: Sequence[dict[str, Any]] = (),
) -> bool:
    item = {
        **keys.card(ws, observer, observed),
        "kind": "card",
        "entries": list(entries),
        "counts": counts,
        "source": source,
        "updated_at": datetime.now(UTC).isoformat(timespec="microseconds"),
    }
    try:
        transact(
            db,
            [put_action(db, item, *(condition or ())), put_action(db, registry_item(ws, observer, observed)), *extra],
        )
    except ClientError as exc:
        codes = cancellation_codes(exc)
        if CONDITION_FAILED in codes[2:]:
            raise ExtraConditionFailed([]) from None
        if codes[:1] == [CONDITION_FAILED]:
            return False
        raise
    return True


def write_card_step(
    db: Db,
    ws: str,
    observer: str,
    observed: str,
    proposed: tuple[list[str], dict[str, int]] | None,
    previous: list[str] | None,
    marker: dict[str, Any],
) -> None:
    """A stored job's card step: the proposed card (or, with none, the step's `marker` alone) in one transaction with
    the marker; a step applied already, or a card a client replaced meanwhile, leaves things as they are."""
    try:
        if proposed is None:
            # The marker is a plain-dict action, as the store builds them (see db.transact); DynamoDB checks its shape.
            db.client.transact_write_items(TransactItems=[cast("TransactWriteItemTypeDef", marker)])
        else:
            write_card(db, ws, observer, observed, *proposed, previous=previous, extra=[marker])
    except ExtraConditionFailed:
        pass
    except ClientError as exc:
        raise_if_throttled(exc)
        if error_code(exc) != "TransactionCanceledException":
            raise


def forget_card_actions(
    db: Db, ws: str, observers: Sequence[str], observed: str, message_id: str
) -> list[tuple[str, dict[str, Any]]]:
    """(observer, transaction action) marking each existing card of `observers` about `observed` as drawn perhaps from
    message `message_id`, being deleted: it reads as none until the cascade clears or rebuilds it (`rebuild_card`).
    One BatchGetItem."""
    wanted = {keys.card(ws, o, observed)["PK"]: o for o in observers}
    found = batch_get(db, [keys.card(ws, o, observed) for o in observers], ("PK", "SK"))
    return [
        (
            wanted[i["PK"]],
            {
                "Update": {
                    "TableName": db.table,
                    "Key": to_item({"PK": i["PK"], "SK": i["SK"]}),
                    "UpdateExpression": "ADD forget_pending :m",
                    "ConditionExpression": "attribute_exists(PK)",
                    "ExpressionAttributeValues": {":m": {"SS": [message_id]}},
                }
            },
        )
        for i in found
    ]


def rebuild_card(
    db: Db,
    ws: str,
    observer: str,
    observed: str,
    message_id: str,
    rebuild: Callable[[str, list[str]], tuple[list[str], dict[str, int]] | None] | None,
    *,
    marked: bool = True,
) -> bool:
    """The card of (observer, observed) once message `message_id` and what was drawn from it are gone: a derived card
    rebuilt from the collection's conclusions (`rebuild(observed, contents)`; None or nothing: the card goes, for the
    next refresh to make), a client's kept, and without `rebuild` (the collection lost nothing) kept too; its mark
    cleared in the same write, on condition the card is still the one read (False when it changed: the caller tries
    again). No card, or (`marked`) not marked for it: True, nothing written. Not `marked`: the card of an observer
    that was no longer a member when the message was deleted (its card was not marked), rebuilt all the same."""
    item = read_item(db, keys.card(ws, observer, observed))
    if item is None or (marked and message_id not in (item.get("forget_pending") or ())):
        return True
    pending = sorted(set(item.get("forget_pending") or ()) - {message_id})
    key = to_item(keys.card(ws, observer, observed))
    check: dict[str, Any] = (
        {"ConditionExpression": "updated_at = :u", "ExpressionAttributeValues": {":u": {"S": item["updated_at"]}}}
        if item.get("updated_at")
        else {"ConditionExpression": "attribute_not_exists(updated_at)"}
    )
    action: dict[str, Any]
    if item.get("source") == "client" or rebuild is None:
        values = {**check.get("ExpressionAttributeValues", {}), ":m": {"SS": [message_id]}}
        action = {
            "Update": {
                "TableName": db.table,
                "Key": key,
                "UpdateExpression": "DELETE forget_pending :m",
                **check,
                "ExpressionAttributeValues": values,
            }
        }
    else:
        # Each conclusion as often as it was derived: what an engine that counts (the extractive one) counted.
        remaining = collection_contents(db, ws, observer, observed, with_counts=True)
        proposed = rebuild(observed, [c["content"] for c in remaining for _ in range(int(c.get("times_derived", 1)))])
        entries, counts = proposed if proposed else ([], {})
        if not entries and not pending:
            action = {"Delete": {"TableName": db.table, "Key": key, **check}}
        else:
            card = to_item(
                {
                    **keys.card(ws, observer, observed),
                    "kind": "card",
                    "entries": list(entries),
                    "counts": counts,
                    "source": "derived",
                    "updated_at": datetime.now(UTC).isoformat(timespec="microseconds"),
                }
            )
            if pending:  # another delete still hides it
                card["forget_pending"] = {"SS": pending}
            action = {"Put": {"TableName": db.table, "Item": card, **check}}
    try:
        db.client.transact_write_items(TransactItems=[cast("TransactWriteItemTypeDef", action)])
    except ClientError as exc:
        raise_if_throttled(exc)
        if error_code(exc) != "TransactionCanceledException":
            raise
        return False
    return True
