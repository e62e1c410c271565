"""Peer representations and cards: Honcho's selection and rendering, Precis's budget (the whole answer fits)."""

from __future__ import annotations

import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from local import moto_vectors
from precis.context.fit import fit, render
from precis.store.representation import FREQUENT, RECENT, SEMANTIC, Chosen, merge, shares
from precis.tokens import count_text
from tests.handlers import call

W = "/v3/workspaces/ws1"
S = f"{W}/sessions/s1"


# ---------------------------------------------------------------- pure: selection, rendering, fitting


@pytest.mark.parametrize(
    "total, search, top_k, frequent, expected",
    [
        (100, False, None, False, (0, 0, 100)),
        (100, True, None, False, (33, 0, 67)),
        (100, True, 5, False, (5, 0, 95)),
        (100, False, None, True, (0, 50, 50)),
        (100, True, None, True, (33, 33, 34)),
        (100, True, 90, True, (90, 10, 0)),
        (2, True, None, False, (1, 0, 1)),  # at least one nearest when searching
        (1, True, 7, True, (1, 0, 0)),
        (25, False, None, False, (0, 0, 25)),
    ],
)
def test_shares_follow_honchos_rule(total, search, top_k, frequent, expected):
    split = shares(total, search=search, search_top_k=top_k, include_most_frequent=frequent)
    assert (split.semantic, split.frequent, split.recent) == expected


def c(
    cid: str,
    at: str = "2025-06-26T14:03:12+00:00",
    content: str | None = None,
    level: str = "explicit",
    share: int = RECENT,
    premises: tuple[str, ...] = (),
) -> Chosen:
    return Chosen(cid, content or f"alice fact {cid}", level, at, share, premises)


def test_rendering_is_honchos():
    text = render(
        [
            c("b", "2025-06-26T14:05:00+00:00", "alice lives in Lisbon"),
            c("a", "2025-06-26T14:03:12.5+00:00", "alice has a dog named Rover"),
            c(
                "d",
                "2025-06-27T09:00:00Z",
                "alice walks Rover before work",
                "deductive",
                premises=("alice has a dog named Rover",),
            ),
        ]
    )
    assert text == (
        "## Explicit Observations\n\n"
        "[2025-06-26 14:03:12] alice has a dog named Rover\n"
        "[2025-06-26 14:05:00] alice lives in Lisbon\n\n"
        "## Deductive Observations\n\n"
        "[2025-06-27 09:00:00] alice walks Rover before work\n"
        "   Premises:\n"
        "   - alice has a dog named Rover"
    )
    assert render([]) == ""
    assert render([c("x", level="deductive")]).startswith("## Deductive Observations\n\n")


def test_merge_drops_repeats_refills_each_share_and_orders_oldest_first():
    from precis.store.representation import Shares

    semantic = [c("s1", "2025-01-03T00:00:00+00:00"), c("r1", "2025-01-05T00:00:00+00:00")]
    frequent = [c("r1", "2025-01-05T00:00:00+00:00"), c("f1", "2025-01-01T00:00:00+00:00")]
    recent = [
        c("r1", "2025-01-05T00:00:00+00:00"),
        c("r2", "2025-01-04T00:00:00+00:00"),
        c("r3", "2025-01-02T00:00:00+00:00"),
    ]
    merged = merge(Shares(2, 1, 2), semantic, frequent, recent)
    assert [m.id for m in merged] == ["f1", "r3", "s1", "r2", "r1"]
    assert {m.id: m.share for m in merged} == {
        "s1": SEMANTIC,
        "r1": SEMANTIC,
        "f1": FREQUENT,
        "r2": RECENT,
        "r3": RECENT,
    }


times = st.integers(0, 86_399).map(lambda s: f"2025-01-01T{s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}+00:00")
words = st.text(string.ascii_lowercase + " ", min_size=1, max_size=60)
conclusion_lists = st.lists(
    st.tuples(words, times, st.sampled_from([RECENT, FREQUENT, SEMANTIC]), st.sampled_from(["explicit", "deductive"])),
    max_size=25,
    unique_by=lambda t: t[0],
)


