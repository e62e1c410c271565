"""Messages: exactly-ordered, all-or-nothing batch ingestion, seq-range pages, reads and metadata updates."""

from __future__ import annotations

import contextlib
import random
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict, cast

from botocore.exceptions import ClientError

from precis.errors import Invalid, NotFound, Throttled, TooLarge
from precis.sizes import ANSWER_BUDGET, fit_page
from precis.store import filters as filtering
from precis.store import keys
from precis.store.db import (
    Db,
    batch_get,
    error_code,
    from_item,
    projection,
    query_all,
    query_first,
    raise_if_throttled,
    to_item,
)
from precis.store.records import json_object, json_text, page, utcnow
from precis.store.resources import (
    SessionItem,
    add_members,
    as_session,
    create_session_item,
    require_session,
)

if TYPE_CHECKING:
    from types_boto3_s3.type_defs import ObjectIdentifierTypeDef

ID_LEN = 21
_SEQ_CHARS = 7  # base64url digits of seq at the front of a message id: 64**7 ≈ 4.4e12 messages per session
_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
_bodies = ThreadPoolExecutor(max_workers=8)
_MAX_ATTEMPTS = 25
_BACKOFF_CAP_S = 0.4
# DynamoDB refuses a transaction over 4 MB (the items' aggregate size); bodies move to S3, largest first, until a
# batch fits this, leaving room for attribute overhead the estimate does not see.
TRANSACTION_BUDGET_BYTES = 3_500_000


class MessageItem(TypedDict):
    """A message's item as the store reads it (decoded: plain values); `metadata` is the JSON text stored. Its
    content is inline (`content`) or in S3 (`body_key`): `with_bodies` reads it into the message's view. The fence
    a delete puts after the last message is an item under MSG# too (`kind` "fence", `seq`, `incarnation` only)."""

    PK: str
    SK: str
    kind: str
    id: str
    seq: int
    peer_id: str
    token_count: int
    start_tokens: int
    run_start_seq: int
    run_index: int
    metadata: str
    created_at: str
    content: NotRequired[str]
    body_key: NotRequired[str]
    run_id: NotRequired[str]
    batch_token: NotRequired[str]  # the request that stored it (store.idempotency)
    ib: NotRequired[str]  # its search-index unit (`index_unit`) and the epoch second it is indexed by
    ibu: NotRequired[float]
    copy_of: NotRequired[str]  # a clone's copy of its parent's message: the parent's session id
    incarnation: NotRequired[str]  # a fence's


def as_message(item: dict[str, Any]) -> MessageItem:
    """A decoded item under MSG# (`db.from_item`'s dict) as a message item: the one place it is taken to be one."""
    return cast(MessageItem, item)


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
class Base:
    """A clone's messages 1..`through` are its parent's (`session`), read from the parent's partition until the
    clone's own copy of them is complete (store.clones): reads take the clone's own item when there is one."""

    session: str
    through: int


BASE_FIELDS = ("base_session", "base_through")


def base_of(session: SessionItem | None) -> Base | None:
    """The base a session item names (a clone whose copy is not complete), else None."""
    if not session or not session.get("base_session"):
        return None
    return Base(session["base_session"], int(session["base_through"]))


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


# What `message_view` and `with_bodies` read of a stored message: a projection that answers messages asks for these.
VIEW_FIELDS = ("id", "seq", "peer_id", "content", "body_key", "metadata", "created_at", "token_count", "run_id")


def message_view(item: MessageItem, ws: str, session_id: str, content: str | None = None) -> dict[str, Any]:
    view = {
        "id": item["id"],
        "content": item.get("content", "") if content is None else content,
        "peer_id": item["peer_id"],
        "session_id": session_id,
        "workspace_id": ws,
        "metadata": json_object(item.get("metadata")),
        "created_at": item["created_at"],
        "token_count": item["token_count"],
        "seq": item["seq"],
    }
    if item.get("run_id"):
        view["run_id"] = item["run_id"]
    return view


