"""A session's lifecycle under replays and races: delete, purge and create again, each bound to an incarnation."""

from __future__ import annotations

import math

import pytest

from precis.errors import Conflict, NotFound
from precis.settings import get_settings
from precis.store import keys
from precis.store.db import from_item, get_db
from precis.store.messages import NewMessage, append_messages
from precis.store.purge import purge_session
from tests.handlers import call, invoke
from tests.stream import stream_record

BUCKET = "precis-local"
W = "/v3/workspaces/ws1"
S = f"{W}/sessions/s1"


@pytest.fixture
def ws(aws, monkeypatch):
    monkeypatch.setenv("PRECIS_PURGE_GRACE_S", "0")
    monkeypatch.setenv("PRECIS_INLINE_BODY_MAX_BYTES", "100")
    get_db.cache_clear()
    assert call("POST", "/v3/workspaces", {"id": "ws1"}).status == 201
    return aws


def post(*contents, session="s1", peer="alice"):
    reply = call(
        "POST", f"{W}/sessions/{session}/messages", {"messages": [{"content": c, "peer_id": peer} for c in contents]}
    )
    assert reply.status == 201, reply.body
    return reply.body


def session_item(aws, session="s1") -> dict | None:
    return from_item(
        aws["dynamodb"]
        .get_item(TableName="precis-local", Key={"PK": {"S": "WS#ws1"}, "SK": {"S": f"SESSION#{session}"}})
        .get("Item")
    )


def partition(aws, pk="WS#ws1#S#s1") -> list[dict]:
    out = aws["dynamodb"].query(
        TableName="precis-local", KeyConditionExpression="PK = :p", ExpressionAttributeValues={":p": {"S": pk}}
    )
    return [from_item(i) for i in out["Items"]]


def objects(aws, prefix: str) -> list[dict]:
    out = aws["s3"].list_object_versions(Bucket=BUCKET, Prefix=prefix)
    return [*out.get("Versions", []), *out.get("DeleteMarkers", [])]


def delete_record(aws, session="s1") -> dict:
    """The stream record the delete of `session` produces (its MODIFY, as Lambda delivers it)."""
    raw = aws["dynamodb"].get_item(
        TableName="precis-local", Key={"PK": {"S": "WS#ws1"}, "SK": {"S": f"SESSION#{session}"}}
    )
    return stream_record(raw["Item"], "MODIFY")


def run_stream(*records) -> dict:
    return invoke("SummarizeFunction", {"Records": list(records)})


def test_a_replayed_purge_never_touches_the_session_created_again(ws):
    post("old one", "old two")
    assert call("DELETE", S).status == 202
    record = delete_record(ws)
    assert run_stream(record) == {"batchItemFailures": []}
    assert call("POST", f"{W}/sessions", {"id": "s1"}).status == 201
    fresh = post("new one", "new two")
    # The same MODIFY delivered again (a partial-batch retry, a bisect after a timeout): a no-op, not a failure.
    assert run_stream(record) == {"batchItemFailures": []}
    listed = call("POST", f"{S}/messages/list").body
    assert [m["content"] for m in listed["items"]] == ["new one", "new two"]
    assert [m["seq"] for m in fresh] == [1, 2]


