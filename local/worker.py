"""Lambda-like execution environments: each worker is a subprocess serving one invocation at a time.

A worker (forked from `local.zygote`, or started as `python -m local.runtime <LogicalId>` when PRECIS_LOCAL_ZYGOTE=0)
runs `local.runtime`: it imports the handler named by `_HANDLER` once, then answers one JSON line per request. This
module is the invoking side: the function's environment and role, the pool of warm workers, Lambda's limits.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from local import iam, zygote
from local.runtime import BASE_ENVIRONMENT, error_object, json_bytes
from local.template import ENCODINGS_DIR, LAYER_DIR, ROOT, Function, LocalNames, Resolver, Template

# Lambda gives init 10 s; a cold import on a busy 2-core laptop can take longer, and locally that is no bug.
INIT_TIMEOUT_S = 30
# Lambda's synchronous payload limits ("6 MB", API_Invoke), in bytes of JSON as measured by Zac Charles, "Deep Dive:
# Lambda's Response/Request Payload Size Limit" (zaccharles.medium.com, 2022): the Invoke API refuses a larger event
# ("Request must be smaller than 6291456 bytes for the InvokeFunction operation"), and a larger result is the function
# error Function.ResponseSizeTooLarge ("... exceeded maximum allowed payload size (6291556 bytes)."; local.runtime).
MAX_EVENT_BYTES = 6 * 1024 * 1024
REQUEST_TOO_LARGE = "RequestEntityTooLargeException"  # the Invoke API's error: the function never ran
# Knobs a developer sets in the shell for `make dev`; they win over the template's values.
PASS_THROUGH = (
    "PRECIS_AUTH",
    "PRECIS_JWT_SECRET",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "PRECIS_LLM_MODEL",
    "PRECIS_LLM_PROVIDER",
    "PRECIS_SUMMARIES_PROVIDER",
    "PRECIS_DERIVE_PROVIDER",
    "PRECIS_CHAT_PROVIDER",
    "PRECIS_BEDROCK_REGION",
    # Bedrock's endpoint override (botocore's own variable): a local Bedrock-compatible server, e.g.
    # local/models/bedrock_server.py. The rest of AWS stays on moto.
    "AWS_ENDPOINT_URL_BEDROCK_RUNTIME",
    "PRECIS_MAX_MESSAGE_CHARS",
    "PRECIS_INLINE_BODY_MAX_BYTES",
    "PRECIS_CONTEXT_RECALL_SHARE",
    "PRECIS_LLM_TIMEOUT_S",
    "PRECIS_LLM_MAX_ATTEMPTS",
    "PRECIS_LLM_MAX_INPUT_TOKENS",
    "PRECIS_PURGE_GRACE_S",
    "PRECIS_SUMMARIZE_CONCURRENCY",
    "PRECIS_SUMMARY_STRATEGY",
    "PRECIS_SUMMARY_ENGINE",
    "PRECIS_SUMMARY_TOKEN_THRESHOLD",
    "PRECIS_SUMMARY_KEEP_RECENT_RUNS",
    "PRECIS_SUMMARY_KEEP_RUNS",
    "PRECIS_SUMMARY_MAX_OUTPUT_TOKENS",
    "PRECIS_SUMMARY_WHOLE_RUNS",
    "PRECIS_EMBEDDER",
    "PRECIS_EMBED_MODEL",
    "PRECIS_EMBED_DIMENSIONS",
    "PRECIS_DERIVE_ENGINE",
    "PRECIS_DERIVE_MODEL",
    "PRECIS_DERIVE_BATCH_TOKENS",
    "PRECIS_DERIVE_MAX_WAIT_S",
    "PRECIS_DERIVE_QUIET_S",
    "PRECIS_DERIVE_CARD_EVERY",
    "PRECIS_DERIVE_CARD_MAX_S",
    "PRECIS_DERIVE_CARD_QUIET_S",
    "PRECIS_DERIVE_CONCURRENCY",
    "PRECIS_DREAM_MIN_CONCLUSIONS",
    "PRECIS_DREAM_IDLE_S",
    "PRECIS_WEBHOOKS_ALLOW_HTTP_LOCAL",
    # The stack's EventBridge bus (parameter EventBusName): set, the local stack creates it in moto too.
    "PRECIS_EVENT_BUS_NAME",
    "POWERTOOLS_LOG_LEVEL",
    "POWERTOOLS_METRICS_DISABLED",
)
# The deployed stack reads its signing secret from Secrets Manager; locally auth is off unless turned on with
# PRECIS_AUTH and PRECIS_JWT_SECRET. A terminal gets one line per request and per stream batch (the gateway's and the
# poller's): the functions' INFO logs and EMF metric lines stay off unless the developer turns them on
# (POWERTOOLS_LOG_LEVEL=INFO, POWERTOOLS_METRICS_DISABLED=false). Webhooks may go to receivers on this machine
# (http://127.0.0.1:<port>), which a deployment refuses (PRECIS_WEBHOOKS_ALLOW_HTTP_LOCAL=false turns that off).
LOCAL_DEFAULTS = {
    "PRECIS_AUTH": "false",
    "POWERTOOLS_LOG_LEVEL": "WARNING",
    "POWERTOOLS_METRICS_DISABLED": "true",
    "PRECIS_WEBHOOKS_ALLOW_HTTP_LOCAL": "true",
}


@dataclass
class InvokeResult:
    ok: bool
    payload: Any = None  # the handler's result, or Lambda's error object {"errorType", "errorMessage", ...}
    error: str | None = None  # "<errorType>: <errorMessage>" for a function error


Invoker = Callable[[dict[str, Any]], InvokeResult]


def _failure(error: dict[str, Any]) -> InvokeResult:
    return InvokeResult(False, error, f"{error.get('errorType')}: {error.get('errorMessage')}")


def _stopping() -> InvokeResult:
    return _failure(error_object("Local.Stopping", "the local stack is stopping"))


def function_name(tpl: Template, fn: Function) -> str:
    """The function's deployed name (its FunctionName resolved for the local stage), else its logical id."""
    name = tpl.resource(fn.logical_id)["Properties"].get("FunctionName")
    return str(Resolver(tpl.raw, LocalNames()).resolve(name)) if name else fn.logical_id


