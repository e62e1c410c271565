"""Scopes: named sets of sessions whose explicit conclusions form a view of their own (docs/design.md, "Derived
memory", Scopes)."""

from __future__ import annotations

import pytest

from tests.handlers import call, invoke
from tests.stream import message_records, stream_record

W = "/v3/workspaces/ws1"


def post(session: str, *texts: str) -> None:
    reply = call(
        "POST", f"{W}/sessions/{session}/messages", {"messages": [{"peer_id": "alice", "content": t} for t in texts]}
    )
    assert reply.status == 201, reply.body


def derive(aws, session: str) -> None:
    assert invoke("DeriveFunction", {"Records": message_records(aws["dynamodb"], session_id=session)}) == {
        "batchItemFailures": []
    }


def backfill(aws, scope: str, session: str) -> dict:
    """Deliver the membership's stream record to the deriver, as the table's stream does."""
    item = aws["dynamodb"].get_item(
        TableName="precis-local", Key={"PK": {"S": f"WS#ws1#SCOPE#{scope}"}, "SK": {"S": f"SESSION#{session}"}}
    )["Item"]
    return invoke("DeriveFunction", {"Records": [stream_record(item)]})


def representation(scope: str | None = None, **body) -> str:
    reply = call("POST", f"{W}/peers/alice/representation", {**({"scope": scope} if scope else {}), **body})
    assert reply.status == 200, reply.body
    return reply.body["representation"]


@pytest.fixture
def ws(aws):
    assert call("POST", "/v3/workspaces", {"id": "ws1"}).status == 201
    post("s1", "I moved to Lisbon last spring.")
    post("s2", "I have a dog named Rover.")
    derive(aws, "s1")
    derive(aws, "s2")
    return aws


def test_scopes_are_created_once_got_and_listed(ws):
    first = call("POST", f"{W}/scopes", {"id": "therapy", "metadata": {"kind": "care"}})
    assert first.status == 201 and first.body["id"] == "therapy" and first.body["metadata"] == {"kind": "care"}
    assert call("POST", f"{W}/scopes", {"id": "therapy"}).status == 200
    assert call("GET", f"{W}/scopes/therapy").body["metadata"] == {"kind": "care"}
    assert call("POST", f"{W}/scopes", {"id": "work"}).status == 201
    listed = call("POST", f"{W}/scopes/list").body
    assert [s["id"] for s in listed["items"]] == ["therapy", "work"] and listed["total"] == 2


def test_a_session_added_later_is_backfilled_exactly_once_and_read_through_the_scope(ws):
    assert call("POST", f"{W}/scopes", {"id": "therapy"}).status == 201
    assert call("POST", f"{W}/scopes/therapy/sessions", {"session_ids": ["s1"]}).status == 204
    assert call("GET", f"{W}/scopes/therapy/status").body["backfill_status"]["s1"]["state"] == "pending"
    assert backfill(ws, "therapy", "s1") == {"batchItemFailures": []}
    assert backfill(ws, "therapy", "s1") == {"batchItemFailures": []}  # redelivered: nothing copied twice
    job = call("GET", f"{W}/scopes/therapy/status").body["backfill_status"]["s1"]
    assert (job["state"], job["docs_copied"]) == ("completed", 1)
    seen = representation("therapy")
    assert "alice moved to Lisbon last spring" in seen and "Rover" not in seen
    assert "Rover" in representation()  # alice's own view keeps everything
    context = call("GET", f"{W}/sessions/s1/context", peer_target="alice", scope="therapy").body
    assert "Lisbon" in context["peer_representation"] and "Rover" not in context["peer_representation"]
    listed = call("POST", f"{W}/scopes/therapy/sessions/list").body
    assert [s["id"] for s in listed["items"]] == ["s1"]
    # what the session says later reaches the scope through the deriver
    post("s1", "My sister is Ana.")
    derive(ws, "s1")
    assert "alice's sister is Ana" in representation("therapy")
    listed = call("POST", f"{W}/conclusions/list", {"filters": {"observer_id": "scope.therapy"}}).body
    assert all(c["times_derived"] == 1 for c in listed["items"]) and listed["total"] == 2


