"""Who reads what: every read route and read MCP tool × every kind of key × the session it names (a member's, a
non-member's, another workspace's, a deleted one), asserting on the data each answer holds (docs/design.md, "Keys").

Each session's messages (and the conclusions drawn from them) carry a word of their own; a key's answer may hold the
words of the sessions it may read and no other, anywhere in the answer, evidence included. Seeded once for the module
(keys on, the offline chat engine), then read only."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from local import moto_vectors
from precis.auth import Principal, mint_key, named_sessions
from precis.errors import Forbidden
from precis.mcp.catalogue import Call
from precis.mcp.tools import CATALOGUE
from precis.settings import get_settings
from tests.handlers import call

SECRET = "matrix-signing-secret-0123456789abcdef"
WS, OTHER_WS = "ws1", "ws2"
# The sessions and their words: s1 (alice, bob; carol spoke there, then left), s2 (carol, bob; alice spoke there, then
# left), s3 (alice alone), gone (alice, carol; deleted), t1 in ws2 (alice, bob). alice's own card holds CARD.
WORDS = {"s1": "quokka", "s2": "narwhal", "s3": "wombat", "gone": "axolotl", "t1": "pangolin"}
CARD = "mongoose"
QUERY = " ".join([*WORDS.values(), CARD])
DELETED = "gone"
WORKSPACE_OF = {"s1": WS, "s2": WS, "s3": WS, "gone": WS, "t1": OTHER_WS}


@dataclass(frozen=True)
class Key:
    principal: Principal
    peer: str | None  # the peer a peer route is asked for with this key: its own, else alice
    reads: frozenset[str]  # the live sessions it may read
    card: bool  # whether it may read alice's card (a session-bounded read has none)
    home: str = "s1"  # a session of ws1 it reads, when it reads one (where a read naming a second one is made)

    @property
    def token(self) -> str:
        p = self.principal
        return mint_key(SECRET, admin=p.admin, workspace=p.workspace, peer=p.peer, session=p.session)

    def workspaces(self) -> set[str]:
        p = self.principal
        return {WS, OTHER_WS} if p.admin else {p.workspace or ""}

    def whole(self, ws: str) -> bool:
        """Whether it reads everything in `ws` (an admin's or the workspace's key)."""
        p = self.principal
        return p.admin or (p.workspace == ws and p.peer is None and p.session is None)


KEYS = {
    "admin": Key(Principal(admin=True), None, frozenset(WORDS) - {DELETED}, True),
    "workspace": Key(Principal(workspace=WS), None, frozenset({"s1", "s2", "s3"}), True),
    "other_workspace": Key(Principal(workspace=OTHER_WS), None, frozenset({"t1"}), False),
    "session": Key(Principal(workspace=WS, session="s1"), None, frozenset({"s1"}), False),
    "other_session": Key(Principal(workspace=WS, session="s2"), None, frozenset({"s2"}), False, "s2"),
    "peer_member": Key(Principal(workspace=WS, peer="alice"), "alice", frozenset({"s1", "s3"}), True),
    "peer_outsider": Key(Principal(workspace=WS, peer="carol"), "carol", frozenset({"s2"}), False, "s2"),
}
TARGETS = {"member": "s1", "non_member": "s2", "other_workspace": "t1", "deleted": DELETED}


# ---------------------------------------------------------------- the world, seeded once


@pytest.fixture(scope="module")
def world():
    """ws1 and ws2 as WORDS describes them, keys on; yields each session's first message id."""
    import boto3
    from moto import mock_aws

    from local import iam, moto_patches
    from local.template import create_resources, template

    moto_patches.install()
    with pytest.MonkeyPatch.context() as env, mock_aws():
        clients = {name: iam.exempt(boto3.client(name)) for name in ("dynamodb", "s3", "sqs")}
        create_resources(template(), clients["dynamodb"], clients["s3"], clients["sqs"])
        env.setenv("PRECIS_AUTH", "true")
        env.setenv("PRECIS_JWT_SECRET", SECRET)
        get_settings.cache_clear()
        yield _seed()
        get_settings.cache_clear()