TAIL_FIELDS = ("seq", "token_count", "start_tokens", "run_id", "run_start_seq", "run_index", "kind")


def last_message(db: Db, ws: str, session_id: str, fields: tuple[str, ...] = TAIL_FIELDS) -> MessageItem | None:
    """`fields` of the session's newest message (consistent), or None for an empty session."""
    out = db.client.query(
        TableName=db.table,
        KeyConditionExpression="PK = :pk AND begins_with(SK, :m)",
        ScanIndexForward=False,
        Limit=1,
        ConsistentRead=True,
        **projection(fields),
        ExpressionAttributeValues={":pk": {"S": keys.session_pk(ws, session_id)}, ":m": {"S": "MSG#"}},
    )
    return as_message(from_item(out["Items"][0])) if out["Items"] else None


def senders_from(db: Db, ws: str, session_id: str, start: int, limit: int | None = None) -> list[MessageItem]:
    """`seq`, `peer_id` and `kind` of each item of the session's messages from `start` on (strongly consistent), the
    first `limit` of them when given."""
    request: dict[str, Any] = {
        "KeyConditionExpression": "PK = :pk AND SK BETWEEN :a AND :b",
        "ConsistentRead": True,
        "ProjectionExpression": "seq, peer_id, kind",
        "ExpressionAttributeValues": to_item(
            {":pk": keys.session_pk(ws, session_id), ":a": keys.message_sk(start), ":b": keys.message_sk(keys.MAX_SEQ)}
        ),
    }
    found = query_all(db, **request) if limit is None else query_first(db, limit, **request)
    return [as_message(i) for i in found]


def is_fence(item: MessageItem | None) -> bool:
    """Whether the newest item under MSG# is the fence a delete put after the last message."""
    return item is not None and item.get("kind") == "fence"


def read_tail(db: Db, ws: str, session_id: str) -> Tail:
    last = last_message(db, ws, session_id)
    if last is None:
        return Tail()
    if is_fence(last):
        raise NotFound(f"session '{session_id}' not found in workspace '{ws}' (it was deleted)")
    return Tail(
        last["seq"],
        last["start_tokens"] + last["token_count"],
        last.get("run_id"),
        last["run_start_seq"],
        last["run_index"],
    )