def test_a_purge_removes_everything_of_its_incarnation_and_leaves_a_tombstone(ws):
    call("POST", f"{W}/sessions", {"id": "s1", "peers": {"alice": {}, "bob": {}}})
    post("a body long enough to live in S3 " * 10, "short")
    incarnation = session_item(ws)["incarnation"]
    ws["s3"].put_object(Bucket=BUCKET, Key=keys.audit_object("ws1", "s1", "rolling", 2, "n", incarnation), Body=b"{}")
    ws["dynamodb"].put_item(
        TableName="precis-local", Item={"PK": {"S": "WS#ws1#S#s1"}, "SK": {"S": "SUMMARY#x"}, "kind": {"S": "summary"}}
    )
    assert objects(ws, keys.body_prefix("ws1", "s1", incarnation))
    assert call("DELETE", S).status == 202
    assert run_stream(delete_record(ws)) == {"batchItemFailures": []}

    left = partition(ws)
    assert [i["kind"] for i in left] == ["fence"] and left[0]["seq"] == 3
    assert partition(ws, "WS#ws1#P#alice") == [] and partition(ws, "WS#ws1#P#bob") == []
    assert objects(ws, keys.body_prefix("ws1", "s1", incarnation)) == []  # every version, not a delete marker
    assert objects(ws, keys.audit_prefix("ws1", "s1", incarnation)) == []
    tomb = session_item(ws)
    assert tomb["incarnation"] == incarnation and tomb["purged_at"] and tomb["deleted_at"]
    assert call("POST", f"{S}/messages/list").status == 404


def test_the_id_can_be_created_again_only_after_its_purge_and_the_grace(ws, monkeypatch):
    post("hello")
    call("DELETE", S)
    reply = call("POST", f"{W}/sessions", {"id": "s1"})
    assert reply.status == 409 and "being deleted" in reply.body["detail"]  # not purged yet
    run_stream(delete_record(ws))
    monkeypatch.setenv("PRECIS_PURGE_GRACE_S", "600")
    get_settings.cache_clear()
    reply = call("POST", f"{W}/sessions", {"id": "s1"})
    assert reply.status == 409 and "can be created again in" in reply.body["detail"]
    monkeypatch.setenv("PRECIS_PURGE_GRACE_S", "0")
    get_settings.cache_clear()
    old = session_item(ws)["incarnation"]
    assert call("POST", f"{W}/sessions", {"id": "s1"}).status == 201
    assert session_item(ws)["incarnation"] != old
    assert partition(ws) == []  # the fence went with the tombstone
    assert [m["seq"] for m in post("again")] == [1]


def test_an_append_that_read_the_tail_before_the_delete_cannot_commit_after_it(ws):
    post("first")
    db = get_db()

    def delete_meanwhile(first_seq: int) -> None:
        if first_seq == 2:
            call("DELETE", S)  # lands between this append's tail read and its transaction

    with pytest.raises(NotFound):
        append_messages(
            db,
            "ws1",
            "s1",
            [NewMessage("late", "alice", 1), NewMessage("x" * 500, "alice", 100)],
            inline_max_bytes=100,
            on_attempt=delete_meanwhile,
        )
    assert [i.get("kind") for i in partition(ws) if i["SK"].startswith("MSG#")] == ["message", "fence"]
    incarnation = session_item(ws)["incarnation"]
    assert objects(ws, keys.body_prefix("ws1", "s1", incarnation)) == []  # the refused batch's body is gone too


def test_a_write_that_slipped_past_the_purge_is_purged_before_the_id_is_reused(ws):
    post("hello")
    call("DELETE", S)
    run_stream(delete_record(ws))
    # A straggler below the fence (it read the tail before the delete, its keys were purged before it landed).
    ws["dynamodb"].put_item(
        TableName="precis-local",
        Item={"PK": {"S": "WS#ws1#S#s1"}, "SK": {"S": keys.message_sk(1)}, "kind": {"S": "message"}},
    )
    reply = call("POST", f"{W}/sessions", {"id": "s1"})
    assert reply.status == 409
    assert "purged_at" not in session_item(ws) and session_item(ws)["purge_rounds"] == 1  # a new purge record
    run_stream(delete_record(ws))
    assert call("POST", f"{W}/sessions", {"id": "s1"}).status == 201
    assert partition(ws) == []


