"""Read routes of the v3 API (served by the context function): context, summaries, lists, message reads.

A route imports what only it runs (scopes, conclusions, the queue, the representation) when first asked, so a cold
context read without `peer_target` loads none of it."""

from typing import TYPE_CHECKING

from aws_lambda_powertools.event_handler.api_gateway import Router

from precis.api.answers import json_response
from precis.api.caller import caller
from precis.api.params import (
    MAX_CONTEXT_TOKENS,
    ConclusionId,
    Distance,
    FromDay,
    MaxConclusions,
    MessageId,
    OptionalId,
    OptionalScope,
    PageNo,
    PageSize,
    PeerId,
    Reverse,
    ScopeIdPath,
    SessionId,
    SessionIds,
    ToDay,
    Tokens,
    TopK,
    WholeRuns,
    WorkspaceId,
)
from precis.auth import Principal, Reach, named_sessions
from precis.context import compose
from precis.context.rules import check_context_params, session_allowlist
from precis.errors import Invalid
from precis.schemas import ConclusionQuery, ListBody, RepresentationQuery, SearchQuery
from precis.sizes import fit_answer, fit_items
from precis.store import messages, resources
from precis.store.db import get_db
from precis.store.search import Budget

if TYPE_CHECKING:
    from precis.store import representation

router = Router()


def _filters(body: ListBody | None):
    return body.filters if body else None


@router.post("/v3/workspaces/list")
def list_workspaces(body: ListBody | None = None, page: PageNo = 1, size: PageSize = 50, reverse: Reverse = False):
    return resources.list_workspaces(get_db(), _filters(body), page, size, reverse)


@router.post("/v3/workspaces/<workspace_id>/peers/list")
def list_peers(
    workspace_id: WorkspaceId,
    body: ListBody | None = None,
    page: PageNo = 1,
    size: PageSize = 50,
    reverse: Reverse = False,
):
    return resources.list_peers(get_db(), workspace_id, _filters(body), page, size, reverse)


@router.post("/v3/workspaces/<workspace_id>/peers/<peer_id>/sessions")
def list_peer_sessions(
    workspace_id: WorkspaceId,
    peer_id: PeerId,
    body: ListBody | None = None,
    page: PageNo = 1,
    size: PageSize = 50,
    reverse: Reverse = False,
):
    return resources.list_peer_sessions(get_db(), workspace_id, peer_id, _filters(body), page, size, reverse)


@router.post("/v3/workspaces/<workspace_id>/sessions/list")
def list_sessions(
    workspace_id: WorkspaceId,
    body: ListBody | None = None,
    page: PageNo = 1,
    size: PageSize = 50,
    reverse: Reverse = False,
):
    return resources.list_sessions(get_db(), workspace_id, _filters(body), page, size, reverse)


@router.get("/v3/workspaces/<workspace_id>/sessions/<session_id>/peers")
def list_session_peers(workspace_id: WorkspaceId, session_id: SessionId, page: PageNo = 1, size: PageSize = 50):
    return resources.list_members(get_db(), workspace_id, session_id, page, size)


@router.get("/v3/workspaces/<workspace_id>/sessions/<session_id>/peers/<peer_id>/config")
def get_peer_config(workspace_id: WorkspaceId, session_id: SessionId, peer_id: PeerId):
    return resources.member_config(get_db(), workspace_id, session_id, peer_id)


@router.post("/v3/workspaces/<workspace_id>/sessions/<session_id>/messages/list")
def list_session_messages(
    workspace_id: WorkspaceId,
    session_id: SessionId,
    body: ListBody | None = None,
    page: PageNo = 1,
    size: PageSize = 50,
    reverse: Reverse = False,
):
    return messages.list_messages(get_db(), workspace_id, session_id, _filters(body), page, size, reverse)


@router.get("/v3/workspaces/<workspace_id>/sessions/<session_id>/messages/<message_id>")
def get_message(workspace_id: WorkspaceId, session_id: SessionId, message_id: MessageId):
    return messages.get_message(get_db(), workspace_id, session_id, message_id)


