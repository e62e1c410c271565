"""The delivery log (store/webhook_deliveries.py) and one attempt's outcome (`delivery.deliver`, `.on_records`)
against a real receiver on this machine that checks signatures with its own code (tests/webhooks/receiver.py)."""

from __future__ import annotations

import json
import socket
import time

import pytest

from precis.store import webhook_deliveries
from precis.store.db import get_db
from precis.webhooks import delivery, targets
from tests.handlers import call
from tests.webhooks.receiver import Receiver

W = "/v3/workspaces/ws1"
QUEUE = "precis-webhook-local"


@pytest.fixture
def rx(aws, monkeypatch):
    monkeypatch.setenv("PRECIS_WEBHOOKS_ALLOW_HTTP_LOCAL", "true")
    assert call("POST", "/v3/workspaces", {"id": "ws1"}).status == 201
    receiver = Receiver()
    made = call("POST", f"{W}/webhooks", {"url": receiver.url})
    assert made.status == 201, made.body
    receiver.secrets = [made.body["secret"]]
    receiver.endpoint_id = made.body["id"]  # type: ignore[attr-defined]
    yield receiver
    receiver.close()


def msg(endpoint_id: str, event_id: str = "evt1", now: float | None = None) -> dict:
    now = time.time() if now is None else now
    return delivery.message("ws1", endpoint_id, "test.event", {"workspace_id": "ws1"}, event_id=event_id, now=now)


def log_of(endpoint_id: str) -> list[dict]:
    return webhook_deliveries.deliveries(get_db(), "ws1", endpoint_id, limit=100)


# ---------------------------------------------------------------- the log itself


def test_an_older_attempt_changes_nothing_and_the_item_expires(aws):
    db, created = get_db(), "2026-01-01T00:00:00.000Z"
    kw = {"event_type": "test.event", "now": 1000}
    webhook_deliveries.record(db, "ws1", "e1", "d1", created, status="failed", attempt=3, error="HTTP 500", **kw)
    webhook_deliveries.record(db, "ws1", "e1", "d1", created, status="delivered", attempt=2, http_status=200, **kw)
    (item,) = webhook_deliveries.deliveries(db, "ws1", "e1", limit=10)
    assert (item["status"], item["attempts"], item["last_error"]) == ("failed", 3, "HTTP 500")
    assert "http_status" not in item
    assert item["expires_at"] == 1000 + webhook_deliveries.DELIVERY_TTL_S == 1000 + 3 * 24 * 3600
    # The same attempt again (SQS's at-least-once, a replayed batch) or a later one is recorded.
    webhook_deliveries.record(db, "ws1", "e1", "d1", created, status="delivered", attempt=4, http_status=204, **kw)
    (item,) = webhook_deliveries.deliveries(db, "ws1", "e1", limit=10)
    assert (item["status"], item["attempts"], item["http_status"]) == ("delivered", 4, 204)
    assert "last_error" not in item  # a success clears the last error
    assert webhook_deliveries.deliveries(db, "ws1", "e2", limit=10) == []  # another endpoint's log


def test_the_log_is_newest_first_and_bounded_by_limit(aws):
    db = get_db()
    for i in range(5):
        webhook_deliveries.record(
            db, "ws1", "e1", f"d{i}", f"2026-01-01T00:00:0{i}.000Z", event_type="t", status="delivered", attempt=1,
            now=1000 + i,
        )  # fmt: skip
    assert [d["id"] for d in webhook_deliveries.deliveries(db, "ws1", "e1", limit=3)] == ["d4", "d3", "d2"]


# ---------------------------------------------------------------- one attempt


def test_a_2xx_is_delivered_signed_and_logged(rx):
    m = msg(rx.endpoint_id)
    assert delivery.deliver(get_db(), m, attempt=1, allow_http_local=True) == delivery.Outcome("delivered")
    assert [r.id for r in rx.accepted] == [m["id"]]
    assert rx.accepted[0].body == {"type": "test.event", "data": {"workspace_id": "ws1"}, "timestamp": m["created"]}
    (logged,) = log_of(rx.endpoint_id)
    assert logged["id"] == m["id"] and logged["event_type"] == "test.event"
    assert (logged["status"], logged["attempts"], logged["http_status"]) == ("delivered", 1, 204)
    assert "last_error" not in logged


def test_a_5xx_fails_with_a_bounded_excerpt_of_the_answer(rx):
    rx.statuses, rx.answer_body = [503], b"overloaded " + b"x" * 5000
    m = msg(rx.endpoint_id)
    outcome = delivery.deliver(get_db(), m, attempt=2, allow_http_local=True)
    assert outcome.status == "failed" and outcome.error and outcome.error.startswith("HTTP 503: overloaded xxx")
    (logged,) = log_of(rx.endpoint_id)
    assert (logged["status"], logged["attempts"], logged["http_status"]) == ("failed", 2, 503)
    assert logged["last_error"] == outcome.error and len(logged["last_error"]) <= targets.EXCERPT_BYTES


