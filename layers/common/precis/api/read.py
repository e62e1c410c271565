"""Read routes of the v3 API (served by the context function): context, summaries, lists, message reads.

A route parses, and shapes the answer for one Lambda answer; the requests themselves are the capabilities' (the
context's `precis.context.session` and `.peer`, search's `precis.messages.search`, conclusions'
`precis.memory.conclusions`), which the MCP edge calls too. A route imports what only it runs (scopes, conclusions,
the queue, the representation) when first asked, so a cold context read without `peer_target` loads none of it."""

from aws_lambda_powertools.event_handler.api_gateway import Router

from precis.api.answers import json_response
from precis.api.caller import caller
from precis.api.params import (
    MAX_CONTEXT_TOKENS,
    ConclusionId,
    Distance,
    EndpointId,
    FromDay,
    JobId,
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
from precis.context import compose
from precis.context.session import ContextRequest, session_context
from precis.errors import Invalid
from precis.messages.search import find_messages
from precis.schemas import ConclusionQuery, ListBody, RepresentationQuery, SearchQuery
from precis.sizes import fit_answer, fit_items
from precis.store import messages, resources
from precis.store.db import get_db

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
    asked = ContextRequest(
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
    )
    answer = session_context(get_db(), workspace_id, session_id, asked, caller())
    # A token of whitespace may be 128 bytes: a context that cannot fit names the tokens that would, in proportion.
    held = int(answer.get("token_count") or 0)  # (ext) what it holds, which may be less than it was allowed
    return fit_answer(answer, "tokens", min(tokens or MAX_CONTEXT_TOKENS, max(held, 1)))


@router.get("/v3/workspaces/<workspace_id>/sessions/<session_id>/summaries")
def get_summaries(workspace_id: WorkspaceId, session_id: SessionId):
    return compose.read_summaries(get_db(), workspace_id, session_id)


# ---------------------------------------------------------------- derived memory (docs/design.md, "Derived memory")


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
    from precis.memory import conclusions

    found = conclusions.query(get_db(), workspace_id, body.query, body.top_k, body.distance, body.filters)
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


@router.get("/v3/workspaces/<workspace_id>/webhooks")
def list_webhooks(workspace_id: WorkspaceId, page: PageNo = 1, size: PageSize = 50):
    from precis.webhooks import endpoints  # (loaded by this route alone, off the context's path)

    return endpoints.listed(get_db(), workspace_id, page, size)


@router.get("/v3/workspaces/<workspace_id>/webhooks/<endpoint_id>/deliveries")
def list_webhook_deliveries(workspace_id: WorkspaceId, endpoint_id: EndpointId, page: PageNo = 1, size: PageSize = 50):
    """(ext) The endpoint's delivery log, newest first: each delivery's status, attempts, the receiver's last HTTP
    status and an excerpt of the last error (the newest 500 deliveries of the last 3 days)."""
    from precis.webhooks import endpoints

    return endpoints.deliveries(get_db(), workspace_id, endpoint_id, page, size)


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


@router.get("/v3/workspaces/<workspace_id>/exports/<export_id>")
def get_export(workspace_id: WorkspaceId, export_id: JobId):
    """(ext) An export's progress (lines per kind so far) and, once done, a presigned URL per part, in order."""
    from precis.transfer import jobs

    return jobs.status(get_db(), workspace_id, export_id, jobs.EXPORT)


@router.get("/v3/workspaces/<workspace_id>/peers/<peer_id>/erasure")
def get_peer_erasure(workspace_id: WorkspaceId, peer_id: PeerId):
    """(ext) A peer's erasure: its progress (counts per kind so far), or its receipt once done."""
    from precis.transfer import erase

    return erase.status(get_db(), workspace_id, peer_id)


@router.get("/v3/workspaces/<workspace_id>/imports/<import_id>")
def get_import(workspace_id: WorkspaceId, import_id: JobId):
    """(ext) An import's progress (lines per kind so far), and its error when it failed."""
    from precis.transfer import jobs

    return jobs.status(get_db(), workspace_id, import_id, jobs.IMPORT)


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
    from precis.context.peer import peer_context

    read = peer_context(
        get_db(),
        workspace_id,
        peer_id,
        target=target,
        search_query=search_query,
        search_top_k=search_top_k,
        search_max_distance=search_max_distance,
        include_most_frequent=include_most_frequent,
        max_conclusions=max_conclusions,
        tokens=tokens,
    )
    answer = {
        "peer_id": peer_id,
        "target_id": target or peer_id,
        "representation": read.representation,
        "peer_card": read.card,
    }
    return fit_answer(answer, "max_conclusions", read.max_conclusions)


@router.post("/v3/workspaces/<workspace_id>/peers/<peer_id>/representation")
def get_peer_representation(workspace_id: WorkspaceId, peer_id: PeerId, body: RepresentationQuery):
    from precis.context.peer import peer_representation

    read = peer_representation(get_db(), workspace_id, peer_id, body, caller())
    return fit_answer({"representation": read.representation}, "max_conclusions", read.max_conclusions)


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


def _search_answer(workspace_id: str, body: SearchQuery, **within: str):
    """A search route's answer; (ext) when the read budget ran out first, a header says so: the answer is the best
    the search found in what it read (the list is Honcho's shape, with no room for a field)."""
    found = find_messages(get_db(), workspace_id, body, caller(), **within)
    if not found.budget.exhausted:
        return fit_items(found.messages, "limit")
    answer = json_response(200, fit_items(found.messages, "limit"))
    budget = found.budget
    answer.headers[SEARCH_BUDGET_HEADER] = f"exhausted; requests={budget.used_requests}; bytes={budget.used_bytes}"
    return answer


@router.post("/v3/workspaces/<workspace_id>/search")
def search_workspace(workspace_id: WorkspaceId, body: SearchQuery):
    return _search_answer(workspace_id, body)


@router.post("/v3/workspaces/<workspace_id>/sessions/<session_id>/search")
def search_session(workspace_id: WorkspaceId, session_id: SessionId, body: SearchQuery):
    return _search_answer(workspace_id, body, session_id=session_id)


@router.post("/v3/workspaces/<workspace_id>/peers/<peer_id>/search")
def search_peer(workspace_id: WorkspaceId, peer_id: PeerId, body: SearchQuery):
    return _search_answer(workspace_id, body, peer_id=peer_id)