@router.get("/v3/workspaces/<workspace_id>/sessions/<session_id>/context")
def get_context(
    workspace_id: WorkspaceId,
    session_id: SessionId,
    tokens: Tokens = None,
    summary: bool = True,
    whole_runs: WholeRuns = None,
    peer_target: OptionalId = None,
    peer_perspective: OptionalId = None,
    scope: OptionalScope = None,
    sessions: SessionIds = None,
    limit_to_session: bool = False,
    search_query: str | None = None,
    search_top_k: TopK = None,
    search_max_distance: Distance = None,
    include_most_frequent: bool = False,
    max_conclusions: MaxConclusions = None,
):
    answer = session_context(
        workspace_id,
        session_id,
        tokens=tokens,
        summary=summary,
        whole_runs=whole_runs,
        peer_target=peer_target,
        peer_perspective=peer_perspective,
        scope=scope,
        sessions=sessions,
        limit_to_session=limit_to_session,
        search_query=search_query,
        search_top_k=search_top_k,
        search_max_distance=search_max_distance,
        include_most_frequent=include_most_frequent,
        max_conclusions=max_conclusions,
        principal=caller(),
    )
    # A token of whitespace may be 128 bytes: a context that cannot fit names the tokens that would, in proportion.
    held = int(answer.get("token_count") or 0)  # (ext) what it holds, which may be less than it was allowed
    return fit_answer(answer, "tokens", min(tokens or MAX_CONTEXT_TOKENS, max(held, 1)))


def session_context(
    workspace_id: str,
    session_id: str,
    *,
    tokens: int | None = None,
    summary: bool = True,
    whole_runs: bool | None = None,
    peer_target: str | None = None,
    peer_perspective: str | None = None,
    scope: str | None = None,
    sessions: list[str] | None = None,
    limit_to_session: bool = False,
    search_query: str | None = None,
    search_top_k: int | None = None,
    search_max_distance: float | None = None,
    include_most_frequent: bool = False,
    max_conclusions: int | None = None,
    principal: Principal | None = None,
) -> dict:
    """The context route's answer for these (checked) parameters; `principal`, the caller's key (None: no keys), bounds
    the sessions a search query recalls from."""
    check_context_params(
        session_id,
        peer_target=peer_target,
        peer_perspective=peer_perspective,
        scope=scope,
        sessions=sessions,
        limit_to_session=limit_to_session,
    )
    peer = None
    allowlist = (
        (session_id,)
        if limit_to_session
        else tuple(s for part in sessions for s in part.split(","))
        if sessions is not None
        else None
    )
    # The path's session is the route's to check; the scope and the other sessions named are the key's reach's.
    reach = Reach.of(principal)
    membership = resources.PeerSessions(get_db(), workspace_id, reach.peer)
    reach.require(membership, scope=scope, sessions=set(allowlist or ()) - {session_id})
    if peer_target:
        observer = peer_perspective or peer_target
        if scope is not None:
            from precis.store import scopes

            scopes.require(get_db(), workspace_id, scope)
            observer = scopes.observer(scope)
        from precis.store import representation

        peer = compose.PeerView(
            representation.Request(
                observer=observer,
                observed=peer_target,
                max_conclusions=max_conclusions or 100,
                include_most_frequent=include_most_frequent,
                search_query=search_query,
                search_top_k=search_top_k,
                search_max_distance=search_max_distance,
                sessions=reach.representation(allowlist),
            ),
            _embed,
        )
    recall = None
    if search_query:
        from precis.settings import get_settings

        settings = get_settings()
        within = allowlist
        if scope is not None:  # the scope's sessions (and this one, whose newest messages the context holds anyway)
            from precis.store import scopes

            within = (session_id, *scopes.member_sessions(get_db(), workspace_id, [scope]))
        recall = compose.Recall(
            search_query,
            _embed if settings.embedder != "hashed" else None,
            share=settings.context_recall_share,
            peers=(peer_target,) if peer_target else None,
            sessions=reach.bound(membership, within),
        )
    return compose.read_context(
        get_db(),
        workspace_id,
        session_id,
        tokens or MAX_CONTEXT_TOKENS,
        use_summary=summary,
        whole_runs=whole_runs,
        peer=peer,
        recall=recall,
    )


@router.get("/v3/workspaces/<workspace_id>/sessions/<session_id>/summaries")
def get_summaries(workspace_id: WorkspaceId, session_id: SessionId):
    return compose.read_summaries(get_db(), workspace_id, session_id)


# ---------------------------------------------------------------- derived memory (docs/design.md, "Derived memory")


def _embed(text: str) -> list[float]:
    from precis.llm.embeddings import configured_embedder

    return configured_embedder().embed([text])[0]


@router.post("/v3/workspaces/<workspace_id>/conclusions/list")
def list_conclusions(
    workspace_id: WorkspaceId,
    body: ListBody | None = None,
    page: PageNo = 1,
    size: PageSize = 50,
    reverse: Reverse = False,
):
    from precis.store import conclusions

    return conclusions.list_conclusions(get_db(), workspace_id, _filters(body), page, size, reverse)