def test_a_purge_out_of_time_stops_between_pages_and_asks_for_another_round(ws):
    post(*[f"m{i}" for i in range(30)])
    call("DELETE", S)
    incarnation = session_item(ws)["incarnation"]
    db = get_db()
    clock = iter([math.inf])  # time for the search index's purge (it looks once), then none between pages
    first = purge_session(db, "ws1", "s1", incarnation, time_left=lambda: next(clock, 1.0), page_size=10)
    # 30 messages, the member item and the messages' 30 search items (written with the post): not all of them.
    assert not first.done and 0 < first.deleted_items < 61
    assert session_item(ws)["purge_rounds"] == 1  # the touch: its MODIFY record continues the purge
    second = purge_session(db, "ws1", "s1", incarnation, page_size=10)
    assert second.done and [i["kind"] for i in partition(ws)] == ["fence"]


def test_deleting_a_workspace_with_sessions_is_409_and_changes_nothing(ws):
    post("hello")
    before = session_item(ws), call("POST", "/v3/workspaces/list").body
    reply = call("DELETE", W)
    assert reply.status == 409 and "still has 1 session(s) (s1)" in reply.body["detail"]
    assert (session_item(ws), call("POST", "/v3/workspaces/list").body) == before
    assert call("POST", f"{W}/sessions", {"id": "s2"}).status == 201  # not left half-deleted


def test_nothing_can_be_created_in_a_workspace_while_its_delete_runs(ws):
    ws["dynamodb"].update_item(
        TableName="precis-local",
        Key={"PK": {"S": "WS#ws1"}, "SK": {"S": "WS"}},
        UpdateExpression="SET deleting_until = :t",
        ExpressionAttributeValues={":t": {"N": "9999999999"}},
    )
    for path, body in ((f"{W}/sessions", {"id": "s9"}), (f"{W}/peers", {"id": "p9"})):
        reply = call("POST", path, body)
        assert reply.status == 409 and "being deleted" in reply.body["detail"]
    reply = call("POST", f"{W}/sessions/s9/messages", {"messages": [{"content": "x", "peer_id": "p9"}]})
    assert reply.status == 409
    assert [i["SK"] for i in partition(ws, "WS#ws1")] == ["WS"]


def test_deleting_an_empty_workspace_removes_its_peers_and_purged_sessions(ws):
    from precis.store import keys, text_index

    post("hello")
    assert text_index.merge(get_db(), "ws1", ["s1"], min_docs=1) == 1  # (the search index's manifest and a segment)
    (segment,) = [s["id"] for s in text_index.read_manifest(get_db(), "ws1").segments]
    call("DELETE", S)
    run_stream(delete_record(ws))
    assert text_index.read_manifest(get_db(), "ws1").segments == ()  # the purge took its only message's segment
    assert partition(ws, keys.text_segment_pk("ws1", segment)) == []
    index = [keys.text_manifest("ws1")["PK"]]
    assert all(partition(ws, pk) for pk in index)  # the manifest stays until the workspace goes
    for item in (
        {"PK": {"S": "WS#ws1#TERMS"}, "SK": {"S": "MESSAGES"}, "ndocs": {"N": "1"}},  # earlier releases' statistics
        {"PK": {"S": keys.text_counters_pk("ws1")}, "SK": {"S": "#"}, "n": {"N": "0"}},
    ):
        get_db().client.put_item(TableName="precis-local", Item=item)
    assert call("DELETE", W).status == 202
    assert partition(ws, "WS#ws1") == [] and partition(ws) == [] and partition(ws, "WS#ws1#TERMS") == []
    assert [pk for pk in [*index, keys.text_counters_pk("ws1")] if partition(ws, pk)] == []
    assert call("POST", "/v3/workspaces/list").body["total"] == 0
    assert call("POST", f"{W}/peers/list").status == 404


def test_members_cannot_be_added_to_a_session_deleted_meanwhile(ws):
    from precis.store.resources import add_members

    post("hello")
    incarnation = session_item(ws)["incarnation"]
    call("DELETE", S)
    with pytest.raises(NotFound):
        add_members(get_db(), "ws1", "s1", {"bob": {}}, incarnation=incarnation)
    assert not [i for i in partition(ws) if i["SK"] == "PEER#bob"]
    assert partition(ws, "WS#ws1#P#bob") == []


