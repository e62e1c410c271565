"""Session clones: complete for every read the moment they exist (copy-on-write over the parent's messages), copied
into their own partition in the background, and safe when the parent is deleted first."""

from __future__ import annotations

import pytest

from local import moto_vectors
from tests.handlers import call, invoke
from tests.stream import stream_record

W = "/v3/workspaces/ws1"


def post(session: str, *messages: tuple[str, str], **extra) -> list[dict]:
    reply = call(
        "POST",
        f"{W}/sessions/{session}/messages",
        {"messages": [{"peer_id": peer, "content": text, **extra} for peer, text in messages]},
    )
    assert reply.status == 201, reply.body
    return reply.body


def item(aws, pk: str, sk: str) -> dict | None:
    from precis.store.db import from_item

    found = (
        aws["dynamodb"]
        .get_item(TableName="precis-local", Key={"PK": {"S": pk}, "SK": {"S": sk}}, ConsistentRead=True)
        .get("Item")
    )
    return from_item(found) if found else None


def session_item(aws, session: str) -> dict:
    return item(aws, "WS#ws1", f"SESSION#{session}")


def run_stream(aws, session: str, event: str = "MODIFY") -> dict:
    """The stream's record of the session item, to the summarizer (a clone's copy, or a purge)."""
    from precis.store.db import to_item

    return invoke("SummarizeFunction", {"Records": [stream_record(to_item(session_item(aws, session)), event)]})


def messages(session: str, **query) -> list[dict]:
    reply = call("POST", f"{W}/sessions/{session}/messages/list", None, size=100, **query)
    assert reply.status == 200, reply.body
    return reply.body["items"]


def own_messages(aws, session: str) -> list[int]:
    out = aws["dynamodb"].query(
        TableName="precis-local",
        KeyConditionExpression="PK = :p AND begins_with(SK, :m)",
        ExpressionAttributeValues={":p": {"S": f"WS#ws1#S#{session}"}, ":m": {"S": "MSG#"}},
    )
    return [int(i["seq"]["N"]) for i in out["Items"] if i["kind"]["S"] == "message"]  # not a delete's fence


@pytest.fixture
def ws(aws):
    assert call("POST", "/v3/workspaces", {"id": "ws1"}).status == 201
    assert (
        call(
            "POST",
            f"{W}/sessions",
            {"id": "s1", "metadata": {"topic": "moving"}, "peers": {"alice": {"observe_others": True}, "bob": {}}},
        ).status
        == 201
    )
    post(
        "s1",
        ("alice", "I moved to Lisbon last spring."),
        ("bob", "How do you like it?"),
        ("alice", "The light is wonderful."),
        ("bob", "And the food?"),
        ("alice", "Pastel de nata every day."),
    )
    return aws


def test_a_clone_answers_at_once_with_the_messages_up_to_the_cut_its_peers_and_settings(ws):
    cut = messages("s1")[2]["id"]
    reply = call("POST", f"{W}/sessions/s1/clone", None, message_id=cut)
    assert reply.status == 201, reply.body
    clone = reply.body["id"]
    assert clone != "s1" and reply.body["metadata"] == {"topic": "moving"}
    assert own_messages(ws, clone) == [3]  # only its tail was written: the rest is read through
    assert [m["content"] for m in messages(clone)] == [m["content"] for m in messages("s1")[:3]]
    assert [m["id"] for m in messages(clone)] == [m["id"] for m in messages("s1")[:3]]
    assert {m["session_id"] for m in messages(clone)} == {clone}
    assert call("GET", f"{W}/sessions/{clone}/messages/{cut}").body["content"] == "The light is wonderful."
    assert call("GET", f"{W}/sessions/{clone}/messages/{messages('s1')[3]['id']}").status == 404
    assert [m["content"] for m in messages(clone, reverse=True)][:1] == ["The light is wonderful."]
    peers = call("GET", f"{W}/sessions/{clone}/peers").body["items"]
    assert sorted(p["id"] for p in peers) == ["alice", "bob"]
    assert call("GET", f"{W}/sessions/{clone}/peers/alice/config").body["observe_others"] is True
    context = call("GET", f"{W}/sessions/{clone}/context").body
    assert [m["content"] for m in context["messages"]] == [m["content"] for m in messages("s1")[:3]]
    filtered = call("POST", f"{W}/sessions/{clone}/messages/list", {"filters": {"peer_id": "alice"}}).body["items"]
    assert [m["content"] for m in filtered] == ["I moved to Lisbon last spring.", "The light is wonderful."]


