"""Derived memory through the honcho-ai SDK (2.7.0, unchanged) on the local stack, with no LLM configured:
conclusions appear within seconds of a message, are found by a question, and the queue reports the work done."""

from __future__ import annotations

import pytest
from honcho import Honcho
from honcho.http.exceptions import NotFoundError

from tests.stack import wait_for

pytestmark = pytest.mark.stack
STACK_ENV = {"PRECIS_LOCAL_SCHEDULE_S": "1"}


def test_a_statement_becomes_a_conclusion_the_question_finds_first(stack):
    honcho = Honcho(base_url=stack.url, api_key="local", workspace_id="derived")
    alice, bob = honcho.peer("alice"), honcho.peer("bob")
    session = honcho.session("s1")
    session.add_peers([alice, bob])
    session.add_messages(
        [
            bob.message("Where are you living these days?"),
            alice.message("I moved to Lisbon last spring. My sister is Ana. I like green tea."),
        ]
    )
    found = wait_for(lambda: alice.conclusions.query("where did alice move?"))
    assert found[0].content == "alice moved to Lisbon last spring"
    assert (found[0].observer_id, found[0].observed_id, found[0].session_id) == ("alice", "alice", "s1")
    status = wait_for(
        lambda: (
            (s := honcho.queue_status())
            and s.pending_work_units == 0
            and s.in_progress_work_units == 0
            and s.completed_work_units >= 1
            and s
        )
    )
    assert status.total_work_units == status.completed_work_units
    assert {c.content for c in alice.conclusions.list()} >= {
        "alice moved to Lisbon last spring",
        "alice's sister is Ana",
    }
    # bob does not observe others: he has no view of alice
    assert list(bob.conclusions_of(alice).list()) == []
    card = wait_for(lambda: alice.get_card())
    assert any("Ana" in entry for entry in card)


def test_the_sdk_creates_lists_gets_and_deletes_conclusions_and_sets_cards(stack):
    honcho = Honcho(base_url=stack.url, api_key="local", workspace_id="derived-crud")
    alice, bob = honcho.peer("alice"), honcho.peer("bob")
    honcho.session("s1").add_peers([alice, bob])
    view = bob.conclusions_of(alice)
    made = view.create(
        [{"content": "alice prefers short answers", "session_id": "s1"}, {"content": "alice is a vegetarian"}]
    )
    assert [c.content for c in made] == ["alice prefers short answers", "alice is a vegetarian"]
    assert made[0].session_id == "s1" and made[1].session_id is None
    assert [c.id for c in view.list()] == [made[1].id, made[0].id]  # newest first
    assert view.get(made[0].id).content == "alice prefers short answers"
    # A created conclusion is listed at once (the table), and found by a query once the vector index, which DynamoDB
    # fills asynchronously, holds it.
    assert wait_for(lambda: [c.id for c in view.query("vegetarian food")][:1] == [made[1].id])
    assert {c.id for c in view.get_many([made[0].id, made[1].id, "x" * 21])} == {made[0].id, made[1].id}
    view.delete(made[1].id)
    with pytest.raises(NotFoundError):
        view.get(made[1].id)
    assert [c.id for c in view.list()] == [made[0].id]
    assert [c.id for c in honcho.conclusions.list()] == [made[0].id]

    assert bob.get_card(target=alice) is None
    assert bob.set_card(["IDENTITY: alice is a nurse"], target=alice) == ["IDENTITY: alice is a nurse"]
    assert bob.get_card(target=alice) == ["IDENTITY: alice is a nurse"]
    assert alice.get_card() is None


def test_the_session_context_carries_the_representation_within_the_budget(stack):
    import httpx

    from precis.tokens import count_text

    honcho = Honcho(base_url=stack.url, api_key="local", workspace_id="derived-context")
    alice, bob = honcho.peer("alice"), honcho.peer("bob")
    session = honcho.session("s1")
    session.add_peers([alice, bob])
    session.add_messages(
        [
            alice.message("I moved to Lisbon last spring."),
            alice.message("My sister is Ana."),
            alice.message("I work as a nurse."),
        ]
    )
    wait_for(lambda: len(list(alice.conclusions.list())) == 3)
    context = session.context(tokens=300, peer_target="alice")
    lines = context.peer_representation.split("\n")
    assert lines[:2] == ["## Explicit Observations", ""]
    assert sorted(line.split("] ", 1)[1] for line in lines[2:]) == [
        "alice moved to Lisbon last spring",
        "alice works as a nurse",
        "alice's sister is Ana",
    ]
    assert all(line.startswith("[20") and line[20:22] == "] " for line in lines[2:])
    url = f"{stack.url}/v3/workspaces/derived-context/sessions/s1/context"
    for tokens in (300, 60):
        body = httpx.get(url, params={"tokens": tokens, "peer_target": "alice"}).json()
        card = body["peer_card"]
        assert (
            body["token_count"]
            == (
                count_text(body["peer_representation"])
                + (count_text("\n".join(card)) if card else 0)
                + sum(m["token_count"] for m in body["messages"])
            )
            <= tokens
        )
    assert body["representation_skipped"] > 0  # the 60-token answer holds fewer conclusions

    assert "Lisbon" in alice.representation()
    assert alice.representation(target=bob) == ""
    assert "Lisbon" in session.representation(alice)
    peer_context = alice.context(search_query="where does alice live", search_top_k=1)
    assert peer_context.target_id == "alice" and "Lisbon" in peer_context.representation


