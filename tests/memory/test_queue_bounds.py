"""The workspace's queue status is bounded in what it reads and answers whatever the number of sessions (issue 46,
item 5): cursors with work first, a capped map that says so, and never a total of 0 while work is pending."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import NamedTuple

import pytest

from precis.store import derive_cursors
from precis.store.db import get_db
from tests.handlers import call

W = "/v3/workspaces/ws1"
NOW = "2026-01-01T00:00:00+00:00"


class Target(NamedTuple):
    workspace: str
    session: str
    sender: str


@pytest.fixture
def ws(aws):
    get_db.cache_clear()
    assert call("POST", "/v3/workspaces", {"id": "ws1"}).status == 201
    return aws


@contextmanager
def items_read(db) -> Iterator[list[int]]:
    """The number of items each Query of the handlers' client returns meanwhile, recorded by botocore's own hook."""
    counts: list[int] = []

    def record(parsed, **_) -> None:
        counts.append(len(parsed.get("Items", [])))

    db.client.meta.events.register("after-call.dynamodb.Query", record)
    try:
        yield counts
    finally:
        db.client.meta.events.unregister("after-call.dynamodb.Query", record)


def test_the_workspace_status_reads_the_cursors_with_work_first_and_a_bounded_number_of_them(ws):
    db = get_db()
    idle = derive_cursors.WORKSPACE_READ_MAX + 200
    for i in range(idle):  # sessions whose every message is derived: what a long-lived workspace holds most of
        derive_cursors.finish(db, Target("ws1", f"idle{i:05d}", "alice"), "inc", 10, 10, NOW)
    for i in range(3):  # batches waiting for their time
        derive_cursors.wait(db, Target("ws1", f"wait{i}", "alice"), None, "inc", "2026-01-01T00:05:00+00:00", 4)
    running = Target("ws1", "running", "bob")
    derive_cursors.store_job(db, running, None, "inc", {"token": "t0", "to_seq": 6, "count": 6, "conclusions": []})

    with items_read(db) as counts:
        reply = call("GET", f"{W}/queue/status")
    assert reply.status == 200
    status = reply.body
    assert (status["pending_work_units"], status["in_progress_work_units"]) == (12, 6)  # all of the work, exactly
    assert {"wait0", "wait1", "wait2", "running"} <= set(status["sessions"])
    assert len(status["sessions"]) == derive_cursors.WORKSPACE_READ_MAX and status["sessions_capped"] is True
    # the cursors read, whatever the workspace holds: those kept, and at most a page beyond in each ByDue partition
    assert sum(counts) <= derive_cursors.WORKSPACE_READ_MAX + 1 + 512 + 8 * len(derive_cursors.due_partitions("ws1"))
    assert reply.payload_bytes < 250_000


def test_a_small_workspace_keeps_its_whole_map_and_its_completed_counts(ws):
    db = get_db()
    for i in range(5):
        derive_cursors.finish(db, Target("ws1", f"s{i}", "alice"), "inc", 3, 3, NOW)
    status = call("GET", f"{W}/queue/status").body
    assert status["completed_work_units"] == 15 and status["pending_work_units"] == 0
    assert sorted(status["sessions"]) == [f"s{i}" for i in range(5)] and "sessions_capped" not in status


def test_a_job_being_applied_leaves_the_flush_alone_and_a_waiting_batch_keeps_its_time(ws):
    db = get_db()
    fresh, waited = Target("ws1", "s1", "alice"), Target("ws1", "s2", "alice")
    derive_cursors.store_job(db, fresh, None, "inc", {"token": "a", "to_seq": 1, "count": 1})
    derive_cursors.wait(db, waited, None, "inc", "2026-01-01T00:05:00+00:00", 1)
    (seen,) = derive_cursors.cursors(db, "ws1", "s2")
    derive_cursors.store_job(db, waited, seen, "inc", {"token": "b", "to_seq": 1, "count": 1})
    assert derive_cursors.due(db, ["ws1"], "2026-01-01T00:10:00+00:00") == [("ws1", "s2", "alice")]
    assert call("GET", f"{W}/queue/status").body["in_progress_work_units"] == 2


def test_one_sessions_status_reads_a_bounded_number_of_messages_and_counts_the_rest_as_pending(ws):
    from precis.memory.queue import SESSION_READ_MAX
    from precis.summaries.due import SUMMARIES_READ_MAX

    posted = SESSION_READ_MAX + 500
    for start in range(0, posted, 100):
        batch = [{"peer_id": "alice", "content": f"m{i}"} for i in range(start, start + 100)]
        assert call("POST", f"{W}/sessions/s1/messages", {"messages": batch}).status == 201
    db = get_db()
    with items_read(db) as counts:
        status = call("GET", f"{W}/queue/status?session_id=s1").body
    # none derived yet: every message, those not read included (counted from the tail: never fewer)
    assert posted <= status["pending_work_units"] <= posted + 5
    assert sum(counts) <= SESSION_READ_MAX + SUMMARIES_READ_MAX + 10  # the cursors' messages, the summaries'
