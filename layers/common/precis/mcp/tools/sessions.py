"""Session tools (Honcho's names and arguments), then Precis's own: the context within a token budget, summaries."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from pydantic import Field

from precis.auth import Access
from precis.context.rules import MAX_CONTEXT_TOKENS
from precis.mcp.catalogue import CATALOGUE, Arguments, Call
from precis.mcp.tools.workspaces import InWorkspace, Paged, Query, message, page_of
from precis.schemas import MAX_BATCH, MESSAGE_ID_PATTERN, Id, Metadata

if TYPE_CHECKING:
    from precis.store.resources import SessionItem

SESSION = "The session (one conversation, thread or channel, reused for all of its turns)."


class OneSession(InWorkspace):
    session_id: Id = Field(description=SESSION)


class Clone(OneSession):
    message_id: str | None = Field(
        None, pattern=MESSAGE_ID_PATTERN, description="Clone up to and including this message; leave out for all."
    )


class Member(Arguments):
    peer_id: Id = Field(description="The peer.")
    observe_me: bool | None = Field(None, description="Whether this peer's messages here are derived into conclusions.")
    observe_others: bool | None = Field(None, description="Whether this peer forms conclusions about the others here.")


class AddPeers(OneSession):
    peers: list[Id | Member] = Field(
        min_length=1, max_length=MAX_BATCH, description="Peers to add: ids, or objects with per-session settings."
    )


class RemovePeers(OneSession):
    peer_ids: list[Id] = Field(min_length=1, max_length=MAX_BATCH, description="The peers to remove.")


class NewMessage(Arguments):
    peer_id: Id = Field(description="Who said it.")
    content: str = Field(description="What was said, exactly.")
    metadata: Metadata | None = Field(None, description="Key-value metadata of the message.")
    created_at: datetime | None = Field(None, description="When it was said (ISO 8601), when not now.")


class AddMessages(OneSession):
    messages: list[NewMessage] = Field(min_length=1, max_length=MAX_BATCH, description="The turns, oldest first.")


class Messages(OneSession, Paged):
    filters: dict[str, Any] | None = Field(
        None, description='Filters, e.g. {"peer_id": "alice"} or {"metadata": {"topic": "x"}}.'
    )
    reverse: bool = Field(False, description="Newest first.")


class OneMessage(OneSession):
    message_id: str = Field(pattern=MESSAGE_ID_PATTERN, description="The message's id.")


class SessionContext(OneSession):
    summary: bool = Field(True, description="Start with the summary of what came before the newest messages.")
    tokens: int | None = Field(None, ge=1, le=MAX_CONTEXT_TOKENS, description="Token budget of the whole context.")


class BudgetedContext(OneSession):
    tokens: int = Field(ge=1, le=MAX_CONTEXT_TOKENS, description="Token budget: the context never exceeds it.")
    summary: bool = Field(True, description="Start with the summary of what came before the newest messages.")
    whole_runs: bool | None = Field(
        None, description="Never cut a run (a turn's messages) in two; leave out for the session's setting."
    )
    peer_target: Id | None = Field(None, description="Add what is known of this peer (its representation and card).")
    peer_perspective: Id | None = Field(None, description="Whose view of peer_target (default: peer_target's own).")
    limit_to_session: bool = Field(False, description="Only what was concluded in this session.")
    search_query: Query | None = Field(None, description="Recall older messages and conclusions relevant to this.")
    max_conclusions: int | None = Field(None, ge=1, le=100, description="Most conclusions, 1-100.")


def _require(call: Call, ws: str, session_id: str) -> SessionItem:
    from precis.store import resources

    return resources.require_session(call.db, ws, session_id)


@CATALOGUE.tool("create_session", "Get or create a session", OneSession, idempotent=True)
def create_session(call: Call, args: OneSession):
    """Get the session of this id, creating it when there is none. Use one session per conversation and reuse it for
    every turn. Returns its id and whether it was created."""
    from precis.store import resources

    ws = call.workspace(args.workspace_id)
    call.authorize(Access.CREATE_SESSION, ws, body={"id": args.session_id})
    view, created = resources.get_or_create_session(call.db, ws, args.session_id)
    return {"session_id": view["id"], "created": created}


@CATALOGUE.tool("list_sessions", "List sessions", Paged, read_only=True)
def list_sessions(call: Call, args: Paged):
    """The workspace's sessions (conversations), a page at a time."""
    from precis.store import resources

    ws = call.workspace(args.workspace_id)
    call.authorize(Access.WORKSPACE, ws)
    return page_of(resources.list_sessions(call.db, ws, None, args.page, args.size, False), "sessions")


