"""Who may do what: HS256 bearer keys with Honcho's claims, and the scope rules of every route.

Claims: `ad` (admin), `w` (workspace), `p` (peer), `s` (session), `exp` (numeric date). A key minted by
any HS256 implementation with the same secret and claims works.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Collection, Iterable, Set
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

from precis.errors import Forbidden, Invalid, Unauthorized

MAX_KEY_CHARS = 8192  # Honcho's keys are ~150 chars; anything this long is hostile, refused before it is parsed


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
    CREATE_PEER = "create_peer"  # + a peer key getting or creating its own peer (the SDK's client.peer())
    # + a session key getting or creating its own session; a peer key may only get, with a body of just
    # {"id"}, a live session its peer belongs to (the SDK's client.session())
    CREATE_SESSION = "create_session"
    PEER = "peer"  # + the peer's own key
    SESSION_READ = "session_read"  # + the session's key, + keys of peers that are members
    SESSION_WRITE = "session_write"  # + the session's key


_W = "/v3/workspaces/{workspace_id}"
_S = f"{_W}/sessions/{{session_id}}"
ROUTES: dict[str, Access] = {
    "GET /health": Access.PUBLIC,
    "GET /openapi.json": Access.PUBLIC,
    # The interactive docs of that document: a page and its files, no data (a request sent from it needs a key).
    "GET /docs": Access.PUBLIC,
    "GET /docs/{name}": Access.PUBLIC,
    # The console holds no data: its page reads the API with the key the user pastes, so it needs none itself.
    "GET /console": Access.PUBLIC,
    "GET /console/{name}": Access.PUBLIC,
    "POST /v3/keys": Access.ADMIN,
    "POST /v3/workspaces/list": Access.ADMIN,
    "POST /v3/workspaces": Access.CREATE_WORKSPACE,
    f"PUT {_W}": Access.WORKSPACE,
    f"DELETE {_W}": Access.WORKSPACE,
    f"POST {_W}/peers": Access.CREATE_PEER,
    f"POST {_W}/peers/list": Access.WORKSPACE,
    f"PUT {_W}/peers/{{peer_id}}": Access.PEER,
    f"POST {_W}/peers/{{peer_id}}/sessions": Access.PEER,
    f"POST {_W}/sessions": Access.CREATE_SESSION,
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
    # (ext) deleting a message, with what was drawn from it: the keys that may edit it.
    f"DELETE {_S}/messages/{{message_id}}": Access.SESSION_WRITE,
    f"POST {_S}/clone": Access.SESSION_WRITE,
    f"GET {_S}/context": Access.SESSION_READ,
    f"GET {_S}/summaries": Access.SESSION_READ,
    # Derived memory: conclusions span a workspace's peers and sessions (a workspace key); a peer's own key reads and
    # sets its cards.
    f"POST {_W}/conclusions": Access.WORKSPACE,
    f"POST {_W}/conclusions/list": Access.WORKSPACE,
    f"POST {_W}/conclusions/query": Access.WORKSPACE,
    f"GET {_W}/conclusions/{{conclusion_id}}": Access.WORKSPACE,
    f"DELETE {_W}/conclusions/{{conclusion_id}}": Access.WORKSPACE,
    f"GET {_W}/peers/{{peer_id}}/card": Access.PEER,
    f"PUT {_W}/peers/{{peer_id}}/card": Access.PEER,
    f"GET {_W}/queue/status": Access.WORKSPACE,
    f"GET {_W}/usage": Access.WORKSPACE,
    f"POST {_W}/schedule_dream": Access.WORKSPACE,
    # Message search: the workspace's key; a session's (and its members') keys; the peer's own key.
    f"POST {_W}/search": Access.WORKSPACE,
    f"POST {_S}/search": Access.SESSION_READ,
    f"POST {_W}/peers/{{peer_id}}/search": Access.PEER,
    # Scopes: a workspace key.
    f"POST {_W}/scopes": Access.WORKSPACE,
    f"POST {_W}/scopes/list": Access.WORKSPACE,
    f"GET {_W}/scopes/{{scope_id}}": Access.WORKSPACE,
    f"POST {_W}/scopes/{{scope_id}}/sessions": Access.WORKSPACE,
    f"DELETE {_W}/scopes/{{scope_id}}/sessions/{{session_id}}": Access.WORKSPACE,
    f"POST {_W}/scopes/{{scope_id}}/sessions/list": Access.WORKSPACE,
    f"GET {_W}/scopes/{{scope_id}}/status": Access.WORKSPACE,
    # Chat: a peer key chats only as itself; the workspace's chat needs the workspace's key.
    f"POST {_W}/peers/{{peer_id}}/chat": Access.PEER,
    f"POST {_W}/chat": Access.WORKSPACE,
    # A peer's own view (of itself or of others): the peer's key, or the workspace's.
    f"GET {_W}/peers/{{peer_id}}/context": Access.PEER,
    f"POST {_W}/peers/{{peer_id}}/representation": Access.PEER,
    # Webhook endpoints: Honcho's admin or workspace keys; the rotation of a secret (ext) likewise.
    f"POST {_W}/webhooks": Access.WORKSPACE,
    f"GET {_W}/webhooks": Access.WORKSPACE,
    f"GET {_W}/webhooks/test": Access.WORKSPACE,
    f"DELETE {_W}/webhooks/{{endpoint_id}}": Access.WORKSPACE,
    f"POST {_W}/webhooks/{{endpoint_id}}/rotate": Access.WORKSPACE,
    # An endpoint's delivery log (ext): the keys that manage the endpoint.
    f"GET {_W}/webhooks/{{endpoint_id}}/deliveries": Access.WORKSPACE,
    # A file upload is a message post: the same keys may make it.
    f"POST {_S}/messages/upload": Access.SESSION_WRITE,
    # Export and import (ext): a whole workspace's data, so the workspace's key (or an admin's).
    f"POST {_W}/exports": Access.WORKSPACE,
    f"GET {_W}/exports/{{export_id}}": Access.WORKSPACE,
    f"POST {_W}/imports/uploads": Access.WORKSPACE,
    f"POST {_W}/imports": Access.WORKSPACE,
    f"GET {_W}/imports/{{import_id}}": Access.WORKSPACE,
    # Erasing a peer (ext): everything it said and everything about it, so the workspace's key (or an admin's).
    f"DELETE {_W}/peers/{{peer_id}}": Access.WORKSPACE,
    f"GET {_W}/peers/{{peer_id}}/erasure": Access.WORKSPACE,
}


def mint_key(
    secret: str,
    *,
    admin: bool = False,
    workspace: str | None = None,
    peer: str | None = None,
    session: str | None = None,
    expires: int | None = None,
) -> str:
    """An HS256 JWT with Honcho's claims; a peer or session claim needs a workspace claim."""
    import jwt  # deferred: the read path's cold start does not pay for PyJWT until a key is checked

    if (peer or session) and not workspace:
        raise Invalid("workspace_id: a peer or session key needs a workspace")
    claims: dict[str, Any] = {"t": ""}
    if admin:
        claims["ad"] = True
    for name, value in (("w", workspace), ("p", peer), ("s", session), ("exp", expires)):
        if value is not None:
            claims[name] = value
    return jwt.encode(claims, secret, algorithm="HS256")


