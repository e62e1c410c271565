"""Export and import jobs on the table and bucket: the job item (progress, where it stopped), the paged reads an
export walks, the writes an import makes that are not messages (those go through the message write path), and the
S3 objects: export parts, import uploads, presigned URLs (docs/design.md, "Export and import")."""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict, cast

from botocore.exceptions import ClientError

from precis.errors import NotFound
from precis.store import keys
from precis.store.db import Db, batch_get, error_code, from_item, read_item, to_item, transact
from precis.store.records import delete_object_versions, json_text, utcnow, write_batch
from precis.store.resources import (
    MemberItem,
    PeerItem,
    SessionItem,
    as_peer,
    as_session,
    session_values,
    workspace_open,
)
from precis.store.summaries import SummaryItem, SummaryPart, read_summary_items

if TYPE_CHECKING:
    from types_boto3_s3.type_defs import ObjectIdentifierTypeDef

RUNNING, DONE, FAILED = "running", "done", "failed"
URL_TTL_S = 3600  # a presigned URL's life (and at most the signing role's session: docs/design.md)


class JobItem(TypedDict):
    """An export's or import's job as the store reads it: `step` counts the steps done (each wrote one part or read
    one range), `position` (JSON text) is where the next starts, `counts` (JSON text) the lines per kind so far."""

    PK: str
    SK: str
    kind: str
    id: str
    job_type: str  # "export" | "import"
    status: str
    step: int
    position: str
    counts: str
    parts: int
    created_at: str
    updated_at: str
    running: NotRequired[str]  # present while it runs: its updates wake the next step (precis.stream)
    source: NotRequired[str]  # an import's objects, read in order (JSON text of their keys)
    error: NotRequired[str]


def new_id() -> str:
    return secrets.token_hex(8)


def create_job(db: Db, ws: str, job_type: str, *, sources: Sequence[str] | None = None) -> JobItem:
    """Put a new job (its insert on the stream starts it) while the workspace exists and is not being deleted."""
    now = utcnow()
    job_id = new_id()
    item: dict[str, Any] = {
        **keys.transfer_job(ws, job_id),
        "kind": "job",
        "id": job_id,
        "job_type": job_type,
        "status": RUNNING,
        "running": "1",
        "step": 0,
        "position": "{}",
        "counts": "{}",
        "parts": 0,
        "created_at": now,
        "updated_at": now,
    }
    if sources is not None:
        item["source"] = json.dumps(list(sources))
    try:
        transact(
            db,
            [
                workspace_open(db, ws),
                {
                    "Put": {
                        "TableName": db.table,
                        "Item": to_item(item),
                        "ConditionExpression": "attribute_not_exists(PK)",
                    }
                },
            ],
        )
    except ClientError as exc:
        if error_code(exc) != "TransactionCanceledException":
            raise
        raise NotFound(f"workspace '{ws}' not found (or being deleted)") from None
    return cast(JobItem, item)


def job_sources(job: JobItem) -> list[str]:
    """The objects an import reads, in order."""
    return list(json.loads(job.get("source") or "[]"))


def read_job(db: Db, ws: str, job_id: str, job_type: str | None = None) -> JobItem | None:
    found = read_item(db, keys.transfer_job(ws, job_id))
    if found is None or found.get("kind") != "job" or (job_type and found.get("job_type") != job_type):
        return None
    return cast(JobItem, found)


def advance_job(
    db: Db, job: JobItem, *, position: dict[str, Any], counts: dict[str, int], parts: int, done: bool
) -> bool:
    """Move the job one step on from where it was read; False when another run moved it first (nothing changed)."""
    ws = job["PK"].removeprefix("WS#")
    update = "SET step = :next, #pos = :pos, counts = :counts, parts = :parts, updated_at = :now"
    values: dict[str, Any] = {
        ":step": job["step"],
        ":next": job["step"] + 1,
        ":pos": json.dumps(position, sort_keys=True),
        ":counts": json.dumps(counts, sort_keys=True),
        ":parts": parts,
        ":now": utcnow(),
        ":running": RUNNING,
    }
    if done:
        update += ", #status = :done REMOVE running"
        values[":done"] = DONE
    return _update_job(db, ws, job["id"], update, values, {"#pos": "position"})


