"""Every recorded event in events/ runs through its handler (found from the template) with the status it documents."""

from __future__ import annotations

import base64
import json

import pytest

from local.template import ROOT, template
from tests.handlers import call, invoke

EVENTS = ROOT / "events"

# file: (function logical id, expected statusCode, or "batch" for a stream batch with no failures)
EXPECTED = {
    "context_health.json": ("ContextFunction", 200),
    "context_get.json": ("ContextFunction", 200),
    "context_get_default.json": ("ContextFunction", 200),
    "context_no_summary.json": ("ContextFunction", 200),
    "context_bad_tokens.json": ("ContextFunction", 422),
    "context_summaries.json": ("ContextFunction", 200),
    "context_list_messages.json": ("ContextFunction", 200),
    "ingest_create_workspace.json": ("IngestFunction", 201),
    "ingest_create_session.json": ("IngestFunction", 201),
    "ingest_create_messages.json": ("IngestFunction", 201),
    "ingest_create_messages_bad.json": ("IngestFunction", 422),
    "summarize_stream_batch.json": ("SummarizeFunction", "batch"),
    "summarize_session_deleted.json": ("SummarizeFunction", "batch"),
    "derive_stream_batch.json": ("DeriveFunction", "batch"),
    "derive_flush.json": ("DeriveFunction", "flush"),
    "chat_peer.json": ("ChatFunction", 200),
    "ingest_schedule_dream.json": ("IngestFunction", 204),
    "ingest_upload_file.json": ("IngestFunction", 201),
    "mcp_tools_call.json": ("McpFunction", 200),
}

# What must exist before each event for it to mean what it says: nothing, the workspace, or the session with
# messages (a create event against existing data would answer 200, not 201).
NEEDS = {
    "ingest_create_workspace.json": "nothing",
    "ingest_create_session.json": "workspace",
    "ingest_create_messages.json": "workspace",
    "ingest_create_messages_bad.json": "session",
    "summarize_stream_batch.json": "stream",
    "summarize_session_deleted.json": "stream",
    "derive_stream_batch.json": "stream",
    "derive_flush.json": "workspace",
    "chat_peer.json": "session",
    "ingest_schedule_dream.json": "session",
    "ingest_upload_file.json": "session",
}

# Response shapes by route: keys every 2xx body of that route carries.
SHAPES = {
    "GET /health": {"status"},
    "POST /v3/workspaces/{workspace_id}/peers/{peer_id}/chat": {"content", "evidence"},
    "GET /v3/workspaces/{workspace_id}/sessions/{session_id}/context": {
        "id",
        "messages",
        "summary",
        "peer_representation",
        "peer_card",
        "messages_skipped",
        "token_count",
    },
    "GET /v3/workspaces/{workspace_id}/sessions/{session_id}/summaries": {"id", "short_summary", "long_summary"},
    "POST /v3/workspaces/{workspace_id}/sessions/{session_id}/messages/list": {
        "items",
        "total",
        "page",
        "size",
        "pages",
    },
    "POST /v3/workspaces": {"id", "metadata", "configuration", "created_at"},
    "POST /mcp": {"jsonrpc", "id", "result"},
    "POST /v3/workspaces/{workspace_id}/sessions": {
        "id",
        "is_active",
        "workspace_id",
        "metadata",
        "configuration",
        "created_at",
    },
}
MESSAGE_KEYS = {"id", "content", "peer_id", "session_id", "workspace_id", "metadata", "created_at", "token_count"}


def load(name: str) -> dict:
    return json.loads((EVENTS / name).read_text())


def function_for(event: dict, name: str | None = None) -> str:
    """The template function an event reaches: a stream consumer for a Records batch (the summarizer, or the one its
    file is named after), the deriver for its schedule's event, else by route key."""
    if "Records" in event:
        return "DeriveFunction" if (name or "").startswith("derive_") else template().stream_function().logical_id
    if event.get("precis") == "flush":
        return "DeriveFunction"
    (route,) = [r for r in template().routes if f"{r.method} {r.path}" == event["routeKey"]]
    return route.function


def seed(aws, needs: str, event: dict) -> None:
    if needs == "nothing":
        return
    assert call("POST", "/v3/workspaces", {"id": "demo"}).status == 201
    if needs == "workspace":
        return
    assert call("POST", "/v3/workspaces/demo/sessions", {"id": "s1", "peers": {"alice": {}}}).status == 201
    if needs == "stream":
        # The table holds exactly the items the stream records describe.
        for record in event["Records"]:
            aws["dynamodb"].put_item(TableName=template().table_name, Item=record["dynamodb"]["NewImage"])
        return
    batch = {
        "messages": [
            {"content": text, "peer_id": peer}
            for text, peer in [
                ("What's the weather like in Lisbon tomorrow?", "alice"),
                ("Sunny, 24°C, light wind from the north-west.", "assistant"),
                ("Great, thanks!", "alice"),
            ]
        ]
    }
    assert call("POST", "/v3/workspaces/demo/sessions/s1/messages", batch).status == 201


