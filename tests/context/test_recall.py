"""Recalled messages (ext): with `search_query`, the context holds the session's messages that best match it from
outside the newest window, within a quarter of the budget, in time order, counted, never twice."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from local import moto_vectors
from precis.context.budget import Recallable, recall_reserve, select_recalled
from tests.handlers import call

WS = "ws1"
W = f"/v3/workspaces/{WS}"
FILLER = [
    "we talked about the weather again today",
    "the meeting moved to the afternoon",
    "I had coffee at noon",
    "traffic was bad on the bridge",
    "the printer jammed twice",
    "lunch was a sandwich at my desk",
]
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
    assert [m["id"] for m in window] == [m["id"] for m in plain["messages"]][-len(window) :]
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
    found = context("s1", tokens=300, summary="false", whole_runs="true", search_query=QUESTION.replace(" ", "%20"))
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
    stored = post(
        "s1",
        [
            {"peer_id": "alice", "content": "I love gelato in the summer"},
            {"peer_id": "alice", "content": "the train was late"},
        ],
    )
    assert moto_vectors.replication.lag_s > 0  # the vector indexes lag: what search finds, it found in the table
    for route in ("/search", "/sessions/s1/search", "/peers/alice/search"):
        hits = call("POST", f"{W}{route}", {"query": "gelato"}).json()
        assert [h["id"] for h in hits] == [stored[0]["id"]], route


# ---------------------------------------------------------------- across the peer's sessions

SECRET = "test-signing-secret-0123456789abcdef"
Q = QUESTION.replace(" ", "%20")


def history(ws_fixture=None) -> dict:
    """alice's earlier session s1 (with bot) holds the answer; s2 (alice, bot) is the one the context is read for;
    s3 (bob, carol) holds the same answer without alice. The answer's stored message in s1."""
    for peer in ("alice", "bot", "bob", "carol"):
        assert call("POST", f"{W}/peers", {"id": peer}).status == 201
    for session, members in (("s1", ("alice", "bot")), ("s2", ("alice", "bot")), ("s3", ("bob", "carol"))):
        assert call("POST", f"{W}/sessions", {"id": session, "peers": {p: {} for p in members}}).status == 201
    earlier = post(
        "s1",
        [
            {
                "peer_id": "alice",
                "content": f"{FILLER[i % 6]} ({i})",
                "created_at": f"2026-03-0{1 + i // 10}T10:{i:02d}:00Z",
            }
            for i in range(20)
        ]
        + [{"peer_id": "alice", "content": ANSWER, "created_at": "2026-03-05T12:00:00Z"}],
    )
    post("s3", [{"peer_id": "bob", "content": ANSWER}, {"peer_id": "carol", "content": "nice"}])
    post("s2", [{"peer_id": "alice" if i % 2 else "bot", "content": f"{FILLER[i % 6]} [{i}]"} for i in range(40)])
    return earlier[-1]


def recalled_of(answer: dict) -> list[dict]:
    return [m for m in answer["messages"] if m["id"] in answer["recalled"]]


def test_recall_reaches_the_target_peers_earlier_sessions_with_session_and_date(ws):
    answer = history()
    found = context("s2", tokens=400, summary="false", peer_target="alice", search_query=Q)
    recalled = recalled_of(found)
    assert [m["id"] for m in recalled] == [answer["id"]] == found["recalled"]
    assert recalled[0]["session_id"] == "s1" and recalled[0]["created_at"] == answer["created_at"]
    assert recalled[0]["content"] == ANSWER and found["messages"][0]["id"] == answer["id"]  # recalled first
    window = found["messages"][1:]
    assert {m["session_id"] for m in window} == {"s2"}
    ids = [m["id"] for m in found["messages"]]
    assert len(ids) == len(set(ids))
    assert found["token_count"] == sum(m["token_count"] for m in found["messages"]) <= 400
    # Without a target, the session's own peers' sessions: the same.
    assert context("s2", tokens=400, summary="false", search_query=Q)["recalled"] == [answer["id"]]


def test_recall_never_reaches_a_session_the_peers_are_not_in(ws):
    history()
    found = context("s2", tokens=400, summary="false", peer_target="alice", search_query=Q)
    assert all(m["session_id"] != "s3" for m in found["messages"])
    # bob's view: s3 is his, and s2 (where the context is read) is not: only s3's copy can be recalled
    bobs = context("s2", tokens=400, summary="false", peer_target="bob", search_query=Q)
    assert [m["session_id"] for m in recalled_of(bobs)] == ["s3"]


@pytest.mark.parametrize("narrowing", ["limit_to_session=true", "sessions=s2"])
def test_limit_to_session_and_a_session_allowlist_narrow_recall(ws, narrowing):
    history()
    found = context(
        "s2", tokens=400, summary="false", peer_target="alice", search_query=Q, **dict([narrowing.split("=")])
    )
    assert found["recalled"] == []
    wider = context("s2", tokens=400, summary="false", peer_target="alice", search_query=Q, sessions="s1,s2")
    assert [m["session_id"] for m in recalled_of(wider)] == ["s1"]


def test_a_scope_narrows_recall_to_its_sessions(ws):
    history()
    assert call("POST", f"{W}/scopes", {"id": "team"}).status in (200, 201)
    assert call("POST", f"{W}/scopes/team/sessions", {"session_ids": ["s2"]}).status < 300
    found = context("s2", tokens=400, summary="false", peer_target="alice", scope="team", search_query=Q)
    assert found["recalled"] == []
    assert call("POST", f"{W}/scopes/team/sessions", {"session_ids": ["s1"]}).status < 300
    found = context("s2", tokens=400, summary="false", peer_target="alice", scope="team", search_query=Q)
    assert [m["session_id"] for m in recalled_of(found)] == ["s1"]


