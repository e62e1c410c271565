"""One chat, end to end: check the request, read the memory, ask the engine, shape the answer (JSON or SSE).

Errors speak to the caller: an unknown peer, session or scope is 404; a bad combination or schema 422; a model that
never met the schema 422 naming what failed; a model endpoint that failed 503 (retryable) or 502 (it refused).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from precis.auth import Principal, Reach, named_sessions
from precis.chat import (
    MEMORY_TOKENS,
    ChatEngine,
    ChatRequest,
    answer_body,
    chat_engine_name,
    check_response_format,
    get_chat_engine,
    sse_body,
)
from precis.chat.query import ChatQuery
from precis.context.rules import session_allowlist
from precis.errors import BadGateway, Invalid, Unavailable
from precis.llm import EngineError, PromptTooLong
from precis.llm.embeddings import embed_query
from precis.store import resources
from precis.store.db import Db

if TYPE_CHECKING:
    from precis.settings import Settings


@dataclass(frozen=True)
class ChatAnswer:
    """The answer's body: a JSON object, or (stream) Server-Sent Events text."""

    body: dict[str, Any] | str
    stream: bool


@lru_cache(maxsize=4)
def _engine(name: str, settings: Settings) -> ChatEngine:
    """One engine (and HTTP client) per cold start and configuration."""
    return get_chat_engine(name, settings)


def answer_chat(
    db: Db,
    settings: Settings,
    ws: str,
    body: ChatQuery,
    *,
    peer_id: str | None,
    principal: Principal | None = None,
    embed: Callable[[str], list[float]] = embed_query,
) -> ChatAnswer:
    """Answer `body` as `peer_id` (a peer chat) or the workspace (peer_id None), reading only what `principal`'s key
    reads (None: no key checked); `embed` embeds its queries."""
    from precis.chat.recall import Recall

    check_response_format(body.response_format)
    chosen = body.filters.session_id if body.filters else None
    scopes = [body.scope] if isinstance(body.scope, str) else body.scope
    if scopes is not None and (body.session_id is not None or chosen is not None):
        raise Invalid("scope: cannot be combined with session_id or filters.session_id")
    allowlist = session_allowlist(body.session_id, chosen)
    # Every session the body names is one the key reads (the session and the allowlist, each by name); what the
    # chat's message search reads without a name is bounded to the key's own.
    reach = Reach.of(principal)
    membership = resources.PeerSessions(db, ws, reach.peer)
    named = named_sessions([{"session_id": body.session_id}, {"session_id": chosen}])
    reach.require(membership, scope=scopes, sessions=named)
    observer, observed = (peer_id, body.target or peer_id) if peer_id else (None, None)
    if peer_id is None and body.target is not None:
        raise Invalid("target: a workspace chat has no target; ask a peer (POST /peers/{peer_id}/chat)")
    resources.require_peers(db, ws, observer, observed)  # the workspace, and the peers of a peer chat
    base = None
    if body.session_id is not None:
        from precis.store.messages import base_of

        base = base_of(resources.require_session(db, ws, body.session_id))  # a clone searches what it inherited
    if scopes is not None:
        from precis.store import scopes as scope_store

        if peer_id is not None and len(scopes) == 1:
            scope_store.require(db, ws, scopes[0])
            observer = scope_store.observer(scopes[0])  # the scope's own view, deductions included
        else:
            allowlist = scope_store.member_sessions(db, ws, scopes)
    request = ChatRequest(body.query, observer, observed, body.session_id, body.reasoning_level, body.response_format)
    semantic = embed if settings.embedder != "hashed" else None
    memory = Recall(
        db,
        ws,
        observer=observer,
        observed=observed,
        session_id=body.session_id,
        sessions=allowlist,
        embed=embed,
        semantic=semantic,
        base=base,
        bound=lambda: reach.bound(membership, None),
    )
    gathered = memory.gather(body.query, MEMORY_TOKENS[body.reasoning_level])
    content = _ask(_engine(chat_engine_name(settings), settings), request, memory, gathered)
    evidence = memory.evidence if body.include_evidence else None
    if body.stream:
        return ChatAnswer(sse_body(content, evidence), stream=True)
    return ChatAnswer(answer_body(content, evidence), stream=False)


def _ask(engine: ChatEngine, request: ChatRequest, memory: Any, gathered: Any) -> str | None:
    try:
        return engine.answer(request, memory, gathered)
    except PromptTooLong as exc:
        raise BadGateway(
            f"chat: the model's context window is smaller than PRECIS_LLM_MAX_INPUT_TOKENS: {exc}"
        ) from None
    except EngineError as exc:
        from precis.chat.llm import SchemaMismatch

        if isinstance(exc.__cause__, SchemaMismatch):
            raise Invalid(f"response_format: the model's answers did not match the schema: {exc.__cause__}") from None
        if exc.retryable:
            raise Unavailable(f"chat: the model is unavailable, retry later ({exc})") from None
        raise BadGateway(f"chat: the model endpoint refused the request ({exc})") from None