def verify_key(token: str, secret: str, *, now: float | None = None) -> Principal:
    """The principal of a bearer token; Unauthorized (401) for anything malformed, forged or expired."""
    import jwt

    if len(token) > MAX_KEY_CHARS:
        raise Unauthorized(f"malformed key: at most {MAX_KEY_CHARS} characters, got {len(token)}")
    try:
        # exp is checked below, against an injectable clock and as a strict numeric date; iat is informational
        # (a minting clock a second ahead must not refuse a fresh key).
        claims = jwt.decode(token, secret, algorithms=["HS256"], options={"verify_exp": False, "verify_iat": False})
    except jwt.InvalidAlgorithmError:
        raise Unauthorized("invalid key: only HS256-signed keys are accepted") from None
    except jwt.InvalidSignatureError:
        raise Unauthorized("invalid key: bad signature") from None
    except jwt.DecodeError as exc:
        raise Unauthorized(f"malformed key: expected a JWT (header.payload.signature): {exc}") from None
    except jwt.InvalidTokenError as exc:
        raise Unauthorized(f"invalid key: {exc}") from None
    except (RecursionError, ValueError, TypeError, ArithmeticError):
        # PyJWT parses the header before the signature check: a deeply nested one exhausts the stack, odd claim
        # types (an nbf of [1], of 1e400) escape its own errors. None of it is a usable key.
        raise Unauthorized("malformed key: not a JWT this service can read") from None
    exp = claims.get("exp")
    if exp is not None:
        if isinstance(exp, bool) or not isinstance(exp, (int, float)) or not math.isfinite(exp):
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