@settings(max_examples=300, deadline=None)
@given(conclusion_lists, st.none() | st.lists(words, max_size=40), st.integers(0, 800))
def test_fit_keeps_the_most_relevant_that_fit_and_never_overruns(items, card, budget):
    chosen = [c(f"id{i:02d}", at, f"alice {text}", level, share) for i, (text, at, share, level) in enumerate(items)]
    fitted = fit(chosen, card, budget, count_text)
    card_tokens = count_text("\n".join(fitted.card)) if fitted.card else 0
    assert fitted.tokens == count_text(fitted.text) + card_tokens
    assert fitted.text == render(fitted.conclusions)
    # Fits, unless nothing at all is left to drop.
    assert fitted.tokens <= budget or (not fitted.conclusions and not fitted.card)
    # Whole conclusions in relevance order: every dropped one is less relevant than every kept one.
    order = sorted(chosen, key=lambda x: (x.share, x.at, x.id))
    assert fitted.dropped == order[: fitted.skipped]
    # Brute force: keeping one more conclusion (the last dropped) would not have fit, card and all.
    if fitted.dropped:
        again = render(sorted([*fitted.conclusions, fitted.dropped[-1]], key=lambda x: (x.at, x.id)))
        assert count_text(again) + (count_text("\n".join(card)) if card else 0) > budget
    # Card entries go only once every conclusion has gone, and from the end.
    if fitted.card_skipped:
        assert fitted.conclusions == []
        assert fitted.card == card[: len(card) - fitted.card_skipped]
        fuller = card[: len(card) - fitted.card_skipped + 1]
        assert count_text("\n".join(fuller)) > budget


# ---------------------------------------------------------------- the session context


@pytest.fixture
def seeded(aws):
    assert call("POST", "/v3/workspaces", {"id": "ws1"}).status == 201
    assert call("POST", f"{W}/sessions", {"id": "s1", "peers": {"alice": {}, "bob": {}}}).status == 201
    assert call("POST", f"{W}/sessions", {"id": "s2", "peers": {"alice": {}}}).status == 201
    facts = [
        ("alice moved to Lisbon last spring", "s1"),
        ("alice's sister is Ana", "s1"),
        ("alice likes green tea", "s2"),
        ("alice works as a nurse", None),
    ]
    made = call(
        "POST",
        f"{W}/conclusions",
        {
            "conclusions": [
                {"content": text, "observer_id": "alice", "observed_id": "alice", **({"session_id": s} if s else {})}
                for text, s in facts
            ]
        },
    )
    assert made.status == 201
    bobs = {"content": "alice seems tired", "observer_id": "bob", "observed_id": "alice", "session_id": "s1"}
    assert call("POST", f"{W}/conclusions", {"conclusions": [bobs]}).status == 201
    assert call("PUT", f"{W}/peers/alice/card", {"peer_card": ["IDENTITY: alice is a nurse"]}).status == 200
    assert (
        call(
            "POST",
            f"{S}/messages",
            {
                "messages": [
                    {"peer_id": "alice" if i % 2 else "bob", "content": f"turn {i}: we talked about the budget review"}
                    for i in range(30)
                ]
            },
        ).status
        == 201
    )
    return {c["content"]: c for c in made.body}


def context(**query) -> dict:
    moto_vectors.settle()  # the conclusions written reach the vector index (DynamoDB fills it asynchronously)
    reply = call("GET", f"{S}/context", **query)
    assert reply.status == 200, reply.body
    return reply.body


def test_peer_target_adds_the_representation_and_card_inside_the_budget(seeded):
    answer = context(tokens=300, peer_target="alice")
    text = answer["peer_representation"]
    assert text.startswith("## Explicit Observations\n\n")
    assert all(f"] {fact}" in text for fact in seeded)
    assert "alice seems tired" not in text  # bob's view, not alice's
    assert answer["peer_card"] == ["IDENTITY: alice is a nurse"]
    assert answer["token_count"] <= 300
    assert answer["token_count"] == (
        count_text(text) + count_text("IDENTITY: alice is a nurse") + sum(m["token_count"] for m in answer["messages"])
    )
    small = context(tokens=60, peer_target="alice")
    assert small["token_count"] <= 60
    assert small["representation_skipped"] > 0
    assert small["peer_representation"].count("\n[") < text.count("\n[")


