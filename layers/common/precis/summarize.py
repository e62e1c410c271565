"""Keeping a session's summaries current: read what the strategy needs, decide, summarize, store, audit.

Called by the stream consumer once per session touched by a batch. Stream delivery is at-least-once and
invocations may overlap, so every summary write is conditional (see `store.summaries.put_summary`).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

from precis.config import Settings
from precis.configuration import summary_config
from precis.engines import Engine, SummaryRequest, default_engine, get_engine, word_limit
from precis.errors import Invalid
from precis.secrets import llm_api_key
from precis.store import keys
from precis.store.db import Db, batch_get
from precis.store.messages import _range, _with_content
from precis.store.resources import _json
from precis.store.summaries import get_summaries, put_summary
from precis.strategies import MessageRef, SummaryCost, SummaryJob, decide, needed_from
from precis.tokens import count_text

logger = Logger(child=True)
metrics = Metrics()


@dataclass(frozen=True)
class Written:
    summary_type: str
    covers_seq: int
    stored: bool  # False: a concurrent or earlier invocation already stored one covering as much


def _session_and_workspace(db: Db, ws: str, session_id: str) -> tuple[dict | None, dict | None]:
    found = {i["SK"]: i for i in batch_get(db, [keys.session(ws, session_id), keys.workspace(ws)])}
    return found.get(f"SESSION#{session_id}"), found.get("WS")


def summarize_session(db: Db, settings: Settings, ws: str, session_id: str, *,
                      engine_for: Callable[[str], Engine] | None = None) -> list[Written]:
    """Write every summary the session's strategy says is due; raises on engine failure (nothing stored)."""
    session, workspace = _session_and_workspace(db, ws, session_id)
    if session is None or workspace is None or "deleted_at" in session:
        return []  # deleted since the message was written: nothing to keep current
    try:
        config = summary_config(_json(workspace.get("configuration")), _json(session.get("configuration")))
    except Invalid as exc:
        logger.warning("summary settings invalid; session skipped", extra={"detail": exc.detail})
        return []
    raw = get_summaries(db, ws, session_id)
    stored = {t: SummaryCost(t, s["covers_seq"], s["end_tokens"], s["token_count"]) for t, s in raw.items()}
    first = needed_from(config, stored)
    if first is None:
        return []
    items = _range(db, ws, session_id, first, keys.MAX_SEQ)  # first..newest: bounded by the strategy's cadence
    jobs = decide(config, stored, [MessageRef(i["seq"], i["token_count"], i.get("run_id")) for i in items])
    if not jobs:
        return []
    settings = _with_secret_key(settings)
    engine = (engine_for or (lambda name: _engine(name, settings)))(config.engine or default_engine(settings))
    by_seq = {i["seq"]: i for i in items}
    return [_run_job(db, ws, session_id, job, config, engine, raw, by_seq) for job in jobs]


def _with_secret_key(settings: Settings) -> Settings:
    """Settings with the LLM API key from Secrets Manager when the environment has none (deployed stacks)."""
    if settings.llm_api_key:
        return settings
    return settings.model_copy(update={"llm_api_key": llm_api_key()})


@lru_cache(maxsize=4)
def _engine(name: str, settings: Settings) -> Engine:
    """One engine (and HTTP client) per cold start and configuration."""
    return get_engine(name, settings)


def _run_job(db: Db, ws: str, session_id: str, job: SummaryJob, config, engine: Engine,
             raw: dict[str, dict], by_seq: dict[int, dict]) -> Written:
    chosen = [by_seq[seq] for seq in range(job.first_seq, job.through_seq + 1)]
    views = _with_content(db, chosen, ws, session_id)
    request = SummaryRequest(
        summary_type=job.summary_type, previous=raw[job.summary_type]["content"] if job.previous else None,
        messages=[(v["peer_id"], v["content"]) for v in views], instructions=config.instructions,
        word_limit=word_limit(config.max_output_tokens), max_output_tokens=config.max_output_tokens,
        model=config.model, temperature=config.temperature)
    try:
        result = engine.summarize(request)
    except Exception:
        metrics.add_metric(name="SummarizerErrors", unit=MetricUnit.Count, value=1)
        raise
    last = by_seq[job.through_seq]
    token_count = count_text(result.text)
    stored = put_summary(db, ws, session_id, summary_type=job.summary_type, content=result.text,
                         token_count=token_count, covers_seq=job.through_seq,
                         end_tokens=last["start_tokens"] + last["token_count"], message_id=last["id"])
    if stored:
        _audit(db, ws, session_id, job, result, token_count, engine.name)
        metrics.add_metric(name="SummariesWritten", unit=MetricUnit.Count, value=1)
        metrics.add_metric(name="SummarizerInputTokens", unit=MetricUnit.Count, value=result.input_tokens)
        metrics.add_metric(name="SummarizerOutputTokens", unit=MetricUnit.Count, value=result.output_tokens)
        metrics.add_metric(name="SummarizerLatency", unit=MetricUnit.Milliseconds, value=result.latency_ms)
    logger.info("summary", extra={"session": session_id, "summary_type": job.summary_type,
                                  "covers_seq": job.through_seq, "stored": stored})
    return Written(job.summary_type, job.through_seq, stored)


def _audit(db: Db, ws: str, session_id: str, job: SummaryJob, result, token_count: int, engine: str) -> None:
    record = {"workspace_id": ws, "session_id": session_id, "summary_type": job.summary_type,
              "covers": {"first_seq": job.first_seq, "through_seq": job.through_seq,
                         "previous_covers_seq": job.previous.covers_seq if job.previous else None},
              "engine": engine, "model": result.model, "prompt": result.prompt, "output": result.text,
              "token_count": token_count, "usage": {"input_tokens": result.input_tokens,
                                                    "output_tokens": result.output_tokens},
              "latency_ms": result.latency_ms, "attempts": result.attempts,
              "created_at": datetime.now(UTC).isoformat()}
    db.s3.put_object(Bucket=db.bucket, Key=keys.audit_object(ws, session_id, job.summary_type, job.through_seq,
                                                               secrets.token_hex(4)),
                     Body=json.dumps(record, ensure_ascii=False).encode(), ContentType="application/json")


def stream_target(image: dict[str, Any]) -> tuple[str, str, str]:
    """(action, workspace, session) of a stream record's new image: 'summarize' or 'purge'."""
    kind, pk = image.get("kind"), image.get("PK", "")
    if kind == "message":
        ws, session_id = keys.parse_session_pk(pk)
        return "summarize", ws, session_id
    if kind == "session" and image.get("deleted_at"):
        return "purge", pk.removeprefix("WS#"), image["id"]
    raise Invalid(f"stream record is neither a message nor a deleted session: kind={kind!r}")
