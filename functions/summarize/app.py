"""DynamoDB stream consumer: keeps each touched session's summaries current, purges deleted sessions (their items and
bodies), and copies what a new clone inherited from its parent into its own partition.

Records are grouped by target (a session to summarize, a deleted incarnation to purge, a clone to copy), and each
target of the batch is served once, PRECIS_SUMMARIZE_CONCURRENCY of them at once. When a target fails, every record of
it is reported as a batch-item failure, so the stream retries them (and finally dead-letters them); a record that
names no target fails alone. Every action is idempotent: summary writes are conditional, a session is summarized by
one invocation at a time (its lease), a purge is bound to the incarnation its record names, and a clone's copy is of
conditional puts bound to its incarnation, resumed from where the last step stopped.

No Powertools Tracer, as in every function: the X-Ray SDK was ~8% of each scale-out's cold start, and the function's
active tracing (template) still traces each invocation.
"""

from precis import startup  # first: no garbage collection while the imports run (precis.startup)

import math
import time
from collections.abc import Callable, Mapping
from contextlib import suppress
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import DynamoDBRecord
from precis.concurrency import run_each
from precis.settings import get_settings
from precis.errors import Invalid
from precis.events import Event, publish_configured
from precis.llm import meter
from precis.store import usage
from precis.store.db import Db, get_db
from precis.store.purge import purge_session
from precis.stream import StreamTarget, stream_target
from precis.summaries.runner import summarize_under_lease
from precis.telemetry import log_metrics

logger = Logger()
metrics = Metrics()
# Always answer with batchItemFailures, never a function error, so the stream retries from the first failed
# record; bisecting is left for real crashes.
processor = BatchProcessor(event_type=EventType.DynamoDBStreams, raise_on_entire_batch_failure=False)
_failures: dict[StreamTarget, Exception | None] = {}
_events: list[Event] = []  # what the batch's stored summaries announce, published once the batch is done
_MARGIN_S = 10.0  # a cascade stops between steps with this much of the invocation left


def _target(record: DynamoDBRecord) -> StreamTarget:
    return stream_target(record.get("eventName") or "", record.dynamodb.new_image if record.dynamodb else {})


def record_handler(record: DynamoDBRecord) -> None:
    failure = _failures[_target(record)]  # Invalid for a record that names no target: it fails alone
    if failure is not None:
        raise failure


def _serve(db: Db, target: StreamTarget, records: list[str], time_left: Callable[[], float]) -> None:
    with meter.workspace(target.workspace):  # its summaries' model calls are the workspace's (precis.llm.meter)
        _serve_target(db, target, records, time_left)


def _serve_target(db: Db, target: StreamTarget, records: list[str], time_left: Callable[[], float]) -> None:
    if target.action == "copy":
        from precis.store.clones import copy_base

        done = copy_base(db, target.workspace, target.session, time_left=time_left)
        logger.info("clone copy", extra={"session": target.session, "done": done})
    elif target.action == "purge":
        result = purge_session(db, target.workspace, target.session, target.incarnation, time_left=time_left)
        logger.info(
            "purge",
            extra={
                "session": target.session,
                "done": result.done,
                "items": result.deleted_items,
                "objects": result.deleted_objects,
            },
        )
    elif target.action == "transfer":
        from precis.transfer.jobs import run

        ran = run(db, target.workspace, target.session, target.step, time_left)
        logger.info("transfer", extra={"job": target.session, "step": target.step, "ran": ran})
    elif target.action == "forget":
        _forget(db, target, records, time_left)
    else:
        outcome = summarize_under_lease(
            db, get_settings(), target.workspace, target.session, records=records, remaining_s=time_left
        )
        _events.extend(outcome.events)


def _forget(db: Db, target: StreamTarget, records: list[str], time_left: Callable[[], float]) -> None:
    """A deleted message's cascade; when it is done, the session's summaries are made again without it (a summary
    of what is left, or none); out of time, the tombstone is touched and its next record goes on."""
    from precis.events.kinds import conclusions_deleted
    from precis.memory.card_refresh import card_rebuilder
    from precis.store.forget import forget_cascade, touch

    assert target.seq is not None  # (a forget target always names its seq)
    settings = get_settings()

    def removed(message_id: str, observer: str, observed: str, ids: list[str]) -> None:
        # One event per collection per cascade, its id from the cause (the message and the collection): a replayed
        # record that removes the rest of a collection announces the same event (docs/design.md, "Events").
        _events.append(
            conclusions_deleted(
                target.workspace,
                observer=observer,
                observed=observed,
                conclusion_ids=ids,
                session_id=target.session,
                cause=("forget", target.session, message_id),
                now=time.time(),
            )
        )

    done = forget_cascade(
        db,
        target.workspace,
        target.session,
        target.seq,
        rebuild_card=card_rebuilder(db, target.workspace, target.session, settings),
        time_left=lambda: time_left() - _MARGIN_S,
        removed=removed,
    )
    logger.info("forget", extra={"session": target.session, "seq": target.seq, "done": done})
    if not done:
        touch(db, target.workspace, target.session, target.seq)
        return
    # Exports begun before the delete may hold the message: their parts go (a record delivered again does it again).
    from precis.store.transfer import withdraw_exports

    withdrawn = withdraw_exports(db, target.workspace, target.session, target.seq)
    if withdrawn:
        logger.info("exports withdrawn", extra={"session": target.session, "seq": target.seq, "exports": withdrawn})
    outcome = summarize_under_lease(
        db, settings, target.workspace, target.session, records=records, remaining_s=time_left
    )
    _events.extend(outcome.events)  # the summaries made again are announced as any


@logger.inject_lambda_context
@log_metrics(metrics)
def lambda_handler(event: dict, context) -> Mapping[str, Any]:
    def time_left() -> float:
        return context.get_remaining_time_in_millis() / 1000 if context else math.inf

    targets: dict[StreamTarget, list[str]] = {}
    for record in map(DynamoDBRecord, event.get("Records") or ()):
        with suppress(Invalid):
            numbers = targets.setdefault(_target(record), [])
            if record.dynamodb is not None and record.dynamodb.sequence_number:  # always, from DynamoDB Streams
                numbers.append(record.dynamodb.sequence_number)
    db = get_db()  # made here: boto3 builds clients safely from one thread only
    _failures.clear()
    _events.clear()
    with usage.metered(lambda: db):  # the batch's model calls, written once as it ends (precis.store.usage)
        _failures.update(
            run_each(
                list(targets),
                lambda t: _serve(db, t, targets[t], time_left),
                workers=get_settings().summarize_concurrency,
            )
        )
    publish_configured(db, _events)  # after the work is stored; never raises (precis.events)
    return process_partial_response(event=event, record_handler=record_handler, processor=processor, context=context)


startup.done()  # the module is built: freeze what it made (precis.startup)
