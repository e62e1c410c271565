"""The Lambda runtime inside a worker process: import the handler (the function's init), then answer one JSON line per
invocation ({"event", "timeout_s"}) read from stdin, as Lambda's runtime interface does.

The protocol runs on a duplicate of the original stdout; fd 1 is pointed at stderr, so whatever the handler prints
(Powertools logs, EMF metrics) goes to the log stream, as in Lambda. A worker runs this forked from `local.zygote`, or
as `python -m local.runtime <LogicalId>` (PRECIS_LOCAL_ZYGOTE=0); `local.worker` is the side that starts and feeds it.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import sys
import traceback
from typing import Any

from local import iam
from local.lambda_context import LambdaContext

# Lambda's synchronous payload limit on a result, in bytes of JSON (local.worker has the event's): a larger result is
# the function error Function.ResponseSizeTooLarge ("... exceeded maximum allowed payload size (6291556 bytes).").
MAX_RESPONSE_BYTES = 6 * 1024 * 1024 + 100
# What a process needs to run; nothing else leaks from the shell (no AWS_PROFILE pointing at a real account).
BASE_ENVIRONMENT = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "TZ")


def error_object(error_type: str, message: str, exc: BaseException | None = None) -> dict[str, Any]:
    """Lambda's error object for a function or runtime error."""
    error = {"errorType": error_type, "errorMessage": message}
    if exc is not None:
        error["stackTrace"] = traceback.format_tb(exc.__traceback__)
    return error


def json_bytes(value: Any) -> bytes:
    """`value` as JSON the way the python3.12 runtime marshals it: UTF-8, not ASCII-escaped (TypeError, ValueError
    if it is no JSON)."""
    text = json.dumps(value, ensure_ascii=False)
    try:
        return text.encode()
    except UnicodeEncodeError:  # a lone surrogate: only escaped JSON can carry it
        return json.dumps(value).encode()


def _reply(result: Any) -> str:
    """The protocol line for a handler's result: the result, or the error Lambda's runtime makes of it."""
    try:
        payload = json_bytes(result)
    except (TypeError, ValueError) as exc:
        error = error_object("Runtime.MarshalError", f"Unable to marshal response: {exc}")
        return json.dumps({"ok": False, "payload": error})
    if len(payload) > MAX_RESPONSE_BYTES:
        message = (
            f"Response payload size ({len(payload)} bytes) exceeded maximum allowed payload size "
            f"({MAX_RESPONSE_BYTES} bytes)."
        )
        return json.dumps({"ok": False, "payload": error_object("Function.ResponseSizeTooLarge", message)})
    return '{"ok": true, "payload": ' + payload.decode() + "}"


def serve() -> int:
    """The worker's main loop (runs in the subprocess; the logical id on its command line names it in `ps`)."""
    protocol = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout.reconfigure(line_buffering=True)
    # Ctrl-C and a SIGTERM to `make dev`'s process group reach us too. The parent stops us (EOF on stdin, or a kill
    # for an invocation cut short): dying on our own would look like a crash to the poller, which would retry.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if os.environ.get("PRECIS_LOCAL_NICE"):
        os.nice(int(os.environ["PRECIS_LOCAL_NICE"]))

    def send(line: str) -> None:
        protocol.write(line + "\n")
        protocol.flush()

    iam.enforce_from_environment()  # before the handler's init: its clients are checked from their first call
    module_name, attr = os.environ["_HANDLER"].rsplit(".", 1)
    try:
        handler = getattr(importlib.import_module(module_name), attr)
    except Exception as exc:  # noqa: BLE001 - any init failure is reported like Lambda does
        traceback.print_exc()
        kind = "Runtime.ImportModuleError" if isinstance(exc, ImportError) else type(exc).__name__
        error = error_object(kind, f"Unable to import module '{module_name}': {exc}", exc)
        send(json.dumps({"ok": False, "payload": error}))
        return 1
    send(json.dumps({"ready": True}))
    for line in sys.stdin.buffer:
        request = json.loads(line)
        context = LambdaContext(function_name=os.environ["AWS_LAMBDA_FUNCTION_NAME"], timeout_s=request["timeout_s"])
        try:
            result = handler(request["event"], context)
        except Exception as exc:  # noqa: BLE001 - a function error, reported to the caller; the worker stays warm
            traceback.print_exc()
            error = error_object(type(exc).__name__, str(exc), exc)
            send(json.dumps({"ok": False, "payload": {**error, "requestId": context.aws_request_id}}))
        else:
            send(_reply(result))
    return 0


if __name__ == "__main__":
    sys.exit(serve())