def tail_seq(db: Db, ws: str, session_id: str) -> int:
    """The seq of the session's newest item under MSG# (a message, or a fence), 0 when there is none."""
    last = last_message(db, ws, session_id, ("seq",))
    return last["seq"] if last else 0


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
) -> list[MessageItem]:
    items: list[MessageItem] = []
    seq, tokens, run_id, run_start = tail.seq, tail.end_tokens, tail.run_id, tail.run_start_seq
    # The batch's search-index unit (precis.store.text_index): whoever indexes these messages names it the same way.
    unit = index_unit(session_id, tail.seq + 1, index_nonce) if index_nonce else None
    run_index = tail.run_index
    for index, message in enumerate(batch):
        seq += 1
        if message.run_id is None or message.run_id != run_id:
            run_start, run_index = seq, run_index + 1
        run_id = message.run_id
        key = keys.message(ws, session_id, seq)
        item: MessageItem = {
            "PK": key["PK"],
            "SK": key["SK"],
            "kind": "message",
            "id": make_message_id(seq),
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

    offload = _to_offload(batch, inline_max_bytes)
    bodies: dict[int, tuple[str, str | None]] = {}
    try:
        bodies = dict(
            zip(offload, _bodies.map(lambda i: _put_body(db, ws, session_id, incarnation, batch[i].content), offload))
        )
        keys_of = {i: key for i, (key, _) in bodies.items()}
        for attempt in range(_MAX_ATTEMPTS):
            # A session created just now has no messages; a concurrent first writer makes the puts fail and retry.
            tail = Tail() if created and attempt == 0 else read_tail(db, ws, session_id)
            items = _items(ws, session_id, batch, tail, keys_of, now, batch_token, index_nonce, index_by)
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


def with_bodies(
    db: Db, items: Sequence[MessageItem], ws: str, session_id: str, *, max_bytes: int | None = None
) -> list[dict[str, Any]]:
    """Views of `items`, reading the bodies that live in S3 (in parallel: a context may hold several). With
    `max_bytes` (a page's answer), TooLarge (413) as soon as their text passes it, before reading the rest."""
    sizes = {i["seq"]: len(i.get("content", "").encode("utf-8", "surrogatepass")) for i in items}
    used = [sum(sizes.values())]
    lock = threading.Lock()

    def body(item: MessageItem) -> str | None:
        if not item.get("body_key") or (max_bytes is not None and used[0] > max_bytes):
            return None
        found = db.s3.get_object(Bucket=db.bucket, Key=item["body_key"])
        with lock:
            sizes[item["seq"]] = size = int(found.get("ContentLength", 0))
            used[0] += size
            past = max_bytes is not None and used[0] > max_bytes
        if past:
            found["Body"].close()
            return None
        return found["Body"].read().decode("utf-8")

    stored = [i for i in items if i.get("body_key")]
    bodies = dict(zip((i["seq"] for i in stored), _bodies.map(body, stored))) if stored else {}
    if max_bytes is not None and used[0] > max_bytes:
        fit = total = 0  # how many of the first fit, by the sizes read (an upper bound: escapes only add)
        for item in items:
            read = not item.get("body_key") or bodies.get(item["seq"]) is not None
            total += sizes[item["seq"]] if read else max_bytes
            if total > max_bytes:
                break
            fit += 1
        raise TooLarge(
            f"size: these {len(items)} items hold more than {max_bytes:,} bytes of text, past what an answer holds; "
            f"ask for size at most {max(fit, 1)}"
        )
    return [message_view(item, ws, session_id, bodies.get(item["seq"])) for item in items]


def read_range(
    db: Db,
    ws: str,
    session_id: str,
    first: int,
    last: int,
    *,
    limit: int | None = None,
    forward: bool = True,
    base: Base | None = None,
) -> list[MessageItem]:
    """The messages first..last (at most `limit` of them, from the first or the last end), without the fence; with a
    clone's `base`, its parent's messages fill in what the clone holds no copy of yet."""
    own = _read_partition(db, keys.session_pk(ws, session_id), first, last, limit, forward)
    if base is None or first > base.through:
        return own
    inherited = _read_partition(db, keys.session_pk(ws, base.session), first, min(last, base.through), limit, forward)
    merged = {i["seq"]: i for i in inherited} | {i["seq"]: i for i in own}
    ordered = [merged[s] for s in sorted(merged, reverse=not forward)]
    return ordered[:limit] if limit is not None else ordered


def read_from(
    db: Db, ws: str, session_id: str, first: int, *, limit: int | None = None, base: Base | None = None
) -> list[MessageItem]:
    """The messages from `first` to the newest (`read_range` without an upper end)."""
    return read_range(db, ws, session_id, first, keys.MAX_SEQ, limit=limit, base=base)


def messages_in_token_range(
    db: Db, ws: str, session_id: str, low: int, high: int, fields: tuple[str, ...], *, base: Base | None = None
) -> list[MessageItem]:
    """`fields` of the messages whose `start_tokens` lies in low..high, in seq order, from the ByStartTokens local
    index (strongly consistent); a clone's `base` fills in what it holds no copy of yet (a clone and its parent
    agree on seq and start_tokens up to the clone's point)."""

    def query(pk: str) -> list[MessageItem]:
        items = query_all(
            db,
            IndexName="ByStartTokens",
            ConsistentRead=True,
            KeyConditionExpression="PK = :pk AND start_tokens BETWEEN :lo AND :hi",
            ExpressionAttributeValues={":pk": {"S": pk}, ":lo": {"N": str(low)}, ":hi": {"N": str(high)}},
            **projection(fields),
        )
        return [as_message(i) for i in items]

    own = query(keys.session_pk(ws, session_id))
    if base is None:
        return own
    inherited = [i for i in query(keys.session_pk(ws, base.session)) if i["seq"] <= base.through]
    merged = {i["seq"]: i for i in inherited} | {i["seq"]: i for i in own}
    return [merged[s] for s in sorted(merged)]


def messages_by_key(
    db: Db, ws: str, wanted: Sequence[tuple[str, int]], fields: tuple[str, ...]
) -> dict[tuple[str, int], MessageItem]:
    """`fields` of the messages at `wanted`'s (session, seq) keys still stored, by key (one BatchGetItem)."""
    read = batch_get(db, [keys.message(ws, s, seq) for s, seq in wanted], fields + ("kind", "PK"))
    return {(keys.parse_session_pk(i["PK"])[1], i["seq"]): as_message(i) for i in read if i.get("kind") == "message"}


def messages_at(
    db: Db, ws: str, session_id: str, seqs: Sequence[int], fields: tuple[str, ...]
) -> dict[int, MessageItem]:
    """`fields` of the session's messages at `seqs` still stored, by seq (one BatchGetItem)."""
    return {
        i["seq"]: as_message(i)
        for i in batch_get(db, [keys.message(ws, session_id, seq) for seq in seqs], fields + ("kind",))
        if i.get("kind") == "message"
    }


def _read_partition(db: Db, pk: str, first: int, last: int, limit: int | None, forward: bool) -> list[MessageItem]:
    request: dict[str, Any] = {
        "KeyConditionExpression": "PK = :pk AND SK BETWEEN :a AND :b",
        "ConsistentRead": True,
        "ScanIndexForward": forward,
        "ExpressionAttributeValues": {
            ":pk": {"S": pk},
            ":a": {"S": keys.message_sk(first)},
            ":b": {"S": keys.message_sk(last)},
        },
    }
    items = query_all(db, **request) if limit is None else query_first(db, limit, **request)
    return [as_message(i) for i in items if i.get("kind") == "message"]


# A filtered list examines at most this many messages per request (a filter is not an index): a request's cost is
# bounded whatever the session's length. `seq` bounds in the filter narrow the examined range through the key.
FILTER_SCAN_LIMIT = 10_000


def _seq_bounds(filters: dict[str, Any], total: int) -> tuple[int, int]:
    first, last = 1, total
    bound = filters.get("seq")
    if isinstance(bound, dict):
        for op, value in bound.items():
            if isinstance(value, bool) or not isinstance(value, int):
                continue
            if op == "gte":
                first = max(first, value)
            elif op == "gt":
                first = max(first, value + 1)
            elif op == "lte":
                last = min(last, value)
            elif op == "lt":
                last = min(last, value - 1)
    elif isinstance(bound, int) and not isinstance(bound, bool):
        first, last = max(first, bound), min(last, bound)
    return first, last


def _mentions_content(filters: Any) -> bool:
    if isinstance(filters, dict):
        return "content" in filters or any(_mentions_content(v) for v in filters.values())
    if isinstance(filters, list):
        return any(_mentions_content(v) for v in filters)
    return False


def _filtered_page(
    db: Db,
    ws: str,
    session_id: str,
    filters: dict[str, Any],
    total: int,
    page_no: int,
    size: int,
    reverse: bool,
    scan_limit: int,
    base: Base | None,
) -> dict[str, Any]:
    if not isinstance(filters, dict):
        raise Invalid("filters: must be an object")
    first, last = _seq_bounds(filters, total)
    items = (
        read_range(db, ws, session_id, first, last, limit=scan_limit, forward=not reverse, base=base)
        if first <= last
        else []
    )
    scan_limited = len(items) == scan_limit and last - first + 1 > scan_limit
    if _mentions_content(filters):
        # Bodies in S3 are read only when the filter looks at content.
        matched = [v for v in with_bodies(db, items, ws, session_id) if filtering.matches(filters, v)]
        answer = page(matched, page_no, size, fit=False)  # already in the requested order; fitted below
    else:
        chosen = [i for i in items if filtering.matches(filters, message_view(i, ws, session_id))]
        start = (page_no - 1) * size
        answer = {
            "items": with_bodies(db, chosen[start : start + size], ws, session_id, max_bytes=ANSWER_BUDGET),
            "total": len(chosen),
            "page": page_no,
            "size": size,
            "pages": -(-len(chosen) // size),
        }
    if scan_limited:
        answer["scan_limited"] = True  # (ext) more messages lie beyond the examined ones: narrow with seq bounds
    return answer


def list_messages(
    db: Db,
    ws: str,
    session_id: str,
    filters: dict[str, Any] | None,
    page_no: int,
    size: int,
    reverse: bool,
    *,
    scan_limit: int = FILTER_SCAN_LIMIT,
) -> dict[str, Any]:
    """A page of messages. Without filters a page is a seq range: page N costs what page 1 costs; with filters, at
    most `scan_limit` messages are examined (from the oldest, or the newest with `reverse`)."""
    base = base_of(require_session(db, ws, session_id))
    total = read_tail(db, ws, session_id).seq
    if filters:
        return fit_page(_filtered_page(db, ws, session_id, filters, total, page_no, size, reverse, scan_limit, base))
    start = (page_no - 1) * size
    items: list[MessageItem] = []
    if start < total:
        first, last = (total - start - size + 1, total - start) if reverse else (start + 1, start + size)
        items = read_range(db, ws, session_id, max(first, 1), min(last, total), base=base)
        if reverse:
            items.reverse()
    return fit_page(
        {
            "items": with_bodies(db, items, ws, session_id, max_bytes=ANSWER_BUDGET),
            "total": total,
            "page": page_no,
            "size": size,
            "pages": -(-total // size),
        }
    )


# Lambda answers at most 6 MB: the answer to a stored batch leaves out its largest contents past this (ingest).
RESPONSE_BUDGET_BYTES = 5_500_000


def json_bytes(value: Any) -> int:
    """What `value` adds to a Lambda answer: the API's JSON (compact, not ASCII-escaped) as the string `body` inside
    the payload the python3.12 runtime marshals (also not ASCII-escaped), so quotes and escapes count twice."""
    import json

    body = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    return len(json.dumps(body, ensure_ascii=False).encode("utf-8")) - 2


def locate_message(db: Db, ws: str, session_id: str, message_id: str, base: Base | None = None) -> MessageItem:
    seq = seq_of(message_id)
    item = None
    if seq is not None:
        item = from_item(
            db.client.get_item(
                TableName=db.table, Key=to_item(keys.message(ws, session_id, seq)), ConsistentRead=True
            ).get("Item")
        )
        if item is None and base is not None and seq <= base.through:  # not copied yet: the parent's
            item = from_item(
                db.client.get_item(
                    TableName=db.table, Key=to_item(keys.message(ws, base.session, seq)), ConsistentRead=True
                ).get("Item")
            )
    if item is None or item.get("id") != message_id:
        raise NotFound(f"message '{message_id}' not found in session '{session_id}'")
    return as_message(item)


def get_message(db: Db, ws: str, session_id: str, message_id: str) -> dict[str, Any]:
    base = base_of(require_session(db, ws, session_id))
    return with_bodies(db, [locate_message(db, ws, session_id, message_id, base)], ws, session_id)[0]


def update_message_metadata(
    db: Db, ws: str, session_id: str, message_id: str, metadata: dict[str, Any]
) -> dict[str, Any]:
    session = require_session(db, ws, session_id)
    item = locate_message(db, ws, session_id, message_id, base_of(session))
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


def check_text(content: str, where: str) -> None:
    """Refuse text that is not valid Unicode (a lone surrogate from a JSON escape) with a 422."""
    try:
        content.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise Invalid(f"{where}: not valid UTF-8 text (lone surrogate at index {exc.start})") from exc


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