def _admin(method: str, path: str, body: Any = None) -> Any:
    reply = call(method, path, body, headers={"Authorization": f"Bearer {KEYS['admin'].token}"})
    assert reply.status < 300, (method, path, reply.status, reply.body)
    return reply.body


def _seed() -> dict[str, str]:
    first = {}
    speakers = {
        "s1": ("alice", "bob", "carol"),
        "s2": ("carol", "bob", "alice"),
        "s3": ("alice",),
        "gone": ("alice", "carol"),
        "t1": ("alice", "bob"),
    }
    for ws in (WS, OTHER_WS):
        _admin("POST", "/v3/workspaces", {"id": ws})
        for peer in ("alice", "bob", "carol"):
            _admin("POST", f"/v3/workspaces/{ws}/peers", {"id": peer})
    for session, peers in speakers.items():
        base = f"/v3/workspaces/{WORKSPACE_OF[session]}/sessions/{session}"
        word = WORDS[session]
        said = [
            {"peer_id": p, "content": f"{p} keeps a {word} at home, the {word} is called {p}'s {word}"} for p in peers
        ]
        first[session] = _admin("POST", f"{base}/messages", {"messages": said})[0]["id"]
        for peer in peers:  # conclusions drawn in a session from its members' own messages
            if (session, peer) in (("s1", "carol"), ("s2", "alice")):
                continue
            _admin(
                "POST",
                f"/v3/workspaces/{WORKSPACE_OF[session]}/conclusions",
                {
                    "conclusions": [
                        {
                            "content": f"{peer} keeps a {word}",
                            "observer_id": peer,
                            "observed_id": peer,
                            "session_id": session,
                        }
                    ]
                },
            )
    _admin("DELETE", f"/v3/workspaces/{WS}/sessions/s1/peers", ["carol"])
    _admin("DELETE", f"/v3/workspaces/{WS}/sessions/s2/peers", ["alice"])
    _admin("PUT", f"/v3/workspaces/{WS}/peers/alice/card", {"peer_card": [f"alice has a pet {CARD}"]})
    _admin("DELETE", f"/v3/workspaces/{WS}/sessions/{DELETED}")  # its purge is left to run later: not run here
    moto_vectors.settle()
    return first


# ---------------------------------------------------------------- reading as a key


@dataclass(frozen=True)
class Answer:
    status: int
    text: str  # the whole answer as JSON text: content, evidence, every field


def _rest(key: Key, method: str, path: str, body: Any) -> Answer:
    reply = call(method, path, body, headers={"Authorization": f"Bearer {key.token}"})
    text = reply.body if isinstance(reply.body, str) else json.dumps(reply.body, ensure_ascii=False)
    return Answer(reply.status, text)


def _mcp(key: Key, tool: str, arguments: dict[str, Any]) -> Answer:
    try:
        result = CATALOGUE.call(tool, arguments, Call(key.principal, None))
    except Forbidden as exc:
        return Answer(403, exc.detail)
    text = result["content"][0]["text"]
    if result["isError"]:
        return Answer(404 if "not found" in text else 422, text)
    return Answer(200, text)


@dataclass(frozen=True)
class Read:
    """One read: `ask(key, ws, session, first message ids)` → its answer. `named`: it names the session (in its path,
    its query or its body), else `session` is unused and only the workspace varies."""

    name: str
    ask: Callable[[Key, str, str, dict[str, str]], Answer]
    named: bool
    access: str  # "session" (a session's route), "peer" (a peer's own route), "workspace"
    shows: bool  # an answer to a key that reads the session holds its messages

    def __str__(self) -> str:
        return self.name