def fail_job(db: Db, job: JobItem, error: str) -> bool:
    """Mark the job failed for good (bad input: running it again cannot help)."""
    ws = job["PK"].removeprefix("WS#")
    return _update_job(
        db,
        ws,
        job["id"],
        "SET #status = :failed, #error = :error, updated_at = :now REMOVE running",
        {":step": job["step"], ":failed": FAILED, ":error": error[:1000], ":now": utcnow(), ":running": RUNNING},
        {"#error": "error"},
    )


def _update_job(
    db: Db, ws: str, job_id: str, update: str, values: dict[str, Any], names: dict[str, str] | None = None
) -> bool:
    try:
        db.client.update_item(
            TableName=db.table,
            Key=to_item(keys.transfer_job(ws, job_id)),
            UpdateExpression=update,
            ConditionExpression="step = :step AND #status = :running",
            ExpressionAttributeNames={"#status": "status", **(names or {})},
            ExpressionAttributeValues=to_item(values),
        )
    except ClientError as exc:
        if error_code(exc) != "ConditionalCheckFailedException":
            raise
        return False
    return True


# ---------------------------------------------------------------- what an export reads, a page at a time
def _after(db: Db, pk: str, prefix: str, after_sk: str | None, limit: int) -> list[dict[str, Any]]:
    """Up to `limit` items of `pk` under `prefix` whose sort key follows `after_sk` (strongly consistent)."""
    request: dict[str, Any] = {
        "TableName": db.table,
        "KeyConditionExpression": "PK = :pk AND begins_with(SK, :p)",
        "ExpressionAttributeValues": {":pk": {"S": pk}, ":p": {"S": prefix}},
        "ConsistentRead": True,
        "Limit": limit,
    }
    if after_sk is not None:
        request["ExclusiveStartKey"] = {"PK": {"S": pk}, "SK": {"S": after_sk}}
    return [from_item(i) for i in db.client.query(**request)["Items"]]


def peers_after(db: Db, ws: str, after: str | None, limit: int) -> list[PeerItem]:
    """The workspace's peers after peer id `after`, in id order."""
    sk = None if after is None else keys.peer(ws, after)["SK"]
    return [as_peer(i) for i in _after(db, f"WS#{ws}", "PEER#", sk, limit)]


def sessions_after(db: Db, ws: str, after: str | None, limit: int) -> list[SessionItem]:
    """The workspace's session items after session id `after`, in id order (deleted ones' tombstones included)."""
    sk = None if after is None else keys.session(ws, after)["SK"]
    return [as_session(i) for i in _after(db, f"WS#{ws}", "SESSION#", sk, limit)]


def session_members(db: Db, ws: str, session_id: str) -> list[MemberItem]:
    return cast(list[MemberItem], _after(db, keys.session_pk(ws, session_id), "PEER#", None, 1000))


def session_summaries(db: Db, ws: str, session_id: str) -> tuple[dict[str, SummaryItem], dict[str, list[SummaryPart]]]:
    """The session's summaries and the short summaries the next long one is built from, by type."""
    state = read_summary_items(db, ws, session_id)
    return state.summaries, state.parts


def derived_through(db: Db, ws: str, session_id: str) -> dict[str, dict[str, int]]:
    """How far the deriver has come through each sender's messages in the session: {sender: {through_seq, derived}}."""
    from precis.store.derive_cursors import cursors

    return {
        c["sender"]: {"through_seq": int(c.get("through_seq", 0)), "derived": int(c.get("derived", 0))}
        for c in cursors(db, ws, session_id)
        if c.get("sender")
    }


def put_cursors(db: Db, ws: str, session_id: str, derived: dict[str, dict[str, int]]) -> None:
    """The deriver's cursors as exported (unless there), so it goes on from where the exported workspace's stood:
    what was derived there is not derived again, what waited there is derived here."""
    from precis.store.derive_cursors import Moved, finish
    from precis.store.resources import session_item

    session = session_item(db, ws, session_id)
    if session is None:
        return
    for sender, at in sorted(derived.items()):
        try:
            finish(
                db,
                _Sender(ws, session_id, sender),
                session["incarnation"],
                int(at["through_seq"]),
                int(at["derived"]),
                utcnow(),
            )
        except Moved:
            continue  # written by an earlier run of this step


@dataclass(frozen=True)
class _Sender:
    workspace: str
    session: str
    sender: str