@CATALOGUE.tool("delete_session", "Delete a session", OneSession, destructive=True, idempotent=True)
def delete_session(call: Call, args: OneSession):
    """Delete a session and all its messages and summaries. Cannot be undone."""
    import time

    from precis.events import publish_configured, session_deleted
    from precis.store import purge

    ws = call.workspace(args.workspace_id)
    call.authorize(Access.SESSION_WRITE, ws, session=args.session_id)
    incarnation = purge.delete_session(call.db, ws, args.session_id)
    publish_configured(call.db, [session_deleted(ws, args.session_id, incarnation=incarnation, now=time.time())])
    return f"session '{args.session_id}' deleted; its data is removed in the background"


@CATALOGUE.tool("clone_session", "Clone a session", Clone)
def clone_session(call: Call, args: Clone):
    """Fork a session, whole or up to a message, to explore another branch. Returns the new session's id."""
    from precis.store.clones import clone_session as clone

    ws = call.workspace(args.workspace_id)
    call.authorize(Access.SESSION_WRITE, ws, session=args.session_id)
    return {"session_id": clone(call.db, ws, args.session_id, args.message_id)["id"]}


@CATALOGUE.tool("add_peers_to_session", "Add peers to a session", AddPeers, idempotent=True)
def add_peers_to_session(call: Call, args: AddPeers):
    """Make peers members of a session (creating peers that do not exist), with their per-session settings."""
    from precis.store import resources

    ws = call.workspace(args.workspace_id)
    call.authorize(Access.SESSION_WRITE, ws, session=args.session_id)
    flags: dict[str, dict[str, Any]] = {p: {} for p in args.peers if isinstance(p, str)}
    flags.update({p.peer_id: p.model_dump(exclude={"peer_id"}) for p in args.peers if isinstance(p, Member)})
    incarnation = _require(call, ws, args.session_id)["incarnation"]
    resources.add_members(call.db, ws, args.session_id, flags, incarnation=incarnation)
    return f"{len(flags)} peer(s) in session '{args.session_id}'"


@CATALOGUE.tool("remove_peers_from_session", "Remove peers from a session", RemovePeers, idempotent=True)
def remove_peers_from_session(call: Call, args: RemovePeers):
    """Remove peers from a session (their messages stay)."""
    from precis.store import resources

    ws = call.workspace(args.workspace_id)
    call.authorize(Access.SESSION_WRITE, ws, session=args.session_id)
    _require(call, ws, args.session_id)
    resources.remove_members(call.db, ws, args.session_id, args.peer_ids)
    return f"{len(set(args.peer_ids))} peer(s) removed from session '{args.session_id}'"


@CATALOGUE.tool("get_session_peers", "List a session's peers", OneSession, read_only=True)
def get_session_peers(call: Call, args: OneSession):
    """The ids of the peers in a session."""
    from precis.store import resources

    ws = call.workspace(args.workspace_id)
    call.authorize(Access.SESSION_READ, ws, session=args.session_id)
    return sorted(resources.members(call.db, ws, _require(call, ws, args.session_id)["id"]))


@CATALOGUE.tool("inspect_session", "Inspect a session", OneSession, read_only=True)
def inspect_session(call: Call, args: OneSession):
    """A session at a glance: its peers, how many messages it holds, and its summaries."""
    from precis.context.compose import read_summaries
    from precis.store import messages, resources

    ws = call.workspace(args.workspace_id)
    call.authorize(Access.SESSION_READ, ws, session=args.session_id)
    _require(call, ws, args.session_id)
    count = messages.list_messages(call.db, ws, args.session_id, None, 1, 1, False)["total"]
    summaries = read_summaries(call.db, ws, args.session_id)
    return {
        "session_id": args.session_id,
        "peers": [{"id": p} for p in sorted(resources.members(call.db, ws, args.session_id))],
        "message_count": count,
        "summaries": {k: summaries[k] for k in ("short_summary", "long_summary")},
    }


