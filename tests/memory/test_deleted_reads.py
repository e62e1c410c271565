"""A deleted session's messages are invisible to every read from the moment its delete answers, not from its purge:
search (workspace, peer, MCP), chat (the first retrieval and the model's search tool) and the context's recall. The
stream never runs here, so no purge has removed anything; the deleted session's many better matches must not crowd
out the live one either (the search reads deeper past them)."""

from __future__ import annotations

import json

import pytest

from local import moto_vectors
from tests.handlers import call, invoke
from tests.handlers import post_messages as post
from tests.stream import message_records

W = "/v3/workspaces/ws1"
GONE, KEPT = "quokkaplum", "marmotfig"  # planted words: the deleted session's, the live session's
QUERY = KEPT  # which the deleted session says too, in shorter messages: they rank first
CROWD = 30  # the deleted session's matches, each better than the live one's: more than a search or recall ranks


@pytest.fixture
def ws(aws):
    assert call("POST", "/v3/workspaces", {"id": "ws1"}).status == 201
    post("s1", *[("alice", f"{GONE} {KEPT} {GONE} ({i})") for i in range(CROWD)])
    post("s2", ("bob", "what is by the door?"), ("alice", f"I keep a {KEPT} by the door, it is a long story."))
    post("s3", *[("alice", f"filler about the weather, day {i}") for i in range(40)])
    assert call("DELETE", f"{W}/sessions/s1").status == 202
    moto_vectors.settle()
    return aws


def shows(answer) -> tuple[bool, bool]:
    """Whether the whole answer (evidence included) says the deleted session's word, and the live one's."""
    text = json.dumps(answer)
    return GONE in text or '"s1"' in text, KEPT in text


def test_workspace_search_leaves_out_a_deleted_session(ws):
    reply = call("POST", f"{W}/search", {"query": QUERY})
    assert reply.status == 200
    assert shows(reply.body) == (False, True)
    assert {m["session_id"] for m in reply.body} == {"s2"}


def test_peer_search_leaves_out_a_deleted_session(ws):
    reply = call("POST", f"{W}/peers/alice/search", {"query": QUERY, "limit": 5})
    assert reply.status == 200
    assert shows(reply.body) == (False, True)


def test_a_deleted_sessions_own_search_is_404(ws):
    assert call("POST", f"{W}/sessions/s1/search", {"query": QUERY}).status == 404
    assert shows(call("POST", f"{W}/sessions/s2/search", {"query": QUERY}).body) == (False, True)


def test_the_mcp_search_tool_leaves_out_a_deleted_session(ws):
    for arguments in ({}, {"peer_id": "alice"}):
        reply = call(
            "POST",
            "/mcp",
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "search", "arguments": {"workspace_id": "ws1", "query": QUERY, **arguments}},
            },
        )
        assert reply.status == 200 and "result" in reply.body, reply.body
        assert shows(reply.body["result"]) == (False, True), arguments


def test_the_workspace_chats_first_retrieval_leaves_out_a_deleted_session(ws):
    reply = call("POST", f"{W}/chat", {"query": QUERY, "include_evidence": True})
    assert reply.status == 200, reply.body
    assert shows(reply.body) == (False, True)
    assert {m["session_id"] for m in reply.body["evidence"]["messages"]} == {"s2"}