def collections_after(db: Db, ws: str, after: tuple[str, str] | None, limit: int) -> list[tuple[str, str]]:
    """The workspace's collections (observer, observed) after `after`, from their registry items."""
    sk = None if after is None else keys.collection_registry(ws, *after)["SK"]
    return [(i["observer_id"], i["observed_id"]) for i in _after(db, f"WS#{ws}", "COLL#", sk, limit)]


def conclusions_after(
    db: Db, ws: str, observer: str, observed: str, after: str | None, limit: int
) -> list[dict[str, Any]]:
    """A collection's conclusion items after conclusion id `after`, oldest first."""
    sk = None if after is None else keys.conclusion(ws, observer, observed, after)["SK"]
    return _after(db, keys.collection_pk(ws, observer, observed), "C#", sk, limit)


def card_item(db: Db, ws: str, observer: str, observed: str) -> dict[str, Any] | None:
    return read_item(db, keys.card(ws, observer, observed))


def has_content(db: Db, ws: str) -> bool:
    """Whether the workspace holds a peer or a session (an import goes only into one that holds neither)."""
    return any(_after(db, f"WS#{ws}", prefix, None, 1) for prefix in ("PEER#", "SESSION#"))


# ---------------------------------------------------------------- what an import writes (messages aside)
def put_workspace_fields(
    db: Db, ws: str, metadata: dict[str, Any], configuration: dict[str, Any], created_at: str
) -> None:
    db.client.update_item(
        TableName=db.table,
        Key=to_item(keys.workspace(ws)),
        UpdateExpression="SET metadata = :m, configuration = :c, created_at = :t",
        ConditionExpression="attribute_exists(PK)",
        ExpressionAttributeValues=to_item(
            {":m": json_text(metadata), ":c": json_text(configuration), ":t": created_at}
        ),
    )


def put_peer(
    db: Db, ws: str, peer_id: str, metadata: dict[str, Any], configuration: dict[str, Any], created_at: str
) -> None:
    """The peer as exported, unless it is there (a step run again)."""
    item = {
        **keys.peer(ws, peer_id),
        "kind": "peer",
        "id": peer_id,
        "workspace_id": ws,
        "metadata": json_text(metadata),
        "configuration": json_text(configuration),
        "created_at": created_at,
    }
    _put_new(db, item)


def put_session(
    db: Db,
    ws: str,
    session_id: str,
    *,
    metadata: dict[str, Any],
    configuration: dict[str, Any],
    is_active: bool,
    created_at: str,
    derive_from: int | None,
) -> None:
    """The session as exported (a new incarnation; a clone's `derive_from` kept), unless it is there."""
    values = session_values(ws, session_id, metadata, configuration)
    values |= {"is_active": is_active, "created_at": created_at}
    if derive_from is not None:
        values["derive_from"] = derive_from
    _put_new(db, {**keys.session(ws, session_id), **values})


def put_members(db: Db, ws: str, session_id: str, members: Sequence[dict[str, Any]]) -> None:
    """Members as exported (their flags and joined_at), with their reverse items; a put again writes the same."""
    puts = []
    for member in members:
        peer_id = member["peer_id"]
        flags = {k: member[k] for k in ("observe_me", "observe_others") if member.get(k) is not None}
        puts.append(
            {
                **keys.member(ws, session_id, peer_id),
                "kind": "member",
                "peer_id": peer_id,
                "joined_at": member.get("joined_at") or utcnow(),
                **flags,
            }
        )
        puts.append({**keys.peer_session(ws, peer_id, session_id), "kind": "peer_session", "session_id": session_id})
    _write_all(db, puts)


def put_summaries(db: Db, ws: str, session_id: str, summaries: Sequence[dict[str, Any]]) -> None:
    """Summaries as exported (each with its parts, when it has some): written before the session's messages, so the
    summarizer woken by them finds what it would have written already (docs/design.md)."""
    puts: list[dict[str, Any]] = []
    for summary in summaries:
        summary_type = summary["summary_type"]
        fields = {k: v for k, v in summary.items() if k not in ("kind", "session_id", "parts")}
        puts.append({**fields, **keys.summary(ws, session_id, summary_type), "kind": "summary"})
        if summary.get("parts") is not None:
            puts.append(
                {
                    **keys.summary_parts(ws, session_id, summary_type),
                    "kind": "summary_parts",
                    "summary_type": summary_type,
                    "parts": summary["parts"],
                }
            )
    _write_all(db, puts)


