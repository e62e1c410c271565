"""Summaries kept current by the stream consumer: triggers, boundaries, monotonic writes, failures."""

from __future__ import annotations

import json
import threading

import pytest

from precis.llm import EngineError
from precis.settings import get_settings
from precis.store.db import Db
from precis.summaries.engines import SummaryResult
from precis.summaries.runner import summarize_session
from tests.handlers import call, invoke
from tests.stream import message_records, stream_record

W = "/v3/workspaces/ws1"
S = f"{W}/sessions/s1"
SHORT, LONG = "honcho_chat_summary_short", "honcho_chat_summary_long"


def post(n: int, start: int = 0, **extra) -> list[dict]:
    reply = call(
        "POST",
        f"{S}/messages",
        {
            "messages": [
                {
                    "content": f"Message {i}: the user asked about topic {i % 7} and we agreed on step {i}.",
                    "peer_id": "alice",
                    **extra,
                }
                for i in range(start, start + n)
            ]
        },
    )
    assert reply.status == 201, reply.body
    return reply.body


def run_stream(client, first=1, last=None) -> dict:
    return invoke("SummarizeFunction", {"Records": message_records(client, first=first, last=last)})


def summaries() -> dict:
    return call("GET", f"{S}/summaries").body


def audits(s3) -> list[dict]:
    listed = s3.list_objects_v2(Bucket="precis-local", Prefix="audit/").get("Contents", [])
    return [json.loads(s3.get_object(Bucket="precis-local", Key=o["Key"])["Body"].read()) for o in listed]


@pytest.fixture
def ws(aws):
    assert call("POST", "/v3/workspaces", {"id": "ws1"}).status == 201
    return aws


def test_short_summary_falls_due_at_the_20th_message(ws):
    posted = post(19)
    assert run_stream(ws["dynamodb"]) == {"batchItemFailures": []}
    assert summaries()["short_summary"] is None
    posted += post(1, start=19)
    run_stream(ws["dynamodb"], first=20)
    short = summaries()["short_summary"]
    assert short["summary_type"] == SHORT and short["message_id"] == posted[19]["id"]
    assert short["content"] and isinstance(short["token_count"], int) and short["token_count"] > 0
    assert summaries()["long_summary"] is None


def test_cadence_writes_short_and_long_at_once_without_losing_either(ws):
    posted = []
    for batch in range(3):
        posted += post(20, start=20 * batch)
        run_stream(ws["dynamodb"], first=20 * batch + 1)
    got = summaries()
    assert got["short_summary"]["message_id"] == posted[59]["id"]
    assert got["long_summary"]["message_id"] == posted[59]["id"]
    assert got["long_summary"]["summary_type"] == LONG
    covered = sorted((a["summary_type"], a["covers"]["through_seq"]) for a in audits(ws["s3"]))
    assert covered == [(LONG, 60), (SHORT, 20), (SHORT, 40), (SHORT, 60)]


def test_each_summary_is_incremental(ws):
    post(20)
    run_stream(ws["dynamodb"])
    post(20, start=20)
    run_stream(ws["dynamodb"], first=21)
    second = [a for a in audits(ws["s3"]) if a["covers"]["through_seq"] == 40][0]
    assert second["covers"] == {"first_seq": 21, "through_seq": 40, "previous_covers_seq": 20}
    prompt = json.loads(second["prompt"])  # the extractive engine's input: previous summary + new messages
    assert prompt["previous"] == [a for a in audits(ws["s3"]) if a["covers"]["through_seq"] == 20][0]["output"]
    assert [content.split(":")[0] for _, content in prompt["messages"]] == [f"Message {i}" for i in range(20, 40)]


