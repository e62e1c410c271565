"""API Gateway (HTTP API, payload format 2.0) in front of the local functions, routes read from template.yaml."""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import time
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from local.template import LocalNames, Route
from local.worker import REQUEST_TOO_LARGE, Invoker

MAX_BODY_BYTES = 10 * 1024 * 1024  # HTTP API's payload limit; Lambda's 6 MB (of event JSON) is the worker pool's
API_ID = "local"
_JSON = [("content-type", "application/json")]
_TOO_LARGE = b'{"message":"Request Entity Too Large"}'
log = logging.getLogger(__name__)


def match_route(routes: Iterable[Route], method: str, path: str) -> tuple[Route, dict[str, str]] | None:
    """The route API Gateway would pick for `method path`, and its path parameters (decoded).

    Literal segments win over variables, position by position from the left, like API Gateway does.
    """
    segments = path.split("/")
    best: tuple[tuple[int, ...], Route, dict[str, str]] | None = None
    for route in routes:
        if route.method != method:
            continue
        pattern = route.path.split("/")
        if len(pattern) != len(segments):
            continue
        params: dict[str, str] = {}
        rank: list[int] = []
        for want, got in zip(pattern, segments, strict=True):
            if want.startswith("{") and want.endswith("}") and got:
                params[want[1:-1]] = unquote(got)
                rank.append(1)
            elif want == got:
                rank.append(0)
            else:
                break
        else:
            if best is None or tuple(rank) < best[0]:
                best = (tuple(rank), route, params)
    return (best[1], best[2]) if best else None


def build_event(
    method: str,
    target: str,
    headers: list[tuple[str, str]],
    body: bytes,
    route: Route,
    params: dict[str, str],
    source_ip: str,
    protocol: str,
) -> dict[str, Any]:
    """The payload-format-2.0 event API Gateway sends for this request."""
    split = urlsplit(target)
    raw_path = unquote(split.path)  # HTTP APIs hand the function the decoded path
    merged: dict[str, str] = {}
    cookies: list[str] = []
    for name, value in headers:
        name = name.lower()
        if name == "cookie":
            cookies += [c.strip() for c in value.split(";") if c.strip()]
        else:
            merged[name] = f"{merged[name]},{value}" if name in merged else value
    merged.setdefault("x-forwarded-for", source_ip)
    merged.setdefault("x-forwarded-proto", "http")
    now = time.time()
    request_id = base64.b32encode(uuid.uuid4().bytes)[:16].decode()
    route_key = f"{route.method} {route.path}"
    names = LocalNames()
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": route_key,
        "rawPath": raw_path,
        "rawQueryString": split.query,
        "headers": merged,
        "requestContext": {
            "accountId": names.account,
            "apiId": API_ID,
            "domainName": merged.get("host", "localhost"),
            "domainPrefix": merged.get("host", "localhost").split(".")[0],
            "http": {
                "method": method,
                "path": raw_path,
                "protocol": protocol,
                "sourceIp": source_ip,
                "userAgent": merged.get("user-agent", ""),
            },
            "requestId": request_id,
            "routeKey": route_key,
            "stage": "$default",
            "time": datetime.fromtimestamp(now, UTC).strftime("%d/%b/%Y:%H:%M:%S +0000"),
            "timeEpoch": int(now * 1000),
        },
        "isBase64Encoded": False,
    }
    if cookies:
        event["cookies"] = cookies
    if split.query:
        query: dict[str, str] = {}
        for key, value in parse_qsl(split.query, keep_blank_values=True):
            query[key] = f"{query[key]},{value}" if key in query else value
        event["queryStringParameters"] = query
    if params:
        event["pathParameters"] = params
    if body:
        text = None
        if not merged.get("content-type", "").lower().startswith("multipart/"):  # API Gateway base64-encodes these
            with contextlib.suppress(UnicodeDecodeError):
                text = body.decode("utf-8")
        if text is None:
            event["body"], event["isBase64Encoded"] = base64.b64encode(body).decode(), True
        else:
            event["body"] = text
    return event