def rest(name: str, method: str, path: str, body: Any = None, *, access: str = "session", shows: bool = False) -> Read:
    """A route; `path` and string values of `body` may hold {w}, {s}, {p} (the key's peer, else alice), {m} (the
    session's first message), {q} (the query)."""

    def fill(value: Any, ws: str, session: str, peer: str, message: str, home: str) -> Any:
        if isinstance(value, str):
            return value.format(w=f"/v3/workspaces/{ws}", s=session, p=peer, m=message, q=QUERY, h=home)
        if isinstance(value, dict):
            return {k: fill(v, ws, session, peer, message, home) for k, v in value.items()}
        if isinstance(value, list):
            return [fill(v, ws, session, peer, message, home) for v in value]
        return value

    def ask(key: Key, ws: str, session: str, first: dict[str, str]) -> Answer:
        args = (ws, session, key.peer or "alice", first.get(session, "V1StGXR8_Z5jdHi6B-myT"), key.home)
        return _rest(key, method, fill(path, *args), fill(body, *args))

    return Read(name, ask, "{s}" in json.dumps([path, body]), access, shows)


def tool(name: str, arguments: dict[str, Any], *, access: str = "session", shows: bool = False) -> Read:
    def ask(key: Key, ws: str, session: str, first: dict[str, str]) -> Answer:
        filled = json.loads(
            json.dumps(arguments)
            .replace("{s}", session)
            .replace("{p}", key.peer or "alice")
            .replace("{m}", first.get(session, "V1StGXR8_Z5jdHi6B-myT"))
            .replace("{q}", QUERY)
            .replace("{h}", key.home)
        )
        return _mcp(key, name, {"workspace_id": ws, **filled})

    return Read(f"mcp {name} {json.dumps(arguments)}", ask, "{s}" in json.dumps(arguments), access, shows)


