"""The summarizer's bounds: input budget per request, a deadline per invocation, jobs that fail for good, and
summaries bound to the session incarnation they were computed for (so none lands in a deleted or newer one)."""

from __future__ import annotations

import json

import pytest
from aws_lambda_powertools import Metrics

from local.models.llm_server import prompt_tokens
from local.template import template
from precis.settings import Settings
from precis.store.db import Db
from precis.store.messages import NewMessage, append_messages
from precis.store.resources import get_or_create_workspace, update_workspace
from precis.store.summaries import Put, put_failure, put_summary, read_summary_state
from precis.summaries.engines import SummaryResult
from precis.summaries.engines.extractive import ExtractiveEngine
from precis.summaries.runner import FINISH_MARGIN_S, summarize_session
from precis.tokens import count_messages, count_text
from tests.handlers import invoke
from tests.stream import message_records

WS, S = "ws1", "s1"
SHORT = "honcho_chat_summary_short"
SENTENCE = "The supplier quote for batch {i} changed again and the budget review moved to Thursday. "


@pytest.fixture
def db(aws) -> Db:
    db = Db(client=aws["dynamodb"], s3=aws["s3"], table=template().table_name, bucket=template().bucket_name)
    get_or_create_workspace(db, WS)
    Metrics().clear_metrics()
    return db


def settings_for(server, **overrides) -> Settings:
    return Settings(
        table_name=template().table_name,
        bucket_name=template().bucket_name,
        llm_base_url=server.url,
        llm_api_key="sk-test",
        llm_model="m",
        **overrides,
    )


def post(db: Db, contents: list[str], run_id: str | None = None, peer: str = "alice") -> None:
    append_messages(
        db, WS, S, [NewMessage(c, peer, count_text(c), run_id=run_id) for c in contents], inline_max_bytes=16_384
    )


def message(i: int, sentences: int) -> str:
    return f"Message {i}: " + SENTENCE.format(i=i) * sentences


def audits(db: Db) -> list[dict]:
    listed = db.s3.list_objects_v2(Bucket=db.bucket, Prefix="audit/").get("Contents", [])
    records = [json.loads(db.s3.get_object(Bucket=db.bucket, Key=o["Key"])["Body"].read()) for o in listed]
    return sorted(records, key=lambda r: (r["created_at"], r["covers"]["through_seq"]))


def stored(db: Db) -> dict:
    return read_summary_state(db, WS, S)[0].get(SHORT)


def sent_tokens(server) -> list[int]:
    return [count_messages(r.body["messages"]) for r in server.requests]


def emitted(name: str) -> float:
    return sum(Metrics().metric_set.get(name, {}).get("Value", []))


# --- input budget ---------------------------------------------------------------------------------------------


def test_a_job_larger_than_the_input_budget_runs_in_incremental_steps_each_within_it(db, llm_server):
    post(db, [message(i, 14) for i in range(20)])  # ~250 tokens each: ~5,000 for the short summary
    outcome = summarize_session(db, settings_for(llm_server, llm_max_input_tokens=1_500), WS, S)
    assert len(llm_server.requests) >= 4
    assert max(sent_tokens(llm_server)) <= 1_500
    assert [w.stored for w in outcome.written] == [True] * len(llm_server.requests)
    assert outcome.written[-1].covers_seq == 20 and not outcome.work_remains
    final = stored(db)
    assert final["covers_seq"] == 20 and "job_through_seq" not in final
    # Each step starts where the last ended, from the summary that step wrote, at a message boundary.
    chain = audits(db)
    assert [a["covers"]["previous_covers_seq"] for a in chain] == [None] + [
        a["covers"]["through_seq"] for a in chain[:-1]
    ]
    assert all(a["job"] == {"first_seq": 1, "through_seq": 20} for a in chain)
    for before, request in zip(chain, llm_server.requests[1:]):
        assert f"<previous_summary>\n{before['output']}\n</previous_summary>" in request.body["messages"][1]["content"]


def test_each_step_is_stored_at_a_run_end_as_soon_as_it_ends(db, llm_server):
    for run in range(5):  # runs of 4 messages, ~120 tokens each
        post(db, [message(4 * run + k, 6) for k in range(4)], run_id=f"run-{run}")
    post(db, [message(20, 1)])  # completes run 4: the short summary is due through #20
    outcome = summarize_session(db, settings_for(llm_server, llm_max_input_tokens=1_200), WS, S)
    assert [w.covers_seq for w in outcome.written if w.stored][-1] == 20
    assert all(w.covers_seq in (4, 8, 12, 16, 20) for w in outcome.written)  # run ends only
    assert len(outcome.written) > 1 and max(sent_tokens(llm_server)) <= 1_200


