"""The stream consumer at scale: a batch's sessions summarized at once, and one invocation at a time per session
(its lease), without losing the work of an invocation that found the session busy."""

from __future__ import annotations

import json
import threading

import pytest
from aws_lambda_powertools import Metrics
from aws_lambda_powertools.metrics import MetricUnit

from precis.concurrency import add_metric, run_each
from precis.llm import EngineError
from precis.settings import get_settings
from precis.store import keys
from precis.store.db import Db, from_item, get_db, to_item
from precis.store.messages import NewMessage, append_messages
from precis.store.purge import delete_session, purge_session
from precis.store.resources import get_or_create_workspace
from precis.store.summaries import read_summary_state, take_summary_lease
from precis.summaries.engines import SummaryResult
from precis.summaries.runner import session as summarize_module
from precis.summaries.runner import summarize_under_lease
from tests.handlers import invoke
from tests.stream import message_records, stream_record

WS = "ws1"
SHORT = "honcho_chat_summary_short"
FAR = 10.0**10  # a lease that never expires within a test
WAIT_S = 10  # a barrier or event not reached by then: the behaviour under test is missing, fail instead of hanging


def answer(text: str = "summary") -> SummaryResult:
    return SummaryResult(text=text, prompt="[]", model="test", input_tokens=1, output_tokens=1, latency_ms=1.0)


class Gate:
    """An engine whose calls pass only `parties` at a time: together, or not at all (a broken barrier)."""

    name = "gate"

    def __init__(self, parties: int):
        self.barrier = threading.Barrier(parties)
        self.lock = threading.Lock()
        self.in_flight = self.peak = self.calls = 0

    def summarize(self, request):
        with self.lock:
            self.calls += 1
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
        try:
            self.barrier.wait(timeout=WAIT_S)
        finally:
            with self.lock:
                self.in_flight -= 1
        return answer()


class Held:
    """An engine whose first call waits for the test (the lease stays held meanwhile); it records every request."""

    name = "held"

    def __init__(self):
        self.entered, self.go = threading.Event(), threading.Event()
        self.requests = []

    def summarize(self, request):
        self.requests.append(request)
        if len(self.requests) == 1:
            self.entered.set()
            assert self.go.wait(timeout=WAIT_S)
        return answer(f"covers {len(request.messages)} more")


class Recording:
    name = "recording"

    def __init__(self):
        self.requests = []

    def summarize(self, request):
        self.requests.append(request)
        return answer()


class FailsFor:
    """A retryable failure for requests holding `word`; the others succeed."""

    name = "fails-for"

    def __init__(self, word: str):
        self.word = word

    def summarize(self, request):
        if any(self.word in content for _, content in request.messages):
            raise EngineError("llm down", retryable=True)
        return answer()


@pytest.fixture
def served(moto_server, monkeypatch) -> Db:
    """The handler's own clients on a moto server (requests serialized, safe from many threads), a workspace."""
    url, _ = moto_server
    monkeypatch.setenv("AWS_ENDPOINT_URL", url)
    get_db.cache_clear()
    db = get_db()
    get_or_create_workspace(db, WS)
    Metrics().clear_metrics()
    yield db
    get_db.cache_clear()


def use_engine(monkeypatch, engine) -> None:
    """Every summary the handler asks for goes to `engine`."""
    monkeypatch.setattr(summarize_module, "_engine", lambda name, settings: engine)


def post(db: Db, session: str, n: int, start: int = 0, word: str = "topic") -> None:
    append_messages(
        db,
        WS,
        session,
        [NewMessage(f"Message {i} about the {word}.", "alice", 6) for i in range(start, start + n)],
        inline_max_bytes=10_000,
    )


def covers(db: Db, session: str) -> int | None:
    stored = read_summary_state(db, WS, session)[0].get(SHORT)
    return stored and stored["covers_seq"]


def lease(db: Db, session: str) -> dict | None:
    return from_item(
        db.client.get_item(TableName=db.table, Key=to_item(keys.summary_lease(WS, session)), ConsistentRead=True).get(
            "Item"
        )
    )


def run_batch(db: Db, sessions: list[str]) -> dict:
    records = [r for s in sessions for r in message_records(db.client, ws=WS, session_id=s)]
    return invoke("SummarizeFunction", {"Records": records})


# --- a batch's sessions at once -------------------------------------------------------------------------------


@pytest.mark.parametrize(("setting", "sessions", "together"), [(None, 4, 4), ("2", 4, 2)])
def test_a_batch_summarizes_its_sessions_at_once_up_to_the_setting(served, monkeypatch, setting, sessions, together):
    if setting:
        monkeypatch.setenv("PRECIS_SUMMARIZE_CONCURRENCY", setting)
        # (read again: the fixture's get_db read the settings before the setting was made, and the handler would
        # run the default's workers, so the peak was the threads' timing, not the setting: a flaky pass)
        get_settings.cache_clear()
    names = [f"s{i}" for i in range(sessions)]
    for name in names:
        post(served, name, 20)
    gate = Gate(together)  # one session at a time breaks the barrier: its calls fail, and so do its records
    use_engine(monkeypatch, gate)
    assert run_batch(served, names) == {"batchItemFailures": []}
    assert [covers(served, n) for n in names] == [20] * sessions
    assert gate.calls == sessions and gate.peak == together
    assert all(lease(served, n) is None for n in names)  # every lease let go


