"""The README's receiver, run as written: it takes a real delivery from the webhook function, refuses a forged or
stale one, and handles a delivery sent twice once."""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.client
import json
import re
import threading
import time
from http.server import ThreadingHTTPServer

import pytest

from local.template import ROOT
from tests.handlers import call, invoke
from tests.webhooks.test_delivery import enqueue, receive

W = "/v3/workspaces/ws1"


def readme_receiver() -> dict:
    """The README's receiver block, executed: its module namespace (SECRET, seen, verified, Receiver)."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Webhooks and events") :]
    block = re.search(r"```python\n(.*?)```", section, re.S)
    assert block, "the README's webhooks section has no Python block"
    namespace: dict = {"__name__": "readme_receiver"}
    exec(compile(block.group(1), "README.md", "exec"), namespace)  # noqa: S102 - the README's own example
    return namespace


@pytest.fixture
def served(aws, monkeypatch):
    monkeypatch.setenv("PRECIS_WEBHOOKS_ALLOW_HTTP_LOCAL", "true")
    monkeypatch.setenv(
        "PRECIS_WEBHOOK_QUEUE_URL", aws["sqs"].get_queue_url(QueueName="precis-webhook-local")["QueueUrl"]
    )
    namespace = readme_receiver()
    server = ThreadingHTTPServer(("127.0.0.1", 0), namespace["Receiver"])
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/hooks"
    assert call("POST", "/v3/workspaces", {"id": "ws1"}).status == 201
    created = call("POST", f"{W}/webhooks", {"url": url})
    assert created.status == 201, created.body
    namespace["SECRET"] = created.body["secret"]
    yield namespace, server, created.body["id"]
    server.shutdown()
    server.server_close()


def post(server, headers: dict[str, str], body: bytes) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=10)
    try:
        conn.request("POST", "/hooks", body=body, headers={"content-type": "application/json", **headers})
        return conn.getresponse().status
    finally:
        conn.close()


def signed(secret: str, msg_id: str, stamp: int, body: bytes) -> dict[str, str]:
    key = base64.b64decode(secret.removeprefix("whsec_"))
    mac = base64.b64encode(hmac.new(key, f"{msg_id}.{stamp}.".encode() + body, hashlib.sha256).digest()).decode()
    return {"webhook-id": msg_id, "webhook-timestamp": str(stamp), "webhook-signature": f"v1,{mac}"}


def test_the_readmes_receiver_takes_a_real_delivery_once(aws, served, capsys):
    namespace, _, endpoint_id = served
    msg = enqueue(aws["sqs"], endpoint_id)
    records = receive(aws["sqs"])
    assert invoke("WebhookFunction", {"Records": records}) == {"batchItemFailures": []}
    assert namespace["seen"] == {msg["id"]}
    # SQS delivering the same message again: accepted (2xx, so not retried) and not handled twice.
    assert invoke("WebhookFunction", {"Records": records}) == {"batchItemFailures": []}
    assert namespace["seen"] == {msg["id"]}
    assert capsys.readouterr().out.count("test.event") == 1


def test_the_readmes_receiver_refuses_forged_and_stale_deliveries(served):
    namespace, server, _ = served
    body = json.dumps({"type": "test.event", "data": {"workspace_id": "ws1"}, "timestamp": "x"}).encode()
    now = int(time.time())
    assert post(server, signed(namespace["SECRET"], "msg_fresh", now, body), body) == 204
    assert post(server, signed(namespace["SECRET"], "msg_forged", now, body), body + b" ") == 401
    other = "whsec_" + base64.b64encode(b"another endpoint's secret 32 b!!").decode()
    assert post(server, signed(other, "msg_other", now, body), body) == 401
    assert post(server, signed(namespace["SECRET"], "msg_stale", now - 600, body), body) == 401
    assert namespace["seen"] == {"msg_fresh"}
