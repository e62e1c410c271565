"""Webhook deliveries through the webhook queue (moto) and the webhook function, to a real HTTP receiver on this
machine that checks each delivery's signature as a Standard Webhooks receiver does (its own code)."""

from __future__ import annotations

import json
import time

import pytest

from local.sqs_poller import lambda_record
from precis.settings import get_settings
from precis.webhooks import delivery
from tests.handlers import call, invoke
from tests.webhooks.receiver import Receiver

W = "/v3/workspaces/ws1"
QUEUE = "precis-webhook-local"
DLQ = "precis-webhook-dlq-local"
ARN = f"arn:aws:sqs:us-east-1:123456789012:{QUEUE}"


@pytest.fixture
def receiver(aws, monkeypatch):
    monkeypatch.setenv("PRECIS_WEBHOOKS_ALLOW_HTTP_LOCAL", "true")
    monkeypatch.setenv("PRECIS_WEBHOOK_QUEUE_URL", aws["sqs"].get_queue_url(QueueName=QUEUE)["QueueUrl"])
    assert call("POST", "/v3/workspaces", {"id": "ws1"}).status == 201
    rx = Receiver()
    created = call("POST", f"{W}/webhooks", {"url": rx.url})
    assert created.status == 201, created.body
    rx.secrets, rx.endpoint_id = [created.body["secret"]], created.body["id"]  # type: ignore[attr-defined]
    yield rx
    rx.close()


def enqueue(sqs, endpoint_id: str) -> dict:
    msg = delivery.message("ws1", endpoint_id, "test.event", {"workspace_id": "ws1"}, event_id="evt1", now=time.time())
    sqs.send_message(QueueUrl=sqs.get_queue_url(QueueName=QUEUE)["QueueUrl"], MessageBody=json.dumps(msg))
    return msg


def receive(sqs, queue: str = QUEUE) -> list[dict]:
    url = sqs.get_queue_url(QueueName=queue)["QueueUrl"]
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"]).get("Messages", [])
    return [lambda_record(m, ARN) for m in got]


def make_visible(sqs, records: list[dict]) -> None:
    """Play the retry delay's end: the message is visible again at once (no waiting minutes)."""
    url = sqs.get_queue_url(QueueName=QUEUE)["QueueUrl"]
    for r in records:
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=r["receiptHandle"], VisibilityTimeout=0)


def test_a_delivery_arrives_signed_and_is_logged(aws, receiver):
    msg = enqueue(aws["sqs"], receiver.endpoint_id)
    records = receive(aws["sqs"])
    assert invoke("WebhookFunction", {"Records": records}) == {"batchItemFailures": []}
    assert [(r.id, r.body) for r in receiver.accepted] == [
        (msg["id"], {"type": "test.event", "data": {"workspace_id": "ws1"}, "timestamp": msg["created"]})
    ]


def test_a_receiver_that_fails_then_recovers_gets_it_once_recovered(aws, receiver):
    receiver.statuses = [500, 503, 204]
    msg = enqueue(aws["sqs"], receiver.endpoint_id)
    sqs = aws["sqs"]
    url = sqs.get_queue_url(QueueName=QUEUE)["QueueUrl"]
    for attempt in (1, 2):
        (record,) = receive(sqs)
        assert record["attributes"]["ApproximateReceiveCount"] == str(attempt)
        answer = invoke("WebhookFunction", {"Records": [record]})
        assert answer == {"batchItemFailures": [{"itemIdentifier": record["messageId"]}]}
        assert receive(sqs) == []  # the function delayed its retry
        make_visible(sqs, [record])
    (record,) = receive(sqs)
    assert invoke("WebhookFunction", {"Records": [record]}) == {"batchItemFailures": []}
    sqs.delete_message(QueueUrl=url, ReceiptHandle=record["receiptHandle"])
    assert [r.id for r in receiver.accepted] == [msg["id"]]


def test_retry_delays_grow_and_span_about_a_day():
    delays = [delivery.retry_delay(n) for n in range(1, delivery.MAX_ATTEMPTS + 1)]
    assert delays == sorted(delays) and delays[0] == 60 and max(delays) <= 12 * 3600
    last_attempt_h = sum(delays[: delivery.MAX_ATTEMPTS - 1]) / 3600
    assert 18 <= last_attempt_h <= 24 and 20 <= (last_attempt_h + delays[-1] / 3600) <= 30


def test_no_delivery_to_a_refused_address(aws, receiver, monkeypatch):
    monkeypatch.setenv("PRECIS_WEBHOOKS_ALLOW_HTTP_LOCAL", "false")  # loopback refused, as in a deployment
    get_settings.cache_clear()
    enqueue(aws["sqs"], receiver.endpoint_id)
    (record,) = receive(aws["sqs"])
    assert invoke("WebhookFunction", {"Records": [record]})["batchItemFailures"] != []
    assert receiver.requests == 0