def test_a_failed_session_fails_its_own_records_only_and_lets_its_lease_go(served, monkeypatch):
    post(served, "ok", 20)
    post(served, "down", 20, word="outage")
    use_engine(monkeypatch, FailsFor("outage"))
    down = message_records(served.client, ws=WS, session_id="down")
    poison = stream_record({"PK": {"S": f"WS#{WS}#S#ok"}, "SK": {"S": "NOTE#1"}, "kind": {"S": "note"}})
    records = message_records(served.client, ws=WS, session_id="ok") + down + [poison]
    out = invoke("SummarizeFunction", {"Records": records})
    assert {f["itemIdentifier"] for f in out["batchItemFailures"]} == {
        r["dynamodb"]["SequenceNumber"] for r in [*down, poison]
    }
    assert covers(served, "ok") == 20 and covers(served, "down") is None
    assert lease(served, "down") is None  # the retry of its records can take it at once


def test_metrics_added_from_many_threads_are_all_published_in_valid_emf(capsys):
    Metrics().clear_metrics()

    def work(i: int) -> None:
        for _ in range(30):
            add_metric(name="Probe", unit=MetricUnit.Count, value=1)

    assert run_each(list(range(16)), work, workers=16) == dict.fromkeys(range(16))
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
    published = sum(len(p["Probe"]) if isinstance(p["Probe"], list) else 1 for p in printed)
    left = len(Metrics().metric_set.get("Probe", {}).get("Value", []))
    assert published + left == 16 * 30 and published  # the 100-value flushes happened, from one thread, whole
    Metrics().clear_metrics()


# --- one invocation at a time per session ---------------------------------------------------------------------


def test_an_invocation_that_finds_the_session_busy_leaves_it_to_the_holder_who_runs_again(served):
    post(served, "s1", 20)
    holder_engine, other_engine = Held(), Recording()
    outcome = {}
    holder = threading.Thread(
        target=lambda: outcome.update(
            holder=summarize_under_lease(served, get_settings(), WS, "s1", engine_for=lambda _: holder_engine)
        )
    )
    holder.start()
    assert holder_engine.entered.wait(timeout=WAIT_S)  # the holder is in its LLM call, covering 1..20
    post(served, "s1", 20, start=20)  # 21..40: the next short summary falls due meanwhile
    other = summarize_under_lease(served, get_settings(), WS, "s1", engine_for=lambda _: other_engine)
    assert other.runs == 0 and other_engine.requests == []  # no LLM call for a session being summarized
    assert lease(served, "s1")["dirty"] is True
    holder_engine.go.set()
    holder.join(timeout=WAIT_S)
    assert outcome["holder"].runs == 2
    assert [(w.covers_seq, w.stored) for w in outcome["holder"].written] == [(20, True), (40, True)]
    assert [len(r.messages) for r in holder_engine.requests] == [20, 20]  # one LLM call per due summary
    assert covers(served, "s1") == 40 and lease(served, "s1") is None


def test_a_crashed_holders_lease_expires_at_its_deadline(served):
    post(served, "s1", 20)
    assert take_summary_lease(served, WS, "s1", owner="crashed", until=1_100.0, clock=lambda: 1_000.0)
    engine = Recording()
    before = summarize_under_lease(served, get_settings(), WS, "s1", engine_for=lambda _: engine, clock=lambda: 1_099.0)
    assert before.runs == 0 and engine.requests == [] and covers(served, "s1") is None
    after = summarize_under_lease(served, get_settings(), WS, "s1", engine_for=lambda _: engine, clock=lambda: 1_100.5)
    assert after.runs == 1 and len(engine.requests) == 1 and covers(served, "s1") == 20
    assert lease(served, "s1") is None


def test_the_retry_of_a_crashed_holders_batch_takes_its_lease_over_at_once(served):
    post(served, "s1", 20)
    assert take_summary_lease(
        served, WS, "s1", owner="crashed", until=2_000.0, clock=lambda: 1_000.0, records=["101", "102"]
    )
    engine = Recording()
    other = summarize_under_lease(
        served, get_settings(), WS, "s1", records=["103"], engine_for=lambda _: engine, clock=lambda: 1_001.0
    )
    assert other.runs == 0 and engine.requests == []  # another batch's records: the holder may be alive
    # Lambda sends a batch again only once the invocation that had it is over: the holder will not run again.
    retry = summarize_under_lease(
        served, get_settings(), WS, "s1", records=["101"], engine_for=lambda _: engine, clock=lambda: 1_002.0
    )
    assert retry.runs == 1 and covers(served, "s1") == 20 and lease(served, "s1") is None


def test_a_holder_out_of_time_fails_its_records_and_lets_the_lease_go(served):
    post(served, "s1", 20)

    class Slow(Recording):
        timeout = 30.0

    with pytest.raises(TimeoutError, match="no summary step fit"):
        summarize_under_lease(served, get_settings(), WS, "s1", engine_for=lambda _: Slow(), remaining_s=lambda: 20.0)
    assert lease(served, "s1") is None  # the retried records take it at once, whoever marked it meanwhile


def test_a_deferred_sessions_records_succeed_through_the_handler(served, monkeypatch):
    post(served, "s1", 20)
    engine = Recording()
    use_engine(monkeypatch, engine)
    assert take_summary_lease(served, WS, "s1", owner="busy", until=FAR, clock=lambda: 0.0)
    assert run_batch(served, ["s1"]) == {"batchItemFailures": []}
    assert engine.requests == [] and lease(served, "s1")["dirty"] is True


def test_a_purge_removes_the_lease_with_the_partition(served):
    post(served, "s1", 3)
    assert take_summary_lease(served, WS, "s1", owner="busy", until=FAR, clock=lambda: 0.0)
    delete_session(served, WS, "s1")
    session = from_item(served.client.get_item(TableName=served.table, Key=to_item(keys.session(WS, "s1")))["Item"])
    assert purge_session(served, WS, "s1", session["incarnation"]).done
    assert lease(served, "s1") is None