NAMED = [
    rest("GET peers", "GET", "{w}/sessions/{s}/peers"),
    rest("GET peer config", "GET", "{w}/sessions/{s}/peers/bob/config"),
    rest("POST messages/list", "POST", "{w}/sessions/{s}/messages/list", shows=True),
    rest("GET message", "GET", "{w}/sessions/{s}/messages/{m}", shows=True),
    rest("GET context", "GET", "{w}/sessions/{s}/context", shows=True),
    rest("GET context+recall", "GET", "{w}/sessions/{s}/context?search_query={q}", shows=True),
    rest(
        "GET context+peer",
        "GET",
        "{w}/sessions/{s}/context?peer_target={p}&peer_perspective={p}&search_query={q}",
        shows=True,
    ),
    rest("GET summaries", "GET", "{w}/sessions/{s}/summaries"),
    rest("POST session search", "POST", "{w}/sessions/{s}/search", {"query": "{q}"}, shows=True),
    rest(
        "POST peer chat session_id", "POST", "{w}/peers/{p}/chat", {"query": "{q}", "session_id": "{s}"}, access="peer"
    ),
    rest(
        "POST peer chat target+session_id",
        "POST",
        "{w}/peers/{p}/chat",
        {"query": "{q}", "session_id": "{s}", "target": "bob", "include_evidence": True},
        access="peer",
    ),
    rest(
        "POST peer chat filters",
        "POST",
        "{w}/peers/{p}/chat",
        {"query": "{q}", "filters": {"session_id": "{s}"}, "include_evidence": True},
        access="peer",
    ),
    rest(
        "POST representation session_id",
        "POST",
        "{w}/peers/{p}/representation",
        {"session_id": "{s}"},
        access="peer",
    ),
    rest(
        "POST representation filters",
        "POST",
        "{w}/peers/{p}/representation",
        {"filters": {"session_id": ["{s}"]}, "search_query": "{q}"},
        access="peer",
    ),
    rest(
        "POST peer search filters",
        "POST",
        "{w}/peers/{p}/search",
        {"query": "{q}", "filters": {"session_id": "{s}"}},
        access="peer",
    ),
    tool("get_session_peers", {"session_id": "{s}"}),
    tool("inspect_session", {"session_id": "{s}"}),
    tool("get_session_messages", {"session_id": "{s}"}, shows=True),
    tool("get_session_message", {"session_id": "{s}", "message_id": "{m}"}, shows=True),
    tool("get_session_context", {"session_id": "{s}"}, shows=True),
    tool(
        "get_budgeted_context",
        {"session_id": "{s}", "tokens": 4000, "peer_target": "{p}", "peer_perspective": "{p}", "search_query": "{q}"},
        shows=True,
    ),
    tool("get_session_summaries", {"session_id": "{s}"}),
    tool("get_metadata", {"session_id": "{s}"}),
    tool("search", {"query": "{q}", "session_id": "{s}"}, shows=True),
    tool(
        "search",
        {"query": "{q}", "peer_id": "{p}", "conclusion_top_k": 0, "message_filters": {"session_id": "{s}"}},
        access="peer",
    ),
    tool("chat", {"query": "{q}", "peer_id": "{p}", "session_id": "{s}"}, access="peer"),
    tool("chat", {"query": "{q}", "peer_id": "{p}", "target_peer_id": "bob", "session_id": "{s}"}, access="peer"),
    tool("get_representation", {"peer_id": "{p}", "session_id": "{s}"}, access="peer"),
]
# Reads that name a second session beside the one in their path (the path's is one the key reads: its own).
ALSO_NAMED = [
    rest(
        "GET context sessions=", "GET", "{w}/sessions/{h}/context?peer_target={p}&peer_perspective={p}&sessions={h},{s}"
    ),
    rest(
        "POST session search filters",
        "POST",
        "{w}/sessions/{h}/search",
        {"query": "{q}", "filters": {"session_id": "{s}"}},
    ),
    tool("search", {"query": "{q}", "session_id": "{h}", "message_filters": {"session_id": {"in": ["{s}"]}}}),
]
UNNAMED = [
    rest("POST peer chat", "POST", "{w}/peers/{p}/chat", {"query": "{q}", "include_evidence": True}, access="peer"),
    rest(
        "POST peer chat target",
        "POST",
        "{w}/peers/{p}/chat",
        {"query": "{q}", "target": "bob", "include_evidence": True},
        access="peer",
    ),
    rest("POST peer search", "POST", "{w}/peers/{p}/search", {"query": "{q}"}, access="peer"),
    rest("GET peer context", "GET", "{w}/peers/{p}/context?search_query={q}", access="peer"),
    rest("POST representation", "POST", "{w}/peers/{p}/representation", {"search_query": "{q}"}, access="peer"),
    rest("GET peer card", "GET", "{w}/peers/{p}/card", access="peer"),
    rest("POST workspace search", "POST", "{w}/search", {"query": "{q}"}, access="workspace"),
    rest("POST workspace chat", "POST", "{w}/chat", {"query": "{q}", "include_evidence": True}, access="workspace"),
    rest("POST conclusions/list", "POST", "{w}/conclusions/list", access="workspace"),
    rest(
        "POST conclusions/query",
        "POST",
        "{w}/conclusions/query",
        {"query": "{q}", "top_k": 50, "filters": {"observer_id": "alice", "observed_id": "alice"}},
        access="workspace",
    ),
    rest("POST sessions/list", "POST", "{w}/sessions/list", access="workspace"),
    tool("chat", {"query": "{q}", "peer_id": "{p}"}, access="peer"),
    tool("chat", {"query": "{q}", "peer_id": "{p}", "target_peer_id": "bob"}, access="peer"),
    tool("search", {"query": "{q}", "peer_id": "{p}", "conclusion_top_k": 0}, access="peer"),
    tool("search", {"query": "{q}"}, access="workspace"),
    tool("get_peer_context", {"peer_id": "{p}", "search_query": "{q}"}, access="peer"),
    tool("get_representation", {"peer_id": "{p}", "search_query": "{q}"}, access="peer"),
    tool("get_peer_card", {"peer_id": "{p}"}, access="peer"),
    tool("list_conclusions", {"peer_id": "{p}"}, access="workspace"),
    tool("query_conclusions", {"peer_id": "{p}", "query": "{q}", "top_k": 50}, access="workspace"),
    tool("inspect_workspace", {}, access="workspace"),
]


def _leaks(key: Key, ws: str, text: str, *, deleted: bool) -> list[str]:
    """The words in `text` of what `key` may not read (of the deleted session only, with `deleted`)."""
    if deleted:
        return [WORDS[DELETED]] if WORDS[DELETED] in text else []
    banned = [w for s, w in WORDS.items() if s not in key.reads and s != DELETED]
    if not key.card or ws != WS:
        banned.append(CARD)
    return [w for w in banned if w in text]


