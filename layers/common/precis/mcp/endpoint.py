"""The MCP endpoint's HTTP edge: `POST /mcp` (API Gateway HTTP API, payload 2.0) answered with one JSON object.

Keys: every POST needs a bearer key when the deployment checks them (401 with `WWW-Authenticate: Bearer` when missing
or invalid), and a tool runs only where the key's scope reaches, by the rules of the v3 route it stands for. A key
outside its scope is answered `403` with `WWW-Authenticate: Bearer error="insufficient_scope"`, as MCP's
authorization asks of a token whose scope is short at run time; it is not a tool result, because the agent cannot
correct it by changing its arguments the way it corrects a bad argument (`isError`). Statuses follow the protocol's
era (precis.mcp.protocol); GET and DELETE are 405 (no stream, no session).
"""

from __future__ import annotations

import base64
import binascii
import json
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from aws_lambda_powertools import Logger

from precis.errors import Forbidden, PrecisError, Unauthorized
from precis.llm import meter
from precis.mcp import protocol
from precis.mcp.catalogue import Call, error_result
from precis.mcp.protocol import Request, RpcError
from precis.mcp.tools import CATALOGUE
from precis.sizes import LAMBDA_PAYLOAD_MAX, frame, too_large
from precis.store import usage
from precis.store.db import get_db

logger = Logger(child=True)

SERVER_INFO = {"name": "precis", "title": "Precis", "version": "3.0.0"}  # the v3 API it serves
WORKSPACE_HEADER = "x-honcho-workspace-id"  # Honcho's MCP server's: the default of every tool's workspace_id
LIST_TTL_MS = 300_000  # the catalogue changes with a deploy only: a client keeps an old one five minutes at most
_JSON = {"Content-Type": "application/json"}


@lru_cache(maxsize=1)
def instructions() -> str:
    return (Path(__file__).parent / "instructions.md").read_text(encoding="utf-8")


def _answer(status: int, body: dict[str, Any] | None = None, headers: dict[str, str] | None = None) -> dict:
    answer: dict[str, Any] = {
        "statusCode": status,
        "headers": {**(_JSON if body is not None else {}), **(headers or {})},
    }
    answer["body"] = json.dumps(body, ensure_ascii=False, separators=(",", ":")) if body is not None else ""
    return answer


def _rpc_error(exc: RpcError, headers: dict[str, str] | None = None) -> dict:
    return _answer(exc.status, exc.body(), headers)


def _challenge(detail: str, error: str | None = None) -> dict[str, str]:
    """RFC 6750's challenge: no error code when no key came, else the code and a sentence (no quotes in it)."""
    if error is None:
        return {"WWW-Authenticate": 'Bearer realm="precis"'}
    return {
        "WWW-Authenticate": f'Bearer realm="precis", error="{error}", '
        f'error_description="{detail.replace(chr(34), chr(39))}"'
    }


def _headers(event: dict) -> dict[str, str]:
    return {k.lower(): v for k, v in (event.get("headers") or {}).items()}


