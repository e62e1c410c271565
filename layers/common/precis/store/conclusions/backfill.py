"""The upgrade's backfill (deploy/reindex.py): term-count items for conclusions stored before they existed."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from botocore.exceptions import ClientError

from precis.store import keys
from precis.store.conclusions.items import CONDITION_FAILED, put_action, text_item
from precis.store.db import (
    Db,
    cancellation_codes,
    each,
    projection,
    query_all,
    to_item,
    transact,
)


def write_missing_texts(db: Db, ws: str, observer: str, observed: str, *, dry_run: bool = False) -> tuple[int, int]:
    """Give every conclusion of the collection stored before text items existed its `L#` item (from its content), so
    the collection's lexical ranking finds it; (conclusions, text items written, or missing when `dry_run`). Each put
    holds only while the conclusion is there (a deleted one gets none) and no text item is (one a merge wrote
    meanwhile is newer): run again, it writes nothing."""
    pk = keys.collection_pk(ws, observer, observed)

    def read(prefix: str, fields: tuple[str, ...]) -> list[dict[str, Any]]:
        return query_all(
            db,
            KeyConditionExpression="PK = :pk AND begins_with(SK, :p)",
            ConsistentRead=True,
            ExpressionAttributeValues=to_item({":pk": pk, ":p": prefix}),
            **projection(fields),
        )

    stored = read("C#", ("id", "content", "level", "session_id"))
    have = {i["SK"].removeprefix("L#") for i in read("L#", ("SK",))}
    todo = [i for i in stored if i["id"] not in have]
    if dry_run or not todo:
        return len(stored), len(todo)
    with ThreadPoolExecutor(max_workers=8, thread_name_prefix="conclusion-texts") as pool:
        return len(stored), sum(each(pool, lambda i: _put_missing_text(db, ws, observer, observed, i), todo))


def _put_missing_text(db: Db, ws: str, observer: str, observed: str, stored: dict[str, Any]) -> int:
    cid = stored["id"]
    text = text_item(ws, observer, observed, cid, stored["level"], stored.get("session_id"), stored["content"])
    try:
        transact(
            db,
            [
                {
                    "ConditionCheck": {
                        "TableName": db.table,
                        "Key": to_item(keys.conclusion(ws, observer, observed, cid)),
                        "ConditionExpression": "attribute_exists(PK)",
                    }
                },
                put_action(db, text, "attribute_not_exists(PK)"),
            ],
        )
        return 1
    except ClientError as exc:
        if CONDITION_FAILED in cancellation_codes(exc):
            return 0  # deleted meanwhile, or its text written meanwhile
        raise