def test_a_summary_never_splits_a_run(ws):
    post(18)
    post(4, start=18, run_id="run-a")  # #19-#22 are one run: the boundary cannot fall at #20
    run_stream(ws["dynamodb"])
    assert summaries()["short_summary"] is None  # the run is still open
    post(1, start=22)
    run_stream(ws["dynamodb"], first=23)
    short = summaries()["short_summary"]
    ids = {m["seq"]: m["id"] for m in call("POST", f"{S}/messages/list", size=100).body["items"]}
    assert short["message_id"] == ids[18]  # the last run end at or before #20; run-a and #23 stay verbatim


def test_one_post_of_31_keeps_the_newest_messages_verbatim_beside_the_summary(ws):
    """31 messages in one post (no run ids): the short summary covers #20, not #31, and the context at 300 tokens
    holds it and as many of the newest messages as fit, the newest verbatim."""
    posted = post(31)
    assert run_stream(ws["dynamodb"]) == {"batchItemFailures": []}
    assert summaries()["short_summary"]["message_id"] == posted[19]["id"]
    body = call("GET", f"{S}/context", tokens=300).body
    assert body["summary"]["message_id"] == posted[19]["id"]
    shown = body["messages"]
    assert shown and [m["id"] for m in shown] == [m["id"] for m in posted[31 - len(shown) :]]  # the newest, in order
    assert shown[-1]["content"] == posted[30]["content"]  # the newest message itself, not a sentence about it
    assert shown[0]["seq"] > 20 and body["messages_skipped"] == shown[0]["seq"] - 21
    assert body["token_count"] == body["summary"]["token_count"] + sum(m["token_count"] for m in shown) <= 300
    if shown[0]["seq"] > 21:  # the window is as full as it can be: the next older message would not fit
        assert body["token_count"] + posted[shown[0]["seq"] - 2]["token_count"] > 300


def test_a_summary_through_the_newest_message_does_not_take_the_context_s_place(ws):
    """40 messages: the short summary covers all of them; a context that has room for the newest messages shows
    them rather than that summary alone."""
    posted = post(40)
    run_stream(ws["dynamodb"])
    assert summaries()["short_summary"]["message_id"] == posted[39]["id"]
    body = call("GET", f"{S}/context", tokens=400).body
    assert body["summary"] is None and body["messages"][-1]["id"] == posted[39]["id"]
    assert body["token_count"] + posted[40 - len(body["messages"]) - 1]["token_count"] > 400  # as many as fit


def test_replayed_batch_neither_regresses_nor_duplicates(ws):
    post(20)
    event = {"Records": message_records(ws["dynamodb"])}
    invoke("SummarizeFunction", event)
    first = summaries()["short_summary"]
    post(20, start=20)
    run_stream(ws["dynamodb"], first=21)
    newer = summaries()["short_summary"]
    assert invoke("SummarizeFunction", event) == {"batchItemFailures": []}  # the old batch again
    assert summaries()["short_summary"] == newer != first
    assert len(audits(ws["s3"])) == 2


class _Gate:
    """An engine that waits until both concurrent invocations are summarizing, then answers."""

    name = "gate"

    def __init__(self, barrier: threading.Barrier, text: str):
        self.barrier, self.text = barrier, text

    def summarize(self, request):
        self.barrier.wait(timeout=30)
        return SummaryResult(text=self.text, prompt="[]", model="gate", input_tokens=1, output_tokens=1, latency_ms=0.0)


