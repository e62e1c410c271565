"""Chat through the honcho-ai SDK on the local stack with the local OpenAI-compatible server: the model's answer,
its search tool calls, streaming in pieces, and a response_format."""

from __future__ import annotations

import json

import pytest
from honcho import Honcho
from pydantic import BaseModel

from local.models.llm_server import LLMServer
from tests.stack import wait_for

pytestmark = pytest.mark.stack
SERVER = LLMServer().start()  # module-wide: the stack's functions need its URL when they start
# The deriver asks the model too (its engine is llm once one is configured), at once (no batching).
STACK_ENV = {
    "OPENAI_BASE_URL": SERVER.url,
    "OPENAI_API_KEY": "test-key",
    "PRECIS_DERIVE_BATCH_TOKENS": "0",
    "PRECIS_LOCAL_SCHEDULE_S": "1",
}
ANSWER = "alice moved to Lisbon last spring, so she lives in Lisbon now."


def teardown_module() -> None:
    SERVER.close()


FACTS = {
    "I moved to Lisbon last spring.": "alice moved to Lisbon last spring",
    "I work as a nurse.": "alice works as a nurse",
}


def model(body: dict):
    """The local model: extractions of FACTS, deductions from the first two premises a dream lists, a card, and the
    chat's answers."""
    fmt = json.dumps(body.get("response_format") or {})
    prompt = body["messages"][-1]["content"]
    if "explicit_conclusions" in fmt or "<messages>" in prompt:
        return json.dumps({"explicit": [{"content": fact} for said, fact in FACTS.items() if said in prompt]})
    if "<explicit>" in prompt:
        ids = [line[1 : line.index("]")] for line in prompt.splitlines() if line.startswith("[")]
        return json.dumps({"deductive": [{"content": "alice is a nurse who lives in Lisbon", "premises": ids[:2]}]})
    if "peer_card" in fmt:
        return json.dumps({"peer_card": ["IDENTITY: alice is a nurse in Lisbon"]})
    return answer(body)


def chat_requests() -> list[dict]:
    return [r.body for r in SERVER.requests if r.body["messages"][0]["content"].startswith("You answer questions")]


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
    SERVER.answer = model
    honcho = Honcho(base_url=stack.url, api_key="local", workspace_id="chat-llm")
    alice, bob = honcho.peer("alice"), honcho.peer("bob")
    session = honcho.session("s1")
    session.add_messages(
        [bob.message("Where are you living these days?"), alice.message("I moved to Lisbon last spring.")]
    )
    wait_for(lambda: alice.conclusions.query("where did alice move?"))
    wait_for(lambda: honcho.search("Lisbon"))
    SERVER.requests.clear()
    reply = alice.chat("where does alice live?", include_evidence=True)
    assert reply.content == ANSWER
    assert [c.tool_name for c in reply.evidence.tool_calls] == ["search_messages"]
    first, second = chat_requests()
    assert "alice moved to Lisbon last spring" in first["messages"][1]["content"]
    assert "I moved to Lisbon last spring." in [m for m in second["messages"] if m["role"] == "tool"][0]["content"]

    chunks = list(alice.chat_stream("where does alice live?"))
    assert len(chunks) > 1 and "".join(chunks) == ANSWER
    assert alice.chat("where?", response_format=Place) == Place(city="Lisbon")
    assert honcho.chat("who lives in Lisbon?", reasoning_level="minimal") == ANSWER
    assert "tools" not in chat_requests()[-1]  # minimal: one retrieval, no tools


def test_schedule_dream_through_the_sdk(stack):
    SERVER.answer = model
    honcho = Honcho(base_url=stack.url, api_key="local", workspace_id="dream-llm")
    alice = honcho.peer("alice")
    honcho.session("s1").add_messages(
        [alice.message("I moved to Lisbon last spring."), alice.message("I work as a nurse.")]
    )
    explicit = wait_for(lambda: (found := list(alice.conclusions.list())) and len(found) == 2 and found)
    honcho.schedule_dream(alice)
    deductive = wait_for(lambda: [c for c in alice.conclusions.list() if c.level == "deductive"])
    assert [c.content for c in deductive] == ["alice is a nurse who lives in Lisbon"]
    assert sorted(deductive[0].source_ids) == sorted(c.id for c in explicit)
    assert {c.id for c in alice.conclusions.list() if c.level == "explicit"} == {c.id for c in explicit}
    # The deductive conclusion is visible before the dream's job is marked done: wait for the queue to say so.
    status = wait_for(
        lambda: (s := honcho.queue_status()) and s.pending_work_units == s.in_progress_work_units == 0 and s
    )
    assert status.completed_work_units == status.total_work_units