def test_a_model_with_a_smaller_window_gets_half_as_much_never_the_same_request_again(db, llm_server):
    llm_server.max_context_tokens = 900  # the configured budget (16,000) is far larger than the model's window
    post(db, [message(i, 6) for i in range(20)])
    outcome = summarize_session(db, settings_for(llm_server), WS, S)
    assert stored(db)["covers_seq"] == 20 and not outcome.failed
    modes = [r.mode for r in llm_server.requests]
    assert "context_length" in modes and modes[-1] == "ok"
    sizes = [prompt_tokens(r.body) for r in llm_server.requests]
    for i, mode in enumerate(modes[:-1]):
        if mode == "context_length":  # the next request sends at most about half of the refused one
            assert sizes[i + 1] <= sizes[i] // 2 + 50
    bodies = [json.dumps(r.body["messages"]) for r in llm_server.requests]
    assert len(set(bodies)) == len(bodies)


def test_a_message_larger_than_the_budget_is_cut_keeping_its_start_and_end(db, llm_server):
    post(db, ["BEGIN-OF-PASTE " + SENTENCE.format(i=0) * 200 + "END-OF-PASTE"])  # ~3,600 tokens
    post(db, [message(i, 1) for i in range(1, 20)])
    outcome = summarize_session(db, settings_for(llm_server, llm_max_input_tokens=1_200), WS, S)
    assert outcome.written[-1].covers_seq == 20
    first = llm_server.requests[0].body["messages"][1]["content"]
    assert "BEGIN-OF-PASTE" in first and "END-OF-PASTE" in first and "tokens omitted" in first
    assert max(sent_tokens(llm_server)) <= 1_200
    assert list(audits(db)[0]["cut"]) == ["1"]


def test_a_run_larger_than_the_budget_goes_whole_in_one_step_with_fair_cuts(db, llm_server):
    post(db, [message(0, 1)] + [message(i, 25) for i in range(1, 6)], run_id="big")  # one run of ~2,000 tokens
    post(db, [message(i, 1) for i in range(6, 20)])
    outcome = summarize_session(db, settings_for(llm_server, llm_max_input_tokens=1_200), WS, S)
    assert outcome.written[0].covers_seq == 6 and outcome.written[-1].covers_seq == 20
    first = audits(db)[0]
    assert first["covers"]["through_seq"] == 6
    assert sorted(first["cut"]) == ["2", "3", "4", "5", "6"]  # the short first message stays whole
    assert len(set(first["cut"].values())) == 1  # the long ones all get the same share
    assert max(sent_tokens(llm_server)) <= 1_200


# --- deadline -------------------------------------------------------------------------------------------------


def test_no_request_starts_without_time_for_its_timeout_and_the_margin(db, llm_server):
    post(db, [message(i, 1) for i in range(20)])
    settings = settings_for(llm_server, llm_timeout=30)
    outcome = summarize_session(db, settings, WS, S, remaining_s=lambda: 30 + FINISH_MARGIN_S - 0.1)
    assert outcome.work_remains and outcome.written == () and llm_server.requests == []
    assert emitted("SummaryJobsUnfinished") == 1
    outcome = summarize_session(db, settings, WS, S, remaining_s=lambda: 30 + FINISH_MARGIN_S)
    assert not outcome.work_remains and stored(db)["covers_seq"] == 20


def test_a_job_stopped_by_the_deadline_continues_from_its_stored_step(db, llm_server):
    post(db, [message(i, 14) for i in range(20)])
    settings = settings_for(llm_server, llm_max_input_tokens=1_500, llm_timeout=30)
    # Each request takes 35 s of a 100 s invocation: after two, 30 s are left, less than 30 s + the margin.
    first = summarize_session(db, settings, WS, S, remaining_s=lambda: 100 - 35 * len(llm_server.requests))
    assert first.work_remains and len(llm_server.requests) == 2
    part = stored(db)
    assert part["covers_seq"] == first.written[-1].covers_seq < 20 and part["job_through_seq"] == 20
    # The next invocation (no new message: the strategy alone would not call it due) finishes the same job.
    second = summarize_session(db, settings, WS, S)
    assert not second.work_remains and stored(db)["covers_seq"] == 20
    resumed = llm_server.requests[2].body["messages"][1]["content"]
    assert f"<previous_summary>\n{part['content']}\n</previous_summary>" in resumed
    transcript = resumed.split("<messages>\n", 1)[1]
    assert transcript.startswith(f"alice: Message {part['covers_seq']}:")  # seq n is "Message n-1": the next one
    chain = audits(db)
    assert [a["covers"]["first_seq"] for a in chain] == [1] + [a["covers"]["through_seq"] + 1 for a in chain[:-1]]


