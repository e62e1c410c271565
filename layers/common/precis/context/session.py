"""The context request: a session's context for the next model call, within a token budget, with what is known of a
peer and older messages recalled for a query; read as the caller's key may (docs/design.md, "The context").

Both edges call it: `GET …/sessions/{s}/context` (precis.api.read) and the MCP tools `get_session_context` and
`get_budgeted_context`. The edges parse and authorize the route or tool; this checks the parameters, bounds what the
key reads and composes the answer.
"""

from __future__ import annotations

from dataclasses import dataclass

from precis.auth import Principal, Reach
from precis.context import compose
from precis.context.rules import MAX_CONTEXT_TOKENS, check_context_params
from precis.llm.embeddings import embed_query, semantic_query
from precis.store import resources
from precis.store.db import Db


@dataclass(frozen=True, slots=True)
class ContextRequest:
    """What a context read asks for (the route's query parameters, already parsed)."""

    tokens: int | None = None
    summary: bool = True
    whole_runs: bool | None = None
    peer_target: str | None = None
    peer_perspective: str | None = None
    scope: str | None = None
    sessions: list[str] | None = None  # as the query string gives them: each may be a comma-separated list
    limit_to_session: bool = False
    search_query: str | None = None
    search_top_k: int | None = None
    search_max_distance: float | None = None
    include_most_frequent: bool = False
    max_conclusions: int | None = None


def session_context(
    db: Db, ws: str, session_id: str, asked: ContextRequest, principal: Principal | None
) -> compose.SessionContext:
    """The context of `session_id` for `asked`; `principal`, the caller's key (None: no keys), bounds the sessions,
    scope and peer view it reads."""
    check_context_params(
        session_id,
        peer_target=asked.peer_target,
        peer_perspective=asked.peer_perspective,
        scope=asked.scope,
        sessions=asked.sessions,
        limit_to_session=asked.limit_to_session,
    )
    peer = None
    allowlist = (
        (session_id,)
        if asked.limit_to_session
        else tuple(s for part in asked.sessions for s in part.split(","))
        if asked.sessions is not None
        else None
    )
    # The path's session is the edge's to check; the scope and the other sessions named are the key's reach's.
    reach = Reach.of(principal)
    membership = resources.PeerSessions(db, ws, reach.peer)
    reach.require(membership, scope=asked.scope, sessions=set(allowlist or ()) - {session_id})
    if asked.peer_target:
        observer = asked.peer_perspective or asked.peer_target
        if asked.scope is not None:
            from precis.store import scopes

            scopes.require(db, ws, asked.scope)
            observer = scopes.observer(asked.scope)
        from precis.store import representation  # only a read with a peer view loads it

        peer = compose.PeerView(
            representation.Request(
                observer=observer,
                observed=asked.peer_target,
                max_conclusions=asked.max_conclusions or 100,
                include_most_frequent=asked.include_most_frequent,
                search_query=asked.search_query,
                search_top_k=asked.search_top_k,
                search_max_distance=asked.search_max_distance,
                sessions=reach.representation(allowlist),
            ),
            embed_query,
        )
    recall = None
    if asked.search_query:
        from precis.settings import get_settings

        settings = get_settings()
        within = allowlist
        if asked.scope is not None:  # the scope's sessions (and this one, whose newest messages the context holds)
            from precis.store import scopes

            within = (session_id, *scopes.member_sessions(db, ws, [asked.scope]))
        recall = compose.Recall(
            asked.search_query,
            semantic_query(settings),
            share=settings.context_recall_share,
            peers=(asked.peer_target,) if asked.peer_target else None,
            sessions=reach.bound(membership, within),
        )
    return compose.read_context(
        db,
        ws,
        session_id,
        asked.tokens or MAX_CONTEXT_TOKENS,
        use_summary=asked.summary,
        whole_runs=asked.whole_runs,
        peer=peer,
        recall=recall,
    )
