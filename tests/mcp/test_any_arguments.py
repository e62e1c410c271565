"""Any JSON an agent can send as a tool's arguments, to every tool through the MCP function's handler with an admin
key: never a 5xx or an internal error (-32603), a bad argument is a tool result with isError that names it, and a
refused call stores nothing. Text that is not Unicode (a lone surrogate) is refused where the endpoint reads the
body (precis.mcp.protocol), before any tool runs."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from precis.mcp.tools import CATALOGUE
from tests.handlers import call
from tests.hostile import ANY_JSON, HOSTILE_TEXT, SEEDED, admin_key, hostile, seed, stored, strict, to_text

FILTERS = {"metadata": {"mood": "happy"}, "peer_id": {"in": ["alice", "bob"]}}
# A valid value of each argument, by name ({...}: an id of the example's workspace).
SAMPLES: dict[str, Any] = {
    "workspace_id": "{workspace_id}",
    "peer_id": "alice",
    "target_peer_id": "alice",
    "session_id": "s1",
    "message_id": "{message_id}",
    "conclusion_id": "{conclusion_id}",
    "observer_id": "alice",
    "sender_id": "alice",
    "peer_target": "alice",
    "peer_perspective": "alice",
    "query": "where does alice live?",
    "search_query": "Lisbon",
    "metadata": {"note": "hi", "deep": {"a": [1, {"b": None}]}},
    "configuration": {"observeMe": True},
    "message_filters": FILTERS,
    "conclusion_filters": {"session_id": "s1"},
    "filters": FILTERS,
    "peer_card": ["IDENTITY: alice", "Lives in Lisbon"],
    "peers": ["alice", {"peer_id": "carol", "observe_me": False}],
    "peer_ids": ["bob"],
    "messages": [{"peer_id": "alice", "content": "I moved to Lisbon", "metadata": {"mood": "happy"}}],
    "conclusions": ["Lives in Lisbon"],
    "reasoning_level": "low",
    "page": 1,
    "size": 10,
    "message_limit": 5,
    "conclusion_top_k": 3,
    "top_k": 3,
    "max_conclusions": 5,
    "tokens": 500,
    "reverse": True,
    "summary": True,
    "whole_runs": False,
    "limit_to_session": False,
}

# Where one tool takes an argument of that name differently.
SAMPLES_OF: dict[tuple[str, str], Any] = {("query_conclusions", "filters"): {"session_id": "s1"}}


def test_every_argument_of_every_tool_has_a_sample():
    named = {a for tool in CATALOGUE.tools.values() for a in tool.arguments.model_fields}
    assert named <= set(SAMPLES), sorted(named - set(SAMPLES))


def rpc(headers: dict[str, str], name: str, arguments_text: str, request_id: int = 7) -> Any:
    """tools/call of `name` with these arguments (JSON text), as a 2025-06-18 client sends it: the HTTP reply."""
    text = f'{{"jsonrpc":"2.0","id":{request_id},"method":"tools/call","params":{{"name":{json.dumps(name)},'
    text += f'"arguments":{arguments_text}}}}}'
    return call("POST", "/mcp", raw=text, headers={**headers, "MCP-Protocol-Version": "2025-06-18"})


@pytest.fixture
def admin(aws, monkeypatch) -> dict[str, str]:
    return admin_key(monkeypatch)


# ---------------------------------------------------------------- issue 46, reproduction 4


@pytest.mark.parametrize(
    ("arguments", "where"),
    [
        ({"metadata": {"note": "\ud800"}}, "metadata.note"),
        ({"peer_id": "alice", "metadata": {"note": "x\udfff"}}, "metadata.note"),
        ({"session_id": "s1", "metadata": {"\ud800": 1}}, "metadata"),
        ({"metadata": {"list": ["ok", {"deep": "\udbff"}]}}, "metadata.list[1].deep"),
        ({"metadata": {"n": float("nan")}}, "metadata.n"),  # not JSON, and stored it would come back unreadable
    ],
    ids=["workspace", "peer", "session key", "nested", "NaN"],
)
def test_set_metadata_takes_unreadable_values_as_a_bad_argument_and_stores_nothing(aws, admin, arguments, where):
    ids = seed(admin)
    before = stored(aws)
    reply = rpc(admin, "set_metadata", to_text({"workspace_id": ids["workspace_id"], **arguments}))
    assert reply.status == 200, reply.body
    result = reply.body["result"]
    assert result["isError"] is True, result
    [content] = result["content"]
    assert content["text"].startswith(f"invalid arguments: {where}: "), content
    assert ("not a finite number" if where == "metadata.n" else "not valid Unicode") in content["text"], content
    assert stored(aws) == before
    got = rpc(admin, "get_metadata", to_text({"workspace_id": ids["workspace_id"]})).body["result"]
    assert got["isError"] is False and "\\ud800" not in got["content"][0]["text"]


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ('{"jsonrpc":"2.0","id":"\\ud800","method":"tools/list"}', -32600),
        ('{"jsonrpc":"2.0","id":3,"method":"tools/\\ud800"}', -32600),
        ('{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"set\\udc00"}}', -32602),
        ('{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"cursor":"\\ud800"}}', -32602),
        ('{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"x","arguments":{},"\\ud800":1}}', -32602),
    ],
    ids=["id", "method", "tool name", "cursor", "a params key"],
)
def test_a_lone_surrogate_outside_the_arguments_is_a_json_rpc_error_naming_where(aws, admin, text, code):
    reply = call("POST", "/mcp", raw=text, headers={**admin, "MCP-Protocol-Version": "2025-06-18"})
    assert reply.status == 400, reply.body
    error = reply.body["error"]
    assert error["code"] == code and "lone surrogate" in error["message"], error
    assert reply.body["id"] == (None if '"id":"' in text else 3)


@pytest.mark.parametrize("header", ["x" * 3000, "a#b", "WS#x", "bad id", "\u202e", "caf\u00e9"])
@pytest.mark.parametrize("tool", ["create_workspace", "create_peer", "set_metadata", "get_metadata"])
def test_a_workspace_header_that_is_not_an_id_is_a_bad_argument_and_stores_nothing(aws, admin, header, tool):
    """The connection's X-Honcho-Workspace-ID stands in for workspace_id, so it is held to the same rule (it was
    taken as it came: `a#b` made a workspace, 3,000 characters were a -32603 from DynamoDB's key limit)."""
    before = stored(aws)
    arguments = {"create_peer": {"peer_id": "zed"}, "set_metadata": {"metadata": {"a": 1}}}.get(tool, {})
    text = to_text({"name": tool, "arguments": arguments})
    reply = call(
        "POST",
        "/mcp",
        raw=f'{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{text}}}',
        headers={**admin, "MCP-Protocol-Version": "2025-06-18", "X-Honcho-Workspace-ID": header},
    )
    assert reply.status == 200, reply.body
    result = reply.body["result"]
    assert result["isError"] is True and result["content"][0]["text"].startswith("X-Honcho-Workspace-ID: "), result
    assert stored(aws) == before