class _Recording:
    """An engine with a timeout that records the requests it gets (and summarizes them offline)."""

    name = "recording"
    timeout = 30.0

    def __init__(self):
        self.requests = []

    def summarize(self, request):
        self.requests.append(request)
        return ExtractiveEngine().summarize(request)


def test_the_engine_gets_the_time_left_minus_the_margin(db):
    post(db, [message(i, 1) for i in range(20)])
    engine = _Recording()
    summarize_session(db, Settings(llm_api_key="unused"), WS, S, engine_for=lambda _: engine, remaining_s=lambda: 55.0)
    assert [r.time_limit_s for r in engine.requests] == [55.0 - FINISH_MARGIN_S]
    engine = _Recording()
    post(db, [message(i, 1) for i in range(20, 40)])
    summarize_session(db, Settings(llm_api_key="unused"), WS, S, engine_for=lambda _: engine)
    assert [r.time_limit_s for r in engine.requests] == [None]  # no deadline: the engine's own budget


# --- jobs that fail for good ----------------------------------------------------------------------------------


def test_a_refused_request_fails_the_job_for_good_recorded_and_counted_not_raised(db, llm_server):
    post(db, [message(i, 1) for i in range(20)])
    llm_server.mode = "400"  # model_not_found
    outcome = summarize_session(db, settings_for(llm_server), WS, S, clock=lambda: 1_000.0)
    (failed,) = outcome.failed
    assert (failed.summary_type, failed.first_seq, failed.through_seq) == (SHORT, 1, 20)
    assert "HTTP 400" in failed.reason and stored(db) is None
    (record,) = audits(db)
    assert record["outcome"] == "failed" and "HTTP 400" in record["error"]
    assert record["covers"]["through_seq"] == 20 and json.loads(record["prompt"])[1]["role"] == "user"
    assert emitted("SummaryJobsFailed") == 1
    marker = read_summary_state(db, WS, S)[1][SHORT]
    assert (marker["first_seq"], marker["failures"], marker["retry_at"]) == (1, 1, 1_600.0)


def test_a_failed_job_is_tried_again_only_when_it_changes_or_its_back_off_ends(db, llm_server):
    post(db, [message(i, 1) for i in range(20)])
    llm_server.mode = "400"
    settings = settings_for(llm_server)
    summarize_session(db, settings, WS, S, clock=lambda: 1_000.0)
    assert len(llm_server.requests) == 1
    post(db, [message(20, 1)])  # a later message: the same doomed request would be sent again
    outcome = summarize_session(db, settings, WS, S, clock=lambda: 1_500.0)
    assert outcome.skipped == (SHORT,) and len(llm_server.requests) == 1
    outcome = summarize_session(db, settings, WS, S, clock=lambda: 1_600.0)  # back-off over: tried, failed again
    assert len(llm_server.requests) == 2 and outcome.failed
    assert read_summary_state(db, WS, S)[1][SHORT]["retry_at"] == 1_600.0 + 1_200.0  # doubled
    update_workspace(db, WS, configuration={"summarizer": {"model": "a-model-that-exists"}})  # the fix
    llm_server.mode = "ok"
    outcome = summarize_session(db, settings, WS, S, clock=lambda: 1_700.0)
    assert len(llm_server.requests) == 3 and stored(db)["covers_seq"] == 20  # #21 stays for the context
    assert read_summary_state(db, WS, S)[1] == {}  # the marker is gone once the job succeeded


def test_a_prompt_that_cannot_shrink_enough_fails_the_job_for_good(db, llm_server):
    llm_server.max_context_tokens = 100  # smaller than the system prompt alone
    post(db, [message(i, 1) for i in range(20)])
    outcome = summarize_session(db, settings_for(llm_server), WS, S)
    assert outcome.failed and "context window" in outcome.failed[0].reason
    assert llm_server.requests and all(r.mode == "context_length" for r in llm_server.requests)
    sizes = [prompt_tokens(r.body) for r in llm_server.requests]
    assert sizes == sorted(sizes, reverse=True) and len(set(sizes)) == len(sizes)  # each smaller, then it gave up


