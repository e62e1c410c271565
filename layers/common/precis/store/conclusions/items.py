"""A conclusion's item and the items that go with it (vector, term counts, registry), its id and view, the shapes a
write takes, and the reads and puts every part of the package shares."""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NotRequired, Protocol, TypedDict, cast

from precis.errors import NotFound
from precis.lexical import Document
from precis.store import keys, vectors
from precis.store.db import (
    Db,
    to_item,
)

ID_LEN = 21
_TIME_CHARS = keys.TIME_CHARS  # ids begin with their time (keys.ID_ALPHABET, ASCII order): ids sort by time
LEVELS = ("explicit", "deductive")
MAX_CONTENT = 65_535
MAX_CREATE = 100
NEAR_DISTANCE = 0.05  # cosine distance within which two conclusions say the same thing (docs/design.md, Dedupe)
CHUNK = 16  # conclusions per transaction: 5 actions each, leaving room for the head, the checks and `extra`
ATTEMPTS = 25  # lost races (the head moved) before a write gives up with Throttled
CONDITION_FAILED = "ConditionalCheckFailed"


class ConclusionItem(TypedDict):
    """A conclusion's item (`C#{id}` in its collection's partition) as the store reads it (decoded: plain values).
    Its vector, term counts, dedupe key, pointer and provenance are items of their own."""

    PK: str
    SK: str
    kind: str
    id: str
    content: str
    observer_id: str
    observed_id: str
    level: str
    created_at: str
    times_derived: int
    source_message_ids: list[str]
    source_at: str  # the newest source message's created_at (the write's time when none was given)
    norm: str  # the digest its dedupe key names
    cws: str  # the workspace and id again: the ByConclusion index's keys
    cid: str
    session_id: NotRequired[str]  # what it was derived from, when a session
    source_ids: NotRequired[list[str]]  # a deduction's premises


def as_conclusion(item: dict[str, Any]) -> ConclusionItem:
    """A decoded conclusion item (`db.from_item`'s dict) as a ConclusionItem: the one place it is taken to be one. A
    projected read holds only the fields it asked for."""
    return cast(ConclusionItem, item)


class EmbedsTexts(Protocol):
    """What the writes and the query ask of an embedder (`llm.Embedder` is one): a vector per text, in order."""

    def embed(self, texts: list[str]) -> list[list[float]]: ...


class ExtraConditionFailed(Exception):
    """A condition of the caller's `extra` actions failed, so nothing of that chunk was written: for the deriver, the
    chunk was applied already. `written` holds the views of the earlier chunks of the call, which were."""

    def __init__(self, written: list[dict[str, Any]]):
        super().__init__("a condition of the caller's extra actions failed; the chunk was not written")
        self.written = written


class SessionGone(NotFound):
    """The session conclusions were being written for was deleted, or created again, meanwhile."""


@dataclass(frozen=True)
class Derived:
    """A conclusion to write: `source_at` is the newest source message's created_at (None: the write's time)."""

    content: str
    level: str = "explicit"
    session_id: str | None = None
    source_message_ids: Sequence[str] = ()
    source_at: str | None = None
    source_ids: Sequence[str] | None = None


_RANDOM_BITS = 6 * (ID_LEN - _TIME_CHARS)
_last = [0, 0]  # the newest (ms, random part) this process made
_last_lock = threading.Lock()
_chars = keys.id_chars


def new_conclusion_id(now_ms: int | None = None) -> str:
    """A 21-char id: 8 chars of the millisecond time, then 13 random ones, so ids sort by creation time. Ids made
    by one process within one millisecond (a batch) are monotonic, as ULIDs are: they sort in the order made."""
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    with _last_lock:
        if ms == _last[0] and _last[1] + 1 < 2**_RANDOM_BITS:
            random_part = _last[1] + 1
        else:
            random_part = secrets.randbits(_RANDOM_BITS - 1)  # headroom to count up within the millisecond
        _last[:] = [ms, random_part]
    return _chars(ms, _TIME_CHARS) + _chars(random_part, ID_LEN - _TIME_CHARS)


def view(item: ConclusionItem) -> dict[str, Any]:
    """A conclusion as the API answers it (docs/design.md, "What the SDK sees")."""
    return {
        "id": item["id"],
        "content": item["content"],
        "observer_id": item["observer_id"],
        "observed_id": item["observed_id"],
        "session_id": item.get("session_id"),
        "level": item["level"],
        "created_at": item["created_at"],
        "times_derived": item.get("times_derived", 1),
        "source_ids": item.get("source_ids"),
    }


def content_digest(content: str) -> str:
    """What two conclusions equal but for case and surrounding space share (a collection's dedupe key holds it)."""
    return hashlib.sha1(content.strip().casefold().encode("utf-8")).hexdigest()


def put_action(
    db: Db,
    item: Mapping[str, Any],
    condition: str | None = None,
    values: dict[str, Any] | None = None,
    vector: list[float] | None = None,
) -> dict[str, Any]:
    """A transaction's Put of `item` (its `vector` as the table stores it), under `condition` when given."""
    stored = to_item(item)
    if vector is not None:
        stored["vec"] = vectors.vector_attribute(vector)
    put: dict[str, Any] = {"TableName": db.table, "Item": stored}
    if condition:
        put["ConditionExpression"] = condition
    if values:
        put["ExpressionAttributeValues"] = to_item(values)
    return {"Put": put}


def vector_item(
    ws: str, observer: str, observed: str, conclusion_id: str, level: str, session_id: str | None
) -> dict[str, Any]:
    """A conclusion's vector item, without its vector (`vectors.vector_attribute` adds it as the table stores it)."""
    return {
        **keys.conclusion_vector(ws, observer, observed, conclusion_id),
        "kind": "cvector",
        "id": conclusion_id,
        "vcoll": keys.collection_name(ws, observer, observed),
        "level": level,
        "vsession": session_id or "-",
    }


def text_item(
    ws: str, observer: str, observed: str, conclusion_id: str, level: str, session_id: str | None, content: str
) -> dict[str, Any]:
    """A conclusion's term counts (`precis.lexical`), small, for its collection's lexical ranking."""
    document = Document.of(content)
    return {
        **keys.conclusion_text(ws, observer, observed, conclusion_id),
        "kind": "ctext",
        "id": conclusion_id,
        "level": level,
        "vsession": session_id or "-",
        "tsig": document.signature(),
        "tlen": document.length,
    }


def registry_item(ws: str, observer: str, observed: str) -> dict[str, Any]:
    return {
        **keys.collection_registry(ws, observer, observed),
        "kind": "collection",
        "observer_id": observer,
        "observed_id": observed,
    }