@router.post("/v3/workspaces/<workspace_id>/conclusions/query")
def query_conclusions(workspace_id: WorkspaceId, body: ConclusionQuery):
    from precis.llm.embeddings import configured_embedder
    from precis.store import conclusions

    found = conclusions.query(
        get_db(), workspace_id, body.query, body.top_k, body.distance, body.filters, embedder=configured_embedder()
    )
    return fit_items(found, "top_k")


@router.get("/v3/workspaces/<workspace_id>/conclusions/<conclusion_id>")
def get_conclusion(workspace_id: WorkspaceId, conclusion_id: ConclusionId):
    from precis.store import conclusions

    return conclusions.get(get_db(), workspace_id, conclusion_id)


@router.get("/v3/workspaces/<workspace_id>/peers/<peer_id>/card")
def get_peer_card(workspace_id: WorkspaceId, peer_id: PeerId, target: OptionalId = None):
    from precis.store import conclusions

    db = get_db()
    resources.require_peers(db, workspace_id, peer_id)  # a card may be set for a target not created yet
    return {"peer_card": conclusions.get_card(db, workspace_id, peer_id, target or peer_id)}


@router.get("/v3/workspaces/<workspace_id>/queue/status")
def queue_status(
    workspace_id: WorkspaceId,
    observer_id: OptionalId = None,
    sender_id: OptionalId = None,
    session_id: OptionalId = None,
):
    from precis.memory import queue

    return queue.queue_status(
        get_db(), workspace_id, observer_id=observer_id, sender_id=sender_id, session_id=session_id
    )


@router.get("/v3/workspaces/<workspace_id>/usage")
def get_usage(workspace_id: WorkspaceId, from_: FromDay = None, to: ToDay = None):
    """(ext) The workspace's model usage: tokens by day, role and model from `from` to `to` (UTC days, at most 92;
    default: this month so far), with its monthly token budget and this month's spend (docs/design.md, "Usage")."""
    from precis.memory import token_budget

    return token_budget.report(get_db(), workspace_id, from_, to)


def _representation(workspace_id: str, request: "representation.Request", tokens: int | None):
    """(text, card) of a peer's view of another, within `tokens` when given (else whole)."""
    from precis.context.fit import fit
    from precis.store import representation
    from precis.tokens import count_text

    db = get_db()
    observer = None if request.observer.startswith("scope.") else request.observer  # a scope's view: no peer
    resources.require_peers(db, workspace_id, observer, request.observed)
    read = representation.start(db, workspace_id, request, _embed)()
    fitted = fit(read.conclusions, read.card, tokens if tokens is not None else 10**9, count_text)
    return fitted.text, fitted.card


@router.get("/v3/workspaces/<workspace_id>/peers/<peer_id>/context")
def get_peer_context(
    workspace_id: WorkspaceId,
    peer_id: PeerId,
    target: OptionalId = None,
    search_query: str | None = None,
    search_top_k: TopK = None,
    search_max_distance: Distance = None,
    include_most_frequent: bool = True,
    max_conclusions: MaxConclusions = None,
    tokens: Tokens = None,
):
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
    text, card = _representation(workspace_id, request, tokens)
    answer = {"peer_id": peer_id, "target_id": target or peer_id, "representation": text, "peer_card": card}
    return fit_answer(answer, "max_conclusions", request.max_conclusions)


@router.post("/v3/workspaces/<workspace_id>/peers/<peer_id>/representation")
def get_peer_representation(workspace_id: WorkspaceId, peer_id: PeerId, body: RepresentationQuery):
    return peer_representation(workspace_id, peer_id, body, caller())


def peer_representation(
    workspace_id: str, peer_id: str, body: RepresentationQuery, principal: Principal | None
) -> dict[str, str]:
    """The representation route's answer, reading what `principal`'s key reads (None: no key checked)."""
    chosen = body.filters.session_id if body.filters else None
    if body.scope is not None and (body.session_id is not None or chosen is not None):
        raise Invalid("scope: cannot be combined with session_id or filters.session_id")
    allowlist = session_allowlist(body.session_id, chosen)
    reach = Reach.of(principal)
    named = named_sessions([{"session_id": body.session_id}, {"session_id": chosen}])
    reach.require(resources.PeerSessions(get_db(), workspace_id, reach.peer), scope=body.scope, sessions=named)
    observer = peer_id
    if body.scope is not None:
        from precis.store import scopes

        scopes.require(get_db(), workspace_id, body.scope)
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
    text, _card = _representation(workspace_id, request, None)
    return fit_answer({"representation": text}, "max_conclusions", request.max_conclusions)


# ---------------------------------------------------------------- scopes (docs/design.md, "Derived memory", Scopes)


