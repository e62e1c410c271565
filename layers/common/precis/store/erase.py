"""Erasing a peer (docs/design.md, "Erasing a peer"): the request marks the peer (it reads as absent from then on) and
puts an erasure job; the job runs on the table's stream as an export does (`precis.transfer.jobs`), one bounded step
at a time, each moving the job on with a conditional update: the peer's messages, session by session, each deleted
as a message delete deletes it (its cascade removes what was drawn from it), the peer's membership and derive
cursors, then every collection the peer observes or is observed in (conclusions, card, dream state, scope copies),
then the peer item. The job item is the receipt: its id is a hash of the workspace and peer, and once done it keeps
counts only."""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any, cast

from botocore.exceptions import ClientError

from precis.errors import Conflict, NotFound, Throttled
from precis.store import keys, search
from precis.store.db import (
    Db,
    batch_get,
    cancellation_codes,
    error_code,
    from_item,
    query_first,
    read_item,
    to_item,
    transact,
)
from precis.store.forget import BATCH_MAX, FORGETTING_MAX, forget_messages
from precis.store.messages import MessageItem, as_message
from precis.store.records import delete_keys, utcnow
from precis.store.resources import read_session_item
from precis.store.transfer import RUNNING, JobItem, read_job

ERASE = "erase"
SCAN_PER_STEP = 200  # message items a step reads past (the peer's and others')
VACUUM_PAGE = 1000  # message items a step of the index's vacuum reads (seq and kind only)
ITEMS_PER_STEP = 1000  # a collection's items a step deletes
COLLECTIONS_PER_PAGE = 100  # registry entries a step reads


def erasure_id(ws: str, peer_id: str) -> str:
    """The erasure's job id: the same for every request to erase this peer (a repeat finds the running job, or the
    receipt), and naming neither (16 hex characters, as any job id)."""
    return hashlib.sha256(f"erase\x1f{ws}\x1f{peer_id}".encode()).hexdigest()[:16]


def is_erasing(item: dict[str, Any] | None) -> bool:
    """Whether a peer item is being erased (it reads as absent)."""
    return item is not None and "erasing" in item


def start_erasure(db: Db, ws: str, peer_id: str) -> tuple[JobItem, bool]:
    """Mark the peer and put its erasure job in one transaction; (the job, whether it started now). A peer already
    being erased gives its running job; a peer erased before (none now) its receipt; else NotFound."""
    job_id = erasure_id(ws, peer_id)
    for _ in range(4):
        peer = read_item(db, keys.peer(ws, peer_id))
        if peer is None or is_erasing(peer):
            job = read_job(db, ws, job_id, ERASE)
            if job is not None and (peer is None or job["status"] == RUNNING):
                return job, False
            if peer is None:
                raise NotFound(f"peer '{peer_id}' not found in workspace '{ws}'")
        now = utcnow()
        item: dict[str, Any] = {
            **keys.transfer_job(ws, job_id),
            "kind": "job",
            "id": job_id,
            "job_type": ERASE,
            "status": RUNNING,
            "running": "1",
            "step": 0,
            # The peer's id lives here (and on nothing else of the job) until the last step, which clears it.
            "position": json.dumps({"peer": peer_id}, sort_keys=True),
            "counts": "{}",
            "parts": 0,
            "created_at": now,
            "updated_at": now,
        }
        try:
            transact(
                db,
                [
                    _workspace_erasing(db, ws, peer_id, "ADD"),
                    {
                        "Update": {
                            "TableName": db.table,
                            "Key": to_item(keys.peer(ws, peer_id)),
                            "UpdateExpression": "SET erasing = :job",
                            "ConditionExpression": "attribute_exists(PK) AND (attribute_not_exists(erasing) "
                            "OR erasing = :job)",
                            "ExpressionAttributeValues": {":job": {"S": job_id}},
                        }
                    },
                    {
                        "Put": {
                            "TableName": db.table,
                            "Item": to_item(item),
                            # A receipt of an earlier erasure of this id is replaced; a running job is not.
                            "ConditionExpression": "attribute_not_exists(PK) OR #status <> :running",
                            "ExpressionAttributeNames": {"#status": "status"},
                            "ExpressionAttributeValues": {":running": {"S": RUNNING}},
                        }
                    },
                ],
            )
        except ClientError as exc:
            codes = cancellation_codes(exc)
            if not codes:
                raise
            if codes[0] != "None":
                raise NotFound(f"workspace '{ws}' not found (or being deleted)") from None
            continue  # the peer or the job changed meanwhile: read again
        return cast(JobItem, item), True
    raise Conflict(f"peer '{peer_id}' kept changing while its erasure started; retry the request")


