"""A session's provenance: the DERIVED# items in its partition that name the conclusions drawn from it."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from precis.store import keys
from precis.store.conclusions.items import Derived, as_conclusion
from precis.store.db import (
    Db,
    batch_get,
    query_all,
    to_item,
)


def session_provenance(db: Db, ws: str, session_id: str) -> list[dict[str, Any]]:
    return query_all(db, **provenance_request(ws, session_id))


def provenance_request(ws: str, session_id: str) -> dict[str, Any]:
    """A consistent Query of the session's DERIVED# items (which name the conclusions drawn from it)."""
    return {
        "KeyConditionExpression": "PK = :pk AND begins_with(SK, :d)",
        "ConsistentRead": True,
        "ExpressionAttributeValues": to_item({":pk": keys.session_pk(ws, session_id), ":d": "DERIVED#"}),
    }


def session_explicit(db: Db, ws: str, session_id: str) -> dict[str, list[Derived]]:
    """The explicit conclusions derived in the session, one per fact (each observed peer's view of itself), by
    observed peer, oldest first: what a scope that gains the session copies in."""
    own = [i for i in session_provenance(db, ws, session_id) if i["observer_id"] == i["observed_id"]]
    found = batch_get(
        db, [keys.conclusion(ws, i["observer_id"], i["observed_id"], i["SK"].removeprefix("DERIVED#")) for i in own]
    )
    by_observed: dict[str, list[Derived]] = {}
    for item in sorted(map(as_conclusion, found), key=lambda i: i["id"]):
        if item.get("level") == "explicit":
            by_observed.setdefault(item["observed_id"], []).append(
                Derived(
                    item["content"],
                    session_id=session_id,
                    source_message_ids=tuple(item.get("source_message_ids") or ()),
                    source_at=item.get("source_at"),
                )
            )
    return by_observed


def message_conclusions(
    db: Db, ws: str, session_id: str, message_ids: Collection[str]
) -> dict[tuple[str, str], list[str]]:
    """The conclusions drawn from any of messages `message_ids` of the session (its `source_message_ids` name one), by
    collection (observer, observed): the session's DERIVED# items (one consistent Query), then their conclusions'
    sources (one BatchGetItem per 100), scope copies included."""
    wanted = frozenset(message_ids)
    derived = session_provenance(db, ws, session_id)
    found = batch_get(
        db,
        [keys.conclusion(ws, i["observer_id"], i["observed_id"], i["SK"].removeprefix("DERIVED#")) for i in derived],
        ("id", "observer_id", "observed_id", "source_message_ids"),
    )
    by_collection: dict[tuple[str, str], list[str]] = {}
    for item in found:
        if not wanted.isdisjoint(item.get("source_message_ids") or ()):
            by_collection.setdefault((item["observer_id"], item["observed_id"]), []).append(item["id"])
    return by_collection
