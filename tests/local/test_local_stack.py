"""`make dev` and `make invoke` as a developer runs them: real processes, real HTTP on loopback."""

from __future__ import annotations

import base64
import http.client
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from local.__main__ import admin_key
from local.gateway import Gateway
from local.template import ROOT, Function, template
from local.worker import MAX_EVENT_BYTES, REQUEST_TOO_LARGE, FunctionPool, InvokeResult
from tests.stack import Stack, request

pytestmark = pytest.mark.stack

HEALTH_EVENT = {
    "version": "2.0",
    "routeKey": "GET /health",
    "rawPath": "/health",
    "rawQueryString": "",
    "headers": {"host": "localhost", "user-agent": "pytest"},
    "requestContext": {
        "accountId": "123456789012",
        "apiId": "local",
        "domainName": "localhost",
        "domainPrefix": "localhost",
        "http": {
            "method": "GET",
            "path": "/health",
            "protocol": "HTTP/1.1",
            "sourceIp": "127.0.0.1",
            "userAgent": "pytest",
        },
        "requestId": "test",
        "routeKey": "GET /health",
        "stage": "$default",
        "time": "01/Jan/2026:00:00:00 +0000",
        "timeEpoch": 1767225600000,
    },
    "isBase64Encoded": False,
}


def invoke(event_file: Path, env: dict, function: str = "ContextFunction") -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "local.invoke", function, str(event_file)],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_health(stack):
    status, headers, body = request(stack.port, "GET", "/health")
    assert status == 200
    assert json.loads(body) == {"status": "ok"}
    assert headers["Content-Type"] == "application/json"


def test_unknown_route_is_api_gateways_404(stack):
    status, _, body = request(stack.port, "GET", "/v3/nowhere")
    assert (status, json.loads(body)) == (404, {"message": "Not Found"})
    status, _, body = request(stack.port, "DELETE", "/health")
    assert (status, json.loads(body)) == (404, {"message": "Not Found"})


def test_query_string_and_headers_reach_the_handler(stack):
    for ws in ("qs-a", "qs-b", "qs-c"):
        assert request(stack.port, "POST", "/v3/workspaces", body=json.dumps({"id": ws}).encode())[0] in (200, 201)
    status, _, body = request(stack.port, "POST", "/v3/workspaces/list?page=2&size=1&reverse=true")
    page = json.loads(body)
    assert status == 200 and (page["page"], page["size"]) == (2, 1) and len(page["items"]) == 1
    ids = [w["id"] for w in json.loads(request(stack.port, "POST", "/v3/workspaces/list?size=100")[2])["items"]]
    assert page["items"][0]["id"] == ids[::-1][1]  # reverse order, second page of one
    # A repeated parameter reaches the function joined with a comma, as API Gateway does: not an int.
    status, _, body = request(stack.port, "POST", "/v3/workspaces/list?size=1&size=2")
    assert status == 422 and "size" in json.dumps(json.loads(body)["detail"])
    # Headers: the Idempotency-Key of a repeated post makes it replay the first answer.
    batch = json.dumps({"messages": [{"content": "hi", "peer_id": "p"}]}).encode()
    path = "/v3/workspaces/qs-a/sessions/s/messages"
    first = request(stack.port, "POST", path, headers={"Idempotency-Key": "qs-1"}, body=batch)
    again = request(stack.port, "POST", path, headers={"Idempotency-Key": "qs-1"}, body=batch)
    assert first[0] == again[0] == 201 and json.loads(first[2]) == json.loads(again[2])
    assert json.loads(request(stack.port, "POST", f"{path}/list")[2])["total"] == 1


def test_a_body_over_10_mb_is_refused(stack):
    status, _, body = request(stack.port, "POST", "/v3/workspaces", body=b"x" * (10 * 1024 * 1024 + 1))
    assert (status, json.loads(body)) == (413, {"message": "Request Entity Too Large"})


def test_the_stack_announces_itself(stack):
    assert f"Precis local stack: http://127.0.0.1:{stack.port}" in stack.log.read_text()
    announced = json.loads(stack.dev_json.read_text())
    assert announced["url"] == f"http://127.0.0.1:{stack.port}"
    assert announced["pid"] == stack.proc.pid
    assert announced["moto_endpoint"].startswith("http://127.0.0.1:")


