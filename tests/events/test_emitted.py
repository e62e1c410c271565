"""Events emitted by the handlers under their template roles, read off the webhook queue (moto): each once at its
moment, ids only, to the workspace's own subscribed endpoints, and the same ids when a stream record is replayed."""

from __future__ import annotations

import json

import pytest

from precis.settings import get_settings
from tests.handlers import call, invoke, post_messages
from tests.stream import message_records, stream_record

QUEUE = "precis-webhook-local"


def hook(ws: str, url: str) -> str:
    created = call("POST", f"/v3/workspaces/{ws}/webhooks", {"url": url})
    assert created.status in (200, 201), created.body
    return created.body["id"]


def drain(sqs) -> list[dict]:
    """Every delivery message on the webhook queue, taken off it."""
    url = sqs.get_queue_url(QueueName=QUEUE)["QueueUrl"]
    found = []
    while True:
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
        if not got:
            return found
        for m in got:
            found.append(json.loads(m["Body"]))
            sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])


def derive(aws, ws: str = "ws1", session: str = "s1", first: int = 1) -> None:
    records = message_records(aws["dynamodb"], ws=ws, session_id=session, first=first)
    assert invoke("DeriveFunction", {"Records": records}) == {"batchItemFailures": []}


def of_type(found: list[dict], kind: str) -> list[dict]:
    return [m for m in found if m["type"] == kind]


@pytest.fixture
def ws(aws, monkeypatch):
    monkeypatch.setenv("PRECIS_WEBHOOK_QUEUE_URL", aws["sqs"].get_queue_url(QueueName=QUEUE)["QueueUrl"])
    for name in ("ws1", "ws2"):
        assert call("POST", "/v3/workspaces", {"id": name}).status == 201
    return aws


def test_queue_empty_fires_once_when_a_sender_is_caught_up_and_carries_ids_only(ws):
    endpoint = hook("ws1", "https://hooks.example.com/a")
    hook("ws2", "https://hooks.example.com/other")  # another workspace's endpoint: it gets none of ws1's
    post_messages("s1", ("alice", "I moved to Lisbon last spring."), ("alice", "My sister lives in Porto."))
    derive(ws)
    found = drain(ws["sqs"])
    (empty,) = of_type(found, "queue.empty")
    assert empty["data"] == {
        "workspace_id": "ws1",
        "queue_type": "representation",
        "session_id": "s1",
        "observer": None,
        "observed": "alice",
    }
    assert {m["endpoint_id"] for m in found} == {endpoint} and {m["workspace"] for m in found} == {"ws1"}
    created = of_type(found, "conclusions.created")
    assert created and all(m["data"]["observed"] == "alice" and m["data"]["conclusion_ids"] for m in created)
    assert "Lisbon" not in json.dumps(found) and "Porto" not in json.dumps(found)  # ids, never text
    # The queue status shows the unit empty now, and did not before the derivation stored its job.
    status = call("GET", "/v3/workspaces/ws1/queue/status?session_id=s1&sender_id=alice").body
    assert status["pending_work_units"] == status["in_progress_work_units"] == 0


def test_a_replayed_record_publishes_the_same_delivery_ids_and_a_new_message_a_new_emptying(ws):
    hook("ws1", "https://hooks.example.com/a")
    post_messages("s1", ("alice", "I moved to Lisbon last spring."))
    derive(ws)
    first = {m["id"] for m in of_type(drain(ws["sqs"]), "queue.empty")}
    derive(ws)  # the same record again: the unit is as empty as it was, announced under the same delivery id
    again = {m["id"] for m in of_type(drain(ws["sqs"]), "queue.empty")}
    assert len(first) == 1 and again == first
    post_messages("s1", ("alice", "I work as a nurse."))
    derive(ws, first=2)
    later = {m["id"] for m in of_type(drain(ws["sqs"]), "queue.empty")}
    assert len(later) == 1 and not later & first  # it emptied once more: a new event


