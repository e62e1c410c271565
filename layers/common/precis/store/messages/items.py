"""A message's item, its id (which encodes its seq) and view, the shapes a write takes and a clone reads through."""

from __future__ import annotations

import secrets
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict, cast

from precis.errors import Invalid
from precis.store.records import json_object
from precis.store.resources import SessionItem

ID_LEN = 21
_SEQ_CHARS = 7  # base64url digits of seq at the front of a message id: 64**7 ≈ 4.4e12 messages per session
_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
body_pool = ThreadPoolExecutor(max_workers=8)  # the S3 bodies of one request, read or written side by side


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
    retain_until: NotRequired[int]  # the epoch second it expires (store.retention): hidden from every read from then
    copy_of: NotRequired[str]  # a clone's copy of its parent's message: the parent's session id
    incarnation: NotRequired[str]  # a fence's
    gap_tokens: NotRequired[int]  # a deleted message's placeholder (`read_range(gaps=True)`): the tokens it spans
    gap_copied: NotRequired[bool]  # ... and whether it is a clone's copy (or an import's of one): not counted


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
    # An imported message keeps its id (precis.transfer): stored only at the seq the id encodes.
    message_id: str | None = None


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


# Lambda answers at most 6 MB: the answer to a stored batch leaves out its largest contents past this (ingest).
RESPONSE_BUDGET_BYTES = 5_500_000


def json_bytes(value: Any) -> int:
    """What `value` adds to a Lambda answer: the API's JSON (compact, not ASCII-escaped) as the string `body` inside
    the payload the python3.12 runtime marshals (also not ASCII-escaped), so quotes and escapes count twice."""
    import json

    body = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    return len(json.dumps(body, ensure_ascii=False).encode("utf-8")) - 2


def check_text(content: str, where: str) -> None:
    """Refuse text that is not valid Unicode (a lone surrogate from a JSON escape) with a 422."""
    try:
        content.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise Invalid(f"{where}: not valid UTF-8 text (lone surrogate at index {exc.start})") from exc
