"""`make invoke FN=<LogicalId> EVENT=<file>`: one handler, one event, like `sam local invoke`.

The handler runs in a worker with the function's template environment. It talks to the moto server of a
running `make dev` when there is one (so it sees that stack's data), else to a throwaway one.
Prints the handler's JSON result on stdout (logs go to stderr); exits 1 on a function error.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from local.moto_backend import MotoBackend, dev_json_path, endpoint_alive, start_moto
from local.template import template
from local.worker import FunctionPool, function_environment


def running_stack_endpoint() -> str | None:
    """The moto endpoint of a running `make dev`, if its announcement is there and moto answers."""
    try:
        endpoint = json.loads(dev_json_path().read_text())["moto_endpoint"]
    except (OSError, ValueError, KeyError):
        return None
    return endpoint if endpoint_alive(endpoint) else None


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m local.invoke <LogicalId> <event.json>", file=sys.stderr)
        return 2
    logical_id, event_file = argv
    tpl = template()
    if logical_id not in tpl.functions:
        known = ", ".join(sorted(tpl.functions))
        print(f"unknown function {logical_id!r}; the template has: {known}", file=sys.stderr)
        return 2
    event = json.loads(Path(event_file).read_text())
    moto: MotoBackend | None = None
    endpoint = running_stack_endpoint()
    if endpoint:
        print(f"using the running stack's moto at {endpoint}", file=sys.stderr)
    else:
        moto = start_moto(tpl)
        endpoint = moto.endpoint
    fn = tpl.functions[logical_id]
    pool = FunctionPool(fn, function_environment(tpl, fn, endpoint), size=1)
    try:
        result = pool.invoke(event)
    finally:
        pool.close()
        if moto:
            moto.stop()
    print(json.dumps(result.payload, indent=2))
    if not result.ok:
        print(f"function error: {result.error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