def _body(event: dict) -> str:
    raw = event.get("body") or ""
    if not event.get("isBase64Encoded"):
        return raw
    try:
        return base64.b64decode(raw, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        raise RpcError(protocol.PARSE_ERROR, "Parse error: the body is not UTF-8 JSON", status=400) from None


def _principal(headers: dict[str, str]):
    """The key's principal, or None when the deployment checks no keys; Unauthorized for a missing or bad key."""
    from precis.settings import get_settings

    if not get_settings().auth:
        return None
    from precis.auth import bearer, verify_key
    from precis.secrets import jwt_secret

    return verify_key(bearer(headers), jwt_secret())


def _foreign_origin(headers: dict[str, str]) -> bool:
    """A browser page of another site (a DNS-rebinding attack on a local server): its Origin is not this host."""
    origin = headers.get("origin")
    return origin is not None and urlsplit(origin).netloc != headers.get("host")


def handle(event: dict) -> dict:
    """The HTTP answer to one request to /mcp."""
    method = (event.get("requestContext", {}).get("http", {}).get("method") or "POST").upper()
    if method != "POST":
        return _answer(
            405,
            {
                "jsonrpc": "2.0",
                "id": None,
                "error": {
                    "code": protocol.INVALID_REQUEST,
                    "message": f"{method} is not served: this endpoint is stateless, with no "
                    "stream to open and no session to end; POST each message",
                },
            },
            {"Allow": "POST"},
        )
    headers = _headers(event)
    if _foreign_origin(headers):
        return _rpc_error(RpcError(protocol.INVALID_REQUEST, "Origin not allowed", status=403))
    try:
        principal = _principal(headers)
    except Unauthorized as exc:
        error = None if "missing Authorization" in exc.detail else "invalid_token"
        return _rpc_error(RpcError(protocol.UNAUTHORIZED, exc.detail, status=401), _challenge(exc.detail, error))
    except PrecisError as exc:  # no signing secret: the deployment's fault, said as the API says it
        return _rpc_error(RpcError(exc.status, exc.detail, status=exc.status))
    try:
        request = protocol.read(_body(event), headers)
    except RpcError as exc:
        return _rpc_error(exc)
    if request.notification:
        return _answer(202)
    call = Call(principal, headers.get(WORKSPACE_HEADER, "").strip() or None)
    try:
        # the tools' model calls (chat, query embeddings), written once as the request ends; Call.workspace names whose
        with usage.metered(get_db), meter.workspace(None):
            answer = dispatch(request, call)
        return _fitted(request, _answer(200, protocol.result(request, answer, SERVER_INFO)))
    except RpcError as exc:
        return _rpc_error(exc)
    except Forbidden as exc:
        return _rpc_error(
            RpcError(protocol.FORBIDDEN, exc.detail, status=403, request_id=request.id),
            _challenge(exc.detail, "insufficient_scope"),
        )
    except Exception:
        # A bug, every time: the client gets a generic answer, the log the traceback.
        logger.exception("unhandled error", extra={"method": request.method})
        return _rpc_error(
            RpcError(protocol.INTERNAL_ERROR, "internal error; it has been logged", status=500, request_id=request.id)
        )


def _fitted(request: Request, answer: dict) -> dict:
    """`answer` framed to fit Lambda's (base64 when escaping would inflate a large body); when it still would not, a
    tool error the agent can act on, and an error in the log: the tools' pages are fitted before this."""
    answer = frame(answer)
    size = too_large(answer)
    if size is None:
        return answer
    logger.error("answer past Lambda's payload limit: a bug, answers are fitted before this", extra={"bytes": size})
    detail = (
        f"the answer would be {size:,} bytes, past the {LAMBDA_PAYLOAD_MAX:,} a Lambda answer holds; "
        "ask for less (a smaller size, limit or top_k)"
    )
    if request.method == "tools/call":
        return _answer(200, protocol.result(request, error_result(detail), SERVER_INFO))
    return _rpc_error(RpcError(protocol.INTERNAL_ERROR, detail, status=413, request_id=request.id))


def dispatch(request: Request, call: Call) -> dict[str, Any]:
    """The result of one request, by method."""
    if request.method == "initialize" and not request.modern:
        return {
            "protocolVersion": request.version,
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": SERVER_INFO,
            "instructions": instructions(),
        }
    if request.method == "server/discover" and request.modern:
        return {
            "supportedVersions": list(protocol.SUPPORTED_VERSIONS),
            "capabilities": {"tools": {}},
            "instructions": instructions(),
            "ttlMs": LIST_TTL_MS,
            "cacheScope": "public",
        }
    if request.method == "ping" and not request.modern:  # 2026-07-28 removed ping
        return {}
    if request.method == "tools/list":
        if request.params.get("cursor") is not None:
            raise RpcError(
                protocol.INVALID_PARAMS,
                "Invalid params: unknown cursor (the tools come in one page)",
                request_id=request.id,
            )
        listed: dict[str, Any] = {"tools": tool_definitions()}
        return {**listed, "ttlMs": LIST_TTL_MS, "cacheScope": "public"} if request.modern else listed
    if request.method == "tools/call":
        return _call_tool(request, call)
    raise protocol.method_not_found(request)


@lru_cache(maxsize=1)
def tool_definitions() -> list[dict[str, Any]]:
    """tools/list's answer, the same for every caller: read from catalogue.json, which the catalogue's own models
    wrote (tests/mcp keeps the two equal). Generating it takes ~0.5 s of pydantic schema building, which a cold
    start would pay on its first tools/list."""
    return json.loads((Path(__file__).parent / "catalogue.json").read_text(encoding="utf-8"))


def _call_tool(request: Request, call: Call) -> dict[str, Any]:
    name, arguments = request.params.get("name"), request.params.get("arguments") or {}
    if not isinstance(name, str) or name not in CATALOGUE.tools:
        raise RpcError(protocol.INVALID_PARAMS, f"Unknown tool: {name}", request_id=request.id)
    if not isinstance(arguments, dict):
        raise RpcError(protocol.INVALID_PARAMS, "Invalid params: arguments must be an object", request_id=request.id)
    if request.unreadable:  # text that is not Unicode: a bad argument, answered as the catalogue answers one
        return error_result(f"invalid arguments: {request.unreadable}")
    return CATALOGUE.call(name, arguments, call)
