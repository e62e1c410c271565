"""Messages written: exactly-ordered, all-or-nothing batch appends (large bodies to S3), metadata updates and a
clone's copies."""

from __future__ import annotations

import contextlib
import random
import secrets
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from precis.configuration import retention_days
from precis.errors import Conflict, NotFound, Throttled, TooLarge
from precis.store import keys, retention
from precis.store.db import (
    Db,
    batch_get,
    error_code,
    from_item,
    raise_if_throttled,
    to_item,
)
from precis.store.messages.items import (
    MessageItem,
    NewMessage,
    Tail,
    as_message,
    base_of,
    body_pool,
    make_message_id,
    message_view,
    seq_of,
)
from precis.store.messages.reads import locate_message, read_tail, with_bodies
from precis.store.records import json_object, json_text, utcnow
from precis.store.resources import (
    add_members,
    as_session,
    create_session_item,
    refuse_erasing,
    require_session,
)

if TYPE_CHECKING:
    from types_boto3_s3.type_defs import ObjectIdentifierTypeDef


_MAX_ATTEMPTS = 25
_BACKOFF_CAP_S = 0.4
# DynamoDB refuses a transaction over 4 MB (the items' aggregate size); bodies move to S3, largest first, until a
# batch fits this, leaving room for attribute overhead the estimate does not see.
TRANSACTION_BUDGET_BYTES = 3_500_000


def _items(
    ws: str,
    session_id: str,
    batch: Sequence[NewMessage],
    tail: Tail,
    bodies: dict[int, str],
    now: str,
    batch_token: str | None,
    index_nonce: str | None = None,
    index_by: float | None = None,
    retain_until: int | None = None,
) -> list[MessageItem]:
    items: list[MessageItem] = []
    seq, tokens, run_id, run_start = tail.seq, tail.end_tokens, tail.run_id, tail.run_start_seq
    # The batch's search-index unit (precis.store.text_index): whoever indexes these messages names it the same way.
    unit = index_unit(session_id, tail.seq + 1, index_nonce) if index_nonce else None
    run_index = tail.run_index
    for index, message in enumerate(batch):
        seq += 1
        if message.message_id is not None and seq_of(message.message_id) != seq:
            raise Conflict(f"message '{message.message_id}' belongs at another seq than {seq}: the session changed")
        if message.run_id is None or message.run_id != run_id:
            run_start, run_index = seq, run_index + 1
        run_id = message.run_id
        key = keys.message(ws, session_id, seq)
        item: MessageItem = {
            "PK": key["PK"],
            "SK": key["SK"],
            "kind": "message",
            "id": message.message_id or make_message_id(seq),
            "seq": seq,
            "peer_id": message.peer_id,
            "token_count": message.token_count,
            "start_tokens": tokens,
            "run_start_seq": run_start,
            "run_index": run_index,
            "metadata": json_text(message.metadata or {}),
            "created_at": message.created_at or now,
        }
        # (what is None is not stored)
        if message.run_id is not None:
            item["run_id"] = message.run_id
        if batch_token is not None:
            item["batch_token"] = batch_token
        if unit is not None:
            item["ib"] = unit
        if index_by is not None:
            item["ibu"] = index_by
        if retain_until is not None:
            item["retain_until"] = retain_until
        if index in bodies:
            item["body_key"] = bodies[index]
        else:
            item["content"] = message.content
        items.append(item)
        tokens += message.token_count
    return items


def index_unit(session_id: str, first_seq: int, nonce: str) -> str:
    """The search index's unit of a batch stored at `first_seq` (random `nonce`: unique across incarnations)."""
    return f"{session_id}:{first_seq}:{nonce}"


def _lost_race(exc: ClientError) -> bool:
    code = exc.response["Error"]["Code"]
    if code == "TransactionConflictException":
        return True
    if code != "TransactionCanceledException":
        return False
    reasons = exc.response.get("CancellationReasons") or []
    return any(r.get("Code") in ("ConditionalCheckFailed", "TransactionConflict") for r in reasons) or not reasons


