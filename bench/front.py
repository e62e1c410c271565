"""Precis as its callers reach it: the template's handlers invoked as Lambda invokes them (API Gateway v2 events, the
stream's records, the schedule's events), and the AWS requests they make counted at the door of the in-process AWS.

The benches import neither the store nor the tests: what a handler asks of DynamoDB or S3 is seen through botocore's
own event hooks, installed for every client botocore makes after `install()` (as moto's in-process backend installs
its own), so the code measured runs unchanged. A client the bench makes for itself is left out with `own(client)`.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

# The events the meters listen to: each is forwarded to AWS's emitter first, in the middle and last of a client's own
# handlers, so a meter registered with register_first / register / register_last keeps its place.
_EVENTS = (
    "provide-client-params",
    "before-parameter-build",
    "before-call",
    "before-send",
    "needs-retry",
    "after-call",
    "after-call-error",
)


class _Emitters:
    """What a meter registers on, as on a client's `meta.events`: three emitters, one per place."""

    def __init__(self) -> None:
        from botocore.hooks import HierarchicalEmitter

        self.first, self.middle, self.last = HierarchicalEmitter(), HierarchicalEmitter(), HierarchicalEmitter()

    def register_first(self, event: str, handler) -> None:
        self.first.register(event, handler)

    def register(self, event: str, handler) -> None:
        self.middle.register(event, handler)

    def register_last(self, event: str, handler) -> None:
        self.last.register(event, handler)

    def unregister(self, event: str, handler) -> None:
        for emitter in (self.first, self.middle, self.last):
            emitter.unregister(event, handler)


class _Meta:
    def __init__(self) -> None:
        self.events = _Emitters()


class _Aws:
    """Every AWS client of this process but the bench's own, as one client-like object: meters (`Requests`, the cost
    bench's `Capacity`) register on `AWS.meta.events` exactly as on a client's."""

    def __init__(self) -> None:
        self.meta = _Meta()


AWS = _Aws()


def _forward(place: str):
    def forward(event_name: str, **kwargs):
        emitter = getattr(AWS.meta.events, place)
        for _handler, response in emitter.emit(event_name, **kwargs):
            if response is not None:
                return response
        return None

    forward.__name__ = f"forward_{place}"
    return forward


_FORWARDERS = {place: _forward(place) for place in ("first", "middle", "last")}


def install() -> None:
    """Forward the meters' events of every botocore session made from now on (the handlers' clients included)."""
    from botocore import handlers

    if any(spec[1] in _FORWARDERS.values() for spec in handlers.BUILTIN_HANDLERS):
        return
    for event in _EVENTS:
        handlers.BUILTIN_HANDLERS.append((event, _FORWARDERS["first"], handlers.REGISTER_FIRST))
        handlers.BUILTIN_HANDLERS.append((event, _FORWARDERS["middle"]))
        handlers.BUILTIN_HANDLERS.append((event, _FORWARDERS["last"], handlers.REGISTER_LAST))


def own(client):
    """`client`, the bench's own (seeding, reading a result, sizing items): its requests are not counted."""
    for event in _EVENTS:
        for forwarder in _FORWARDERS.values():
            client.meta.events.unregister(event, forwarder)
    return client


# --- the handlers, as Lambda and API Gateway invoke them --------------------------------------------------------------

_MODULES: dict[str, Any] = {}


def handler_module(logical_id: str):
    """The handler module of a template function, imported once under a unique name (a cold start's import)."""
    from local.template import template

    if logical_id not in _MODULES:
        fn = template().functions[logical_id]
        module_name, _ = fn.handler.rsplit(".", 1)
        spec = importlib.util.spec_from_file_location(
            f"precis_fn_{fn.code_dir.name}", fn.code_dir / f"{module_name}.py"
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        _MODULES[logical_id] = module
    return _MODULES[logical_id]


def invoke(logical_id: str, event: dict) -> Any:
    """The function's handler on `event` with a Lambda context, under its execution role (local.iam), as on AWS."""
    from local import iam
    from local.lambda_context import LambdaContext
    from local.template import template
    from local.worker import function_role

    fn = template().functions[logical_id]
    context = LambdaContext(function_name=fn.logical_id, timeout_s=fn.timeout)
    module = handler_module(logical_id)
    previous = iam.current()
    iam.enforce(function_role(template(), fn))
    try:
        return module.lambda_handler(event, context)
    finally:
        iam.enforce(previous)


def _match(method: str, path: str):
    from local.template import template

    parts = path.strip("/").split("/")
    best = None
    for route in template().routes:
        rparts = route.path.strip("/").split("/")
        if route.method != method or len(rparts) != len(parts):
            continue
        params, literal = {}, 0
        for r, p in zip(rparts, parts):
            if r.startswith("{"):
                params[r[1:-1]] = p
            elif r == p:
                literal += 1
            else:
                break
        else:
            if best is None or literal > best[2]:
                best = (route, params, literal)
    return best


def http_event(method: str, url: str, body: Any = None, headers: dict[str, str] | None = None) -> tuple[str, dict]:
    """(the function that serves the route, the API Gateway HTTP API v2.0 event it receives) for one request."""
    parts = urlsplit(url)
    found = _match(method, parts.path)
    assert found, f"no route for {method} {parts.path}"
    route, params, _ = found
    query: dict[str, str] = {}
    for k, v in parse_qsl(parts.query, keep_blank_values=True):
        query[k] = f"{query[k]},{v}" if k in query else v
    event = {
        "version": "2.0",
        "routeKey": f"{route.method} {route.path}",
        "rawPath": parts.path,
        "rawQueryString": parts.query,
        "headers": {"content-type": "application/json", **{k.lower(): v for k, v in (headers or {}).items()}},
        "queryStringParameters": query or None,
        "pathParameters": params or None,
        "requestContext": {
            "http": {
                "method": method,
                "path": parts.path,
                "protocol": "HTTP/1.1",
                "sourceIp": "127.0.0.1",
                "userAgent": "bench",
            },
            "requestId": str(uuid.uuid4()),
            "routeKey": f"{route.method} {route.path}",
            "stage": "$default",
            "timeEpoch": int(time.time() * 1000),
            "accountId": "123456789012",
            "apiId": "local",
            "domainName": "localhost",
        },
        "body": None if body is None else json.dumps(body),
        "isBase64Encoded": False,
    }
    return route.function, event


@dataclass
class Reply:
    status: int
    body: Any
    headers: dict[str, str]

    def json(self) -> Any:
        return self.body


def call(method: str, url: str, body: Any = None, *, headers: dict[str, str] | None = None, **query: Any) -> Reply:
    """One API request through the handler that serves it, as API Gateway calls it; its answer parsed."""
    if query:
        url = f"{url}?{urlencode(query, doseq=True)}"
    function, event = http_event(method, url, body, headers)
    out = invoke(function, event)
    text = out.get("body")
    if text and out.get("isBase64Encoded"):
        text = base64.b64decode(text).decode()
    answer_headers = out.get("headers") or {}
    is_json = "json" in {k.lower(): v for k, v in answer_headers.items()}.get("content-type", "application/json")
    return Reply(out["statusCode"], (json.loads(text) if is_json else text) if text else None, answer_headers)
