"""The deriver end to end through its handler on moto: who observes whom, exactly once, batching, purge, status."""

from __future__ import annotations

import threading
import time

import pytest

from tests.handlers import call, invoke, post_messages
from tests.stream import message_records

W = "/v3/workspaces/ws1"
S = f"{W}/sessions/s1"


def post(*messages: tuple[str, str], session: str = "s1") -> list[dict]:
    return post_messages(session, *messages)


def derive(client, session: str = "s1", first: int = 1) -> dict:
    return invoke("DeriveFunction", {"Records": message_records(client, session_id=session, first=first)})


def conclusions(observer: str | None = None, observed: str | None = None, **filters) -> list[dict]:
    if observer:
        filters["observer_id"] = observer
    if observed:
        filters["observed_id"] = observed
    reply = call("POST", f"{W}/conclusions/list?size=100", {"filters": filters} if filters else None)
    assert reply.status == 200, reply.body
    return reply.body["items"]


def status(**query) -> dict:
    suffix = "&".join(f"{k}={v}" for k, v in query.items())
    reply = call("GET", f"{W}/queue/status" + (f"?{suffix}" if suffix else ""))
    assert reply.status == 200, reply.body
    return reply.body


@pytest.fixture
def ws(aws):
    assert call("POST", "/v3/workspaces", {"id": "ws1"}).status == 201
    return aws


def test_a_first_person_statement_becomes_a_conclusion_of_the_sender(ws):
    (posted,) = post(("alice", "I moved to Lisbon last spring."))
    assert derive(ws["dynamodb"]) == {"batchItemFailures": []}
    (found,) = conclusions("alice", "alice")
    assert found["content"] == "alice moved to Lisbon last spring"
    assert (found["session_id"], found["level"], found["times_derived"], found["source_ids"]) == (
        "s1",
        "explicit",
        1,
        None,
    )
    assert len(found["id"]) == 21
    assert call("GET", f"{W}/conclusions/{found['id']}").body == found
    counts = status(session_id="s1")
    assert counts["pending_work_units"] == 0 and counts["in_progress_work_units"] == 0
    assert counts["completed_work_units"] >= 1
    del posted


def test_nothing_is_derived_from_an_unobserved_sender_by_anyone(ws):
    assert (
        call(
            "POST",
            f"{W}/sessions",
            {"id": "s1", "peers": {"alice": {"observe_me": False}, "bob": {"observe_others": True}}},
        ).status
        == 201
    )
    post(("alice", "I have two cats."), ("bob", "I live in Porto."))
    assert derive(ws["dynamodb"]) == {"batchItemFailures": []}
    assert conclusions(observed="alice") == []
    assert [c["content"] for c in conclusions("bob", "bob")] == ["bob lives in Porto"]
    # alice's messages are done (skipped), not pending forever
    assert status(session_id="s1")["pending_work_units"] == 0


def test_the_peer_configuration_decides_when_the_session_leaves_observe_me_unset(ws):
    assert call("POST", f"{W}/peers", {"id": "alice", "configuration": {"observe_me": False}}).status == 201
    post(("alice", "I have two cats."))
    derive(ws["dynamodb"])
    assert conclusions(observed="alice") == []
    # the session-peer config wins over the peer's
    assert call("PUT", f"{S}/peers/alice/config", {"observe_me": True}).status in (200, 204)
    post(("alice", "I work as a nurse."))
    derive(ws["dynamodb"], first=2)
    assert [c["content"] for c in conclusions("alice", "alice")] == ["alice works as a nurse"]


def test_members_observing_others_get_copies_of_their_own(ws):
    assert (
        call(
            "POST", f"{W}/sessions", {"id": "s1", "peers": {"alice": {}, "bob": {"observe_others": True}, "carol": {}}}
        ).status
        == 201
    )
    post(("alice", "My sister is Ana."))
    derive(ws["dynamodb"])
    own, bobs = conclusions("alice", "alice"), conclusions("bob", "alice")
    assert [c["content"] for c in own] == [c["content"] for c in bobs] == ["alice's sister is Ana"]
    assert own[0]["id"] != bobs[0]["id"]
    assert conclusions("carol", "alice") == []


def test_a_redelivered_batch_derives_each_message_once(ws):
    post(("alice", "I moved to Lisbon last spring."), ("alice", "I have a dog named Rover."))
    records = message_records(ws["dynamodb"])
    for _ in range(3):
        assert invoke("DeriveFunction", {"Records": records}) == {"batchItemFailures": []}
    found = conclusions("alice", "alice")
    assert sorted(c["content"] for c in found) == ["alice has a dog named Rover", "alice moved to Lisbon last spring"]
    assert all(c["times_derived"] == 1 for c in found)


class _SlowExtractive:
    """The extractive engine, slowed so that concurrent derivers of one sender overlap in every step."""

    def __init__(self):
        from precis.memory.engines.extractive import ExtractiveDeriver

        self.inner = ExtractiveDeriver()

    def derive(self, request):
        time.sleep(0.05)
        return self.inner.derive(request)

    def update_card(self, *args):
        return self.inner.update_card(*args)


