"""Chat (the dialectic): a question answered from the observer's memory of a peer, or the workspace's; offline with
no LLM, and through the real openai client against the local OpenAI-compatible server with search tools."""

from __future__ import annotations

import json

import pytest

from local import moto_vectors
from tests.handlers import call, invoke
from tests.handlers import post_messages as post
from tests.stream import message_records

W = "/v3/workspaces/ws1"


def derive(aws, session: str) -> None:
    assert invoke("DeriveFunction", {"Records": message_records(aws["dynamodb"], session_id=session)}) == {
        "batchItemFailures": []
    }


def chat(path: str, query: str, **body):
    """The chat's answer once the vector indexes hold every write (DynamoDB fills them asynchronously)."""
    moto_vectors.settle()
    return call("POST", path, {"query": query, **body})


@pytest.fixture
def ws(aws):
    assert call("POST", "/v3/workspaces", {"id": "ws1"}).status == 201
    post(
        "s1",
        ("bob", "Where are you living these days?"),
        ("alice", "I moved to Lisbon last spring."),
        ("alice", "I work as a nurse at the children's hospital."),
    )
    post("s2", ("alice", "I bake bread on Sundays."), ("carol", "My cat is called Miso."))
    derive(aws, "s1")
    derive(aws, "s2")
    return aws


def test_offline_chat_answers_with_the_conclusion(ws):
    reply = chat(f"{W}/peers/alice/chat", "where did alice move?")
    assert reply.status == 200, reply.body
    assert "alice moved to Lisbon last spring" in reply.body["content"]


def table(aws) -> list[dict]:
    return sorted(aws["dynamodb"].scan(TableName="precis-local")["Items"], key=lambda i: (i["PK"]["S"], i["SK"]["S"]))


def test_offline_chat_lists_the_nearest_conclusions_and_the_card_and_changes_nothing(ws):
    card = call("GET", f"{W}/peers/alice/card").body["peer_card"]
    assert card, "the fixture's derivation gave alice a card"
    before = table(ws)
    header, *lines = chat(f"{W}/peers/alice/chat", "where did alice move?").body["content"].split("\n")
    assert header == "From alice's memory of alice:"
    assert lines[0] == "- alice moved to Lisbon last spring"  # the nearest conclusion first
    assert [line for line in lines if line.removeprefix("- ") in card] == [f"- {entry}" for entry in card]
    assert table(ws) == before  # a chat is a read


def test_a_peer_with_nothing_remembered_gets_no_content(ws):
    assert call("POST", f"{W}/peers", {"id": "dave"}).status in (200, 201)
    assert chat(f"{W}/peers/dave/chat", "what does dave like?").body == {"content": None}


def test_the_workspace_chat_answers_from_the_messages_its_search_finds(ws):
    reply = chat(f"{W}/chat", "who has a cat called Miso?")
    assert reply.status == 200, reply.body
    assert reply.body["content"].startswith("From the workspace's memory:")
    assert "carol: My cat is called Miso." in reply.body["content"]


def test_evidence_lists_what_was_read_collected_by_the_server(ws):
    body = chat(f"{W}/peers/alice/chat", "where did alice move?", session_id="s1", include_evidence=True).body
    evidence = body["evidence"]
    assert set(evidence) == {"conclusions", "messages", "tool_calls", "reasoning_trace_id"}
    lisbon = [c for c in evidence["conclusions"] if c["content"] == "alice moved to Lisbon last spring"]
    assert lisbon and set(lisbon[0]) == {
        "id",
        "level",
        "content",
        "created_at",
        "session_id",
        "observer_id",
        "observed_id",
        "source_ids",
    }
    assert lisbon[0]["observer_id"] == lisbon[0]["observed_id"] == "alice" and lisbon[0]["session_id"] == "s1"
    assert {m["session_id"] for m in evidence["messages"]} == {"s1"}
    assert set(evidence["messages"][0]) == {"id", "session_id", "peer_id", "created_at"}
    assert evidence["tool_calls"] == []  # the offline engine calls no tools
    assert "evidence" not in chat(f"{W}/peers/alice/chat", "where did alice move?").body


def sse_events(text: str) -> list[dict]:
    return [json.loads(line.removeprefix("data: ")) for line in text.split("\n\n") if line.startswith("data: ")]


