"""A peer's context and representation: what one peer (or a scope) holds of another, fitted to a token budget; read
as the caller's key may. Both edges call it: `GET …/peers/{p}/context`, `POST …/peers/{p}/representation`
(precis.api.read) and the MCP tools `get_peer_context` and `get_representation`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from precis.auth import Principal, Reach, named_sessions
from precis.context.rules import session_allowlist
from precis.errors import Invalid
from precis.llm.embeddings import embed_query
from precis.schemas import RepresentationQuery
from precis.store import resources
from precis.store.db import Db

if TYPE_CHECKING:
    from precis.store import representation


@dataclass(frozen=True, slots=True)
class PeerContext:
    """A peer's view of another: its representation's text, the card (None: no card), and the most conclusions
    the read asked for."""

    representation: str
    card: list[str] | None
    max_conclusions: int


def peer_context(
    db: Db,
    ws: str,
    peer_id: str,
    *,
    target: str | None = None,
    search_query: str | None = None,
    search_top_k: int | None = None,
    search_max_distance: float | None = None,
    include_most_frequent: bool = True,
    max_conclusions: int | None = None,
    tokens: int | None = None,
) -> PeerContext:
    """`peer_id`'s view of `target` (else of itself), with its card, within `tokens` when given (else whole)."""
    from precis.store import representation

    request = representation.Request(
        peer_id,
        target or peer_id,
        max_conclusions or 100,
        include_most_frequent,
        search_query or None,
        search_top_k,
        search_max_distance,
    )
    return _read(db, ws, request, tokens)


def peer_representation(
    db: Db, ws: str, peer_id: str, body: RepresentationQuery, principal: Principal | None
) -> PeerContext:
    """The representation `body` asks of `peer_id`'s view, whole, reading what `principal`'s key reads (None: no key
    checked)."""
    chosen = body.filters.session_id if body.filters else None
    if body.scope is not None and (body.session_id is not None or chosen is not None):
        raise Invalid("scope: cannot be combined with session_id or filters.session_id")
    allowlist = session_allowlist(body.session_id, chosen)
    reach = Reach.of(principal)
    named = named_sessions([{"session_id": body.session_id}, {"session_id": chosen}])
    reach.require(resources.PeerSessions(db, ws, reach.peer), scope=body.scope, sessions=named)
    observer = peer_id
    if body.scope is not None:
        from precis.store import scopes

        scopes.require(db, ws, body.scope)
        observer = scopes.observer(body.scope)
    from precis.store import representation

    request = representation.Request(
        observer,
        body.target or peer_id,
        body.max_conclusions,
        body.include_most_frequent,
        body.search_query,
        body.search_top_k,
        body.search_max_distance,
        reach.representation(allowlist),
    )
    return _read(db, ws, request, None)


def _read(db: Db, ws: str, request: representation.Request, tokens: int | None) -> PeerContext:
    from precis.context.fit import fit
    from precis.store import representation
    from precis.tokens import count_text

    observer = None if request.observer.startswith("scope.") else request.observer  # a scope's view: no peer
    resources.require_peers(db, ws, observer, request.observed)
    read = representation.start(db, ws, request, embed_query)()
    fitted = fit(read.conclusions, read.card, tokens if tokens is not None else 10**9, count_text)
    return PeerContext(fitted.text, fitted.card, request.max_conclusions)