def put_forgotten(db: Db, ws: str, session_id: str, place: dict[str, Any]) -> None:
    """A deleted message's place as the finished tombstone its delete left (the model: a clone's copy of one), counted
    into the session's `forgotten` when the exported session's own delete made it (its `total` then answers the same);
    one transaction, unless it is there (a step run again)."""
    fields = ("seq", "token_count", "start_tokens", "run_start_seq", "run_index", "run_id")
    item: dict[str, Any] = {
        **{k: place[k] for k in fields if place.get(k) is not None},
        **keys.message(ws, session_id, int(place["seq"])),
        "kind": "forgotten",
        "forgot_done": utcnow(),
    }
    counted = place.get("counted", True)
    if not counted:
        item["uncounted"] = True  # a clone's inherited place: an export of this workspace says so again
    actions: list[dict[str, Any]] = [
        {"Put": {"TableName": db.table, "Item": to_item(item), "ConditionExpression": "attribute_not_exists(PK)"}}
    ]
    if counted:
        actions.append(
            {
                "Update": {
                    "TableName": db.table,
                    "Key": to_item(keys.session(ws, session_id)),
                    "UpdateExpression": "ADD forgotten :one",
                    "ConditionExpression": "attribute_exists(PK)",
                    "ExpressionAttributeValues": {":one": {"N": "1"}},
                }
            }
        )
    try:
        transact(db, actions)
    except ClientError as exc:
        if error_code(exc) != "TransactionCanceledException":
            raise


def put_card(db: Db, ws: str, observer: str, observed: str, card: dict[str, Any]) -> None:
    from precis.store.conclusions import import_card

    import_card(db, ws, observer, observed, card)


def _put_new(db: Db, item: dict[str, Any]) -> None:
    try:
        db.client.put_item(TableName=db.table, Item=to_item(item), ConditionExpression="attribute_not_exists(PK)")
    except ClientError as exc:
        if error_code(exc) != "ConditionalCheckFailedException":
            raise


def _write_all(db: Db, items: Sequence[dict[str, Any]]) -> None:
    for start in range(0, len(items), 25):
        write_batch(db, [{"PutRequest": {"Item": to_item(i)}} for i in items[start : start + 25]])


# ---------------------------------------------------------------- a message deleted after an export read it
WITHDRAWN = "withdrawn: a message of the workspace was deleted after this export began; export again"
_SKEW_S = 60  # exports begun this soon after a delete (by another host's clock) are taken to predate it


def withdraw_exports(db: Db, ws: str, session_id: str, seq: int) -> int:
    """Delete every version of the parts of the workspace's exports that began before message `seq` of the session
    was deleted (they may hold it), and mark each such export failed; how many. One listing of the workspace's
    parts (what the 7-day lifecycle left), a GetItem per export found and a DeleteObjects per 1,000 versions."""
    from datetime import datetime, timedelta

    key = to_item(keys.message(ws, session_id, seq))
    read = db.client.get_item(TableName=db.table, Key=key, ConsistentRead=True, ProjectionExpression="forgot_at")
    tomb = from_item(read.get("Item"))
    if not tomb or not tomb.get("forgot_at"):
        return 0
    cutoff = (datetime.fromisoformat(tomb["forgot_at"]) + timedelta(seconds=_SKEW_S)).isoformat()
    by_job: dict[str, list[ObjectIdentifierTypeDef]] = {}
    prefix = keys.exports_prefix(ws)
    for page in db.s3.get_paginator("list_object_versions").paginate(Bucket=db.bucket, Prefix=prefix):
        for v in (*page.get("Versions", ()), *page.get("DeleteMarkers", ())):
            job_id = v["Key"].removeprefix(prefix).split("/", 1)[0]
            by_job.setdefault(job_id, []).append({"Key": v["Key"], "VersionId": v["VersionId"]})
    withdrawn = 0
    for job_id, objects in sorted(by_job.items()):
        job = read_job(db, ws, job_id, "export")
        if job is not None and datetime.fromisoformat(job["created_at"]) >= datetime.fromisoformat(cutoff):
            continue  # begun after the delete answered: its reads found the message deleted
        if job is not None:
            _withdraw(db, ws, job_id)
        delete_object_versions(db, objects, f"of export {job_id}")
        withdrawn += 1
    return withdrawn