def test_a_refused_target_is_never_posted_to(rx):
    # The host resolves to this machine and to a private address (a rebinding name): refused before any connection.
    def resolver(host, port, *_):
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port)) for a in ("127.0.0.1", "10.0.0.7")]

    m = msg(rx.endpoint_id)
    outcome = delivery.deliver(get_db(), m, attempt=1, allow_http_local=True, resolver=resolver)
    assert outcome.status == "failed" and "10.0.0.7 is a private address" in (outcome.error or "")
    assert rx.requests == 0
    (logged,) = log_of(rx.endpoint_id)
    assert logged["status"] == "failed" and "http_status" not in logged and "private" in logged["last_error"]


def test_an_endpoint_gone_is_a_drop(rx):
    assert call("DELETE", f"{W}/webhooks/{rx.endpoint_id}").status == 204
    assert delivery.deliver(get_db(), msg(rx.endpoint_id), attempt=1, allow_http_local=True).status == "dropped"
    assert rx.requests == 0 and log_of(rx.endpoint_id) == []


# ---------------------------------------------------------------- a batch from the queue


def records(aws, *messages: dict) -> list[dict]:
    from local.sqs_poller import lambda_record

    sqs = aws["sqs"]
    url = sqs.get_queue_url(QueueName=QUEUE)["QueueUrl"]
    for m in messages:
        sqs.send_message(QueueUrl=url, MessageBody=m if isinstance(m, str) else json.dumps(m))
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"])["Messages"]
    return [lambda_record(g, "arn:aws:sqs:us-east-1:123456789012:" + QUEUE) for g in got]


def test_on_records_delays_each_failure_by_its_attempt_and_goes_on(rx, aws):
    sqs = aws["sqs"]
    url = sqs.get_queue_url(QueueName=QUEUE)["QueueUrl"]
    rx.statuses = [500, 204]  # the first delivery fails, the second arrives
    batch = records(aws, msg(rx.endpoint_id, "a"), "not json", msg(rx.endpoint_id, "b"))
    delays: list[dict] = []

    def seen(params, **_):
        delays.append(params)

    sqs.meta.events.register("provide-client-params.sqs.ChangeMessageVisibility", seen)
    try:
        failed = delivery.on_records(get_db(), sqs, url, batch, allow_http_local=True)
    finally:
        sqs.meta.events.unregister("provide-client-params.sqs.ChangeMessageVisibility", seen)
    first = next(r for r in batch if r["body"].startswith("{"))  # the first attempted: the receiver's 500
    assert failed == [first["messageId"]]  # the unreadable one is dropped, not retried
    assert [(d["ReceiptHandle"], d["VisibilityTimeout"]) for d in delays] == [(first["receiptHandle"], 60)]
    assert len(rx.accepted) == 1


# ---------------------------------------------------------------- the route


def test_the_route_pages_the_log_newest_first(rx):
    rx.statuses = [500, 204, 204]
    made = [msg(rx.endpoint_id, f"evt{i}", now=1_700_000_000 + i) for i in range(3)]
    for m in made:
        delivery.deliver(get_db(), m, attempt=1, now=time.time(), allow_http_local=True)
    first = call("GET", f"{W}/webhooks/{rx.endpoint_id}/deliveries", size=2)
    assert first.status == 200, first.body
    assert (first.body["total"], first.body["pages"], first.body["size"]) == (3, 2, 2)
    assert [d["id"] for d in first.body["items"]] == [made[2]["id"], made[1]["id"]]
    newest = first.body["items"][0]
    assert set(newest) == {
        "id", "event_type", "status", "attempts", "last_http_status", "last_error", "created_at", "last_attempt_at"
    }  # fmt: skip
    assert (newest["status"], newest["attempts"], newest["last_http_status"], newest["last_error"]) == (
        "delivered", 1, 204, None
    )  # fmt: skip
    (oldest,) = call("GET", f"{W}/webhooks/{rx.endpoint_id}/deliveries", size=2, page=2).body["items"]
    assert oldest["id"] == made[0]["id"] and oldest["last_http_status"] == 500
    assert oldest["last_error"] == "HTTP 500: no"
    assert oldest["created_at"] == made[0]["created"] and oldest["last_attempt_at"].endswith("Z")
    assert call("GET", f"{W}/webhooks/{rx.endpoint_id}/deliveries", size=101).status == 422
    assert call("GET", f"{W}/webhooks/{'x' * 21}/deliveries").status == 404
    assert call("POST", "/v3/workspaces", {"id": "ws2"}).status == 201
    assert call("GET", f"/v3/workspaces/ws2/webhooks/{rx.endpoint_id}/deliveries").status == 404