def test_the_admin_key_verifies_as_an_admin():
    from precis.auth import verify_key

    assert verify_key(admin_key("s3cret"), "s3cret").admin is True


def test_invoke_uses_the_running_stacks_moto(stack, tmp_path):
    event_file = tmp_path / "health.json"
    event_file.write_text(json.dumps(HEALTH_EVENT))
    done = invoke(event_file, {"PRECIS_DEV_JSON": str(stack.dev_json)})
    assert done.returncode == 0, done.stderr
    assert "running stack" in done.stderr
    result = json.loads(done.stdout)
    assert result["statusCode"] == 200
    assert json.loads(result["body"]) == {"status": "ok"}


def test_invoke_alone_starts_its_own_moto(tmp_path):
    event_file = tmp_path / "health.json"
    event_file.write_text(json.dumps(HEALTH_EVENT))
    done = invoke(event_file, {"PRECIS_DEV_JSON": str(tmp_path / "absent.json")})
    assert done.returncode == 0, done.stderr
    assert "running stack" not in done.stderr
    assert json.loads(done.stdout)["statusCode"] == 200


def test_invoke_rejects_an_unknown_function(tmp_path):
    event_file = tmp_path / "health.json"
    event_file.write_text(json.dumps(HEALTH_EVENT))
    done = invoke(event_file, {"PRECIS_DEV_JSON": str(tmp_path / "absent.json")}, function="NoSuchFunction")
    assert done.returncode != 0
    assert "ContextFunction" in done.stderr and "IngestFunction" in done.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_stack_cleanly(tmp_path, sig):
    stack = Stack(tmp_path)
    try:
        stack.wait_healthy()
        assert stack.dev_json.exists()
        stack.proc.send_signal(sig)
        assert stack.proc.wait(timeout=10) == 0, stack.log.read_text()
        assert not stack.dev_json.exists()
        with pytest.raises(OSError):
            request(stack.port, "GET", "/health")
    finally:
        stack.stop()


def _post(port: int, path: str, body: dict) -> int:
    return request(port, "POST", path, {"Content-Type": "application/json"}, json.dumps(body).encode())[0]


@pytest.mark.parametrize("delay", [0.0, 0.4, 1.5])
def test_sigterm_to_the_process_group_stops_the_stack_within_seconds(tmp_path, delay):
    # What a terminal or a supervisor does: the signal reaches the stack *and* its workers, with requests in flight
    # (cold-starting workers at delay 0, writing later), stream batches being summarized and an idle keep-alive
    # connection open. It used to hang now and then until killed.
    stack = Stack(tmp_path, own_group=True)
    try:
        stack.wait_healthy()
        assert _post(stack.port, "/v3/workspaces", {"id": "w"}) == 201
        idle = http.client.HTTPConnection("127.0.0.1", stack.port, timeout=30)
        idle.request("GET", "/health")
        assert idle.getresponse().read()  # answered; the connection stays open, idle

        def write(session: str) -> None:
            try:
                while True:  # until the stack goes away under us
                    if (
                        _post(
                            stack.port,
                            f"/v3/workspaces/w/sessions/{session}/messages",
                            {"messages": [{"peer_id": "a", "content": f"note {n}"} for n in range(40)]},
                        )
                        >= 500
                    ):
                        return
            except OSError:
                return

        writers = [threading.Thread(target=write, args=(f"s{n}",), daemon=True) for n in range(3)]
        for writer in writers:
            writer.start()
        time.sleep(delay)
        stack.signal_group(signal.SIGTERM)
        assert stack.proc.wait(timeout=10) == 0, stack.log.read_text()
        log = stack.log.read_text()
        assert "stopping" in log and "still stopping" not in log
        for writer in writers:
            writer.join(10)
        idle.close()
    finally:
        stack.stop()


def _tgkill():
    """glibc's tgkill (a signal to one thread of another process), or None where there is none."""
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).tgkill
    except (AttributeError, OSError):
        return None