def body_id(body: Any) -> str | None:
    """The `id` of a create request's JSON body, if it has a string one."""
    value = body.get("id") if isinstance(body, dict) else None
    return value if isinstance(value, str) else None


def authorize(
    principal: Principal,
    access: Access,
    *,
    workspace: str | None = None,
    peer: str | None = None,
    session: str | None = None,
    body: Any = None,
    is_member: Callable[[str], bool] = lambda _session: False,
) -> None:
    """Raise Forbidden (403) unless `principal` may perform a request of `access` on these ids.

    `body` is the request's parsed JSON (create routes read its `id`); `is_member(session_id)` says whether the
    key's peer belongs to that live session, and is called (one or two reads) only for a peer key on a session.
    """
    if principal.admin or access is Access.PUBLIC:
        return
    if access is Access.ADMIN:
        raise Forbidden("this route needs an admin key")
    if principal.workspace is None:
        raise Forbidden("this key has neither an admin nor a workspace claim")
    if access is Access.CREATE_WORKSPACE:
        if principal.peer is None and principal.session is None and body_id(body) == principal.workspace:
            return
        raise Forbidden(f"a key for workspace '{principal.workspace}' can only create that workspace")
    if workspace != principal.workspace:
        raise Forbidden(f"this key is for workspace '{principal.workspace}', not '{workspace}'")
    if principal.peer is None and principal.session is None:
        return  # a workspace key: everything inside it
    if access is Access.CREATE_PEER:
        _authorize_peer_create(principal, body_id(body))
        return
    if access is Access.CREATE_SESSION:
        _authorize_session_create(principal, body, is_member)
        return
    if (
        principal.session is not None
        and session == principal.session
        and access in (Access.SESSION_READ, Access.SESSION_WRITE)
    ):
        return
    if principal.peer is not None:
        if access is Access.PEER and peer == principal.peer:
            return
        if access is Access.SESSION_READ and session is not None:
            if is_member(session):
                return
            raise Forbidden(
                f"a peer key reads only the live sessions its peer belongs to; '{principal.peer}' is "
                f"not a member of session '{session}'"
            )
        if access is Access.SESSION_WRITE and session is not None:
            raise Forbidden(f"a peer key can read the sessions of '{principal.peer}' but not write to them")
    raise Forbidden("this key's scope does not cover this route")


def _authorize_peer_create(principal: Principal, peer_id: str | None) -> None:
    if principal.peer is not None and peer_id == principal.peer:
        return
    if principal.peer is None:
        raise Forbidden(f"a key for session '{principal.session}' cannot create or get peers")
    raise Forbidden(f"a key for peer '{principal.peer}' can only create or get that peer, not '{peer_id}'")


def _authorize_session_create(principal: Principal, body: Any, is_member: Callable[[str], bool]) -> None:
    session_id = body_id(body)
    if principal.session is not None and session_id == principal.session:
        return
    if principal.peer is None:
        raise Forbidden(
            f"a key for session '{principal.session}' can only create or get that session, not '{session_id}'"
        )
    # A peer key never creates a session nor adds members through this route (the store adds the body's peers
    # to an existing session): it may only get a live session its peer already belongs to.
    extra = sorted(k for k in body if k != "id") if isinstance(body, dict) else []
    if session_id is None or extra:
        sent = f"; this body also sends {', '.join(map(repr, extra))}" if extra else ""
        raise Forbidden(
            f"a key for peer '{principal.peer}' cannot create sessions or change them here: it may "
            f'only get a session it belongs to, with a body of just {{"id": <session id>}}{sent}'
        )
    if not is_member(session_id):
        raise Forbidden(
            f"a key for peer '{principal.peer}' cannot create sessions: it may only get a live session "
            f"it belongs to, and '{principal.peer}' is not a member of session '{session_id}'"
        )


