"""Conclusions deleted: one by id, a session's (its purge, a scope losing it), a workspace's collections."""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

from precis.errors import NotFound, Throttled
from precis.store import keys
from precis.store.conclusions.items import ATTEMPTS, CONDITION_FAILED, ConclusionItem, as_conclusion
from precis.store.conclusions.provenance import session_provenance
from precis.store.conclusions.reads import locate
from precis.store.db import (
    Db,
    batch_get,
    cancellation_codes,
    query_all,
    to_item,
    transact,
)
from precis.store.records import delete_keys

_REMOVE_CHUNK = 16  # conclusions per delete transaction: 6 deletes each + the head


def delete(db: Db, ws: str, conclusion_id: str) -> ConclusionItem:
    """Delete a conclusion with its vector, dedupe key, pointer and provenance (NotFound when there is none); the
    conclusion as it was."""
    item = locate(db, ws, conclusion_id)
    if not _remove(db, ws, item["observer_id"], item["observed_id"], [conclusion_id]):
        raise NotFound(f"conclusion '{conclusion_id}' not found in workspace '{ws}'")
    return item


def remove_conclusions(db: Db, ws: str, observer: str, observed: str, ids: list[str]) -> int:
    """Delete these conclusions of one collection (each with its vector, dedupe key, pointer and provenance) and count
    them off the head; how many were there (a message delete's cascade)."""
    return _remove(db, ws, observer, observed, ids)


def remove_deductions(
    db: Db, ws: str, observer: str, observed: str, premises: set[str], into: list[str] | None = None
) -> int:
    """Delete the collection's deductive conclusions drawn from any of `premises`, and those drawn from them in turn;
    how many (their ids added to `into`). One consistent Query of the collection's deductive conclusions per level."""
    removed, gone = 0, set(premises)
    while True:
        found = query_all(
            db,
            KeyConditionExpression="PK = :pk AND begins_with(SK, :c)",
            FilterExpression="#l = :deductive",
            ProjectionExpression="id, source_ids",
            ConsistentRead=True,
            ExpressionAttributeNames={"#l": "level"},
            ExpressionAttributeValues=to_item(
                {":pk": keys.collection_pk(ws, observer, observed), ":c": "C#", ":deductive": "deductive"}
            ),
        )
        doomed = [i["id"] for i in found if gone.intersection(i.get("source_ids") or ()) and i["id"] not in gone]
        if not doomed:
            return removed
        removed += _remove(db, ws, observer, observed, doomed)
        gone.update(doomed)
        if into is not None:
            into.extend(doomed)


def _remove(db: Db, ws: str, observer: str, observed: str, ids: list[str]) -> int:
    """Delete these conclusions of one collection and count them off the head; how many were there."""
    removed = 0
    for start in range(0, len(ids), _REMOVE_CHUNK):
        chunk = ids[start : start + _REMOVE_CHUNK]
        for attempt in range(ATTEMPTS):
            items = [
                as_conclusion(i) for i in batch_get(db, [keys.conclusion(ws, observer, observed, i) for i in chunk])
            ]
            if not items:
                break
            actions = [a for item in items for a in _delete_actions(db, ws, item)]
            actions.append(
                {
                    "Update": {
                        "TableName": db.table,
                        "Key": to_item(keys.collection_head(ws, observer, observed)),
                        "UpdateExpression": "ADD version :one, #count :gone",
                        "ExpressionAttributeNames": {"#count": "count"},
                        "ExpressionAttributeValues": to_item({":one": 1, ":gone": -len(items)}),
                    }
                }
            )
            try:
                transact(db, actions)
            except ClientError as exc:
                codes = cancellation_codes(exc)
                if not codes or set(codes) - {"None", CONDITION_FAILED, "TransactionConflict"}:
                    raise
                time.sleep(random.uniform(0, min(0.4, 0.01 * 2**attempt)))  # changed or deleted meanwhile: re-read
                continue
            removed += len(items)
            break
        else:
            raise Throttled(f"collection '{observer}'/'{observed}' is busy; retry the delete")
    return removed


