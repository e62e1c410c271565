"""A quiet session ends its batches: the llm deriver's wake-ups on SQS (moto), through the real `openai` client
against the local server. The stream sends one wake-up per llm session, delayed PRECIS_DERIVE_QUIET_S; a wake-up that
finds no newer message derives what waits, one that finds a newer message leaves it to that message's wake-up."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from local.sqs_poller import lambda_record
from tests.handlers import call, invoke
from tests.memory.test_deriver_llm import LONG, chat_requests, derive, explicit, found, post
from tests.stream import message_records

W = "/v3/workspaces/ws1"
QUEUE = "precis-derive-wake-local"
ARN = f"arn:aws:sqs:us-east-1:123456789012:{QUEUE}"


@pytest.fixture
def ws(aws, llm_server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", llm_server.url)
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("PRECIS_LLM_MAX_ATTEMPTS", "2")
    monkeypatch.setenv("PRECIS_LLM_TIMEOUT_S", "5")
    monkeypatch.setenv("PRECIS_DERIVE_BATCH_TOKENS", "512")  # (the default, 2,048, would take 3 times the text)
    monkeypatch.setenv("PRECIS_DERIVE_QUIET_S", "1")
    monkeypatch.setenv("PRECIS_DERIVE_WAKE_QUEUE_URL", aws["sqs"].get_queue_url(QueueName=QUEUE)["QueueUrl"])
    llm_server.answer = explicit("alice moved to Lisbon in spring 2026")
    assert call("POST", "/v3/workspaces", {"id": "ws1"}).status == 201
    return aws


def queued(sqs) -> dict[str, int]:
    url = sqs.get_queue_url(QueueName=QUEUE)["QueueUrl"]
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    return {k: int(attributes[k]) for k in ("ApproximateNumberOfMessages", "ApproximateNumberOfMessagesDelayed")}


def wakeups(sqs, count: int = 1, deadline_s: float = 30.0) -> list[dict]:
    """The next `count` wake-ups, received once their delay has passed, as Lambda's SQS records."""
    url = sqs.get_queue_url(QueueName=QUEUE)["QueueUrl"]
    got: list[dict] = []
    deadline = time.monotonic() + deadline_s
    while len(got) < count and time.monotonic() < deadline:
        answer = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"])
        got += answer.get("Messages", [])
        if len(got) < count:
            time.sleep(0.1)
    assert len(got) == count, f"{len(got)} wake-up(s) within {deadline_s} s, wanted {count}"
    return [lambda_record(m, ARN) for m in got]


def wake(records: list[dict]) -> dict:
    return invoke("DeriveFunction", {"Records": records})


def pending(session: str = "s1") -> int:
    return call("GET", f"{W}/queue/status?session_id={session}").body["pending_work_units"]


def test_a_quiet_session_derives_its_small_batch_without_the_schedule(ws, llm_server):
    post(("bob", "Where do you live now?"), ("alice", "I moved to Lisbon."))
    assert derive(ws["dynamodb"]) == {"batchItemFailures": []}
    assert llm_server.requests == [] and found() == []  # a few tokens: the batch waits...
    assert queued(ws["sqs"])["ApproximateNumberOfMessagesDelayed"] == 1  # ...with one delayed wake-up
    records = wakeups(ws["sqs"])
    assert wake(records) == {"batchItemFailures": []}
    (prompt,) = ["\n".join(str(m["content"]) for m in r["messages"]) for r in chat_requests(llm_server)]
    # every sender's waiting batch in one request, each line once
    assert "Target peers: alice, bob\n" in prompt and prompt.count("alice: I moved to Lisbon.") == 1
    assert prompt.count("bob: Where do you live now?") == 1
    assert [c["content"] for c in found()] == ["alice moved to Lisbon in spring 2026"]
    assert pending() == 0


