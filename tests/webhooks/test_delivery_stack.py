"""Webhook deliveries through the local stack (`make dev`): the webhook queue with its template's redrive, the poller's
batches (each twice, the stack's `replay` chaos), the webhook function and its retries, to real HTTP receivers on this
machine that check every delivery by the Standard Webhooks rules with their own code. SQS's delays run at 1/10,000 of
their length (PRECIS_LOCAL_SQS_DELAY_SCALE), so a day of retries takes seconds; the function asks for the real ones."""

from __future__ import annotations

import json
import time

import pytest

from local.moto_backend import client
from precis.webhooks import delivery
from tests.stack import request, wait_for
from tests.webhooks.receiver import Receiver

STACK_ENV = {"PRECIS_LOCAL_SQS_DELAY_SCALE": "0.0001"}
QUEUE, DLQ = "precis-webhook-local", "precis-webhook-dlq-local"
JSON = {"Content-Type": "application/json"}


def api(stack, method: str, path: str, body: dict | None = None):
    status, _, raw = request(stack.port, method, path, JSON, json.dumps(body).encode() if body is not None else None)
    return status, (json.loads(raw) if raw else None)


@pytest.fixture(scope="module")
def sqs(stack):
    endpoint = json.loads(stack.dev_json.read_text())["moto_endpoint"]
    return client("sqs", endpoint)


@pytest.fixture
def hook(stack, request):
    """A workspace of its own and a receiver registered in it."""
    ws = request.node.name.removeprefix("test_")[:40].replace("_", "-")
    assert api(stack, "POST", "/v3/workspaces", {"id": ws})[0] in (200, 201)
    rx = Receiver()
    status, made = api(stack, "POST", f"/v3/workspaces/{ws}/webhooks", {"url": rx.url})
    assert status == 201, made
    rx.secrets = [made["secret"]]
    yield ws, made["id"], rx
    rx.close()


def send(sqs, ws: str, endpoint_id: str, event_id: str) -> dict:
    msg = delivery.message(ws, endpoint_id, "test.event", {"workspace_id": ws}, event_id=event_id, now=time.time())
    sqs.send_message(QueueUrl=sqs.get_queue_url(QueueName=QUEUE)["QueueUrl"], MessageBody=json.dumps(msg))
    return msg


def deliveries(stack, ws: str, endpoint_id: str) -> list[dict]:
    status, page = api(stack, "GET", f"/v3/workspaces/{ws}/webhooks/{endpoint_id}/deliveries")
    assert status == 200, page
    return page["items"]


def test_a_receiver_that_fails_then_recovers_gets_every_delivery_once_it_recovers(stack, sqs, hook):
    ws, endpoint_id, rx = hook
    # The secret is rotated: the receiver knows only the one it was given, which keeps signing for the overlap.
    assert api(stack, "POST", f"/v3/workspaces/{ws}/webhooks/{endpoint_id}/rotate")[0] == 200
    rx.statuses = [503] * 7 + [204]  # down for 7 requests (3 or 4 attempts, each sent twice by the chaos)
    sent = [send(sqs, ws, endpoint_id, f"evt{i}") for i in range(3)]
    wait_for(lambda: {r.id for r in rx.accepted} == {m["id"] for m in sent}, 60)
    assert rx.refused == []  # every request carried a valid signature under the old secret, fresh timestamps
    logged = wait_for(lambda: [d for d in deliveries(stack, ws, endpoint_id) if d["status"] == "delivered"] or None)
    assert {d["id"] for d in logged} <= {m["id"] for m in sent}
    duplicates = len(rx.accepted) - len(sent)
    print(f"recovering receiver: {len(sent)} deliveries, {rx.requests} requests, {duplicates} duplicates accepted")
    assert all(r.body["type"] == "test.event" and r.body["data"] == {"workspace_id": ws} for r in rx.accepted)


def test_a_receiver_that_never_recovers_ends_in_the_dead_letter_queue_and_its_endpoint_disabled(stack, sqs, hook):
    ws, endpoint_id, rx = hook
    rx.statuses = [500]
    msg = send(sqs, ws, endpoint_id, "evt-doomed")
    dlq = sqs.get_queue_url(QueueName=DLQ)["QueueUrl"]

    def dead_lettered():
        got = sqs.receive_message(QueueUrl=dlq, MaxNumberOfMessages=10, VisibilityTimeout=0).get("Messages", [])
        return [m for m in got if json.loads(m["Body"])["id"] == msg["id"]]

    wait_for(dead_lettered, 90)
    assert rx.accepted == [] and rx.refused == []
    assert delivery.MAX_ATTEMPTS <= rx.requests <= 2 * delivery.MAX_ATTEMPTS  # each attempt once or twice (replay)
    (logged,) = deliveries(stack, ws, endpoint_id)
    assert (logged["status"], logged["attempts"], logged["last_http_status"]) == ("failed", 12, 500)
    (view,) = api(stack, "GET", f"/v3/workspaces/{ws}/webhooks")[1]["items"]
    assert view["disabled"] is True and msg["id"] in view["disabled_reason"]
    # A delivery to it now is dropped without a request; registering it again re-enables it.
    posts = rx.requests
    dropped = send(sqs, ws, endpoint_id, "evt-after")
    wait_for(lambda: any(d["id"] == dropped["id"] for d in deliveries(stack, ws, endpoint_id)), 30)
    assert rx.requests == posts
    rx.statuses = [204]
    assert api(stack, "POST", f"/v3/workspaces/{ws}/webhooks", {"url": rx.url})[1]["disabled"] is False
    revived = send(sqs, ws, endpoint_id, "evt-revived")
    wait_for(lambda: [r for r in rx.accepted if r.id == revived["id"]], 30)
