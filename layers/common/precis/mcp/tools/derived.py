"""Derived memory and the system (Honcho's names and arguments): conclusions, dreams, the queue's status.

Conclusions are a workspace's routes (`POST …/conclusions…`): every tool here needs the workspace's key (or an
admin's), as the routes do.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, StringConstraints

from precis.auth import Access
from precis.mcp.catalogue import CATALOGUE, Call
from precis.mcp.tools.workspaces import InWorkspace, Query, query_collection
from precis.schemas import MAX_BATCH, Id

OBSERVER = "The peer whose conclusions they are (the observer)."


class Collection(InWorkspace):
    peer_id: Id = Field(description=OBSERVER)
    target_peer_id: Id | None = Field(None, description="The peer they are about, when not peer_id itself.")


class ListConclusions(Collection):
    page: int = Field(1, ge=1, le=10**9, description="Page number, from 1.")
    size: int = Field(50, ge=1, le=100, description="Items per page, 1-100.")


class QueryConclusions(Collection):
    query: Query = Field(description="What to look for.")
    top_k: int = Field(10, ge=1, le=100, description="Most conclusions returned, 1-100.")
    filters: dict[str, Any] | None = Field(
        None, description='Filters, e.g. {"level": ["deductive", "inductive"]} (dreamt) or {"session_id": "s1"}.'
    )


class CreateConclusions(InWorkspace):
    peer_id: Id = Field(description=OBSERVER)
    target_peer_id: Id = Field(description="The peer they are about (peer_id itself for its own).")
    conclusions: list[Annotated[str, StringConstraints(min_length=1, max_length=65_535)]] = Field(
        min_length=1, max_length=MAX_BATCH, description="The facts, one a string."
    )
    session_id: Id | None = Field(None, description="The session they come from, if one.")


class DeleteConclusion(InWorkspace):
    peer_id: Id = Field(description=OBSERVER)
    target_peer_id: Id = Field(description="The peer it is about.")
    conclusion_id: str = Field(pattern=r"^[A-Za-z0-9_-]{21}$", description="The conclusion's id (21 characters).")


class Dream(Collection):
    session_id: Id | None = Field(None, description="Start from this session's conclusions.")


class QueueStatus(InWorkspace):
    observer_id: Id | None = Field(None, description="Only the work of this observer.")
    sender_id: Id | None = Field(None, description="Only the work on this sender's messages.")
    session_id: Id | None = Field(None, description="Only this session's work.")


def _summary(conclusion: dict[str, Any]) -> dict[str, Any]:
    return {
        k: conclusion.get(k)
        for k in ("id", "content", "level", "observer_id", "observed_id", "session_id", "created_at")
    }


@CATALOGUE.tool("list_conclusions", "List conclusions", ListConclusions, read_only=True)
def list_conclusions(call: Call, args: ListConclusions):
    """The conclusions (facts derived from conversations, or stated) a peer holds about itself, or with
    target_peer_id about that peer, newest first, a page at a time."""
    from precis.store import conclusions

    ws = call.workspace(args.workspace_id)
    call.authorize(Access.WORKSPACE, ws)
    scope = {"observer_id": args.peer_id, "observed_id": args.target_peer_id or args.peer_id}
    answer = conclusions.list_conclusions(call.db, ws, scope, args.page, args.size, False)
    return {
        "conclusions": [_summary(c) for c in answer["items"]],
        "total": answer["total"],
        "page": answer["page"],
        "pages": answer["pages"],
    }


@CATALOGUE.tool("query_conclusions", "Search conclusions", QueryConclusions, read_only=True)
def query_conclusions(call: Call, args: QueryConclusions):
    """A peer's conclusions most relevant to a query (about itself, or with target_peer_id about that peer), best
    first."""
    ws = call.workspace(args.workspace_id)
    call.authorize(Access.WORKSPACE, ws)
    found = query_collection(
        call, ws, args.peer_id, args.target_peer_id or args.peer_id, args.query, args.top_k, args.filters
    )
    return [_summary(c) for c in found]


@CATALOGUE.tool("create_conclusions", "State conclusions", CreateConclusions)
def create_conclusions(call: Call, args: CreateConclusions):
    """Store facts about a peer directly (not derived from a conversation); a near duplicate of one already held is
    merged into it. Returns the conclusions' ids."""
    from precis.memory import conclusions

    ws = call.workspace(args.workspace_id)
    call.authorize(Access.WORKSPACE, ws)
    payload = [
        {
            "content": content,
            "observer_id": args.peer_id,
            "observed_id": args.target_peer_id,
            "session_id": args.session_id,
        }
        for content in args.conclusions
    ]
    made = conclusions.state(call.db, ws, payload)
    return {"created": len(made), "ids": [c["id"] for c in made]}


@CATALOGUE.tool("delete_conclusion", "Delete a conclusion", DeleteConclusion, destructive=True, idempotent=True)
def delete_conclusion(call: Call, args: DeleteConclusion):
    """Delete a conclusion that is wrong or outdated (find its id with query_conclusions or list_conclusions)."""
    from precis.errors import NotFound
    from precis.memory import conclusions as requests
    from precis.store import conclusions

    ws = call.workspace(args.workspace_id)
    call.authorize(Access.WORKSPACE, ws)
    held = conclusions.get(call.db, ws, args.conclusion_id)
    if (held["observer_id"], held["observed_id"]) != (args.peer_id, args.target_peer_id):
        raise NotFound(
            f"conclusion '{args.conclusion_id}' is not one of '{args.peer_id}' about '{args.target_peer_id}'"
        )
    requests.delete(call.db, ws, args.conclusion_id)  # (announced: conclusions.deleted)
    return f"conclusion '{args.conclusion_id}' deleted"


@CATALOGUE.tool("schedule_dream", "Schedule a dream", Dream, idempotent=True)
def schedule_dream(call: Call, args: Dream):
    """Ask for a dream: the background consolidation of a peer's conclusions (about itself, or with target_peer_id
    about that peer) into deductions, and of its card. Worth it after long conversations."""
    from datetime import UTC, datetime

    from precis.memory.dreams import DreamTarget, schedule
    from precis.store import resources

    ws = call.workspace(args.workspace_id)
    call.authorize(Access.WORKSPACE, ws)
    resources.require_peers(call.db, ws, args.peer_id, args.target_peer_id)
    if args.session_id is not None:
        resources.require_session(call.db, ws, args.session_id)
    schedule(
        call.db, DreamTarget(ws, args.peer_id, args.target_peer_id or args.peer_id), args.session_id, datetime.now(UTC)
    )
    return "dream scheduled"


@CATALOGUE.tool("get_queue_status", "Read the background work's status", QueueStatus, read_only=True)
def get_queue_status(call: Call, args: QueueStatus):
    """How much background work (derivation of conclusions, dreams) is done, running and waiting: whether the memory
    has caught up with the newest messages."""
    from precis.memory import queue

    ws = call.workspace(args.workspace_id)
    call.authorize(Access.WORKSPACE, ws)
    return queue.queue_status(
        call.db, ws, observer_id=args.observer_id, sender_id=args.sender_id, session_id=args.session_id
    )
