"""Keys and tenant isolation: every route against every kind of key."""

from __future__ import annotations

import time

import jwt as pyjwt
import pytest

from local import moto_vectors
from precis.auth import Principal, mint_key, verify_key
from precis.errors import Unauthorized
from precis.settings import get_settings
from tests.handlers import Form, call

SECRET = "test-signing-secret-0123456789abcdef"
W = "/v3/workspaces/ws1"
S = f"{W}/sessions/s1"

KEYS = {
    "none": None,
    "garbage": "not-a-jwt",
    "bad_signature": mint_key("another-secret", admin=True),
    "expired": mint_key(SECRET, admin=True, expires=int(time.time()) - 10),
    "alg_none": "eyJhbGciOiJub25lIn0.eyJhZCI6dHJ1ZX0.",
    "admin": mint_key(SECRET, admin=True),
    "workspace": mint_key(SECRET, workspace="ws1"),
    "other_workspace": mint_key(SECRET, workspace="ws2"),
    "peer_member": mint_key(SECRET, workspace="ws1", peer="alice"),
    "peer_outsider": mint_key(SECRET, workspace="ws1", peer="carol"),
    "peer_named_s1": mint_key(SECRET, workspace="ws1", peer="s1"),  # a peer id equal to a session id
    "session": mint_key(SECRET, workspace="ws1", session="s1"),
    "other_session": mint_key(SECRET, workspace="ws1", session="s2"),
    "session_named_alice": mint_key(SECRET, workspace="ws1", session="alice"),  # a session id equal to a peer id
}
UNAUTHENTICATED = {"none", "garbage", "bad_signature", "expired", "alg_none"}
ALL_VALID = set(KEYS) - UNAUTHENTICATED

WS_ONLY = {"admin", "workspace"}
SESSION_WRITERS = {"admin", "workspace", "session"}
SESSION_READERS = SESSION_WRITERS | {"peer_member"}
CREATED = "201, then 200"  # the first allowed key creates the resource, the next ones get it


def _has_key(claims: dict):
    return lambda body: verify_key(body["key"], SECRET) == Principal(**claims)


def _ids(*ids):
    return lambda page: sorted(item["id"] for item in page["items"]) == list(ids) and page["total"] == len(ids)


