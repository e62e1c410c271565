"""MCP's JSON-RPC over streamable HTTP, stateless: what a POST says, in which protocol era, and how it is answered.

Two eras share the endpoint. Legacy clients (2025-03-26 through 2025-11-25) open with `initialize` and then name
their version in the `MCP-Protocol-Version` header; modern ones (2026-07-28) carry it on every request, in
`params._meta`, mirrored in headers the server must check (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`). No
session is kept in either: the endpoint mints no `Mcp-Session-Id`, so a legacy client never opens a GET stream, and
every request is served from what it carries. Pure: no I/O, no settings.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field, replace
from typing import Any

from precis.schemas import json_body

LEGACY_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26")  # newest first: initialize's counter-offer is the first
MODERN_VERSIONS = ("2026-07-28",)
SUPPORTED_VERSIONS = (*MODERN_VERSIONS, *LEGACY_VERSIONS)
# A legacy request without MCP-Protocol-Version: clients before 2025-06-18 did not send it (2026-07-28, "Protocol
# Version Header": a server MAY take such a request as 2025-03-26).
HEADERLESS_VERSION = "2025-03-26"

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
HEADER_MISMATCH = -32020
UNSUPPORTED_PROTOCOL_VERSION = -32022
# Application codes, outside JSON-RPC's reserved range as MCP asks of new codes: the HTTP status they come with.
UNAUTHORIZED = 401
FORBIDDEN = 403

META_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_SERVER_INFO = "io.modelcontextprotocol/serverInfo"
# Methods whose name (a params key) the modern era mirrors in the Mcp-Name header.
NAMED_PARAMS = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
MAX_BODY_DEPTH = json_body.MAX_DEPTH


class RpcError(Exception):
    """A JSON-RPC error answer, with the HTTP status it goes out with and the id it answers (None: unreadable)."""

    def __init__(self, code: int, message: str, *, status: int = 200, data: Any = None, request_id: Any = None):
        super().__init__(message)
        self.code, self.message, self.status, self.data, self.request_id = code, message, status, data, request_id

    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return {"jsonrpc": "2.0", "id": self.request_id, "error": error}


@dataclass(frozen=True)
class Request:
    """A JSON-RPC request (`id` set) or notification (`id` None), with the protocol version it is served under."""

    method: str
    params: dict[str, Any]
    version: str
    id: Any = None
    notification: bool = False
    meta: dict[str, Any] = field(default_factory=dict)
    unreadable: str | None = None  # what is wrong with the text of a tools/call's arguments (a tool result's error)

    @property
    def modern(self) -> bool:
        return self.version in MODERN_VERSIONS


def _load(body: str) -> tuple[Any, str | None]:
    """The message a body holds, read once (precis.schemas.json_body), and what is wrong with the text of a tools/call's
    arguments, if anything (text that is not Unicode, a number that is not finite): a bad argument, which the call
    answers as a tool result (isError) the agent can correct. Anywhere else it is the request's own fault: a JSON-RPC
    error naming where."""
    try:
        message = json_body.parse(body, max_depth=MAX_BODY_DEPTH, root=())
    except json_body.Unreadable as exc:  # JSON Python cannot read: too deep for its parser, too many digits
        raise RpcError(PARSE_ERROR, f"Parse error: {exc.msg}", status=400) from None
    except ValueError as exc:
        raise RpcError(PARSE_ERROR, f"Parse error: the body is not JSON ({exc})", status=400) from None
    params: Any = message.get("params") if isinstance(message, dict) else None
    call = isinstance(params, dict) and message.get("method") == "tools/call" and "arguments" in params
    try:
        json_body.check(message, max_depth=MAX_BODY_DEPTH, root=())
    except json_body.Unreadable as exc:
        if exc.kind == "json_too_deep":
            raise RpcError(PARSE_ERROR, f"Parse error: {exc.msg}", status=400) from None
        if call and exc.loc[:2] == ("params", "arguments"):
            envelope = {**message, "params": {**params, "arguments": None}}
            try:  # the arguments are the one bad part only when the rest of the message reads
                json_body.check(envelope, max_depth=MAX_BODY_DEPTH, root=())
            except json_body.Unreadable as elsewhere:
                exc = elsewhere
            else:
                return message, json_body.Unreadable(exc.loc[2:], exc.problem, exc.kind).msg
        in_params = exc.loc[:1] == ("params",)
        request_id = message.get("id") if isinstance(message, dict) and exc.loc[:1] != ("id",) else None
        raise RpcError(
            INVALID_PARAMS if in_params else INVALID_REQUEST,
            f"{'Invalid params' if in_params else 'Invalid Request'}: {exc.msg}",
            status=400,
            request_id=request_id if isinstance(request_id, (str, int)) and not isinstance(request_id, bool) else None,
        ) from None
    return message, None


def decode_header(value: str | None) -> str | None:
    """A header value as the client meant it: MCP's `=?base64?…?=` sentinel decoded (2026-07-28, "Value Encoding")."""
    if value is None or not (value.startswith("=?base64?") and value.endswith("?=")):
        return value
    try:
        return base64.b64decode(value[len("=?base64?") : -2], validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None


def read(body: str, headers: dict[str, str]) -> Request:
    """The request a POST body carries, checked for its era; RpcError (with its HTTP status) when it cannot be served.

    `headers` are lower-cased (API Gateway's payload 2.0). A batch is refused: 2025-06-18 removed batching, and a
    stateless endpoint that answers one JSON object per POST has no order to keep among a batch's answers.
    """
    message, unreadable = _load(body)
    if isinstance(message, list):
        raise RpcError(
            INVALID_REQUEST,
            "Invalid Request: batches are not supported; send one JSON-RPC message per POST",
            status=400,
        )
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        raise RpcError(
            INVALID_REQUEST, 'Invalid Request: expected a JSON-RPC 2.0 object ("jsonrpc": "2.0")', status=400
        )
    request_id = message.get("id")
    has_id = "id" in message
    if has_id and (isinstance(request_id, bool) or not isinstance(request_id, (str, int))):
        raise RpcError(INVALID_REQUEST, "Invalid Request: id must be a string or an integer", status=400)
    method = message.get("method")
    if not isinstance(method, str):
        if has_id and ("result" in message or "error" in message):
            # A client's answer to a server request: this server sends none, and it is only taken (202), never read.
            return Request("", {}, HEADERLESS_VERSION, id=request_id, notification=True)
        raise RpcError(
            INVALID_REQUEST,
            "Invalid Request: method must be a string",
            status=400,
            request_id=request_id if has_id else None,
        )
    params = message.get("params", {})
    if not isinstance(params, dict):
        raise RpcError(
            INVALID_REQUEST,
            "Invalid Request: params must be an object",
            status=400,
            request_id=request_id if has_id else None,
        )
    if not has_id:
        return Request(method, params, headers.get("mcp-protocol-version") or HEADERLESS_VERSION, notification=True)
    meta = params.get("_meta")
    if isinstance(meta, dict) and META_VERSION in meta:
        request = _modern(method, params, meta, headers, request_id)
    else:
        request = _legacy(method, params, headers, request_id)
    return replace(request, unreadable=unreadable) if unreadable else request


def _modern(
    method: str, params: dict[str, Any], meta: dict[str, Any], headers: dict[str, str], request_id: Any
) -> Request:
    """The 2026-07-28 checks, in the reference SDK's order: the envelope, the headers, then the version."""
    if META_CAPABILITIES not in meta:
        raise RpcError(
            INVALID_PARAMS,
            f"Invalid params: params._meta is missing {META_CAPABILITIES}",
            status=400,
            request_id=request_id,
        )
    version = meta[META_VERSION]
    if headers.get("mcp-protocol-version") != version:
        raise RpcError(
            HEADER_MISMATCH,
            f"Header mismatch: MCP-Protocol-Version does not match params._meta's {META_VERSION}",
            status=400,
            request_id=request_id,
        )
    if headers.get("mcp-method") != method:
        raise RpcError(
            HEADER_MISMATCH,
            "Header mismatch: Mcp-Method does not match the request's method",
            status=400,
            request_id=request_id,
        )
    name_key = NAMED_PARAMS.get(method)
    if (
        name_key is not None
        and params.get(name_key) is not None
        and decode_header(headers.get("mcp-name")) != params.get(name_key)
    ):
        raise RpcError(
            HEADER_MISMATCH,
            f"Header mismatch: Mcp-Name does not match params.{name_key}",
            status=400,
            request_id=request_id,
        )
    if not isinstance(version, str):
        raise RpcError(
            INVALID_PARAMS, f"Invalid params: {META_VERSION} must be a string", status=400, request_id=request_id
        )
    if version not in MODERN_VERSIONS:
        raise unsupported(version, request_id)
    return Request(method, params, version, id=request_id, meta=meta)


def _legacy(method: str, params: dict[str, Any], headers: dict[str, str], request_id: Any) -> Request:
    if method == "initialize":
        return Request(method, params, negotiate(params.get("protocolVersion")), id=request_id)
    if method == "server/discover":
        raise RpcError(
            INVALID_PARAMS,
            f"Invalid params: server/discover needs params._meta with {META_VERSION} and {META_CAPABILITIES}",
            status=400,
            request_id=request_id,
        )
    version = headers.get("mcp-protocol-version") or HEADERLESS_VERSION
    if version in MODERN_VERSIONS:
        raise RpcError(
            INVALID_PARAMS,
            f"Invalid params: a {version} request carries params._meta with {META_VERSION} and {META_CAPABILITIES}",
            status=400,
            request_id=request_id,
        )
    if version not in LEGACY_VERSIONS:
        raise unsupported(version, request_id)
    return Request(method, params, version, id=request_id)


def negotiate(requested: Any) -> str:
    """initialize's answer: the client's version when it is one of ours, else our newest (the client then decides)."""
    return requested if requested in LEGACY_VERSIONS else LEGACY_VERSIONS[0]


def unsupported(requested: Any, request_id: Any = None) -> RpcError:
    return RpcError(
        UNSUPPORTED_PROTOCOL_VERSION,
        "Unsupported protocol version",
        status=400,
        request_id=request_id,
        data={"supported": list(SUPPORTED_VERSIONS), "requested": str(requested)},
    )


def method_not_found(request: Request) -> RpcError:
    # 2026-07-28 answers an unknown method 404 with the JSON-RPC error, which tells a modern server from a legacy
    # one that lacks the endpoint; the legacy era's clients read the error from a 200.
    return RpcError(
        METHOD_NOT_FOUND,
        f"Method not found: {request.method}",
        status=404 if request.modern else 200,
        request_id=request.id,
    )


def result(request: Request, value: dict[str, Any], server_info: dict[str, str]) -> dict[str, Any]:
    """The JSON-RPC answer to `request`; a modern result also says its type and who answered (its `_meta`)."""
    if request.modern:
        value = {**value, "resultType": "complete", "_meta": {**value.get("_meta", {}), META_SERVER_INFO: server_info}}
    return {"jsonrpc": "2.0", "id": request.id, "result": value}