def test_concurrent_derivers_of_one_sender_derive_each_message_once_with_no_gap(moto_server):
    """On a moto server (requests serialized, as DynamoDB resolves conflicts): six derivers of the same sender at once,
    while messages keep arriving; every message is derived exactly once."""
    import boto3
    from botocore.config import Config

    from precis.llm.embeddings import HashedEmbedder
    from precis.memory.deriver import SessionTarget, derive_session
    from precis.settings import get_settings
    from precis.store import conclusions as store
    from precis.store.db import Db
    from precis.store.messages import NewMessage, append_messages
    from precis.store.resources import get_or_create_workspace

    url, clients = moto_server
    db = Db(
        client=boto3.client("dynamodb", endpoint_url=url, config=Config(max_pool_connections=16)),
        s3=clients["s3"],
        table="precis-local",
        bucket="precis-local",
    )
    get_or_create_workspace(db, "ws1")
    facts = [f"I have {n} cats." for n in range(2, 14)]
    engine, embedder, errors = _SlowExtractive(), HashedEmbedder(get_settings().embed_dimensions), []

    def deriver():
        try:
            for _ in range(4):
                derive_session(
                    db,
                    get_settings(),
                    SessionTarget("ws1", "s1"),
                    senders=["alice"],
                    engine_for=lambda _: engine,
                    embedder=embedder,
                )
        except Exception as exc:  # surfaced below
            errors.append(exc)

    append_messages(db, "ws1", "s1", [NewMessage(facts[0], "alice", 5)], inline_max_bytes=16_384)
    threads = [threading.Thread(target=deriver) for _ in range(6)]
    for thread in threads:
        thread.start()
    for fact in facts[1:]:
        append_messages(db, "ws1", "s1", [NewMessage(fact, "alice", 5)], inline_max_bytes=16_384)
    for thread in threads:
        thread.join()
    assert errors == []
    derive_session(
        db,
        get_settings(),
        SessionTarget("ws1", "s1"),
        senders=["alice"],
        engine_for=lambda _: engine,
        embedder=embedder,
    )  # the last messages may have arrived after every thread's last look
    found = store.list_conclusions(db, "ws1", {"observer_id": "alice", "observed_id": "alice"}, 1, 100, False)
    assert sorted(c["content"] for c in found["items"]) == sorted(f"alice has {n} cats" for n in range(2, 14))
    assert all(c["times_derived"] == 1 for c in found["items"])


def test_saying_the_same_thing_again_counts_it_instead_of_copying_it(ws):
    post(("alice", "I have a dog named Rover."))
    derive(ws["dynamodb"])
    post(("alice", "I have a dog named Rover."))
    derive(ws["dynamodb"], first=2)
    (found,) = conclusions("alice", "alice")
    assert found["times_derived"] == 2


def test_deleting_a_session_removes_what_was_derived_only_from_it(ws):
    post(("alice", "I moved to Lisbon last spring."))
    post(("alice", "I have a dog named Rover."), session="s2")
    derive(ws["dynamodb"])
    derive(ws["dynamodb"], session="s2")
    assert len(conclusions("alice", "alice")) == 2
    assert call("DELETE", S).status in (200, 202, 204)
    # the summarizer's purge (its stream record: the session item marked deleted)
    session_item = ws["dynamodb"].get_item(
        TableName="precis-local", Key={"PK": {"S": "WS#ws1"}, "SK": {"S": "SESSION#s1"}}
    )["Item"]
    from tests.stream import stream_record

    assert invoke("SummarizeFunction", {"Records": [stream_record(session_item, "MODIFY")]}) == {
        "batchItemFailures": []
    }
    assert [c["content"] for c in conclusions("alice", "alice")] == ["alice has a dog named Rover"]


def test_the_queue_counts_a_message_the_deriver_has_not_seen_as_pending(ws):
    assert status()["sessions"] is None  # nothing to count yet: no map, as Honcho answers
    post(("alice", "I moved to Lisbon last spring."))
    before = status(session_id="s1")
    assert before["pending_work_units"] >= 1
    assert before["sessions"] is None  # one session: Honcho's flat counts, no per-session map
    derive(ws["dynamodb"])
    after = status(session_id="s1")
    assert after["pending_work_units"] == 0 and after["completed_work_units"] == 1
    assert status()["sessions"] == {
        "s1": {
            "session_id": "s1",
            "total_work_units": 1,
            "completed_work_units": 1,
            "in_progress_work_units": 0,
            "pending_work_units": 0,
        }
    }


@pytest.mark.parametrize(
    "query, code",
    [
        ("session_id=nope", 404),
        ("observer_id=nobody", 404),
        ("sender_id=bad%20id", 422),
    ],
)
def test_queue_status_bad_inputs(ws, query, code):
    reply = call("GET", f"{W}/queue/status?{query}")
    assert reply.status == code, reply.body
    assert reply.body["detail"]