def test_a_streamed_chat_sends_the_same_answer_in_pieces_then_done_with_the_evidence(ws):
    whole = chat(f"{W}/peers/alice/chat", "where did alice move?").body["content"]
    reply = chat(f"{W}/peers/alice/chat", "where did alice move?", stream=True, include_evidence=True)
    assert reply.status == 200 and reply.headers["Content-Type"] == "text/event-stream"
    events = sse_events(reply.body)
    assert len(events) > 2 and all(e["done"] is False for e in events[:-1])
    assert "".join(e["delta"]["content"] for e in events[:-1]) == whole
    assert events[-1]["done"] is True and events[-1]["evidence"]["conclusions"]


def test_offline_response_format_fills_the_schema_from_the_answer(ws):
    schema = {
        "type": "object",
        "required": ["answer", "facts"],
        "properties": {
            "answer": {"type": "string"},
            "facts": {"type": "array", "items": {"type": "string"}},
            "confident": {"type": "boolean"},
        },
    }
    content = json.loads(chat(f"{W}/peers/alice/chat", "where did alice move?", response_format=schema).body["content"])
    assert "alice moved to Lisbon last spring" in content["facts"] and content["confident"] is True
    assert "alice moved to Lisbon last spring" in content["answer"]
    impossible = {
        "type": "object",
        "required": ["n"],
        "properties": {"n": {"type": "integer", "minimum": 3, "multipleOf": 7}},
    }
    reply = chat(f"{W}/peers/alice/chat", "how many?", response_format=impossible)
    assert reply.status == 422 and "offline engine" in reply.body["detail"]


@pytest.mark.parametrize(
    "schema, words",
    [
        ({"type": "array"}, '"type": "object"'),
        ({"type": "object", "properties": {"a": {"type": "nonsense"}}}, "not a valid JSON Schema"),
    ],
)
def test_a_response_format_that_is_not_an_object_schema_is_422(ws, schema, words):
    reply = chat(f"{W}/peers/alice/chat", "q", response_format=schema)
    assert reply.status == 422 and words in reply.body["detail"]


def test_a_scope_chat_reads_the_scopes_view_and_a_list_of_scopes_their_sessions(ws):
    assert call("POST", f"{W}/scopes", {"id": "work"}).status == 201
    assert call("POST", f"{W}/scopes/work/sessions", {"session_ids": ["s2"]}).status == 204
    derive(ws, "s2")  # the backfill arrives by the stream: replay the membership through the deriver
    records = [
        r
        for r in ws["dynamodb"].scan(TableName="precis-local")["Items"]
        if r.get("kind", {}).get("S") == "scope_session"
    ]
    from tests.stream import stream_record

    invoke("DeriveFunction", {"Records": [stream_record(r) for r in records]})
    content = chat(f"{W}/peers/alice/chat", "what does alice do?", scope="work").body["content"] or ""
    assert content.startswith("From scope work's memory of alice") and "bakes bread" in content
    assert "Lisbon" not in content
    several = chat(f"{W}/peers/alice/chat", "what does alice do?", scope=["work"]).body["content"] or ""
    assert "bakes bread" in several and "Lisbon" not in several
    assert chat(f"{W}/peers/alice/chat", "q", scope="nope").status == 404
    assert chat(f"{W}/peers/alice/chat", "q", scope="work", session_id="s1").status == 422


# ---------------------------------------------------------------- the llm engine, against the local server


