"""Message creation: validate, count tokens once, store all or nothing, at most once per Idempotency-Key."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC
from typing import Any

from aws_lambda_powertools import Metrics
from aws_lambda_powertools.metrics import MetricUnit

from precis.config import Settings
from precis.errors import Invalid, TooLarge
from precis.models import MessageBatch
from precis.store import idempotency
from precis.store.db import Db
from precis.store.messages import NewMessage, append_messages, check_text
from precis.tokens import count_text

IDEMPOTENCY_KEY_MAX = 255
metrics = Metrics()


def _prepare(batch: MessageBatch, settings: Settings) -> list[NewMessage]:
    prepared = []
    for index, message in enumerate(batch.messages):
        where = f"messages[{index}].content"
        check_text(message.content, where)
        if len(message.content) > settings.max_message_chars:
            raise TooLarge(f"{where}: at most {settings.max_message_chars} characters, got {len(message.content)}")
        created_at = message.created_at
        if created_at is not None and created_at.tzinfo is None:
            created_at = created_at.replace(tzinfo=UTC)  # a timestamp without zone is taken as UTC
        prepared.append(NewMessage(
            content=message.content, peer_id=message.peer_id, token_count=count_text(message.content),
            metadata=message.metadata, created_at=created_at.isoformat() if created_at else None,
            run_id=message.run_id))
    return prepared


def _fingerprint(batch: MessageBatch) -> str:
    canonical = json.dumps(batch.model_dump(mode="json"), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def create_messages(db: Db, settings: Settings, ws: str, session_id: str, batch: MessageBatch,
                    idempotency_key: str | None = None) -> tuple[int, list[dict[str, Any]]]:
    """(status, messages) for a batch post; a repeated Idempotency-Key replays the first answer."""
    prepared = _prepare(batch, settings)

    def store() -> tuple[int, list[dict[str, Any]]]:
        views = append_messages(db, ws, session_id, prepared, inline_max_bytes=settings.inline_body_max_bytes)
        metrics.add_metric(name="MessagesIngested", unit=MetricUnit.Count, value=len(views))
        metrics.add_metric(name="TokensIngested", unit=MetricUnit.Count, value=sum(m.token_count for m in prepared))
        return 201, views

    if idempotency_key is None:
        return store()
    if not 1 <= len(idempotency_key) <= IDEMPOTENCY_KEY_MAX or not idempotency_key.isprintable():
        raise Invalid(f"Idempotency-Key: 1-{IDEMPOTENCY_KEY_MAX} printable characters")

    # The stored answer leaves out what the identical request body carries again (content, metadata),
    # so even a batch of large messages fits in one record.
    def store_compact() -> tuple[int, list[dict[str, Any]]]:
        status, views = store()
        return status, [{k: v for k, v in view.items() if k not in ("content", "metadata")} for view in views]

    status, answer, replayed = idempotency.run_once(db, ws, session_id, idempotency_key, _fingerprint(batch),
                                                    store_compact)
    views = [{**stored, "content": m.content, "metadata": m.metadata or {}} for stored, m in zip(answer, prepared)]
    return status, [_ordered(v) for v in views]


_ORDER = ("id", "content", "peer_id", "session_id", "workspace_id", "metadata", "created_at", "token_count",
          "seq", "run_id")


def _ordered(view: dict[str, Any]) -> dict[str, Any]:
    return {k: view[k] for k in _ORDER if k in view}
