"""An llm engine's cards are refreshed once per burst of conclusions, not once per derivation: when enough wait, and
when the session goes quiet (a cards wake-up on SQS, moto), through the real `openai` client against the local
server (memory/card_refresh.py)."""

from __future__ import annotations

import json

import pytest

from tests.handlers import call
from tests.memory.test_deriver_llm import _asks_for_card, derive, post
from tests.memory.test_deriver_quiet import QUEUE, queued, wake, wakeups

W = "/v3/workspaces/ws1"


@pytest.fixture
def ws(aws, llm_server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", llm_server.url)
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("PRECIS_LLM_MAX_ATTEMPTS", "1")
    monkeypatch.setenv("PRECIS_LLM_TIMEOUT_S", "5")
    monkeypatch.setenv("PRECIS_DERIVE_QUIET_S", "1")
    monkeypatch.setenv("PRECIS_DERIVE_CARD_QUIET_S", "1")
    monkeypatch.setenv("PRECIS_DERIVE_CARD_EVERY", "3")
    monkeypatch.setenv("PRECIS_DERIVE_WAKE_QUEUE_URL", aws["sqs"].get_queue_url(QueueName=QUEUE)["QueueUrl"])
    llm_server.answer = _model
    # every message derives at once (no batch to wait for): the cards alone are debounced here
    assert (
        call("POST", "/v3/workspaces", {"id": "ws1", "configuration": {"deriver": {"batch_tokens": 0}}}).status == 201
    )
    return aws


def _model(body: dict) -> str:
    """Each alice line `I like X.` is the conclusion `alice likes X`; a card update keeps the card and adds what the
    prompt's conclusions say."""
    user = body["messages"][-1]["content"]
    if _asks_for_card(body):
        inner = user.split("<card>\n", 1)[1].split("\n</card>", 1)[0]
        card = [line for line in inner.splitlines() if line != "(empty)"]
        new = user.split("<conclusions>\n", 1)[1].split("\n</conclusions>", 1)[0].splitlines()
        return json.dumps({"peer_card": card + [f"ATTRIBUTE: {c}" for c in new if f"ATTRIBUTE: {c}" not in card]})
    lines = user.split("<messages>\n", 1)[1].split("\n</messages>", 1)[0].splitlines()
    liked = [line.split("alice: I like ", 1)[1].rstrip(".") for line in lines if "alice: I like " in line]
    return json.dumps({"explicit": [{"peer": "alice", "content": f"alice likes {thing}"} for thing in liked]})


def card_requests(server) -> list[dict]:
    return [r.body for r in server.requests if r.mode == "ok" and _asks_for_card(r.body)]


def card() -> list[str] | None:
    return call("GET", f"{W}/peers/alice/card").body["peer_card"]


def test_a_card_waits_for_its_conclusions_to_number_card_every_then_one_request_takes_them_all(ws, llm_server):
    post(("alice", "I like tea."))
    derive(ws["dynamodb"])
    post(("alice", "I like jazz."))
    derive_next(ws, 2)
    assert card_requests(llm_server) == [] and card() is None  # two conclusions wait: fewer than 3
    post(("alice", "I like chess."))
    derive_next(ws, 3)
    (request,) = card_requests(llm_server)
    conclusions = request["messages"][-1]["content"].split("<conclusions>\n", 1)[1]
    assert [line for line in conclusions.splitlines() if line.startswith("alice")] == [
        "alice likes tea",
        "alice likes jazz",
        "alice likes chess",
    ]
    assert card() == ["ATTRIBUTE: alice likes tea", "ATTRIBUTE: alice likes jazz", "ATTRIBUTE: alice likes chess"]
    post(("alice", "I like rain."))
    derive_next(ws, 4)
    assert len(card_requests(llm_server)) == 1  # the count starts again from the refresh


def derive_next(ws, first: int) -> None:
    from tests.handlers import invoke
    from tests.stream import message_records

    assert invoke("DeriveFunction", {"Records": message_records(ws["dynamodb"], first=first)}) == {
        "batchItemFailures": []
    }


def test_a_quiet_session_refreshes_its_waiting_cards_once(ws, llm_server, monkeypatch):
    monkeypatch.setenv("PRECIS_DERIVE_CARD_EVERY", "50")
    # the batch waits for the pause
    assert call("PUT", W, {"configuration": {"deriver": {"batch_tokens": 512}}}).status == 200
    post(("alice", "I like tea."), ("bob", "Nice."))
    derive(ws["dynamodb"])
    (first,) = wakeups(ws["sqs"])
    assert wake([first]) == {"batchItemFailures": []}  # quiet: derived, and the cards' wake-up sent
    assert card_requests(llm_server) == [] and queued(ws["sqs"])["ApproximateNumberOfMessagesDelayed"] == 1
    (cards,) = wakeups(ws["sqs"])
    assert json.loads(cards["body"])["kind"] == "cards"
    assert wake([cards, cards]) == {"batchItemFailures": []}  # delivered twice: one refresh
    assert len(card_requests(llm_server)) == 1 and card() == ["ATTRIBUTE: alice likes tea"]
    assert wake([cards]) == {"batchItemFailures": []}  # late: nothing waits
    assert len(card_requests(llm_server)) == 1


def test_a_cards_wakeup_that_finds_a_newer_message_leaves_the_cards_to_the_next_pause(ws, llm_server, monkeypatch):
    monkeypatch.setenv("PRECIS_DERIVE_CARD_EVERY", "50")
    assert call("PUT", W, {"configuration": {"deriver": {"batch_tokens": 512}}}).status == 200
    post(("alice", "I like tea."))
    derive(ws["dynamodb"])
    (first,) = wakeups(ws["sqs"])
    wake([first])
    (cards,) = wakeups(ws["sqs"])
    post(("alice", "I like jazz."))  # the conversation goes on before the cards' quiet period ends
    derive_next(ws, 2)
    assert wake([cards]) == {"batchItemFailures": []}
    assert card_requests(llm_server) == [] and card() is None


def test_a_failed_refresh_keeps_its_conclusions_for_the_next(ws, llm_server):
    post(("alice", "I like tea."), ("alice", "I like jazz."))
    derive(ws["dynamodb"])
    llm_server.script(["ok", "500"])  # the extraction is answered, the card request fails (one attempt)
    post(("alice", "I like chess."))
    derive_next(ws, 3)
    assert card() is None
    post(("alice", "I like rain."))
    derive_next(ws, 4)
    (request, *_failed) = card_requests(llm_server)
    assert card() == [f"ATTRIBUTE: alice likes {t}" for t in ("tea", "jazz", "chess", "rain")]
    assert "alice likes tea" in request["messages"][-1]["content"]


def test_a_refresh_that_takes_every_waiting_conclusion_leaves_no_age_behind(aws):
    """After a refresh the card's age starts again with the next conclusion (a card refreshed hours ago is not due
    at its session's first conclusion), and conclusions counted during the refresh wait from the refresh."""
    from precis.memory.dreams import DreamTarget
    from precis.store import dream_state
    from precis.store.db import get_db

    db, target = get_db(), DreamTarget("ws1", "alice", "alice")
    dream_state.count_fresh(db, target, 3, "2026-01-01T00:00:00+00:00", card=True)
    dream_state.card_refreshed(db, target, 3, "2026-01-01T01:00:00+00:00")
    state = dream_state.read(db, target) or {}
    assert (state["card_fresh"], "card_since" in state) == (0, False)
    after = dream_state.count_fresh(db, target, 1, "2026-01-01T05:00:00+00:00", card=True) or {}
    assert after["card_since"] == "2026-01-01T05:00:00+00:00"
    dream_state.count_fresh(db, target, 2, "2026-01-01T05:01:00+00:00", card=True)  # while a refresh reads 1
    dream_state.card_refreshed(db, target, 1, "2026-01-01T05:02:00+00:00")
    state = dream_state.read(db, target) or {}
    assert (state["card_fresh"], state["card_since"]) == (2, "2026-01-01T05:02:00+00:00")