# ---------------------------------------------------------------- the steps (precis.transfer.erase drives them)


def next_session(db: Db, ws: str, peer_id: str, after: str | None) -> tuple[str, str] | None:
    """The next session of the peer's after sort key `after` in its own partition: those it joined (`SESSION#`), then
    those it left (`LEFT#`); (its sort key, the session id), or None at the end. One Query."""
    request: dict[str, Any] = {
        "KeyConditionExpression": "PK = :pk",
        "ExpressionAttributeValues": {":pk": {"S": keys.peer_sessions_pk(ws, peer_id)}},
        "ConsistentRead": True,
    }
    if after is not None:
        request["ExclusiveStartKey"] = {"PK": {"S": keys.peer_sessions_pk(ws, peer_id)}, "SK": {"S": after}}
    found = query_first(db, 1, **request)
    if not found:
        return None
    sk = found[0]["SK"]
    return sk, sk.split("#", 1)[1]


def erase_messages(db: Db, ws: str, session_id: str, peer_id: str, after_seq: int) -> tuple[int, int | None]:
    """Delete the peer's next messages in the session after seq `after_seq`, in batches as a message delete deletes
    one (tombstones, hidden at once; one cascade on the stream a batch removes what was drawn from them); (how many,
    the seq to go on after, or None when the session holds no more of them). Bounded: at most SCAN_PER_STEP items
    read, and no more deleted than the session's `forgetting` set has room for (none while it lacks room for a whole
    batch: the cascades catch up). The session is marked `erasing` the peer meanwhile (no summary is made of it, which
    each batch's cascade would otherwise make again): `finish_session` clears it."""
    session = read_session_item(db, ws, session_id)
    if session is None or "deleted_at" in session:
        return 0, None  # the session's purge takes its messages
    room = FORGETTING_MAX - len(session.get("forgetting") or ())
    if room < BATCH_MAX:
        return 0, after_seq
    out = db.client.query(
        TableName=db.table,
        KeyConditionExpression="PK = :pk AND SK BETWEEN :from AND :to",
        FilterExpression="kind = :message AND peer_id = :peer",
        ConsistentRead=True,
        Limit=SCAN_PER_STEP,
        ExpressionAttributeValues=to_item(
            {
                ":pk": keys.session_pk(ws, session_id),
                ":from": keys.message_sk(after_seq + 1),
                ":to": keys.message_sk(keys.MAX_SEQ),
                ":message": "message",
                ":peer": peer_id,
            }
        ),
    )
    found: list[MessageItem] = [as_message(from_item(i)) for i in out["Items"]]
    if found and peer_id not in (session.get("erasing") or ()):
        _flag(db, ws, session_id, peer_id, "ADD")
    erased = 0
    while found:
        try:
            taken = forget_messages(db, ws, session_id, found, erasing=peer_id)
        except (Conflict, Throttled):
            return erased, int(found[0]["seq"]) - 1  # a clone still copying, or busy: the next step goes on from here
        erased, found, room = erased + taken, found[taken:], room - taken  # (taken: at least those it marked)
        if found and room < BATCH_MAX:
            return erased, int(found[0]["seq"]) - 1
    if "LastEvaluatedKey" in out:
        return erased, int(from_item(out["LastEvaluatedKey"])["SK"].removeprefix("MSG#"))
    return erased, None


def vacuum_page(db: Db, ws: str, session_id: str, from_seq: int) -> int | None:
    """The search index's segments rewritten without the session's deleted messages from seq `from_seq` on, a page of
    VACUUM_PAGE items at a time (the erasure's batches' cascades leave the segments to it: one rewrite a page, not a
    batch); the seq to go on from, or None when the session is done. A page outrun by a merge is read again."""
    out = db.client.query(
        TableName=db.table,
        KeyConditionExpression="PK = :pk AND SK BETWEEN :from AND :to",
        ProjectionExpression="seq, kind",
        ConsistentRead=True,
        Limit=VACUUM_PAGE,
        ExpressionAttributeValues=to_item(
            {
                ":pk": keys.session_pk(ws, session_id),
                ":from": keys.message_sk(from_seq),
                ":to": keys.message_sk(keys.MAX_SEQ),
            }
        ),
    )
    items = [from_item(i) for i in out["Items"]]
    dead = [int(i["seq"]) for i in items if i and i.get("kind") == "forgotten"]
    if dead and not search.vacuum_messages(db, ws, session_id, dead):
        return from_seq
    if "LastEvaluatedKey" not in out or not items:
        return None
    return int(items[-1]["seq"]) + 1


