"""Clients nobody here wrote, against the local stack with keys checked: the official `mcp` Python client in both
protocol eras (the initialize handshake, and 2026-07-28's per-request envelope after server/discover), and the MCP
Inspector CLI (npm, pinned in tests/mcp/inspector). Plus what only raw HTTP shows: statuses, challenges, headers."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from precis.auth import mint_key
from precis.mcp.tools import CATALOGUE
from tests.stack import request

pytestmark = pytest.mark.stack
SECRET = "mcp-test-secret-0123456789abcdef"
STACK_ENV = {"PRECIS_AUTH": "true", "PRECIS_JWT_SECRET": SECRET, "PRECIS_LOCAL_CHAOS": ""}
ADMIN = mint_key(SECRET, admin=True)
INSPECTOR = Path(__file__).parent / "inspector"
INSPECTOR_BIN = INSPECTOR / "node_modules" / ".bin" / "mcp-inspector"
MODERN = "2026-07-28"


def _headers(key: str | None = ADMIN, workspace: str | None = None) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return {**headers, **({"X-Honcho-Workspace-ID": workspace} if workspace else {})}


def _connect(stack, mode: str, key: str | None = ADMIN, workspace: str | None = None) -> Client:
    http = httpx2.AsyncClient(headers=_headers(key, workspace), timeout=30)
    return Client(streamable_http_client(f"{stack.url}/mcp", http_client=http), mode=mode)


def _text(result) -> Any:
    text = result.content[0].text
    try:
        return json.loads(text)
    except ValueError:
        return text


def _post(stack, message: Any, headers: dict[str, str] | None = None) -> tuple[int, Any, Any]:
    status, response_headers, body = request(
        stack.port,
        "POST",
        "/mcp",
        {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            **_headers(),
            **(headers or {}),
        },
        json.dumps(message).encode() if not isinstance(message, bytes) else message,
    )
    return status, response_headers, json.loads(body) if body else None


def test_the_python_client_speaks_the_legacy_era(stack):
    async def session():
        async with _connect(stack, "legacy", workspace="legacy") as client:
            started = client.session.initialize_result
            tools = await client.list_tools()
            made = await client.call_tool("create_workspace", {})
            return started, tools, made

    started, tools, made = asyncio.run(session())
    assert started.protocol_version == "2025-11-25" and started.server_info.name == "precis"
    assert "add_messages_to_session" in started.instructions and started.capabilities.tools is not None
    assert [t.name for t in tools.tools] == list(CATALOGUE.tools)
    assert not made.is_error and _text(made)["id"] == "legacy"


def test_the_python_client_speaks_2026_07_28_and_a_conversation_round_trips(stack):
    """Record turns, then read them back as the context, within a budget, and by search."""
    turns = [
        {"peer_id": "alice", "content": "I moved to Lisbon last spring for a design job."},
        {"peer_id": "assistant", "content": "How do you like the light there?"},
        {"peer_id": "alice", "content": "The tiles and the river light are wonderful."},
    ]

    async def session():
        async with _connect(stack, "auto", workspace="modern") as client:
            discovered = client.session.discover_result
            tools = await client.list_tools()
            await client.call_tool("create_workspace", {})
            added = await client.call_tool("add_messages_to_session", {"session_id": "s1", "messages": turns})
            context = await client.call_tool("get_session_context", {"session_id": "s1"})
            small = await client.call_tool("get_budgeted_context", {"session_id": "s1", "tokens": 15})
            found = await client.call_tool("search", {"query": "Lisbon design", "session_id": "s1"})
            summaries = await client.call_tool("get_session_summaries", {"session_id": "s1"})
            return discovered, tools, added, context, small, found, summaries

    discovered, tools, added, context, small, found, summaries = asyncio.run(session())
    assert MODERN in discovered.supported_versions and "add_messages_to_session" in discovered.instructions
    assert [t.name for t in tools.tools] == list(CATALOGUE.tools)
    assert _text(added)["added"] == 3
    assert [m["content"] for m in _text(context)["messages"]] == [t["content"] for t in turns]
    budgeted = _text(small)
    assert budgeted["token_count"] <= 15 and [m["content"] for m in budgeted["messages"]] == [turns[-1]["content"]]
    assert budgeted["messages_skipped"] == 2
    assert _text(found)["messages"][0]["content"] == turns[0]["content"]
    assert _text(summaries) == {"id": "s1", "short_summary": None, "long_summary": None}


def test_every_tool_answers_through_the_client(stack):
    """One call of each tool, in an agent's order, under an admin key: none is an error, and each says what it did."""
    calls: list[tuple[str, dict[str, Any]]] = [
        ("create_workspace", {"metadata": {"purpose": "every tool"}}),
        ("list_workspaces", {}),
        ("create_peer", {"peer_id": "alice", "configuration": {"observeMe": True}}),
        ("create_peer", {"peer_id": "assistant"}),
        ("create_session", {"session_id": "s1"}),
        (
            "add_peers_to_session",
            {"session_id": "s1", "peers": ["assistant", {"peer_id": "alice", "observe_others": False}]},
        ),
        (
            "add_messages_to_session",
            {
                "session_id": "s1",
                "messages": [
                    {"peer_id": "alice", "content": "My sister Ana visits me in Lisbon in May."},
                    {"peer_id": "assistant", "content": "That sounds lovely."},
                ],
            },
        ),
        ("set_metadata", {"session_id": "s1", "metadata": {"topic": "family"}}),
        ("get_metadata", {"session_id": "s1"}),
        ("inspect_workspace", {}),
        ("list_peers", {}),
        ("list_sessions", {}),
        ("get_session_peers", {"session_id": "s1"}),
        ("inspect_session", {"session_id": "s1"}),
        ("get_session_messages", {"session_id": "s1", "filters": {"peer_id": "alice"}}),
        ("get_session_context", {"session_id": "s1", "tokens": 500}),
        ("get_budgeted_context", {"session_id": "s1", "tokens": 500, "peer_target": "alice", "search_query": "sister"}),
        ("get_session_summaries", {"session_id": "s1"}),
        ("search", {"query": "sister", "peer_id": "alice"}),
        (
            "create_conclusions",
            {"peer_id": "alice", "target_peer_id": "alice", "conclusions": ["alice's sister is Ana"]},
        ),
        ("list_conclusions", {"peer_id": "alice"}),
        ("query_conclusions", {"peer_id": "alice", "query": "sister"}),
        ("set_peer_card", {"peer_id": "alice", "peer_card": ["Lives in Lisbon"]}),
        ("get_peer_card", {"peer_id": "alice"}),
        ("get_peer_context", {"peer_id": "alice"}),
        ("get_representation", {"peer_id": "alice"}),
        ("chat", {"peer_id": "alice", "query": "Who is Ana?"}),
        ("schedule_dream", {"peer_id": "alice"}),
        ("get_queue_status", {}),
        ("clone_session", {"session_id": "s1"}),
        ("remove_peers_from_session", {"session_id": "s1", "peer_ids": ["assistant"]}),
        ("delete_session", {"session_id": "s1"}),
    ]

    async def session():
        answers, errors = {}, []
        async with _connect(stack, "auto", workspace="every-tool") as client:
            for name, arguments in calls:
                result = await client.call_tool(name, arguments)
                errors += [(name, _text(result))] if result.is_error else []
                answers.setdefault(name, _text(result))
            assert errors == []
            message_id = answers["add_messages_to_session"]["messages"][0]["id"]
            conclusion_id = answers["create_conclusions"]["ids"][0]
            clone = answers["clone_session"]["session_id"]
            answers["get_session_message"] = _text(
                await client.call_tool("get_session_message", {"session_id": clone, "message_id": message_id})
            )
            answers["delete_conclusion"] = _text(
                await client.call_tool(
                    "delete_conclusion", {"peer_id": "alice", "target_peer_id": "alice", "conclusion_id": conclusion_id}
                )
            )
            gone = await client.call_tool("get_session_context", {"session_id": "s1"})
            return answers, gone

    answers, gone = asyncio.run(session())
    assert set(answers) == set(CATALOGUE.tools)
    assert answers["get_metadata"] == {"topic": "family"}
    assert answers["get_session_peers"] == ["alice", "assistant"]
    assert answers["inspect_session"]["message_count"] == 2
    assert [m["peer_id"] for m in answers["get_session_messages"]["messages"]] == ["alice"]
    assert "Ana" in answers["search"]["messages"][0]["content"]
    assert [c["content"] for c in answers["query_conclusions"]] == ["alice's sister is Ana"]
    assert answers["get_peer_card"] == ["Lives in Lisbon"] and "Ana" in answers["get_peer_context"]["representation"]
    assert isinstance(answers["chat"], str) and answers["chat"]
    assert answers["get_session_message"]["content"] == "My sister Ana visits me in Lisbon in May."
    assert answers["delete_conclusion"] == f"conclusion '{answers['create_conclusions']['ids'][0]}' deleted"
    assert gone.is_error and "not found" in _text(gone)


