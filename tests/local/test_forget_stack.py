"""A message delete on the local stack (`make dev`) under its replay chaos (every stream batch twice, partitions in
either order): after the cascade, the canary is nowhere in the stack's table or bucket."""

from __future__ import annotations

import json
import time

from local.moto_backend import client
from tests.memory.test_forget_canary import CANARY, LINES, bucket_objects, canary_message, table_items, traces
from tests.stack import DEFAULT_CHAOS, request

assert "replay" in DEFAULT_CHAOS  # the module's stack runs with it (tests/conftest.py, `stack`)
WS = "/v3/workspaces/wforget"
S = f"{WS}/sessions/s1"


def _wait_until(condition, what: str) -> None:
    """Poll `condition` until it holds; the bound (minutes) only keeps a broken build from hanging."""
    deadline = time.monotonic() + 300
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.05)


def _call(stack, method: str, path: str, body=None, headers=None):
    data = json.dumps(body).encode() if body is not None else None
    status, _, raw = request(stack.port, method, path, {"content-type": "application/json", **(headers or {})}, data)
    return status, json.loads(raw) if raw else None


def _post(stack, *lines, headers=None) -> list[dict]:
    body = {"messages": [{"peer_id": p, "content": t} for p, t in lines]}
    status, answer = _call(stack, "POST", f"{S}/messages", body, headers)
    assert status == 201, answer
    return answer


def test_a_deleted_message_leaves_no_trace_on_the_stack_under_replay(stack):
    endpoint = json.loads(stack.dev_json.read_text())["moto_endpoint"]
    aws = {name: client(name, endpoint) for name in ("dynamodb", "s3")}
    assert _call(stack, "POST", "/v3/workspaces", {"id": "wforget"})[0] == 201
    peers = {"alice": {}, "bob": {"observe_others": True}}
    assert _call(stack, "POST", f"{WS}/sessions", {"id": "s1", "peers": peers})[0] == 201
    lines = [(peer, f"{text} ({n})") for n in range(5) for peer, text in LINES]
    _post(stack, *lines[:14])
    (planted,) = _post(stack, ("alice", canary_message()), headers={"Idempotency-Key": "k1"})
    _post(stack, *lines[14:29])  # 30 messages: the short summary through #20 covers the canary (#15)

    def built() -> bool:
        summary = _call(stack, "GET", f"{S}/summaries")[1]["short_summary"]
        status, queue = _call(stack, "GET", f"{WS}/queue/status?session_id=s1")
        idle = not queue["pending_work_units"] and not queue["in_progress_work_units"]
        concluded = _call(stack, "POST", f"{WS}/conclusions/list", {})[1]["items"]
        return (
            bool(summary) and CANARY in summary["content"] and idle and any(CANARY in c["content"] for c in concluded)
        )

    # (a job stored is in progress until applied: its conclusions are written then; under load that is later)
    _wait_until(built, "the canary's summary and conclusions")
    assert traces(table_items(aws), bucket_objects(aws))

    assert _call(stack, "DELETE", f"{S}/messages/{planted['id']}")[0] == 204

    def forgotten() -> bool:
        session = aws["dynamodb"].get_item(
            TableName="precis-local", Key={"PK": {"S": "WS#wforget"}, "SK": {"S": "SESSION#s1"}}, ConsistentRead=True
        )["Item"]
        summary = _call(stack, "GET", f"{S}/summaries")[1]["short_summary"]
        return "forgetting" not in session and summary is not None and summary["message_id"] != ""

    _wait_until(forgotten, "the cascade done and the summaries made again")
    assert traces(table_items(aws), bucket_objects(aws)) == []
    status, listed = _call(stack, "POST", f"{S}/messages/list?size=100")
    assert status == 200 and listed["total"] == 29 and planted["id"] not in [m["id"] for m in listed["items"]]
