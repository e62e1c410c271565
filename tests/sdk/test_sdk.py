"""The honcho-ai SDK (2.7.0, unchanged) driving Precis through the local stack, as `make dev` runs it."""

from __future__ import annotations

import pytest
from honcho import Honcho
from honcho.http.exceptions import AuthenticationError, PermissionDeniedError

from precis.auth import mint_key
from precis.tokens import count_text
from tests.stack import Stack, wait_for

pytestmark = pytest.mark.stack
SECRET = "sdk-test-secret-0123456789abcdef"


def test_sdk_flow_over_workspaces_peers_sessions_and_messages(stack):
    client = Honcho(base_url=stack.url, api_key="local", workspace_id="sdk-flow")
    alice = client.peer("alice", metadata={"role": "user", "tags": ["a", {"b": 1}]})
    bot = client.peer("bot")
    session = client.session("s1", metadata={"topic": "moving"})
    session.add_peers([alice, bot])
    for start in range(0, 120, 40):
        session.add_messages(
            [(alice if i % 2 else bot).message(f"message {i}", metadata={"i": i}) for i in range(start, start + 40)]
        )
    listed = list(session.messages())  # 50 a page: three pages
    assert [m.content for m in listed] == [f"message {i}" for i in range(120)]
    assert all(m.token_count > 0 and m.created_at for m in listed)

    fetched = session.get_message(listed[7].id)
    assert fetched.content == "message 7" and fetched.metadata == {"i": 7}
    updated = session.update_message(listed[7], {"reviewed": True, "nested": {"x": [1, 2]}})
    assert updated.metadata == {"reviewed": True, "nested": {"x": [1, 2]}}
    assert session.get_message(listed[7].id).metadata == updated.metadata

    assert alice.get_metadata() == {"role": "user", "tags": ["a", {"b": 1}]}
    assert session.get_metadata() == {"topic": "moving"}
    assert sorted(p.id for p in session.peers()) == ["alice", "bot"]
    assert [s.id for s in client.sessions()] == ["s1"]
    assert sorted(p.id for p in client.peers()) == ["alice", "bot"]
    assert [s.id for s in alice.sessions()] == ["s1"]

    session.delete()
    assert [s.id for s in client.sessions()] == []


def test_one_sessions_queue_status_is_flat_with_sessions_null_and_a_workspaces_keeps_its_map(stack):
    client = Honcho(base_url=stack.url, api_key="local", workspace_id="sdk-queue")
    alice = client.peer("alice")
    session = client.session("s1")
    session.add_messages([alice.message("I moved to Lisbon last spring."), alice.message("I have a dog, Rover.")])
    status = session.queue_status()
    assert status.sessions is None  # Honcho's answer for one session: its counts, flattened
    assert status.total_work_units >= 2 and status.pending_work_units + status.in_progress_work_units >= 1
    by_sender = session.queue_status(sender="alice")
    assert by_sender.sessions is None and by_sender.total_work_units == 2
    done = wait_for(
        lambda: (
            (s := session.queue_status(observer="alice")).pending_work_units == 0
            and s.in_progress_work_units == 0
            and s
        ),
        timeout=60,
    )
    assert done.sessions is None and done.completed_work_units == 2
    workspace = wait_for(lambda: (w := client.queue_status()).sessions and w, timeout=60)
    assert set(workspace.sessions) == {"s1"} and workspace.sessions["s1"].completed_work_units == 2


def test_sdk_context_summaries_and_openai_format(stack):
    client = Honcho(base_url=stack.url, api_key="local", workspace_id="sdk-context")
    alice, bot = client.peer("alice"), client.peer("bot")
    session = client.session("chat")
    session.add_messages(
        [
            alice.message("I moved to Lisbon last spring and I love the light."),
            bot.message("Lisbon light is famous. What brought you there?"),
            alice.message("A job at a small design studio near the river."),
        ]
    )
    last = "A job at a small design studio near the river."
    small = session.context(tokens=count_text(last))
    assert [m.content for m in small.messages] == [last]
    full = session.context()
    assert len(full.messages) == 3 and full.summary is None
    openai_messages = full.to_openai(assistant=bot)
    assert [m["role"] for m in openai_messages] == ["user", "assistant", "user"]
    summaries = session.summaries()
    assert summaries.short_summary is None and summaries.long_summary is None


