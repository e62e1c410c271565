"""Peer cards: a collection's card, as a client puts it or the deriver derives it, and what it is derived from."""

from __future__ import annotations

from collections.abc import Sequence
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
    read_item,
    registry_item,
)
from precis.store.db import (
    Db,
    cancellation_codes,
    error_code,
    from_item,
    query_all,
    raise_if_throttled,
    to_item,
    transact,
)

if TYPE_CHECKING:
    from types_boto3_dynamodb.type_defs import TransactWriteItemTypeDef


_ANY: Any = object()


def collection_contents(db: Db, ws: str, observer: str, observed: str) -> list[ConclusionItem]:
    """Every conclusion of the collection, oldest first: its id, content and level (strongly consistent)."""
    items = query_all(
        db,
        KeyConditionExpression="PK = :pk AND begins_with(SK, :c)",
        ConsistentRead=True,
        ProjectionExpression="id, content, #l",
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
    """(entries, counts, source) of the collection's card: what the deriver updates from."""
    item = read_item(db, keys.card(ws, observer, observed))
    if item is None:
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