def test_two_concurrent_invocations_store_one_summary(moto_server):
    import boto3

    from precis.store.messages import NewMessage, append_messages
    from precis.store.resources import get_or_create_workspace

    url, clients = moto_server
    db = Db(
        client=boto3.client("dynamodb", endpoint_url=url),
        s3=boto3.client("s3", endpoint_url=url),
        table="precis-local",
        bucket="precis-local",
    )
    get_or_create_workspace(db, "ws1")
    append_messages(db, "ws1", "s1", [NewMessage(f"m{i}", "alice", 2) for i in range(20)], inline_max_bytes=10_000)
    barrier = threading.Barrier(2)
    results = {}

    def worker(name):
        results[name] = summarize_session(db, get_settings(), "ws1", "s1", engine_for=lambda _: _Gate(barrier, name))

    threads = [threading.Thread(target=worker, args=(n,)) for n in ("first", "second")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stored = [w for outcome in results.values() for w in outcome.written if w.stored]
    assert len(stored) == 1 and stored[0].covers_seq == 20
    item = clients["dynamodb"].get_item(
        TableName="precis-local", Key={"PK": {"S": "WS#ws1#S#s1"}, "SK": {"S": f"SUMMARY#{SHORT}"}}
    )["Item"]
    assert item["content"]["S"] in ("first", "second")
    assert len(clients["s3"].list_objects_v2(Bucket="precis-local", Prefix="audit/")["Contents"]) == 1


class _Failing:
    name = "failing"

    def summarize(self, request):
        raise EngineError("llm down", retryable=True)


def test_engine_failure_keeps_history_and_stores_no_summary(ws):
    posted = post(20)
    with pytest.raises(EngineError):
        summarize_session(
            __import__("precis.store.db", fromlist=["get_db"]).get_db(),
            get_settings(),
            "ws1",
            "s1",
            engine_for=lambda _: _Failing(),
        )
    assert summaries()["short_summary"] is None
    listed = call("POST", f"{S}/messages/list", size=100).body
    assert [m["id"] for m in listed["items"]] == [m["id"] for m in posted]


def test_stream_reports_every_record_of_a_failing_session(ws, monkeypatch):
    post(20)
    call("PUT", W, {"configuration": {"summarizer": {"engine": "llm"}}})
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9")  # nothing listens: connection refused
    get_settings.cache_clear()
    records = message_records(ws["dynamodb"])
    call("POST", "/v3/workspaces", {"id": "ws2"})
    call("POST", "/v3/workspaces/ws2/sessions/s9/messages", {"messages": [{"content": "fine", "peer_id": "bob"}]})
    other = message_records(ws["dynamodb"], ws="ws2", session_id="s9")
    out = invoke("SummarizeFunction", {"Records": other + records})
    failed = {f["itemIdentifier"] for f in out["batchItemFailures"]}
    assert failed == {r["dynamodb"]["SequenceNumber"] for r in records}
    assert summaries()["short_summary"] is None


def test_deleted_session_is_purged_by_the_stream(ws, monkeypatch):
    monkeypatch.setenv("PRECIS_PURGE_GRACE_S", "0")  # the id may be created again at once
    get_settings.cache_clear()
    post(20)
    run_stream(ws["dynamodb"])
    assert summaries()["short_summary"] is not None
    call("POST", f"{W}/sessions/s1/peers", {"bob": {}})
    assert call("DELETE", S).status == 202
    image = ws["dynamodb"].get_item(TableName="precis-local", Key={"PK": {"S": "WS#ws1"}, "SK": {"S": "SESSION#s1"}})[
        "Item"
    ]
    assert invoke("SummarizeFunction", {"Records": [stream_record(image, "MODIFY")]}) == {"batchItemFailures": []}
    left = [
        i
        for i in ws["dynamodb"].scan(TableName="precis-local")["Items"]
        if "S#s1" in i["PK"]["S"] or i["SK"]["S"] == "SESSION#s1"
    ]
    # Only the tombstone (the session item, marked purged) and the fence after the last message remain.
    assert sorted(i["kind"]["S"] for i in left) == ["fence", "session"]
    assert [i for i in left if i["kind"]["S"] == "session"][0]["purged_at"]
    assert not audits(ws["s3"])  # the incarnation's audit records went with it
    assert call("POST", f"{W}/sessions", {"id": "s1"}).status == 201  # the id can be used again
    assert summaries()["short_summary"] is None


def test_unknown_summary_settings_answer_422_naming_the_field(ws):
    reply = call("PUT", W, {"configuration": {"summarizer": {"strategy": "weekly"}}})
    assert reply.status == 422 and "summarizer.strategy" in reply.body["detail"]
    reply = call("POST", f"{W}/sessions", {"id": "s2", "configuration": {"summary": {"messages_per_short_summary": 5}}})
    assert reply.status == 422 and "messages_per_short_summary" in reply.body["detail"]
    reply = call("POST", f"{W}/sessions", {"id": "s2", "configuration": {"summary": {"strategy": "rolling"}}})
    assert reply.status == 422 and "configuration.summarizer" in reply.body["detail"]


def post_runs(runs: list[int], start_run: int = 0) -> list[dict]:
    """Post runs of the given lengths (user turn, tool calls, answer share a run_id), one request per run."""
    posted = []
    for offset, length in enumerate(runs):
        run = start_run + offset
        reply = call(
            "POST",
            f"{S}/messages",
            {
                "messages": [
                    {
                        "content": f"Run {run} step {k}: "
                        + "the agent looked up the supplier quote and the budget. " * 3,
                        "peer_id": "alice" if k == 0 else "agent",
                        "run_id": f"run-{run}",
                    }
                    for k in range(length)
                ]
            },
        )
        assert reply.status == 201, reply.body
        posted += reply.body
    return posted


def test_rolling_folds_all_but_the_newest_runs_when_the_threshold_is_reached(ws):
    call(
        "PUT",
        W,
        {"configuration": {"summarizer": {"strategy": "rolling", "token_threshold": 400, "keep_recent_runs": 2}}},
    )
    posted = post_runs([3, 2, 3])  # ~150 tokens: under the threshold
    run_stream(ws["dynamodb"])
    assert summaries()["long_summary"] is None
    posted += post_runs([2, 3, 2], start_run=3)  # now over it; runs 0-5 complete, run 5 only once run 6 starts
    run_stream(ws["dynamodb"], first=9)
    rolling = summaries()["long_summary"]
    # complete runs: 0..4 (run 5 is still open); the newest 2 complete runs (3, 4) stay verbatim
    assert rolling["summary_type"] == "rolling"
    assert rolling["message_id"] == posted[7]["id"]  # the last message of run 2
    assert summaries()["short_summary"] is None
    context = call("GET", f"{S}/context", tokens=100_000).body
    assert context["summary"]["summary_type"] == "rolling"
    assert [m["run_id"] for m in context["messages"]] == ["run-3"] * 2 + ["run-4"] * 3 + ["run-5"] * 2


def test_sliding_window_keeps_only_the_newest_runs_and_writes_no_summary(ws):
    call("PUT", W, {"configuration": {"summarizer": {"strategy": "sliding_window", "keep_runs": 2}}})
    post_runs([2] * 12)
    post(20)  # 20 single-message runs on top: far past any cadence
    run_stream(ws["dynamodb"])
    assert summaries() == {"id": "s1", "short_summary": None, "long_summary": None}
    context = call("GET", f"{S}/context", tokens=100_000).body
    assert [m["content"].split(":")[0] for m in context["messages"]] == ["Message 18", "Message 19"]
    assert context["summary"] is None and context["messages_skipped"] == 24 + 18
    session_override = call("PUT", S, {"configuration": {"summarizer": {"keep_runs": 5}}})
    assert session_override.status == 200
    assert len(call("GET", f"{S}/context", tokens=100_000).body["messages"]) == 5


def test_a_summary_dates_its_lines_with_their_messages_day(ws):
    # The runner gives the engine each message's created_at; the extractive summary starts with that day.
    post(20, created_at="2025-06-01T09:30:00Z")
    run_stream(ws["dynamodb"])
    short = summaries()["short_summary"]["content"]
    assert short.startswith("2025-06-01 alice: Message ")
    (audit,) = audits(ws["s3"])
    assert json.loads(audit["prompt"])["dates"] == ["2025-06-01T09:30:00+00:00"] * 20
