"""The async client of the honcho-ai SDK (2.7.0, unchanged: `honcho.aio`, `peer.aio`, `session.aio`, `scope.aio`,
`view.aio`, `honcho.aio.conclusions`) driving Precis end to end on the local stack, with no LLM configured.

The flow is a list of steps (`STEPS`), plain coroutines that take a `Honcho` client and assert what the SDK returns.
Each step names its own peers and sessions, so it runs alone or after the others in one workspace; what a step reads
workspace-wide (lists, search, chat, queue status) it narrows to its own ids or words. tests/sdk/test_sdk_surface.py
runs the same steps (and their sync twins) to show that every HTTP-making method of the SDK has a passing test.
"""

from __future__ import annotations

import asyncio
import io
import time

import pytest
from honcho import Honcho
from honcho.api_types import (
    PeerConfig,
    SessionConfiguration,
    SessionPeerConfig,
    SummaryConfiguration,
    WorkspaceConfiguration,
)
from honcho.http.exceptions import NotFoundError
from pydantic import BaseModel

pytestmark = pytest.mark.stack
STACK_ENV = {"PRECIS_LOCAL_SCHEDULE_S": "1"}


async def settled(probe, timeout: float = 30.0):
    """`tests.stack.wait_for`, awaited: poll the coroutine function `probe` until it returns something truthy (the
    stack's background work: summaries, conclusions, search vectors, backfills)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = await probe()
        if value:
            return value
        await asyncio.sleep(0.2)
    raise AssertionError(f"not true within {timeout} s")


async def listed(page) -> list:
    """Every item of an AsyncPage, following its next pages."""
    return [item async for item in await page]


async def workspace_settings_listing_and_deletion(honcho: Honcho) -> None:
    aio = honcho.aio
    await aio.get_metadata()  # get-or-create: PUT /workspaces/{ws} needs the workspace (Honcho answers 404 too)
    await aio.set_metadata({"team": "precis", "tags": ["a", {"b": 1}]})
    assert await aio.get_metadata() == {"team": "precis", "tags": ["a", {"b": 1}]}
    summary = SummaryConfiguration(enabled=True, messages_per_short_summary=20, messages_per_long_summary=60)
    await aio.set_configuration(WorkspaceConfiguration(summary=summary))
    assert (await aio.get_configuration()).summary == summary

    other = Honcho(base_url=honcho.base_url, api_key="local", workspace_id=honcho.workspace_id)
    await other.aio.set_metadata({"team": "precis", "edited": "elsewhere"})
    assert honcho.metadata == {"team": "precis", "tags": ["a", {"b": 1}]}  # cached until refreshed
    await aio.refresh()
    assert honcho.metadata == {"team": "precis", "edited": "elsewhere"} and honcho.configuration.summary == summary

    scratch_id = f"{honcho.workspace_id}-scratch"
    scratch = Honcho(base_url=honcho.base_url, api_key="local", workspace_id=scratch_id)
    await scratch.aio.peer("someone")
    first = await aio.workspaces(size=1)  # admin route; one a page, so the listing follows next pages
    assert len(first.items) == 1 and first.pages >= 2
    for _ in range(20):  # pages are numbered: a workspace purged between two pages shifts the rest; list again
        before = set(await listed(aio.workspaces()))
        paged = set(await listed(aio.workspaces(size=1)))
        if set(await listed(aio.workspaces())) == before:
            break
    assert {honcho.workspace_id, scratch_id} <= paged
    assert await listed(aio.workspaces(filters={"id": scratch_id})) == [scratch_id]
    await aio.delete_workspace(scratch_id)
    assert scratch_id not in await listed(aio.workspaces())
    assert honcho.workspace_id in await listed(aio.workspaces())


async def peers_get_or_create_settings_and_listing(honcho: Honcho) -> None:
    aio = honcho.aio
    alice = await aio.peer("peers-alice", metadata={"role": "tester"}, configuration=PeerConfig(observe_me=True))
    assert (alice.id, alice.metadata, alice.configuration.observe_me) == ("peers-alice", {"role": "tester"}, True)
    assert alice.created_at is not None
    again = await aio.peer("peers-alice")  # the same peer: get, not a new one
    assert again.metadata == {"role": "tester"} and again.created_at == alice.created_at

    await alice.aio.set_metadata({"role": "tester", "level": 2})
    assert await alice.aio.get_metadata() == {"role": "tester", "level": 2}
    await alice.aio.set_configuration(PeerConfig(observe_me=False))
    assert (await alice.aio.get_configuration()).observe_me is False
    await again.aio.refresh()
    assert again.metadata == {"role": "tester", "level": 2} and again.configuration.observe_me is False

    await aio.peer("peers-bob", metadata={"role": "tester"})
    await aio.peer("peers-carol", metadata={"role": "visitor"})
    testers = await listed(aio.peers(filters={"metadata": {"role": "tester"}}, size=1))
    assert sorted(p.id for p in testers) == ["peers-alice", "peers-bob"]
    assert [p.id for p in await listed(aio.peers(filters={"metadata": {"role": "tester"}}, reverse=True))] == [
        p.id for p in reversed(testers)
    ]


async def sessions_members_and_settings(honcho: Honcho) -> None:
    aio = honcho.aio
    session = await aio.session(
        "sessions-s1",
        metadata={"topic": "moving"},
        configuration=SessionConfiguration(summary=SummaryConfiguration(enabled=True)),
        peers=["sessions-alice", ("sessions-bob", SessionPeerConfig(observe_others=True))],
    )
    assert session.metadata == {"topic": "moving"} and session.configuration.summary.enabled is True
    assert session.is_active is True
    assert sorted(p.id for p in await session.aio.peers()) == ["sessions-alice", "sessions-bob"]
    assert (await session.aio.get_peer_configuration("sessions-bob")).observe_others is True

    carol = await aio.peer("sessions-carol")
    await session.aio.add_peers(carol)
    await session.aio.set_peer_configuration(carol, SessionPeerConfig(observe_me=False, observe_others=True))
    config = await session.aio.get_peer_configuration(carol)
    assert (config.observe_me, config.observe_others) == (False, True)
    await session.aio.remove_peers(["sessions-bob"])
    assert sorted(p.id for p in await session.aio.peers()) == ["sessions-alice", "sessions-carol"]
    await session.aio.set_peers(["sessions-bob", (carol, SessionPeerConfig(observe_me=True))])
    assert sorted(p.id for p in await session.aio.peers()) == ["sessions-bob", "sessions-carol"]
    assert (await session.aio.get_peer_configuration(carol)).observe_me is True
    assert [s.id for s in await listed(carol.aio.sessions())] == ["sessions-s1"]

    await session.aio.set_metadata({"topic": "moving", "stage": 2})
    assert await session.aio.get_metadata() == {"topic": "moving", "stage": 2}
    await session.aio.set_configuration(SessionConfiguration(summary=SummaryConfiguration(enabled=False)))
    assert (await session.aio.get_configuration()).summary.enabled is False
    stale = await aio.session("sessions-s1")
    await session.aio.set_metadata({"topic": "moved"})
    await stale.aio.refresh()
    assert stale.metadata == {"topic": "moved"} and stale.configuration.summary.enabled is False

    doomed = await aio.session("sessions-s2", metadata={"topic": "moved"})
    found = await listed(aio.sessions(filters={"metadata": {"topic": "moved"}}, size=1))
    assert sorted(s.id for s in found) == ["sessions-s1", "sessions-s2"]
    await doomed.aio.delete()
    assert [s.id for s in await listed(aio.sessions(filters={"metadata": {"topic": "moved"}}))] == ["sessions-s1"]
    with pytest.raises(NotFoundError):
        await doomed.aio.messages()


async def messages_listed_filtered_fetched_and_edited(honcho: Honcho) -> None:
    aio = honcho.aio
    alice, bob = await aio.peer("messages-alice"), await aio.peer("messages-bob")
    session = await aio.session("messages-s1")
    made = await session.aio.add_messages(
        [
            (alice if i % 2 else bob).message(f"message {i}", metadata={"i": i, "kind": "odd" if i % 2 else "even"})
            for i in range(7)
        ]
    )
    assert [m.content for m in made] == [f"message {i}" for i in range(7)]
    assert all(m.token_count > 0 and m.created_at and m.session_id == "messages-s1" for m in made)
    single = await session.aio.add_messages(alice.message("the last one", created_at="2025-03-01T10:00:00+00:00"))
    assert single[0].created_at.year == 2025

    everything = await listed(session.aio.messages(size=3))  # three pages
    assert [m.id for m in everything] == [m.id for m in made + single]
    newest = await session.aio.messages(size=2, reverse=True)
    assert [m.content for m in newest.items] == ["the last one", "message 6"]
    by_bob = await listed(session.aio.messages(filters={"peer_id": "messages-bob"}))
    assert [m.content for m in by_bob] == ["message 0", "message 2", "message 4", "message 6"]
    odd_late = await listed(session.aio.messages(filters={"metadata": {"kind": "odd", "i": {"gte": 3}}}))
    assert [m.content for m in odd_late] == ["message 3", "message 5"]

    fetched = await session.aio.get_message(made[3].id)
    assert (fetched.content, fetched.peer_id, fetched.metadata) == (
        "message 3",
        "messages-alice",
        {"i": 3, "kind": "odd"},
    )
    updated = await session.aio.update_message(made[3], {"reviewed": True})
    assert updated.metadata == {"reviewed": True} and updated.content == "message 3"
    assert (await session.aio.update_message(made[4].id, {"starred": 1})).metadata == {"starred": 1}
    assert (await session.aio.get_message(made[3].id)).metadata == {"reviewed": True}
    with pytest.raises(NotFoundError):
        await session.aio.get_message("x" * 21)

    status = await settled(lambda: _drained(session.aio.queue_status()))
    assert status.total_work_units == status.completed_work_units
    assert (await session.aio.queue_status(observer=alice, sender="messages-alice")).pending_work_units == 0


async def _drained(status_call):
    status = await status_call
    return status.pending_work_units == 0 and status.in_progress_work_units == 0 and status


async def context_and_summaries(honcho: Honcho) -> None:
    aio = honcho.aio
    alice, bot = await aio.peer("context-alice"), await aio.peer("context-bot")
    session = await aio.session("context-s1")
    turns = [
        (alice if i % 2 else bot).message(f"Turn {i}: we agreed to spend {i * 10} euros on item {i}.")
        for i in range(22)
    ]
    made = await session.aio.add_messages(turns[:20])
    before = await session.aio.context(tokens=made[-1].token_count)
    assert [m.id for m in before.messages] == [made[-1].id]

    summaries = await settled(lambda: _short_summary(session))
    made += await session.aio.add_messages(turns[20:])
    assert summaries.id == "context-s1" and summaries.long_summary is None
    assert summaries.short_summary.message_id == made[19].id  # cadence: the short summary covers #20
    assert summaries.short_summary.summary_type == "honcho_chat_summary_short"
    assert summaries.short_summary.token_count > 0 and summaries.short_summary.content
    context = await session.aio.context(tokens=2000)
    assert context.summary is not None and context.summary.message_id == made[19].id
    assert [m.id for m in context.messages] == [m.id for m in made[20:]]
    assert [m["role"] for m in context.to_openai(assistant=bot)] == ["system", "assistant", "user"]
    assert (await session.aio.context(summary=False)).summary is None


async def _short_summary(session):
    summaries = await session.aio.summaries()
    return summaries.short_summary and summaries


async def clones_with_and_without_a_cut(honcho: Honcho) -> None:
    aio = honcho.aio
    alice, bob = await aio.peer("clone-alice"), await aio.peer("clone-bob")
    session = await aio.session(
        "clone-s1", metadata={"topic": "moving"}, peers=[alice, (bob, SessionPeerConfig(observe_others=True))]
    )
    made = await session.aio.add_messages(
        [
            alice.message("I moved to Lisbon last spring."),
            bob.message("How do you like it?"),
            alice.message("The light is wonderful."),
            bob.message("And the food?"),
        ]
    )

    cut = await session.aio.clone(message_id=made[1].id)
    assert cut.id != "clone-s1" and cut.metadata == {"topic": "moving"} and cut.created_at is not None
    assert [m.id for m in await listed(cut.aio.messages())] == [m.id for m in made[:2]]
    assert {m.session_id for m in await listed(cut.aio.messages())} == {cut.id}
    with pytest.raises(NotFoundError):
        await cut.aio.get_message(made[2].id)

    whole = await session.aio.clone()
    assert whole.id not in ("clone-s1", cut.id)
    assert [m.content for m in await listed(whole.aio.messages())] == [m.content for m in made]
    assert (await whole.aio.get_message(made[3].id)).content == "And the food?"
    assert sorted(p.id for p in await whole.aio.peers()) == ["clone-alice", "clone-bob"]
    assert (await whole.aio.get_peer_configuration(bob)).observe_others is True
    assert [m.id for m in (await whole.aio.context()).messages] == [m.id for m in made]

    await cut.aio.add_messages(alice.message("Actually, Porto."))
    assert [m.content for m in await listed(cut.aio.messages())] == [
        "I moved to Lisbon last spring.",
        "How do you like it?",
        "Actually, Porto.",
    ]
    assert len(await listed(session.aio.messages())) == 4  # the parent is untouched


async def file_upload(honcho: Honcho) -> None:
    aio = honcho.aio
    alice = await aio.peer("upload-alice")
    session = await aio.session("upload-s1")
    notes = "# Notes\n\nThe tram climbs the hill.\n\nFado started in Alfama."
    made = await session.aio.upload_file(
        ("notes.md", notes.encode(), "text/markdown"),
        alice,
        metadata={"source": "notes"},
        created_at="2025-03-01T10:00:00+00:00",
    )
    assert "".join(m.content for m in made).replace("\n", "") == notes.replace("\n", "")
    assert all(m.peer_id == "upload-alice" and m.metadata == {"source": "notes"} for m in made)
    assert all(m.created_at.year == 2025 for m in made)
    plain = io.BytesIO(b"One line of plain text.")
    plain.name = "plain.txt"  # a file object: the SDK takes the type from the name
    (line,) = await session.aio.upload_file(plain, "upload-alice")
    assert line.content == "One line of plain text."
    assert [m.id for m in await listed(session.aio.messages())] == [m.id for m in made] + [line.id]


async def conclusions_created_listed_queried_and_deleted(honcho: Honcho) -> None:
    aio = honcho.aio
    alice, bob = await aio.peer("conc-alice"), await aio.peer("conc-bob")
    await aio.session("conc-s1", peers=[alice, bob])
    view = bob.conclusions_of(alice).aio
    made = await view.create(
        [
            {"content": "conc-alice prefers short answers", "session_id": "conc-s1"},
            {"content": "conc-alice is a vegetarian"},
        ]
    )
    assert [c.content for c in made] == ["conc-alice prefers short answers", "conc-alice is a vegetarian"]
    assert (made[0].observer_id, made[0].observed_id, made[0].session_id) == ("conc-bob", "conc-alice", "conc-s1")
    assert made[1].session_id is None and made[0].level == "explicit"
    # found by meaning as soon as the create answers, although DynamoDB fills the vector index asynchronously (the
    # stack: half a second later): within a distance, only the semantic ranking can find it (issue 47)
    assert await _first(view.query("vegetarian food", top_k=1, distance=0.8), made[1].id)

    assert [c.id for c in await listed(view.list())] == [made[1].id, made[0].id]  # newest first
    assert [c.id for c in await listed(view.list(size=1, reverse=True))] == [made[0].id, made[1].id]
    assert [c.id for c in await listed(view.list(session="conc-s1"))] == [made[0].id]
    assert (await view.get(made[0].id)).content == "conc-alice prefers short answers"
    assert await _first(view.query("vegetarian food", top_k=1), made[1].id)
    many = await view.get_many([made[0].id, made[1].id, "x" * 21])
    assert {c.id for c in many} == {made[0].id, made[1].id}
    # offline, nothing is deduced: no conclusion names these as premises (the llm engine's are tested with the
    # local model in tests/chat/test_chat_sdk.py)
    assert await listed(view.derived(made[0].id)) == []
    represented = await view.representation(search_query="food", max_conclusions=10)
    assert represented.startswith("## Explicit Observations") and "conc-alice is a vegetarian" in represented

    everywhere = honcho.aio.conclusions
    assert {c.id for c in await listed(everywhere.list(filters={"observer_id": "conc-bob"}))} == {c.id for c in made}
    assert (await everywhere.get(made[1].id)).observed_id == "conc-alice"
    assert {c.id for c in await everywhere.get_many([made[0].id])} == {made[0].id}

    await view.delete(made[1].id)
    with pytest.raises(NotFoundError):
        await view.get(made[1].id)
    assert [c.id for c in await listed(view.list())] == [made[0].id]

    assert await bob.aio.get_card(target=alice) is None
    assert await bob.aio.set_card(["IDENTITY: conc-alice is a nurse"], target=alice) == [
        "IDENTITY: conc-alice is a nurse"
    ]
    assert await bob.aio.get_card(target="conc-alice") == ["IDENTITY: conc-alice is a nurse"]
    with pytest.deprecated_call():
        assert await bob.aio.card(target=alice) == ["IDENTITY: conc-alice is a nurse"]
    assert await bob.aio.set_card(["ATTRIBUTE: conc-bob keeps notes"]) == ["ATTRIBUTE: conc-bob keeps notes"]
    assert await bob.aio.get_card() == ["ATTRIBUTE: conc-bob keeps notes"]


async def derived_memory_representation_and_context(honcho: Honcho) -> None:
    aio = honcho.aio
    alice, bob = await aio.peer("memory-alice"), await aio.peer("memory-bob")
    session = await aio.session("memory-s1", peers=[alice, bob])
    await session.aio.add_messages(
        [
            bob.message("Where are you living these days?"),
            alice.message("I moved to Lisbon last spring. My sister is Ana."),
        ]
    )
    found = await settled(lambda: alice.conclusions.aio.query("where did memory-alice move?"))
    assert found[0].content == "memory-alice moved to Lisbon last spring"
    assert (found[0].observer_id, found[0].observed_id, found[0].session_id) == (
        "memory-alice",
        "memory-alice",
        "memory-s1",
    )
    card = await settled(lambda: alice.aio.get_card())
    assert any("Ana" in entry for entry in card)

    mine = await alice.aio.representation()
    assert mine.startswith("## Explicit Observations") and "memory-alice moved to Lisbon last spring" in mine
    assert "Lisbon" in await alice.aio.representation(session=session, search_query="Lisbon", max_conclusions=5)
    assert await alice.aio.representation(target=bob) == ""  # alice does not observe others
    peer_context = await alice.aio.context(search_query="where does memory-alice live", search_top_k=1)
    assert (peer_context.peer_id, peer_context.target_id) == ("memory-alice", "memory-alice")
    assert "Lisbon" in peer_context.representation and peer_context.peer_card == card
    assert "Lisbon" in await session.aio.representation(alice, search_query="Lisbon")
    context = await session.aio.context(tokens=500, peer_target="memory-alice", search_query="Lisbon")
    assert "memory-alice moved to Lisbon last spring" in context.peer_representation
    assert [m.peer_id for m in context.messages] == ["memory-bob", "memory-alice"]


async def search_workspace_session_and_peer(honcho: Honcho) -> None:
    aio = honcho.aio
    alice, bob = await aio.peer("search-alice"), await aio.peer("search-bob")
    session, other = await aio.session("search-s1"), await aio.session("search-s2")
    await session.aio.add_messages(
        [bob.message("Do you make marmalade?"), alice.message("I make bitter marmalade every winter.")]
    )
    await other.aio.add_messages(
        [bob.message("Seville oranges make the best marmalade.", metadata={"topic": "kitchen"})]
    )
    found = await settled(lambda: _found(aio.search("marmalade"), 3))
    assert {m.session_id for m in found} == {"search-s1", "search-s2"}
    assert [m.content for m in await session.aio.search("bitter marmalade")][0] == (
        "I make bitter marmalade every winter."
    )
    assert {m.content for m in await alice.aio.search("marmalade")} == {"I make bitter marmalade every winter."}
    assert [m.session_id for m in await aio.search("marmalade", filters={"metadata": {"topic": "kitchen"}})] == [
        "search-s2"
    ]
    assert len(await bob.aio.search("marmalade", limit=1)) == 1


async def _says(chat_call, fact: str):
    """The chat's answer once it holds `fact`'s own line (the card's IDENTITY line says it too)."""
    answer = await chat_call
    return f"- {fact}" in answer.splitlines() and answer


async def _has_fact(chat_call, fact: str) -> bool:
    return fact in (await chat_call).facts


async def _first(query_call, conclusion_id: str) -> bool:
    return [c.id for c in await query_call][:1] == [conclusion_id]


async def _found(search_call, count: int):
    found = await search_call
    return len(found) == count and found


class Facts(BaseModel):
    facts: list[str]


async def chat_and_streaming_offline(honcho: Honcho) -> None:
    aio = honcho.aio
    alice, bob = await aio.peer("chat-alice"), await aio.peer("chat-bob")
    session = await aio.session("chat-s1")
    await session.aio.add_messages(
        [bob.message("Where are you living these days?"), alice.message("I moved to Tallinn last spring.")]
    )
    await settled(lambda: _found(aio.search("Tallinn"), 1))
    await settled(lambda: alice.aio.get_card())  # the memory settles: the card follows the conclusions
    fact = "chat-alice moved to Tallinn last spring"

    answer = await settled(lambda: _says(alice.aio.chat("where did chat-alice move?"), fact))  # found by its words
    # A question of stopwords only ("what?") finds it by meaning alone: once the vector index, filled
    # asynchronously, holds it too.
    await settled(lambda: _has_fact(alice.aio.chat("what?", response_format=Facts), fact))
    streamed = await alice.aio.chat_stream("where did chat-alice move?", include_evidence=True)
    chunks = [chunk async for chunk in streamed]
    assert len(chunks) > 1 and "".join(chunks) == answer == streamed.get_final_response()["content"]
    assert streamed.is_complete and any(c.content == fact for c in streamed.evidence.conclusions)
    in_session = await alice.aio.chat(
        "where did chat-alice move?", session=session, include_evidence=True, reasoning_level="minimal"
    )
    assert in_session.content == f"From chat-alice's memory of chat-alice:\n- {fact}"
    assert {m.session_id for m in in_session.evidence.messages} == {"chat-s1"}
    assert fact in (await alice.aio.chat("what?", response_format=Facts)).facts
    assert await bob.aio.chat("what does chat-bob like?") is None  # nothing concluded about bob

    assert "Tallinn" in await aio.chat("who moved to Tallinn?", reasoning_level="minimal")
    everyone = await aio.chat_stream("who moved to Tallinn?")
    assert "Tallinn" in "".join([chunk async for chunk in everyone])


async def queue_status_and_dreams(honcho: Honcho) -> None:
    aio = honcho.aio
    alice = await aio.peer("dream-alice")
    session = await aio.session("dream-s1")
    await session.aio.add_messages([alice.message("I work as a nurse."), alice.message("I have a dog named Rover.")])
    stated = await settled(lambda: _conclusions(alice, 2))
    status = await settled(lambda: _drained(aio.queue_status()))
    assert status.total_work_units == status.completed_work_units >= 1
    mine = await aio.queue_status(observer=alice, sender="dream-alice", session=session)
    assert mine.pending_work_units == 0 and mine.completed_work_units >= 1
    assert (await session.aio.queue_status()).pending_work_units == 0

    await aio.schedule_dream(alice, session=session, observed=alice)
    await aio.schedule_dream("dream-alice")
    await settled(lambda: _drained(aio.queue_status(observer=alice)))
    # the extractive engine's dream refreshes the card and never deletes a stated conclusion
    assert {c.id for c in await listed(alice.conclusions.aio.list())} >= {c.id for c in stated}
    assert await alice.aio.get_card()


async def _conclusions(peer, count: int):
    found = await listed(peer.conclusions.aio.list())
    return len(found) >= count and found


async def scopes_membership_backfill_and_views(honcho: Honcho) -> None:
    aio = honcho.aio
    alice = await aio.peer("scope-alice")
    home, clinic = await aio.session("scope-home"), await aio.session("scope-clinic")
    await home.aio.add_messages([alice.message("I have a cat named Miso.")])
    await clinic.aio.add_messages([alice.message("I work as a surgeon.")])
    await settled(lambda: _conclusions(alice, 2))

    care = await aio.scope("scope-care", metadata={"kind": "care"})
    assert (care.id, care.metadata) == ("scope-care", {"kind": "care"}) and care.created_at is not None
    await aio.scope("scope-empty")
    got = await aio.get_scope("scope-care")
    assert got.metadata == {"kind": "care"}
    with pytest.raises(NotFoundError):
        await aio.get_scope("scope-nowhere")
    assert sorted(s.id for s in await listed(aio.scopes(size=1))) == ["scope-care", "scope-empty"]

    await care.aio.add_sessions([clinic])
    status = await settled(lambda: _backfilled(care, "scope-clinic"))
    assert status["scope-clinic"].docs_copied == 1
    assert [s.id for s in await listed(care.aio.sessions())] == ["scope-clinic"]
    seen = await alice.aio.representation(scope="scope-care")
    assert "surgeon" in seen and "Miso" not in seen
    assert "surgeon" in (await clinic.aio.context(peer_target="scope-alice", scope=care)).peer_representation

    later = await aio.session("scope-later", scopes=[care])
    await later.aio.add_messages([alice.message("My brother is Tomas.")])
    await settled(lambda: _seen(alice, "Tomas"))
    assert sorted(s.id for s in await listed(care.aio.sessions(size=1))) == ["scope-clinic", "scope-later"]
    await care.aio.remove_session(clinic)
    await settled(lambda: _seen(alice, "surgeon", False))
    assert [s.id for s in await listed(care.aio.sessions())] == ["scope-later"]


async def _backfilled(scope, session_id: str):
    status = await scope.aio.status()
    return session_id in status and status[session_id].state == "completed" and status


async def _seen(peer, word: str, present: bool = True):
    return (word in await peer.aio.representation(scope="scope-care")) == present


STEPS = (
    workspace_settings_listing_and_deletion,
    peers_get_or_create_settings_and_listing,
    sessions_members_and_settings,
    messages_listed_filtered_fetched_and_edited,
    context_and_summaries,
    clones_with_and_without_a_cut,
    file_upload,
    conclusions_created_listed_queried_and_deleted,
    derived_memory_representation_and_context,
    search_workspace_session_and_peer,
    chat_and_streaming_offline,
    queue_status_and_dreams,
    scopes_membership_backfill_and_views,
)


def run_step(step, url: str, workspace_id: str) -> None:
    """Run one step of the flow on its own event loop, with a client of its own."""
    asyncio.run(step(Honcho(base_url=url, api_key="local", workspace_id=workspace_id)))


@pytest.mark.parametrize("step", STEPS, ids=[step.__name__ for step in STEPS])
def test_the_async_client_end_to_end(stack, step):
    run_step(step, stack.url, "aio-flow")
