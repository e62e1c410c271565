"""The interactive API docs (GET /docs): Swagger UI's files served by the context function itself, under the console's
strict policy, and the page in a real browser (tests/browser.py) against the local stack with auth on, as deployed:
it shows every operation of /openapi.json, loads nothing from elsewhere, and "Try it out" works with a key."""

from __future__ import annotations

import base64
import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from aws_lambda_powertools import event_handler

from local.template import LAYER_DIR, ROOT
from precis.api import docs
from precis.auth import ROUTES, Access, mint_key
from tests.handlers import http_event, invoke
from tests.stack import request

SECRET = "docs-test-secret-0123456789abcdef"
STACK_ENV = {"PRECIS_AUTH": "true", "PRECIS_JWT_SECRET": SECRET}
POWERTOOLS_ASSETS = event_handler.__path__[0] + "/openapi/swagger_ui"


def _get(path: str, headers: dict[str, str] | None = None) -> dict:
    function, event = http_event("GET", path, headers=headers)
    assert function == "ContextFunction"
    return invoke(function, event)


def _headers(answer: dict) -> dict[str, str]:
    return {k.lower(): v for k, v in (answer.get("headers") or {}).items()}


def _body(answer: dict) -> bytes:
    body = answer.get("body") or ""
    return base64.b64decode(body) if answer.get("isBase64Encoded") else body.encode()


# ---------------------------------------------------------------- the files, over HTTP


@pytest.mark.parametrize(
    ("path", "source", "content_type"),
    [
        ("/docs", LAYER_DIR / "precis" / "api" / "docs" / "index.html", "text/html; charset=utf-8"),
        ("/docs/docs.js", LAYER_DIR / "precis" / "api" / "docs" / "docs.js", "text/javascript; charset=utf-8"),
        (
            "/docs/swagger-ui-bundle.js",
            f"{POWERTOOLS_ASSETS}/swagger-ui-bundle.min.js",
            "text/javascript; charset=utf-8",
        ),
        ("/docs/swagger-ui.css", f"{POWERTOOLS_ASSETS}/swagger-ui.min.css", "text/css; charset=utf-8"),
    ],
)
def test_docs_files_are_served_with_their_type_and_the_consoles_strict_policy(path, source, content_type):
    answer = _get(path)
    headers = _headers(answer)
    assert answer["statusCode"] == 200 and headers["content-type"] == content_type
    assert _body(answer) == Path(source).read_bytes()  # the layer's own copies: Powertools ships Swagger UI's
    policy = dict(part.strip().split(" ", 1) for part in headers["content-security-policy"].split(";"))
    assert policy["default-src"] == "'none'" and policy["script-src"] == "'self'" and policy["style-src"] == "'self'"
    assert policy["connect-src"] == "'self'" and policy["img-src"] == "'self' data:"  # Swagger UI's icons
    assert policy["frame-ancestors"] == "'none'" and policy["form-action"] == "'none'"
    assert "unsafe" not in headers["content-security-policy"]  # no inline script or style, no eval
    assert headers["x-content-type-options"] == "nosniff" and headers["cache-control"] == "no-cache"


def test_the_page_loads_nothing_from_elsewhere_and_nothing_inline():
    page = (LAYER_DIR / "precis" / "api" / "docs" / "index.html").read_text()
    assert "<style" not in page and not re.search(r"\sstyle\s*=", page) and not re.search(r"\son[a-z]+\s*=", page)
    assert not re.search(r"(https?:)?//", page)
    assert re.findall(r'(?:src|href)="([^"#]+)"', page) == [
        "/console/favicon.svg",
        "/docs/swagger-ui.css",
        "/docs/swagger-ui-bundle.js",
        "/docs/docs.js",
        "/openapi.json",
    ]
    script = (LAYER_DIR / "precis" / "api" / "docs" / "docs.js").read_text()
    assert 'url: "/openapi.json"' in script and "validatorUrl: null" in script  # no document sent to swagger.io


def test_the_bundle_goes_out_gzipped_to_who_accepts_it_and_a_reload_that_has_it_gets_a_304():
    plain = _get("/docs/swagger-ui-bundle.js")
    zipped = _get("/docs/swagger-ui-bundle.js", {"Accept-Encoding": "gzip, deflate, br"})
    assert "content-encoding" not in _headers(plain) and _headers(zipped)["content-encoding"] == "gzip"
    assert gzip.decompress(_body(zipped)) == _body(plain) and len(_body(zipped)) < len(_body(plain)) / 2
    assert len(json.dumps(zipped)) < 1_000_000  # well inside Lambda's 6 MB answer, base64 included
    etag = _headers(plain)["etag"]
    assert _headers(zipped)["etag"] == etag and _headers(plain)["vary"] == "Accept-Encoding"
    again = _get("/docs/swagger-ui-bundle.js", {"If-None-Match": etag, "Accept-Encoding": "gzip"})
    assert again["statusCode"] == 304 and not _body(again) and _headers(again)["etag"] == etag
    assert _get("/docs/swagger-ui.css", {"If-None-Match": etag})["statusCode"] == 200  # another file's tag