def _expected_named(read: Read, key: Key, session: str) -> set[int]:
    ws = WORKSPACE_OF[session]
    if read.access == "peer" and key.principal.session is not None:
        return {403}  # a peer's route: a session key reads none
    if session == DELETED:  # 404 where the session itself is read, an empty answer where it only narrows an allowlist
        return {200, 404} if key.whole(ws) else {403}
    return {200} if session in key.reads else {403}


def _named_cells() -> list[Any]:
    return [
        pytest.param(read, key_name, target, id=f"{read}-{key_name}-{target}")
        for read in NAMED
        for key_name in KEYS
        for target in TARGETS
    ]


@pytest.mark.parametrize(("read", "key_name", "target"), _named_cells())
def test_a_read_naming_a_session_answers_only_a_key_that_reads_it(world, read, key_name, target):
    key, session = KEYS[key_name], TARGETS[target]
    ws = WORKSPACE_OF[session]
    answer = read.ask(key, ws, session, world)
    assert answer.status in _expected_named(read, key, session), (answer.status, answer.text[:500])
    assert not _leaks(key, ws, answer.text, deleted=False), answer.text
    if session == DELETED:
        assert not _leaks(key, ws, answer.text, deleted=True), answer.text
    if answer.status == 200 and read.shows:
        assert WORDS[session] in answer.text, answer.text


@pytest.mark.parametrize("target", [t for t in TARGETS if WORKSPACE_OF[TARGETS[t]] == WS])
@pytest.mark.parametrize("key_name", KEYS)
@pytest.mark.parametrize("read", ALSO_NAMED, ids=str)
def test_a_second_session_named_in_a_read_is_one_the_key_reads(world, read, key_name, target):
    key, session = KEYS[key_name], TARGETS[target]
    answer = read.ask(key, WS, session, world)
    if WS not in key.workspaces():
        expected = {403}
    elif key.whole(WS):
        expected = {200, 404} if session == DELETED else {200}
    else:
        expected = {200} if session in key.reads else {403}
    assert answer.status in expected, (answer.status, answer.text[:500])
    assert not _leaks(key, WS, answer.text, deleted=False), answer.text


def _expected_unnamed(read: Read, key: Key, ws: str) -> int:
    if key.whole(ws):
        return 200
    if read.access == "peer" and key.principal.peer is not None and key.principal.workspace == ws:
        return 200
    return 403


@pytest.mark.parametrize("ws", [WS, OTHER_WS])
@pytest.mark.parametrize("key_name", KEYS)
@pytest.mark.parametrize("read", UNNAMED, ids=str)
def test_a_read_naming_no_session_holds_only_what_the_key_reads(world, read, key_name, ws):
    key = KEYS[key_name]
    answer = read.ask(key, ws, "", world)
    assert answer.status == _expected_unnamed(read, key, ws), (answer.status, answer.text[:500])
    assert not _leaks(key, ws, answer.text, deleted=False), answer.text


def _beyond_cells() -> list[Any]:
    """(read, key) where the read answers the key and may draw on sessions it does not name: every read naming none,
    and those naming one that also recall, represent, chat or search."""
    reaching = ("recall", "context+", "budgeted", "chat", "representation", "search")
    cells = []
    for read in UNNAMED + [r for r in NAMED if any(word in str(r) for word in reaching)]:
        for key_name, key in KEYS.items():
            answered = (
                _expected_unnamed(read, key, WS) == 200
                if not read.named
                else _expected_named(read, key, key.home) == {200} and WS in key.workspaces()
            )
            if answered:
                cells.append(pytest.param(read, key_name, id=f"{read}-{key_name}"))
    return cells


@pytest.mark.parametrize(("read", "key_name"), _beyond_cells())
def test_a_read_holds_nothing_of_a_deleted_session_it_does_not_name(world, read, key_name):
    """What a read reaches beyond the session it names (a search, a recall, a representation): never a deleted
    session's messages, whatever the key."""
    answer = read.ask(KEYS[key_name], WS, KEYS[key_name].home, world)
    assert answer.status == 200, answer
    assert not _leaks(KEYS[key_name], WS, answer.text, deleted=True), answer.text