def test_a_clone_goes_on_from_its_cut_and_the_parent_is_untouched(ws):
    clone = call("POST", f"{W}/sessions/s1/clone", None, message_id=messages("s1")[1]["id"]).body["id"]
    added = post(clone, ("alice", "Actually, I am moving to Porto."))
    from precis.store.messages import seq_of

    assert seq_of(added[0]["id"]) == 3  # the clone goes on from its cut
    assert [m["content"] for m in messages(clone)] == [
        "I moved to Lisbon last spring.",
        "How do you like it?",
        "Actually, I am moving to Porto.",
    ]
    assert len(messages("s1")) == 5
    context = call("GET", f"{W}/sessions/{clone}/context").body
    assert context["messages"][-1]["content"] == "Actually, I am moving to Porto."


def test_the_background_copy_makes_the_clone_independent_and_keeps_edits(ws):
    clone = call("POST", f"{W}/sessions/s1/clone").body["id"]
    first = messages(clone)[0]["id"]
    edited = call("PUT", f"{W}/sessions/{clone}/messages/{first}", {"metadata": {"starred": True}})
    assert edited.status == 200 and edited.body["metadata"] == {"starred": True}
    assert messages("s1")[0]["metadata"] == {}  # the parent's message is not the clone's
    from precis.store.db import to_item

    created = stream_record(to_item(session_item(ws, clone)), "INSERT")
    assert invoke("SummarizeFunction", {"Records": [created]}) == {"batchItemFailures": []}
    assert sorted(own_messages(ws, clone)) == [1, 2, 3, 4, 5]
    assert "base_session" not in session_item(ws, clone)
    assert messages(clone)[0]["metadata"] == {"starred": True}  # the copy never replaced the edited one
    # The same record redelivered, twice at once: nothing left to copy, nothing written twice.
    assert invoke("SummarizeFunction", {"Records": [created, created]}) == {"batchItemFailures": []}
    assert sorted(own_messages(ws, clone)) == [1, 2, 3, 4, 5]


def test_deleting_the_parent_first_never_breaks_the_clone(ws):
    clone = call("POST", f"{W}/sessions/s1/clone").body["id"]
    assert call("DELETE", f"{W}/sessions/s1").status == 202
    assert run_stream(ws, "s1") == {"batchItemFailures": []}  # the purge waits for the clone's copy
    assert "purged_at" not in session_item(ws, "s1")
    assert [m["content"] for m in messages(clone)][-1] == "Pastel de nata every day."
    assert run_stream(ws, clone, "INSERT") == {"batchItemFailures": []}  # the copy; its end asks for the purge
    assert run_stream(ws, "s1") == {"batchItemFailures": []}
    assert "purged_at" in session_item(ws, "s1") and own_messages(ws, "s1") == []
    assert len(messages(clone)) == 5
    assert call("GET", f"{W}/sessions/{clone}/context").body["messages"][0]["content"] == (
        "I moved to Lisbon last spring."
    )


def test_a_clone_searches_what_it_inherited(ws):
    from tests.stream import message_records

    assert invoke("DeriveFunction", {"Records": message_records(ws["dynamodb"], session_id="s1")}) == {
        "batchItemFailures": []
    }
    clone = call("POST", f"{W}/sessions/s1/clone", None, message_id=messages("s1")[2]["id"]).body["id"]
    moto_vectors.settle()  # the parent's search items reach the index (DynamoDB fills it asynchronously)
    found = call("POST", f"{W}/sessions/{clone}/search", {"query": "Lisbon"}).body
    assert [(m["content"], m["session_id"]) for m in found] == [("I moved to Lisbon last spring.", clone)]
    assert call("POST", f"{W}/sessions/{clone}/search", {"query": "nata"}).body == []  # past the cut


def test_summaries_covering_only_cloned_messages_come_along(ws):
    from precis.store import summaries
    from precis.store.db import get_db

    incarnation = session_item(ws, "s1")["incarnation"]
    summaries.put_summary(
        get_db(),
        "ws1",
        "s1",
        incarnation=incarnation,
        summary_type="honcho_chat_summary_short",
        content="alice moved to Lisbon.",
        token_count=5,
        covers_seq=2,
        end_tokens=12,
        message_id=messages("s1")[1]["id"],
    )
    clone = call("POST", f"{W}/sessions/s1/clone", None, message_id=messages("s1")[2]["id"]).body["id"]
    assert call("GET", f"{W}/sessions/{clone}/summaries").body["short_summary"]["content"] == "alice moved to Lisbon."
    early = call("POST", f"{W}/sessions/s1/clone", None, message_id=messages("s1")[0]["id"]).body["id"]
    assert call("GET", f"{W}/sessions/{early}/summaries").body["short_summary"] is None  # it covers past the cut