def finish_session(db: Db, ws: str, session_id: str, peer_id: str) -> bool:
    """The session's `erasing` mark for the peer cleared, its messages all deleted; whether it must be summarized now
    (it was marked, and no delete's cascade is left to summarize it once done)."""
    after = _flag(db, ws, session_id, peer_id, "DELETE")
    return after is not None and not after.get("forgetting") and "deleted_at" not in after


def _flag(db: Db, ws: str, session_id: str, peer_id: str, op: str) -> dict[str, Any] | None:
    """ADD or DELETE the peer in the session's `erasing` set; the session after (None: no session, or no change)."""
    try:
        out = db.client.update_item(
            TableName=db.table,
            Key=to_item(keys.session(ws, session_id)),
            UpdateExpression=f"{op} erasing :p",
            ConditionExpression="attribute_exists(PK)" + (" AND contains(erasing, :one)" if op == "DELETE" else ""),
            ExpressionAttributeValues={":p": {"SS": [peer_id]}, **({":one": {"S": peer_id}} if op == "DELETE" else {})},
            ReturnValues="ALL_NEW",
        )
    except ClientError as exc:
        if error_code(exc) != "ConditionalCheckFailedException":
            raise
        return None
    return cast(dict[str, Any], from_item(out["Attributes"]))


def sessions_page(db: Db, ws: str, peer_id: str, after: str | None) -> tuple[list[str], str | None]:
    """Up to 100 of the peer's sessions, joined or left, after sort key `after` (one Query); (their ids, the sort key
    to go on after, or None at the end)."""
    pk = keys.peer_sessions_pk(ws, peer_id)
    request: dict[str, Any] = {
        "TableName": db.table,
        "KeyConditionExpression": "PK = :pk",
        "ExpressionAttributeValues": {":pk": {"S": pk}},
        "ConsistentRead": True,
        "Limit": 100,
    }
    if after is not None:
        request["ExclusiveStartKey"] = {"PK": {"S": pk}, "SK": {"S": after}}
    out = db.client.query(**request)
    sks = [from_item(i)["SK"] for i in out["Items"]]
    return [sk.split("#", 1)[1] for sk in sks], (sks[-1] if "LastEvaluatedKey" in out and sks else None)


def still_forgetting(db: Db, ws: str, session_ids: list[str]) -> bool:
    """Whether a message delete's cascade still runs in any of these sessions (one BatchGetItem a 100)."""
    items = batch_get(db, [keys.session(ws, s) for s in session_ids], ("forgetting",))
    return any(i.get("forgetting") for i in items)


def leave_session(db: Db, ws: str, session_id: str, peer_id: str) -> int:
    """The peer's membership of the session (both items, or the note that it left) and its derive cursor there,
    deleted; how many items."""
    return delete_keys(
        db,
        [
            keys.member(ws, session_id, peer_id),
            keys.peer_session(ws, peer_id, session_id),
            keys.peer_left(ws, peer_id, session_id),
            keys.session_left(ws, session_id, peer_id),
            keys.derive_cursor(ws, session_id, peer_id),
        ],
    )


def collections_page(db: Db, ws: str, peer_id: str, after: str | None) -> tuple[list[tuple[str, str]], str | None]:
    """The collections registered in the workspace that the peer observes or is observed in, from one page of the
    registry after sort key `after`; (them, the sort key to go on after, or None at the end)."""
    request: dict[str, Any] = {
        "TableName": db.table,
        "KeyConditionExpression": "PK = :pk AND begins_with(SK, :c)",
        "ExpressionAttributeValues": {":pk": {"S": f"WS#{ws}"}, ":c": {"S": "COLL#"}},
        "ConsistentRead": True,
        "Limit": COLLECTIONS_PER_PAGE,
    }
    if after is not None:
        request["ExclusiveStartKey"] = {"PK": {"S": f"WS#{ws}"}, "SK": {"S": after}}
    out = db.client.query(**request)
    entries = [from_item(i) for i in out["Items"]]
    mine = [(e["observer_id"], e["observed_id"]) for e in entries if peer_id in (e["observer_id"], e["observed_id"])]
    last = from_item(out["LastEvaluatedKey"])["SK"] if "LastEvaluatedKey" in out else None
    return mine, last