@pytest.mark.parametrize(
    "name",
    [
        "nope.js",
        "__init__.py",
        "index.htm",
        "swagger-ui-bundle.min.js",
        "..",
        "%2e%2e",
        "..%2f__init__.py",
        "oauth2.py",
        "html.py",
        "DOCS.JS",
    ],
)
def test_any_other_docs_name_is_404(name):
    answer = _get(f"/docs/{name}")
    assert answer["statusCode"] == 404 and _headers(answer)["content-type"] == "application/json"
    assert "no such docs file" in json.loads(answer["body"])["detail"]


def test_the_docs_are_public_and_declare_the_key_every_documented_route_takes():
    assert ROUTES["GET /docs"] is ROUTES["GET /docs/{name}"] is ROUTES["GET /openapi.json"] is Access.PUBLIC
    from precis.api.app import openapi_document

    document = openapi_document()
    scheme = document["components"]["securitySchemes"]["bearer"]
    assert (scheme["type"], scheme["scheme"], scheme["bearerFormat"]) == ("http", "bearer", "JWT")
    assert document["security"] == [{"bearer": []}]  # every operation: none of the documented routes is public
    assert not any(path in document["paths"] for path in ("/docs", "/docs/{name}", "/health", "/openapi.json"))


def test_the_context_function_reads_the_docs_only_when_asked():
    """Its cold start imports no docs module and reads no file of them; a request reads the one file it asks for."""
    code = (
        "import importlib.util, sys; "
        "spec = importlib.util.spec_from_file_location('app', 'functions/context/app.py');"
        "app = importlib.util.module_from_spec(spec); spec.loader.exec_module(app);"
        "assert 'precis.api.docs' not in sys.modules, 'imported at cold start'"
    )
    env = {**os.environ, "PYTHONPATH": str(LAYER_DIR), "POWERTOOLS_METRICS_NAMESPACE": "Precis"}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    docs._read.cache_clear()
    _get("/docs/docs.js")
    assert docs._read.cache_info().currsize == 1


# ---------------------------------------------------------------- the page, in a browser, auth on


@pytest.mark.stack
def test_the_docs_answer_without_a_key_on_a_stack_with_auth(stack):
    """Honcho's TypeScript SDK tests poll GET /docs until it answers 200 before they send anything."""
    assert f"API docs: {stack.url}/docs " in stack.log.read_text()  # make dev says where they are
    status, headers, body = request(stack.port, "GET", "/docs")
    assert status == 200 and headers["Content-Type"] == "text/html; charset=utf-8" and b"<title>Precis API" in body
    assert request(stack.port, "POST", "/v3/workspaces/list")[0] == 401


@pytest.mark.stack
def test_the_page_shows_every_operation_loads_only_its_own_origin_and_tries_one_with_a_key(chromium, stack):
    from playwright.sync_api import expect

    document = json.loads(request(stack.port, "GET", "/openapi.json")[2])
    operations = sum(len(ops) for ops in document["paths"].values())
    context = chromium.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    errors, requested = [], []
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))  # a policy violation is one
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: requested.append(r.url))
    try:
        page.goto(f"{stack.url}/docs")
        page.wait_for_function("n => document.querySelectorAll('.opblock').length === n", arg=operations)

        listing = page.locator(".opblock", has=page.locator("[data-path='/v3/workspaces/list']"))
        listing.locator(".opblock-summary").click()
        listing.get_by_role("button", name="Try it out").click()
        listing.get_by_role("button", name="Execute").click()
        status = listing.locator(".live-responses-table tbody .response-col_status").first
        expect(status).to_contain_text("401")
        assert errors == ["Failed to load resource: the server responded with a status of 401 (Unauthorized)"]
        errors.clear()

        page.get_by_role("button", name="Authorize").first.click()
        page.locator("#auth-bearer-value").fill(mint_key(SECRET, admin=True))
        page.get_by_role("button", name="Apply credentials").click()
        page.locator(".modal-ux .btn-done").click()
        listing.get_by_role("button", name="Execute").click()
        expect(status).to_contain_text("200")
        answer = listing.locator(".live-responses-table tbody .response-col_description").first.inner_text()
        assert '"items": []' in answer and '"total": 0' in answer
    finally:
        context.close()
    assert errors == []
    assert {url for url in requested if not url.startswith(f"{stack.url}/")} == set()  # nothing from elsewhere
    assert f"{stack.url}/docs/swagger-ui-bundle.js" in requested and f"{stack.url}/openapi.json" in requested
