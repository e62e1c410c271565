"""Every engine on Amazon Bedrock, through the honcho-ai SDK on one local stack: the functions' real botocore
bedrock-runtime clients reach the local Bedrock-compatible server (local/models/bedrock_server.py) through
AWS_ENDPOINT_URL_BEDROCK_RUNTIME, with no OpenAI endpoint or key anywhere, and no model named: the provider alone, so
each role asks its documented default (Amazon Nova 2 Lite, Titan Text Embeddings V2) and each function's role, as
the template grants it for empty LlmModel and EmbedModel, lets it. Summaries, derivation (a forced tool for
its JSON), semantic search (Titan embeddings), chat (tool rounds, streamed, JSON) and dreams, as the OpenAI provider
does them in tests/chat/test_chat_sdk.py and tests/sdk/test_sdk.py."""

from __future__ import annotations

import json

import pytest
from honcho import Honcho
from pydantic import BaseModel

from local.models.bedrock_server import BedrockServer, user_texts
from tests.stack import wait_for

pytestmark = pytest.mark.stack
SERVER = BedrockServer().start()  # module-wide: the stack's functions need its URL when they start
PROFILE = "us.amazon.nova-2-lite-v1:0"  # the defaults (precis.settings.DEFAULT_MODELS), named nowhere below
EMBED = "amazon.titan-embed-text-v2:0"
# No OPENAI_* variable: Bedrock needs no endpoint or key, and the engines are llm because the provider is bedrock.
# No model either (empty, as the template's parameters are by default): `make dev` with the provider alone.
STACK_ENV = {
    "PRECIS_LLM_PROVIDER": "bedrock",
    "PRECIS_LLM_MODEL": "",
    "PRECIS_EMBEDDER": "bedrock",
    "PRECIS_EMBED_MODEL": "",
    "PRECIS_EMBED_DIMENSIONS": "256",
    "AWS_ENDPOINT_URL_BEDROCK_RUNTIME": SERVER.url,
    "OPENAI_BASE_URL": "",
    "OPENAI_API_KEY": "",
    "PRECIS_DERIVE_BATCH_TOKENS": "0",
    "PRECIS_LOCAL_SCHEDULE_S": "1",
}
ANSWER = "alice moved to Lisbon last spring, so she lives in Lisbon now."
FACTS = {
    "I moved to Lisbon last spring.": "alice moved to Lisbon last spring",
    "I work as a nurse.": "alice works as a nurse",
}


def teardown_module() -> None:
    SERVER.close()


def tools_of(body: dict) -> list[str]:
    return [t["toolSpec"]["name"] for t in (body.get("toolConfig") or {}).get("tools", [])]


def model(body: dict):
    """The local model, reading Converse requests: extractions of FACTS, deductions from the first two premises a
    dream lists, a card, summaries, and the chat's answers."""
    tools, prompt = tools_of(body), (user_texts(body) or [""])[-1]
    if "explicit_conclusions" in tools:
        return json.dumps({"explicit": [{"content": fact} for said, fact in FACTS.items() if said in prompt]})
    if "deductive_conclusions" in tools:
        ids = [line[1 : line.index("]")] for line in prompt.splitlines() if line.startswith("[")]
        return json.dumps({"deductive": [{"content": "alice is a nurse who lives in Lisbon", "premises": ids[:2]}]})
    if "peer_card" in tools:
        return json.dumps({"peer_card": ["IDENTITY: alice is a nurse in Lisbon"]})
    if is_chat(body):
        return answer(body)
    return "Summary: " + prompt.strip().splitlines()[-1][:80]


def is_chat(body: dict) -> bool:
    return body.get("system", [{}])[0].get("text", "").startswith("You answer questions")


def answer(body: dict):
    results = [b for m in body["messages"] for b in m["content"] if "toolResult" in b]
    if "search_messages" in tools_of(body) and not results:
        return {"tool_calls": [{"name": "search_messages", "arguments": {"query": "Lisbon"}}]}
    if "answer" in tools_of(body):
        return json.dumps({"city": "Lisbon"})
    return ANSWER


def chat_requests() -> list[dict]:
    return [r.body for r in SERVER.requests if r.operation == "converse" and is_chat(r.body)]