class _FailingOnce:
    """An embedder whose first call fails (the deriver stops between storing its job and writing it), then works."""

    def __init__(self, inner):
        self.inner, self.failed = inner, False

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def embed(self, texts):
        if not self.failed:
            self.failed = True
            raise RuntimeError("the embedder is down")
        return self.inner.embed(texts)


def test_a_job_stopped_after_it_was_stored_is_written_by_the_next_derivation_once(ws):
    """The engine's answer is stored on the cursor before anything of it is written: a derivation that fails after
    that leaves the job there, and the next one writes it (without asking the engine again), each conclusion once."""
    from precis.llm.embeddings import HashedEmbedder
    from precis.memory.deriver import SessionTarget, derive_session
    from precis.memory.engines.extractive import ExtractiveDeriver
    from precis.settings import get_settings
    from precis.store import keys
    from precis.store.db import batch_get, get_db

    post(("alice", "I moved to Lisbon last spring."), ("alice", "I have a dog named Rover."))
    db, settings, engine = get_db(), get_settings(), ExtractiveDeriver()
    embedder = HashedEmbedder(settings.embed_dimensions)
    alice = SessionTarget("ws1", "s1")

    def cursor() -> dict:
        return batch_get(db, [keys.derive_cursor("ws1", "s1", "alice")])[0]

    with pytest.raises(RuntimeError, match="the embedder is down"):
        derive_session(
            db, settings, alice, senders=["alice"], engine_for=lambda _: engine, embedder=_FailingOnce(embedder)
        )
    stored = cursor()["job"]
    assert stored["count"] == 2 and sorted(c["content"] for c in stored["conclusions"]) == [
        "alice has a dog named Rover",
        "alice moved to Lisbon last spring",
    ]
    assert conclusions("alice", "alice") == []

    class _Unasked:
        def derive(self, request):
            raise AssertionError("the stored answer is applied; the engine is not asked again")

        def update_card(self, *args):
            return engine.update_card(*args)

    derive_session(db, settings, alice, senders=["alice"], engine_for=lambda _: _Unasked(), embedder=embedder)
    found = conclusions("alice", "alice")
    assert sorted(c["content"] for c in found) == ["alice has a dog named Rover", "alice moved to Lisbon last spring"]
    assert all(c["times_derived"] == 1 for c in found)
    assert "job" not in cursor() and cursor()["through_seq"] == 2 and cursor()["derived"] == 2


@pytest.mark.parametrize("job", ["stream", "wake", "schedule"])
def test_the_deriver_serves_derive_concurrency_targets_at_once_not_the_summarizers(monkeypatch, job):
    from precis.memory import jobs
    from precis.settings import get_settings

    monkeypatch.setenv("PRECIS_DERIVE_CONCURRENCY", "3")
    monkeypatch.setenv("PRECIS_SUMMARIZE_CONCURRENCY", "7")
    get_settings.cache_clear()  # importing the jobs may have read the settings already
    seen = []

    def run_each(targets, run, *, workers):
        seen.append(workers)
        return {}

    monkeypatch.setattr(jobs.concurrency, "run_each", run_each)
    monkeypatch.setattr(jobs, "all_workspaces", lambda db: [])
    if job == "stream":
        jobs.on_stream(None, [], lambda: 60.0)
    elif job == "wake":
        jobs.on_wake(None, [], lambda: 60.0)
    else:
        jobs.on_schedule(None, lambda: 60.0)
    assert seen == [3]


def test_a_sender_who_first_speaks_past_a_long_sessions_first_window_is_derived_at_once(ws):
    """The deriver reads a session from its least advanced sender on, a window at a time: a sender with no cursor
    yet starts at the session's start, so one who first speaks after the first window's 1,000 messages has its
    cursor moved past the windows it is absent from, and is derived in the same call."""
    from precis.llm.embeddings import HashedEmbedder
    from precis.memory.deriver import MAX_JOB_MESSAGES, SessionTarget, derive_session
    from precis.memory.engines.extractive import ExtractiveDeriver
    from precis.settings import get_settings
    from precis.store.db import get_db
    from precis.store.messages import NewMessage, append_messages

    db, settings, engine = get_db(), get_settings(), ExtractiveDeriver()
    embedder = HashedEmbedder(settings.embed_dimensions)
    window = MAX_JOB_MESSAGES * 5
    for _ in range(0, window + 5, 100):
        append_messages(db, "ws1", "s1", [NewMessage("Hello there.", "bob", 3)] * 100, inline_max_bytes=16_384)
    target = SessionTarget("ws1", "s1")
    derive_session(db, settings, target, senders=["bob"], engine_for=lambda _: engine, embedder=embedder)
    append_messages(
        db, "ws1", "s1", [NewMessage("I moved to Lisbon last spring.", "alice", 7)], inline_max_bytes=16_384
    )
    outcome = derive_session(db, settings, target, senders=["alice"], engine_for=lambda _: engine, embedder=embedder)
    assert outcome.derived == 1
    assert [c["content"] for c in conclusions("alice", "alice")] == ["alice moved to Lisbon last spring"]
