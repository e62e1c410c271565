"""Taking a session, or a workspace, out of the index."""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable

from botocore.exceptions import ClientError

from precis.errors import Throttled
from precis.store import keys
from precis.store.db import Db, error_code, query_all, query_first, to_item
from precis.store.records import delete_keys
from precis.store.text_index.items import FRESH_SHARDS, PURGE_PAGE, pack, shard_of, unpack
from precis.store.text_index.manifest import read_manifest
from precis.store.text_index.merging import vacuum
from precis.store.text_index.upgrade import delete_old_index


def purge_session(
    db: Db, ws: str, session_id: str, incarnation: str | None, *, time_left: Callable[[], float] = lambda: math.inf
) -> tuple[int, bool]:
    """Take a session's messages out of the index: its fresh units (of `incarnation`, or of none named), the segments
    holding its messages rewritten without them (`vacuum`), its texts PURGE_PAGE at a time: (how many texts, done?).
    Stops once `time_left()` is under zero between steps; a new call goes on. From its delete until then, every
    search leaves its messages out (its statistics still count them)."""
    fresh = query_all(
        db,
        KeyConditionExpression="PK = :pk",
        FilterExpression="#s = :s",
        ProjectionExpression="PK, SK, i",
        ConsistentRead=True,
        ExpressionAttributeNames={"#s": "s"},
        ExpressionAttributeValues=to_item({":pk": keys.text_fresh_pk(ws, shard_of(session_id)), ":s": session_id}),
    )
    delete_keys(
        db,
        [{"PK": i["PK"], "SK": i["SK"]} for i in fresh if incarnation is None or i.get("i") in (None, incarnation)],
    )
    if not vacuum(db, ws, session_id, time_left=time_left):
        return 0, False
    deleted = 0
    while True:
        page = query_first(
            db,
            PURGE_PAGE,
            KeyConditionExpression="PK = :pk",
            ProjectionExpression="PK, SK",
            ConsistentRead=True,
            ExpressionAttributeValues=to_item({":pk": keys.text_docs_pk(ws, session_id)}),
        )
        if not page:
            return deleted, True
        deleted += delete_keys(db, page)
        if time_left() < 0:
            return deleted, False


def forget_in_unit(db: Db, ws: str, session_id: str, unit: str, seqs: Collection[int]) -> int:
    """Take messages `seqs` out of their unit's fresh items (messages deleted before their unit was merged): each item
    that holds one is written again without them, or deleted when it held nothing else, on condition it is unchanged (a
    merge that read it before deletes it on condition its count is the one it read, so it never merges them); how
    many items changed. None when the unit was merged already (its segment is vacuumed). An item changed meanwhile
    is read again: another delete of the same unit (an expiry's messages, deleted together) rewrote it holding these
    messages still."""
    drop = frozenset(seqs)
    changed = 0
    for _ in range(_FORGET_ATTEMPTS):
        found = query_all(
            db,
            KeyConditionExpression="PK = :pk AND begins_with(SK, :u)",
            ConsistentRead=True,
            ExpressionAttributeValues=to_item({":pk": keys.text_fresh_pk(ws, shard_of(session_id)), ":u": f"{unit}#"}),
        )
        raced = False
        for item in found:
            if item.get("s") != session_id:
                continue  # another session's unit in the same shard: never this delete's to change
            entries = unpack(item["z"])
            kept = [e for e in entries if int(e[0]) not in drop]
            if len(kept) == len(entries):
                continue
            same = to_item({":n": int(item["n"])})
            try:
                if kept:
                    db.client.put_item(
                        TableName=db.table,
                        Item=to_item({**item, "n": len(kept), "z": pack(kept)}),
                        ConditionExpression="n = :n",
                        ExpressionAttributeValues=same,
                    )
                else:
                    db.client.delete_item(
                        TableName=db.table,
                        Key=to_item({"PK": item["PK"], "SK": item["SK"]}),
                        ConditionExpression="n = :n",
                        ExpressionAttributeValues=same,
                    )
            except ClientError as exc:
                if error_code(exc) != "ConditionalCheckFailedException":
                    raise
                raced = True  # merged meanwhile (then gone when read again) or rewritten: read it again
                continue
            changed += 1
        if not raced:
            return changed
    raise Throttled(f"the search index of session '{session_id}' kept changing while messages were taken out of it")


_FORGET_ATTEMPTS = 8


def delete_index(db: Db, ws: str, peers: Iterable[str]) -> int:
    """Delete a workspace's index (its delete, its sessions purged): its manifest, segments and fresh shards, and
    what the release before segments kept (`delete_old_index`: its sessions' purges under this release left it)."""
    manifest = read_manifest(db, ws)
    segments = [s["id"] for s in manifest.segments] + list(manifest.building) + list(manifest.replaced)
    pks = [keys.text_segment_pk(ws, s) for s in dict.fromkeys(segments)]
    pks += [keys.text_fresh_pk(ws, shard) for shard in range(FRESH_SHARDS)]
    found = [keys.text_manifest(ws)]
    for pk in pks:
        found += query_all(
            db,
            KeyConditionExpression="PK = :pk",
            ProjectionExpression="PK, SK",
            ConsistentRead=True,
            ExpressionAttributeValues=to_item({":pk": pk}),
        )
    return delete_keys(db, found) + sum(delete_old_index(db, ws, peers))
