"""Workspace tools (Honcho's names and arguments): list, create, inspect, search, metadata."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, StringConstraints

from precis.auth import Access
from precis.mcp.catalogue import CATALOGUE, Arguments, Call
from precis.schemas import Id, Metadata

WORKSPACE = (
    "Workspace to work in. Leave it out when the connection sets X-Honcho-Workspace-ID (the usual setup); "
    "pass it only for another workspace."
)
Query = Annotated[str, StringConstraints(min_length=1, max_length=10_000)]


class InWorkspace(Arguments):
    workspace_id: Id | None = Field(None, description=WORKSPACE)


class Paged(InWorkspace):
    page: int = Field(1, ge=1, le=10**9, description="Page number, from 1.")
    size: int = Field(50, ge=1, le=100, description="Items per page, 1-100.")


class ListWorkspaces(Arguments):
    page: int = Field(1, ge=1, le=10**9, description="Page number, from 1.")
    size: int = Field(50, ge=1, le=100, description="Items per page, 1-100.")


class CreateWorkspace(InWorkspace):
    metadata: Metadata | None = Field(None, description="Key-value metadata for a new workspace (project, purpose).")


class Search(InWorkspace):
    query: Query = Field(description="What to look for.")
    peer_id: Id | None = Field(None, description="Search the messages this peer wrote (and its own conclusions).")
    session_id: Id | None = Field(None, description="Search this session's messages.")
    message_limit: int = Field(10, ge=1, le=100, description="Most messages returned, 1-100.")
    message_filters: dict[str, Any] | None = Field(
        None, description='Message filters, e.g. {"created_at": {"gte": "2026-01-01"}} or {"metadata": {"topic": "x"}}.'
    )
    conclusion_top_k: int = Field(10, ge=0, le=100, description="Most conclusions returned with peer_id (0: none).")
    conclusion_filters: dict[str, Any] | None = Field(
        None, description='Conclusion filters, e.g. {"level": ["deductive"]} or {"session_id": "s1"}.'
    )


class Scoped(InWorkspace):
    peer_id: Id | None = Field(None, description="The peer's metadata instead of the workspace's.")
    session_id: Id | None = Field(None, description="The session's metadata instead of the workspace's.")


class SetMetadata(Scoped):
    metadata: Metadata = Field(description="The metadata, replacing what is there.")


def page_of(answer: dict[str, Any], name: str, item=lambda i: {"id": i["id"]}) -> dict[str, Any]:
    """A page of the API as Honcho's MCP tools answer it: the items under `name`, then the page's counts."""
    return {
        name: [item(i) for i in answer["items"]],
        "total": answer["total"],
        "page": answer["page"],
        "pages": answer["pages"],
    }


def message(view: dict[str, Any]) -> dict[str, Any]:
    return {k: view.get(k) for k in ("id", "content", "peer_id", "session_id", "metadata", "created_at", "token_count")}


def query_collection(
    call: Call, ws: str, observer: str, observed: str, query: str, top_k: int, filters: dict[str, Any] | None
) -> list[dict[str, Any]]:
    """The (observer, observed) collection's conclusions nearest `query`, as `POST …/conclusions/query` ranks them."""
    from precis.memory import conclusions

    scope = {**(filters or {}), "observer_id": observer, "observed_id": observed}
    return conclusions.query(call.db, ws, query, top_k, None, scope)


@CATALOGUE.tool("list_workspaces", "List workspaces", ListWorkspaces, read_only=True)
def list_workspaces(call: Call, args: ListWorkspaces):
    """List the workspaces (an admin key's): each one's id, metadata and created_at, a page at a time. Not needed when
    the connection sets X-Honcho-Workspace-ID: that header names the workspace."""
    from precis.store import resources

    call.authorize(Access.ADMIN, None)
    answer = resources.list_workspaces(call.db, None, args.page, args.size, False)
    return page_of(answer, "workspaces", lambda w: {k: w[k] for k in ("id", "metadata", "created_at")})


@CATALOGUE.tool("create_workspace", "Get or create a workspace", CreateWorkspace, idempotent=True)
def create_workspace(call: Call, args: CreateWorkspace):
    """Get the workspace of this id, creating it (with the metadata given) when there is none. Returns its id,
    metadata, created_at and whether it was created."""
    from precis.store import resources

    ws = call.workspace(args.workspace_id)
    call.authorize(Access.CREATE_WORKSPACE, ws, body={"id": ws})
    view, created = resources.get_or_create_workspace(call.db, ws, args.metadata)
    return {"id": view["id"], "metadata": view["metadata"], "created_at": view["created_at"], "created": created}