@pytest.mark.skipif(not Path("/proc/self/task").is_dir() or _tgkill() is None, reason="needs Linux's tgkill")
def test_a_sigterm_taken_by_a_thread_other_than_the_main_one_stops_the_stack(tmp_path):
    # A process-directed signal goes to whichever thread the kernel picks; the stack once slept on a lock in its main
    # thread, which nothing woke when another thread took the signal. Aim at a non-main thread on purpose.
    stack = Stack(tmp_path)
    try:
        stack.wait_healthy()
        pid = stack.proc.pid
        # The oldest threads (moto, the poller, the gateway) live as long as the stack; a connection's may be gone.
        others = sorted(int(t.name) for t in Path(f"/proc/{pid}/task").iterdir() if int(t.name) != pid)
        assert any(_tgkill()(pid, tid, signal.SIGTERM) == 0 for tid in others)
        assert stack.proc.wait(timeout=10) == 0, stack.log.read_text()
    finally:
        stack.stop()


# ---------------------------------------------------------------- workers, with a handler written by the test

FAKE_APP = """
import os, sys, time
print("printed at import: goes to the log, not the protocol")

def handler(event, context):
    print("printed by the handler")
    query = event.get("queryStringParameters") or {}
    action = event.get("action") or query.get("action")
    if action == "big":
        return {"statusCode": 200, "body": "x" * int(query["size"])}
    if action == "raise":
        raise ValueError("boom")
    if action == "exit":
        os._exit(3)
    if action == "sleep":
        time.sleep(event.get("seconds", 5))
    if action == "bytes":
        return b"not json"
    return {"pid": os.getpid(), "name": context.function_name, "var": os.environ.get("MY_VAR"),
            "remaining_ms": context.get_remaining_time_in_millis()}
"""


def _worker_env(fn: Function, name: str, **extra: str) -> dict[str, str]:
    """A test function's worker environment: its code on the path, its handler and name, its own variables."""
    return {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": str(fn.code_dir),
        "_HANDLER": fn.handler,
        "AWS_LAMBDA_FUNCTION_NAME": name,
        **extra,
        **fn.environment,
    }


@pytest.fixture(params=["zygote", "new interpreter"])
def fake_pool(tmp_path, request, monkeypatch):
    """Workers forked from the zygote (the default), or each a new interpreter (PRECIS_LOCAL_ZYGOTE=0)."""
    monkeypatch.setenv("PRECIS_LOCAL_ZYGOTE", "1" if request.param == "zygote" else "0")
    (tmp_path / "app.py").write_text(FAKE_APP)
    fn = Function("Fake", tmp_path, "app.handler", {"MY_VAR": "v"}, timeout=2)
    pool = FunctionPool(fn, _worker_env(fn, "fake-fn"), size=2)
    yield pool
    pool.close()


SEES_APP = """
import os, sys, warnings
AT_IMPORT = {"var": os.environ.get("MY_VAR"), "parent_only": os.environ.get("PRECIS_TEST_PARENT_ONLY"),
             "home": os.environ.get("HOME"),
             "botocore_imported": "botocore.client" in sys.modules, "cwd": os.getcwd()}
print("printed at import")

def handler(event, context):
    print("printed by the handler")
    with warnings.catch_warnings(record=True) as caught:
        warnings.warn("a warning PYTHONWARNINGS ignores", UserWarning)
        warnings.warn("a warning it shows", UserWarning)
    return {**AT_IMPORT, "pid": os.getpid(), "ppid": os.getppid(), "nice": os.nice(0),
            "code_dir_on_path": os.environ["LAMBDA_TASK_ROOT"] in sys.path, "shown": [str(w.message) for w in caught]}
"""