def test_a_workspace_change_that_breaks_a_sessions_settings_is_422(ws):
    call("POST", f"{W}/sessions", {"id": "s1", "configuration": {"summary": {"messages_per_short_summary": 50}}})
    reply = call("PUT", W, {"configuration": {"summary": {"messages_per_long_summary": 40}}})
    assert reply.status == 422 and "session 's1'" in reply.body["detail"]
    assert call("POST", "/v3/workspaces/list").body["items"][0]["configuration"] == {}


def test_create_session_answers_conflict_while_purge_runs_not_500(ws):
    post("hello")
    call("DELETE", S)
    with pytest.raises(Conflict):
        from precis.store.resources import create_session_item

        create_session_item(get_db(), "ws1", "s1")


def test_a_purge_that_ends_after_its_workspace_was_deleted_leaves_no_tombstone(ws):
    post("hello")
    call("DELETE", S)
    record = delete_record(ws)
    assert call("DELETE", W).status == 202  # the session was deleted, not yet purged: it does not block
    assert run_stream(record) == {"batchItemFailures": []}
    assert partition(ws, "WS#ws1") == [] and partition(ws) == []


def test_a_purge_asked_again_after_it_finished_does_nothing(ws):
    post("hello")
    call("DELETE", S)
    record = delete_record(ws)
    run_stream(record)
    incarnation = session_item(ws)["incarnation"]
    again = purge_session(get_db(), "ws1", "s1", incarnation)
    assert (again.done, again.deleted_items, again.deleted_objects) == (True, 0, 0)
    assert session_item(ws)["purged_at"]  # not rewritten: no new stream record


def test_a_purge_that_s3_refuses_fails_its_record_and_is_retried_not_forgotten(ws):
    post("a body long enough to live in S3 " * 10)
    call("DELETE", S)
    record = delete_record(ws)
    db = get_db()

    def refuse(parsed, **_):
        parsed["Errors"] = [{"Key": "bodies/x", "Code": "AccessDenied", "Message": "Access Denied"}]

    db.s3.meta.events.register("after-call.s3.DeleteObjects", refuse)
    try:
        failed = run_stream(record)
    finally:
        db.s3.meta.events.unregister("after-call.s3.DeleteObjects", refuse)
    assert failed["batchItemFailures"] == [{"itemIdentifier": record["dynamodb"]["SequenceNumber"]}]
    assert "purged_at" not in session_item(ws)  # not done: the id cannot be created again yet
    assert call("POST", f"{W}/sessions", {"id": "s1"}).status == 409
    assert run_stream(record) == {"batchItemFailures": []}  # the stream's retry
    assert session_item(ws)["purged_at"]


def test_a_session_with_peers_that_exist_writes_only_the_session_and_its_members(ws):
    """An importer names the same peers in every session: they are read, not written again (a conditional put that
    fails still costs DynamoDB write units), and a peer that is new is created."""
    assert call("POST", f"{W}/sessions", {"id": "s1", "peers": {"alice": {}, "bob": {}}}).status == 201
    written: list[tuple[str, str]] = []

    def record(params, **_):
        for action in params.get("TransactItems", []):
            for kind, op in action.items():
                if kind != "ConditionCheck":
                    key = op.get("Item") or op.get("Key")
                    written.append((key["PK"]["S"], key["SK"]["S"]))

    client = get_db().client
    client.meta.events.register("provide-client-params.dynamodb.TransactWriteItems", record)
    try:
        reply = call("POST", f"{W}/sessions", {"id": "s2", "peers": {"alice": {}, "bob": {}, "carol": {}}})
    finally:
        client.meta.events.unregister("provide-client-params.dynamodb.TransactWriteItems", record)
    assert reply.status == 201, reply.body
    peers_written = [sk for pk, sk in written if pk == "WS#ws1" and sk.startswith("PEER#")]
    assert peers_written == ["PEER#carol"]
    members = call("GET", f"{W}/sessions/s2/peers")
    assert sorted(p["id"] for p in members.body["items"]) == ["alice", "bob", "carol"]