def test_sixty_messages_get_short_and_long_summaries_offline(stack):
    client = Honcho(base_url=stack.url, api_key="local", workspace_id="sdk-summaries")
    alice, bot = client.peer("alice"), client.peer("bot")
    session = client.session("long")
    for start in range(0, 60, 20):
        session.add_messages(
            [
                (alice if i % 2 else bot).message(
                    f"Turn {i}: we discussed the budget for item {i} and decided to spend {i * 10} euros."
                )
                for i in range(start, start + 20)
            ]
        )
    # The design's 5 s freshness holds on an idle machine; the suite runs beside other work, hence the slack.
    summaries = wait_for(lambda: (s := session.summaries()).long_summary and s.short_summary and s, 60)
    last = list(session.messages(reverse=True, size=1))[0]
    assert summaries.short_summary.message_id == last.id == summaries.long_summary.message_id
    assert summaries.long_summary.summary_type == "honcho_chat_summary_long"
    assert summaries.short_summary.token_count > 0
    # The summaries cover every message, and all 60 fit: the context shows them, not a summary in their place.
    context = session.context(tokens=2000)
    assert context.summary is None and [m.id for m in context.messages][-1] == last.id
    assert len(context.messages) == 60
    # A budget the messages do not fit still keeps the newest verbatim (no summary leaves it room here).
    context = session.context(tokens=300)
    assert context.messages and context.messages[-1].id == last.id


def test_precis_only_settings_never_break_the_sdk(stack):
    client = Honcho(base_url=stack.url, api_key="local", workspace_id="sdk-settings")
    import httpx

    assert httpx.post(f"{stack.url}/v3/workspaces", json={"id": "sdk-settings"}).status_code == 201
    created = httpx.post(
        f"{stack.url}/v3/workspaces/sdk-settings/sessions",
        json={
            "id": "rolling",
            "configuration": {
                "summary": {"messages_per_short_summary": 15},
                "summarizer": {"strategy": "rolling", "token_threshold": 500},
            },
        },
    )
    assert created.status_code == 201
    session = client.session("rolling")
    configuration = session.get_configuration()
    assert configuration.summary.messages_per_short_summary == 15
    assert [s.id for s in client.sessions()] == ["rolling"]


def test_sdk_with_a_workspace_key_when_auth_is_on(tmp_path):
    running = Stack(tmp_path, env={"PRECIS_AUTH": "true", "PRECIS_JWT_SECRET": SECRET})
    try:
        running.wait_healthy()
        assert "admin key:" in running.log.read_text()
        client = Honcho(base_url=running.url, api_key=mint_key(SECRET, workspace="team"), workspace_id="team")
        session = client.session("s1")
        session.add_messages([client.peer("alice").message("hello with a key")])
        assert [m.content for m in session.context(tokens=100).messages] == ["hello with a key"]
        outsider = Honcho(
            base_url=running.url, api_key=mint_key(SECRET, workspace="other"), workspace_id="team", max_retries=0
        )
        with pytest.raises(PermissionDeniedError):
            outsider.session("s1").context()
        nobody = Honcho(base_url=running.url, api_key="not-a-key", workspace_id="team", max_retries=0)
        with pytest.raises(AuthenticationError):
            nobody.session("s1").context()
    finally:
        running.stop()


def test_sixty_messages_get_llm_summaries_through_the_local_llm_server(tmp_path):
    from local.models.llm_server import LLMServer

    with LLMServer() as llm:
        llm.script(["429", "500"])  # the first call is throttled, then fails; the engine retries past both
        running = Stack(
            tmp_path, env={"OPENAI_BASE_URL": llm.url, "OPENAI_API_KEY": "test", "PRECIS_LLM_MODEL": "local-model"}
        )
        try:
            running.wait_healthy()
            client = Honcho(base_url=running.url, api_key="local", workspace_id="sdk-llm")
            alice = client.peer("alice")
            session = client.session("long")

            def post(first: int, last: int) -> None:
                session.add_messages(
                    [alice.message(f"Olá! Mensagem {i} sobre o orçamento.") for i in range(first, last)]
                )

            post(0, 20)
            wait_for(lambda: session.summaries().short_summary, 30)
            post(20, 60)
            got = wait_for(
                lambda: (
                    (s := session.summaries()).long_summary
                    and s.short_summary
                    and s.short_summary.message_id == s.long_summary.message_id
                    and s
                ),
                30,
            )
            assert got.short_summary.content and got.long_summary.content
            bodies = [r.body for r in llm.requests if r.mode == "ok"]
            assert {b["model"] for b in bodies} == {"local-model"}
            assert all("max_tokens" in b for b in bodies)
            # incremental: a later short summary sends the previous one and only the messages after it
            later = [b for b in bodies if "<previous_summary>" in b["messages"][-1]["content"]]
            assert later and "Mensagem 5 " not in later[-1]["messages"][-1]["content"].split("</previous_summary>")[1]
            post(60, 61)  # a message after the summaries (through #60): the context holds the summary and it
            context = session.context(tokens=4000)
            assert context.summary is not None and context.summary.message_id == got.short_summary.message_id
            assert [m.content for m in context.messages] == ["Olá! Mensagem 60 sobre o orçamento."]
        finally:
            running.stop()