@pytest.mark.parametrize("mode", ["zygote", "new interpreter"])
def test_a_worker_starts_with_the_functions_environment_descriptors_and_warnings(tmp_path, monkeypatch, capfd, mode):
    """What the handler's import sees is the function's environment alone, whichever way its worker started; only
    a forked one finds the libraries imported already (its parent is the zygote, not the stack)."""
    monkeypatch.setenv("PRECIS_LOCAL_ZYGOTE", "1" if mode == "zygote" else "0")
    monkeypatch.setenv("PRECIS_TEST_PARENT_ONLY", "leaked")
    monkeypatch.setenv("HOME", "/a/home/the/function/was/not/given")
    (tmp_path / "app.py").write_text(SEES_APP)
    fn = Function("Sees", tmp_path, "app.handler", {"MY_VAR": "v"}, timeout=10)
    env = _worker_env(
        fn,
        "sees",
        PRECIS_LOCAL_NICE="3",
        LAMBDA_TASK_ROOT=str(tmp_path),
        PYTHONWARNINGS="ignore:a warning PYTHONWARNINGS ignores:UserWarning",
    )
    pool = FunctionPool(fn, env, size=1)
    try:
        result = pool.invoke({})
    finally:
        pool.close()
    assert result.ok, result.error
    seen = result.payload
    assert seen["var"] == "v" and seen["parent_only"] is None and seen["home"] is None and seen["code_dir_on_path"]
    assert seen["cwd"] == str(ROOT) and seen["nice"] >= 3
    assert seen["shown"] == ["a warning it shows"]
    forked = mode == "zygote"
    assert seen["botocore_imported"] is forked
    assert (seen["ppid"] != os.getpid()) is forked
    printed = capfd.readouterr().err  # what the worker printed reaches the stderr of the process that started it
    assert "printed at import" in printed and "printed by the handler" in printed


def test_a_zygote_that_died_is_started_again_for_the_next_cold_start(tmp_path, monkeypatch):
    """Killing the zygote loses no warm worker (they are its children, not its threads), and the next cold start
    forks from a new one."""
    from local import zygote

    monkeypatch.setenv("PRECIS_LOCAL_ZYGOTE", "1")
    (tmp_path / "app.py").write_text(FAKE_APP)
    fn = Function("Fake", tmp_path, "app.handler", {}, timeout=10)
    pool = FunctionPool(fn, _worker_env(fn, "fake-fn"), size=1)
    try:
        warm = pool.invoke({}).payload["pid"]
        first = zygote.shared()
        first.proc.kill()
        first.proc.wait(timeout=10)
        assert pool.invoke({}).payload["pid"] == warm
        assert not pool.invoke({"action": "exit"}).ok  # the warm worker is gone: the next call is a cold start
        again = pool.invoke({})
        assert again.ok and again.payload["pid"] != warm
        assert zygote.shared() is not first and zygote.shared().proc.poll() is None
    finally:
        pool.close()


def test_a_warm_worker_serves_again(fake_pool):
    first = fake_pool.invoke({})
    assert first.ok, first.error
    assert first.payload["name"] == "fake-fn" and first.payload["var"] == "v"
    assert 0 < first.payload["remaining_ms"] <= 2000
    assert fake_pool.invoke({}).payload["pid"] == first.payload["pid"]


def test_a_handler_exception_is_a_function_error_and_the_worker_stays(fake_pool):
    pid = fake_pool.invoke({}).payload["pid"]
    failed = fake_pool.invoke({"action": "raise"})
    assert not failed.ok
    assert failed.error == "ValueError: boom"
    assert failed.payload["errorType"] == "ValueError" and failed.payload["errorMessage"] == "boom"
    assert fake_pool.invoke({}).payload["pid"] == pid


@pytest.mark.parametrize(
    ("event", "error_type"),
    [
        ({"action": "exit"}, "Runtime.ExitError"),
        ({"action": "sleep"}, "Sandbox.Timedout"),
    ],
)
def test_a_dead_or_timed_out_worker_is_replaced(fake_pool, event, error_type):
    pid = fake_pool.invoke({}).payload["pid"]
    failed = fake_pool.invoke(event)
    assert not failed.ok and failed.payload["errorType"] == error_type
    again = fake_pool.invoke({})
    assert again.ok and again.payload["pid"] != pid


def test_an_event_over_6_mb_of_json_is_refused_by_the_invoke_api(fake_pool):
    refused = fake_pool.invoke({"body": "x" * MAX_EVENT_BYTES})
    assert not refused.ok and refused.payload["errorType"] == REQUEST_TOO_LARGE
    assert refused.payload["errorMessage"] == (
        "Request must be smaller than 6291456 bytes for the InvokeFunction operation"
    )
    assert fake_pool.invoke({"body": "x" * (MAX_EVENT_BYTES - 20)}).ok  # {"body": "..."} is 12 bytes more


