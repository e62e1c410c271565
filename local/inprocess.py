"""The template's handlers called in-process, as Lambda and API Gateway call them: a function's handler module
imported once (its cold start), invoked under its execution role (local.iam) with a Lambda context, and HTTP requests
turned into API Gateway HTTP API (v2.0) events for the function that serves the route. Shared by the tests
(tests/handlers.py) and the benchmarks (bench/front.py), which must not import each other."""

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

from local import iam
from local.lambda_context import LambdaContext
from local.template import template
from local.worker import function_role

_MODULES: dict[str, Any] = {}


def handler_module(logical_id: str):
    """The handler module of a template function, imported once under a unique name."""
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


def invoke(logical_id: str, event: dict) -> dict:
    """The function's handler on `event`, its AWS calls checked against its execution role (local.iam), as on AWS."""
    fn = template().functions[logical_id]
    context = LambdaContext(function_name=fn.logical_id, timeout_s=fn.timeout)  # the template's timeout, as Lambda
    module = handler_module(logical_id)  # its init too runs under the role, as a cold start does
    previous = iam.current()
    iam.enforce(function_role(template(), fn))
    try:
        return module.lambda_handler(event, context)
    finally:
        iam.enforce(previous)


def route_of(method: str, path: str):
    """(the template's route, its path parameters, how many literal parts matched) for a request, or None."""
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


@dataclass
class Reply:
    status: int
    body: Any
    headers: dict[str, str]
    payload_bytes: int = 0  # the handler's whole answer as Lambda serializes it (what its 6 MB limit counts)

    def json(self) -> Any:
        return self.body


@dataclass
class Form:
    """A multipart/form-data body encoded as the honcho-ai SDK encodes it (httpx): `call` sends it base64-encoded,
    as API Gateway hands multipart bodies over. `files`: name -> (filename, bytes, content type)."""

    fields: dict[str, str]
    files: dict[str, tuple[str, bytes, str]]

    def encode(self) -> tuple[bytes, str]:
        import httpx

        if not self.files:  # httpx would send it urlencoded
            parts = "".join(
                f'--b0undary\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'
                for name, value in self.fields.items()
            )
            return f"{parts}--b0undary--\r\n".encode(), "multipart/form-data; boundary=b0undary"
        request = httpx.Request("POST", "http://precis.test/", data=self.fields, files=self.files)
        return request.read(), request.headers["content-type"]


def http_event(
    method: str, url: str, body: Any = None, headers: dict[str, str] | None = None, raw: str | None = None
) -> tuple[str, dict]:
    parts = urlsplit(url)
    found = route_of(method, parts.path)
    assert found, f"no route for {method} {parts.path}"
    route, params, _ = found
    query: dict[str, str] = {}
    for k, v in parse_qsl(parts.query, keep_blank_values=True):
        query[k] = f"{query[k]},{v}" if k in query else v
    text = raw if raw is not None else (None if body is None or isinstance(body, Form) else json.dumps(body))
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
                "userAgent": "local",
            },
            "requestId": str(uuid.uuid4()),
            "routeKey": f"{route.method} {route.path}",
            "stage": "$default",
            "timeEpoch": int(time.time() * 1000),
            "accountId": "123456789012",
            "apiId": "local",
            "domainName": "localhost",
        },
        "body": text,
        "isBase64Encoded": False,
    }
    if isinstance(body, Form):
        data, content_type = body.encode()
        event["headers"]["content-type"] = content_type
        event["body"], event["isBase64Encoded"] = base64.b64encode(data).decode(), True
    return route.function, event


def call(
    method: str,
    url: str,
    body: Any = None,
    *,
    headers: dict[str, str] | None = None,
    raw: str | None = None,
    **query: Any,
) -> Reply:
    if query:
        url = f"{url}?{urlencode(query, doseq=True)}"
    function, event = http_event(method, url, body, headers, raw)
    out = invoke(function, event)
    text = out.get("body")
    if text and out.get("isBase64Encoded"):  # as API Gateway does: the client gets the decoded bytes
        text = base64.b64decode(text).decode("utf-8")
    headers = out.get("headers") or {}
    is_json = "json" in {k.lower(): v for k, v in headers.items()}.get("content-type", "application/json")
    return Reply(
        out["statusCode"],
        (json.loads(text) if is_json else text) if text else None,
        headers,
        len(json.dumps(out, ensure_ascii=False).encode("utf-8")),
    )  # python3.12 marshals unescaped