def test_an_engine_that_cannot_be_built_fails_its_jobs_for_good(db):
    update_workspace(db, WS, configuration={"summarizer": {"engine": "llm"}})  # but no endpoint, no key
    post(db, [message(i, 1) for i in range(20)])
    outcome = summarize_session(db, Settings(), WS, S)
    assert [f.summary_type for f in outcome.failed] == [SHORT] and "OPENAI_BASE_URL" in outcome.failed[0].reason
    assert [a["outcome"] for a in audits(db)] == ["failed"] and emitted("SummaryJobsFailed") == 1


def test_a_job_that_fails_for_good_is_no_poison_pill_for_the_stream(aws, llm_server, monkeypatch):
    # The environment first: settings are read once (a cold start), here by the first configuration check.
    monkeypatch.setenv("OPENAI_BASE_URL", llm_server.url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    db = Db(client=aws["dynamodb"], s3=aws["s3"], table=template().table_name, bucket=template().bucket_name)
    get_or_create_workspace(db, WS)
    post(db, [message(i, 1) for i in range(20)])
    llm_server.mode = "400"
    out = invoke("SummarizeFunction", {"Records": message_records(aws["dynamodb"])})
    assert out == {"batchItemFailures": []}
    assert len(llm_server.requests) == 1 and [a["outcome"] for a in audits(db)] == ["failed"]


# --- incarnations ---------------------------------------------------------------------------------------------


def _set_session(db: Db, expression: str, values: dict | None = None) -> None:
    db.client.update_item(
        TableName=db.table,
        Key={"PK": {"S": f"WS#{WS}"}, "SK": {"S": f"SESSION#{S}"}},
        UpdateExpression=expression,
        **({"ExpressionAttributeValues": values} if values else {}),
    )


def _put(db: Db, incarnation: str | None, covers: int) -> Put:
    return put_summary(
        db,
        WS,
        S,
        incarnation=incarnation,
        summary_type=SHORT,
        content=f"covers {covers}",
        token_count=2,
        covers_seq=covers,
        end_tokens=covers * 10,
        message_id=f"m{covers}",
    )


def test_put_summary_is_bound_to_the_incarnation_and_monotonic(db):
    post(db, ["hello"])
    _set_session(db, "SET incarnation = :i", {":i": {"S": "A"}})
    assert _put(db, "A", 20) is Put.WRITTEN
    assert _put(db, "A", 20) is Put.STALE and not _put(db, "A", 10)
    assert _put(db, "B", 40) is Put.SESSION_GONE  # computed for another incarnation
    _set_session(db, "SET deleted_at = :d", {":d": {"S": "2026-01-01T00:00:00+00:00"}})
    assert _put(db, "A", 40) is Put.SESSION_GONE  # deleted (being purged, or a tombstone)
    assert stored(db)["covers_seq"] == 20
    _set_session(db, "REMOVE deleted_at, incarnation")  # a session item from before incarnations
    assert _put(db, None, 40) is Put.WRITTEN and _put(db, "A", 60) is Put.SESSION_GONE
    assert (
        put_failure(
            db,
            WS,
            S,
            incarnation="A",
            summary_type=SHORT,
            first_seq=41,
            through_seq=60,
            fingerprint="f",
            failures=1,
            retry_at=0.0,
            reason="x",
        )
        is Put.SESSION_GONE
    )


class _RecreatedMeanwhile:
    """An engine during whose call the session is deleted and created again (a new incarnation)."""

    name = "slow"

    def __init__(self, db: Db):
        self.db = db

    def summarize(self, request):
        _set_session(self.db, "SET incarnation = :i", {":i": {"S": "incarnation-B"}})
        return SummaryResult(
            text="about the old incarnation", prompt="[]", model="slow", input_tokens=1, output_tokens=1, latency_ms=0.0
        )


def test_a_summary_computed_for_one_incarnation_never_lands_in_the_next(db):
    post(db, [message(i, 1) for i in range(20)])
    _set_session(db, "SET incarnation = :i", {":i": {"S": "incarnation-A"}})
    outcome = summarize_session(db, Settings(llm_api_key="unused"), WS, S, engine_for=lambda _: _RecreatedMeanwhile(db))
    assert [w.stored for w in outcome.written] == [False]
    assert stored(db) is None and audits(db) == []