def test_a_result_over_6_mb_is_lambdas_response_size_error(fake_pool):
    failed = fake_pool.invoke({"action": "big", "queryStringParameters": {"size": "7000000"}})
    assert not failed.ok and failed.payload["errorType"] == "Function.ResponseSizeTooLarge"
    assert failed.payload["errorMessage"] == (
        "Response payload size (7000031 bytes) exceeded maximum allowed payload size (6291556 bytes)."
    )


def test_an_unserializable_result_is_a_marshal_error(fake_pool):
    failed = fake_pool.invoke({"action": "bytes"})
    assert not failed.ok and failed.payload["errorType"] == "Runtime.MarshalError"


def test_each_worker_takes_one_invocation_at_a_time(fake_pool):
    with ThreadPoolExecutor(2) as ex:
        results = list(
            ex.map(fake_pool.invoke, [{"action": "sleep", "seconds": 0.5}, {"action": "sleep", "seconds": 0.5}])
        )
    assert all(r.ok for r in results)
    assert results[0].payload["pid"] != results[1].payload["pid"]


GATED_APP = """
import os, pathlib, time
here = pathlib.Path(__file__).parent
(here / f"importing-{os.getpid()}").touch()
while (here / "hold-imports").exists():  # a slow cold start, for as long as the test holds it
    time.sleep(0.01)

def handler(event, context):
    if event.get("gate"):
        (here / "serving").touch()
        while (here / event["gate"]).exists():
            time.sleep(0.01)
    return {"pid": os.getpid()}
"""


def _wait_for(condition) -> None:
    while not condition():  # progress, not the clock: pytest's timeout ends a test that never gets there
        time.sleep(0.01)


def test_an_invocation_waiting_for_a_cold_start_takes_a_worker_freed_first(tmp_path):
    (tmp_path / "app.py").write_text(GATED_APP)
    fn = Function("Gated", tmp_path, "app.handler", {}, timeout=60)
    pool = FunctionPool(fn, _worker_env(fn, "gated"), size=2)
    try:
        warm = pool.invoke({}).payload["pid"]
        (tmp_path / "hold-imports").touch()
        (tmp_path / "gate").touch()
        with ThreadPoolExecutor(2) as ex:
            busy = ex.submit(pool.invoke, {"gate": "gate"})  # takes the warm worker and keeps it
            _wait_for((tmp_path / "serving").exists)
            waiting = ex.submit(pool.invoke, {})  # no idle worker: a second one starts, held in its import
            _wait_for(lambda: len(list(tmp_path.glob("importing-*"))) == 2)
            (tmp_path / "gate").unlink()
            assert busy.result().payload["pid"] == warm
            assert waiting.result().payload["pid"] == warm  # the freed warm worker, not the cold start still held
        (tmp_path / "hold-imports").unlink()
        (tmp_path / "gate").touch()
        with ThreadPoolExecutor(2) as ex:  # the worker started meanwhile serves too, once ready
            first = ex.submit(pool.invoke, {"gate": "gate"})
            _wait_for((tmp_path / "serving").exists)
            second = ex.submit(pool.invoke, {})
            second_pid = second.result().payload["pid"]
            (tmp_path / "gate").unlink()
            pids = {first.result().payload["pid"], second_pid}
            assert len(pids) == 2 and warm in pids
    finally:
        (tmp_path / "hold-imports").unlink(missing_ok=True)
        (tmp_path / "gate").unlink(missing_ok=True)
        pool.close()


def test_an_import_error_fails_the_invocation(tmp_path):
    fn = Function("Broken", tmp_path, "missing.handler", {}, timeout=2)
    pool = FunctionPool(fn, _worker_env(fn, "broken"), size=1)
    try:
        failed = pool.invoke({})
    finally:
        pool.close()
    assert not failed.ok and failed.payload["errorType"] == "Runtime.ImportModuleError"


# ---------------------------------------------------------------- the gateway, with a recording function