# ---------------------------------------------------------------- the property


@st.composite
def tool_calls(draw) -> tuple[str, Any]:
    name = draw(st.sampled_from(sorted(CATALOGUE.tools)))
    fields = CATALOGUE.tools[name].arguments.model_fields
    required = [a for a, f in fields.items() if f.is_required()]
    optional = draw(st.lists(st.sampled_from(sorted(set(fields) - set(required)) or ["workspace_id"]), unique=True))
    template = {a: SAMPLES_OF.get((name, a), SAMPLES[a]) for a in [*required, *optional, "workspace_id"] if a in fields}
    kind = draw(st.sampled_from(["hostile", "hostile", "hostile", "any", "text"]))
    if kind == "hostile":
        return name, draw(hostile(template))
    if kind == "any":
        return name, draw(ANY_JSON)
    key = draw(st.sampled_from(sorted(template))) if template else "workspace_id"
    return name, {**template, key: draw(HOSTILE_TEXT)}


def _ids(value: Any, ids: dict[str, str]) -> Any:
    """The template's {...} ids filled in (hostile text is left as it is)."""
    if isinstance(value, str) and value.startswith("{") and value.strip("{}") in ids:
        return ids[value.strip("{}")]
    if isinstance(value, dict):
        return {k: _ids(v, ids) for k, v in value.items()}
    if isinstance(value, list):
        return [_ids(v, ids) for v in value]
    return value


def _result_json(answer: dict[str, Any]) -> Any:
    """A tool result's text read as JSON (what an agent's client parses), or None when it is prose."""
    try:
        return json.loads(answer["result"]["content"][0]["text"])
    except (KeyError, IndexError, ValueError):
        return None


@given(tool_call=tool_calls())
@settings(SEEDED, max_examples=40)  # ~0.25 s each (a workspace seeded by six requests, then the call under test)
def test_any_arguments_to_any_tool_are_never_an_internal_error_and_a_refusal_stores_nothing(aws, admin, tool_call):
    name, arguments = tool_call
    ids = seed(admin)
    text = to_text(_ids(arguments, ids))
    before = stored(aws)
    reply = rpc(admin, name, text)
    assert reply.status < 500, (name, text[:2000], reply.status, reply.body)
    answer = reply.body
    assert strict(answer) and strict(_result_json(answer)), (name, text[:2000], answer)
    assert "error" not in answer or answer["error"]["code"] != -32603, (name, text[:2000], answer)
    refused = "error" in answer or answer["result"]["isError"]
    if refused:
        said = answer["error"]["message"] if "error" in answer else answer["result"]["content"][0]["text"]
        assert said, "a refusal says what is wrong"
        assert stored(aws) == before, (name, text[:2000], answer)
