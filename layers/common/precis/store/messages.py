"""Messages: exactly-ordered, all-or-nothing batch ingestion, seq-range pages, reads and metadata updates."""

from __future__ import annotations

import random
import secrets
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError
from precis import filters as filtering
from precis.errors import Invalid, NotFound, Throttled
from precis.store import keys
from precis.store.db import Db, batch_get, from_item, projection, query_all, to_item
from precis.store.resources import (
    _dump,
    _json,
    add_members,
    create_session_item,
    page,
    require_session,
    utcnow,
)

ID_LEN = 21
_SEQ_CHARS = 7  # base64url digits of seq at the front of a message id: 64**7 ≈ 4.4e12 messages per session
_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
_bodies = ThreadPoolExecutor(max_workers=8)
_MAX_ATTEMPTS = 25
_BACKOFF_CAP_S = 0.4


@dataclass(frozen=True)
class NewMessage:
    """A validated message about to be stored; `token_count` was counted once, at ingestion."""

    content: str
    peer_id: str
    token_count: int
    metadata: dict[str, Any] | None = None
    created_at: str | None = None
    run_id: str | None = None


@dataclass(frozen=True)
class Tail:
    """What the next message's seq, start_tokens and run start derive from."""

    seq: int = 0
    end_tokens: int = 0
    run_id: str | None = None
    run_start_seq: int = 0
    run_index: int = 0  # runs started up to and including the last message (the sliding window counts them)


def make_message_id(seq: int) -> str:
    """A 21-char id of the id alphabet that encodes `seq`, so a read by id is one GetItem."""
    head = "".join(_ALPHABET[(seq >> (6 * i)) & 63] for i in reversed(range(_SEQ_CHARS)))
    return head + "".join(secrets.choice(_ALPHABET) for _ in range(ID_LEN - _SEQ_CHARS))


def seq_of(message_id: str) -> int | None:
    if len(message_id) != ID_LEN or any(c not in _ALPHABET for c in message_id):
        return None
    seq = 0
    for char in message_id[:_SEQ_CHARS]:
        seq = seq * 64 + _ALPHABET.index(char)
    return seq or None


def message_view(item: dict[str, Any], ws: str, session_id: str, content: str | None = None) -> dict[str, Any]:
    view = {"id": item["id"], "content": item.get("content", "") if content is None else content,
            "peer_id": item["peer_id"], "session_id": session_id, "workspace_id": ws,
            "metadata": _json(item.get("metadata")), "created_at": item["created_at"],
            "token_count": item["token_count"], "seq": item["seq"]}
    if item.get("run_id"):
        view["run_id"] = item["run_id"]
    return view


TAIL_FIELDS = ("seq", "token_count", "start_tokens", "run_id", "run_start_seq", "run_index")


def last_message(db: Db, ws: str, session_id: str, fields: tuple[str, ...] = TAIL_FIELDS) -> dict[str, Any] | None:
    """`fields` of the session's newest message (consistent), or None for an empty session."""
    out = db.client.query(
        TableName=db.table, KeyConditionExpression="PK = :pk AND begins_with(SK, :m)", ScanIndexForward=False,
        Limit=1, ConsistentRead=True, **projection(fields),
        ExpressionAttributeValues={":pk": {"S": keys.session_pk(ws, session_id)}, ":m": {"S": "MSG#"}})
    return from_item(out["Items"][0]) if out["Items"] else None


def read_tail(db: Db, ws: str, session_id: str) -> Tail:
    last = last_message(db, ws, session_id)
    if last is None:
        return Tail()
    return Tail(last["seq"], last["start_tokens"] + last["token_count"], last.get("run_id"), last["run_start_seq"],
                last["run_index"])