@router.get("/v3/workspaces/<workspace_id>/scopes/<scope_id>")
def get_scope(workspace_id: WorkspaceId, scope_id: ScopeIdPath):
    from precis.store import scopes

    return scopes.view(scopes.require(get_db(), workspace_id, scope_id))


@router.post("/v3/workspaces/<workspace_id>/scopes/list")
def list_scopes(
    workspace_id: WorkspaceId,
    body: ListBody | None = None,
    page: PageNo = 1,
    size: PageSize = 50,
    reverse: Reverse = False,
):
    from precis.store import scopes

    if _filters(body):
        raise Invalid("filters: scopes are listed without filters")
    return scopes.list_scopes(get_db(), workspace_id, page, size, reverse)


@router.post("/v3/workspaces/<workspace_id>/scopes/<scope_id>/sessions/list")
def list_scope_sessions(
    workspace_id: WorkspaceId,
    scope_id: ScopeIdPath,
    body: ListBody | None = None,
    page: PageNo = 1,
    size: PageSize = 50,
    reverse: Reverse = False,
):
    from precis.store import scopes

    if _filters(body):
        raise Invalid("filters: a scope's sessions are listed without filters")
    return scopes.list_sessions(get_db(), workspace_id, scope_id, page, size, reverse)


@router.get("/v3/workspaces/<workspace_id>/scopes/<scope_id>/status")
def scope_status(workspace_id: WorkspaceId, scope_id: ScopeIdPath):
    from precis.store import scopes

    return scopes.status(get_db(), workspace_id, scope_id)


# ---------------------------------------------------------------- message search (docs/design.md, "Derived memory")


SEARCH_BUDGET_HEADER = "X-Precis-Search-Budget"  # (ext) on a search answer whose read budget ran out first


def search_messages(workspace_id: str, body: SearchQuery, principal: Principal | None, **within: str) -> list:
    """The messages a search finds, fitted: the workspace's, a session's (`session_id`) or a peer's (`peer_id`), of
    the sessions `principal`'s key reads (None: no key checked)."""
    return fit_items(find_messages(workspace_id, body, principal, **within)[0], "limit")


def _search_answer(workspace_id: str, body: SearchQuery, principal: Principal | None, **within: str):
    """A search route's answer; (ext) when the read budget ran out first, a header says so: the answer is the best
    the search found in what it read (the list is Honcho's shape, with no room for a field)."""
    found, budget = find_messages(workspace_id, body, principal, **within)
    if not budget.exhausted:
        return fit_items(found, "limit")
    answer = json_response(200, fit_items(found, "limit"))
    answer.headers[SEARCH_BUDGET_HEADER] = f"exhausted; requests={budget.used_requests}; bytes={budget.used_bytes}"
    return answer


def find_messages(workspace_id: str, body: SearchQuery, principal: Principal | None, **within: str):
    """(the messages, the budget their ranking read under) for a search."""
    from precis.settings import get_settings
    from precis.store.search import search

    settings = get_settings()
    db = get_db()
    reach = Reach.of(principal)
    membership = resources.PeerSessions(db, workspace_id, reach.peer)
    reach.require(membership, sessions=named_sessions(body.filters) - {within.get("session_id")})
    filters = body.filters
    if "session_id" not in within:
        bound = reach.bound(membership, None)
        if bound is not None:  # what the key does not read is never ranked in front of what it does
            if not bound:
                return [], Budget()
            filters = {"AND": [filters or {}, {"session_id": {"in": list(bound)}}]}
    base = None
    if "peer_id" in within:
        resources.require_peers(db, workspace_id, within["peer_id"])
    elif "session_id" in within:
        base = messages.base_of(resources.require_session(db, workspace_id, within["session_id"]))
    else:
        resources.require_workspace(db, workspace_id)
    semantic = _embed if settings.embedder != "hashed" else None
    budget = Budget()
    found = search(
        db, workspace_id, body.query, body.limit, filters, semantic=semantic, base=base, budget=budget, **within
    )
    return found, budget


@router.post("/v3/workspaces/<workspace_id>/search")
def search_workspace(workspace_id: WorkspaceId, body: SearchQuery):
    return _search_answer(workspace_id, body, caller())


@router.post("/v3/workspaces/<workspace_id>/sessions/<session_id>/search")
def search_session(workspace_id: WorkspaceId, session_id: SessionId, body: SearchQuery):
    return _search_answer(workspace_id, body, caller(), session_id=session_id)


@router.post("/v3/workspaces/<workspace_id>/peers/<peer_id>/search")
def search_peer(workspace_id: WorkspaceId, peer_id: PeerId, body: SearchQuery):
    return _search_answer(workspace_id, body, caller(), peer_id=peer_id)