@pytest.fixture
def gateway():
    """The gateway on a free port, every route answered by `gateway.respond(event)`."""
    seen: list[dict] = []
    server = Gateway(("127.0.0.1", 0), template().routes, {})
    server.seen, server.respond = seen, lambda event: InvokeResult(True, {"statusCode": 200, "body": ""})

    def invoke(event):
        seen.append(event)
        return server.respond(event)

    server.invokers = {"IngestFunction": invoke, "ContextFunction": invoke}
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_the_request_becomes_a_payload_2_event(gateway):
    port = gateway.server_address[1]
    status, _, _ = request(
        port,
        "POST",
        "/v3/workspaces/w%201/peers?b=1&b=2&c=%20x",
        headers={"Cookie": "a=1; b=2", "X-Custom": "v", "User-Agent": "ua"},
        body=b"\xff\xfe",
    )
    assert status == 200
    (event,) = gateway.seen
    assert event["version"] == "2.0"
    assert event["routeKey"] == "POST /v3/workspaces/{workspace_id}/peers"
    assert event["rawPath"] == "/v3/workspaces/w 1/peers"
    assert event["pathParameters"] == {"workspace_id": "w 1"}
    assert event["rawQueryString"] == "b=1&b=2&c=%20x"
    assert event["queryStringParameters"] == {"b": "1,2", "c": " x"}
    assert event["cookies"] == ["a=1", "b=2"]
    assert event["headers"]["x-custom"] == "v" and "cookie" not in event["headers"]
    assert all(name == name.lower() for name in event["headers"])
    assert event["isBase64Encoded"] is True and base64.b64decode(event["body"]) == b"\xff\xfe"
    ctx = event["requestContext"]
    assert ctx["http"] == {
        "method": "POST",
        "path": "/v3/workspaces/w 1/peers",
        "protocol": "HTTP/1.1",
        "sourceIp": "127.0.0.1",
        "userAgent": "ua",
    }
    assert ctx["routeKey"] == event["routeKey"] and ctx["stage"] == "$default"
    assert ctx["requestId"] and ctx["accountId"] and ctx["apiId"] and ctx["domainName"]
    assert abs(ctx["timeEpoch"] / 1000 - time.time()) < 60


def test_a_utf8_body_stays_text(gateway):
    request(gateway.server_address[1], "POST", "/v3/workspaces", body='{"id": "é"}'.encode())
    (event,) = gateway.seen
    assert event["isBase64Encoded"] is False and event["body"] == '{"id": "é"}'
    assert "queryStringParameters" not in event and "pathParameters" not in event


def test_the_result_becomes_the_response(gateway):
    gateway.respond = lambda event: InvokeResult(
        True,
        {
            "statusCode": 201,
            "headers": {"X-A": "1"},
            "cookies": ["s=1"],
            "body": base64.b64encode(b"\x00\x01").decode(),
            "isBase64Encoded": True,
        },
    )
    status, headers, body = request(gateway.server_address[1], "GET", "/health")
    assert (status, headers["X-A"], headers["Set-Cookie"], body) == (201, "1", "s=1", b"\x00\x01")


def test_a_result_without_status_is_a_json_200(gateway):
    gateway.respond = lambda event: InvokeResult(True, {"a": 1})
    status, _, body = request(gateway.server_address[1], "GET", "/health")
    assert (status, json.loads(body)) == (200, {"a": 1})


def test_a_function_error_is_api_gateways_500(gateway):
    gateway.respond = lambda event: InvokeResult(False, {"errorType": "ValueError"}, "ValueError: boom")
    status, _, body = request(gateway.server_address[1], "GET", "/health")
    assert (status, json.loads(body)) == (500, {"message": "Internal Server Error"})


# ---------------------------------------------------------------- the gateway in front of real workers: Lambda's limits