def test_a_disabled_or_unsubscribed_endpoint_gets_nothing(ws):
    live = hook("ws1", "https://hooks.example.com/live")
    disabled = hook("ws1", "https://hooks.example.com/disabled")
    narrow = hook("ws1", "https://hooks.example.com/narrow")
    table = ws["dynamodb"]
    items = table.query(
        TableName="precis-local",
        KeyConditionExpression="PK = :p AND begins_with(SK, :h)",
        ExpressionAttributeValues={":p": {"S": "WS#ws1"}, ":h": {"S": "HOOK#"}},
    )["Items"]
    for item in items:  # as helper A's routes write them: disabled_at, event_types
        if item["id"]["S"] == disabled:
            update, values = "SET disabled_at = :d", {":d": {"S": "2026-01-01T00:00:00Z"}}
        elif item["id"]["S"] == narrow:
            update, values = "SET event_types = :t", {":t": {"L": [{"S": "summary.created"}]}}
        else:
            continue
        table.update_item(
            TableName="precis-local",
            Key={"PK": item["PK"], "SK": item["SK"]},
            UpdateExpression=update,
            ExpressionAttributeValues=values,
        )
    post_messages("s1", ("alice", "I moved to Lisbon last spring."))
    derive(ws)
    found = drain(ws["sqs"])
    assert found and {m["endpoint_id"] for m in found} == {live}


def summarize(aws, first: int = 1) -> None:
    records = message_records(aws["dynamodb"], first=first)
    assert invoke("SummarizeFunction", {"Records": records}) == {"batchItemFailures": []}


def test_summary_created_and_the_summary_queue_empty_fire_once_when_no_summary_is_left_due(ws):
    hook("ws1", "https://hooks.example.com/a")
    # Honcho's cadence: a short summary every 20 messages, so 19 leave none due and the 20th makes one due.
    posted = post_messages("s1", *[("alice", f"I like the colour number {i}.") for i in range(1, 20)])
    summarize(ws)
    assert drain(ws["sqs"]) == []  # nothing was due: nothing written, nothing emptied
    posted += post_messages("s1", ("bob", "Noted."))
    summarize(ws, first=20)
    found = drain(ws["sqs"])
    (created,) = of_type(found, "summary.created")
    assert created["data"] == {
        "workspace_id": "ws1",
        "session_id": "s1",
        "summary_type": "honcho_chat_summary_short",  # as GET …/summaries names it
        "message_id": posted[-1]["id"],
    }
    (empty,) = of_type(found, "queue.empty")
    assert empty["data"] == {
        "workspace_id": "ws1",
        "queue_type": "summary",
        "session_id": "s1",
        "observer": None,
        "observed": None,
    }
    assert "colour" not in json.dumps(found)
    summarize(ws, first=20)  # the record replayed: the summary is stored, nothing more to announce
    assert of_type(drain(ws["sqs"]), "summary.created") == []


def test_the_test_route_sends_honchos_test_event_to_every_enabled_endpoint_each_time(ws):
    first, second = hook("ws1", "https://hooks.example.com/a"), hook("ws1", "https://hooks.example.com/b")
    hook("ws2", "https://hooks.example.com/other")
    reply = call("GET", "/v3/workspaces/ws1/webhooks/test")
    assert (reply.status, reply.body) == (200, None)  # Honcho's answer: null
    found = drain(ws["sqs"])
    assert sorted(m["endpoint_id"] for m in found) == sorted([first, second])
    assert {m["type"] for m in found} == {"test.event"} and {json.dumps(m["data"]) for m in found} == {
        '{"workspace_id": "ws1"}'
    }
    call("GET", "/v3/workspaces/ws1/webhooks/test")
    again = drain(ws["sqs"])
    assert len(again) == 2 and not {m["id"] for m in again} & {m["id"] for m in found}  # a new event each time
    assert call("GET", "/v3/workspaces/nope/webhooks/test").status == 404


def test_a_test_event_that_cannot_be_queued_is_a_503(ws, monkeypatch):
    hook("ws1", "https://hooks.example.com/a")
    monkeypatch.setenv("PRECIS_WEBHOOK_QUEUE_URL", "https://sqs.us-east-1.amazonaws.com/123456789012/no-such-queue")
    get_settings.cache_clear()  # (a new cold start reads the environment)
    reply = call("GET", "/v3/workspaces/ws1/webhooks/test")
    assert reply.status == 503 and "retry" in reply.body["detail"]


def test_stated_and_deleted_conclusions_and_a_deleted_session_are_announced(ws):
    hook("ws1", "https://hooks.example.com/a")
    post_messages("s1", ("alice", "hello"))
    drain(ws["sqs"])
    stated = call(
        "POST",
        "/v3/workspaces/ws1/conclusions",
        {"conclusions": [{"content": "Alice likes tea.", "observer_id": "alice", "observed_id": "alice"}]},
    )
    assert stated.status == 201, stated.body
    (created,) = drain(ws["sqs"])
    assert created["type"] == "conclusions.created"
    assert created["data"]["conclusion_ids"] == [stated.body[0]["id"]] and "tea" not in json.dumps(created)
    assert call("DELETE", f"/v3/workspaces/ws1/conclusions/{stated.body[0]['id']}").status == 204
    (deleted,) = drain(ws["sqs"])
    assert deleted["type"] == "conclusions.deleted"
    assert deleted["data"] == {
        "workspace_id": "ws1",
        "session_id": None,
        "observer": "alice",
        "observed": "alice",
        "conclusion_ids": [stated.body[0]["id"]],
    }
    assert call("DELETE", "/v3/workspaces/ws1/sessions/s1").status == 202
    (gone,) = drain(ws["sqs"])
    assert (gone["type"], gone["data"]) == ("session.deleted", {"workspace_id": "ws1", "session_id": "s1"})


