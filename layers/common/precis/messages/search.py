"""The message search request: the messages that best match a query (BM25 over their words, fused with meaning when
the deployment embeds), of the workspace, a session or a peer, bounded to what the caller's key reads.

Both edges call it: `POST …/search` (workspace, session, peer; precis.api.read) and the MCP tool `search`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from precis.auth import Principal, Reach, named_sessions
from precis.llm.embeddings import semantic_query
from precis.schemas import SearchQuery
from precis.store import messages, resources
from precis.store.db import Db
from precis.store.search import Budget


@dataclass(frozen=True, slots=True)
class Found:
    """The messages found, best first, and the read budget their ranking spent (`exhausted`: the best in what it
    read)."""

    messages: list[dict[str, Any]]
    budget: Budget = field(default_factory=Budget)


def find_messages(
    db: Db,
    ws: str,
    body: SearchQuery,
    principal: Principal | None,
    *,
    session_id: str | None = None,
    peer_id: str | None = None,
) -> Found:
    """The messages `body` asks for: the workspace's, a session's (`session_id`) or a peer's (`peer_id`), of the
    sessions `principal`'s key reads (None: no key checked)."""
    from precis.settings import get_settings
    from precis.store.search import search

    within = {k: v for k, v in (("session_id", session_id), ("peer_id", peer_id)) if v is not None}
    reach = Reach.of(principal)
    membership = resources.PeerSessions(db, ws, reach.peer)
    reach.require(membership, sessions=named_sessions(body.filters) - {session_id})
    filters = body.filters
    if session_id is None:
        bound = reach.bound(membership, None)
        if bound is not None:  # what the key does not read is never ranked in front of what it does
            if not bound:
                return Found([])
            filters = {"AND": [filters or {}, {"session_id": {"in": list(bound)}}]}
    base = None
    if peer_id is not None:
        resources.require_peers(db, ws, peer_id)
    elif session_id is not None:
        base = messages.base_of(resources.require_session(db, ws, session_id))
    else:
        resources.require_workspace(db, ws)
    budget = Budget()
    found = search(
        db,
        ws,
        body.query,
        body.limit,
        filters,
        semantic=semantic_query(get_settings()),
        base=base,
        budget=budget,
        **within,
    )
    return Found(found, budget)
