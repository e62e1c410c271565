"""DynamoDB stream consumer: runs each touched session's summary strategy, reporting per-record failures."""

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import DynamoDBRecord

from precis.summarize import note_message

logger = Logger()
tracer = Tracer()
metrics = Metrics()
processor = BatchProcessor(event_type=EventType.DynamoDBStreams)


def record_handler(record: DynamoDBRecord) -> None:
    image = record.dynamodb.new_image if record.dynamodb else {}
    note_message(image)


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def lambda_handler(event: dict, context) -> dict:
    return process_partial_response(event=event, record_handler=record_handler, processor=processor, context=context)