def test_mistakes_are_tool_errors_the_agent_can_read_and_an_unknown_tool_a_protocol_error(stack):
    async def session():
        async with _connect(stack, "auto") as client:
            no_workspace = await client.call_tool("list_peers", {})
            missing = await client.call_tool("get_session_context", {"workspace_id": "nowhere", "session_id": "s1"})
            bad = await client.call_tool(
                "get_budgeted_context", {"workspace_id": "w", "session_id": "s1", "tokens": -3, "colour": "red"}
            )
            with pytest.raises(MCPError) as unknown:
                await client.call_tool("forget_everything", {})
            return no_workspace, missing, bad, unknown.value

    no_workspace, missing, bad, unknown = asyncio.run(session())
    assert no_workspace.is_error and "X-Honcho-Workspace-ID" in _text(no_workspace)
    assert missing.is_error and _text(missing) == "session 's1' not found in workspace 'nowhere'"
    assert bad.is_error and "tokens:" in _text(bad) and "colour: unknown argument" in _text(bad)
    assert unknown.code == -32602 and "forget_everything" in str(unknown)


def test_a_missing_or_forged_key_is_401_with_a_bearer_challenge(stack):
    ping = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    status, headers, body = _post(stack, ping, {"Authorization": ""})
    assert status == 401 and headers["WWW-Authenticate"] == 'Bearer realm="precis"'
    assert body["error"]["code"] == 401 and "Authorization" in body["error"]["message"]
    status, headers, body = _post(stack, ping, {"Authorization": f"Bearer {mint_key('not-' + SECRET, admin=True)}"})
    assert status == 401 and 'error="invalid_token"' in headers["WWW-Authenticate"]


