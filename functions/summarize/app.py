"""DynamoDB stream consumer: keeps each touched session's summaries current; purges deleted sessions.

Records are grouped by session: the first record of a session does the work for the whole batch, and when
it fails every record of that session is reported as a batch-item failure, so the stream retries them
(and finally dead-letters them) without losing or duplicating anything.
"""

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import DynamoDBRecord
from precis.config import get_settings
from precis.store.db import get_db
from precis.store.resources import purge_session
from precis.summarize import stream_target, summarize_session

logger = Logger()
tracer = Tracer()
metrics = Metrics()
# Always answer with batchItemFailures, never a function error, so the stream retries from the first failed
# record; bisecting is left for real crashes.
processor = BatchProcessor(event_type=EventType.DynamoDBStreams, raise_on_entire_batch_failure=False)
_outcomes: dict[tuple[str, str, str], Exception | None] = {}


def record_handler(record: DynamoDBRecord) -> None:
    target = stream_target(record.dynamodb.new_image if record.dynamodb else {})
    if target not in _outcomes:
        action, ws, session_id = target
        try:
            if action == "purge":
                purge_session(get_db(), ws, session_id)
            else:
                summarize_session(get_db(), get_settings(), ws, session_id)
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