def _items(ws: str, session_id: str, batch: Sequence[NewMessage], tail: Tail, bodies: dict[int, str],
           now: str) -> list[dict[str, Any]]:
    items, seq, tokens, run_id, run_start = [], tail.seq, tail.end_tokens, tail.run_id, tail.run_start_seq
    run_index = tail.run_index
    for index, message in enumerate(batch):
        seq += 1
        if message.run_id is None or message.run_id != run_id:
            run_start, run_index = seq, run_index + 1
        run_id = message.run_id
        item = {**keys.message(ws, session_id, seq), "kind": "message", "id": make_message_id(seq), "seq": seq,
                "peer_id": message.peer_id, "token_count": message.token_count, "start_tokens": tokens,
                "run_id": message.run_id, "run_start_seq": run_start, "run_index": run_index, "metadata": _dump(message.metadata or {}),
                "created_at": message.created_at or now}
        if index in bodies:
            item["body_key"] = bodies[index]
        else:
            item["content"] = message.content
        items.append(item)
        tokens += message.token_count
    return items


def _lost_race(exc: ClientError) -> bool:
    code = exc.response["Error"]["Code"]
    if code == "TransactionConflictException":
        return True
    if code != "TransactionCanceledException":
        return False
    reasons = exc.response.get("CancellationReasons") or []
    return any(r.get("Code") in ("ConditionalCheckFailed", "TransactionConflict") for r in reasons) or not reasons


def append_messages(db: Db, ws: str, session_id: str, batch: Sequence[NewMessage], *, inline_max_bytes: int,
                    sleep=time.sleep) -> list[dict[str, Any]]:
    """Store `batch` at the end of the session, all or nothing, creating the session and peers as needed.

    Seqs are claimed with conditional puts on the message keys themselves (no counter item), so a full
    100-message batch fits in one transaction; a writer that loses a race re-reads the tail and retries.
    """
    now = utcnow()
    peer_ids = list(dict.fromkeys(m.peer_id for m in batch))
    found = batch_get(db, [keys.workspace(ws), keys.session(ws, session_id),
                            *(keys.peer(ws, p) for p in peer_ids), *(keys.member(ws, session_id, p) for p in peer_ids)])
    by_sk = {(i["PK"], i["SK"]): i for i in found}
    if (f"WS#{ws}", "WS") not in by_sk:
        raise NotFound(f"workspace '{ws}' not found")
    session = by_sk.get((f"WS#{ws}", f"SESSION#{session_id}"))
    if session is not None and "deleted_at" in session:
        raise NotFound(f"session '{session_id}' not found in workspace '{ws}' (it was deleted)")
    created = session is None and create_session_item(db, ws, session_id)[1]
    known_peers = {p for p in peer_ids if (f"WS#{ws}", f"PEER#{p}") in by_sk}
    new_members = [p for p in peer_ids if (keys.session_pk(ws, session_id), f"PEER#{p}") not in by_sk]
    if new_members:
        add_members(db, ws, session_id, {p: {} for p in new_members}, known_peers)

    bodies = {i: _put_body(db, ws, session_id, m.content) for i, m in enumerate(batch)
              if len(m.content.encode("utf-8")) > inline_max_bytes}
    for attempt in range(_MAX_ATTEMPTS):
        # A session created just now has no messages; a concurrent first writer makes the puts fail and retry.
        tail = Tail() if created and attempt == 0 else read_tail(db, ws, session_id)
        items = _items(ws, session_id, batch, tail, bodies, now)
        try:
            db.client.transact_write_items(TransactItems=[
                {"Put": {"TableName": db.table, "Item": to_item(item), "ConditionExpression": "attribute_not_exists(SK)"}}
                for item in items])
        except ClientError as exc:
            if not _lost_race(exc):
                raise
            sleep(random.uniform(0, min(_BACKOFF_CAP_S, 0.01 * 2 ** attempt)))  # full jitter spreads writers out
            continue
        return [message_view(item, ws, session_id, batch[i].content) for i, item in enumerate(items)]
    raise Throttled(f"session '{session_id}' has too many concurrent writers; retry the request")


