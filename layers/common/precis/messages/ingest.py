"""Message creation: validate, count tokens once, store all or nothing, at most once per Idempotency-Key."""

from __future__ import annotations

import hashlib
import json
import logging
import math
import secrets
import time
from datetime import UTC
from typing import Any

from aws_lambda_powertools import Metrics
from aws_lambda_powertools.metrics import MetricUnit

from precis.errors import Invalid, TooLarge
from precis.schemas import ID_MAX, is_id
from precis.schemas.bodies import MessageBatch, MessageIn
from precis.settings import Settings
from precis.store import idempotency, search
from precis.store.db import Db
from precis.store.messages import (
    RESPONSE_BUDGET_BYTES,
    NewMessage,
    append_messages,
    check_text,
    index_unit,
    json_bytes,
    message_view,
    read_range,
)
from precis.tokens import count_text

IDEMPOTENCY_KEY_MAX = 255
MESSAGE_JSON_MAX_BYTES = 5_000_000  # one message, read back alone, fits Lambda's 6 MB response
metrics = Metrics()
log = logging.getLogger("precis.messages.ingest")


def _prepare(batch: MessageBatch, settings: Settings) -> list[NewMessage]:
    prepared = []
    for index, message in enumerate(batch.messages):
        where = f"messages[{index}].content"
        check_text(message.content, where)
        if len(message.content) > settings.max_message_chars:
            raise TooLarge(f"{where}: at most {settings.max_message_chars} characters, got {len(message.content)}")
        if len(message.content) * 6 > MESSAGE_JSON_MAX_BYTES and json_bytes(message.content) > MESSAGE_JSON_MAX_BYTES:
            raise TooLarge(
                f"{where}: at most {MESSAGE_JSON_MAX_BYTES} bytes as JSON (it must fit a 6 MB response), "
                f"got {json_bytes(message.content)}"
            )
        created_at = message.created_at
        if created_at is not None and created_at.tzinfo is None:
            created_at = created_at.replace(tzinfo=UTC)  # a timestamp without zone is taken as UTC
        prepared.append(
            NewMessage(
                content=message.content,
                peer_id=message.peer_id,
                token_count=count_text(message.content),
                metadata=message.metadata,
                created_at=created_at.isoformat() if created_at else None,
                run_id=_run_of(message, index),
            )
        )
    return prepared


def _run_of(message: MessageIn, index: int) -> str | None:
    """A message's run: its `run_id` (ext), else `metadata.run_id` (what the honcho-ai SDK can send:
    `peer.message(text, metadata={"run_id": r})`), held to the same rules (null: no run); fixed once stored."""
    value = (message.metadata or {}).get("run_id")
    if message.run_id is not None or value is None:
        return message.run_id
    if not is_id(value):
        if isinstance(value, str):
            shown = f"{len(value)} characters" if len(value) > ID_MAX else repr(value)
        else:
            text = repr(value)
            shown = f"{type(value).__name__} {text if len(text) <= 40 else text[:39] + '…'}"
        raise Invalid(
            f"messages[{index}].metadata.run_id: a string of 1-{ID_MAX} characters of letters, digits, "
            f"'_' and '-' (as run_id), got {shown}"
        )
    return value