# (method, path, body, the keys that may pass, their status, what their answer holds: a subset of the JSON or a test)
MATRIX = [
    ("GET", "/health", None, ALL_VALID | UNAUTHENTICATED, 200, {"status": "ok"}),
    ("POST", "/v3/keys", None, {"admin"}, 200, _has_key({"admin": True})),
    ("POST", "/v3/workspaces/list", None, {"admin"}, 200, _ids("ws1", "ws2")),
    ("POST", "/v3/workspaces", {"id": "ws1"}, WS_ONLY, 200, {"id": "ws1", "metadata": {}}),
    ("PUT", W, {"metadata": {"a": 1}}, WS_ONLY, 200, {"id": "ws1", "metadata": {"a": 1}}),
    ("POST", f"{W}/peers", {"id": "bob"}, WS_ONLY, CREATED, {"id": "bob", "workspace_id": "ws1"}),
    ("POST", f"{W}/peers", {"id": "alice"}, WS_ONLY | {"peer_member"}, 200, {"id": "alice", "workspace_id": "ws1"}),
    # and with metadata replaces its metadata, as a PUT of the peer would: the same keys
    (
        "POST",
        f"{W}/peers",
        {"id": "alice", "metadata": {"b": 2}},
        WS_ONLY | {"peer_member"},
        200,
        {"id": "alice", "metadata": {"b": 2}},
    ),
    # a session key never creates a peer, not even one named like its session
    ("POST", f"{W}/peers", {"id": "s1"}, WS_ONLY | {"peer_named_s1"}, CREATED, {"id": "s1"}),
    ("POST", f"{W}/peers/list", None, WS_ONLY, 200, _ids("alice", "carol")),
    (
        "PUT",
        f"{W}/peers/alice",
        {"metadata": {"a": 1}},
        WS_ONLY | {"peer_member"},
        200,
        {"id": "alice", "metadata": {"a": 1}},
    ),
    ("POST", f"{W}/peers/alice/sessions", None, WS_ONLY | {"peer_member"}, 200, _ids("s1")),
    # a member's peer key may get its session with the SDK's body, nothing more
    (
        "POST",
        f"{W}/sessions",
        {"id": "s1"},
        WS_ONLY | {"session", "peer_member"},
        200,
        {"id": "s1", "workspace_id": "ws1", "is_active": True},
    ),
    # getting a session with metadata replaces its metadata (Honcho's get-or-create): a writer's change, as a PUT's
    (
        "POST",
        f"{W}/sessions",
        {"id": "s1", "metadata": {"a": 1}},
        WS_ONLY | {"session"},
        200,
        {"id": "s1", "metadata": {"a": 1}},
    ),
    ("POST", f"{W}/sessions", {"id": "s1", "peers": {"alice": {}}}, WS_ONLY | {"session"}, 200, {"id": "s1"}),
    # A peer key named like a session must not join it by getting the session with itself in `peers`.
    ("POST", f"{W}/sessions", {"id": "s1", "peers": {"s1": {}}}, WS_ONLY | {"session"}, 200, {"id": "s1"}),
    ("POST", f"{W}/sessions", {"id": "s3"}, WS_ONLY, CREATED, {"id": "s3", "workspace_id": "ws1"}),
    ("POST", f"{W}/sessions", {"id": "alice"}, WS_ONLY | {"session_named_alice"}, CREATED, {"id": "alice"}),
    ("POST", f"{W}/sessions/list", None, WS_ONLY, 200, _ids("s1")),
    ("PUT", S, {"metadata": {"a": 1}}, SESSION_WRITERS, 200, {"id": "s1", "metadata": {"a": 1}}),
    ("POST", f"{S}/peers", {"alice": {}}, SESSION_WRITERS, 200, {"id": "s1"}),
    ("PUT", f"{S}/peers", {"alice": {}}, SESSION_WRITERS, 200, {"id": "s1"}),
    ("GET", f"{S}/peers", None, SESSION_READERS, 200, _ids("alice")),
    ("GET", f"{S}/peers/alice/config", None, SESSION_READERS, 200, {"observe_me": True, "observe_others": False}),
    ("PUT", f"{S}/peers/alice/config", {"observe_me": False}, SESSION_WRITERS, 204, None),
    (
        "POST",
        f"{S}/messages",
        {"messages": [{"content": "hi", "peer_id": "alice"}]},
        SESSION_WRITERS,
        201,
        [{"content": "hi", "peer_id": "alice", "session_id": "s1", "workspace_id": "ws1", "token_count": 1}],
    ),
    (
        "POST",
        f"{S}/messages/upload",
        Form({"peer_id": "alice"}, {"file": ("a.txt", b"hi", "text/plain")}),
        SESSION_WRITERS,
        201,
        [{"content": "hi", "peer_id": "alice", "session_id": "s1", "token_count": 1}],
    ),
    (
        "POST",
        f"{S}/messages/list",
        None,
        SESSION_READERS,
        200,
        {"items": [{"id": "MESSAGE_ID", "content": "hello", "peer_id": "alice"}], "total": 1},
    ),
    (
        "GET",
        f"{S}/context",
        None,
        SESSION_READERS,
        200,
        {"id": "s1", "messages": [{"id": "MESSAGE_ID", "content": "hello"}], "summary": None},
    ),
    ("GET", f"{S}/summaries", None, SESSION_READERS, 200, {"id": "s1", "short_summary": None, "long_summary": None}),
    (
        "GET",
        f"{S}/messages/MESSAGE_ID",
        None,
        SESSION_READERS,
        200,
        {"id": "MESSAGE_ID", "content": "hello", "session_id": "s1"},
    ),
    (
        "PUT",
        f"{S}/messages/MESSAGE_ID",
        {"metadata": {"x": 1}},
        SESSION_WRITERS,
        200,
        {"id": "MESSAGE_ID", "content": "hello", "metadata": {"x": 1}},
    ),
    # derived memory: conclusions and the queue span the workspace; a peer reads and sets its own cards and views
    (
        "POST",
        f"{W}/conclusions",
        {
            "conclusions": [
                {"content": "alice likes tea", "observer_id": "alice", "observed_id": "alice", "session_id": "s1"}
            ]
        },
        WS_ONLY,
        201,
        [{"content": "alice likes tea", "observer_id": "alice", "session_id": "s1"}],
    ),
    ("POST", f"{W}/conclusions/list", None, WS_ONLY, 200, {"items": [], "total": 0}),
    (
        "POST",
        f"{W}/conclusions/query",
        {"query": "tea", "filters": {"observer_id": "alice", "observed_id": "alice"}},
        WS_ONLY,
        200,
        [],
    ),
    ("GET", f"{W}/queue/status", None, WS_ONLY, 200, {"pending_work_units": 0}),
    ("GET", f"{W}/usage", None, WS_ONLY, 200, {"usage": []}),
    (
        "PUT",
        f"{W}/peers/alice/card",
        {"peer_card": ["IDENTITY: alice is a nurse"]},
        WS_ONLY | {"peer_member"},
        200,
        {"peer_card": ["IDENTITY: alice is a nurse"]},
    ),
    ("GET", f"{W}/peers/alice/card", None, WS_ONLY | {"peer_member"}, 200, {"peer_card": None}),
    (
        "GET",
        f"{W}/peers/alice/context",
        None,
        WS_ONLY | {"peer_member"},
        200,
        {"peer_id": "alice", "target_id": "alice", "representation": ""},
    ),
    (
        "POST",
        f"{W}/peers/alice/representation",
        {"target": "carol"},
        WS_ONLY | {"peer_member"},
        200,
        {"representation": ""},
    ),
    (
        "GET",
        f"{S}/context?peer_target=alice",
        None,
        SESSION_READERS,
        200,
        {"id": "s1", "peer_representation": "", "peer_card": None},
    ),
    # searchable once posted
    ("POST", f"{W}/search", {"query": "hello"}, WS_ONLY, 200, [{"id": "MESSAGE_ID", "content": "hello"}]),
    ("POST", f"{S}/search", {"query": "hello"}, SESSION_READERS, 200, [{"id": "MESSAGE_ID", "content": "hello"}]),
    (
        "POST",
        f"{W}/peers/alice/search",
        {"query": "hello"},
        WS_ONLY | {"peer_member"},
        200,
        [{"id": "MESSAGE_ID", "content": "hello"}],
    ),
    ("POST", f"{W}/peers/alice/chat", {"query": "hello"}, WS_ONLY | {"peer_member"}, 200, {"content": None}),
    (
        "POST",
        f"{W}/chat",
        {"query": "hello"},
        WS_ONLY,
        200,
        {"content": lambda text: text is not None and "alice: hello" in text},
    ),  # the workspace chat searches messages
    ("POST", f"{W}/schedule_dream", {"observer": "alice"}, WS_ONLY, 204, None),
    ("POST", f"{S}/clone", None, SESSION_WRITERS, 201, lambda body: body["id"].startswith("s1-clone-")),
    ("POST", f"{W}/scopes", {"id": "therapy"}, WS_ONLY, CREATED, {"id": "therapy", "metadata": {}}),
    ("POST", f"{W}/scopes/list", None, WS_ONLY, 200, {"items": [], "total": 0}),
    ("GET", f"{W}/scopes/nope", None, WS_ONLY, 404, {"detail": "scope 'nope' not found in workspace 'ws1'"}),
    ("GET", f"{W}/scopes/nope/status", None, WS_ONLY, 404, {"detail": "scope 'nope' not found in workspace 'ws1'"}),
    ("POST", f"{W}/scopes/nope/sessions", {"session_ids": ["s1"]}, WS_ONLY, 404, lambda body: bool(body["detail"])),
    ("DELETE", f"{W}/scopes/nope/sessions/s1", None, WS_ONLY, 404, lambda body: bool(body["detail"])),
    ("POST", f"{W}/scopes/nope/sessions/list", None, WS_ONLY, 404, lambda body: bool(body["detail"])),
    ("POST", f"{W}/webhooks", {"url": "https://example.com/h"}, WS_ONLY, CREATED, {"workspace_id": "ws1"}),
    ("GET", f"{W}/webhooks", None, WS_ONLY, 200, {"items": [], "total": 0}),
    ("GET", f"{W}/webhooks/test", None, WS_ONLY, 200, None),
    ("DELETE", f"{W}/webhooks/{'x' * 21}", None, WS_ONLY, 404, lambda body: "x" * 21 in body["detail"]),
    ("POST", f"{W}/webhooks/{'x' * 21}/rotate", None, WS_ONLY, 404, lambda body: "x" * 21 in body["detail"]),
    ("GET", f"{W}/webhooks/{'x' * 21}/deliveries", None, WS_ONLY, 404, lambda body: "x" * 21 in body["detail"]),
    ("DELETE", f"{S}/peers", ["bob"], SESSION_WRITERS, 200, {"id": "s1"}),
    ("DELETE", S, None, SESSION_WRITERS, 202, None),
    ("DELETE", W, None, WS_ONLY, 202, None),
]