@pytest.fixture
def pooled_gateway(fake_pool):
    """The gateway on a free port, every route answered by the test's handler in a real worker."""
    server = Gateway(
        ("127.0.0.1", 0), template().routes, {"IngestFunction": fake_pool.invoke, "ContextFunction": fake_pool.invoke}
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_a_request_whose_event_passes_6_mb_is_api_gateways_413(pooled_gateway):
    status, _, body = request(pooled_gateway, "POST", "/v3/workspaces", body=b"x" * 6_500_000)
    assert (status, json.loads(body)) == (413, {"message": "Request Entity Too Large"})


@pytest.mark.parametrize(
    "body",
    [
        b"x" * 6_291_000,  # under 6 MB as a body; over it once the event's headers and context are added
        b'"' * 3_300_000,  # 3.3 MB as a body; 6.6 MB once JSON-escaped in the event
        bytes(range(256)) * 18_500,  # 4.7 MB of binary; base64 in the event makes it 6.3 MB
    ],
)
def test_the_size_that_counts_is_the_events_json(pooled_gateway, body):
    status, _, answer = request(pooled_gateway, "POST", "/v3/workspaces", body=body)
    assert (status, json.loads(answer)) == (413, {"message": "Request Entity Too Large"})


def test_a_request_under_6_mb_reaches_the_function(pooled_gateway):
    status, _, body = request(pooled_gateway, "POST", "/v3/workspaces", body=b"x" * 6_000_000)
    assert status == 200 and json.loads(body)["name"] == "fake-fn"


def test_a_response_over_6_mb_is_api_gateways_500(pooled_gateway, caplog):
    with caplog.at_level(logging.ERROR, logger="local.gateway"):
        status, _, body = request(pooled_gateway, "GET", "/health?action=big&size=7000000")
    assert (status, json.loads(body)) == (500, {"message": "Internal Server Error"})
    assert "Function.ResponseSizeTooLarge: Response payload size (7000031 bytes) exceeded" in caplog.text
    status, _, body = request(pooled_gateway, "GET", "/health?action=big&size=6000000")
    assert (status, len(body)) == (200, 6_000_000)


# ---------------------------------------------------------------- the API before the stream consumers


def _wait_until(condition, what: str) -> None:
    """Poll `condition` until it holds; the bound (minutes) only keeps a broken build from hanging."""
    deadline = time.monotonic() + 300
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.01)


def test_a_waiting_api_request_goes_before_every_waiting_stream_consumer_request():
    from local.moto_server import Turns

    turns, order, release = Turns(), [], threading.Event()

    def take(name: str, background: bool) -> None:
        with turns.turn(background):
            order.append(name)
            if name == "first":
                release.wait()

    first = threading.Thread(target=take, args=("first", False))
    first.start()
    _wait_until(lambda: order == ["first"], "the first request holds the turn")
    consumers = [threading.Thread(target=take, args=(f"consumer-{i}", True)) for i in range(3)]
    for thread in consumers:
        thread.start()
    _wait_until(lambda: turns.waiting() == (0, 3), "three consumer requests wait")
    api = threading.Thread(target=take, args=("api", False))
    api.start()
    _wait_until(lambda: turns.waiting() == (1, 3), "the API request waits too")
    release.set()
    for thread in (first, api, *consumers):
        thread.join()
    assert order[:2] == ["first", "api"] and sorted(order[2:]) == ["consumer-0", "consumer-1", "consumer-2"]


class _Cycle:
    def __init__(self):
        self.me = self


def test_what_survives_a_full_collection_is_frozen_and_what_comes_after_is_still_collected():
    """The stack's heap is moto's tables: survivors of a full collection are frozen at the end of the next request,
    out of later collections' sight; garbage made afterwards, even a reference cycle, is still collected."""
    import gc
    import weakref

    from local.moto_server import HeapFreezer

    # No automatic collection while the test runs: another thread's allocations could start a full one at any point
    # (the freeze count is no witness either: frozen objects that other threads free leave it, and it falls).
    was_enabled = gc.isenabled()
    gc.disable()
    gc.unfreeze()
    heap = HeapFreezer()
    try:
        assert gc.get_freeze_count() > 0  # what the process had imported
        survivor = _Cycle()
        heap.after_request()
        assert any(o is survivor for o in gc.get_objects())  # no full collection since: nothing new frozen
        gc.collect()
        heap.after_request()
        assert not any(o is survivor for o in gc.get_objects())  # frozen: no collection walks it any more
        later = _Cycle()
        gone = weakref.ref(later)
        del later
        gc.collect(0)
        assert gone() is None  # a cycle made after the freeze: collected
    finally:
        gc.callbacks.remove(heap._collected)
        gc.unfreeze()
        if was_enabled:
            gc.enable()