def _delete_actions(db: Db, ws: str, item: ConclusionItem) -> list[dict[str, Any]]:
    """Deletes of a conclusion and what belongs to it; conditioned on its text as read (a concurrent write that
    replaces the text also replaces the dedupe key named here)."""
    observer, observed, cid = item["observer_id"], item["observed_id"], item["id"]
    doomed = [
        keys.conclusion_vector(ws, observer, observed, cid),
        keys.conclusion_text(ws, observer, observed, cid),
        keys.conclusion_dedupe(ws, observer, observed, item["level"], item.get("session_id"), item["norm"]),
        keys.conclusion_pointer(ws, cid),
    ]
    if item.get("session_id"):
        doomed.append(keys.conclusion_provenance(ws, item["session_id"], cid))
    return [
        {
            "Delete": {
                "TableName": db.table,
                "Key": to_item(keys.conclusion(ws, observer, observed, cid)),
                "ConditionExpression": "norm = :norm",
                "ExpressionAttributeValues": {":norm": {"S": item["norm"]}},
            }
        },
        *({"Delete": {"TableName": db.table, "Key": to_item(k)}} for k in doomed),
    ]


def purge_session_conclusions(
    db: Db, ws: str, session_id: str, *, time_left: Callable[[], float] = lambda: math.inf
) -> tuple[int, bool]:
    """Delete the conclusions drawn from the session (its DERIVED# items name them): (how many, done?). Stops when
    `time_left()` runs under zero between transactions (a collection's are _REMOVE_CHUNK conclusions each); what it
    did is gone from the list, so a new call resumes."""
    provenance = session_provenance(db, ws, session_id)
    by_collection: dict[tuple[str, str], list[str]] = {}
    for item in provenance:
        by_collection.setdefault((item["observer_id"], item["observed_id"]), []).append(
            item["SK"].removeprefix("DERIVED#")
        )
    removed = 0
    for (observer, observed), ids in by_collection.items():
        for start in range(0, len(ids), _REMOVE_CHUNK):
            if time_left() < 0:
                return removed, False
            removed += _remove(db, ws, observer, observed, ids[start : start + _REMOVE_CHUNK])
    return removed, True


def remove_session_copies(db: Db, ws: str, session_id: str, observer: str) -> int:
    """Delete the conclusions `observer` holds from the session (a scope losing a member session)."""
    by_observed: dict[str, list[str]] = {}
    for item in session_provenance(db, ws, session_id):
        if item["observer_id"] == observer:
            by_observed.setdefault(item["observed_id"], []).append(item["SK"].removeprefix("DERIVED#"))
    return sum(_remove(db, ws, observer, observed, ids) for observed, ids in by_observed.items())


def delete_collections(db: Db, ws: str) -> int:
    """Remove every collection registered in the workspace (all items of each, and its conclusions' pointers);
    how many items. For the workspace delete: its sessions are gone, so nothing writes to these any more."""
    deleted = 0
    registry = query_all(
        db,
        KeyConditionExpression="PK = :pk AND begins_with(SK, :c)",
        ConsistentRead=True,
        ExpressionAttributeValues=to_item({":pk": f"WS#{ws}", ":c": "COLL#"}),
    )
    for entry in registry:
        items = query_all(
            db,
            KeyConditionExpression="PK = :pk",
            ProjectionExpression="PK, SK",
            ConsistentRead=True,
            ExpressionAttributeValues=to_item(
                {":pk": keys.collection_pk(ws, entry["observer_id"], entry["observed_id"])}
            ),
        )
        pointers = [keys.conclusion_pointer(ws, i["SK"].removeprefix("C#")) for i in items if i["SK"].startswith("C#")]
        deleted += delete_keys(db, [*pointers, *items, {"PK": entry["PK"], "SK": entry["SK"]}])
    return deleted