def authorize_view(principal: Principal, query: dict[str, str], body: dict[str, Any] | None = None) -> None:
    """Forbidden (403) when a peer's key asks for another peer's perspective (`peer_perspective`, or `peer_target`
    alone, in a session context) or for a scope's view: a peer key reads only its own perspective, and scopes need
    a workspace key (docs/design.md, "What the SDK sees")."""
    if principal.peer is None:
        return
    if query.get("scope") or (body or {}).get("scope"):
        raise Forbidden("a peer key cannot read through a scope: scopes need a workspace key")
    observer = query.get("peer_perspective") or query.get("peer_target")
    if observer is not None and observer != principal.peer:
        raise Forbidden(f"a key for peer '{principal.peer}' reads only its own perspective, not '{observer}''s")


# ---------------------------------------------------------------- what a key reads (docs/design.md, "Keys")


class Membership(Protocol):
    """A peer's sessions as the store reads them (precis.store.resources.PeerSessions)."""

    def among(self, sessions: Collection[str]) -> Set[str]:
        """Those of `sessions` the peer belongs to and that are live (one BatchGetItem per 50)."""
        ...

    def joined(self) -> Collection[str]:
        """Every session the peer has joined (one Query)."""
        ...


@dataclass(frozen=True)
class Reach:
    """What a key admitted to a route may read inside its workspace: everything (an admin's or a workspace's key, or
    no key checked), its session only (a session key; a key with both claims counts as one), or the live sessions
    its peer belongs to (a peer key). Every read path asks it about the sessions and scopes it names (`require`)
    and bounds by it what it reads without naming sessions (`bound`, `representation`)."""

    session: str | None = None
    peer: str | None = None

    @staticmethod
    def of(principal: Principal | None) -> Reach:
        if principal is None or principal.admin:
            return Reach()
        if principal.session is not None:
            return Reach(session=principal.session)
        return Reach(peer=principal.peer)

    @property
    def whole(self) -> bool:
        return self.session is None and self.peer is None

    def require(self, membership: Membership, *, scope: object = None, sessions: Iterable[str] = ()) -> None:
        """Forbidden (403) when the read names a scope (only a key that reads everything may), or a session the key
        may not read (the first one it may not, by name)."""
        if self.whole:
            return
        if scope:
            raise Forbidden(f"a {self._kind()} key cannot read through a scope: scopes need a workspace key")
        named = sorted(set(sessions))
        if not named:
            return
        if self.session is not None:
            other = next((s for s in named if s != self.session), None)
            if other is not None:
                raise Forbidden(f"a key for session '{self.session}' reads that session only, not '{other}'")
            return
        members = membership.among(named)
        outside = next((s for s in named if s not in members), None)
        if outside is not None:
            raise Forbidden(
                f"a peer key reads only the live sessions its peer belongs to; '{self.peer}' is not a member of "
                f"session '{outside}'"
            )

    def bound(self, membership: Membership, allowlist: tuple[str, ...] | None) -> tuple[str, ...] | None:
        """The sessions a read may draw on: its `allowlist` (sessions already `require`d), else for a key that does
        not read everything its own (the session, or the sessions its peer has joined); None: no bound."""
        if allowlist is not None or self.whole:
            return allowlist
        if self.session is not None:
            return (self.session,)
        return tuple(sorted(membership.joined()))

    def representation(self, allowlist: tuple[str, ...] | None) -> tuple[str, ...] | None:
        """The allowlist of a peer's representation read: a session key's own session (its explicit conclusions, no
        card: MEMORY.md's allowlist), else the read's own (a peer key reads its own perspective whole)."""
        if self.session is not None:
            return tuple(s for s in allowlist if s == self.session) if allowlist is not None else (self.session,)
        return allowlist

    def _kind(self) -> str:
        return "session" if self.session is not None else "peer"


def named_sessions(filters: Any) -> set[str]:
    """The session ids a message filter names (under `session_id`, at any depth of AND/OR/NOT, as a value, a list,
    or an operator's operand); `*` names none."""
    found: set[str] = set()
    stack = [filters]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            for key, value in node.items():
                if key == "session_id":
                    found |= _ids_in(value)
                elif key in ("AND", "OR", "NOT"):
                    stack.append(value)
    return found


def _ids_in(value: Any) -> set[str]:
    if isinstance(value, str):
        return set() if value == "*" else {value}
    if isinstance(value, list):
        return {v for v in value if isinstance(v, str)}
    if isinstance(value, dict):
        return set().union(*(_ids_in(v) for v in value.values())) if value else set()
    return set()
