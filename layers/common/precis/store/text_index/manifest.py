"""The manifest (the live segments, those being written and those replaced), its changes, and the reads of an
index partition whole."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from precis.store import keys
from precis.store.db import Db, batch_get, error_code, is_throttling, query_all, to_item


@dataclass(frozen=True)
class Manifest:
    """The live segments (`segs`, changed by a transaction that bumps `v`), and the segments whose items may be in
    the table though not live: those being written (`tmp`, each added before its first item and removed by the
    transaction that makes it live, or by its writer once it lost) and those a compaction replaced (`old`, added by
    its transaction, removed once their items are deleted). A writer that dies leaves its ids there: `_sweep`
    deletes their items."""

    version: int = 0
    segments: tuple[dict[str, Any], ...] = ()
    building: tuple[str, ...] = ()
    replaced: tuple[str, ...] = ()

    @property
    def documents(self) -> int:
        return sum(int(s["n"]) for s in self.segments)

    @property
    def total_length(self) -> int:
        return sum(int(s["len"]) for s in self.segments)


def read_manifest(db: Db, ws: str) -> Manifest:
    found = batch_get(db, [keys.text_manifest(ws)])
    if not found:
        return Manifest()
    item = found[0]
    return Manifest(
        int(item.get("v", 0)),
        tuple(json.loads(item.get("segs") or "[]")),
        tuple(item.get("tmp") or ()),
        tuple(item.get("old") or ()),
    )


def note(db: Db, ws: str, action: str, name: str, ids: Sequence[str]) -> None:
    """ADD `ids` to the manifest's set `name`, or DELETE them from it (no version change: no search reads again)."""
    if not ids:
        return
    for attempt in range(5):
        try:
            db.client.update_item(
                TableName=db.table,
                Key=to_item(keys.text_manifest(ws)),
                UpdateExpression=f"{action} #n :ids",
                ExpressionAttributeNames={"#n": name},
                ExpressionAttributeValues={":ids": {"SS": sorted(set(ids))}},
            )
            return
        except ClientError as exc:  # (a merge's transaction on the manifest in flight)
            if error_code(exc) != "TransactionConflictException" or attempt == 4:
                raise
            time.sleep(0.05 * 2**attempt)


def commit(
    db: Db,
    ws: str,
    manifest: Manifest,
    add: Sequence[dict[str, Any]],
    remove: Iterable[str],
    deletes: Sequence[Mapping[str, Any]],
) -> bool:
    """Change the manifest from `manifest` (unchanged since read) and delete `deletes` (each still there), in one
    transaction; False when another merge came first or something to delete is gone."""
    gone = set(remove)
    segments = [s for s in manifest.segments if s["id"] not in gone] + list(add)
    values: dict[str, Any] = to_item({":v": manifest.version + 1, ":s": json.dumps(segments, separators=(",", ":"))})
    names = {"#v": "v", "#s": "segs"}
    update = "SET #v = :v, #s = :s"
    if add:  # live now: no longer being written
        update += " DELETE #t :new"
        names["#t"], values[":new"] = "tmp", {"SS": sorted(s["id"] for s in add)}
    if gone:  # their items to delete
        update += " ADD #o :gone"
        names["#o"], values[":gone"] = "old", {"SS": sorted(gone)}
    if manifest.version:
        values[":old"] = {"N": str(manifest.version)}
    actions: list[dict[str, Any]] = [
        {
            "Update": {
                "TableName": db.table,
                "Key": to_item(keys.text_manifest(ws)),
                "UpdateExpression": update,
                "ConditionExpression": "#v = :old" if manifest.version else "attribute_not_exists(#v)",
                "ExpressionAttributeNames": names,
                "ExpressionAttributeValues": values,
            }
        }
    ]
    # Each still there, and (a fresh unit's item) holding as many messages as read: a message deleted meanwhile
    # (its item written again without it) is never merged.
    actions += [
        {
            "Delete": {
                "TableName": db.table,
                "Key": to_item({"PK": k["PK"], "SK": k["SK"]}),
                "ConditionExpression": "attribute_exists(PK)",
            }
            if "n" not in k
            else {
                "TableName": db.table,
                "Key": to_item({"PK": k["PK"], "SK": k["SK"]}),
                "ConditionExpression": "n = :n",
                "ExpressionAttributeValues": to_item({":n": int(k["n"])}),
            }
        }
        for k in deletes
    ]
    try:
        db.client.transact_write_items(TransactItems=actions)  # type: ignore[arg-type]
        return True
    except ClientError as exc:
        if is_throttling(exc) or error_code(exc) not in (
            "TransactionCanceledException",
            "TransactionConflictException",
        ):
            raise
        return False


def segment_items(db: Db, ws: str, segment: str, *, keys_only: bool = False) -> list[dict[str, Any]]:
    return partition(db, keys.text_segment_pk(ws, segment), keys_only=keys_only)


def fresh_shard(db: Db, ws: str, shard: int) -> list[dict[str, Any]]:
    return partition(db, keys.text_fresh_pk(ws, shard))


def partition(db: Db, pk: str, *, keys_only: bool = False) -> list[dict[str, Any]]:
    """Every item of a partition (consistent; only their keys, `keys_only`)."""
    return query_all(
        db,
        KeyConditionExpression="PK = :pk",
        ConsistentRead=True,
        **({"ProjectionExpression": "PK, SK"} if keys_only else {}),
        ExpressionAttributeValues=to_item({":pk": pk}),
    )
