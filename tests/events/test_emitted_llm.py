"""queue.empty under the llm deriver's batching (the real `openai` client against the local model server): while a
batch waits for its session to go quiet the queue status shows it pending and nothing is announced; the quiet
wake-up's derivation empties the units, and each caught-up sender's queue.empty comes with it."""

from __future__ import annotations

import pytest

from local.sqs_poller import lambda_record
from precis.memory.wakeups import QuietWake, body
from tests.events.test_emitted import QUEUE, drain, hook, of_type
from tests.handlers import call, invoke, post_messages
from tests.memory.test_deriver_llm import explicit
from tests.stream import message_records

WAKE_QUEUE = "precis-derive-wake-local"


@pytest.fixture
def ws(aws, llm_server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", llm_server.url)
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("PRECIS_LLM_MAX_ATTEMPTS", "2")
    monkeypatch.setenv("PRECIS_DERIVE_BATCH_TOKENS", "512")  # a few lines wait for their session to go quiet
    monkeypatch.setenv("PRECIS_WEBHOOK_QUEUE_URL", aws["sqs"].get_queue_url(QueueName=QUEUE)["QueueUrl"])
    llm_server.answer = explicit("alice moved to Lisbon in spring 2026")
    assert call("POST", "/v3/workspaces", {"id": "ws1"}).status == 201
    hook("ws1", "https://hooks.example.com/a")
    return aws


def wake(sqs, seq: int) -> dict:
    """The session's quiet wake-up, sent now (its delay played as over) and delivered as Lambda delivers it."""
    url = sqs.get_queue_url(QueueName=WAKE_QUEUE)["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody=body(QuietWake("ws1", "s1", seq)))
    (message,) = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1, AttributeNames=["All"])["Messages"]
    arn = f"arn:aws:sqs:us-east-1:123456789012:{WAKE_QUEUE}"
    return invoke("DeriveFunction", {"Records": [lambda_record(message, arn)]})


def status(sender: str) -> int:
    reply = call("GET", f"/v3/workspaces/ws1/queue/status?session_id=s1&sender_id={sender}")
    return reply.body["pending_work_units"] + reply.body["in_progress_work_units"]


def test_a_waiting_batch_announces_nothing_and_its_quiet_derivation_empties_each_sender_once(ws, llm_server):
    post_messages("s1", ("bob", "Where do you live now?"), ("alice", "I moved to Lisbon."))
    records = message_records(ws["dynamodb"])
    assert invoke("DeriveFunction", {"Records": records}) == {"batchItemFailures": []}
    assert status("alice") == status("bob") == 1  # both wait for the quiet...
    assert drain(ws["sqs"]) == []  # ...and nothing is announced while they do
    assert wake(ws["sqs"], 2) == {"batchItemFailures": []}
    found = drain(ws["sqs"])
    assert status("alice") == status("bob") == 0
    emptied = of_type(found, "queue.empty")
    assert sorted(m["data"]["observed"] for m in emptied) == ["alice", "bob"]
    assert {m["data"]["queue_type"] for m in emptied} == {"representation"}
    (created,) = of_type(found, "conclusions.created")
    assert (created["data"]["observer"], created["data"]["observed"]) == ("alice", "alice")
    assert wake(ws["sqs"], 2) == {"batchItemFailures": []}  # a late duplicate wake-up: nothing new happened
    assert of_type(drain(ws["sqs"]), "queue.empty") == []
