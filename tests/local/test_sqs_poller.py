"""The SQS poller against a real moto server: the template's queue triggers, delays honoured, Lambda's record shape,
partial failures left on the queue, and the redrive to the dead-letter queue."""

from __future__ import annotations

import json

from local.sqs_poller import QueueMapping, QueuePoller, queue_mappings
from local.template import template
from local.worker import InvokeResult
from tests.stack import wait_for

WAKE = QueueMapping(
    "DeriveFunction",
    "precis-derive-wake-local",
    batch_size=10,
    report_item_failures=True,
    dead_letter_queue="precis-derive-wake-dlq-local",
    max_receive_count=5,
)
WEBHOOK = QueueMapping(
    "WebhookFunction",
    "precis-webhook-local",
    batch_size=5,
    report_item_failures=True,
    dead_letter_queue="precis-webhook-dlq-local",
    max_receive_count=12,
)


class Recorder:
    """An invoker that records each event and fails the messages whose body says so."""

    def __init__(self):
        self.events: list[dict] = []

    def __call__(self, event: dict) -> InvokeResult:
        self.events.append(event)
        failed = [{"itemIdentifier": r["messageId"]} for r in event["Records"] if "fail" in r["body"]]
        return InvokeResult(True, {"batchItemFailures": failed})

    def bodies(self) -> list[str]:
        return [r["body"] for e in self.events for r in e["Records"]]


def counts(sqs, url: str) -> dict[str, int]:
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    return {
        k.removeprefix("ApproximateNumberOfMessages") or "Visible": int(v)
        for k, v in attributes.items()
        if k.startswith("ApproximateNumberOfMessages")
    }


def test_the_template_maps_the_deriver_and_the_webhook_sender_to_their_queues_with_their_redrives():
    assert queue_mappings(template()) == [WAKE, WEBHOOK]
    assert template().functions["DeriveFunction"].stream["FilterCriteria"]  # the stream mapping is still the stream's


def test_a_delayed_message_is_delivered_after_its_delay_and_deleted(moto_server):
    endpoint, clients = moto_server
    sqs = clients["sqs"]
    url = sqs.get_queue_url(QueueName=WAKE.queue)["QueueUrl"]
    recorder = Recorder()
    poller = QueuePoller(endpoint, WAKE, recorder, poll_interval_s=0.05)
    sqs.send_message(QueueUrl=url, MessageBody='{"seq": 1}', DelaySeconds=2)
    assert counts(sqs, url)["Delayed"] == 1
    poller.start()
    try:
        wait_for(lambda: recorder.events, 30)
        wait_for(lambda: sum(counts(sqs, url).values()) == 0, 30)  # processed: deleted
    finally:
        poller.stop()
        poller.join()
    ((record,),) = [e["Records"] for e in recorder.events]
    assert record["body"] == '{"seq": 1}' and record["eventSource"] == "aws:sqs"
    assert record["eventSourceARN"] == "arn:aws:sqs:us-east-1:123456789012:precis-derive-wake-local"
    attributes = record["attributes"]
    waited_ms = int(attributes["ApproximateFirstReceiveTimestamp"]) - int(attributes["SentTimestamp"])
    assert waited_ms >= 2000  # not received before its delay


def test_a_reported_failure_stays_and_is_dead_lettered_after_max_receives(moto_server):
    endpoint, clients = moto_server
    sqs = clients["sqs"]
    url = sqs.get_queue_url(QueueName=WAKE.queue)["QueueUrl"]
    dlq = sqs.get_queue_url(QueueName=WAKE.dead_letter_queue)["QueueUrl"]
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"VisibilityTimeout": "0"})  # retried at once
    recorder = Recorder()
    poller = QueuePoller(endpoint, WAKE, recorder, poll_interval_s=0.05)
    sqs.send_message(QueueUrl=url, MessageBody=json.dumps({"ok": 1}))
    sqs.send_message(QueueUrl=url, MessageBody=json.dumps({"fail": 1}))
    poller.start()
    try:
        (moved,) = wait_for(lambda: sqs.receive_message(QueueUrl=dlq).get("Messages"), 60)
    finally:
        poller.stop()
        poller.join()
    assert moved["Body"] == '{"fail": 1}'
    assert recorder.bodies().count('{"ok": 1}') == 1  # processed once, then deleted
    assert recorder.bodies().count('{"fail": 1}') == WAKE.max_receive_count  # then the redrive
    assert sum(counts(sqs, url).values()) == 0