def test_turns_are_taken_one_at_a_time_and_no_waiter_is_left_behind():
    """Each ending turn wakes one waiter: under a crowd of both kinds, every request still gets its turn, alone."""
    from local.moto_server import Turns

    turns, inside, most, done = Turns(quiet_s=0.001, share=0.5, burst_s=0.002), [0], [0], []
    lock = threading.Lock()

    def take(background: bool) -> None:
        for _ in range(40):
            with turns.turn(background):
                with lock:
                    inside[0] += 1
                    most[0] = max(most[0], inside[0])
                time.sleep(0.0002)
                with lock:
                    inside[0] -= 1
        done.append(background)

    threads = [threading.Thread(target=take, args=(i % 2 == 1,)) for i in range(12)]
    for thread in threads:
        thread.start()
    _wait_until(lambda: len(done) == 12, "every request of both kinds had its turn")
    assert most[0] == 1 and turns.waiting() == (0, 0)


def test_stream_consumers_get_a_share_of_moto_while_the_api_is_busy_and_all_of_it_when_quiet():
    """The decision, on a clock the test moves: a consumer's request slips in on its budget, spends it, then waits
    for a pause in the API's requests or for its share of the time passing to pay the budget back."""
    from local.moto_server import Turns

    now = [1000.0]
    turns = Turns(quiet_s=0.02, share=0.25, burst_s=0.1, clock=lambda: now[0])
    with turns.turn(background=False):  # the API is busy: one request, and the next comes at once
        now[0] += 0.005
    assert turns.background_may_start() == (True, True, 0.0)  # on its budget
    with turns.turn(background=True):
        now[0] += 0.3  # a long one: 0.2 s more than its budget held
    with turns.turn(background=False):
        now[0] += 0.005
    may, _, wait_s = turns.background_may_start()
    assert not may and wait_s == pytest.approx(0.02)  # the API's next call gets moto; the consumer waits for a pause
    for _ in range(40):  # a steady API: a request every 5 ms for 0.2 s
        with turns.turn(background=False):
            now[0] += 0.005
        assert not turns.background_may_start()[0]
    # ... 0.2 s of share 0.25 paid back 0.05 of the 0.2 s owed; 0.6 s more of a busy API pays the rest
    for _ in range(120):
        with turns.turn(background=False):
            now[0] += 0.005
    assert turns.background_may_start()[:2] == (True, True)
    now[0] += 0.02  # and whatever its budget, a consumer goes as soon as the API pauses
    assert turns.background_may_start() == (True, False, 0.0)


def test_the_stream_consumers_use_the_background_port_at_a_lower_priority():
    from local.worker import BACKGROUND_NICE, start_pools

    tpl = template()
    pools = start_pools(tpl, "http://127.0.0.1:1", background_endpoint="http://127.0.0.1:2")
    consumers = {fn.logical_id for fn in tpl.stream_functions()}
    assert consumers == {"SummarizeFunction", "DeriveFunction"}
    for name, pool in pools.items():
        background = name in consumers
        assert pool.env["AWS_ENDPOINT_URL"] == ("http://127.0.0.1:2" if background else "http://127.0.0.1:1")
        assert pool.env.get("PRECIS_LOCAL_NICE") == (str(BACKGROUND_NICE) if background else None)


def test_make_dev_prints_one_line_per_request_and_per_stream_batch(stack):
    """No EMF metric lines, no functions' INFO logs: the gateway's line per request, the poller's per batch."""
    ws = f"quiet-{time.monotonic_ns()}"
    body = json.dumps({"messages": [{"peer_id": "alice", "content": f"fact {i}"} for i in range(5)]}).encode()
    assert request(
        stack.port, "POST", "/v3/workspaces", {"content-type": "application/json"}, json.dumps({"id": ws}).encode()
    )[0] in (200, 201)
    assert (
        request(
            stack.port, "POST", f"/v3/workspaces/{ws}/sessions/s/messages", {"content-type": "application/json"}, body
        )[0]
        == 201
    )

    def settled() -> bool:
        status, _, answer = request(stack.port, "GET", f"/v3/workspaces/{ws}/queue/status")
        done = json.loads(answer)
        log = stack.log.read_text()
        return (
            status == 200
            and not done["pending_work_units"]
            and not done["in_progress_work_units"]
            and "stream -> precis-derive-local" in log
            and "stream -> precis-summarize-local" in log
        )

    _wait_until(settled, "the queue is empty and both consumers got a batch")
    log = stack.log.read_text()
    assert f'"POST /v3/workspaces/{ws}/sessions/s/messages" 201' in log
    assert '"_aws"' not in log  # EMF metrics
    assert '"level":"INFO"' not in log