def _withdraw(db: Db, ws: str, job_id: str) -> None:
    """Mark an export failed (withdrawn), whether it was done or still running (its next step then moves nothing)."""
    try:
        db.client.update_item(
            TableName=db.table,
            Key=to_item(keys.transfer_job(ws, job_id)),
            UpdateExpression="SET #status = :failed, #error = :why, parts = :zero, updated_at = :now REMOVE running",
            ConditionExpression="#status IN (:done, :running)",
            ExpressionAttributeNames={"#status": "status", "#error": "error"},
            ExpressionAttributeValues=to_item(
                {":failed": FAILED, ":why": WITHDRAWN, ":zero": 0, ":now": utcnow(), ":done": DONE, ":running": RUNNING}
            ),
        )
    except ClientError as exc:
        if error_code(exc) != "ConditionalCheckFailedException":
            raise


# ---------------------------------------------------------------- the objects
def put_part(db: Db, ws: str, job_id: str, number: int, body: bytes) -> str | None:
    """Write a part; the version written (None in a bucket without versioning)."""
    key = keys.export_part(ws, job_id, number)
    out = db.s3.put_object(Bucket=db.bucket, Key=key, Body=body, ContentType="application/x-ndjson")
    return out.get("VersionId")


def delete_part_version(db: Db, ws: str, job_id: str, number: int, version: str | None) -> None:
    """Delete the version of a part `put_part` wrote (it may hold a message deleted meanwhile)."""
    key = keys.export_part(ws, job_id, number)
    if version is None:
        db.s3.delete_object(Bucket=db.bucket, Key=key)
    else:
        db.s3.delete_object(Bucket=db.bucket, Key=key, VersionId=version)


def inherited(ws: str, session_id: str, item: dict[str, Any]) -> bool:
    """Whether a read item of the session is its parent's (a clone read through its base)."""
    return item.get("PK") != keys.session_pk(ws, session_id)


def forgotten_counts(db: Db, ws: str, session_ids: Sequence[str]) -> dict[str, int]:
    """How many messages each session has had deleted (its `forgotten`; one BatchGetItem per 100 sessions)."""
    found = batch_get(db, [keys.session(ws, s) for s in session_ids], ("id", "forgotten"))
    return {i["id"]: int(i.get("forgotten", 0)) for i in found}


def part_keys(ws: str, job_id: str, parts: int) -> list[str]:
    return [keys.export_part(ws, job_id, n) for n in range(1, parts + 1)]


def presigned_get(db: Db, key: str) -> str:
    return db.s3.generate_presigned_url("get_object", Params={"Bucket": db.bucket, "Key": key}, ExpiresIn=URL_TTL_S)


def upload_target(db: Db, ws: str) -> tuple[str, str]:
    """(upload id, presigned PUT URL) of a new object to import into `ws`."""
    upload_id = new_id()
    url = db.s3.generate_presigned_url(
        "put_object", Params={"Bucket": db.bucket, "Key": keys.import_upload(ws, upload_id)}, ExpiresIn=URL_TTL_S
    )
    return upload_id, url


def upload_key(ws: str, upload_id: str) -> str:
    return keys.import_upload(ws, upload_id)


def object_size(db: Db, key: str) -> int:
    """The size of an uploaded object; NotFound when nothing was uploaded there."""
    try:
        return int(db.s3.head_object(Bucket=db.bucket, Key=key)["ContentLength"])
    except ClientError as exc:
        if error_code(exc) in ("404", "NoSuchKey", "NotFound"):
            if key.startswith("exports/"):  # an export read in place, withdrawn by a message delete or expired
                raise NotFound(f"'{key}' is gone (withdrawn or expired): export again") from None
            raise NotFound("upload not found: PUT the file to the upload's url first") from None
        raise


def read_range(db: Db, key: str, start: int, length: int) -> bytes:
    """Bytes start..start+length-1 of an object (fewer at its end)."""
    try:
        out = db.s3.get_object(Bucket=db.bucket, Key=key, Range=f"bytes={start}-{start + length - 1}")
    except ClientError as exc:
        if error_code(exc) in ("404", "NoSuchKey", "NotFound"):
            # (an export's part withdrawn by a message delete, or expired, while an import read it in place)
            raise NotFound(f"'{key}' is gone (withdrawn or expired): export again") from None
        raise
    return out["Body"].read()
