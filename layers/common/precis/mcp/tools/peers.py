"""Peer tools (Honcho's names and arguments): create, list, chat, cards, a peer's context and representation."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from precis.auth import Access
from precis.mcp.catalogue import CATALOGUE, Arguments, Call
from precis.mcp.tools.workspaces import InWorkspace, Paged, Query, page_of
from precis.schemas import Id

OBSERVER = "The peer whose view it is (the observer)."
TARGET = "The peer it is about, when not peer_id itself."


class PeerConfiguration(Arguments):
    model_config = ConfigDict(extra="forbid", defer_build=True, populate_by_name=True)
    observe_me: bool | None = Field(
        None, alias="observeMe", description="Whether conclusions are derived from this peer's messages (default true)."
    )


class CreatePeer(InWorkspace):
    peer_id: Id = Field(description="The peer's id, stable for one person or agent across sessions.")
    configuration: PeerConfiguration | None = Field(None, description="The peer's configuration, for a new peer.")


class OnePeer(InWorkspace):
    peer_id: Id = Field(description=OBSERVER)
    target_peer_id: Id | None = Field(None, description=TARGET)


class Chat(OnePeer):
    query: Query = Field(description="A question in natural language.")
    session_id: Id | None = Field(None, description="Answer from this session's messages and conclusions only.")
    reasoning_level: Literal["minimal", "low", "medium", "high", "max"] = Field(
        "low", description="More reads more memory and asks the model more rounds: slower, deeper."
    )


class SetCard(OnePeer):
    peer_card: list[str] = Field(description="The card's entries, short facts, replacing the card.")


class PeerContext(OnePeer):
    search_query: Query | None = Field(None, description="Put the conclusions nearest this first.")
    max_conclusions: int | None = Field(None, ge=1, le=100, description="Most conclusions, 1-100.")
    tokens: int | None = Field(
        None, ge=1, le=100_000, description="Fit the representation and card in this many tokens (Precis)."
    )


class Representation(OnePeer):
    session_id: Id | None = Field(None, description="Only what was concluded from this session.")
    search_query: Query | None = Field(None, description="Put the conclusions nearest this first.")
    max_conclusions: int = Field(25, ge=1, le=100, description="Most conclusions, 1-100.")


@CATALOGUE.tool("create_peer", "Get or create a peer", CreatePeer, idempotent=True)
def create_peer(call: Call, args: CreatePeer):
    """Get the peer of this id (a user or an agent), creating it when there is none. Returns its id, configuration
    and whether it was created."""
    from precis.store import resources

    ws = call.workspace(args.workspace_id)
    configuration = args.configuration.model_dump(exclude_none=True) if args.configuration else None
    call.authorize(Access.CREATE_PEER, ws, body={"id": args.peer_id})
    view, created = resources.get_or_create_peer(call.db, ws, args.peer_id, None, configuration)
    return {"peer_id": view["id"], "configuration": view["configuration"], "created": created}


@CATALOGUE.tool("list_peers", "List peers", Paged, read_only=True)
def list_peers(call: Call, args: Paged):
    """The workspace's peers (users and agents), a page at a time."""
    from precis.store import resources

    ws = call.workspace(args.workspace_id)
    call.authorize(Access.WORKSPACE, ws)
    return page_of(resources.list_peers(call.db, ws, None, args.page, args.size, False), "peers")