def _put_body(db: Db, ws: str, session_id: str, content: str) -> str:
    key = keys.body_object(ws, session_id, secrets.token_urlsafe(16))
    db.s3.put_object(Bucket=db.bucket, Key=key, Body=content.encode("utf-8"), ContentType="text/plain; charset=utf-8")
    return key


def _with_content(db: Db, items: list[dict[str, Any]], ws: str, session_id: str) -> list[dict[str, Any]]:
    """Views of `items`, reading the bodies that live in S3 (in parallel: a context may hold several)."""
    def body(item: dict[str, Any]) -> str | None:
        if not item.get("body_key"):
            return None
        return db.s3.get_object(Bucket=db.bucket, Key=item["body_key"])["Body"].read().decode("utf-8")

    stored = [i for i in items if i.get("body_key")]
    bodies = dict(zip((i["seq"] for i in stored), _bodies.map(body, stored))) if stored else {}
    return [message_view(item, ws, session_id, bodies.get(item["seq"])) for item in items]


def _range(db: Db, ws: str, session_id: str, first: int, last: int) -> list[dict[str, Any]]:
    return query_all(db, KeyConditionExpression="PK = :pk AND SK BETWEEN :a AND :b", ConsistentRead=True,
                     ExpressionAttributeValues={":pk": {"S": keys.session_pk(ws, session_id)},
                                                ":a": {"S": keys.message_sk(first)},
                                                ":b": {"S": keys.message_sk(last)}})


def list_messages(db: Db, ws: str, session_id: str, filters, page_no: int, size: int, reverse: bool):
    """A page of messages. Without filters a page is a seq range: page N costs what page 1 costs."""
    require_session(db, ws, session_id)
    total = read_tail(db, ws, session_id).seq
    if filters:
        records = [v for v in _with_content(db, _range(db, ws, session_id, 1, total), ws, session_id)
                   if filtering.matches(filters, v)]
        return page(records, page_no, size, reverse)
    start = (page_no - 1) * size
    items: list[dict[str, Any]] = []
    if start < total:
        first, last = (total - start - size + 1, total - start) if reverse else (start + 1, start + size)
        items = _range(db, ws, session_id, max(first, 1), min(last, total))
        if reverse:
            items.reverse()
    return {"items": _with_content(db, items, ws, session_id), "total": total, "page": page_no, "size": size,
            "pages": -(-total // size)}


def _locate(db: Db, ws: str, session_id: str, message_id: str) -> dict[str, Any]:
    seq = seq_of(message_id)
    item = None
    if seq is not None:
        item = from_item(db.client.get_item(TableName=db.table, Key=to_item(keys.message(ws, session_id, seq)),
                                            ConsistentRead=True).get("Item"))
    if item is None or item["id"] != message_id:
        raise NotFound(f"message '{message_id}' not found in session '{session_id}'")
    return item


def get_message(db: Db, ws: str, session_id: str, message_id: str) -> dict[str, Any]:
    require_session(db, ws, session_id)
    return _with_content(db, [_locate(db, ws, session_id, message_id)], ws, session_id)[0]


def update_message_metadata(db: Db, ws: str, session_id: str, message_id: str, metadata: dict[str, Any]):
    require_session(db, ws, session_id)
    item = _locate(db, ws, session_id, message_id)
    out = db.client.update_item(
        TableName=db.table, Key=to_item(keys.message(ws, session_id, item["seq"])),
        UpdateExpression="SET metadata = :m", ConditionExpression="id = :id", ReturnValues="ALL_NEW",
        ExpressionAttributeValues=to_item({":m": _dump(metadata), ":id": message_id}))
    return _with_content(db, [from_item(out["Attributes"])], ws, session_id)[0]


def check_text(content: str, where: str) -> None:
    """Refuse text that is not valid Unicode (a lone surrogate from a JSON escape) with a 422."""
    try:
        content.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise Invalid(f"{where}: not valid UTF-8 text (lone surrogate at index {exc.start})") from exc