def test_every_event_file_is_listed():
    assert sorted(p.name for p in EVENTS.glob("*.json")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_event_is_well_formed_for_its_source(name):
    event = load(name)
    logical_id, _ = EXPECTED[name]
    assert function_for(event, name) == logical_id
    if "precis" in event:
        assert event == {"precis": "flush"}  # the DeriveFunction's Flush schedule Input, exactly
        assert template().functions[logical_id].schedules[0].input == event
        return
    if "Records" in event:
        for record in event["Records"]:
            assert record["eventSource"] == "aws:dynamodb"
            assert record["eventSourceARN"].startswith(
                f"arn:aws:dynamodb:us-east-1:123456789012:table/{template().table_name}/stream/"
            )
            image = record["dynamodb"]["NewImage"]
            if record["eventName"] == "INSERT":  # a message written
                assert image["kind"] == {"S": "message"} and image["PK"] == {"S": "WS#demo#S#s1"}
            else:  # a session marked deleted: what the purge is asked for
                assert record["eventName"] == "MODIFY" and image["kind"] == {"S": "session"}
                assert image["PK"] == {"S": "WS#demo"} and {"deleted_at", "incarnation"} <= set(image)
            assert record["dynamodb"]["Keys"] == {"PK": image["PK"], "SK": image["SK"]}
            assert all(len(value) == 1 and next(iter(value)) in ("S", "N", "BOOL") for value in image.values())
        return
    assert event["version"] == "2.0" and event["requestContext"]["stage"] == "$default"
    assert event["routeKey"] == event["requestContext"]["routeKey"]
    method, route = event["routeKey"].split(" ", 1)
    assert event["requestContext"]["http"]["method"] == method
    assert event["rawPath"] == event["requestContext"]["http"]["path"]
    assert all(key == key.lower() for key in event["headers"]), "API Gateway lowercases header names"
    parts = route.strip("/").split("/")
    path_params = {p[1:-1]: v for p, v in zip(parts, event["rawPath"].strip("/").split("/")) if p.startswith("{")}
    assert (event.get("pathParameters") or {}) == path_params
    assert path_params.get("workspace_id", "demo") == "demo" and path_params.get("session_id", "s1") == "s1"
    if "body" in event and event.get("isBase64Encoded"):  # a multipart upload, as API Gateway hands it over
        assert event["headers"]["content-type"].startswith("multipart/form-data; boundary=")
        assert int(event["headers"]["content-length"]) == len(base64.b64decode(event["body"]))
    elif "body" in event:
        assert int(event["headers"]["content-length"]) == len(event["body"].encode())
        json.loads(event["body"])


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_event_runs_through_its_handler_with_the_documented_status(aws, name):
    event = load(name)
    logical_id, expected = EXPECTED[name]
    seed(aws, NEEDS.get(name, "session"), event)
    result = invoke(function_for(event, name), event)
    if expected == "flush":
        assert result == {"flushed": 0, "failed": 0}
        return
    if expected == "batch":
        assert result == {"batchItemFailures": []}
        if name == "summarize_session_deleted.json":  # the purge ran: only the tombstone's fence is left
            left = aws["dynamodb"].query(
                TableName=template().table_name,
                KeyConditionExpression="PK = :p",
                ExpressionAttributeValues={":p": {"S": "WS#demo#S#s1"}},
            )["Items"]
            assert left == []  # its member is gone (the seed wrote no fence)
            assert (
                "purged_at"
                in aws["dynamodb"].get_item(
                    TableName=template().table_name, Key={"PK": {"S": "WS#demo"}, "SK": {"S": "SESSION#s1"}}
                )["Item"]
            )
        if name == "derive_stream_batch.json":  # what alice said became her conclusions
            listed = call("POST", "/v3/workspaces/demo/conclusions/list", {"filters": {"observer_id": "alice"}})
            assert sorted(c["content"] for c in listed.body["items"]) == [
                "alice moved to Lisbon last spring",
                "alice's sister is Ana",
            ]
        return
    assert result["statusCode"] == expected, result
    if expected == 204:  # accepted, nothing to say (schedule_dream)
        assert not result.get("body")
        return
    assert result["headers"]["Content-Type"].startswith("application/json")
    body = json.loads(result["body"])
    if expected >= 400:
        assert body["detail"], "an error says what is wrong"
        return
    if event.get("isBase64Encoded"):  # an uploaded file: its paragraphs, in order, as alice's messages
        assert [m["peer_id"] for m in body] == ["alice"] * len(body) and body
        assert "Lisbon" in "".join(m["content"] for m in body)
        return
    if isinstance(body, list):  # a message batch answers with the stored messages, in order
        assert [m["content"] for m in body] == [m["content"] for m in json.loads(event["body"])["messages"]]
        assert all(set(m) >= MESSAGE_KEYS for m in body)
        return
    assert set(body) >= SHAPES[event["routeKey"]]
    if event["routeKey"] == "POST /mcp":  # a tool's answer: the session's context, as the tool's text
        result = body["result"]
        assert result["isError"] is False
        context = json.loads(result["content"][0]["text"])
        assert [m["content"] for m in context["messages"]][-1] == "Great, thanks!"
        return
    for message in body.get("messages") or body.get("items") or []:
        assert set(message) >= MESSAGE_KEYS