@CATALOGUE.tool("inspect_workspace", "Inspect a workspace", InWorkspace, read_only=True)
def inspect_workspace(call: Call, args: InWorkspace):
    """A workspace at a glance: its metadata and configuration, how many peers and sessions it has, and the first
    50 ids of each."""
    from precis.store import resources

    ws = call.workspace(args.workspace_id)
    call.authorize(Access.WORKSPACE, ws)
    view = resources.workspace_view(resources.require_workspace(call.db, ws))
    peers = resources.list_peers(call.db, ws, None, 1, 50, False)
    sessions = resources.list_sessions(call.db, ws, None, 1, 50, False)
    return {
        "workspace_id": ws,
        "metadata": view["metadata"],
        "configuration": view["configuration"],
        "peer_count": peers["total"],
        "peers": [{"id": p["id"]} for p in peers["items"]],
        "session_count": sessions["total"],
        "sessions": [{"id": s["id"]} for s in sessions["items"]],
    }


@CATALOGUE.tool("search", "Search messages and conclusions", Search, read_only=True)
def search(call: Call, args: Search):
    """Search messages by relevance (exact BM25 over their words, fused with meaning when the deployment embeds):
    the workspace's, or with session_id one session's, or with peer_id what that peer wrote. With peer_id, the
    peer's own conclusions too (conclusion_top_k of them). Returns {messages, conclusions}."""
    from precis.messages.search import find_messages
    from precis.schemas import SearchQuery
    from precis.sizes import fit_items

    ws = call.workspace(args.workspace_id)
    if args.session_id:
        call.authorize(Access.SESSION_READ, ws, session=args.session_id)
    elif args.peer_id:
        call.authorize(Access.PEER, ws, peer=args.peer_id)
    else:
        call.authorize(Access.WORKSPACE, ws)
    conclusions_of = args.peer_id if args.peer_id and args.conclusion_top_k else None
    if conclusions_of:  # the conclusion query is a workspace route (POST …/conclusions/query)
        call.authorize(Access.WORKSPACE, ws)
    body = SearchQuery(query=args.query, filters=args.message_filters, limit=args.message_limit)
    within = {"session_id": args.session_id} if args.session_id else {"peer_id": args.peer_id} if args.peer_id else {}
    found = fit_items(find_messages(call.db, ws, body, call.principal, **within).messages, "limit")
    conclusions = []
    if conclusions_of:
        conclusions = [
            {k: c[k] for k in ("id", "content", "level", "created_at")}
            for c in query_collection(
                call, ws, conclusions_of, conclusions_of, args.query, args.conclusion_top_k, args.conclusion_filters
            )
        ]
    return {"messages": [message(m) for m in found], "conclusions": conclusions}


@CATALOGUE.tool("get_metadata", "Read metadata", Scoped, read_only=True)
def get_metadata(call: Call, args: Scoped):
    """The metadata of the workspace, or with peer_id of that peer, or with session_id of that session."""
    from precis.store import resources

    ws = call.workspace(args.workspace_id)
    if args.session_id:
        call.authorize(Access.SESSION_READ, ws, session=args.session_id)
        return resources.session_view(resources.require_session(call.db, ws, args.session_id))["metadata"]
    if args.peer_id:
        call.authorize(Access.PEER, ws, peer=args.peer_id)
        resources.require_peers(call.db, ws, args.peer_id)  # an existing peer: the get below creates nothing
        return resources.get_or_create_peer(call.db, ws, args.peer_id)[0]["metadata"]
    call.authorize(Access.WORKSPACE, ws)
    return resources.workspace_view(resources.require_workspace(call.db, ws))["metadata"]


@CATALOGUE.tool("set_metadata", "Replace metadata", SetMetadata, idempotent=True)
def set_metadata(call: Call, args: SetMetadata):
    """Replace the metadata of the workspace, or with peer_id of that peer, or with session_id of that session."""
    from precis.store import resources

    ws = call.workspace(args.workspace_id)
    if args.session_id:
        call.authorize(Access.SESSION_WRITE, ws, session=args.session_id)
        resources.update_session(call.db, ws, args.session_id, args.metadata)
        return f"metadata of session '{args.session_id}' set"
    if args.peer_id:
        call.authorize(Access.PEER, ws, peer=args.peer_id)
        resources.update_peer(call.db, ws, args.peer_id, args.metadata)
        return f"metadata of peer '{args.peer_id}' set"
    call.authorize(Access.WORKSPACE, ws)
    resources.update_workspace(call.db, ws, args.metadata)
    return f"metadata of workspace '{ws}' set"