def _fingerprint(batch: MessageBatch) -> str:
    canonical = json.dumps(batch.model_dump(mode="json"), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def create_messages(
    db: Db,
    settings: Settings,
    ws: str,
    session_id: str,
    batch: MessageBatch,
    idempotency_key: str | None = None,
    *,
    lease_s: float = idempotency.DEFAULT_LEASE_S,
) -> tuple[int, list[dict[str, Any]]]:
    """(status, messages) for a batch post; a repeated Idempotency-Key replays the first answer.

    `lease_s`: how long an Idempotency-Key stays claimed by this request should it die (the function's remaining
    time).
    """
    prepared = _prepare(batch, settings)

    def store(batch_token: str | None = None, on_attempt=None) -> tuple[int, list[dict[str, Any]]]:
        return 201, store_batch(
            db, settings, ws, session_id, prepared, lease_s=lease_s, batch_token=batch_token, on_attempt=on_attempt
        )

    if idempotency_key is None:
        status, views = store()
        return status, _fit_echo(views)
    if not 1 <= len(idempotency_key) <= IDEMPOTENCY_KEY_MAX or not idempotency_key.isprintable():
        raise Invalid(f"Idempotency-Key: 1-{IDEMPOTENCY_KEY_MAX} printable characters")

    # The stored answer leaves out what the identical request body carries again (content, metadata),
    # so even a batch of large messages fits in one record.
    def compact(view: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in view.items() if k not in ("content", "metadata")}

    def store_compact(batch_token: str, on_attempt) -> tuple[int, list[dict[str, Any]]]:
        status, views = store(batch_token, on_attempt)
        return status, [compact(view) for view in views]

    def find_committed(first_seq: int, batch_token: str) -> list[dict[str, Any]] | None:
        items = read_range(db, ws, session_id, first_seq, first_seq + len(prepared) - 1)
        if len(items) != len(prepared) or any(i.get("batch_token") != batch_token for i in items):
            return None
        return [compact(message_view(i, ws, session_id)) for i in items]

    status, answer, replayed = idempotency.run_once(
        db,
        ws,
        session_id,
        idempotency_key,
        _fingerprint(batch),
        store_compact,
        find_committed=find_committed,
        lease_s=lease_s,
    )
    views = [{**stored, "content": m.content, "metadata": m.metadata or {}} for stored, m in zip(answer, prepared)]
    return status, _fit_echo([_ordered(v) for v in views])


def store_batch(
    db: Db,
    settings: Settings,
    ws: str,
    session_id: str,
    prepared: list[NewMessage],
    *,
    lease_s: float,
    batch_token: str | None = None,
    on_attempt=None,
) -> list[dict[str, Any]]:
    """Append validated messages and index them for search: the one write path of a post and of an import."""
    nonce = secrets.token_hex(4)
    views = append_messages(
        db,
        ws,
        session_id,
        prepared,
        inline_max_bytes=settings.inline_body_max_bytes,
        batch_token=batch_token,
        on_attempt=on_attempt,
        index_nonce=nonce,
        index_by=math.ceil(time.time() + lease_s),
    )
    _index(db, ws, session_id, index_unit(session_id, views[0]["seq"], nonce), views, prepared)
    metrics.add_metric(name="MessagesIngested", unit=MetricUnit.Count, value=len(views))
    metrics.add_metric(name="TokensIngested", unit=MetricUnit.Count, value=sum(m.token_count for m in prepared))
    return views


def _index(
    db: Db, ws: str, session_id: str, unit: str, views: list[dict[str, Any]], prepared: list[NewMessage]
) -> None:
    """Make the stored batch searchable before the answer (read-your-writes): one fresh item and a text a message.
    The messages are stored whatever happens here: a failure is logged and the deriver indexes the batch later
    (search.ensure_indexed), never a 5xx."""
    texts = [search.Text(v["seq"], v["peer_id"], m.content) for v, m in zip(views, prepared)]
    try:
        search.index_batch(db, ws, session_id, unit, texts)
    except Exception:  # noqa: BLE001 - stored is stored: the answer is 201 and the deriver finishes the index
        log.exception("indexing %s/%s unit %s failed; the deriver will index it", ws, session_id, unit)
        metrics.add_metric(name="IndexDeferred", unit=MetricUnit.Count, value=len(texts))


def _fit_echo(views: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The stored batch as answered: when echoing it would pass Lambda's 6 MB response (the batch is stored by now),
    the largest contents are left out, each marked `content_omitted` (ext); the client sent them, and GET returns
    them."""
    used = sum(json_bytes(v) for v in views)
    for view in sorted(views, key=lambda v: -len(v["content"])):
        if used <= RESPONSE_BUDGET_BYTES:
            break
        used -= json_bytes(view["content"]) - 2
        view["content"], view["content_omitted"] = "", True
    return views


_ORDER = (
    "id",
    "content",
    "peer_id",
    "session_id",
    "workspace_id",
    "metadata",
    "created_at",
    "token_count",
    "seq",
    "run_id",
)


def _ordered(view: dict[str, Any]) -> dict[str, Any]:
    return {k: view[k] for k in _ORDER if k in view}
