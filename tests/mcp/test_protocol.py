"""MCP's JSON-RPC as the endpoint reads it: the two eras, the 2026-07-28 header checks, and what is refused how.

Pure (precis.mcp.protocol): no stack, no moto.
"""

from __future__ import annotations

import base64
import json

import pytest

from precis.mcp import protocol
from precis.mcp.protocol import RpcError

MODERN = "2026-07-28"


def _body(method: str, params: dict | None = None, request_id: int | str | None = 1) -> str:
    message = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        message["params"] = params
    if request_id is not None:
        message["id"] = request_id
    return json.dumps(message)


def _envelope(version: str = MODERN, **params) -> dict:
    return {
        **params,
        "_meta": {
            protocol.META_VERSION: version,
            protocol.META_CAPABILITIES: {},
            "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
        },
    }


def _modern_headers(method: str, version: str = MODERN, name: str | None = None) -> dict[str, str]:
    headers = {"mcp-protocol-version": version, "mcp-method": method}
    if name is not None:
        headers["mcp-name"] = name
    return headers


def _refused(body: str, headers: dict[str, str] | None = None) -> RpcError:
    with pytest.raises(RpcError) as caught:
        protocol.read(body, headers or {})
    return caught.value


@pytest.mark.parametrize("version", ["2025-03-26", "2025-06-18", "2025-11-25"])
def test_initialize_keeps_each_legacy_version_it_is_offered(version):
    request = protocol.read(_body("initialize", {"protocolVersion": version, "capabilities": {}}), {})
    assert (request.version, request.modern, request.id) == (version, False, 1)


@pytest.mark.parametrize("offered", ["2024-11-05", "1900-01-01", None, 7])
def test_initialize_answers_a_version_it_does_not_speak_with_its_newest_legacy_one(offered):
    request = protocol.read(_body("initialize", {"protocolVersion": offered}), {})
    assert request.version == "2025-11-25"


def test_a_legacy_request_names_its_version_in_the_header_and_is_2025_03_26_without_it():
    assert protocol.read(_body("tools/list"), {"mcp-protocol-version": "2025-06-18"}).version == "2025-06-18"
    assert protocol.read(_body("tools/list"), {}).version == "2025-03-26"


def test_a_legacy_request_with_a_version_not_ours_is_400_listing_ours():
    error = _refused(_body("tools/list"), {"mcp-protocol-version": "2024-11-05"})
    assert (error.status, error.code) == (400, protocol.UNSUPPORTED_PROTOCOL_VERSION)
    assert error.data == {
        "supported": ["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26"],
        "requested": "2024-11-05",
    }


def test_a_modern_request_is_served_when_its_headers_agree_with_its_envelope():
    request = protocol.read(
        _body("tools/call", _envelope(name="search", arguments={})), _modern_headers("tools/call", name="search")
    )
    assert (request.version, request.modern, request.method) == (MODERN, True, "tools/call")


def test_a_tool_name_may_come_base64_encoded_in_mcp_name():
    encoded = "=?base64?" + base64.b64encode(b"search").decode() + "?="
    request = protocol.read(_body("tools/call", _envelope(name="search")), _modern_headers("tools/call", name=encoded))
    assert request.params["name"] == "search"


@pytest.mark.parametrize(
    "headers",
    [
        {"mcp-method": "tools/call", "mcp-name": "search"},  # no MCP-Protocol-Version
        _modern_headers("tools/call", version="2025-11-25", name="search"),  # not the envelope's version
        _modern_headers("tools/list", name="search"),  # not the body's method
        _modern_headers("tools/call", name="chat"),  # not the body's tool
        _modern_headers("tools/call"),  # no Mcp-Name
        _modern_headers("tools/call", name="=?base64?not base64?="),
    ],
)
def test_a_modern_request_whose_headers_disagree_with_its_body_is_400_header_mismatch(headers):
    error = _refused(_body("tools/call", _envelope(name="search")), headers)
    assert (error.status, error.code, error.request_id) == (400, protocol.HEADER_MISMATCH, 1)