def test_removing_a_session_removes_its_copies_only(ws):
    assert call("POST", f"{W}/scopes", {"id": "therapy"}).status == 201
    assert call("POST", f"{W}/scopes/therapy/sessions", {"session_ids": ["s1", "s2"]}).status == 204
    backfill(ws, "therapy", "s1")
    backfill(ws, "therapy", "s2")
    assert "Lisbon" in representation("therapy") and "Rover" in representation("therapy")
    assert call("DELETE", f"{W}/scopes/therapy/sessions/s1").status == 204
    seen = representation("therapy")
    assert "Lisbon" not in seen and "Rover" in seen
    assert "Lisbon" in representation()
    assert set(call("GET", f"{W}/scopes/therapy/status").body["backfill_status"]) == {"s2"}


def test_a_session_created_with_scopes_joins_them(ws):
    assert call("POST", f"{W}/scopes", {"id": "work"}).status == 201
    assert call("POST", f"{W}/sessions", {"id": "s3", "scopes": ["work"]}).status == 201
    assert set(call("GET", f"{W}/scopes/work/status").body["backfill_status"]) == {"s3"}
    post("s3", "I work as a nurse.")
    derive(ws, "s3")
    assert "alice works as a nurse" in representation("work")


@pytest.mark.parametrize(
    "method, path, body, query, status",
    [
        ("POST", f"{W}/scopes", {"id": "scope.x"}, {}, 422),
        ("POST", f"{W}/scopes", {"id": "x" * 507}, {}, 422),
        ("POST", f"{W}/scopes", {"id": "ok", "surprise": 1}, {}, 422),
        ("POST", "/v3/workspaces/nope/scopes", {"id": "ok"}, {}, 404),
        ("GET", f"{W}/scopes/nope", None, {}, 404),
        ("GET", f"{W}/scopes/bad%20id", None, {}, 422),
        ("POST", f"{W}/scopes/list", {"filters": {"id": "x"}}, {}, 422),
        ("POST", f"{W}/scopes/therapy/sessions", {"session_ids": []}, {}, 422),
        ("POST", f"{W}/scopes/therapy/sessions", {"session_ids": ["s1"] * 101}, {}, 422),
        ("POST", f"{W}/scopes/therapy/sessions", {"session_ids": ["nope"]}, {}, 404),
        ("POST", f"{W}/scopes/nope/sessions", {"session_ids": ["s1"]}, {}, 404),
        ("DELETE", f"{W}/scopes/therapy/sessions/s2", None, {}, 404),
        ("POST", f"{W}/scopes/nope/sessions/list", None, {}, 404),
        ("GET", f"{W}/scopes/nope/status", None, {}, 404),
        ("POST", f"{W}/sessions", {"id": "s9", "scopes": ["nope"]}, {}, 404),
        ("POST", f"{W}/peers/alice/representation", {"scope": "therapy", "session_id": "s1"}, {}, 422),
        ("POST", f"{W}/peers/alice/representation", {"scope": "nope"}, {}, 404),
        ("GET", f"{W}/sessions/s1/context", None, {"peer_target": "alice", "scope": "nope"}, 404),
        (
            "GET",
            f"{W}/sessions/s1/context",
            None,
            {"peer_target": "alice", "scope": "therapy", "peer_perspective": "alice"},
            422,
        ),
    ],
)
def test_scope_bad_inputs(ws, method, path, body, query, status):
    assert call("POST", f"{W}/scopes", {"id": "therapy"}).status == 201
    before = ws["dynamodb"].scan(TableName="precis-local")["Count"]
    reply = call(method, path, body, **query)
    assert reply.status == status, reply.body
    assert reply.body["detail"]
    assert ws["dynamodb"].scan(TableName="precis-local")["Count"] == before