class Place(BaseModel):
    city: str


def test_a_stack_on_bedrock_naming_no_model_starts(stack):
    from tests.stack import request

    status, _, body = request(stack.port, "GET", "/health")
    assert (status, json.loads(body)) == (200, {"status": "ok"})


def test_summaries_on_bedrock(stack):
    SERVER.answer = model
    honcho = Honcho(base_url=stack.url, api_key="local", workspace_id="bedrock-summaries")
    alice, session = honcho.peer("alice"), honcho.session("long")
    session.add_messages([alice.message(f"Message {i} about the budget.") for i in range(20)])
    short = wait_for(lambda: session.summaries().short_summary, 240)
    assert short.content.startswith("Summary: ")  # the Bedrock model's answer, not the extractive engine's
    summaries = [
        r for r in SERVER.requests if r.operation == "converse" and "Short summary" in json.dumps(r.body.get("system"))
    ]
    assert summaries and {r.model for r in summaries} == {PROFILE}
    assert all(r.body["inferenceConfig"]["maxTokens"] > 0 for r in summaries)


def test_derivation_search_and_chat_on_bedrock(stack):
    SERVER.answer = model
    honcho = Honcho(base_url=stack.url, api_key="local", workspace_id="bedrock-chat")
    alice, bob = honcho.peer("alice"), honcho.peer("bob")
    session = honcho.session("s1")
    session.add_messages(
        [bob.message("Where are you living these days?"), alice.message("I moved to Lisbon last spring.")]
    )
    found = wait_for(lambda: alice.conclusions.query("where did alice move?"), 240)
    assert [c.content for c in found] == ["alice moved to Lisbon last spring"]
    embedded = [r for r in SERVER.requests if r.operation == "invoke"]
    assert {r.model for r in embedded} == {EMBED} and {r.body["dimensions"] for r in embedded} == {256}
    assert any(r.body["inputText"] == "where did alice move?" for r in embedded)  # the query, embedded by Titan
    wait_for(lambda: honcho.search("Lisbon"), 120)

    SERVER.requests.clear()
    reply = alice.chat("where does alice live?", include_evidence=True)
    assert reply.content == ANSWER
    assert [c.tool_name for c in reply.evidence.tool_calls] == ["search_messages"]
    first, second = chat_requests()
    assert "alice moved to Lisbon last spring" in first["messages"][0]["content"][0]["text"]
    # The answering round offers no tools, so the search and its result travel as text (Converse refuses tool
    # blocks without a toolConfig).
    assert "toolConfig" in first and "toolConfig" not in second
    (result,) = [
        b["text"] for m in second["messages"] for b in m["content"] if b.get("text", "").startswith("[tool result]")
    ]
    assert "I moved to Lisbon last spring." in result

    chunks = list(alice.chat_stream("where does alice live?"))
    assert len(chunks) > 1 and "".join(chunks) == ANSWER
    assert alice.chat("where?", response_format=Place) == Place(city="Lisbon")
    assert honcho.chat("who lives in Lisbon?", reasoning_level="minimal") == ANSWER
    assert "toolConfig" not in chat_requests()[-1]  # minimal: one retrieval, no tools


def test_dreams_on_bedrock(stack):
    SERVER.answer = model
    honcho = Honcho(base_url=stack.url, api_key="local", workspace_id="bedrock-dream")
    alice = honcho.peer("alice")
    honcho.session("s1").add_messages(
        [alice.message("I moved to Lisbon last spring."), alice.message("I work as a nurse.")]
    )
    explicit = wait_for(lambda: (found := list(alice.conclusions.list())) and len(found) == 2 and found, 240)
    honcho.schedule_dream(alice)
    deductive = wait_for(lambda: [c for c in alice.conclusions.list() if c.level == "deductive"], 240)
    assert [c.content for c in deductive] == ["alice is a nurse who lives in Lisbon"]
    assert sorted(deductive[0].source_ids) == sorted(c.id for c in explicit)
    dreams = [r for r in SERVER.requests if "deductive_conclusions" in tools_of(r.body)]
    assert dreams and dreams[0].body["toolConfig"]["toolChoice"] == {"tool": {"name": "deductive_conclusions"}}
