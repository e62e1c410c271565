"""Who may do what: HS256 bearer keys with Honcho's claims, and the scope rules of every route.

Claims: `ad` (admin), `w` (workspace), `p` (peer), `s` (session), `exp` (numeric date). A key minted by
any HS256 implementation with the same secret and claims works.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from dataclasses import dataclass
from enum import Enum

from precis.errors import Forbidden, Invalid, Unauthorized


@dataclass(frozen=True)
class Principal:
    admin: bool = False
    workspace: str | None = None
    peer: str | None = None
    session: str | None = None


class Access(Enum):
    PUBLIC = "public"
    ADMIN = "admin"  # admin keys only
    CREATE_WORKSPACE = "create_workspace"  # admin, or a workspace key for its own id
    WORKSPACE = "workspace"  # admin or the workspace's key
    CREATE_IN_WORKSPACE = "create_in_workspace"  # + a peer/session key creating itself (the SDK does this)
    PEER = "peer"  # + the peer's own key
    SESSION_READ = "session_read"  # + the session's key, + keys of peers that are members
    SESSION_WRITE = "session_write"  # + the session's key


_W = "/v3/workspaces/{workspace_id}"
_S = f"{_W}/sessions/{{session_id}}"
ROUTES: dict[str, Access] = {
    "GET /health": Access.PUBLIC,
    "GET /openapi.json": Access.PUBLIC,
    "POST /v3/keys": Access.ADMIN,
    "POST /v3/workspaces/list": Access.ADMIN,
    "POST /v3/workspaces": Access.CREATE_WORKSPACE,
    f"PUT {_W}": Access.WORKSPACE,
    f"DELETE {_W}": Access.WORKSPACE,
    f"POST {_W}/peers": Access.CREATE_IN_WORKSPACE,
    f"POST {_W}/peers/list": Access.WORKSPACE,
    f"PUT {_W}/peers/{{peer_id}}": Access.PEER,
    f"POST {_W}/peers/{{peer_id}}/sessions": Access.PEER,
    f"POST {_W}/sessions": Access.CREATE_IN_WORKSPACE,
    f"POST {_W}/sessions/list": Access.WORKSPACE,
    f"PUT {_S}": Access.SESSION_WRITE,
    f"DELETE {_S}": Access.SESSION_WRITE,
    f"POST {_S}/peers": Access.SESSION_WRITE,
    f"PUT {_S}/peers": Access.SESSION_WRITE,
    f"DELETE {_S}/peers": Access.SESSION_WRITE,
    f"GET {_S}/peers": Access.SESSION_READ,
    f"GET {_S}/peers/{{peer_id}}/config": Access.SESSION_READ,
    f"PUT {_S}/peers/{{peer_id}}/config": Access.SESSION_WRITE,
    f"POST {_S}/messages": Access.SESSION_WRITE,
    f"POST {_S}/messages/list": Access.SESSION_READ,
    f"GET {_S}/messages/{{message_id}}": Access.SESSION_READ,
    f"PUT {_S}/messages/{{message_id}}": Access.SESSION_WRITE,
    f"GET {_S}/context": Access.SESSION_READ,
    f"GET {_S}/summaries": Access.SESSION_READ,
}


def _b64encode(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _b64decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def mint_key(secret: str, *, admin: bool = False, workspace: str | None = None, peer: str | None = None,
             session: str | None = None, expires: int | None = None) -> str:
    """An HS256 JWT with Honcho's claims; a peer or session claim needs a workspace claim."""
    if (peer or session) and not workspace:
        raise Invalid("workspace_id: a peer or session key needs a workspace")
    claims: dict = {"t": ""}
    if admin:
        claims["ad"] = True
    for name, value in (("w", workspace), ("p", peer), ("s", session), ("exp", expires)):
        if value is not None:
            claims[name] = value
    header = _b64encode(json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode())
    payload = _b64encode(json.dumps(claims, separators=(",", ":")).encode())
    signature = hmac.new(secret.encode(), f"{header}.{payload}".encode(), hashlib.sha256).digest()
    return f"{header}.{payload}.{_b64encode(signature)}"


