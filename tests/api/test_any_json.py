"""Any JSON a client can send, to every route of precis.auth.ROUTES through its handler, with an admin key: never a
5xx, and a 4xx stores nothing. A body is the route's own with hostile values put at random places (lone surrogates in
keys and values, any Unicode, numbers past what JSON, Python or DynamoDB read, empty and odd keys), or any JSON at
all; a GET's query takes hostile text too. One moto table per test, a workspace per example."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from precis.auth import ROUTES
from tests.handlers import call, route_of
from tests.hostile import (
    ANY_JSON,
    CONCLUSION,
    MESSAGE,
    ODD_TEXT,
    RAW_NUMBERS,
    SEEDED,
    admin_key,
    hostile,
    seed,
    stored,
    strict,
    to_text,
)

W = "/v3/workspaces/{workspace_id}"
S = f"{W}/sessions/{{session_id}}"

# ---------------------------------------------------------------- what is sent

FILTERS = {"AND": [{"metadata": {"mood": "happy"}}, {"peer_id": {"in": ["alice", "bob"]}}], "created_at": {"gte": "x"}}
META = {"metadata": {"note": "hi", "deep": {"a": [1, {"b": None}]}}, "configuration": {"deriver": {"max_wait_s": 60}}}
# Each route's bodies as a client sends them (an empty list: the route reads no body; anything is sent anyway).
BODIES: dict[str, list[Any]] = {
    "POST /v3/workspaces": [{"id": "made", **META}],
    f"PUT {W}": [META],
    f"POST {W}/peers": [{"id": "carol", **META}],
    f"PUT {W}/peers/{{peer_id}}": [META],
    f"POST {W}/sessions": [
        {"id": "s2", **META, "peers": {"alice": {"observe_me": True}, "carol": {}}, "scopes": ["therapy"]}
    ],
    f"PUT {S}": [META],
    f"POST {S}/peers": [{"carol": {"observe_me": False, "observe_others": True}}],
    f"PUT {S}/peers": [{"alice": {}, "bob": {"observe_others": False}}],
    f"DELETE {S}/peers": [["bob"]],
    f"PUT {S}/peers/{{peer_id}}/config": [{"observe_me": True, "observe_others": False}],
    f"POST {S}/messages": [
        {"messages": [MESSAGE, {**MESSAGE, "peer_id": "bob", "created_at": "2026-01-01T00:00:00Z", "run_id": "r1"}]}
    ],
    f"PUT {S}/messages/{{message_id}}": [{"metadata": {"edited": True}}],
    f"POST {W}/conclusions": [{"conclusions": [CONCLUSION]}],
    f"PUT {W}/peers/{{peer_id}}/card": [{"peer_card": ["IDENTITY: alice", "Lives in Lisbon"]}],
    f"POST {W}/scopes": [{"id": "work", "metadata": {"team": "a"}}],
    f"POST {W}/scopes/{{scope_id}}/sessions": [{"session_ids": ["s1"]}],
    f"POST {W}/schedule_dream": [{"observer": "alice", "observed": "alice", "session_id": "s1"}],
    f"POST {W}/webhooks": [{"url": "https://example.com/other"}],
    "POST /v3/workspaces/list": [{"filters": {"metadata": {"team": "a"}}}],
    f"POST {W}/peers/list": [{"filters": FILTERS}],
    f"POST {W}/sessions/list": [{"filters": FILTERS}],
    f"POST {W}/peers/{{peer_id}}/sessions": [{"filters": {"metadata": {"x": 1}}}],
    f"POST {S}/messages/list": [{"filters": FILTERS}],
    f"POST {W}/conclusions/list": [{"filters": {"observer_id": "alice", "observed_id": "alice", "session_id": "s1"}}],
    f"POST {W}/conclusions/query": [
        {"query": "tea", "top_k": 5, "distance": 0.5, "filters": {"observer_id": "alice", "observed_id": "alice"}}
    ],
    f"POST {W}/peers/{{peer_id}}/representation": [
        {
            "session_id": "s1",
            "target": "alice",
            "search_query": "tea",
            "search_top_k": 3,
            "search_max_distance": 0.5,
            "include_most_frequent": True,
            "max_conclusions": 5,
            "filters": {"session_id": ["s1"]},
        }
    ],
    f"POST {W}/search": [{"query": "Lisbon", "filters": {"session_id": "s1"}, "limit": 5}],
    f"POST {S}/search": [{"query": "Lisbon", "filters": {"peer_id": "alice"}, "limit": 5}],
    f"POST {W}/peers/{{peer_id}}/search": [{"query": "Lisbon", "limit": 5}],
    f"POST {W}/peers/{{peer_id}}/chat": [
        {"query": "where does alice live?", "session_id": "s1", "target": "alice", "include_evidence": True},
        {"query": "where?", "scope": ["therapy"], "response_format": {"type": "object", "properties": {}}},
    ],
    f"POST {W}/chat": [{"query": "where does alice live?", "filters": {"session_id": {"in": ["s1"]}}}],
    f"POST {W}/scopes/list": [{}],
    f"POST {W}/scopes/{{scope_id}}/sessions/list": [{}],
}
# The query parameters a route reads, with a valid value each (hostile ones replace them at random).
QUERIES: dict[str, dict[str, str]] = {
    "POST /v3/keys": {"workspace_id": "{workspace_id}", "peer_id": "alice", "expires_at": "2030-01-01T00:00:00Z"},
    f"GET {S}/context": {"tokens": "500", "peer_target": "alice", "search_query": "Lisbon", "summary": "true"},
    f"GET {W}/peers/{{peer_id}}/context": {"target": "alice", "search_query": "tea", "max_conclusions": "5"},
    f"GET {W}/peers/{{peer_id}}/card": {"target": "alice"},
    f"PUT {W}/peers/{{peer_id}}/card": {"target": "alice"},
    f"GET {W}/queue/status": {"session_id": "s1", "observer_id": "alice"},
    f"GET {W}/usage": {"from": "2026-01-01", "to": "2026-01-31"},
    f"POST {S}/clone": {"message_id": "{message_id}"},
    f"POST {S}/messages/list": {"page": "1", "size": "10", "reverse": "true"},
    f"GET {W}/webhooks": {"page": "1", "size": "10"},
}
# Query values travel as UTF-8 in a URL: anything but a lone surrogate, which no URL can carry.
QUERY_TEXT = st.one_of(st.sampled_from(ODD_TEXT), st.text(max_size=12), st.sampled_from(RAW_NUMBERS))
# A form route's body is not JSON: tests/messages/test_upload.py and test_bad_inputs.py (its JSON fields) cover it.
FORM_ROUTES = {f"POST {S}/messages/upload"}
SERVED = sorted(r for r in ROUTES if r not in FORM_ROUTES)


def test_every_body_and_query_named_here_is_a_route():
    assert set(BODIES) | set(QUERIES) <= set(ROUTES)
    for route in ROUTES:
        method, path = route.split(" ", 1)
        assert route_of(method, path.replace("{", "").replace("}", "")) is not None, route


# ---------------------------------------------------------------- where it is sent, and what must hold


@pytest.fixture
def admin(aws, monkeypatch) -> dict[str, str]:
    return admin_key(monkeypatch)


def send(aws, headers: dict[str, str], route: str, ids: dict[str, str], body: Any, query: dict[str, str]) -> None:
    """One request: never a 5xx, and nothing stored when it is refused."""
    method, path = route.split(" ", 1)
    before = stored(aws)
    text = None if body is None else to_text(body)
    reply = call(method, path.format(**ids), raw=text, headers=headers, **query)
    assert reply.status < 500, (route, text and text[:2000], query, reply.status, reply.body)
    assert strict(reply.body), (route, text and text[:2000], query, reply.status, reply.body)
    if 400 <= reply.status < 500:
        detail = reply.body["detail"]
        assert detail, "a refusal says what is wrong"
        assert stored(aws) == before, (route, text and text[:2000], query, reply.status, reply.body)


@st.composite
def requests(draw) -> tuple[str, Any, dict[str, str]]:
    route = draw(st.sampled_from(SERVED))
    templates = BODIES.get(route, [])
    kind = draw(st.sampled_from(["hostile", "hostile", "hostile", "any", "none"] if templates else ["any", "none"]))
    if kind == "hostile":
        body = draw(st.sampled_from(templates).flatmap(hostile))
    else:
        body = draw(ANY_JSON) if kind == "any" else None
    names = sorted(QUERIES.get(route, {}))
    replaced = draw(st.lists(st.sampled_from(names), unique=True, max_size=2)) if names else []
    return route, body, {name: draw(QUERY_TEXT) for name in replaced}


@given(request=requests())
@settings(SEEDED, max_examples=50)  # ~0.2 s each (a workspace seeded by six requests, then the one under test)
def test_any_body_on_any_route_is_never_a_5xx_and_a_refusal_stores_nothing(aws, admin, request):
    route, body, replaced = request
    ids = seed(admin)
    query = {name: value.format(**ids) for name, value in QUERIES.get(route, {}).items()}
    send(aws, admin, route, ids, body, {**query, **replaced})