def _holds(actual, expected) -> bool:
    """Whether `actual` has everything `expected` names: dict keys as a subset, lists item by item, or a test."""
    if callable(expected):
        return expected(actual)
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(k in actual and _holds(actual[k], v) for k, v in expected.items())
    if isinstance(expected, list):
        return isinstance(actual, list) and len(actual) == len(expected) and all(map(_holds, actual, expected))
    return actual == expected


def _with_message_id(expected, message_id: str):
    if isinstance(expected, dict):
        return {k: _with_message_id(v, message_id) for k, v in expected.items()}
    if isinstance(expected, list):
        return [_with_message_id(v, message_id) for v in expected]
    return message_id if expected == "MESSAGE_ID" else expected


@pytest.fixture
def auth_on(aws, monkeypatch):
    """Auth on, with ws1 (peers alice, carol), session s1 (member alice) holding one message; ws2 exists."""
    monkeypatch.setenv("PRECIS_AUTH", "true")
    monkeypatch.setenv("PRECIS_JWT_SECRET", SECRET)
    get_settings.cache_clear()
    admin = {"Authorization": f"Bearer {KEYS['admin']}"}
    for ws in ("ws1", "ws2"):
        assert call("POST", "/v3/workspaces", {"id": ws}, headers=admin).status == 201
    call("POST", f"{W}/peers", {"id": "carol"}, headers=admin)
    reply = call("POST", f"{S}/messages", {"messages": [{"content": "hello", "peer_id": "alice"}]}, headers=admin)
    moto_vectors.settle()  # the message's search item reaches the index (DynamoDB fills it asynchronously)
    return reply.body[0]["id"]


