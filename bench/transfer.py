"""A workspace's export and import, metered (`python -m bench transfer`): 6 sessions of 1,000 messages posted in
batches of 100, exported by the job on the stream, the parts downloaded, uploaded and imported into a new workspace
(bench/cost.py's in-process stack: its request units, S3 requests and invocations, the stream delivered as its
mappings filter it, the consumers the imported messages wake included)."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import requests

from bench.common import moto, print_table, write_json
from bench.cost import Stack, batch_body

SESSIONS, MESSAGES = 6, 1_000


def _finished(stack: Stack, ws: str, kind: str, job: str) -> dict:
    while True:
        status = stack.http("GET", f"/v3/workspaces/{ws}/{kind}/{job}")
        if status["status"] != "running":
            return status
        stack.drain()


def _reset(stack: Stack) -> None:
    for counts in (stack.capacity.totals, stack.s3.requests, stack.runs.billed, stack.runs.api, stack.runs.wall_s):
        counts.clear()


def _per_message(stack: Stack, messages: int) -> dict[str, Any]:
    """Request units (the table's writes and each index's apart) and S3 requests a message, from the meters."""
    units = sum((c for label, c in stack.capacity.totals.items() if label != "setup"), Counter())
    s3 = sum((Counter(v) for label, v in stack.s3.requests.items() if label != "setup"), Counter())
    index = {kind: units[f"wru_{kind}"] / messages for kind in ("lsi", "gsi", "vector")}
    return {
        "rru": units["rru"] / messages,
        "wru": units["wru"] / messages + sum(index.values()),
        "wru_index": index,
        "s3_requests": {op: n / messages for op, n in s3.items()},
        "requests": {k.removeprefix("op:"): v for k, v in units.items() if k.startswith("op:")},
    }


def _row(name: str, r: dict) -> list:
    return [name, round(r["rru"], 3), round(r["wru"], 3), round(sum(r["s3_requests"].values()) * 1000, 2)]


def run() -> dict:
    rng = random.Random(7)
    messages = SESSIONS * MESSAGES
    with moto(stream=False) as clients:
        stack = Stack(clients)
        try:
            stack.http("POST", "/v3/workspaces", {"id": "src"})
            for session in range(SESSIONS):
                for start in range(0, MESSAGES, 100):
                    stack.http("POST", f"/v3/workspaces/src/sessions/s{session}/messages", batch_body(rng, 100, start))
                stack.drain()
            _reset(stack)
            stack.metering = True
            exported = _finished(stack, "src", "exports", stack.http("POST", "/v3/workspaces/src/exports")["id"])
            stack.metering = False
            export = _per_message(stack, messages)
            data = b"".join(requests.get(url, timeout=60).content for url in exported["urls"])
            _reset(stack)
            stack.http("POST", "/v3/workspaces", {"id": "dst"})
            upload = stack.http("POST", "/v3/workspaces/dst/imports/uploads")
            requests.put(upload["url"], data=data, timeout=60)
            stack.metering = True
            job = stack.http("POST", "/v3/workspaces/dst/imports", {"upload_id": upload["upload_id"]})["id"]
            imported = _finished(stack, "dst", "imports", job)
            stack.drain()  # what the imported messages wake
            stack.metering = False
            assert imported["status"] == "done", imported
            result = _per_message(stack, messages)
        finally:
            stack.close()
    print_table(
        f"Export and import of {messages:,} messages: per message",
        ["job", "RRU", "WRU", "S3 requests per 1,000"],
        [_row("export", export), _row("import", result)],
    )
    print(f"  export: {exported['parts']} parts, {exported['steps']} steps, {len(data) / messages:.0f} bytes a message")
    print(f"  import: {imported['steps']} steps; of its WRU, on the indexes: {result['wru_index']}")
    out = {"messages": messages, "bytes_per_message": len(data) / messages, "export": export, "import": result}
    write_json("transfer", out)
    return out