# ---------------------------------------------------------------- the reproductions (issue 46, items 1 and 2)


def test_a_peer_key_cannot_read_a_session_it_is_not_in_through_chat(world):
    """Before: 200 with s1's messages in the answer and the evidence, while s1's context said 403."""
    carol = KEYS["peer_outsider"]
    assert _rest(carol, "GET", f"/v3/workspaces/{WS}/sessions/s1/context", None).status == 403
    for body in ({"session_id": "s1"}, {"session_id": "s1", "target": "alice"}, {"filters": {"session_id": "s1"}}):
        answer = _rest(
            carol, "POST", f"/v3/workspaces/{WS}/peers/carol/chat", {"query": QUERY, **body, "include_evidence": True}
        )
        assert answer.status == 403 and "'s1'" in answer.text, (body, answer)
    assert (
        _mcp(carol, "chat", {"workspace_id": WS, "query": QUERY, "peer_id": "carol", "session_id": "s1"}).status == 403
    )


def test_a_session_key_cannot_read_a_scopes_view(world):
    """Before: 200 to a session key, while GET /scopes/therapy refused it."""
    _admin("POST", f"/v3/workspaces/{WS}/scopes", {"id": "therapy"})
    _admin("POST", f"/v3/workspaces/{WS}/scopes/therapy/sessions", {"session_ids": ["s1"]})
    session = KEYS["session"]
    assert _rest(session, "GET", f"/v3/workspaces/{WS}/scopes/therapy", None).status == 403
    answer = _rest(session, "GET", f"/v3/workspaces/{WS}/sessions/s1/context?peer_target=alice&scope=therapy", None)
    assert answer.status == 403 and "scope" in answer.text, answer


def test_an_llm_chats_message_search_reads_only_the_sessions_of_the_peer_key(world, llm_server, monkeypatch):
    """The model's search_messages tool call, for a peer key asking about itself: before, alice's messages of s2,
    which she left, came back to the model (and so into the answer)."""
    monkeypatch.setenv("OPENAI_BASE_URL", llm_server.url)
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    get_settings.cache_clear()

    def answer(body: dict[str, Any]) -> Any:
        results = [m["content"] for m in body["messages"] if m.get("role") == "tool"]
        if not results:
            return {"tool_calls": [{"name": "search_messages", "arguments": {"query": QUERY, "limit": 50}}]}
        return "found: " + results[-1]

    llm_server.answer = answer
    alice = KEYS["peer_member"]
    reply = _rest(alice, "POST", f"/v3/workspaces/{WS}/peers/alice/chat", {"query": QUERY, "include_evidence": True})
    assert reply.status == 200, reply
    body = json.loads(reply.text)
    read = json.dumps([body["content"], body["evidence"]["messages"], body["evidence"]["conclusions"]])  # not the query
    assert WORDS["s1"] in body["content"] and not _leaks(alice, WS, read, deleted=False), read
    assert {m["session_id"] for m in body["evidence"]["messages"]} - {DELETED} == {"s1", "s3"}


@pytest.mark.parametrize(
    ("filters", "named"),
    [
        (None, set()),
        ({"session_id": "s1"}, {"s1"}),
        ({"session_id": ["s1", "s2"]}, {"s1", "s2"}),
        ({"session_id": {"in": ["s2"]}, "peer_id": "alice"}, {"s2"}),
        ({"session_id": {"ne": "s3"}}, {"s3"}),  # named, so checked, even as the one left out
        ({"session_id": "*"}, set()),
        ({"OR": [{"session_id": "s1"}, {"AND": [{"NOT": {"session_id": "s2"}}]}]}, {"s1", "s2"}),
        ({"metadata": {"session_id": "s9"}}, set()),  # a metadata key of that name names no session
    ],
)
def test_the_sessions_a_filter_names_are_found_at_any_depth(filters, named):
    assert named_sessions(filters) == named