def append_messages(
    db: Db,
    ws: str,
    session_id: str,
    batch: Sequence[NewMessage],
    *,
    inline_max_bytes: int,
    sleep: Callable[[float], None] = time.sleep,
    batch_token: str | None = None,
    on_attempt: Callable[[int], None] | None = None,
    index_nonce: str | None = None,
    index_by: float | None = None,
) -> list[dict[str, Any]]:
    """Store `batch` at the end of the session, all or nothing, creating the session and peers as needed.

    Seqs are claimed with conditional puts on the message keys themselves (no counter item), so a full
    100-message batch fits in one transaction; a writer that loses a race re-reads the tail and retries. A
    deleted session's fence holds the next seq, so no append commits after a delete. `batch_token` is stored on
    every message (an idempotent request finds its own writes by it) and `on_attempt(first_seq)` is called
    before each attempt; with `index_nonce`, each message names its batch's search-index unit (`index_unit`) and
    `index_by`, the epoch second by which this request has indexed it or died (the deriver indexes it after).
    """
    now = utcnow()
    peer_ids = list(dict.fromkeys(m.peer_id for m in batch))
    found = batch_get(
        db,
        [
            keys.workspace(ws),
            keys.session(ws, session_id),
            *(keys.peer(ws, p) for p in peer_ids),
            *(keys.member(ws, session_id, p) for p in peer_ids),
        ],
    )
    by_sk = {(i["PK"], i["SK"]): i for i in found}
    if (f"WS#{ws}", "WS") not in by_sk:
        raise NotFound(f"workspace '{ws}' not found")
    for peer_id in peer_ids:  # a sender being erased writes nothing (docs/design.md, "Erasing a peer")
        refuse_erasing(by_sk.get((f"WS#{ws}", f"PEER#{peer_id}")) or {})
    stored = by_sk.get((f"WS#{ws}", f"SESSION#{session_id}"))
    session = None if stored is None else as_session(stored)
    if session is not None and "deleted_at" in session:
        raise NotFound(f"session '{session_id}' not found in workspace '{ws}' (it was deleted)")
    created = False
    if session is None:
        session, created = create_session_item(db, ws, session_id)
    incarnation = session["incarnation"]
    known_peers = {p for p in peer_ids if (f"WS#{ws}", f"PEER#{p}") in by_sk}

    new_members = [p for p in peer_ids if (keys.session_pk(ws, session_id), f"PEER#{p}") not in by_sk]
    if new_members:
        add_members(db, ws, session_id, {p: {} for p in new_members}, known_peers, incarnation=incarnation)

    # Retention (store.retention): every message of the batch expires the setting's days after now; the session's
    # expiry marker for that day is written first (at most once a day per session), so none goes unmarked.
    workspace_configuration = json_object(by_sk[(f"WS#{ws}", "WS")].get("configuration"))
    days = retention_days(workspace_configuration, json_object(session.get("configuration")))
    until = retention.retain_until(days, retention.now())
    if until is not None:
        retention.mark(db, ws, session_id, session, until, lambda: read_tail(db, ws, session_id).seq + 1)
    offload = _to_offload(batch, inline_max_bytes)
    bodies: dict[int, tuple[str, str | None]] = {}
    try:
        bodies = dict(
            zip(offload, body_pool.map(lambda i: _put_body(db, ws, session_id, incarnation, batch[i].content), offload))
        )
        keys_of = {i: key for i, (key, _) in bodies.items()}
        for attempt in range(_MAX_ATTEMPTS):
            # A session created just now has no messages; a concurrent first writer makes the puts fail and retry.
            tail = Tail() if created and attempt == 0 else read_tail(db, ws, session_id)
            items = _items(ws, session_id, batch, tail, keys_of, now, batch_token, index_nonce, index_by, until)
            if on_attempt is not None:
                on_attempt(items[0]["seq"])
            try:
                db.client.transact_write_items(
                    TransactItems=[
                        {
                            "Put": {
                                "TableName": db.table,
                                "Item": to_item(item),
                                "ConditionExpression": "attribute_not_exists(SK)",
                            }
                        }
                        for item in items
                    ]
                )
            except ClientError as exc:
                raise_if_throttled(exc)
                _raise_if_collection_full(exc, session_id)
                if not _lost_race(exc):
                    raise
                sleep(random.uniform(0, min(_BACKOFF_CAP_S, 0.01 * 2**attempt)))  # full jitter spreads writers out
                continue
            return [message_view(item, ws, session_id, batch[i].content) for i, item in enumerate(items)]
        raise Throttled(f"session '{session_id}' has too many concurrent writers; retry the request")
    except Exception as exc:
        if bodies and _not_stored(exc):
            _delete_bodies(db, list(bodies.values()))
        raise


def _not_stored(exc: Exception) -> bool:
    """Whether a failed append certainly stored nothing (an answered refusal, not a timeout or a 5xx: those may
    have committed, and their bodies must stay)."""
    if isinstance(exc, ClientError):
        return error_code(exc) not in ("InternalServerError", "ServiceUnavailable")
    from precis.errors import PrecisError

    return isinstance(exc, PrecisError)


def _item_bytes(message: NewMessage, inline: bool) -> int:
    """An upper estimate of a message item's size in DynamoDB (names + values; content only when inline)."""
    metadata = len(json_text(message.metadata or {}).encode("utf-8"))
    return (
        400
        + metadata
        + len(message.peer_id)
        + len(message.run_id or "")
        + (len(message.content.encode("utf-8")) if inline else 80)
    )