def test_a_wakeup_that_finds_a_newer_message_leaves_the_batch_to_that_ones_wakeup(ws, llm_server):
    post(("alice", "I moved to Lisbon."))
    derive(ws["dynamodb"])
    (first,) = wakeups(ws["sqs"])
    post(("bob", "Nice, when?"))  # the conversation goes on: another sender, in the same session
    assert invoke("DeriveFunction", {"Records": message_records(ws["dynamodb"], first=2)}) == {"batchItemFailures": []}
    assert wake([first]) == {"batchItemFailures": []}
    assert llm_server.requests == [] and pending() == 2  # not quiet: nothing derived
    (second,) = wakeups(ws["sqs"])
    assert wake([second]) == {"batchItemFailures": []}
    # quiet now: both senders' batches derive, in one request
    assert len(chat_requests(llm_server)) == 1 and pending() == 0
    assert [c["content"] for c in found()] == ["alice moved to Lisbon in spring 2026"]


def test_duplicate_and_late_wakeups_derive_each_message_once(ws, llm_server):
    post(("alice", "I moved to Lisbon."), ("alice", "I work on the budget review."))
    derive(ws["dynamodb"])
    derive(ws["dynamodb"])  # the stream's batch again: a second wake-up for the same messages
    records = wakeups(ws["sqs"], count=2)
    assert wake(records + records) == {"batchItemFailures": []}  # both, each twice, in one batch
    assert wake(records) == {"batchItemFailures": []}  # and late, after the derivation
    assert len(chat_requests(llm_server)) == 1
    assert [c["content"] for c in found()] == ["alice moved to Lisbon in spring 2026"]
    completed = call("GET", f"{W}/queue/status?session_id=s1").body["completed_work_units"]
    assert completed == 2 and pending() == 0


def test_a_failed_wakeup_is_reported_and_derives_nothing_half(ws, llm_server):
    post(("alice", "I moved to Lisbon."))
    derive(ws["dynamodb"])
    (record,) = wakeups(ws["sqs"])
    llm_server.mode = "500"
    assert wake([record]) == {"batchItemFailures": [{"itemIdentifier": record["messageId"]}]}
    assert found() == [] and pending() == 1
    llm_server.mode = "ok"
    assert wake([record]) == {"batchItemFailures": []}  # SQS delivers it again
    assert [c["content"] for c in found()] == ["alice moved to Lisbon in spring 2026"]


def test_the_token_threshold_derives_at_once_and_the_extractive_engine_sends_no_wakeup(ws, llm_server):
    post(*[("alice", LONG)] * 6)
    assert derive(ws["dynamodb"]) == {"batchItemFailures": []}
    assert len(chat_requests(llm_server)) == 1 and pending() == 0  # 512 tokens: no wait for the pause
    assert call("PUT", W, {"configuration": {"deriver": {"engine": "extractive"}}}).status == 200
    before = queued(ws["sqs"])
    assert (
        call(
            "POST",
            f"{W}/sessions/s2/messages",
            {"messages": [{"peer_id": "alice", "content": "I moved to Porto last spring."}]},
        ).status
        == 201
    )
    assert invoke("DeriveFunction", {"Records": message_records(ws["dynamodb"], session_id="s2")}) == {
        "batchItemFailures": []
    }
    assert sum(queued(ws["sqs"]).values()) == sum(before.values())  # derived at once: nothing to wake
    assert "alice moved to Porto last spring" in [c["content"] for c in found()]