def function_environment(tpl: Template, fn: Function, endpoint: str) -> dict[str, str]:
    """The worker environment: the template's variables, pointed at moto, plus the developer's knobs."""
    from local.moto_backend import AWS_ENV  # not at the top: workers never need boto3 or moto here

    parent = os.environ
    env = {k: parent[k] for k in BASE_ENVIRONMENT if k in parent}
    env.update(fn.environment)
    env.update(LOCAL_DEFAULTS)
    env.update(AWS_ENV)
    env.update(
        AWS_ENDPOINT_URL=endpoint,
        TIKTOKEN_CACHE_DIR=str(ENCODINGS_DIR),
        POWERTOOLS_TRACE_DISABLED="true",
        AWS_LAMBDA_FUNCTION_NAME=function_name(tpl, fn),
        _HANDLER=fn.handler,
        LAMBDA_TASK_ROOT=str(fn.code_dir),
        PYTHONPATH=os.pathsep.join([str(LAYER_DIR), str(fn.code_dir)]),
        PYTHONUNBUFFERED="1",
        # Powertools warns on every request of a route that emits no metric: noise in a terminal.
        PYTHONWARNINGS="ignore:No application metrics to publish:UserWarning",
    )
    env.update({k: parent[k] for k in PASS_THROUGH if k in parent})
    env[iam.ROLE_VARIABLE] = function_role(tpl, fn).to_json()
    return env


_ROLES: dict[tuple[int, tuple[tuple[str, str], ...]], dict[str, iam.Role]] = {}


def function_role(tpl: Template, fn: Function) -> iam.Role:
    """The function's execution role for this local deployment (the developer's knobs are its parameters)."""
    knobs = tuple(sorted((k, os.environ[k]) for k in PASS_THROUGH if k in os.environ))
    key = (id(tpl), knobs)
    if key not in _ROLES:
        _ROLES[key] = iam.local_roles(tpl, dict(knobs))
    return _ROLES[key][fn.logical_id]


class _Worker:
    def __init__(self, fn: Function, env: dict[str, str]):
        if zygote.enabled():  # forked with the libraries imported (`local.zygote`); its handler it imports itself
            self.proc: subprocess.Popen[bytes] | zygote.ForkedProcess = zygote.shared().spawn(env)
            return
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "local.runtime", fn.logical_id],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            cwd=ROOT,
        )

    def read(self, timeout: float) -> dict[str, Any]:
        """The worker's next message; TimeoutError if none within `timeout`, EOFError if it died."""
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            raise TimeoutError
        line = self.proc.stdout.readline()
        if not line:
            raise EOFError
        return json.loads(line)

    def send(self, line: bytes) -> None:
        self.proc.stdin.write(line)
        self.proc.stdin.flush()

    def stop(self) -> None:
        """End the worker: EOF on stdin lets it exit cleanly; kill it if it does not."""
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=2)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()


