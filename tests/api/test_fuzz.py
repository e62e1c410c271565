"""The whole HTTP API fuzzed from its own OpenAPI document (schemathesis) on the local stack, auth on as deployed.

schemathesis lives in .venv-security (`make security` makes it; its pins differ from the app's) and runs as a
subprocess with a fixed seed and a bounded number of examples per operation. What must hold: no 5xx, responses in
JSON, bodies as documented (422s included), and every documented operation refuses a request without a valid key.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from local.template import ROOT, template
from precis.auth import mint_key
from tests.stack import Stack, request

pytestmark = pytest.mark.stack

ST = ROOT / ".venv-security" / "bin" / "st"
SECRET = "fuzz-test-secret-0123456789abcdef"
SEED = 20261129
MAX_EXAMPLES = 10  # per operation, fuzzing and stateful phases; the coverage phase adds its boundary cases on top
CHECKS = "not_a_server_error,content_type_conformance,response_schema_conformance"
# status_code_conformance stays off: the document does not declare 201/202/204 (the routes have no `responses=`).
CONFIG = """
[phases.coverage]
# Methods no route has are API Gateway's to answer (404), not the functions': sending them tests the local gateway.
unexpected-methods = []
"""
# The list routes share ListBody and the paging parameters: the deepest of them (messages/list) gets the coverage
# phase's boundary cases for all five, which keeps the run near a minute.
SAME_AS_MESSAGES_LIST = [
    "/v3/workspaces/list",
    "/v3/workspaces/{workspace_id}/peers/list",
    "/v3/workspaces/{workspace_id}/sessions/list",
    "/v3/workspaces/{workspace_id}/peers/{peer_id}/sessions",
]
# Half the generated ids name resources that exist (seeded below), so fuzzing reaches past the 404s into the store.
SEEDED = {"workspace_id": ["fuzz-ws"], "session_id": ["s1", "s2", "s3", "s4"], "peer_id": ["alice", "bob"]}
# public, and out of the document (the docs' and the console's pages and files are not API)
SERVICE_ROUTES = {
    ("GET", "/health"),
    ("GET", "/openapi.json"),
    ("GET", "/docs"),
    ("GET", "/docs/{name}"),
    ("GET", "/console"),
    ("GET", "/console/{name}"),
}
# The MCP endpoint speaks JSON-RPC, not the v3 API: tests/mcp drives it with MCP clients.
SERVICE_ROUTES |= {("POST", "/mcp"), ("GET", "/mcp"), ("DELETE", "/mcp")}


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    running = Stack(tmp_path_factory.mktemp("fuzz"), env={"PRECIS_AUTH": "true", "PRECIS_JWT_SECRET": SECRET})
    try:
        running.wait_healthy()
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def document(stack) -> dict[str, Any]:
    status, headers, body = request(stack.port, "GET", "/openapi.json")
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    return json.loads(body)


def _operations(document: dict[str, Any]) -> set[tuple[str, str]]:
    return {(method.upper(), path) for path, ops in document["paths"].items() for method in ops}


def test_the_document_covers_every_route_of_the_template(document):
    assert _operations(document) == {(r.method, r.path) for r in template().routes} - SERVICE_ROUTES


def test_every_documented_operation_refuses_a_missing_or_forged_key(stack, document):
    ids = {
        "workspace_id": "w1",
        "peer_id": "p1",
        "session_id": "s1",
        "message_id": "m1",
        "conclusion_id": "c" * 21,
        "scope_id": "sc1",
        "endpoint_id": "e" * 21,
        "export_id": "0" * 16,
        "import_id": "0" * 16,
    }
    forged = mint_key("not-" + SECRET, admin=True)
    for method, path in sorted(_operations(document)):
        target = path.format(**ids)
        for headers in ({}, {"Authorization": f"Bearer {forged}"}):
            status, _, body = request(
                stack.port,
                method,
                target,
                {"Content-Type": "application/json", **headers},
                b"{}" if method != "GET" else None,
            )
            assert status == 401, f"{method} {path} with {sorted(headers) or 'no key'}: {status} {body[:200]!r}"
            assert isinstance(json.loads(body)["detail"], str)


def test_what_the_fuzzer_found_stays_fixed(stack, document):
    """Each of these was a 500 or a broken response before; the fuzzer may not draw them again."""
    key = {"Authorization": f"Bearer {mint_key(SECRET, admin=True)}"}
    json_body = {**key, "Content-Type": "application/json"}
    # a body is read as JSON whatever the Content-Type says (`curl -d` sends form-urlencoded)
    for content_type in ("text/plain", "multipart/form-data", "application/x-www-form-urlencoded"):
        status, _, body = request(
            stack.port, "POST", "/v3/workspaces", {**key, "Content-Type": content_type}, b'{"id": "w"}'
        )
        assert status in (200, 201), body
        status, _, body = request(stack.port, "POST", "/v3/workspaces", {**key, "Content-Type": content_type}, b"id=w")
        assert status == 422 and json.loads(body)["detail"][0]["type"] == "json_invalid"
    status, _, body = request(stack.port, "POST", "/v3/workspaces", json_body, b'\xff\xfe{"id": "w"}')
    assert status == 422 and json.loads(body)["detail"][0]["loc"] == ["body"]

    assert request(stack.port, "POST", "/v3/workspaces", json_body, b'{"id": "regressions"}')[0] in (200, 201)
    assert request(
        stack.port, "POST", "/v3/workspaces/regressions/sessions", json_body, b'{"id": "s", "peers": {"p": {}}}'
    )[0] in (200, 201)
    conn = http.client.HTTPConnection("127.0.0.1", stack.port, timeout=30)
    try:  # one kept-alive connection: a 204 that carried a body would corrupt the next response
        conn.request("PUT", "/v3/workspaces/regressions/sessions/s/peers/p/config", b'{"observe_me": false}', json_body)
        answer = conn.getresponse()
        assert (answer.status, answer.read()) == (204, b"")
        conn.request("GET", "/v3/workspaces/regressions/sessions/s/peers/p/config", headers=key)
        answer = conn.getresponse()
        assert answer.status == 200 and json.loads(answer.read())["observe_me"] is False
    finally:
        conn.close()

    # A rule across parameters answers {"detail": "<sentence>"}; the document says a 422 may be either shape.
    status, _, body = request(
        stack.port, "GET", "/v3/workspaces/regressions/sessions/s/context?scope=x&peer_perspective=p", key
    )
    assert status == 422 and isinstance(json.loads(body)["detail"], str)
    context = document["paths"]["/v3/workspaces/{workspace_id}/sessions/{session_id}/context"]["get"]
    shapes = context["responses"]["422"]["content"]["application/json"]["schema"]["anyOf"]
    assert {"$ref": "#/components/schemas/Error"} in shapes


def test_hostile_keys_and_bodies_are_4xx_and_text_is_utf8_over_http(stack):
    """Hostile input, end to end through the gateway: a nested JWT header is a 401, a nested body a 422, and a CJK
    message comes back as UTF-8 bytes rather than \\u escapes."""
    key = {"Authorization": f"Bearer {mint_key(SECRET, admin=True)}", "Content-Type": "application/json"}
    nested_header = base64.urlsafe_b64encode(b"[" * 1500 + b"]" * 1500).rstrip(b"=").decode()
    for method, path in (("POST", "/v3/workspaces/list"), ("GET", "/v3/workspaces/w/sessions/s/context")):
        status, _, body = request(stack.port, method, path, {"Authorization": f"Bearer {nested_header}.e30.x"})
        assert status == 401 and json.loads(body)["detail"].startswith("malformed key"), body
    for body in (b"[" * 5000 + b"]" * 5000, b'{"a":' * 3000 + b"1" + b"}" * 3000):
        status, _, answer = request(stack.port, "POST", "/v3/workspaces", key, body)
        assert status == 422 and json.loads(answer)["detail"][0]["type"] == "json_too_deep", answer

    assert request(stack.port, "POST", "/v3/workspaces", key, b'{"id": "utf8"}')[0] in (200, 201)
    text = "你好，世界"
    status, headers, answer = request(
        stack.port,
        "POST",
        "/v3/workspaces/utf8/sessions/s/messages",
        key,
        json.dumps({"messages": [{"content": text, "peer_id": "p"}]}).encode(),
    )
    assert status == 201 and headers["Content-Type"].startswith("application/json")
    assert text.encode() in answer and b"\\u" not in answer
    assert json.loads(answer)[0]["content"] == text


def _seed(stack, admin: str) -> dict[str, list[str]]:
    """A workspace with sessions, members and messages; the ids to offer the fuzzer, by path parameter."""
    headers = {"Authorization": f"Bearer {admin}", "Content-Type": "application/json"}

    def post(path: str, body: Any) -> Any:
        status, _, raw = request(stack.port, "POST", path, headers, json.dumps(body).encode())
        assert status in (200, 201), (path, status, raw)
        return json.loads(raw)

    (ws,) = SEEDED["workspace_id"]
    post("/v3/workspaces", {"id": ws})
    message_ids = []
    for session in SEEDED["session_id"]:
        post(f"/v3/workspaces/{ws}/sessions", {"id": session, "peers": {p: {} for p in SEEDED["peer_id"]}})
        sent = post(
            f"/v3/workspaces/{ws}/sessions/{session}/messages",
            {"messages": [{"content": f"message {i}", "peer_id": SEEDED["peer_id"][i % 2]} for i in range(3)]},
        )
        message_ids += [m["id"] for m in sent]
    made = post(
        f"/v3/workspaces/{ws}/conclusions",
        {
            "conclusions": [
                {
                    "content": f"alice likes tea number {i}",
                    "observer_id": "bob",
                    "observed_id": "alice",
                    "session_id": "s1",
                }
                for i in range(3)
            ]
        },
    )
    post(f"/v3/workspaces/{ws}/scopes", {"id": "therapy"})
    return {**SEEDED, "message_id": message_ids, "conclusion_id": [c["id"] for c in made], "scope_id": ["therapy"]}


def _config(ids: dict[str, list[str]]) -> str:
    lines = [CONFIG]
    for path in SAME_AS_MESSAGES_LIST:
        lines += ["[[operations]]", f"include-path = {json.dumps(path)}", "phases.coverage.enabled = false", ""]
    for name, values in ids.items():
        lines += [f"[dictionaries.{name}]", f"values = {json.dumps(values)}", ""]
    lines.append("[parameters]")
    lines += [f'"path.{name}" = {{ dictionary = "{name}", probability = 0.5 }}' for name in ids]
    return "\n".join(lines) + "\n"


def _failures(ndjson: Path) -> list[dict[str, Any]]:
    """Every failed check of the run: the operation, the check, the case sent and the status it got."""
    found = []
    for line in ndjson.read_text().splitlines():
        event = json.loads(line)
        recorder = event.get("ScenarioFinished", {}).get("recorder")
        if not recorder:
            continue
        for case_id, checks in recorder.get("checks", {}).items():
            for check in checks:
                if check["status"] != "failure":
                    continue
                failure = (check.get("failure_info") or {}).get("failure") or {}
                interaction = recorder.get("interactions", {}).get(case_id) or {}
                sent = interaction.get("request") or {}
                found.append(
                    {
                        "operation": failure.get("operation") or recorder.get("label"),
                        "check": check["name"],
                        "title": failure.get("title"),
                        "message": failure.get("message"),
                        "status": (interaction.get("response") or {}).get("status_code"),
                        "method": sent.get("method"),
                        "uri": sent.get("uri"),
                        "body": _body(sent),
                    }
                )
    return found


def _body(sent: dict[str, Any]) -> Any:
    """The request body as sent: JSON when it parses, else the text (or bytes) itself."""
    raw = (sent.get("body") or {}).get("$base64")
    if raw is None:
        return None
    data = base64.b64decode(raw)
    try:
        return json.loads(data)
    except ValueError:
        return data.decode("utf-8", "replace")


def _hypothesis_raced(output: str) -> bool:
    """hypothesis, describing a strategy in schemathesis's worker thread, iterated sys.modules while another worker
    imported a module ("RuntimeError: dictionary changed size during iteration" in its lambda_sources): a race
    inside schemathesis's process, reported as a run error; it says nothing about the API."""
    return "dictionary changed size during iteration" in output and "hypothesis/internal/lambda_sources.py" in output


