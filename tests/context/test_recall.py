"""Recalled messages (ext): with `search_query`, the context holds the session's messages that best match it from
outside the newest window, within a quarter of the budget, in time order, counted, never twice."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from precis.context.budget import MessageCost, recall_budget, select_recalled

from local import moto_vectors
from tests.handlers import call

WS = "ws1"
W = f"/v3/workspaces/{WS}"
FILLER = ["we talked about the weather again today", "the meeting moved to the afternoon", "I had coffee at noon",
          "traffic was bad on the bridge", "the printer jammed twice", "lunch was a sandwich at my desk"]
ANSWER = "my sister Maria adopted a greyhound named Biscuit from the shelter"
QUESTION = "which dog did Maria adopt"


@pytest.fixture
def ws(aws):
    assert call("POST", "/v3/workspaces", {"id": WS}).status == 201
    return aws


def post(session: str, messages: list[dict]) -> list[dict]:
    answer = call("POST", f"{W}/sessions/{session}/messages", {"messages": messages})
    assert answer.status == 201, answer.body
    return answer.json()


def long_session(session: str, answer_at: int = 5, count: int = 200, run_of_answer: str | None = None) -> dict:
    """`count` messages of filler with the answer at `answer_at` (0-based); the answer's stored message."""
    assert call("POST", f"{W}/sessions", {"id": session}).status == 201
    stored = {}
    for start in range(0, count, 50):
        batch = []
        for i in range(start, min(start + 50, count)):
            content = ANSWER if i == answer_at else f"{FILLER[i % len(FILLER)]} ({i})"
            message = {"peer_id": "alice" if i % 2 else "bot", "content": content}
            if run_of_answer and answer_at - 1 <= i <= answer_at + 1:
                message["run_id"] = run_of_answer
            batch.append(message)
        for message in post(session, batch):
            stored[message["content"]] = message
    moto_vectors.settle()  # DynamoDB fills the search index asynchronously: time enough for it has passed
    return stored[ANSWER]


def context(session: str, **query) -> dict:
    args = "&".join(f"{k}={v}" for k, v in query.items())
    answer = call("GET", f"{W}/sessions/{session}/context?{args}")
    assert answer.status == 200, answer.body
    return answer.json()


def test_the_message_that_answers_the_query_is_recalled_from_outside_the_window(ws):
    answer = long_session("s1")
    plain = context("s1", tokens=300, summary="false")
    assert answer["id"] not in [m["id"] for m in plain["messages"]]  # far older than the newest window
    assert "recalled" not in plain

    found = context("s1", tokens=300, summary="false", search_query=QUESTION.replace(" ", "%20"))
    ids = [m["id"] for m in found["messages"]]
    assert found["recalled"] == [answer["id"]] and ids[0] == answer["id"]
    assert found["messages"][0]["content"] == ANSWER and found["messages"][0]["created_at"] == answer["created_at"]
    assert len(ids) == len(set(ids))
    seqs = [m["seq"] for m in found["messages"]]
    assert seqs == sorted(seqs)  # in time order: the recalled first, then the window
    assert found["token_count"] == sum(m["token_count"] for m in found["messages"]) <= 300
    window = found["messages"][1:]
    # The window gave up what the recalled message takes, and only that: it is the newest messages that fit.
    assert [m["id"] for m in window] == [m["id"] for m in plain["messages"]][-len(window):]
    assert sum(m["token_count"] for m in window) + answer["token_count"] <= 300


def test_a_message_already_in_the_window_is_never_recalled_again(ws):
    answer = long_session("s1", answer_at=197)
    found = context("s1", tokens=2000, summary="false", search_query=QUESTION.replace(" ", "%20"))
    ids = [m["id"] for m in found["messages"]]
    assert answer["id"] in ids and ids.count(answer["id"]) == 1 and found["recalled"] == []


def test_recalled_messages_take_at_most_a_quarter_of_the_budget(ws):
    long_session("s1")
    # Each filler message names its number: a query matching all of them would fill the whole budget.
    found = context("s1", tokens=400, summary="false", search_query="weather%20meeting%20coffee%20traffic")
    recalled = [m for m in found["messages"] if m["id"] in found["recalled"]]
    assert recalled and sum(m["token_count"] for m in recalled) <= 100
    assert found["token_count"] == sum(m["token_count"] for m in found["messages"]) <= 400


def test_with_whole_runs_a_recalled_message_comes_with_its_whole_run(ws):
    answer = long_session("s1", run_of_answer="turn-7")
    found = context("s1", tokens=300, summary="false", whole_runs="true",
                    search_query=QUESTION.replace(" ", "%20"))
    recalled = [m for m in found["messages"] if m["id"] in found["recalled"]]
    assert [m["run_id"] for m in recalled] == ["turn-7"] * 3
    assert answer["id"] == recalled[1]["id"]


def test_a_query_that_matches_nothing_recalls_nothing_and_the_window_keeps_its_budget(ws):
    long_session("s1")
    plain = context("s1", tokens=300, summary="false")
    found = context("s1", tokens=300, summary="false", search_query="zeppelin")
    assert found["recalled"] == [] and [m["id"] for m in found["messages"]] == [m["id"] for m in plain["messages"]]


def test_search_finds_a_message_as_soon_as_its_post_answers(ws):
    """Read-your-writes: the post indexes the message before answering, and search reads that index with strongly
    consistent reads (no stream consumer has run, and the vector indexes have not caught up, in this test)."""
    assert call("POST", f"{W}/sessions", {"id": "s1"}).status == 201
    stored = post("s1", [{"peer_id": "alice", "content": "I love gelato in the summer"},
                         {"peer_id": "alice", "content": "the train was late"}])
    assert moto_vectors.replication.lag_s > 0  # the vector indexes lag: what search finds, it found in the table
    for route in ("/search", "/sessions/s1/search", "/peers/alice/search"):
        hits = call("POST", f"{W}{route}", {"query": "gelato"}).json()
        assert [h["id"] for h in hits] == [stored[0]["id"]], route


# ---------------------------------------------------------------- the pure choice


RUNS = st.lists(st.tuples(st.integers(0, 14), st.lists(st.integers(0, 30), min_size=1, max_size=4)),
                unique_by=lambda run: run[0], max_size=10)


@given(runs=RUNS, budget=st.integers(0, 120), before=st.integers(1, 75))
@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
def test_select_recalled_keeps_whole_runs_within_the_budget_before_the_window(runs, budget, before):
    as_costs = [[MessageCost(5 * block + 1 + i, tokens, 0, 5 * block + 1) for i, tokens in enumerate(sizes)]
                for block, sizes in runs]  # disjoint runs, best first in the order given
    chosen = select_recalled(as_costs, budget, before)
    seqs = [m.seq for m in chosen]
    assert seqs == sorted(set(seqs)) and all(s < before for s in seqs)
    assert sum(m.token_count for m in chosen) <= budget
    taken = [run for run in as_costs if run[0].seq in seqs]
    assert all(all(m.seq in seqs for m in run) for run in taken)  # a run whole or not at all
    assert sorted(seqs) == sorted(m.seq for run in taken for m in run)
    # Greedy in rank order: a run left out did not fit what the better-ranked ones left, or reached the window.
    used = 0
    for run in as_costs:
        cost = sum(m.token_count for m in run)
        if run in taken:
            used += cost
        else:
            assert run[-1].seq >= before or used + cost > budget


def test_recall_budget_is_a_quarter_of_the_limit_out_of_the_messages_share():
    assert recall_budget(2000, 1500) == 500
    assert recall_budget(2000, 300) == 300
    assert recall_budget(2000, 0) == 0