def erase_collection(db: Db, ws: str, observer: str, observed: str) -> tuple[int, int, bool]:
    """Delete up to ITEMS_PER_STEP items of the collection (conclusions with their pointers and provenance, vectors,
    dedupe keys, card, head, dream state) and, once it is empty, its registry entry; (items, conclusions, done?)."""
    items = query_first(
        db,
        ITEMS_PER_STEP,
        KeyConditionExpression="PK = :pk",
        ProjectionExpression="PK, SK, session_id",
        ConsistentRead=True,
        ExpressionAttributeValues={":pk": {"S": keys.collection_pk(ws, observer, observed)}},
    )
    conclusions = [i for i in items if i["SK"].startswith("C#")]
    doomed: list[dict[str, str]] = []
    for item in conclusions:
        cid = item["SK"].removeprefix("C#")
        doomed.append(keys.conclusion_pointer(ws, cid))
        if item.get("session_id"):
            doomed.append(keys.conclusion_provenance(ws, item["session_id"], cid))
    # The pointers and provenance first: a step cut short finds the conclusions again and deletes them again.
    deleted = delete_keys(db, doomed) + delete_keys(db, [{"PK": i["PK"], "SK": i["SK"]} for i in items])
    if len(items) < ITEMS_PER_STEP:
        deleted += delete_keys(db, [keys.collection_registry(ws, observer, observed)])
        return deleted, len(conclusions), True
    return deleted, len(conclusions), False


def _workspace_erasing(db: Db, ws: str, peer_id: str, op: str) -> dict[str, Any]:
    """The workspace item's `erasing` set with the peer added (while the workspace exists and no delete of it is under
    way) or removed: a read that lists the workspace's conclusions leaves out the peer's while its erasure runs."""
    return {
        "Update": {
            "TableName": db.table,
            "Key": to_item(keys.workspace(ws)),
            "UpdateExpression": f"{op} erasing :p",
            "ConditionExpression": "attribute_exists(PK)"
            + (" AND (attribute_not_exists(deleting_until) OR deleting_until < :now)" if op == "ADD" else ""),
            "ExpressionAttributeValues": {
                ":p": {"SS": [peer_id]},
                **({":now": {"N": str(int(time.time()))}} if op == "ADD" else {}),
            },
        }
    }


def remove_peer(db: Db, ws: str, peer_id: str, job_id: str) -> int:
    """The last step: what is left in the peer's own partition (sessions it was in that are gone) and the peer item
    itself (only the one this erasure marked); how many items."""
    rest = query_first(
        db,
        ITEMS_PER_STEP,
        KeyConditionExpression="PK = :pk",
        ProjectionExpression="PK, SK",
        ConsistentRead=True,
        ExpressionAttributeValues={":pk": {"S": keys.peer_sessions_pk(ws, peer_id)}},
    )
    deleted = delete_keys(db, [{"PK": i["PK"], "SK": i["SK"]} for i in rest])
    try:
        db.client.update_item(**_workspace_erasing(db, ws, peer_id, "DELETE")["Update"])
    except ClientError as exc:
        if error_code(exc) != "ConditionalCheckFailedException":
            raise  # (failed: the workspace is gone)
    try:
        db.client.delete_item(
            TableName=db.table,
            Key=to_item(keys.peer(ws, peer_id)),
            ConditionExpression="erasing = :job",
            ExpressionAttributeValues={":job": {"S": job_id}},
        )
        deleted += 1
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
            raise  # (failed: gone already, a step run again)
    return deleted


def erasing_peers(db: Db, ws: str, peer_ids: list[str]) -> set[str]:
    """Which of these peers are being erased (one BatchGetItem)."""
    return {i["id"] for i in batch_get(db, [keys.peer(ws, p) for p in peer_ids]) if is_erasing(i)}