def verify_key(token: str, secret: str, *, now: float | None = None) -> Principal:
    """The principal of a bearer token; Unauthorized (401) for anything malformed, forged or expired."""
    parts = token.split(".")
    if len(parts) != 3:
        raise Unauthorized("malformed key: expected a JWT (header.payload.signature)")
    try:
        header = json.loads(_b64decode(parts[0]))
        claims = json.loads(_b64decode(parts[1]))
        signature = _b64decode(parts[2])
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise Unauthorized("malformed key: not base64url JSON") from None
    if not isinstance(header, dict) or header.get("alg") != "HS256":
        raise Unauthorized("invalid key: only HS256-signed keys are accepted")
    expected = hmac.new(secret.encode(), f"{parts[0]}.{parts[1]}".encode(), hashlib.sha256).digest()
    if not hmac.compare_digest(signature, expected):
        raise Unauthorized("invalid key: bad signature")
    if not isinstance(claims, dict):
        raise Unauthorized("invalid key: claims must be an object")
    exp = claims.get("exp")
    if exp is not None:
        if isinstance(exp, bool) or not isinstance(exp, (int, float)):
            raise Unauthorized("invalid key: exp must be a numeric date")
        if (time.time() if now is None else now) >= exp:
            raise Unauthorized("expired key")
    values = {name: claims.get(name) for name in ("w", "p", "s")}
    if any(v is not None and not isinstance(v, str) for v in values.values()):
        raise Unauthorized("invalid key: w, p and s claims must be strings")
    return Principal(admin=claims.get("ad") is True, workspace=values["w"], peer=values["p"], session=values["s"])


def bearer(headers: dict[str, str] | None) -> str:
    """The token of an `Authorization: Bearer …` header; Unauthorized when missing or of another scheme."""
    value = next((v for k, v in (headers or {}).items() if k.lower() == "authorization"), None)
    if not value:
        raise Unauthorized("missing Authorization header: send 'Authorization: Bearer <key>'")
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("Authorization header must be 'Bearer <key>'")
    return token.strip()


def authorize(principal: Principal, access: Access, *, workspace: str | None = None, peer: str | None = None,
              session: str | None = None, body_id: str | None = None, is_member=lambda: False) -> None:
    """Raise Forbidden (403) unless `principal` may perform a request of `access` on these ids.

    `is_member` is called (one read) only when a peer key asks to read a session.
    """
    if principal.admin or access is Access.PUBLIC:
        return
    if access is Access.ADMIN:
        raise Forbidden("this route needs an admin key")
    if principal.workspace is None:
        raise Forbidden("this key has neither an admin nor a workspace claim")
    if access is Access.CREATE_WORKSPACE:
        if principal.peer is None and principal.session is None and body_id == principal.workspace:
            return
        raise Forbidden(f"a key for workspace '{principal.workspace}' can only create that workspace")
    if workspace != principal.workspace:
        raise Forbidden(f"this key is for workspace '{principal.workspace}', not '{workspace}'")
    if principal.peer is None and principal.session is None:
        return  # a workspace key: everything inside it
    if access is Access.CREATE_IN_WORKSPACE and body_id is not None and body_id in (principal.peer, principal.session):
        return
    if principal.session is not None and session == principal.session and access in (Access.SESSION_READ,
                                                                                        Access.SESSION_WRITE):
        return
    if principal.peer is not None:
        if access is Access.PEER and peer == principal.peer:
            return
        if access is Access.SESSION_READ and session is not None and is_member():
            return
        if access is Access.SESSION_WRITE and session is not None:
            raise Forbidden(f"a peer key can read the sessions of '{principal.peer}' but not write to them")
    raise Forbidden("this key's scope does not cover this route")