def _as(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[name]}"}


@pytest.mark.parametrize(
    ("method", "path", "body", "allowed", "status", "answer"),
    MATRIX,
    ids=[f"{m} {p}#{i}" for i, (m, p, *_rest) in enumerate(MATRIX)],
)
def test_every_route_admits_exactly_its_scopes(auth_on, method, path, body, allowed, status, answer):
    path = path.replace("MESSAGE_ID", auth_on)
    answer = _with_message_id(answer, auth_on)
    admitted = 0
    for name, key in KEYS.items():
        if path.endswith(("/sessions/s1", "/workspaces/ws1")) and method == "DELETE" and name in allowed:
            continue  # a successful delete would change what the next key sees; checked below
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        reply = call(method, path, body, headers=headers)
        if name in allowed:
            expected = (201 if admitted == 0 else 200) if status == CREATED else status
            admitted += 1
            assert reply.status == expected, (name, reply.status, reply.body)
            assert _holds(reply.body, answer), (name, reply.body)
        elif name in UNAUTHENTICATED:
            assert reply.status == 401, (name, reply.status, reply.body)
            assert reply.body["detail"]
        else:
            assert reply.status == 403, (name, reply.status, reply.body)
            assert reply.body["detail"]


def test_a_peer_key_named_like_a_session_cannot_join_it(auth_on):
    reply = call("POST", f"{W}/sessions", {"id": "s1", "peers": {"s1": {}}}, headers=_as("peer_named_s1"))
    assert reply.status == 403 and "peers" in reply.body["detail"], reply.body
    assert _holds(call("GET", f"{S}/peers", headers=_as("admin")).body, _ids("alice"))
    assert call("GET", f"{S}/context", headers=_as("peer_named_s1")).status == 403
    assert call("POST", f"{S}/messages/list", headers=_as("peer_named_s1")).status == 403