@pytest.fixture
def llm(ws, llm_server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", llm_server.url)
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("PRECIS_LLM_MAX_ATTEMPTS", "2")
    monkeypatch.setenv("PRECIS_LLM_TIMEOUT_S", "5")
    from precis.settings import get_settings

    get_settings.cache_clear()  # the memory was derived offline (ws); the chat asks the model: a new cold start
    return llm_server


def tool_result(body: dict) -> str | None:
    tools = [m["content"] for m in body["messages"] if m.get("role") == "tool"]
    return tools[-1] if tools else None


def test_the_model_calls_a_search_tool_then_answers_from_what_it_found(llm):
    def answer(body):
        if tool_result(body) is None:
            return {"tool_calls": [{"name": "search_conclusions", "arguments": {"query": "Lisbon", "top_k": 3}}]}
        return "alice lives in Lisbon, per: " + tool_result(body).splitlines()[0]

    llm.answer = answer
    body = chat(f"{W}/peers/alice/chat", "where does alice live?", include_evidence=True).body
    assert body["content"].startswith("alice lives in Lisbon, per: - [") and "moved to Lisbon" in body["content"]
    first, second = (r.body for r in llm.requests)
    assert {t["function"]["name"] for t in first["tools"]} == {"search_conclusions", "search_messages"}
    assert "alice moved to Lisbon last spring" in first["messages"][1]["content"]  # the first retrieval
    assert "tools" not in second  # low: one follow-up round, then the answer
    assert body["evidence"]["tool_calls"] == [
        {"tool_name": "search_conclusions", "tool_input": {"query": "Lisbon", "top_k": 3}}
    ]


@pytest.mark.parametrize(
    "level, requests, max_tokens",
    [("minimal", 1, 250), ("low", 2, 1000), ("medium", 3, 1000), ("high", 5, 1500), ("max", 9, 2000)],
)
def test_the_reasoning_level_bounds_the_tool_rounds_and_the_answer(llm, level, requests, max_tokens):
    llm.answer = lambda body: (
        {"tool_calls": [{"name": "search_messages", "arguments": {"query": "Lisbon"}}]} if body.get("tools") else "done"
    )
    body = chat(f"{W}/peers/alice/chat", "where?", reasoning_level=level, include_evidence=True).body
    assert body["content"] == "done"
    assert len(llm.requests) == requests
    assert {r.body["max_tokens"] for r in llm.requests} == {max_tokens}
    assert len(body["evidence"]["tool_calls"]) == requests - 1
    assert "I moved to Lisbon last spring." in (tool_result(llm.requests[-1].body) or "") or level == "minimal"


def test_a_bad_tool_call_is_answered_with_what_was_wrong_and_not_counted(llm):
    llm.answer = lambda body: (
        {"tool_calls": [{"name": "delete_everything", "arguments": {}}]} if body.get("tools") else "ok"
    )
    body = chat(f"{W}/peers/alice/chat", "q", include_evidence=True).body
    assert body["content"] == "ok" and body["evidence"]["tool_calls"] == []
    assert tool_result(llm.requests[-1].body).startswith("error: no tool 'delete_everything'")


def test_a_workspace_chat_offers_message_search_only(llm):
    llm.answer = lambda body: "workspace answer"
    assert chat(f"{W}/chat", "who bakes?").body == {"content": "workspace answer"}
    assert [t["function"]["name"] for t in llm.requests[0].body["tools"]] == ["search_messages"]


def test_response_format_answers_are_checked_and_asked_again(llm):
    schema = {
        "type": "object",
        "required": ["city"],
        "properties": {"city": {"type": "string"}},
        "additionalProperties": False,
    }
    answers = iter(['{"town": "Lisbon"}', '{"city": "Lisbon"}'])
    llm.answer = lambda body: next(answers)
    content = chat(f"{W}/peers/alice/chat", "where?", response_format=schema).body["content"]
    assert json.loads(content) == {"city": "Lisbon"}
    assert llm.requests[0].body["response_format"]["json_schema"]["schema"] == schema
    llm.answer = lambda body: "Lisbon, I think"
    reply = chat(f"{W}/peers/alice/chat", "where?", response_format=schema)
    assert reply.status == 422 and reply.body["detail"].startswith("response_format: the model's answers did not")


def test_a_server_without_structured_output_gets_the_schema_in_the_prompt(llm):
    llm.structured_output = False
    llm.answer = lambda body: '{"city": "Lisbon"}'
    schema = {"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}}
    assert json.loads(chat(f"{W}/peers/alice/chat", "where?", response_format=schema).body["content"]) == {
        "city": "Lisbon"
    }
    assert "JSON Schema" in llm.requests[-1].body["messages"][-1]["content"]


@pytest.mark.parametrize("mode, status", [("500", 503), ("401", 502)])
def test_a_failing_model_is_a_clear_5xx_not_an_answer(llm, mode, status):
    llm.mode = mode
    reply = chat(f"{W}/peers/alice/chat", "where?")
    assert reply.status == status and reply.body["detail"].startswith("chat: the model")


def test_the_streamed_llm_answer_arrives_in_pieces(llm):
    llm.answer = lambda body: "alice moved to Lisbon last spring, and she works as a nurse there."
    events = sse_events(chat(f"{W}/peers/alice/chat", "where?", stream=True).body)
    assert len(events) > 3
    assert "".join(e["delta"]["content"] for e in events[:-1]) == llm.answer({})