@CATALOGUE.tool("add_messages_to_session", "Record messages", AddMessages)
def add_messages_to_session(call: Call, args: AddMessages):
    """Record conversation turns in a session, each with the peer_id of who said it, oldest first: after every
    exchange, the user's message and your answer, exactly. The session and peers are created when new. Returns the
    stored messages' ids."""
    from precis.messages.ingest import create_messages
    from precis.schemas.bodies import MessageBatch
    from precis.settings import get_settings

    ws = call.workspace(args.workspace_id)
    call.authorize(Access.SESSION_WRITE, ws, session=args.session_id)
    batch = MessageBatch.model_validate({"messages": [m.model_dump(exclude_none=True) for m in args.messages]})
    _status, views = create_messages(call.db, get_settings(), ws, args.session_id, batch)
    return {
        "added": len(views),
        "messages": [{"id": v["id"], "peer_id": v["peer_id"], "token_count": v.get("token_count")} for v in views],
    }


@CATALOGUE.tool("get_session_messages", "Read a session's messages", Messages, read_only=True)
def get_session_messages(call: Call, args: Messages):
    """A session's messages, oldest first (reverse: newest first), a page at a time, optionally filtered."""
    from precis.store import messages

    ws = call.workspace(args.workspace_id)
    call.authorize(Access.SESSION_READ, ws, session=args.session_id)
    answer = messages.list_messages(call.db, ws, args.session_id, args.filters, args.page, args.size, args.reverse)
    return page_of(answer, "messages", message)


@CATALOGUE.tool("get_session_message", "Read one message", OneMessage, read_only=True)
def get_session_message(call: Call, args: OneMessage):
    """One message of a session, by id."""
    from precis.store import messages

    ws = call.workspace(args.workspace_id)
    call.authorize(Access.SESSION_READ, ws, session=args.session_id)
    return message(messages.get_message(call.db, ws, args.session_id, args.message_id))


@CATALOGUE.tool("get_session_context", "Read a session's context", SessionContext, read_only=True)
def get_session_context(call: Call, args: SessionContext):
    """A session's context for the next model call: the summary of older messages and the newest messages, within
    tokens when given. Returns {session_id, summary, messages, token_count}."""
    from precis.context.session import ContextRequest, session_context

    ws = call.workspace(args.workspace_id)
    call.authorize(Access.SESSION_READ, ws, session=args.session_id)
    asked = ContextRequest(tokens=args.tokens, summary=args.summary)
    answer = session_context(call.db, ws, args.session_id, asked, call.principal)
    return {
        "session_id": args.session_id,
        "summary": answer["summary"],
        "messages": [message(m) for m in answer["messages"]],
        "token_count": answer["token_count"],
    }


@CATALOGUE.tool(
    "get_budgeted_context", "Read a session's context within a token budget", BudgetedContext, read_only=True
)
def get_budgeted_context(call: Call, args: BudgetedContext):
    """Precis: a session's context guaranteed to fit `tokens` (counted as the model counts them): the newest summary,
    then the newest messages (whole runs if asked), and optionally what is known of peer_target and older messages
    recalled for search_query. Says how the budget was spent: token_count, card_token_count, messages_skipped (older
    messages that did not fit), recalled."""
    from precis.context.session import ContextRequest, session_context

    ws = call.workspace(args.workspace_id)
    call.authorize(
        Access.SESSION_READ,
        ws,
        session=args.session_id,
        view={"peer_target": args.peer_target, "peer_perspective": args.peer_perspective},
    )
    asked = ContextRequest(
        tokens=args.tokens,
        summary=args.summary,
        whole_runs=args.whole_runs,
        peer_target=args.peer_target,
        peer_perspective=args.peer_perspective,
        limit_to_session=args.limit_to_session,
        search_query=args.search_query,
        max_conclusions=args.max_conclusions,
    )
    answer = session_context(call.db, ws, args.session_id, asked, call.principal)
    return {**answer, "messages": [message(m) for m in answer["messages"]]}


@CATALOGUE.tool("get_session_summaries", "Read a session's summaries", OneSession, read_only=True)
def get_session_summaries(call: Call, args: OneSession):
    """Precis: a session's current summaries (short and long, or rolling), each with the last message it covers and
    its token count."""
    from precis.context.compose import read_summaries

    ws = call.workspace(args.workspace_id)
    call.authorize(Access.SESSION_READ, ws, session=args.session_id)
    return read_summaries(call.db, ws, args.session_id)