def test_with_an_injected_clock_a_quiet_flush_ends_a_young_batch_and_the_age_an_old_one(ws):
    from precis.llm.embeddings import HashedEmbedder
    from precis.memory.deriver import SessionTarget, derive_session, is_quiet
    from precis.memory.engines.extractive import ExtractiveDeriver
    from precis.memory.wakeups import QuietWake
    from precis.settings import get_settings
    from precis.store.db import get_db

    db, settings = get_db(), get_settings()
    engine = ExtractiveDeriver()  # the llm engine's batching (workspace default), answered offline
    target = SessionTarget("ws1", "s1")
    (posted,) = post(("alice", "I moved to Lisbon last spring."))
    created = datetime.fromisoformat(posted["created_at"].replace("Z", "+00:00")).astimezone(UTC)

    def run(at: datetime, flush: bool = False):
        return derive_session(
            db,
            settings,
            target,
            senders=["alice"],
            engine_for=lambda _c: engine,
            embedder=HashedEmbedder(256),
            now=lambda: at,
            flush=flush,
        )

    young = run(created + timedelta(seconds=5))
    assert (young.pending, young.derived, young.batched) == (1, 0, True)
    assert not is_quiet(db, QuietWake("ws1", "s1", 0))  # a wake-up older than the message: not quiet
    assert is_quiet(db, QuietWake("ws1", "s1", 1))
    flushed = run(created + timedelta(seconds=5), flush=True)
    assert (flushed.pending, flushed.derived, flushed.conclusions) == (0, 1, 1)
    assert run(created + timedelta(seconds=5), flush=True).derived == 0  # nothing waits any more
    (later,) = post(("alice", "I work on the budget review."))
    created = datetime.fromisoformat(later["created_at"].replace("Z", "+00:00")).astimezone(UTC)
    assert run(created + timedelta(seconds=30)).pending == 1
    aged = run(created + timedelta(seconds=settings.derive_max_wait_s + 1))  # the age alone, no wake-up
    assert (aged.pending, aged.derived) == (0, 1)


@pytest.mark.stack
def test_on_the_local_stack_a_pause_brings_the_facts_without_the_schedule(tmp_path):
    from honcho import Honcho

    from local.models.llm_server import LLMServer
    from tests.stack import Stack, wait_for

    with LLMServer() as llm:
        llm.answer = explicit("alice moved to Lisbon in spring 2026")
        # The schedule's flush would come only after a day: whatever derives these few tokens is the quiet wake-up.
        running = Stack(
            tmp_path,
            env={
                "OPENAI_BASE_URL": llm.url,
                "OPENAI_API_KEY": "test",
                "PRECIS_DERIVE_QUIET_S": "1",
                "PRECIS_LOCAL_SCHEDULE_S": "86400",
            },
        )
        try:
            running.wait_healthy()
            honcho = Honcho(base_url=running.url, api_key="local", workspace_id="quiet")
            alice, bob = honcho.peer("alice"), honcho.peer("bob")
            session = honcho.session("s1")
            session.add_messages(
                [
                    bob.message("Where do you live now?"),
                    alice.message("I moved to Lisbon."),
                    alice.message("My sister is Ana."),
                ]
            )
            found = wait_for(lambda: [c.content for c in alice.conclusions.list()], 240)  # a slow machine
            assert found == ["alice moved to Lisbon in spring 2026"]
            (request,) = [r for r in chat_requests(llm) if "alice: I moved to Lisbon." in str(r["messages"])]
            assert "alice: My sister is Ana." in str(request["messages"])  # the burst, as one batch
            wait_for(lambda: (s := honcho.queue_status()) and s.pending_work_units == 0, 240)
        finally:
            running.stop()


def test_a_stream_batch_wakes_each_llm_session_once_naming_its_newest_message_even_one_that_failed():
    """(A session is derived once a batch; the stream's redelivery may bring it in two.)"""
    from precis.memory.deriver import Outcome, SessionTarget, quiet_wakes
    from precis.memory.wakeups import QuietWake

    s1, other = SessionTarget("ws1", "s1"), SessionTarget("ws1", "s2")
    derived = [
        (s1, [{"seq": 1}, {"seq": 3}], Outcome(batched=True)),
        (s1, [{"seq": 4}], None),  # a derivation of it failed: its cursors are due, the wake-up still names 4
        (other, [{"seq": 9}], Outcome(batched=False)),
    ]  # the extractive engine: derived, nothing waits
    assert quiet_wakes(derived) == [QuietWake("ws1", "s1", 4)]
