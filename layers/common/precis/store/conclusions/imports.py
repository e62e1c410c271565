"""Conclusions and cards written as an export holds them (precis.transfer): their ids, times and counts kept, each
with the items a new conclusion has (vector, term counts, dedupe key, pointer, provenance), the collection's head
counting them; a conclusion already there (a step run again) is left alone."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from precis.store import keys
from precis.store.conclusions.items import (
    EmbedsTexts,
    content_digest,
    put_action,
    registry_item,
    text_item,
    vector_item,
)
from precis.store.db import Db, batch_get, to_item, transact

_PER_TRANSACTION = 15  # six actions each, with the head's update and the registry: under DynamoDB's 100
FIELDS = (
    "content",
    "level",
    "created_at",
    "times_derived",
    "source_message_ids",
    "source_at",
    "session_id",
    "source_ids",
)


def import_conclusions(
    db: Db, ws: str, observer: str, observed: str, exported: Sequence[dict[str, Any]], *, embedder: EmbedsTexts
) -> int:
    """Write the exported conclusions of one collection that are not there yet; how many were written."""
    present = {
        i["id"]
        for i in batch_get(db, [keys.conclusion(ws, observer, observed, c["id"]) for c in exported], fields=("id",))
    }
    missing = [c for c in exported if c["id"] not in present]
    written = 0
    for start in range(0, len(missing), _PER_TRANSACTION):
        chunk = missing[start : start + _PER_TRANSACTION]
        vectors = embedder.embed([c["content"] for c in chunk])
        actions: list[dict[str, Any]] = []
        for conclusion, vector in zip(chunk, vectors):
            actions += _actions(db, ws, observer, observed, conclusion, vector)
        actions.append(
            {
                "Update": {
                    "TableName": db.table,
                    "Key": to_item(keys.collection_head(ws, observer, observed)),
                    "UpdateExpression": "SET version = if_not_exists(version, :zero) + :one ADD #count :added",
                    "ExpressionAttributeNames": {"#count": "count"},
                    "ExpressionAttributeValues": to_item({":zero": 0, ":one": 1, ":added": len(chunk)}),
                }
            }
        )
        actions.append(put_action(db, registry_item(ws, observer, observed)))
        transact(db, actions)
        written += len(chunk)
    return written


def _actions(
    db: Db, ws: str, observer: str, observed: str, conclusion: dict[str, Any], vector: list[float]
) -> list[dict[str, Any]]:
    cid, level, session_id = conclusion["id"], conclusion["level"], conclusion.get("session_id")
    digest = content_digest(conclusion["content"])
    item = {
        **keys.conclusion(ws, observer, observed, cid),
        "kind": "conclusion",
        "id": cid,
        "observer_id": observer,
        "observed_id": observed,
        "norm": digest,
        "cws": ws,
        "cid": cid,
        **{k: conclusion[k] for k in FIELDS if conclusion.get(k) is not None},
    }
    actions = [
        put_action(db, item, "attribute_not_exists(PK)"),
        put_action(db, vector_item(ws, observer, observed, cid, level, session_id), vector=vector),
        put_action(db, text_item(ws, observer, observed, cid, level, session_id, conclusion["content"])),
        put_action(
            db,
            {**keys.conclusion_dedupe(ws, observer, observed, level, session_id, digest), "kind": "cdedupe", "id": cid},
        ),
        put_action(
            db,
            {**keys.conclusion_pointer(ws, cid), "kind": "cpointer", "observer_id": observer, "observed_id": observed},
        ),
    ]
    if session_id:
        actions.append(
            put_action(
                db,
                {
                    **keys.conclusion_provenance(ws, session_id, cid),
                    "kind": "derived",
                    "observer_id": observer,
                    "observed_id": observed,
                },
            )
        )
    return actions


def import_card(db: Db, ws: str, observer: str, observed: str, card: dict[str, Any]) -> None:
    """The card as exported (its entries, counts, source and time), with its collection's registry item."""
    item = {
        **keys.card(ws, observer, observed),
        "kind": "card",
        "entries": list(card["entries"]),
        "counts": card.get("counts") or {},
        "source": card.get("source") or "client",
        "updated_at": card.get("updated_at"),
    }
    transact(
        db,
        [
            put_action(db, {k: v for k, v in item.items() if v is not None}),
            put_action(db, registry_item(ws, observer, observed)),
        ],
    )