def test_a_deleted_session_is_never_recalled(ws):
    history()
    assert call("DELETE", f"{W}/sessions/s1").status in (200, 202, 204)
    found = context("s2", tokens=400, summary="false", peer_target="alice", search_query=Q)
    assert found["recalled"] == []


def test_with_whole_runs_a_message_recalled_from_another_session_comes_with_its_run(ws):
    history()
    post(
        "s1",
        [
            {"peer_id": "bot", "content": "tell me about your family", "run_id": "r9"},
            {"peer_id": "alice", "content": "Biscuit the greyhound sleeps all day", "run_id": "r9"},
            {"peer_id": "bot", "content": "sounds lovely", "run_id": "r9"},
        ],
    )
    found = context(
        "s2",
        tokens=600,
        summary="false",
        whole_runs="true",
        peer_target="alice",
        search_query="Biscuit%20greyhound%20sleeps",
    )
    runs = [m.get("run_id") for m in recalled_of(found) if m.get("run_id")]
    assert runs == ["r9"] * 3


@pytest.fixture
def keyed(ws, monkeypatch):
    from precis.auth import mint_key
    from precis.settings import get_settings

    history()
    monkeypatch.setenv("PRECIS_AUTH", "true")
    monkeypatch.setenv("PRECIS_JWT_SECRET", SECRET)
    get_settings.cache_clear()
    return lambda **claims: {"Authorization": f"Bearer {mint_key(SECRET, workspace=WS, **claims)}"}


@pytest.mark.parametrize(
    ("claims", "reaches_s1"),
    [({}, True), ({"peer": "alice"}, True), ({"peer": "bot"}, True), ({"session": "s2"}, False)],
)
def test_recall_reaches_only_the_sessions_the_key_may_read(keyed, claims, reaches_s1):
    # The OpenAPI document includes the read routes in a resolver of its own: a key must bound recall after it too.
    assert call("GET", "/openapi.json").status == 200
    query = f"tokens=400&summary=false&search_query={Q}" + ("" if claims.get("peer") == "bot" else "&peer_target=alice")
    answer = call("GET", f"{W}/sessions/s2/context?{query}", headers=keyed(**claims))
    assert answer.status == 200, answer.body
    assert {m["session_id"] for m in recalled_of(answer.json())} == ({"s1"} if reaches_s1 else set())


def test_a_peer_key_recalls_only_from_sessions_its_peer_is_in(keyed):
    """bot's key, reading bot's own view in s2 of its sessions: alice's s1 is one of them; and a new session of
    alice's alone with the answer is not, though alice (the session's other peer) takes part in it."""
    assert call("POST", f"{W}/sessions", {"id": "s4", "peers": {"alice": {}}}, headers=keyed()).status == 201
    assert (
        call(
            "POST",
            f"{W}/sessions/s4/messages",
            {"messages": [{"peer_id": "alice", "content": ANSWER}]},
            headers=keyed(),
        ).status
        == 201
    )
    workspace = call("GET", f"{W}/sessions/s2/context?tokens=400&summary=false&search_query={Q}", headers=keyed())
    assert {m["session_id"] for m in recalled_of(workspace.json())} >= {"s4"}
    bots = call("GET", f"{W}/sessions/s2/context?tokens=400&summary=false&search_query={Q}", headers=keyed(peer="bot"))
    assert bots.status == 200, bots.body
    assert "s4" not in {m["session_id"] for m in recalled_of(bots.json())}


# ---------------------------------------------------------------- the pure choice


RUNS = st.lists(
    st.tuples(st.sampled_from(["s1", "s2"]), st.integers(0, 14), st.lists(st.integers(0, 30), min_size=1, max_size=4)),
    unique_by=lambda run: run[:2],
    max_size=10,
)


@given(runs=RUNS, budget=st.integers(0, 120))
@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
def test_select_recalled_keeps_whole_runs_within_the_budget(runs, budget):
    as_costs = [
        [Recallable((session, 5 * block + 1 + i), tokens) for i, tokens in enumerate(sizes)]
        for session, block, sizes in runs
    ]  # disjoint runs, best first in the order given
    chosen = select_recalled(as_costs, budget)
    keys = [m.key for m in chosen]
    assert len(keys) == len(set(keys))
    assert sum(m.token_count for m in chosen) <= budget
    taken = [run for run in as_costs if run[0].key in keys]
    assert all(all(m.key in keys for m in run) for run in taken)  # a run whole or not at all
    assert sorted(keys) == sorted(m.key for run in taken for m in run)
    # Greedy in rank order: a run left out did not fit what the better-ranked ones left.
    used = 0
    for run in as_costs:
        cost = sum(m.token_count for m in run)
        if run in taken:
            used += cost
        else:
            assert used + cost > budget


def test_the_recall_reserve_is_the_share_of_the_limit_rounded_down():
    assert recall_reserve(2000, 0.25) == 500
    assert recall_reserve(2001, 0.5) == 1000
    assert recall_reserve(2000, 0) == 0
    with pytest.raises(ValueError, match="share"):
        recall_reserve(2000, 1.5)
