"""Chat through the honcho-ai SDK on the local stack with the local OpenAI-compatible server: the model's answer,
its search tool calls, streaming in pieces, and a response_format."""

from __future__ import annotations

import json

import pytest
from honcho import Honcho
from pydantic import BaseModel

from tests.llm_server import LLMServer
from tests.stack import wait_for

pytestmark = pytest.mark.stack
SERVER = LLMServer().start()  # module-wide: the stack's functions need its URL when they start
STACK_ENV = {"OPENAI_BASE_URL": SERVER.url, "OPENAI_API_KEY": "test-key", "PRECIS_DERIVE_ENGINE": "extractive",
             "PRECIS_LOCAL_SCHEDULE_S": "1"}
ANSWER = "alice moved to Lisbon last spring, so she lives in Lisbon now."


def teardown_module() -> None:
    SERVER.close()


def answer(body: dict):
    tool_results = [m["content"] for m in body["messages"] if m.get("role") == "tool"]
    if body.get("tools") and not tool_results:
        return {"tool_calls": [{"name": "search_messages", "arguments": {"query": "Lisbon"}}]}
    if body.get("response_format"):
        return json.dumps({"city": "Lisbon"})
    return ANSWER


class Place(BaseModel):
    city: str


def test_chat_with_the_model_through_the_sdk(stack):
    SERVER.answer = answer
    honcho = Honcho(base_url=stack.url, api_key="local", workspace_id="chat-llm")
    alice, bob = honcho.peer("alice"), honcho.peer("bob")
    session = honcho.session("s1")
    session.add_messages([bob.message("Where are you living these days?"),
                          alice.message("I moved to Lisbon last spring.")])
    wait_for(lambda: alice.conclusions.query("where did alice move?"))
    wait_for(lambda: honcho.search("Lisbon"))
    SERVER.requests.clear()
    reply = alice.chat("where does alice live?", include_evidence=True)
    assert reply.content == ANSWER
    assert [c.tool_name for c in reply.evidence.tool_calls] == ["search_messages"]
    first, second = (r.body for r in SERVER.requests)
    assert "alice moved to Lisbon last spring" in first["messages"][1]["content"]
    assert "I moved to Lisbon last spring." in [m for m in second["messages"] if m["role"] == "tool"][0]["content"]

    chunks = list(alice.chat_stream("where does alice live?"))
    assert len(chunks) > 1 and "".join(chunks) == ANSWER
    assert alice.chat("where?", response_format=Place) == Place(city="Lisbon")
    assert honcho.chat("who lives in Lisbon?", reasoning_level="minimal") == ANSWER
    assert "tools" not in SERVER.requests[-1].body  # minimal: one retrieval, no tools