@CATALOGUE.tool("chat", "Ask the memory about a peer", Chat, read_only=True)
def chat(call: Call, args: Chat):
    """Ask a question about a peer (what it prefers, what it said, what happened) and get an answer reasoned from
    everything Precis holds of it: conclusions, its card, and the messages found for the question. Takes seconds
    (a model answers); the read tools are instant. Returns the answer, or 'None' when nothing is known."""
    from precis.chat.query import ChatQuery
    from precis.chat.service import answer_chat
    from precis.secrets import with_llm_key
    from precis.settings import get_settings

    ws = call.workspace(args.workspace_id)
    call.authorize(Access.PEER, ws, peer=args.peer_id)
    body = ChatQuery(
        query=args.query, session_id=args.session_id, target=args.target_peer_id, reasoning_level=args.reasoning_level
    )
    settings = with_llm_key(get_settings())
    answer = answer_chat(call.db, settings, ws, body, peer_id=args.peer_id, principal=call.principal)
    assert isinstance(answer.body, dict)  # a JSON answer: the query above does not ask for a stream
    return answer.body.get("content") or "None"


@CATALOGUE.tool("get_peer_card", "Read a peer card", OnePeer, read_only=True)
def get_peer_card(call: Call, args: OnePeer):
    """The peer's card: a short list of facts about itself, or with target_peer_id about that peer. Returns the list,
    or a sentence when there is no card yet."""
    from precis.store import conclusions, resources

    ws = call.workspace(args.workspace_id)
    call.authorize(Access.PEER, ws, peer=args.peer_id)
    resources.require_peers(call.db, ws, args.peer_id)  # the target need not exist yet, as in the route
    card = conclusions.get_card(call.db, ws, args.peer_id, args.target_peer_id or args.peer_id)
    return card if card is not None else "no peer card yet"


@CATALOGUE.tool("set_peer_card", "Set a peer card", SetCard, idempotent=True)
def set_peer_card(call: Call, args: SetCard):
    """Set (replace) the peer's card about itself, or with target_peer_id about that peer: to state or correct
    facts. Returns the card stored."""
    from precis.memory.cards import check_client_card
    from precis.store import conclusions, resources

    ws = call.workspace(args.workspace_id)
    call.authorize(Access.PEER, ws, peer=args.peer_id)
    entries = check_client_card(args.peer_card)
    resources.require_peers(call.db, ws, args.peer_id)  # the target need not exist yet, as in the route
    target = args.target_peer_id or args.peer_id
    conclusions.put_card(call.db, ws, args.peer_id, target, entries, source="client")
    return {"peer_card": entries}


@CATALOGUE.tool("get_peer_context", "Read a peer's context", PeerContext, read_only=True)
def get_peer_context(call: Call, args: PeerContext):
    """What Precis knows of a peer, in one read: its representation (conclusions, most relevant first) and its card.
    Returns {peer_id, target_id, representation, peer_card}."""
    from precis.context.peer import peer_context
    from precis.sizes import fit_answer

    ws = call.workspace(args.workspace_id)
    call.authorize(Access.PEER, ws, peer=args.peer_id)
    read = peer_context(
        call.db,
        ws,
        args.peer_id,
        target=args.target_peer_id,
        search_query=args.search_query,
        max_conclusions=args.max_conclusions,
        tokens=args.tokens,
    )
    answer = {
        "peer_id": args.peer_id,
        "target_id": args.target_peer_id or args.peer_id,
        "representation": read.representation,
        "peer_card": read.card,
    }
    return fit_answer(answer, "max_conclusions", read.max_conclusions)


@CATALOGUE.tool("get_representation", "Read a peer's representation", Representation, read_only=True)
def get_representation(call: Call, args: Representation):
    """A peer's representation: its conclusions as text, most relevant first (without the card)."""
    from precis.context.peer import peer_representation
    from precis.schemas import RepresentationQuery
    from precis.sizes import fit_answer

    ws = call.workspace(args.workspace_id)
    call.authorize(Access.PEER, ws, peer=args.peer_id)
    body = RepresentationQuery(
        session_id=args.session_id,
        target=args.target_peer_id,
        search_query=args.search_query,
        max_conclusions=args.max_conclusions,
    )
    read = peer_representation(call.db, ws, args.peer_id, body, call.principal)
    return fit_answer({"representation": read.representation}, "max_conclusions", read.max_conclusions)[
        "representation"
    ]