def test_a_page_of_the_log_is_two_queries_whatever_the_log_holds(rx):
    from tests.handlers import dynamodb_requests

    db = get_db()
    for i in range(30):
        webhook_deliveries.record(
            db, "ws1", rx.endpoint_id, f"d{i:02}", f"2026-01-01T00:00:{i:02}.000Z", event_type="t", status="delivered",
            attempt=1, now=1000,
        )  # fmt: skip
    with dynamodb_requests() as seen:
        answer = call("GET", f"{W}/webhooks/{rx.endpoint_id}/deliveries", size=5, page=2)
    assert [d["id"] for d in answer.body["items"]] == ["d24", "d23", "d22", "d21", "d20"]
    assert [op for op, _ in seen] == ["Query", "Query"]  # the endpoint, then the log's newest LOG_WINDOW
    assert seen[1][1]["Limit"] == 500


# ---------------------------------------------------------------- an endpoint that keeps failing


def test_the_last_attempts_failure_disables_the_endpoint_until_it_is_registered_again(rx):
    rx.statuses = [500]
    m = msg(rx.endpoint_id)
    for attempt in range(1, delivery.MAX_ATTEMPTS):  # 11 failures: still enabled
        assert delivery.deliver(get_db(), m, attempt=attempt, allow_http_local=True).status == "failed"
    assert call("GET", f"{W}/webhooks").body["items"][0]["disabled"] is False
    assert delivery.deliver(get_db(), m, attempt=delivery.MAX_ATTEMPTS, allow_http_local=True).status == "failed"
    (view,) = call("GET", f"{W}/webhooks").body["items"]
    assert view["disabled"] is True and view["disabled_at"].endswith("Z")
    assert m["id"] in view["disabled_reason"] and "12 times" in view["disabled_reason"]
    assert "HTTP 500" in view["disabled_reason"]
    # Another delivery to it is dropped without a request, and its log says why.
    rx.statuses = [204]
    later = msg(rx.endpoint_id, "evt2")
    posts = rx.requests
    outcome = delivery.deliver(get_db(), later, attempt=1, allow_http_local=True)
    assert outcome.status == "dropped" and rx.requests == posts
    logged = {d["id"]: d for d in log_of(rx.endpoint_id)}
    assert logged[later["id"]]["status"] == "dropped" and "disabled" in logged[later["id"]]["last_error"]
    # Registering the URL again re-enables it: the next delivery arrives.
    again = call("POST", f"{W}/webhooks", {"url": rx.url})
    assert again.status == 200 and again.body["disabled"] is False and again.body["disabled_reason"] is None
    assert delivery.deliver(get_db(), msg(rx.endpoint_id, "evt3"), attempt=1, allow_http_local=True).status == (
        "delivered"
    )


def test_the_last_attempt_delivered_twice_still_fails_and_so_goes_on_to_the_dead_letter_queue(rx):
    rx.statuses = [500]
    m = msg(rx.endpoint_id)
    assert delivery.deliver(get_db(), m, attempt=delivery.MAX_ATTEMPTS, allow_http_local=True).status == "failed"
    posts = rx.requests
    # SQS's at-least-once: the same attempt again. A drop would delete its message; it stays a failure, unsent.
    assert delivery.deliver(get_db(), m, attempt=delivery.MAX_ATTEMPTS, allow_http_local=True).status == "failed"
    assert rx.requests == posts
    assert delivery.deliver(get_db(), msg(rx.endpoint_id, "other"), attempt=3, allow_http_local=True).status == (
        "dropped"
    )


# ---------------------------------------------------------------- what a Standard Webhooks receiver accepts


def test_a_rotated_secret_keeps_verifying_for_the_overlap_then_only_the_new_one(rx):
    from precis.webhooks import endpoints

    old = rx.secrets[0]
    now = int(time.time())
    rotated = endpoints.rotate(get_db(), "ws1", rx.endpoint_id, now=now)
    clock = [float(now)]
    rx.clock = lambda: clock[0]
    for secrets, at, expected in [
        ([old], now + 60, "delivered"),  # a receiver not yet told of the rotation
        ([rotated["secret"]], now + 60, "delivered"),
        ([old], rotated["previous_secret_expires_at"] + 1, "failed"),  # the overlap is over
        ([rotated["secret"]], rotated["previous_secret_expires_at"] + 1, "delivered"),
    ]:
        rx.secrets, clock[0] = secrets, at
        m = msg(rx.endpoint_id, f"evt-{at}-{secrets[0][-6:]}", now=at)
        assert delivery.deliver(get_db(), m, attempt=1, now=at, allow_http_local=True).status == expected
    assert rx.refused == ["no signature matches"]


def test_a_delivery_outside_the_timestamp_tolerance_is_refused_by_the_receiver(rx):
    now = time.time()
    stale = msg(rx.endpoint_id, "stale", now=now - 301)
    outcome = delivery.deliver(get_db(), stale, attempt=1, now=now - 301, allow_http_local=True)  # signed 301 s ago
    assert outcome.status == "failed" and outcome.error and outcome.error.startswith("HTTP 401")
    assert rx.refused == ["timestamp outside the tolerance"]
    assert delivery.deliver(get_db(), msg(rx.endpoint_id, "fresh"), attempt=1, allow_http_local=True).status == (
        "delivered"
    )