@pytest.mark.parametrize(
    "body",
    [
        {"id": "s1", "peers": {"alice": {}, "carol": {}}},
        {"id": "s1", "metadata": {}},
        {"id": "s1", "configuration": {}},
        {"id": "s1", "peers": None},
        {},
        ["s1"],
    ],
)
def test_a_member_peer_key_only_gets_its_session_and_changes_nothing(auth_on, body):
    reply = call("POST", f"{W}/sessions", body, headers=_as("peer_member"))
    assert reply.status == 403, reply.body
    assert "alice" in reply.body["detail"] and "just" in reply.body["detail"]
    assert _holds(call("GET", f"{S}/peers", headers=_as("admin")).body, _ids("alice"))


def test_a_peer_key_cannot_create_a_session(auth_on):
    reply = call("POST", f"{W}/sessions", {"id": "new"}, headers=_as("peer_member"))
    assert reply.status == 403 and "not a member of session 'new'" in reply.body["detail"]
    assert _holds(call("POST", f"{W}/sessions/list", headers=_as("admin")).body, _ids("s1"))


def test_a_peer_key_loses_a_deleted_session_whose_members_linger(auth_on):
    assert call("DELETE", S, headers=_as("admin")).status == 202  # member items stay until the purge
    reply = call("POST", f"{W}/sessions", {"id": "s1"}, headers=_as("peer_member"))
    assert reply.status == 403 and "not a member" in reply.body["detail"], reply.body
    assert call("GET", f"{S}/context", headers=_as("peer_member")).status == 403
    assert call("GET", f"{S}/context", headers=_as("admin")).status == 404


def test_a_session_key_cannot_create_a_peer_named_like_its_session(auth_on):
    reply = call("POST", f"{W}/peers", {"id": "s1"}, headers=_as("session"))
    assert reply.status == 403 and "cannot create or get peers" in reply.body["detail"]
    assert _holds(call("POST", f"{W}/peers/list", headers=_as("admin")).body, _ids("alice", "carol"))


def test_deletes_succeed_with_the_right_key(auth_on):
    reply = call("DELETE", S, headers=_as("session"))
    assert reply.status == 202 and "session 's1' deleted" in reply.body["detail"]
    assert call("GET", f"{S}/context", headers=_as("admin")).status == 404
    assert call("DELETE", W, headers=_as("workspace")).status == 202
    assert call("PUT", W, {}, headers=_as("admin")).status == 404


def test_cross_workspace_reads_and_writes_are_refused(auth_on):
    other = {"Authorization": f"Bearer {KEYS['other_workspace']}"}
    assert call("GET", f"{S}/context", headers=other).status == 403
    assert (
        call("POST", f"{S}/messages", {"messages": [{"content": "x", "peer_id": "eve"}]}, headers=other).status == 403
    )
    assert call("POST", "/v3/workspaces", {"id": "ws1"}, headers=other).status == 403


def test_admin_mints_keys_that_work_and_expire(auth_on):
    admin = {"Authorization": f"Bearer {KEYS['admin']}"}
    reply = call(
        "POST", "/v3/keys", headers=admin, workspace_id="ws1", session_id="s1", expires_at="2999-01-01T00:00:00Z"
    )
    assert reply.status == 200
    assert verify_key(reply.body["key"], SECRET) == Principal(workspace="ws1", session="s1")
    assert pyjwt.decode(reply.body["key"], SECRET, algorithms=["HS256"])["exp"] == 32472144000
    assert call("GET", f"{S}/context", headers={"Authorization": f"Bearer {reply.body['key']}"}).status == 200
    past = call("POST", "/v3/keys", headers=admin, workspace_id="ws1", expires_at="2001-01-01T00:00:00+00:00")
    assert call("GET", f"{S}/context", headers={"Authorization": f"Bearer {past.body['key']}"}).status == 401
    assert call("POST", "/v3/keys", headers=admin, peer_id="alice").status == 422
    assert call("POST", "/v3/keys", headers=admin, expires_at="soon").status == 422


