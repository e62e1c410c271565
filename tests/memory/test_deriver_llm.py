"""The deriver with the `llm` engine, against the local OpenAI-compatible server through the real `openai` client:
batching by tokens and age, the prompt's lines and instructions, failures retried and never half-written."""

from __future__ import annotations

import json

import pytest

from tests.handlers import call, invoke
from tests.stream import message_records

W = "/v3/workspaces/ws1"
S = f"{W}/sessions/s1"
LONG = "I have been planning the move for months and the budget review keeps slipping to next week. " * 6


def _asks_for_card(body: dict) -> bool:
    return "peer_card" in json.dumps(body.get("response_format") or {})


def explicit(*facts: str):
    """An answer function: `facts` for an extraction (each about the peer it begins with), a card of them for a
    card update."""

    def answer(body: dict) -> str:
        if _asks_for_card(body):
            return json.dumps({"peer_card": [f"IDENTITY: {f}" for f in facts]})
        return json.dumps({"explicit": [{"peer": f.split()[0], "content": f} for f in facts]})

    return answer


@pytest.fixture
def ws(aws, llm_server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", llm_server.url)
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("PRECIS_LLM_MAX_ATTEMPTS", "2")
    monkeypatch.setenv("PRECIS_LLM_TIMEOUT_S", "5")
    monkeypatch.setenv("PRECIS_DERIVE_BATCH_TOKENS", "512")  # (the default, 2,048, would take 3 times the text)
    llm_server.answer = explicit("alice moved to Lisbon in spring 2026")
    assert call("POST", "/v3/workspaces", {"id": "ws1"}).status == 201
    return aws


def post(*messages: tuple[str, str]) -> list[dict]:
    reply = call("POST", f"{S}/messages", {"messages": [{"peer_id": p, "content": c} for p, c in messages]})
    assert reply.status == 201, reply.body
    return reply.body


def derive(client) -> dict:
    return invoke("DeriveFunction", {"Records": message_records(client)})


def found(observer: str = "alice", observed: str = "alice") -> list[dict]:
    reply = call("POST", f"{W}/conclusions/list", {"filters": {"observer_id": observer, "observed_id": observed}})
    return reply.body["items"]


def chat_requests(server) -> list[dict]:
    """The extraction requests the server answered (card updates left out)."""
    return [
        r.body
        for r in server.requests
        if r.path.endswith("/chat/completions") and r.mode == "ok" and not _asks_for_card(r.body)
    ]


def test_a_batch_waits_for_512_tokens_then_one_request_carries_every_line(ws, llm_server):
    post(("bob", "Where do you live now?"), ("alice", "I moved to Lisbon."))
    assert derive(ws["dynamodb"]) == {"batchItemFailures": []}
    assert llm_server.requests == [] and found() == []  # a few tokens: the batch waits
    status = call("GET", f"{W}/queue/status?session_id=s1").body
    assert status["pending_work_units"] >= 1
    posted = post(*[("alice", LONG)] * 6)
    assert derive(ws["dynamodb"]) == {"batchItemFailures": []}
    (request,) = chat_requests(llm_server)
    assert request["response_format"]["type"] == "json_schema"
    prompt = "\n".join(str(m["content"]) for m in request["messages"])
    day, minute = posted[0]["created_at"][:10], posted[0]["created_at"][11:16]
    assert f"[{day}]" in prompt and f"{minute} alice: {LONG.strip()}" in prompt
    assert prompt.count("bob: Where do you live now?") == 1  # every sender's waiting lines, in one request
    assert prompt.count("alice: I moved to Lisbon.") == 1 and "Target peers: alice, bob\n" in prompt
    (conclusion,) = found()
    assert conclusion["content"] == "alice moved to Lisbon in spring 2026"
    # the card waits for more conclusions, or for the session to go quiet (tests/memory/test_card_refresh.py)
    assert [r for r in llm_server.requests if _asks_for_card(r.body)] == []
    status = call("GET", f"{W}/queue/status?session_id=s1").body
    assert (status["completed_work_units"], status["pending_work_units"]) == (8, 0)  # bob's line was derived too


def test_the_schedule_flushes_a_batch_that_waited_past_its_age(ws, llm_server):
    """The deriver's clock is injected (derive_session's `now`), and the flush's query (due_targets) asked at chosen
    moments; then the scheduled flush itself, once the machine's clock has passed the batch's age (waited on)."""
    from datetime import UTC, datetime, timedelta

    from precis.llm.embeddings import configured_embedder
    from precis.memory.deriver import SessionTarget, derive_session, due_targets
    from precis.settings import get_settings
    from precis.store.db import get_db
    from tests.stack import wait_for

    assert call("PUT", W, {"configuration": {"deriver": {"max_wait_s": 1}}}).status == 200
    (message,) = post(("alice", "I moved to Lisbon."))
    posted, db, alice = datetime.fromisoformat(message["created_at"]), get_db(), SessionTarget("ws1", "s1")
    outcome = derive_session(
        db,
        get_settings(),
        alice,
        senders=["alice"],
        engine_for=lambda _: pytest.fail("derived before its age"),
        embedder=configured_embedder(),
        now=lambda: posted,
    )
    assert outcome.pending == 1 and llm_server.requests == []  # one message, far from the batch's tokens: it waits
    assert due_targets(db, ["ws1"], posted + timedelta(seconds=0.999)) == []  # not yet due
    assert due_targets(db, ["ws1"], posted + timedelta(seconds=1)) == [alice]
    wait_for(lambda: due_targets(db, ["ws1"], datetime.now(UTC)), 60)
    assert invoke("DeriveFunction", {"precis": "flush"}) == {"flushed": 1, "failed": 0}
    assert [c["content"] for c in found()] == ["alice moved to Lisbon in spring 2026"]
    assert invoke("DeriveFunction", {"precis": "flush"}) == {"flushed": 0, "failed": 0}


def test_custom_instructions_reach_the_prompt(ws, llm_server):
    assert (
        call(
            "POST",
            f"{W}/sessions",
            {
                "id": "s1",
                "configuration": {
                    "reasoning": {"custom_instructions": "Only record facts about travel."},
                    "deriver": {"batch_tokens": 0},
                },
            },
        ).status
        == 201
    )
    post(("alice", "I moved to Lisbon."))
    derive(ws["dynamodb"])
    (request,) = chat_requests(llm_server)
    # after the instructions every request shares (a cacheable prefix), before the lines
    system, user = request["messages"]
    assert "travel" not in system["content"]
    assert user["content"].startswith("Custom instructions:\nOnly record facts about travel.\n")


def test_reasoning_disabled_derives_nothing(ws, llm_server):
    assert (
        call(
            "POST",
            f"{W}/sessions",
            {"id": "s1", "configuration": {"reasoning": {"enabled": False}, "deriver": {"batch_tokens": 0}}},
        ).status
        == 201
    )
    post(("alice", "I moved to Lisbon."))
    assert derive(ws["dynamodb"]) == {"batchItemFailures": []}
    assert llm_server.requests == [] and found() == []
    assert call("GET", f"{W}/queue/status?session_id=s1").body["pending_work_units"] == 0


@pytest.mark.parametrize("failure", ["500", "garbage", "malformed"])
def test_a_failing_model_fails_the_records_writes_nothing_and_a_retry_derives_once(ws, llm_server, failure):
    assert call("PUT", W, {"configuration": {"deriver": {"batch_tokens": 0}}}).status == 200
    post(("alice", "I moved to Lisbon."))
    if failure == "malformed":
        llm_server.answer = lambda body: '{"explicit": "not a list"}'
    else:
        llm_server.mode = failure
    result = derive(ws["dynamodb"])
    assert len(result["batchItemFailures"]) == 1
    assert len(llm_server.requests) == 2  # PRECIS_LLM_MAX_ATTEMPTS
    assert found() == []
    cursor = (
        ws["dynamodb"]
        .get_item(TableName="precis-local", Key={"PK": {"S": "WS#ws1#S#s1"}, "SK": {"S": "DERIVE#alice"}})
        .get("Item", {})
    )
    assert "job" not in cursor and cursor.get("through_seq", {"N": "0"}) == {"N": "0"}
    # the context and the summaries do not depend on the deriver
    assert call("GET", f"{S}/context").status == 200
    llm_server.mode, llm_server.answer = "ok", explicit("alice moved to Lisbon in spring 2026")
    before = len(chat_requests(llm_server))
    assert derive(ws["dynamodb"]) == {"batchItemFailures": []}
    assert derive(ws["dynamodb"]) == {"batchItemFailures": []}
    (conclusion,) = found()
    assert conclusion["times_derived"] == 1
    assert len(chat_requests(llm_server)) == before + 1


def test_a_refused_request_is_not_retried(ws, llm_server):
    assert call("PUT", W, {"configuration": {"deriver": {"batch_tokens": 0}}}).status == 200
    post(("alice", "I moved to Lisbon."))
    llm_server.mode = "401"
    assert len(derive(ws["dynamodb"])["batchItemFailures"]) == 1
    assert len(llm_server.requests) == 1
    assert found() == []