@pytest.mark.skipif(not ST.exists(), reason="needs .venv-security (make security)")
def test_fuzzing_finds_no_server_error_and_no_undocumented_response(stack, tmp_path):
    admin = mint_key(SECRET, admin=True)
    (tmp_path / "schemathesis.toml").write_text(_config(_seed(stack, admin)))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SCHEMATHESIS_", "HYPOTHESIS_"))}
    command = [
        str(ST),
        "--config-file",
        str(tmp_path / "schemathesis.toml"),
        "run",
        f"{stack.url}/openapi.json",
        "--url",
        stack.url,
        "--header",
        f"Authorization: Bearer {admin}",
        "--checks",
        CHECKS,
        "--max-examples",
        str(MAX_EXAMPLES),
        "--seed",
        str(SEED),
        "--generation-database",
        "none",
        "--continue-on-failure",
        "--workers",
        "4",
        "--request-timeout",
        "30",
        "--no-color",
        "--report",
        "ndjson,json",
        "--report-dir",
        str(tmp_path),
    ]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    if _hypothesis_raced(done.stdout + done.stderr):  # schemathesis's own error, not an answer of ours: once more
        for report in tmp_path.glob("*json-*.*json"):
            report.unlink()
        done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    (tmp_path / "schemathesis.log").write_text(done.stdout + done.stderr)
    tail = (done.stdout + done.stderr)[-6000:]
    summaries = list(tmp_path.glob("json-*.json"))
    assert len(summaries) == 1, f"schemathesis exited {done.returncode} without its report:\n{tail}"
    report = json.loads(summaries[0].read_text())
    assert report["complete"] and not report["errors"], tail
    routes = len(template().routes) - len(SERVICE_ROUTES)
    assert report["operations"]["tested"] == report["operations"]["selected"] == routes, tail

    (ndjson,) = tmp_path.glob("ndjson-*.ndjson")
    failures = _failures(ndjson)
    assert not failures, "\n\n".join(json.dumps(f, default=str)[:1500] for f in failures) + "\n\n" + tail
    if done.returncode not in (0, 1):  # 1: failures found, which the lines above judged
        pytest.fail(f"schemathesis exited {done.returncode}:\n{tail}")