class FunctionPool:
    """The execution environments of one function: up to `size` workers, started on demand, reused warm.

    An invocation takes an idle worker; if there is none it starts one (up to `size`) and takes whichever comes first:
    that worker ready, or another one freed by its invocation. Eight concurrent writers on a pool of four warm workers
    no longer wait a cold start's second or more while the warm ones free up within a hundred milliseconds; a worker
    started and not needed yet stays idle, warm, as Lambda keeps an environment.
    """

    def __init__(self, fn: Function, env: dict[str, str], size: int = 4):
        self.fn, self.env, self.size = fn, env, size
        self._changed = threading.Condition()
        self._idle: list[_Worker] = []
        self._busy: set[_Worker] = set()  # starting or serving: `close` kills them
        self._count = 0  # workers alive or starting
        self._starting = 0
        self._waiting = 0  # invocations waiting for a worker
        self._failures: list[InvokeResult] = []  # init failures for waiting invocations (Lambda's Runtime.* errors)
        self._closed = False

    def invoke(self, event: dict[str, Any]) -> InvokeResult:
        """Run the handler on `event` in a free worker (waiting for one if all are busy)."""
        data = json_bytes(event)  # measured as it is sent
        if len(data) > MAX_EVENT_BYTES:
            return _failure(
                error_object(
                    REQUEST_TOO_LARGE,
                    f"Request must be smaller than {MAX_EVENT_BYTES} bytes for the InvokeFunction operation",
                )
            )
        line = b'{"timeout_s": %d, "event": %s}\n' % (self.fn.timeout, data)
        worker = self._acquire()
        return worker if isinstance(worker, InvokeResult) else self._call(worker, line)

    def _acquire(self) -> _Worker | InvokeResult:
        with self._changed:
            self._waiting += 1
            try:
                while True:
                    if self._closed:
                        return _stopping()
                    if self._idle:
                        worker = self._idle.pop()
                        self._busy.add(worker)
                        return worker
                    if self._failures:
                        return self._failures.pop(0)
                    if self._starting < self._waiting and self._count < self.size:
                        self._count += 1
                        self._starting += 1
                        threading.Thread(target=self._start, name=f"start-{self.fn.logical_id}", daemon=True).start()
                    self._changed.wait()
            finally:
                self._waiting -= 1

    def _start(self) -> None:
        worker, failure = None, None
        try:
            worker = _Worker(self.fn, self.env)
        except OSError as exc:
            failure = _failure(error_object("Runtime.ExitError", f"the runtime could not be started: {exc}", exc))
        if worker is not None:
            with self._changed:
                self._busy.add(worker)  # from its first instant, so that `close` kills it even while it imports
                if self._closed:
                    worker.proc.kill()
            failure = self._init(worker)
        with self._changed:
            self._starting -= 1
            if worker is not None:
                self._busy.discard(worker)
            ready = failure is None and not self._closed
            if ready:
                self._idle.append(worker)
            else:
                self._count -= 1
                if failure is not None and self._waiting and not self._closed:
                    self._failures.append(failure)
            self._changed.notify_all()
        if worker is not None and not ready:
            worker.stop()

    def _init(self, worker: _Worker) -> InvokeResult | None:
        """None once the worker has imported the handler; else Lambda's init failure."""
        try:
            hello = worker.read(INIT_TIMEOUT_S)
            return None if hello.get("ready") else _failure(hello["payload"])
        except TimeoutError:
            return _failure(error_object("Runtime.InitTimeout", f"init took over {INIT_TIMEOUT_S} s"))
        except (EOFError, ValueError, OSError):
            return _failure(error_object("Runtime.ExitError", f"Runtime exited during init: {worker.proc.poll()}"))

    def _call(self, worker: _Worker, line: bytes) -> InvokeResult:
        healthy = False
        try:
            worker.send(line)
            reply = worker.read(self.fn.timeout)
            healthy = True
            result = InvokeResult(True, reply["payload"]) if reply["ok"] else _failure(reply["payload"])
        except TimeoutError:
            result = _failure(error_object("Sandbox.Timedout", f"Task timed out after {self.fn.timeout:.2f} seconds"))
        except (EOFError, OSError, ValueError):
            result = _failure(error_object("Runtime.ExitError", f"Runtime exited with status {worker.proc.poll()}"))
        with self._changed:
            self._busy.discard(worker)
            keep = healthy and not self._closed
            if keep:
                self._idle.append(worker)
            else:
                self._count -= 1
            self._changed.notify_all()
        if not healthy:  # a timed-out or dead environment is thrown away, as Lambda does
            worker.proc.kill()
        if not keep:
            worker.stop()
        return result

    def close(self) -> None:
        """Stop every worker; invocations in flight are cut short and end with an error."""
        with self._changed:
            self._closed = True
            idle, self._idle = self._idle, []
            busy = list(self._busy)
            self._changed.notify_all()
        for worker in busy:
            worker.proc.kill()  # its invoking (or starting) thread sees EOF and cleans up
        for worker in idle:
            worker.stop()


# The stream consumers' workers run at a lower CPU priority: on a two-core laptop a deriver working through a backlog
# would otherwise take the cores an API request needs (in AWS each function has its own).
BACKGROUND_NICE = 10


def start_pools(
    tpl: Template, endpoint: str, size: int | None = None, background_endpoint: str | None = None
) -> dict[str, FunctionPool]:
    """One pool per function of the template, its workers talking to the moto server at `endpoint`; the stream
    consumers' at `background_endpoint` (served after the API's requests), niced."""
    size = size or int(os.environ.get("PRECIS_LOCAL_CONCURRENCY", "4"))
    if zygote.enabled():
        zygote.shared()  # it imports the libraries while the stack starts, before the first request needs a worker
    background = {fn.logical_id for fn in tpl.stream_functions()} if background_endpoint else set()
    pools = {}
    for lid, fn in tpl.functions.items():
        env = function_environment(tpl, fn, background_endpoint if lid in background else endpoint)
        if lid in background:
            env["PRECIS_LOCAL_NICE"] = str(BACKGROUND_NICE)
        pools[lid] = FunctionPool(fn, env, size)
    return pools
