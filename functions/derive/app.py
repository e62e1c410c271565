"""Deriver: the table stream's second consumer (message inserts), its quiet wake-ups (SQS) and the five-minute flush
(EventBridge Scheduler).

A stream batch is grouped by (session, sender); each group is derived once, PRECIS_SUMMARIZE_CONCURRENCY of them at
once. A group that fails reports every record of it as a batch-item failure (the stream retries them, then
dead-letters them) and is marked due again, so the schedule retries it later: the sender's cursor never moved, so no
message is skipped. After a stream batch, each llm session's wake-up is sent, delayed PRECIS_DERIVE_QUIET_S; a
wake-up that finds its session quiet derives the session's waiting batches (one that fails is retried by SQS, then
dead-lettered, and marked due for the schedule). The scheduled event `{"precis": "flush"}` derives every cursor
whose batch is due.
"""

from precis import startup  # first: no garbage collection while the imports run (precis.startup)

import math
from contextlib import suppress
from datetime import UTC, datetime
from functools import lru_cache

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import DynamoDBRecord
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from precis import concurrency
from precis.settings import get_settings
from precis.secrets import with_llm_key
from precis.memory.deriver import (
    BackfillTarget,
    DeriveTarget,
    all_workspaces,
    derive_target,
    due_targets,
    mark_failed,
    quiet_targets,
    quiet_wakes,
    target_of,
)
from precis.memory import wakeups
from precis.memory.dreams import DreamTarget, dreams_due
from precis.memory.dreams import target_of as dream_of
from precis.store.db import get_db, get_queue_client
from precis.telemetry import log_metrics

logger = Logger()
metrics = Metrics()
processor = BatchProcessor(event_type=EventType.DynamoDBStreams, raise_on_entire_batch_failure=False)
wake_processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
Target = DeriveTarget | BackfillTarget | DreamTarget
_failures: dict[Target, Exception | None] = {}
_wake_failures: dict[tuple[str, str], Exception | None] = {}


@lru_cache(maxsize=8)
def _engine(name: str, model: str | None, settings):
    """One engine (and HTTP client) per cold start and configuration."""
    from precis.memory.engines import get_deriver_engine

    return get_deriver_engine(name, settings, model=model)


def _engine_for(config):
    return _engine(config.engine, config.model if config.engine == "llm" else None, with_llm_key(get_settings()))


def _backfill(db, target: BackfillTarget) -> None:
    from precis.memory.embeddings import configured_embedder
    from precis.store import scopes

    try:
        copied = scopes.backfill(db, target.workspace, target.scope, target.session, embedder=configured_embedder())
    except Exception:
        scopes.mark_failed(db, target.workspace, target.scope, target.session)
        raise  # the stream retries the record; the copy resumes where it stopped
    logger.info("backfill", extra={"scope": target.scope, "session": target.session, "copied": copied})


def _index(db, images: list[dict]) -> None:
    """Settle the messages' index units and embed them for search, once each (a replayed record finds its vector
    written)."""
    from precis.memory.embeddings import configured_embedder
    from precis.store.message_search import index_messages

    settings = get_settings()
    semantic = configured_embedder() if settings.embedder != "hashed" else None
    index_messages(db, images, semantic=semantic)


def _dream(db, target: DreamTarget) -> None:
    from precis.configuration import derive_config
    from precis.memory.dreams import run
    from precis.memory.embeddings import configured_embedder
    from precis.store import keys
    from precis.store.db import batch_get

    workspace = next(iter(batch_get(db, [keys.workspace(target.workspace)])), None)
    if workspace is None:
        return  # deleted: its collections go with it
    config = derive_config(_configuration(workspace), {}, get_settings())
    written = run(db, target, engine=_engine_for(config), embedder=configured_embedder(), now=datetime.now(UTC))
    logger.info("dream", extra={"observer": target.observer, "observed": target.observed, "deductive": written})


def _configuration(item: dict) -> dict:
    import json

    value = item.get("configuration")
    return (json.loads(value) if isinstance(value, str) else value) or {}


def _derive(db, target: Target, time_left, images: list[dict] | None = None, flush: bool = False):
    """Derive (or backfill, or dream) one target; the deriver's Outcome for a DeriveTarget."""
    if isinstance(target, BackfillTarget):
        _backfill(db, target)
        return None
    if isinstance(target, DreamTarget):
        _dream(db, target)
        return None
    from precis.memory.embeddings import configured_embedder

    try:
        if images:
            _index(db, images)
        outcome = derive_target(db, get_settings(), target, engine_for=_engine_for, embedder=configured_embedder(),
                                time_left=time_left, flush=flush)
    except Exception:
        concurrency.add_metric(name="DerivationsFailed", unit=MetricUnit.Count, value=1)
        mark_failed(db, target, datetime.now(UTC))
        raise
    if outcome.conclusions:
        concurrency.add_metric(name="ConclusionsWritten", unit=MetricUnit.Count, value=outcome.conclusions)
    logger.info("derive", extra={"session": target.session, "sender": target.sender, "derived": outcome.derived,
                                 "conclusions": outcome.conclusions, "pending": outcome.pending, "quiet": flush})
    return outcome


