"""DynamoDB stream consumer: keeps each touched session's summaries current; purges deleted sessions.

Records are grouped by target (a session to summarize, or a deleted incarnation to purge): the first record of a
target does the work for the whole batch, and when it fails every record of that target is reported as a
batch-item failure, so the stream retries them (and finally dead-letters them). Both actions are idempotent:
summary writes are conditional, and a purge is bound to the incarnation its record names.
"""

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import DynamoDBRecord
from precis.config import get_settings
from precis.store.db import get_db
from precis.store.purge import purge_session
from precis.stream import StreamTarget, stream_target
from precis.summarize import summarize_session

logger = Logger()
tracer = Tracer()
metrics = Metrics()
# Always answer with batchItemFailures, never a function error, so the stream retries from the first failed
# record; bisecting is left for real crashes.
processor = BatchProcessor(event_type=EventType.DynamoDBStreams, raise_on_entire_batch_failure=False)
_outcomes: dict[StreamTarget, Exception | None] = {}


def record_handler(record: DynamoDBRecord, lambda_context=None) -> None:
    def time_left() -> float:
        return lambda_context.get_remaining_time_in_millis() / 1000 if lambda_context else float("inf")

    target = stream_target(record.dynamodb.new_image if record.dynamodb else {})
    if target not in _outcomes:
        try:
            if target.action == "purge":
                result = purge_session(get_db(), target.workspace, target.session, target.incarnation,
                                       time_left=time_left)
                logger.info("purge", extra={"session": target.session, "done": result.done,
                                            "items": result.deleted_items, "objects": result.deleted_objects})
            else:
                outcome = summarize_session(get_db(), get_settings(), target.workspace, target.session,
                                            remaining_s=time_left)
                if outcome.work_remains and not any(w.stored for w in outcome.written):
                    # Out of time before any step: retry these records. A stored step continues by itself: its
                    # summary item (with job_through_seq) is a stream record of its own.
                    raise TimeoutError(f"session '{target.session}': no summary step fit the time left")
            _outcomes[target] = None
        except Exception as exc:
            _outcomes[target] = exc
    if _outcomes[target] is not None:
        raise _outcomes[target]


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def lambda_handler(event: dict, context) -> dict:
    _outcomes.clear()
    return process_partial_response(event=event, record_handler=record_handler, processor=processor, context=context)