def test_scopes_through_the_sdk(stack):
    honcho = Honcho(base_url=stack.url, api_key="local", workspace_id="derived-scopes")
    alice = honcho.peer("alice")
    home, clinic = honcho.session("home"), honcho.session("clinic")
    home.add_messages([alice.message("I have a dog named Rover.")])
    clinic.add_messages([alice.message("I work as a nurse.")])
    wait_for(lambda: len(list(alice.conclusions.list())) == 2)
    therapy = honcho.scope("therapy", metadata={"kind": "care"})
    therapy.add_sessions([clinic])
    status = wait_for(lambda: (s := therapy.status()).get("clinic") and s["clinic"].state == "completed" and s)
    assert status["clinic"].docs_copied == 1
    assert [s.id for s in therapy.sessions()] == ["clinic"]
    seen = alice.representation(scope="therapy")
    assert "nurse" in seen and "Rover" not in seen
    context = clinic.context(peer_target="alice", scope="therapy")
    assert "nurse" in context.peer_representation
    later = honcho.session("later", scopes=["therapy"])
    later.add_messages([alice.message("My sister is Ana.")])
    wait_for(lambda: "Ana" in alice.representation(scope="therapy"))
    therapy.remove_session(clinic)
    wait_for(lambda: "nurse" not in alice.representation(scope="therapy"))
    assert [s.id for s in honcho.scopes()] == ["therapy"]


def test_search_through_the_sdk(stack):
    honcho = Honcho(base_url=stack.url, api_key="local", workspace_id="derived-search")
    alice, bob = honcho.peer("alice"), honcho.peer("bob")
    session, other = honcho.session("s1"), honcho.session("s2")
    session.add_messages([bob.message("Where do you live now?"), alice.message("I moved to Lisbon last spring.")])
    other.add_messages([bob.message("Lisbon has great tiles.", metadata={"topic": "travel"})])
    found = wait_for(lambda: (r := honcho.search("Lisbon")) and len(r) == 2 and r)
    assert {m.content for m in found} == {"I moved to Lisbon last spring.", "Lisbon has great tiles."}
    assert [m.content for m in session.search("Lisbon")] == ["I moved to Lisbon last spring."]
    assert [m.content for m in bob.search("Lisbon")] == ["Lisbon has great tiles."]
    assert [m.session_id for m in honcho.search("Lisbon", filters={"metadata": {"topic": "travel"}})] == ["s2"]
    assert honcho.search("moved", limit=1)[0].content == "I moved to Lisbon last spring."


def test_chat_offline_through_the_sdk(stack):
    from pydantic import BaseModel

    honcho = Honcho(base_url=stack.url, api_key="local", workspace_id="derived-chat")
    alice, bob = honcho.peer("alice"), honcho.peer("bob")
    session = honcho.session("s1")
    session.add_messages(
        [bob.message("Where are you living these days?"), alice.message("I moved to Lisbon last spring.")]
    )
    assert wait_for(lambda: honcho.search("Lisbon"))[0].content == "I moved to Lisbon last spring."
    wait_for(lambda: alice.get_card())  # the memory settles: the card follows the conclusions

    class Facts(BaseModel):
        facts: list[str]

    # "where?" shares no word with the conclusion: only the vector index finds it, once it holds it (DynamoDB fills
    # it asynchronously; a question the text index can answer may find the conclusion first, so it cannot wait here)
    wait_for(lambda: "alice moved to Lisbon last spring" in alice.chat("where?", response_format=Facts).facts)
    answer = alice.chat("where did alice move?")
    assert "- alice moved to Lisbon last spring" in answer.splitlines()  # (the card's IDENTITY line says it too)
    streamed = alice.chat_stream("where did alice move?", include_evidence=True)
    chunks = list(streamed)
    assert len(chunks) > 1 and "".join(chunks) == answer == streamed.get_final_response()["content"]
    assert any(c.content == "alice moved to Lisbon last spring" for c in streamed.evidence.conclusions)
    with_evidence = alice.chat("where did alice move?", session=session, include_evidence=True)
    # a session: only what was said in it (conclusions of s1, its messages; a card is not of one session)
    assert with_evidence.content == "From alice's memory of alice:\n- alice moved to Lisbon last spring"
    assert {m.session_id for m in with_evidence.evidence.messages} == {"s1"}

    assert "Lisbon" in honcho.chat("who moved to Lisbon?", reasoning_level="minimal")
    assert bob.chat("what does bob like?") is None  # nothing concluded about bob
