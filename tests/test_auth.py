"""Keys and tenant isolation: every route against every kind of key."""

from __future__ import annotations

import time

import jwt as pyjwt
import pytest
from precis.auth import Principal, mint_key, verify_key
from precis.config import get_settings
from precis.errors import Unauthorized

from tests.handlers import call

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
    "session": mint_key(SECRET, workspace="ws1", session="s1"),
    "other_session": mint_key(SECRET, workspace="ws1", session="s2"),
}
UNAUTHENTICATED = {"none", "garbage", "bad_signature", "expired", "alg_none"}
ALL_VALID = set(KEYS) - UNAUTHENTICATED

WS_ONLY = {"admin", "workspace"}
SESSION_WRITERS = {"admin", "workspace", "session"}
SESSION_READERS = SESSION_WRITERS | {"peer_member"}

# (method, path, body, the keys that may pass)
MATRIX = [
    ("GET", "/health", None, ALL_VALID | UNAUTHENTICATED),
    ("POST", "/v3/keys", None, {"admin"}),
    ("POST", "/v3/workspaces/list", None, {"admin"}),
    ("POST", "/v3/workspaces", {"id": "ws1"}, WS_ONLY),
    ("PUT", W, {"metadata": {"a": 1}}, WS_ONLY),
    ("POST", f"{W}/peers", {"id": "bob"}, WS_ONLY),
    ("POST", f"{W}/peers", {"id": "alice"}, WS_ONLY | {"peer_member"}),
    ("POST", f"{W}/peers/list", None, WS_ONLY),
    ("PUT", f"{W}/peers/alice", {"metadata": {"a": 1}}, WS_ONLY | {"peer_member"}),
    ("POST", f"{W}/peers/alice/sessions", None, WS_ONLY | {"peer_member"}),
    ("POST", f"{W}/sessions", {"id": "s1"}, WS_ONLY | {"session"}),
    ("POST", f"{W}/sessions", {"id": "s3"}, WS_ONLY),
    ("POST", f"{W}/sessions/list", None, WS_ONLY),
    ("PUT", S, {"metadata": {"a": 1}}, SESSION_WRITERS),
    ("POST", f"{S}/peers", {"alice": {}}, SESSION_WRITERS),
    ("PUT", f"{S}/peers", {"alice": {}}, SESSION_WRITERS),
    ("GET", f"{S}/peers", None, SESSION_READERS),
    ("GET", f"{S}/peers/alice/config", None, SESSION_READERS),
    ("PUT", f"{S}/peers/alice/config", {"observe_me": False}, SESSION_WRITERS),
    ("POST", f"{S}/messages", {"messages": [{"content": "hi", "peer_id": "alice"}]}, SESSION_WRITERS),
    ("POST", f"{S}/messages/list", None, SESSION_READERS),
    ("GET", f"{S}/context", None, SESSION_READERS),
    ("GET", f"{S}/summaries", None, SESSION_READERS),
    ("GET", f"{S}/messages/MESSAGE_ID", None, SESSION_READERS),
    ("PUT", f"{S}/messages/MESSAGE_ID", {"metadata": {"x": 1}}, SESSION_WRITERS),
    ("DELETE", f"{S}/peers", ["bob"], SESSION_WRITERS),
    ("DELETE", S, None, SESSION_WRITERS),
    ("DELETE", W, None, WS_ONLY),
]


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
    return reply.body[0]["id"]


@pytest.mark.parametrize(("method", "path", "body", "allowed"), MATRIX,
                         ids=[f"{m} {p}#{i}" for i, (m, p, *_rest) in enumerate(MATRIX)])
def test_every_route_admits_exactly_its_scopes(auth_on, method, path, body, allowed):
    path = path.replace("MESSAGE_ID", auth_on)
    seen = {}
    for name, key in KEYS.items():
        if path.endswith(("/sessions/s1", "/workspaces/ws1")) and method == "DELETE" and name in allowed:
            continue  # a successful delete would change what the next key sees; checked below
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        reply = call(method, path, body, headers=headers)
        seen[name] = reply.status
        if name in allowed:
            assert reply.status not in (401, 403), (name, reply.body)
        elif name in UNAUTHENTICATED:
            assert reply.status == 401, (name, reply.status, reply.body)
            assert reply.body["detail"]
        else:
            assert reply.status == 403, (name, reply.status, reply.body)
            assert reply.body["detail"]


def test_deletes_succeed_with_the_right_key(auth_on):
    session_key = {"Authorization": f"Bearer {KEYS['session']}"}
    assert call("DELETE", S, headers=session_key).status == 202
    assert call("DELETE", W, headers={"Authorization": f"Bearer {KEYS['workspace']}"}).status == 202


def test_cross_workspace_reads_and_writes_are_refused(auth_on):
    other = {"Authorization": f"Bearer {KEYS['other_workspace']}"}
    assert call("GET", f"{S}/context", headers=other).status == 403
    assert call("POST", f"{S}/messages", {"messages": [{"content": "x", "peer_id": "eve"}]}, headers=other).status == 403
    assert call("POST", "/v3/workspaces", {"id": "ws1"}, headers=other).status == 403


def test_admin_mints_keys_that_work_and_expire(auth_on):
    admin = {"Authorization": f"Bearer {KEYS['admin']}"}
    reply = call("POST", "/v3/keys", headers=admin, workspace_id="ws1", session_id="s1",
                 expires_at="2999-01-01T00:00:00Z")
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
        Name="precis/test", SecretString=json.dumps({"jwt_secret": SECRET, "llm_api_key": "sk-test"}))
    monkeypatch.delenv("PRECIS_JWT_SECRET", raising=False)
    monkeypatch.setenv("PRECIS_SECRET_NAME", "precis/test")
    monkeypatch.setenv("PRECIS_AUTH", "true")
    get_settings.cache_clear()
    assert jwt_secret() == SECRET and llm_api_key() == "sk-test"
    call("POST", "/v3/workspaces", {"id": "ws1"}, headers={"Authorization": f"Bearer {KEYS['admin']}"})
    assert call("POST", "/v3/workspaces/list", headers={"Authorization": f"Bearer {KEYS['admin']}"}).status == 200
    assert call("POST", "/v3/workspaces/list", headers={"Authorization": f"Bearer {KEYS['workspace']}"}).status == 403
