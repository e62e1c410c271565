"""The tool catalogue: Honcho's tools by name and arguments, schemas an agent can read, and every tool authorizing as
its v3 route before it asks the layer anything. No stack and no moto: a call that gets past its authorization meets
a database that refuses to be touched."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from precis.auth import Principal
from precis.errors import Forbidden
from precis.mcp.catalogue import MISSING_WORKSPACE, Call
from precis.mcp.endpoint import tool_definitions
from precis.mcp.tools import CATALOGUE

CATALOGUE_JSON = Path(__file__).resolve().parents[2] / "layers" / "common" / "precis" / "mcp" / "catalogue.json"
W = "workspace_id"
# Honcho's MCP server (plastic-labs/honcho, mcp/src/tools): each tool's required and optional arguments.
HONCHO: dict[str, tuple[set[str], set[str]]] = {
    "inspect_workspace": (set(), {W}),
    "list_workspaces": (set(), {"page", "size"}),
    "create_workspace": (set(), {W, "metadata"}),
    "search": (
        {"query"},
        {W, "peer_id", "session_id", "message_limit", "message_filters", "conclusion_top_k", "conclusion_filters"},
    ),
    "get_metadata": (set(), {W, "peer_id", "session_id"}),
    "set_metadata": ({"metadata"}, {W, "peer_id", "session_id"}),
    "create_peer": ({"peer_id"}, {W, "configuration"}),
    "list_peers": (set(), {W}),
    "chat": ({"peer_id", "query"}, {W, "target_peer_id", "session_id", "reasoning_level"}),
    "get_peer_card": ({"peer_id"}, {W, "target_peer_id"}),
    "set_peer_card": ({"peer_id", "peer_card"}, {W, "target_peer_id"}),
    "get_peer_context": ({"peer_id"}, {W, "target_peer_id", "search_query", "max_conclusions"}),
    "get_representation": ({"peer_id"}, {W, "target_peer_id", "session_id", "search_query", "max_conclusions"}),
    "create_session": ({"session_id"}, {W}),
    "list_sessions": (set(), {W}),
    "delete_session": ({"session_id"}, {W}),
    "clone_session": ({"session_id"}, {W, "message_id"}),
    "add_peers_to_session": ({"session_id", "peers"}, {W}),
    "remove_peers_from_session": ({"session_id", "peer_ids"}, {W}),
    "get_session_peers": ({"session_id"}, {W}),
    "inspect_session": ({"session_id"}, {W}),
    "add_messages_to_session": ({"session_id", "messages"}, {W}),
    "get_session_messages": ({"session_id"}, {W, "filters"}),
    "get_session_message": ({"session_id", "message_id"}, {W}),
    "get_session_context": ({"session_id"}, {W, "summary", "tokens"}),
    "list_conclusions": ({"peer_id"}, {W, "target_peer_id"}),
    "query_conclusions": ({"peer_id", "query"}, {W, "target_peer_id", "top_k", "filters"}),
    "create_conclusions": ({"peer_id", "target_peer_id", "conclusions"}, {W, "session_id"}),
    "delete_conclusion": ({"peer_id", "target_peer_id", "conclusion_id"}, {W}),
    "schedule_dream": ({"peer_id"}, {W, "target_peer_id", "session_id"}),
    "get_queue_status": (set(), {W}),
}
PRECIS_OWN = {"get_budgeted_context", "get_session_summaries"}
# A valid value for each required argument, by name.
SAMPLES: dict[str, Any] = {
    "query": "Lisbon",
    "metadata": {"k": "v"},
    "peer_id": "alice",
    "session_id": "s1",
    "target_peer_id": "bob",
    "peer_card": ["Lives in Lisbon"],
    "peers": ["alice"],
    "peer_ids": ["alice"],
    "tokens": 500,
    "messages": [{"peer_id": "alice", "content": "I moved to Lisbon."}],
    "message_id": "m1",
    "conclusions": ["Lives in Lisbon"],
    "conclusion_id": "c" * 21,
}


def _minimal(name: str, workspace: str | None = None) -> dict[str, Any]:
    schema = CATALOGUE.tools[name].definition()["inputSchema"]
    given = {W: workspace} if workspace and W in schema["properties"] else {}
    return {**given, **{arg: SAMPLES[arg] for arg in schema.get("required", [])}}


def _items(aws) -> list[dict]:
    from local.template import template

    return aws["dynamodb"].scan(TableName=template().table_name)["Items"]


REGENERATE = 'PYTHONPATH=layers/common:. .venv/bin/python -c "from tests.mcp.test_catalogue import write; write()"'


def test_the_shipped_catalogue_is_what_the_tools_models_say():
    """tools/list reads catalogue.json: a cold start would otherwise build every model's schema (~0.5 s)."""
    assert tool_definitions() == CATALOGUE.definitions(), f"catalogue.json is stale; write it again: {REGENERATE}"


def write() -> None:
    CATALOGUE_JSON.write_text(json.dumps(CATALOGUE.definitions(), indent=1, ensure_ascii=False) + "\n")


def test_every_honcho_tool_is_here_with_its_arguments_and_requires_no_more_than_honcho():
    tools = {t["name"]: t["inputSchema"] for t in tool_definitions()}
    assert set(tools) == set(HONCHO) | PRECIS_OWN
    for name, (required, optional) in HONCHO.items():
        assert required | optional <= set(tools[name]["properties"]), name
        assert set(tools[name].get("required", [])) <= required, name