def test_a_modern_envelope_without_client_capabilities_is_400_invalid_params():
    params = {"_meta": {protocol.META_VERSION: MODERN}}
    error = _refused(_body("tools/list", params), _modern_headers("tools/list"))
    assert (error.status, error.code) == (400, protocol.INVALID_PARAMS)
    assert protocol.META_CAPABILITIES in error.message


def test_a_modern_request_of_a_version_not_ours_is_400_unsupported_naming_ours():
    error = _refused(_body("tools/list", _envelope("2099-01-01")), _modern_headers("tools/list", "2099-01-01"))
    assert (error.status, error.code) == (400, protocol.UNSUPPORTED_PROTOCOL_VERSION)
    assert error.data["requested"] == "2099-01-01" and MODERN in error.data["supported"]


def test_server_discover_and_a_modern_header_need_the_envelope():
    assert _refused(_body("server/discover", {}), {}).code == protocol.INVALID_PARAMS
    error = _refused(_body("tools/list"), {"mcp-protocol-version": MODERN})
    assert (error.status, error.code) == (400, protocol.INVALID_PARAMS)


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ("{not json", protocol.PARSE_ERROR),
        ('{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": ' + "[" * 40 + "]" * 40 + "}", protocol.PARSE_ERROR),
        (json.dumps([{"jsonrpc": "2.0", "id": 1, "method": "ping"}]), protocol.INVALID_REQUEST),  # a batch
        (json.dumps({"id": 1, "method": "ping"}), protocol.INVALID_REQUEST),  # no "jsonrpc": "2.0"
        (json.dumps({"jsonrpc": "2.0", "id": 1}), protocol.INVALID_REQUEST),  # no method
        (json.dumps({"jsonrpc": "2.0", "id": True, "method": "ping"}), protocol.INVALID_REQUEST),
        (json.dumps({"jsonrpc": "2.0", "id": None, "method": "ping"}), protocol.INVALID_REQUEST),
        (json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": [1]}), protocol.INVALID_REQUEST),
        (json.dumps("ping"), protocol.INVALID_REQUEST),
    ],
)
def test_what_is_not_one_json_rpc_message_is_a_400_json_rpc_error(body, code):
    error = _refused(body)
    assert (error.status, error.code) == (400, code)
    assert error.body()["jsonrpc"] == "2.0" and error.body()["error"]["code"] == code


def test_notifications_and_a_clients_answers_are_taken_without_reading_them():
    assert protocol.read(_body("notifications/initialized", request_id=None), {}).notification
    assert protocol.read(json.dumps({"jsonrpc": "2.0", "id": 5, "result": {}}), {}).notification


def test_a_modern_result_says_its_type_and_who_answered_and_a_legacy_one_is_as_it_was():
    info = {"name": "precis", "version": "3"}
    modern = protocol.read(_body("tools/list", _envelope()), _modern_headers("tools/list"))
    legacy = protocol.read(_body("tools/list"), {"mcp-protocol-version": "2025-11-25"})
    assert protocol.result(modern, {"tools": []}, info) == {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {"tools": [], "resultType": "complete", "_meta": {protocol.META_SERVER_INFO: info}},
    }
    assert protocol.result(legacy, {"tools": []}, info) == {"jsonrpc": "2.0", "id": 1, "result": {"tools": []}}


def test_an_unknown_method_is_404_in_the_modern_era_and_a_200_error_in_the_legacy_one():
    modern = protocol.read(_body("resources/list", _envelope()), _modern_headers("resources/list"))
    legacy = protocol.read(_body("resources/list"), {})
    assert (protocol.method_not_found(modern).status, protocol.method_not_found(legacy).status) == (404, 200)
    assert protocol.method_not_found(modern).code == protocol.METHOD_NOT_FOUND
