"""Bearer keys: PyJWT reads them, and nothing a caller can put in a token answers anything but a principal or a 401."""

from __future__ import annotations

import base64
import json
import time

import jwt as pyjwt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from precis.auth import MAX_KEY_CHARS, Principal, mint_key, verify_key
from precis.errors import Unauthorized
from precis.settings import get_settings
from tests.handlers import call

SECRET = "test-signing-secret-0123456789abcdef"


def _segment(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _signed(header: bytes, payload: bytes, secret: str = SECRET) -> str:
    """A token over arbitrary header and payload bytes, correctly signed with HS256."""
    import hashlib
    import hmac

    signing_input = f"{_segment(header)}.{_segment(payload)}"
    signature = hmac.new(secret.encode(), signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{_segment(signature)}"


NESTED_HEADER = f"{_segment(b'[' * 1500 + b']' * 1500)}.e30.x"  # ~4 KB: RecursionError in the header's JSON


def test_minted_keys_are_standard_hs256_jwts():
    key = mint_key(SECRET, workspace="ws1", peer="alice", expires=4_000_000_000)
    assert pyjwt.get_unverified_header(key) == {"alg": "HS256", "typ": "JWT"}
    assert pyjwt.decode(key, SECRET, algorithms=["HS256"]) == {"t": "", "w": "ws1", "p": "alice", "exp": 4_000_000_000}
    assert verify_key(key, SECRET) == Principal(workspace="ws1", peer="alice")


def test_honchos_admin_key_shape_is_accepted():
    assert verify_key(pyjwt.encode({"t": "", "ad": True}, SECRET, algorithm="HS256"), SECRET) == Principal(admin=True)
    assert verify_key(pyjwt.encode({"t": "", "ad": "yes"}, SECRET, algorithm="HS256"), SECRET) == Principal()


@pytest.mark.parametrize(
    ("token", "message"),
    [
        ("eyJhbGciOiJub25lIn0.eyJhZCI6dHJ1ZX0.", "only HS256"),
        (pyjwt.encode({"ad": True}, SECRET, algorithm="HS512"), "only HS256"),
        (pyjwt.encode({"ad": True}, SECRET, algorithm="HS384"), "only HS256"),
        (_signed(b'{"typ":"JWT"}', b'{"ad":true}'), "only HS256"),  # no alg at all
        (_signed(b'{"alg":["HS256"]}', b'{"ad":true}'), "only HS256"),
        (pyjwt.encode({"ad": True}, "another-secret", algorithm="HS256"), "bad signature"),
        (NESTED_HEADER, "malformed key"),
        ("x" * (MAX_KEY_CHARS + 1), f"at most {MAX_KEY_CHARS}"),
        (_signed(b'{"alg":"HS256"}', b"[1]"), "malformed key"),
        (_signed(b'{"alg":"HS256"}', b'{"ad":true,"nbf":[1]}'), "malformed key"),
        (_signed(b'{"alg":"HS256"}', b'{"ad":true,"nbf":1e400}'), "malformed key"),
        (_signed(b'{"alg":"HS256"}', b'{"ad":true,"nbf":4000000000}'), "not yet valid"),
        (_signed(b'{"alg":"HS256"}', b'{"ad":true,"exp":true}'), "numeric"),
        (_signed(b'{"alg":"HS256"}', b'{"ad":true,"exp":"4000000000"}'), "numeric"),
        (_signed(b'{"alg":"HS256"}', b'{"ad":true,"exp":NaN}'), "numeric"),  # would never expire
        (_signed(b'{"alg":"HS256"}', b'{"ad":true,"exp":1e400}'), "numeric"),
        (_signed(b'{"alg":"HS256"}', b'{"w":["ws1"]}'), "must be strings"),
        (_signed(b'{"alg":"HS256"}', b'{"w":"ws1","p":5}'), "must be strings"),
        (_signed(b'{"alg":"HS256"}', b"\xff\xfe"), "malformed key"),
    ],
)
def test_hostile_and_foreign_keys_are_unauthorized_with_a_reason(token, message):
    with pytest.raises(Unauthorized, match=message):
        verify_key(token, SECRET)


def test_exp_is_honoured_against_the_given_clock():
    key = mint_key(SECRET, admin=True, expires=1_000)
    assert verify_key(key, SECRET, now=999.5).admin
    with pytest.raises(Unauthorized, match="expired"):
        verify_key(key, SECRET, now=1_000)
    fresh = mint_key(SECRET, admin=True, expires=int(time.time()) + 3600)
    assert verify_key(fresh, SECRET).admin


def test_an_issued_at_in_the_future_does_not_refuse_a_key():
    key = pyjwt.encode({"ad": True, "iat": int(time.time()) + 30}, SECRET, algorithm="HS256")
    assert verify_key(key, SECRET).admin


@settings(max_examples=300, deadline=None)
@given(
    st.text(max_size=300)
    | st.from_regex(r"[A-Za-z0-9_\-]{0,60}\.[A-Za-z0-9_\-]{0,60}\.[A-Za-z0-9_\-]{0,60}", fullmatch=True)
)
def test_no_token_text_raises_anything_but_unauthorized(token):
    with pytest.raises(Unauthorized):
        verify_key(token, SECRET)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=20,
)
CLAIMS = st.dictionaries(
    st.sampled_from(["t", "ad", "w", "p", "s", "exp", "nbf", "iat", "aud", "iss", "sub", "jti"]), JSON, max_size=6
)


@settings(max_examples=300, deadline=None)
@given(
    header=st.dictionaries(st.sampled_from(["alg", "typ", "kid", "crit", "b64"]), JSON, max_size=4),
    claims=CLAIMS | JSON,
)
def test_any_signed_json_answers_a_principal_or_unauthorized(header, claims):
    header = {"alg": "HS256", **header} if not isinstance(header.get("alg"), str) else header
    token = _signed(json.dumps(header).encode(), json.dumps(claims).encode())
    try:
        principal = verify_key(token, SECRET, now=0)
    except Unauthorized as exc:
        assert exc.detail
        return
    assert isinstance(principal, Principal)
    assert header["alg"] == "HS256" and isinstance(claims, dict)


@pytest.fixture
def auth_on(aws, monkeypatch):
    monkeypatch.setenv("PRECIS_AUTH", "true")
    monkeypatch.setenv("PRECIS_JWT_SECRET", SECRET)
    get_settings.cache_clear()


@pytest.mark.parametrize("token", [NESTED_HEADER, "x" * 100_000, f"{_segment(b'{' * 3000)}.e30.x"])
def test_a_hostile_token_is_a_401_at_both_functions(auth_on, token):
    for method, path in (("POST", "/v3/workspaces/list"), ("GET", "/v3/workspaces/ws1/sessions/s1/context")):
        reply = call(method, path, headers={"Authorization": f"Bearer {token}"})
        assert reply.status == 401, reply.body
        assert reply.body["detail"].startswith("malformed key")