def record_handler(record: DynamoDBRecord) -> None:
    image = record.dynamodb.new_image if record.dynamodb else {}
    target = target_of(image) or dream_of(image)
    if target is None:
        return  # not a message: nothing to derive (the mapping's filter lets none through)
    failure = _failures.get(target)
    if failure is not None:
        raise failure


def _send_wakes(derived: list) -> None:
    """The quiet wake-ups of a stream batch's llm sessions (best effort: the schedule's flush is the backstop)."""
    settings = get_settings()
    wakes = quiet_wakes(derived)
    if not wakes or not settings.derive_quiet_s or not settings.derive_wake_queue_url:
        return
    unsent = wakeups.send(get_queue_client(), settings.derive_wake_queue_url, wakes, settings.derive_quiet_s)
    if unsent:
        concurrency.add_metric(name="QuietWakeupsUnsent", unit=MetricUnit.Count, value=unsent)


def wake_record_handler(record: SQSRecord) -> None:
    wake = wakeups.parse(record.body or "")
    failure = _wake_failures.get((wake.workspace, wake.session)) if wake is not None else None
    if failure is not None:
        raise failure


def _wake_up(db, event: dict, context, time_left) -> dict:
    """Derive the waiting batches of each session whose wake-up finds it quiet; a failed session's records fail."""
    wakes = wakeups.newest(filter(None, (wakeups.parse(SQSRecord(r).body or "") for r in event["Records"])))

    def derive_session(wake) -> None:
        failed = None
        for target in quiet_targets(db, wake):
            try:
                _derive(db, target, time_left, flush=True)
            except Exception as exc:  # noqa: BLE001 - the session's other senders still derive; then it fails
                failed = failed or exc
        if failed is not None:
            raise failed

    _wake_failures.clear()
    _wake_failures.update({(w.workspace, w.session): exc for w, exc in concurrency.run_each(
        wakes, derive_session, workers=get_settings().summarize_concurrency).items()})
    return process_partial_response(event=event, record_handler=wake_record_handler, processor=wake_processor,
                                    context=context)


def _flush(db, time_left) -> dict:
    now = datetime.now(UTC)
    workspaces = all_workspaces(db)
    targets: list[Target] = [*due_targets(db, workspaces, now)]
    targets += [dream for ws in workspaces for dream in dreams_due(db, ws, now)]
    failures = concurrency.run_each(targets, lambda t: _derive(db, t, time_left),
                                    workers=get_settings().summarize_concurrency)
    failed = [t for t, exc in failures.items() if exc is not None]
    return {"flushed": len(targets) - len(failed), "failed": len(failed)}


@logger.inject_lambda_context
@log_metrics(metrics)
def lambda_handler(event: dict, context) -> dict:
    def time_left() -> float:
        return context.get_remaining_time_in_millis() / 1000 if context else math.inf

    db = get_db()  # made here: boto3 builds clients safely from one thread only
    if event.get("precis") == "flush":
        result = _flush(db, time_left)
        return result
    records = event.get("Records") or ()
    if records and records[0].get("eventSource") == "aws:sqs":
        return _wake_up(db, event, context, time_left)
    targets: dict[Target, list[dict]] = {}
    for record in map(DynamoDBRecord, event.get("Records") or ()):
        with suppress(Exception):
            image = record.dynamodb.new_image if record.dynamodb else {}
            target = target_of(image) or dream_of(image)
            if target is not None:
                targets.setdefault(target, []).append(image)
    outcomes: dict[Target, object] = {}

    def derive(target: Target) -> None:
        outcomes[target] = _derive(db, target, time_left, images=targets[target])

    _failures.clear()
    _failures.update(concurrency.run_each(sorted(targets, key=repr), derive,
                                          workers=get_settings().summarize_concurrency))
    _send_wakes([(t, targets[t], outcomes.get(t)) for t in targets if isinstance(t, DeriveTarget)])
    return process_partial_response(event=event, record_handler=record_handler, processor=processor, context=context)


startup.done()  # the module is built: freeze what it made (precis.startup)
