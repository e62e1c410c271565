"""Messages read: the tail, seq and token ranges, single messages, pages (filtered ones bounded), and bodies from S3."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from precis.errors import Invalid, NotFound, TooLarge
from precis.sizes import ANSWER_BUDGET, fit_page
from precis.store import filters as filtering
from precis.store import keys
from precis.store.db import (
    Db,
    batch_get,
    from_item,
    projection,
    query_all,
    query_first,
    to_item,
)
from precis.store.messages.items import Base, MessageItem, Tail, as_message, base_of, body_pool, message_view, seq_of
from precis.store.records import page
from precis.store.resources import require_session
from precis.store.retention import expired

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
    bodies = dict(zip((i["seq"] for i in stored), body_pool.map(body, stored))) if stored else {}
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
    gaps: bool = False,
) -> list[MessageItem]:
    """The messages first..last (at most `limit` of them, from the first or the last end), without the fence; with a
    clone's `base`, its parent's messages fill in what the clone holds no copy of yet. With `gaps`, a deleted
    message's tombstone stands in its place as an empty message of no tokens, no id and no sender (`placeholder`):
    what a reader that counts by seq (the summarizer's cadence) needs."""
    own = _read_partition(db, keys.session_pk(ws, session_id), first, last, limit, forward, gaps)
    if base is None or first > base.through:
        return own
    inherited = _read_partition(
        db, keys.session_pk(ws, base.session), first, min(last, base.through), limit, forward, gaps
    )
    merged = {i["seq"]: i for i in inherited} | {i["seq"]: i for i in own}
    ordered = [merged[s] for s in sorted(merged, reverse=not forward)]
    return ordered[:limit] if limit is not None else ordered


def read_from(
    db: Db,
    ws: str,
    session_id: str,
    first: int,
    *,
    limit: int | None = None,
    base: Base | None = None,
    gaps: bool = False,
) -> list[MessageItem]:
    """The messages from `first` to the newest (`read_range` without an upper end)."""
    return read_range(db, ws, session_id, first, keys.MAX_SEQ, limit=limit, base=base, gaps=gaps)


def is_placeholder(item: MessageItem) -> bool:
    """Whether `item` stands for a deleted or expired message (`read_range(gaps=True)`)."""
    return item.get("kind") == "forgotten"


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
    read = batch_get(db, [keys.message(ws, s, seq) for s, seq in wanted], fields + ("kind", "PK", "retain_until"))
    return {(keys.parse_session_pk(i["PK"])[1], i["seq"]): as_message(i) for i in read if _live(i)}


def messages_at(
    db: Db, ws: str, session_id: str, seqs: Sequence[int], fields: tuple[str, ...]
) -> dict[int, MessageItem]:
    """`fields` of the session's messages at `seqs` still stored, by seq (one BatchGetItem)."""
    return {
        i["seq"]: as_message(i)
        for i in batch_get(db, [keys.message(ws, session_id, seq) for seq in seqs], fields + ("kind", "retain_until"))
        if _live(i)
    }


def _read_partition(
    db: Db, pk: str, first: int, last: int, limit: int | None, forward: bool, gaps: bool = False
) -> list[MessageItem]:
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
    if gaps:
        return [as_message(i) if _live(i) else _placeholder(i) for i in items if i.get("kind") in _GAPS]
    return [as_message(i) for i in items if _live(i)]


_GAPS = ("message", "forgotten")


def _live(item: dict[str, Any]) -> bool:
    """A message not deleted and not expired (store.retention: hidden from the second it expires)."""
    return item.get("kind") == "message" and not expired(item)


def _placeholder(item: dict[str, Any]) -> MessageItem:
    place = ("PK", "SK", "seq", "start_tokens", "run_start_seq", "run_index", "run_id")
    kept: dict[str, Any] = {k: v for k, v in item.items() if k in place}
    # What an export carries of the place (precis.transfer): the tokens it spans, and whether a clone copied it.
    kept |= {"gap_tokens": item.get("token_count", 0), "gap_copied": "copy_of" in item or "uncounted" in item}
    return as_message({**kept, "kind": "forgotten", "peer_id": "", "content": "", "token_count": 0, "metadata": "{}"})


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
    session = require_session(db, ws, session_id)
    base = base_of(session)
    tail = read_tail(db, ws, session_id).seq
    if filters:
        return fit_page(_filtered_page(db, ws, session_id, filters, tail, page_no, size, reverse, scan_limit, base))
    # A page is a seq range: a deleted message's seq stays a gap in it; `total` counts the messages that remain.
    start = (page_no - 1) * size
    items: list[MessageItem] = []
    if start < tail:
        first, last = (tail - start - size + 1, tail - start) if reverse else (start + 1, start + size)
        items = read_range(db, ws, session_id, max(first, 1), min(last, tail), base=base)
        if reverse:
            items.reverse()
    return fit_page(
        {
            "items": with_bodies(db, items, ws, session_id, max_bytes=ANSWER_BUDGET),
            "total": tail - int(session.get("forgotten", 0)),
            "page": page_no,
            "size": size,
            "pages": -(-tail // size),
        }
    )


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
    item = locate_message(db, ws, session_id, message_id, base)
    if expired(item):
        raise NotFound(f"message '{message_id}' not found in session '{session_id}'")
    return with_bodies(db, [item], ws, session_id)[0]
