"""Message vectors: the deriver's semantic vector per message, written bound to its session's incarnation, and
the purge of a session's."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from precis.store import keys, text_index
from precis.store.db import Db, batch_get, to_item
from precis.store.messages import MessageItem, as_message, with_bodies
from precis.store.resources import session_item
from precis.store.vectors import vector_attribute

if TYPE_CHECKING:
    from precis.llm import Embedder


MEANING_INDEX = "ByMessageMeaning"


def _vector_key(ws: str, session_id: str, seq: int) -> dict[str, str]:
    return keys.message_vector(ws, session_id, seq)


def vector_item(ws: str, session_id: str, seq: int, peer_id: str, meaning: list[float]) -> dict[str, Any]:
    """A message's semantic vector item (raw AttributeValues)."""
    return {
        **to_item(
            {
                **_vector_key(ws, session_id, seq),
                "kind": "mvector",
                "seq": seq,
                "mcoll": ws,
                "msession": session_id,
                "mpeer": peer_id,
                "semantic": True,
            }
        ),
        "svec": vector_attribute(meaning),
    }


def index_messages(
    db: Db,
    images: Iterable[dict[str, Any]],
    *,
    semantic: Embedder | None = None,
    now: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """The deriver's part for one target, as inserted messages come down the stream (their images): with a semantic
    embedder each message is embedded once. Bound to the session's incarnation (nothing lands in a deleted session);
    how many vectors."""
    by_session: dict[tuple[str, str], dict[int, MessageItem]] = {}
    for image in images:
        ws, session_id = keys.parse_session_pk(image["PK"])
        by_session.setdefault((ws, session_id), {})[int(image["seq"])] = as_message(image)
    written = 0
    for (ws, session_id), messages in by_session.items():
        session = session_item(db, ws, session_id)
        if session is None or "deleted_at" in session:
            continue  # (its purge takes back what was indexed)
        if semantic is None:
            continue
        stored = {
            int(i["SK"].removeprefix("MV#"))
            for i in batch_get(db, [_vector_key(ws, session_id, seq) for seq in messages], ("PK", "SK"))
        }
        todo = [messages[seq] for seq in sorted(messages) if seq not in stored]
        for start in range(0, len(todo), 99):
            chunk = todo[start : start + 99]
            texts = [view.get("content") or "" for view in with_bodies(db, chunk, ws, session_id)]
            puts = [
                vector_item(ws, session_id, int(image["seq"]), image["peer_id"], meaning)
                for image, meaning in zip(chunk, semantic.embed(texts))
            ]
            written += _put(db, ws, session_id, session["incarnation"], puts)
    return written


def _put(db: Db, ws: str, session_id: str, incarnation: str | None, items: list[dict[str, Any]]) -> int:
    """The vectors put, bound to the session's incarnation (`text_index.put_bound`); how many stayed."""
    return len(items) if text_index.put_bound(db, ws, session_id, incarnation, items) else 0


def purge_vectors(
    db: Db, ws: str, session_id: str, *, time_left: Callable[[], float] = lambda: float("inf")
) -> tuple[int, bool]:
    """Delete the session's message vectors (its purge), a page of 1,000 keys at a time: (how many, done?). Stops
    once `time_left()` is under zero between pages; a new call goes on (what was deleted is gone from the Query)."""
    from precis.store.records import delete_keys

    request: dict[str, Any] = {
        "TableName": db.table,
        "KeyConditionExpression": "PK = :pk",
        "ProjectionExpression": "PK, SK",
        "ConsistentRead": True,
        "Limit": 1000,
        "ExpressionAttributeValues": to_item({":pk": keys.message_vectors_pk(ws, session_id)}),
    }
    deleted = 0
    while True:
        out = db.client.query(**request)
        deleted += delete_keys(db, [{"PK": i["PK"]["S"], "SK": i["SK"]["S"]} for i in out["Items"]])
        if "LastEvaluatedKey" not in out:
            return deleted, True
        if time_left() < 0:
            return deleted, False
        request["ExclusiveStartKey"] = out["LastEvaluatedKey"]