def test_keys_minted_elsewhere_with_the_same_claims_work(auth_on):
    foreign = pyjwt.encode({"w": "ws1", "exp": int(time.time()) + 60}, SECRET, algorithm="HS256")
    assert call("GET", f"{S}/context", headers={"Authorization": f"Bearer {foreign}"}).status == 200
    honcho_admin = pyjwt.encode({"t": "", "ad": True}, SECRET, algorithm="HS256")
    assert call("POST", "/v3/workspaces/list", headers={"Authorization": f"Bearer {honcho_admin}"}).status == 200
    hs512 = pyjwt.encode({"ad": True}, SECRET, algorithm="HS512")
    assert call("POST", "/v3/workspaces/list", headers={"Authorization": f"Bearer {hs512}"}).status == 401


@pytest.mark.parametrize("token", ["a.b", "a.b.c", "....", "e30.e30.", "eyJhbGciOiJIUzI1NiJ9.WzFd.x"])
def test_malformed_keys_are_unauthorized(token):
    with pytest.raises(Unauthorized):
        verify_key(token, SECRET)


def test_non_numeric_exp_is_refused():
    token = pyjwt.encode({"ad": True, "exp": "tomorrow"}, SECRET, algorithm="HS256")
    with pytest.raises(Unauthorized, match="numeric"):
        verify_key(token, SECRET)


def test_wrong_scheme_is_unauthorized(auth_on):
    reply = call("GET", f"{S}/context", headers={"Authorization": f"Basic {KEYS['admin']}"})
    assert reply.status == 401 and "Bearer" in reply.body["detail"]


def test_deployed_stacks_read_the_signing_secret_from_secrets_manager(aws, monkeypatch):
    import json

    import boto3

    from precis.secrets import jwt_secret, llm_api_key

    boto3.client("secretsmanager").create_secret(
        Name="precis/test", SecretString=json.dumps({"jwt_secret": SECRET, "llm_api_key": "sk-test"})
    )
    monkeypatch.delenv("PRECIS_JWT_SECRET", raising=False)
    monkeypatch.setenv("PRECIS_SECRET_NAME", "precis/test")
    monkeypatch.setenv("PRECIS_AUTH", "true")
    get_settings.cache_clear()
    assert jwt_secret() == SECRET and llm_api_key() == "sk-test"
    call("POST", "/v3/workspaces", {"id": "ws1"}, headers={"Authorization": f"Bearer {KEYS['admin']}"})
    assert call("POST", "/v3/workspaces/list", headers={"Authorization": f"Bearer {KEYS['admin']}"}).status == 200
    assert call("POST", "/v3/workspaces/list", headers={"Authorization": f"Bearer {KEYS['workspace']}"}).status == 403


@pytest.mark.parametrize(
    "method, path, body, query",
    [
        ("GET", f"{S}/context", None, {"peer_target": "carol"}),
        ("GET", f"{S}/context", None, {"peer_target": "carol", "peer_perspective": "carol"}),
        ("GET", f"{S}/context", None, {"peer_target": "alice", "scope": "therapy"}),
        ("POST", f"{W}/peers/alice/representation", {"scope": "therapy"}, {}),
    ],
)
def test_a_peer_key_reads_only_its_own_perspective_and_never_through_a_scope(auth_on, method, path, body, query):
    reply = call(method, path, body, headers=_as("peer_member"), **query)
    assert reply.status == 403, reply.body
    assert reply.body["detail"]
    # its own perspective, of another peer, is fine
    own = call("GET", f"{S}/context", headers=_as("peer_member"), peer_target="carol", peer_perspective="alice")
    assert own.status == 200 and own.body["peer_representation"] == ""