def test_a_clone_derives_only_from_its_own_point_on(ws):
    from tests.stream import message_records

    clone = call("POST", f"{W}/sessions/s1/clone").body["id"]
    post(clone, ("alice", "I work as a nurse."))
    assert invoke("DeriveFunction", {"Records": message_records(ws["dynamodb"], session_id=clone)}) == {
        "batchItemFailures": []
    }
    found = call("POST", f"{W}/conclusions/list", {"filters": {"session_id": clone}}).body["items"]
    assert {c["content"] for c in found} == {"alice works as a nurse"}
    status = call("GET", f"{W}/queue/status", None, session_id=clone).body
    assert status["pending_work_units"] == 0


@pytest.mark.parametrize(
    "query, status", [({"message_id": "AAAAAAA_nope_nope_nope"}, 404), ({"message_id": "bad id!"}, 422)]
)
def test_clone_bad_inputs(ws, query, status):
    before = call("POST", f"{W}/sessions/list").body["total"]
    assert call("POST", f"{W}/sessions/s1/clone", None, **query).status == status
    assert call("POST", "/v3/workspaces/ws1/sessions/nope/clone").status == 404
    assert call("POST", "/v3/workspaces/nope/sessions/s1/clone").status == 404
    assert call("POST", f"{W}/sessions/list").body["total"] == before


def test_a_clone_still_copying_cannot_be_cloned_again(ws):
    clone = call("POST", f"{W}/sessions/s1/clone").body["id"]
    reply = call("POST", f"{W}/sessions/{clone}/clone")
    assert reply.status == 409 and "still being copied" in reply.body["detail"]
    run_stream(ws, clone, "INSERT")
    assert call("POST", f"{W}/sessions/{clone}/clone").status == 201


def test_cloning_an_empty_session(ws):
    assert call("POST", f"{W}/sessions", {"id": "empty"}).status == 201
    clone = call("POST", f"{W}/sessions/empty/clone").body["id"]
    assert messages(clone) == [] and "base_session" not in session_item(ws, clone)


def test_a_copied_message_wakes_no_stream_consumer_but_a_new_one_does(ws):
    from local.poller import StreamSettings, matches
    from local.template import template
    from precis.store.db import to_item

    clone = call("POST", f"{W}/sessions/s1/clone").body["id"]
    run_stream(ws, clone, "INSERT")
    copied = item(ws, f"WS#ws1#S#{clone}", "MSG#000000000001")
    assert copied["copy_of"] == "s1"
    post(clone, ("alice", "New here."))
    fresh = item(ws, f"WS#ws1#S#{clone}", "MSG#000000000006")
    for fn in template().stream_functions():
        filters = StreamSettings.from_properties(fn.stream).filters
        for image, wakes in ((copied, False), (fresh, True)):
            event = {"eventName": "INSERT", "dynamodb": {"NewImage": to_item(image)}}
            assert any(matches(f, event) for f in filters) is wakes, (fn.logical_id, image["SK"])


def test_a_chat_in_a_clone_finds_what_it_inherited(ws):
    from tests.stream import message_records

    assert invoke("DeriveFunction", {"Records": message_records(ws["dynamodb"], session_id="s1")}) == {
        "batchItemFailures": []
    }
    clone = call("POST", f"{W}/sessions/s1/clone").body["id"]
    body = call("POST", f"{W}/chat", {"query": "Lisbon", "session_id": clone, "include_evidence": True}).body
    assert "I moved to Lisbon last spring." in body["content"]
    assert {m["session_id"] for m in body["evidence"]["messages"]} == {clone}


def test_large_bodies_outlive_the_parent_whether_copied_or_edited(ws, monkeypatch):
    from precis.settings import get_settings

    monkeypatch.setenv("PRECIS_INLINE_BODY_MAX_BYTES", "64")  # these bodies go to S3
    get_settings.cache_clear()
    long_texts = [f"{n}: " + "the river light in Lisbon " * 10 for n in range(2)]
    post("big", *(("alice", t) for t in long_texts))
    assert item(ws, "WS#ws1#S#big", "MSG#000000000001").get("body_key")
    clone = call("POST", f"{W}/sessions/big/clone").body["id"]
    first = messages(clone)[0]["id"]
    assert call("PUT", f"{W}/sessions/{clone}/messages/{first}", {"metadata": {"kept": True}}).status == 200
    assert run_stream(ws, clone, "INSERT") == {"batchItemFailures": []}
    assert call("DELETE", f"{W}/sessions/big").status == 202
    assert run_stream(ws, "big") == {"batchItemFailures": []}
    assert "purged_at" in session_item(ws, "big")  # the parent's bodies are gone from S3
    assert [m["content"] for m in messages(clone)] == long_texts
    assert messages(clone)[0]["metadata"] == {"kept": True}