def test_the_tools_come_in_a_fixed_order_honchos_families_first():
    names = [t["name"] for t in tool_definitions()]
    assert names[:3] == ["list_workspaces", "create_workspace", "inspect_workspace"]
    assert names[-2:] == ["schedule_dream", "get_queue_status"]
    assert names == [t["name"] for t in CATALOGUE.definitions()]


def test_schemas_inline_their_parts_and_type_an_optional_argument_as_what_it_takes():
    text = json.dumps(tool_definitions())
    assert "$ref" not in text and "$defs" not in text and '{"type": "null"}' not in text
    for tool in tool_definitions():
        assert tool["inputSchema"]["type"] == "object" and tool["description"], tool["name"]
        assert tool["inputSchema"]["additionalProperties"] is False, tool["name"]
        assert tool["annotations"]["readOnlyHint"] is CATALOGUE.tools[tool["name"]].read_only


def test_honchos_argument_shapes_are_accepted():
    samples = {
        "add_peers_to_session": {
            "session_id": "s1",
            "peers": ["bot", {"peer_id": "alice", "observe_me": True, "observe_others": False}],
        },
        "add_messages_to_session": {
            "session_id": "s1",
            "messages": [{"peer_id": "alice", "content": "hi", "metadata": {"k": 1}}],
        },
        "create_peer": {"peer_id": "alice", "configuration": {"observeMe": False}},
        "chat": {"peer_id": "alice", "query": "who?", "reasoning_level": "max"},
    }
    for name, arguments in samples.items():
        CATALOGUE.tools[name].arguments.model_validate(arguments)


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({"session_id": "s 1"}, "session_id:"),
        ({"session_id": "s1", "tokens": 0}, "tokens:"),
        ({"session_id": "s1", "limit": 5}, "limit: unknown argument"),
        ({}, "session_id: Field required"),
    ],
)
def test_a_bad_argument_is_a_tool_error_naming_it(arguments, named):
    result = CATALOGUE.call("get_session_context", arguments, Call(None, "w"))
    assert result["isError"] is True and named in result["content"][0]["text"]


def test_without_a_workspace_argument_or_header_the_tool_says_how_to_give_one():
    result = CATALOGUE.call("list_peers", {}, Call(None, None))
    assert result == {"content": [{"type": "text", "text": MISSING_WORKSPACE}], "isError": True}


def test_the_workspace_is_the_argument_else_the_header_else_the_keys_own():
    key = Principal(workspace="keys")
    assert Call(key, "header").workspace("argument") == "argument"
    assert Call(key, "header").workspace(None) == "header"
    assert Call(key, None).workspace(None) == "keys"
    assert Call(Principal(admin=True), None).workspace("argument") == "argument"


@pytest.mark.parametrize("name", sorted(HONCHO.keys() | PRECIS_OWN))
def test_no_tool_reaches_the_layer_for_a_key_of_another_workspace(aws, name):
    with pytest.raises(Forbidden):
        CATALOGUE.call(name, _minimal(name, "w"), Call(Principal(workspace="other"), None))
    assert _items(aws) == []  # nothing written, not even a workspace


@pytest.mark.parametrize("name", sorted(HONCHO.keys() - {"list_workspaces"} | PRECIS_OWN))
def test_a_workspace_key_reaches_the_layer_in_its_workspace(aws, name):
    """Its answer is the layer's (here mostly: the workspace does not exist), never a refusal."""
    result = CATALOGUE.call(name, _minimal(name), Call(Principal(workspace="w"), "w"))
    assert set(result) == {"content", "isError"}
    assert not result["isError"] or "not found" in result["content"][0]["text"], result


@pytest.mark.parametrize(
    ("principal", "name", "arguments", "allowed"),
    [
        (Principal(workspace="w"), "list_workspaces", {}, False),  # an admin's route
        (Principal(admin=True), "list_workspaces", {}, True),
        (Principal(workspace="w", peer="alice"), "get_peer_context", {"peer_id": "alice"}, True),
        (Principal(workspace="w", peer="alice"), "get_peer_context", {"peer_id": "bob"}, False),
        (Principal(workspace="w", peer="alice"), "create_peer", {"peer_id": "alice"}, True),
        (Principal(workspace="w", peer="alice"), "list_peers", {}, False),
        (Principal(workspace="w", peer="alice"), "query_conclusions", {"peer_id": "alice", "query": "q"}, False),
        (
            Principal(workspace="w", peer="alice"),
            "search",
            {"query": "q", "peer_id": "alice", "conclusion_top_k": 0},
            True,
        ),
        (Principal(workspace="w", peer="alice"), "search", {"query": "q", "peer_id": "alice"}, False),
        (Principal(workspace="w", peer="alice"), "get_session_context", {"session_id": "s1"}, False),  # not a member
        (
            Principal(workspace="w", session="s1"),
            "add_messages_to_session",
            {**_minimal("add_messages_to_session")},
            True,
        ),
        (Principal(workspace="w", session="s1"), "get_session_context", {"session_id": "s2"}, False),
        (Principal(workspace="w", session="s1"), "create_session", {"session_id": "s1"}, True),
        (Principal(workspace="w", session="s1"), "create_peer", {"peer_id": "alice"}, False),
    ],
)
def test_a_scoped_key_may_do_through_a_tool_what_it_may_do_through_the_route(aws, principal, name, arguments, allowed):
    call = Call(principal, "w")
    if allowed:
        assert set(CATALOGUE.call(name, arguments, call)) == {"content", "isError"}
    else:
        with pytest.raises(Forbidden):
            CATALOGUE.call(name, arguments, call)