def test_with_a_bus_every_event_reaches_a_rule_on_it_and_an_sqs_target(ws, monkeypatch):
    """EventBusName set: the deriver (under its role, granted PutEvents on that bus) puts its events on the bus, and a
    rule on the bus routes them to an SQS queue, whether or not the workspace has webhook endpoints."""
    import boto3

    from local import iam

    monkeypatch.setenv("PRECIS_EVENT_BUS_NAME", "precis-events")
    events = iam.exempt(boto3.client("events", region_name="us-east-1"))
    events.create_event_bus(Name="precis-events")
    target = ws["sqs"].create_queue(QueueName="bus-target")["QueueUrl"]
    target_arn = ws["sqs"].get_queue_attributes(QueueUrl=target, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    pattern = json.dumps({"source": ["precis"], "detail-type": ["queue.empty"]})
    events.put_rule(Name="memory-ready", EventBusName="precis-events", EventPattern=pattern)
    events.put_targets(Rule="memory-ready", EventBusName="precis-events", Targets=[{"Id": "q", "Arn": target_arn}])
    get_settings.cache_clear()
    post_messages("s1", ("alice", "I moved to Lisbon last spring."))
    derive(ws)
    got = ws["sqs"].receive_message(QueueUrl=target, MaxNumberOfMessages=10)["Messages"]
    (event,) = [json.loads(m["Body"]) for m in got]
    assert (event["source"], event["detail-type"]) == ("precis", "queue.empty")
    detail = event["detail"]
    assert detail["type"] == "queue.empty" and detail["workspace_id"] == "ws1" and detail["id"].startswith("evt_")
    assert detail["data"]["observed"] == "alice" and detail["timestamp"].endswith("Z")
    assert drain(ws["sqs"]) == []  # no endpoint: no delivery, the bus all the same


class _Refused:
    """An HTTP answer as botocore hands it on: SQS unavailable."""

    status_code, headers, content, text = 503, {}, b"", ""


def test_a_failed_publish_fails_nor_repeats_the_derivation_it_announces(ws):
    """SQS refuses every send (played at botocore's seam, on the function's own client): the derivation is stored and
    reported done, so the stream does not run it again; its events are lost to the endpoints (logged, counted)."""
    from precis.store.db import get_queue_client

    hook("ws1", "https://hooks.example.com/a")
    post_messages("s1", ("alice", "I moved to Lisbon last spring."))
    client = get_queue_client()
    sent: list[dict] = []

    def refuse(params, **_):
        sent.append(params)
        error = {"Error": {"Code": "ServiceUnavailable", "Message": "down"}}
        return _Refused(), {**error, "ResponseMetadata": {"HTTPStatusCode": 503, "HTTPHeaders": {}}}

    client.meta.events.register("before-call.sqs.SendMessageBatch", refuse)
    try:
        derive(ws)  # (asserts no batch-item failure)
    finally:
        client.meta.events.unregister("before-call.sqs.SendMessageBatch", refuse)
    assert sent and drain(ws["sqs"]) == []
    status = call("GET", "/v3/workspaces/ws1/queue/status?session_id=s1").body
    assert status["pending_work_units"] == 0 and status["completed_work_units"] == 1
    listed = call("POST", "/v3/workspaces/ws1/conclusions/list", {"filters": {"observer_id": "alice"}}).body
    assert listed["items"]


def test_a_dream_announces_its_completion_once(ws):
    from precis.store import keys
    from precis.store.db import from_item, to_item
    from tests.stream import stream_record

    hook("ws1", "https://hooks.example.com/a")
    post_messages("s1", ("alice", "I moved to Lisbon last spring."), ("alice", "My sister is Ana."))
    derive(ws)
    drain(ws["sqs"])
    scheduled = call("POST", "/v3/workspaces/ws1/schedule_dream", {"observer": "alice", "observed": "alice"})
    assert scheduled.status == 204
    assert drain(ws["sqs"]) == []  # scheduled is not done

    def woken() -> None:  # the stream's delivery of the dream item
        key = to_item(keys.dream("ws1", "alice", "alice"))
        item = from_item(ws["dynamodb"].get_item(TableName="precis-local", Key=key, ConsistentRead=True)["Item"])
        assert invoke("DeriveFunction", {"Records": [stream_record(to_item(item), "MODIFY")]}) == {
            "batchItemFailures": []
        }

    woken()
    (done,) = of_type(drain(ws["sqs"]), "dream.completed")
    assert done["data"] == {
        "workspace_id": "ws1",
        "observer": "alice",
        "observed": "alice",
        "deductive": done["data"]["deductive"],
    }
    assert isinstance(done["data"]["deductive"], int)
    woken()  # the record again: the dream is over, nothing more to announce
    assert drain(ws["sqs"]) == []


def _tombstone(aws) -> dict | None:
    """The deleted message's tombstone while its cascade runs (None once done)."""
    found = aws["dynamodb"].query(
        TableName="precis-local",
        KeyConditionExpression="PK = :p AND begins_with(SK, :m)",
        FilterExpression="kind = :f AND attribute_exists(running)",
        ExpressionAttributeValues={":p": {"S": "WS#ws1#S#s1"}, ":m": {"S": "MSG#"}, ":f": {"S": "forgotten"}},
        ConsistentRead=True,
    )["Items"]
    return found[0] if found else None


def _cascade(aws, *, limit: int = 20) -> list[dict]:
    """Deliver the tombstone's records to the summarizer until its cascade is done; each answer."""
    answers = []
    for _ in range(limit):
        tombstone = _tombstone(aws)
        if tombstone is None:
            return answers
        answers.append(invoke("SummarizeFunction", {"Records": [stream_record(tombstone, "MODIFY")]}))
    return answers


def test_a_message_deletes_cascade_announces_each_collections_removed_conclusions_once(ws):
    from precis.store.db import get_db

    peers = {"alice": {}, "bob": {"observe_others": True}}
    assert call("POST", "/v3/workspaces/ws1/sessions", {"id": "s1", "peers": peers}).status == 201
    hook("ws1", "https://hooks.example.com/a")
    posted = post_messages("s1", ("alice", "I moved to Lisbon last spring."), ("alice", "My sister is Ana."))
    derive(ws)
    drawn = {
        (c["observer_id"], c["observed_id"]): c["id"]
        for c in call("POST", "/v3/workspaces/ws1/conclusions/list?size=100").body["items"]
        if "Lisbon" in c["content"]
    }
    assert set(drawn) == {("alice", "alice"), ("bob", "alice")}
    drain(ws["sqs"])
    assert call("DELETE", f"/v3/workspaces/ws1/sessions/s1/messages/{posted[0]['id']}").status == 204
    assert drain(ws["sqs"]) == []  # the request removes nothing: the cascade does
    inserted = stream_record(_tombstone(ws), "INSERT")

    # The cascade fails removing the second collection's conclusions: the first's removal is announced, and the
    # record delivered again announces the second's, never the first's again.
    client, removals = get_db().client, []

    def fail_second_removal(params, **_):
        if any("#C#" in a["Delete"]["Key"]["PK"]["S"] for a in params["TransactItems"] if "Delete" in a):
            removals.append(params)
            if len(removals) == 2:
                raise ConnectionError("the network went away mid-cascade")

    client.meta.events.register("provide-client-params.dynamodb.TransactWriteItems", fail_second_removal)
    try:
        (first,) = _cascade(ws, limit=1)
    finally:
        client.meta.events.unregister("provide-client-params.dynamodb.TransactWriteItems", fail_second_removal)
    assert first["batchItemFailures"], first
    announced = of_type(drain(ws["sqs"]), "conclusions.deleted")
    assert len(announced) == 1
    assert all(answer == {"batchItemFailures": []} for answer in _cascade(ws))
    announced += of_type(drain(ws["sqs"]), "conclusions.deleted")
    assert sorted(
        (m["data"]["observer"], m["data"]["observed"], tuple(m["data"]["conclusion_ids"])) for m in announced
    ) == [(observer, observed, (drawn[observer, observed],)) for observer, observed in sorted(drawn)]
    assert all(m["data"]["session_id"] == "s1" for m in announced) and "Lisbon" not in json.dumps(announced)
    assert len({m["id"] for m in announced}) == 2
    # Done: the tombstone's first record delivered again finds nothing left to remove and announces nothing.
    assert invoke("SummarizeFunction", {"Records": [inserted]}) == {"batchItemFailures": []}
    assert of_type(drain(ws["sqs"]), "conclusions.deleted") == []