def test_peer_perspective_reads_the_observers_view(seeded):
    answer = context(peer_target="alice", peer_perspective="bob")
    assert "alice seems tired" in answer["peer_representation"]
    assert "Lisbon" not in answer["peer_representation"]
    assert answer["peer_card"] is None


def test_allowlists_keep_explicit_conclusions_of_those_sessions_and_drop_the_card(seeded):
    only_here = context(peer_target="alice", limit_to_session="true")
    assert "Lisbon" in only_here["peer_representation"] and "green tea" not in only_here["peer_representation"]
    assert "nurse" not in only_here["peer_representation"]  # no session: not in any allowlist
    assert only_here["peer_card"] is None
    both = context(peer_target="alice", sessions="s1,s2")
    assert "green tea" in both["peer_representation"] and "Lisbon" in both["peer_representation"]


def test_search_query_puts_the_nearest_first_in_line(seeded):
    answer = context(peer_target="alice", search_query="where did alice move", max_conclusions=1)
    assert "Lisbon" in answer["peer_representation"]
    assert answer["peer_representation"].count("\n[") == 1


ALICE = [
    "alice lives in Lisbon",
    "alice has a dog named Rover",
    "alice works as a nurse at the city hospital",
    "alice's favourite food is ramen",
    "alice plays the guitar in a band",
    "alice's sister Ana is a teacher",
    "alice goes hiking with Rover on weekends",
    "alice is learning Portuguese",
    "alice drives a blue car",
    "alice was born in 1990",
    "alice visited Tokyo in March",
    "alice drinks green tea every morning",
]


@pytest.mark.parametrize("tokens", [40, 60, 100, 200, 400, 2000])
def test_the_conclusion_nearest_the_query_is_the_last_to_go(aws, tokens):
    """Every conclusion names alice: the word asked about ("food") must outweigh her name, and when the budget drops
    lines, the nearest is dropped last."""
    assert call("POST", "/v3/workspaces", {"id": "ws1"}).status == 201
    assert call("POST", f"{W}/sessions", {"id": "s1", "peers": {"alice": {}}}).status == 201
    assert (
        call(
            "POST",
            f"{W}/conclusions",
            {
                "conclusions": [
                    {"content": text, "observer_id": "alice", "observed_id": "alice", "session_id": "s1"}
                    for text in ALICE
                ]
            },
        ).status
        == 201
    )
    answer = context(tokens=tokens, peer_target="alice", search_query="what food does alice like", max_conclusions=3)
    lines = [line for line in (answer["peer_representation"] or "").splitlines() if line.startswith("[")]
    assert answer["token_count"] <= tokens
    assert len(lines) + answer["representation_skipped"] == 3
    if lines:
        assert any(line.endswith("] alice's favourite food is ramen") for line in lines), lines
    query = call(
        "POST",
        f"{W}/conclusions/query",
        {"query": "what food does alice like", "top_k": 1, "filters": {"observer_id": "alice", "observed_id": "alice"}},
    )
    assert [c["content"] for c in query.body] == ["alice's favourite food is ramen"]


def test_without_peer_target_nothing_is_added(seeded):
    answer = context(tokens=300)
    assert (answer["peer_representation"], answer["peer_card"], answer["representation_skipped"]) == (None, None, 0)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    tokens=st.integers(1, 400),
    perspective=st.sampled_from([None, "bob"]),
    search=st.sampled_from([None, "tea"]),
    frequent=st.booleans(),
    max_conclusions=st.integers(1, 100),
    allow=st.sampled_from(["", "here", "list"]),
    summary=st.booleans(),
)
def test_the_whole_answer_fits_for_every_parameter_combination(
    seeded, tokens, perspective, search, frequent, max_conclusions, allow, summary
):
    query = {
        "tokens": tokens,
        "peer_target": "alice",
        "include_most_frequent": str(frequent).lower(),
        "max_conclusions": max_conclusions,
        "summary": str(summary).lower(),
    }
    if perspective:
        query["peer_perspective"] = perspective
    if search:
        query["search_query"] = search
    if allow == "here":
        query["limit_to_session"] = "true"
    elif allow == "list":
        query["sessions"] = "s1"
    answer = context(**query)
    card = answer["peer_card"]
    counted = (
        count_text(answer["peer_representation"] or "")
        + (count_text("\n".join(card)) if card else 0)
        + sum(m["token_count"] for m in answer["messages"])
        + (answer["summary"]["token_count"] if answer["summary"] else 0)
    )
    assert answer["token_count"] == counted <= tokens


