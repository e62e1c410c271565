"""Deriver: the table stream's second consumer, its quiet wake-ups (SQS) and the five-minute flush (EventBridge
Scheduler), one entry each; the jobs are `precis.memory.jobs`, and which stream record wakes which job is
`precis.stream`'s table.

A target (or a wake-up's session) that fails reports every record of it as a batch-item failure: the stream (or SQS)
retries them, then dead-letters them; the job marked it due, so the schedule retries it later too.
"""

from precis import startup  # first: no garbage collection while the imports run (precis.startup)

import math
from collections.abc import Mapping
from contextlib import suppress
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import DynamoDBRecord
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from precis.memory import jobs, wakeups
from precis.store.db import get_db
from precis.telemetry import log_metrics

logger = Logger()
metrics = Metrics()
processor = BatchProcessor(event_type=EventType.DynamoDBStreams, raise_on_entire_batch_failure=False)
wake_processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
_failures: dict = {}


def _record(record: DynamoDBRecord) -> tuple[str, dict]:
    event_name = record.get("eventName") or ""
    if event_name == "REMOVE":  # (a REMOVE holds only the keys under NEW_IMAGE: with who removed it, store.retention)
        by = (record.get("userIdentity") or {}).get("principalId")
        return event_name, {**(record.dynamodb.keys if record.dynamodb else {}), "userIdentity": by}
    return event_name, record.dynamodb.new_image if record.dynamodb else {}


def record_handler(record: DynamoDBRecord) -> None:
    failure = _failures.get(jobs.target(*_record(record)))
    if failure is not None:
        raise failure


def wake_record_handler(record: SQSRecord) -> None:
    wake = wakeups.parse(record.body or "")
    failure = _failures.get((wake.workspace, wake.session)) if wake is not None else None
    if failure is not None:
        raise failure


def on_stream(event: dict, context, time_left) -> Mapping[str, Any]:
    records = []
    for record in map(DynamoDBRecord, event.get("Records") or ()):
        with suppress(Exception):  # a record that cannot be read names no target: it passes
            records.append(_record(record))
    _failures.clear()
    _failures.update(jobs.on_stream(get_db(), records, time_left))
    return process_partial_response(event=event, record_handler=record_handler, processor=processor, context=context)


def on_wake(event: dict, context, time_left) -> Mapping[str, Any]:
    _failures.clear()
    _failures.update(jobs.on_wake(get_db(), (SQSRecord(r).body or "" for r in event["Records"]), time_left))
    return process_partial_response(
        event=event, record_handler=wake_record_handler, processor=wake_processor, context=context
    )


def on_schedule(event: dict, context, time_left) -> Mapping[str, Any]:
    return jobs.on_schedule(get_db(), time_left)


@logger.inject_lambda_context
@log_metrics(metrics)
def lambda_handler(event: dict, context) -> Mapping[str, Any]:
    def time_left() -> float:
        return context.get_remaining_time_in_millis() / 1000 if context else math.inf

    # The schedule's input is {"precis": "flush"} (template.yaml); SQS and the stream name their source.
    records = event.get("Records") or ()
    source = "schedule" if event.get("precis") == "flush" else records[0].get("eventSource") if records else None
    entry = {"schedule": on_schedule, "aws:sqs": on_wake}.get(source or "", on_stream)
    return entry(event, context, time_left)


startup.done()  # the module is built: freeze what it made (precis.startup)