def test_a_key_outside_its_scope_is_403_insufficient_scope_and_inside_it_works(stack):
    key = mint_key(SECRET, workspace="mine")

    async def session():
        async with _connect(stack, "auto", key=key, workspace="mine") as client:
            mine = await client.call_tool("create_workspace", {})
            with pytest.raises(MCPError) as other:
                await client.call_tool("list_sessions", {"workspace_id": "theirs"})
            return mine, other.value

    mine, other = asyncio.run(session())
    assert not mine.is_error
    assert other.code == 403 and "not 'theirs'" in str(other)
    call = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "list_sessions", "arguments": {"workspace_id": "theirs"}},
    }
    status, headers, body = _post(stack, call, {"Authorization": f"Bearer {key}"})
    assert status == 403 and headers["WWW-Authenticate"].startswith('Bearer realm="precis", error="insufficient_scope"')
    assert body["id"] == 7 and body["error"]["code"] == 403


def test_the_endpoint_is_stateless_json_over_post_alone(stack):
    for method in ("GET", "DELETE"):
        status, headers, body = request(stack.port, method, "/mcp", _headers())
        assert status == 405 and headers["Allow"] == "POST", method
    status, headers, body = _post(stack, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert (status, body) == (202, None)
    status, headers, body = _post(
        stack,
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"},
            },
        },
    )
    assert status == 200 and body["result"]["protocolVersion"] == "2025-06-18"
    assert "mcp-session-id" not in {k.lower() for k in headers}  # no session: nothing to remember between POSTs
    status, _, body = _post(stack, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"})  # 2025-03-26: no header
    assert status == 200 and len(body["result"]["tools"]) == len(CATALOGUE.tools)
    status, _, body = _post(stack, [{"jsonrpc": "2.0", "id": 3, "method": "ping"}])
    assert (status, body["error"]["code"], body["id"]) == (400, -32600, None)
    status, _, body = _post(stack, b"{nope")
    assert (status, body["error"]["code"]) == (400, -32700)


def test_the_2026_07_28_checks_answer_with_their_statuses(stack):
    def modern(method: str, version: str = MODERN, headers: dict[str, str] | None = None, **params):
        meta = {"io.modelcontextprotocol/protocolVersion": version, "io.modelcontextprotocol/clientCapabilities": {}}
        return _post(
            stack,
            {"jsonrpc": "2.0", "id": 9, "method": method, "params": {**params, "_meta": meta}},
            {"MCP-Protocol-Version": version, "Mcp-Method": method, **(headers or {})},
        )

    status, _, body = modern("server/discover")
    assert status == 200 and body["result"]["resultType"] == "complete"
    assert body["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "precis"
    assert body["result"]["cacheScope"] == "public" and body["result"]["ttlMs"] > 0
    status, _, body = modern("tools/list")
    assert status == 200 and body["result"]["cacheScope"] == "public"
    status, _, body = modern("tools/call", headers={"Mcp-Name": "chat"}, name="list_peers", arguments={})
    assert (status, body["error"]["code"]) == (400, -32020)
    status, _, body = modern("tools/list", version="2099-01-01")
    assert (status, body["error"]["code"]) == (400, -32022) and MODERN in body["error"]["data"]["supported"]
    status, _, body = modern("prompts/list")
    assert (status, body["error"]["code"]) == (404, -32601)


def _inspector(stack, *args: str) -> dict:
    if not INSPECTOR_BIN.exists():
        pytest.skip("the MCP Inspector is not installed: make test installs it (npm ci in tests/mcp/inspector)")
    node = shutil.which("node")
    assert node, "node is needed for the MCP Inspector"
    env = {**os.environ, "MCP_CATALOG_PATH": str(Path(stack.log).parent / "inspector-catalog.json")}
    out = subprocess.run(
        [
            str(INSPECTOR_BIN),
            "--cli",
            f"{stack.url}/mcp",
            "--format",
            "json",
            "--header",
            f"Authorization: Bearer {ADMIN}",
            "--header",
            "X-Honcho-Workspace-ID: inspector",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=INSPECTOR,
        env=env,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


def test_the_mcp_inspector_cli_lists_the_tools_and_calls_one_in_both_eras(stack):
    listed = _inspector(stack, "--method", "tools/list")
    assert [t["name"] for t in listed["result"]["tools"]] == list(CATALOGUE.tools)
    made = _inspector(
        stack,
        "--protocol-era",
        "modern",
        "--method",
        "tools/call",
        "--tool-name",
        "create_workspace",
        "--tool-args-json",
        '{"metadata": {"by": "inspector"}}',
    )
    assert made["result"]["isError"] is False
    assert json.loads(made["result"]["content"][0]["text"])["metadata"] == {"by": "inspector"}