# ---------------------------------------------------------------- the peer routes


def test_peer_context_defaults_to_its_own_view_with_the_most_frequent(seeded):
    reply = call("GET", f"{W}/peers/alice/context")
    assert reply.status == 200
    body = reply.body
    assert (body["peer_id"], body["target_id"], body["peer_card"]) == ("alice", "alice", ["IDENTITY: alice is a nurse"])
    assert all(fact in body["representation"] for fact in seeded)
    of_alice = call("GET", f"{W}/peers/bob/context", target="alice").body
    assert (of_alice["target_id"], of_alice["peer_card"]) == ("alice", None)
    assert "alice seems tired" in of_alice["representation"]
    bounded = call("GET", f"{W}/peers/alice/context", tokens=30).body
    card = bounded["peer_card"]
    assert count_text(bounded["representation"]) + (count_text("\n".join(card)) if card else 0) <= 30


def test_peer_representation_with_a_session_allowlist(seeded):
    def rep(body):
        reply = call("POST", f"{W}/peers/alice/representation", body)
        assert reply.status == 200, reply.body
        return reply.body["representation"]

    assert "Lisbon" in rep({}) and "nurse" in rep({})
    assert "green tea" not in rep({"session_id": "s1"}) and "Lisbon" in rep({"session_id": "s1"})
    assert "green tea" in rep({"filters": {"session_id": ["s2"]}})
    assert "green tea" in rep({"filters": {"session_id": {"in": ["s2", "s1"]}}})
    assert rep({"session_id": "s1", "filters": {"session_id": "s2"}}) == ""  # nothing in both
    assert rep({"target": "alice", "max_conclusions": 1}).count("\n[") == 1


@pytest.mark.parametrize(
    "method, path, body, query, status",
    [
        ("GET", f"{W}/peers/nobody/context", None, {}, 404),
        ("GET", f"{W}/peers/alice/context", None, {"target": "nobody"}, 404),
        ("GET", f"{W}/peers/alice/context", None, {"max_conclusions": 0}, 422),
        ("GET", f"{W}/peers/alice/context", None, {"search_max_distance": 2}, 422),
        ("GET", f"{W}/peers/alice/context", None, {"tokens": 0}, 422),
        ("POST", f"{W}/peers/nobody/representation", {}, {}, 404),
        ("POST", f"{W}/peers/alice/representation", {"target": "bad id"}, {}, 422),
        ("POST", f"{W}/peers/alice/representation", {"max_conclusions": 101}, {}, 422),
        ("POST", f"{W}/peers/alice/representation", {"filters": {"session_id": {"gt": "s1"}}}, {}, 422),
        ("POST", f"{W}/peers/alice/representation", {"surprise": 1}, {}, 422),
        ("POST", f"{W}/peers/alice/representation", {"scope": "nope"}, {}, 404),
        ("GET", f"{S}/context", None, {"peer_target": "nobody"}, 404),
        ("GET", f"{S}/context", None, {"peer_target": "alice", "scope": "nope"}, 404),
    ],
)
def test_peer_routes_bad_inputs(seeded, method, path, body, query, status):
    reply = call(method, path, body, **query)
    assert reply.status == status, reply.body
    assert reply.body["detail"]


def test_conclusions_posted_a_moment_ago_are_found_by_meaning_before_the_index_holds_them(seeded):
    """Read-your-writes (issue 47): the vector index's clock stands still here, so nothing posted has reached it;
    `conclusions/query` within a distance and the representation's search share find them from the table."""
    filters = {"observer_id": "alice", "observed_id": "alice"}
    query = {"query": "where did alice move", "top_k": 1, "distance": 0.9, "filters": filters}
    found = call("POST", f"{W}/conclusions/query", query)
    assert found.status == 200 and [c["content"] for c in found.body] == ["alice moved to Lisbon last spring"]
    reply = call(
        "GET",
        f"{S}/context",
        peer_target="alice",
        search_query="where did alice move",
        search_max_distance="0.9",
        max_conclusions=1,
    )
    assert reply.status == 200 and "Lisbon" in reply.body["peer_representation"]