def test_a_failing_llm_dead_letters_the_records_and_loses_nothing(tmp_path):
    import json

    from local.models.llm_server import LLMServer
    from local.moto_backend import client as aws_client

    with LLMServer(mode="500") as llm:
        running = Stack(
            tmp_path,
            env={
                "OPENAI_BASE_URL": llm.url,
                "OPENAI_API_KEY": "test",
                "PRECIS_LLM_MAX_ATTEMPTS": "1",
                "PRECIS_LLM_TIMEOUT_S": "2",
            },
        )
        try:
            running.wait_healthy()
            client = Honcho(base_url=running.url, api_key="local", workspace_id="sdk-dlq")
            session = client.session("s1")
            posted = session.add_messages([client.peer("alice").message(f"note {i}") for i in range(20)])
            sqs = aws_client("sqs", json.loads(running.dev_json.read_text())["moto_endpoint"])
            queue = sqs.get_queue_url(QueueName="precis-summarize-dlq-local")["QueueUrl"]

            def dead_letters():
                return sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10).get("Messages")

            letters = wait_for(dead_letters, 60)
            info = json.loads(letters[0]["Body"])["DDBStreamBatchInfo"]
            assert info["batchSize"] >= 1
            assert info["streamArn"].startswith("arn:aws:dynamodb:us-east-1:123456789012:table/precis-local/stream/")
            assert len(llm.requests) >= 4  # the first try and three retries, at least
            assert session.summaries().short_summary is None  # no error text stored as a summary
            assert [m.id for m in session.messages()] == [m.id for m in posted]
        finally:
            running.stop()


def test_a_message_is_found_by_every_search_route_as_soon_as_its_post_answers(stack):
    """No waiting for the deriver nor for the vector index (which DynamoDB fills asynchronously; the stack: half a
    second later): BM25 reads the texts the post wrote, with consistent reads (issue 47)."""
    client = Honcho(base_url=stack.url, api_key="local", workspace_id="sdk-search-now")
    alice = client.peer("alice")
    session = client.session("s1")
    session.add_messages(
        [alice.message("We had gelato by the river in Florence."), alice.message("The train was late again.")]
    )
    said = "We had gelato by the river in Florence."
    assert [m.content for m in session.search("gelato")] == [said]
    assert [m.content for m in client.search("gelato")] == ["We had gelato by the river in Florence."]
    assert [m.content for m in alice.search("gelato")] == ["We had gelato by the river in Florence."]


def test_the_context_with_a_search_query_recalls_what_the_newest_window_lacks(stack):
    """Recall: the message that answers the question is far older than the newest window; with search_query the
    SDK's context holds it (first, in time order), within the budget."""
    client = Honcho(base_url=stack.url, api_key="local", workspace_id="sdk-recall")
    alice, bot = client.peer("alice"), client.peer("bot")
    session = client.session("s1")
    filler = [
        "How was the commute today?",
        "Busy, the bridge was closed again.",
        "Did the printer get fixed?",
        "Not yet, IT said maybe tomorrow.",
        "Lunch at the usual place?",
        "Sure, around one.",
    ]
    turns = [alice.message("My sister Maria adopted a greyhound called Biscuit from the shelter.")]
    turns += [(alice if i % 2 else bot).message(f"{filler[i % len(filler)]} ({i})") for i in range(299)]
    for start in range(0, len(turns), 100):
        session.add_messages(turns[start : start + 100])
    newest = session.context(tokens=2000)
    assert not any("Biscuit" in m.content for m in newest.messages)
    found = wait_for(
        lambda: (
            (answer := session.context(tokens=2000, peer_target="alice", search_query="What dog did Maria adopt?"))
            and "Biscuit" in answer.messages[0].content
            and answer
        )
    )  # once the index holds the message
    assert sum(m.token_count for m in found.messages) <= 2000


def test_the_sdks_context_recalls_from_the_peers_earlier_sessions(stack):
    """The answer was said in alice's session of last month; the context of today's session, with search_query and
    peer_target, holds it with its session id and date, through the SDK's own models."""
    client = Honcho(base_url=stack.url, api_key="local", workspace_id="sdk-history")
    alice, bot = client.peer("alice"), client.peer("bot")
    earlier, today = client.session("march"), client.session("april")
    earlier.add_messages(
        [
            alice.message(
                "My sister Maria adopted a greyhound called Biscuit from the shelter.",
                created_at="2026-03-02T10:00:00Z",
            ),
            bot.message("What a lovely name!", created_at="2026-03-02T10:01:00Z"),
        ]
    )
    today.add_messages([(alice if i % 2 else bot).message(f"How was the commute today? ({i})") for i in range(40)])
    found = wait_for(
        lambda: (
            (answer := today.context(tokens=300, peer_target="alice", search_query="What dog did Maria adopt?"))
            and any("Biscuit" in m.content for m in answer.messages)
            and answer
        )
    )
    recalled = next(m for m in found.messages if "Biscuit" in m.content)
    assert recalled.session_id == "march" and recalled.created_at.isoformat().startswith("2026-03-02")
    assert found.messages[0].id == recalled.id  # recalled first, then the newest window of today's session
    assert {m.session_id for m in found.messages[1:]} == {"april"}
    assert sum(m.token_count for m in found.messages) <= 300