def test_the_chat_models_message_search_leaves_out_a_deleted_session(ws, llm_server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", llm_server.url)
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    from precis.settings import get_settings

    get_settings.cache_clear()

    def answer(body):
        results = [m["content"] for m in body["messages"] if m.get("role") == "tool"]
        if not results:
            return {"tool_calls": [{"name": "search_messages", "arguments": {"query": QUERY}}]}
        return "found: " + results[-1]

    llm_server.answer = answer
    for path in (f"{W}/peers/alice/chat", f"{W}/chat"):
        llm_server.requests.clear()
        reply = call("POST", path, {"query": "what does alice keep?", "include_evidence": True})
        assert reply.status == 200, reply.body
        assert shows(reply.body) == (False, True), path
        assert shows([r.body for r in llm_server.requests]) == (False, True), path  # what the model was shown
        assert "s2" in {m["session_id"] for m in reply.body["evidence"]["messages"]}, path


def test_the_contexts_recall_reaches_past_a_deleted_sessions_matches(ws):
    reply = call("GET", f"{W}/sessions/s3/context", tokens=2000, summary="false", search_query=QUERY)
    assert reply.status == 200, reply.body
    assert shows(reply.body) == (False, True)
    assert {m["session_id"] for m in reply.body["messages"] if m["id"] in reply.body["recalled"]} == {"s2"}


def test_a_peers_session_list_leaves_out_a_deleted_session(ws):
    listed = call("POST", f"{W}/peers/alice/sessions", {})
    assert listed.status == 200
    assert [s["id"] for s in listed.body["items"]] == ["s2", "s3"]


def test_a_clone_of_a_deleted_session_keeps_what_it_inherited(aws):
    assert call("POST", "/v3/workspaces", {"id": "ws1"}).status == 201
    post("p", ("alice", f"a {KEPT} in the parent"), ("bob", "and something else"))
    clone = call("POST", f"{W}/sessions/p/clone")
    assert clone.status in (200, 201), clone.body
    child = clone.body["id"]
    assert call("DELETE", f"{W}/sessions/p").status == 202
    found = call("POST", f"{W}/sessions/{child}/search", {"query": KEPT})
    assert [(m["session_id"], m["content"]) for m in found.body] == [(child, f"a {KEPT} in the parent")]
    found = call("POST", f"{W}/search", {"query": KEPT})
    assert all(m["session_id"] != "p" for m in found.body)


def test_the_semantic_ranking_leaves_out_a_deleted_session(aws, llm_server, monkeypatch):
    """With an embedder, the vector index ByMessageMeaning ranks too: the deleted session's vectors (written by the
    deriver before the delete, removed only by the purge) are dropped like its postings."""
    from precis.settings import get_settings

    monkeypatch.setenv("PRECIS_EMBEDDER", "openai")
    monkeypatch.setenv("OPENAI_BASE_URL", llm_server.url)
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("PRECIS_DERIVE_ENGINE", "extractive")
    get_settings.cache_clear()
    assert call("POST", "/v3/workspaces", {"id": "ws1"}).status == 201
    post("s1", *[("alice", f"{GONE} {KEPT} {GONE} ({i})") for i in range(CROWD)])
    post("s2", ("bob", "what is by the door?"), ("alice", f"I keep a {KEPT} by the door, it is a long story."))
    for session in ("s1", "s2"):
        records = message_records(aws["dynamodb"], session_id=session)
        assert invoke("DeriveFunction", {"Records": records}) == {"batchItemFailures": []}
    moto_vectors.settle()
    semantic = call("POST", f"{W}/search", {"query": f"{GONE}{KEPT}", "limit": 40})  # a word no one says: meaning only
    assert {m["session_id"] for m in semantic.body} >= {"s1", "s2"}, "the vectors are there before the delete"
    assert call("DELETE", f"{W}/sessions/s1").status == 202
    for path in (f"{W}/search", f"{W}/peers/alice/search"):
        for query in (KEPT, f"{GONE}{KEPT}"):
            reply = call("POST", path, {"query": query, "limit": 5})
            assert reply.status == 200, reply.body
            assert shows(reply.body) == (False, True), (path, query)


def test_conclusions_drawn_in_a_deleted_session_are_left_out_before_its_purge(aws):
    """Posted conclusions carry their session: from the delete on, no list, query, get or representation shows those
    of the deleted one (the purge, which the stream would run, has not)."""
    assert call("POST", "/v3/workspaces", {"id": "ws1"}).status == 201
    post("s1", ("alice", "hello"))
    post("s2", ("alice", "hello again"))
    made = call(
        "POST",
        f"{W}/conclusions",
        {
            "conclusions": [
                {"content": f"alice keeps a {word}", "observer_id": "alice", "observed_id": "alice", "session_id": s}
                for word, s in ((GONE, "s1"), (KEPT, "s2"))
            ]
        },
    )
    assert made.status == 201, made.body
    gone_id = next(c["id"] for c in made.body if c["session_id"] == "s1")
    assert call("DELETE", f"{W}/sessions/s1").status == 202
    moto_vectors.settle()
    both = {"observer_id": "alice", "observed_id": "alice"}
    answers = [
        call("POST", f"{W}/conclusions/list", {"filters": both}).body["items"],
        call("POST", f"{W}/conclusions/list").body["items"],
        call("POST", f"{W}/conclusions/query", {"query": f"alice keeps a {GONE}", "filters": both}).body,
        call("POST", f"{W}/peers/alice/representation", {"search_query": GONE}).body,
        call("GET", f"{W}/peers/alice/context?search_query={GONE}").body,
    ]
    for answer in answers:
        assert shows(answer) == (False, True), answer
    assert call("GET", f"{W}/conclusions/{gone_id}").status == 404