def _to_offload(batch: Sequence[NewMessage], inline_max_bytes: int) -> list[int]:
    """Indexes of the messages whose bodies go to S3: those over the inline limit, then the largest others until the
    batch's transaction fits DynamoDB's 4 MB (TooLarge when even that cannot make it fit)."""
    sizes = [len(m.content.encode("utf-8")) for m in batch]
    offload = {i for i, size in enumerate(sizes) if size > inline_max_bytes}
    total = sum(_item_bytes(m, i not in offload) for i, m in enumerate(batch))
    for i in sorted(set(range(len(batch))) - offload, key=lambda i: -sizes[i]):
        if total <= TRANSACTION_BUDGET_BYTES:
            break
        if sizes[i] > 80:
            offload.add(i)
            total -= sizes[i] - 80
    if total > TRANSACTION_BUDGET_BYTES:
        raise TooLarge(
            f"messages: the batch's metadata and attributes take about {total} bytes; a batch is stored in "
            f"one DynamoDB transaction of at most {TRANSACTION_BUDGET_BYTES} bytes: split it"
        )
    return sorted(offload)


def _raise_if_collection_full(exc: ClientError, session_id: str) -> None:
    """A session partition with a local index is capped at 10 GB by DynamoDB: say so, as a 413 and a metric."""
    reasons = exc.response.get("CancellationReasons") or []
    full = error_code(exc) == "ItemCollectionSizeLimitExceededException" or any(
        "ItemCollectionSizeLimitExceeded" in (r.get("Code") or "")
        or "item collection" in (r.get("Message") or "").lower()
        for r in reasons
    )
    if full:
        from aws_lambda_powertools import Metrics
        from aws_lambda_powertools.metrics import MetricUnit

        Metrics().add_metric(name="SessionStorageFull", unit=MetricUnit.Count, value=1)
        raise TooLarge(
            f"session '{session_id}' is full: DynamoDB caps a session's items at 10 GB; start a new "
            "session (or delete this one)"
        ) from exc


def _put_body(db: Db, ws: str, session_id: str, incarnation: str, content: str) -> tuple[str, str | None]:
    key = keys.body_object(ws, session_id, incarnation, secrets.token_urlsafe(16))
    out = db.s3.put_object(
        Bucket=db.bucket, Key=key, Body=content.encode("utf-8"), ContentType="text/plain; charset=utf-8"
    )
    return key, out.get("VersionId")


def _delete_bodies(db: Db, bodies: list[tuple[str, str | None]]) -> None:
    """Remove the bodies of a batch that was not stored (best effort: the session's purge sweeps what is left)."""
    objects: list[ObjectIdentifierTypeDef] = [{"Key": k, "VersionId": v} if v else {"Key": k} for k, v in bodies]
    with contextlib.suppress(ClientError):
        db.s3.delete_objects(Bucket=db.bucket, Delete={"Objects": objects, "Quiet": True})


def update_message_metadata(
    db: Db, ws: str, session_id: str, message_id: str, metadata: dict[str, Any]
) -> dict[str, Any]:
    session = require_session(db, ws, session_id)
    item = locate_message(db, ws, session_id, message_id, base_of(session))
    if retention.expired(item):
        raise NotFound(f"message '{message_id}' not found in session '{session_id}'")
    if keys.parse_session_pk(item["PK"])[1] != session_id:
        # A clone's message still in its parent: copy on write, its large body too (the parent's goes with its
        # purge); the clone's copy job never overwrites a copy.
        copy: MessageItem = {
            **copy_item(db, ws, session_id, session["incarnation"], item),
            "metadata": json_text(metadata),
        }
        try:
            db.client.put_item(TableName=db.table, Item=to_item(copy), ConditionExpression="attribute_not_exists(PK)")
            return with_bodies(db, [copy], ws, session_id)[0]
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise  # copied meanwhile: update the copy below
    try:
        out = db.client.update_item(
            TableName=db.table,
            Key=to_item(keys.message(ws, session_id, item["seq"])),
            UpdateExpression="SET metadata = :m",
            ConditionExpression="id = :id",
            ReturnValues="ALL_NEW",
            ExpressionAttributeValues=to_item({":m": json_text(metadata), ":id": message_id}),
        )
    except ClientError as exc:
        if error_code(exc) != "ConditionalCheckFailedException":
            raise
        raise NotFound(f"message '{message_id}' not found in session '{session_id}'") from None
    return with_bodies(db, [as_message(from_item(out["Attributes"]))], ws, session_id)[0]


def copy_item(db: Db, ws: str, clone: str, incarnation: str, item: MessageItem) -> MessageItem:
    """The clone's copy of a parent's message item (its large body copied into the clone's own prefix)."""
    # `copy_of`: the stream's consumers skip it (its summaries, vectors and derivations came from the parent).
    at = keys.message(ws, clone, int(item["seq"]))
    copy: MessageItem = {**item, "PK": at["PK"], "SK": at["SK"], "copy_of": keys.parse_session_pk(item["PK"])[1]}
    if item.get("body_key"):
        key = keys.body_object(ws, clone, incarnation, secrets.token_hex(16))
        db.s3.copy_object(Bucket=db.bucket, Key=key, CopySource={"Bucket": db.bucket, "Key": item["body_key"]})
        copy["body_key"] = key
    return copy