def http_response(payload: Any) -> tuple[int, list[tuple[str, str]], bytes]:
    """(status, headers, body) for a function's result, read the way API Gateway reads payload format 2.0."""
    if not (isinstance(payload, dict) and "statusCode" in payload):
        # A result without a statusCode is taken as a JSON body with status 200.
        body = payload if isinstance(payload, str) else json.dumps(payload)
        return 200, _JSON, body.encode()
    headers = [(k, str(v)) for k, v in (payload.get("headers") or {}).items()]
    headers += [(k, str(v)) for k, vs in (payload.get("multiValueHeaders") or {}).items() for v in vs]
    headers += [("set-cookie", c) for c in payload.get("cookies") or []]
    body = payload.get("body") or ""
    data = base64.b64decode(body) if payload.get("isBase64Encoded") else str(body).encode()
    return int(payload["statusCode"]), headers, data


class Gateway(ThreadingHTTPServer):
    """The HTTP API on 127.0.0.1: each request becomes an event for the function its route maps to."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], routes: list[Route], invokers: dict[str, Invoker]):
        super().__init__(address, _Handler)
        self.routes, self.invokers = routes, invokers


class _Handler(BaseHTTPRequestHandler):
    server: Gateway
    protocol_version = "HTTP/1.1"  # keep-alive, as SDK clients expect
    # The head and the body go out as two writes: with Nagle's algorithm the body waits for the client's delayed ACK
    # of the head, 40 ms on every answer.
    disable_nagle_algorithm = True

    def _handle(self) -> None:
        started = time.monotonic()
        method, path = self.command, urlsplit(self.path).path
        found = match_route(self.server.routes, method, path)
        function = found[0].function if found else "-"
        length = int(self.headers.get("content-length") or 0)
        if length > MAX_BODY_BYTES:
            for start in range(0, length, 1 << 20):  # drained, so the client gets to read the answer
                self.rfile.read(min(1 << 20, length - start))
            status = self._reply(413, _JSON, _TOO_LARGE)
        elif found is None:
            self.rfile.read(length)
            status = self._reply(404, _JSON, b'{"message":"Not Found"}')
        else:
            event = build_event(
                method,
                self.path,
                list(self.headers.items()),
                self.rfile.read(length),
                *found,
                source_ip=self.client_address[0],
                protocol=self.request_version,
            )
            status = self._invoke(function, event)
        elapsed = (time.monotonic() - started) * 1000
        log.info('%s "%s %s" %s %.0fms %s', self.client_address[0], method, self.path, status, elapsed, function)

    def _invoke(self, function: str, event: dict[str, Any]) -> int:
        result = self.server.invokers[function](event)
        error = result.error
        if not result.ok and isinstance(result.payload, dict) and result.payload.get("errorType") == REQUEST_TOO_LARGE:
            # Lambda refused the event (over 6 MB of JSON, headers and base64 included): API Gateway answers 413.
            log.warning("%s refused the event of %s: %s", function, event["routeKey"], error)
            return self._reply(413, _JSON, _TOO_LARGE)
        if result.ok:
            try:
                return self._reply(*http_response(result.payload), request_id=event["requestContext"]["requestId"])
            except (KeyError, TypeError, ValueError) as exc:
                error = f"malformed response: {exc!r}"
        # A function error, Function.ResponseSizeTooLarge (a result over 6 MB) included: HTTP APIs answer a bare 500.
        log.error("%s failed on %s: %s", function, event["routeKey"], error)
        return self._reply(500, _JSON, b'{"message":"Internal Server Error"}')

    def _reply(self, status: int, headers: list[tuple[str, str]], body: bytes, request_id: str = "") -> int:
        self.send_response(status)
        for name, value in headers:
            if name.lower() not in ("content-length", "connection", "transfer-encoding"):
                self.send_header(name, value)
        self.send_header("content-length", str(len(body)))
        if request_id:
            self.send_header("apigw-requestid", request_id)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        return status

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        """The access line is written by `_handle`, with the latency and the function."""

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = do_TRACE = do_QUERY = _handle
