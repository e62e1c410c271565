"""A workspace's export and import, metered (`python -m bench transfer`): 6 sessions of 1,000 messages posted in
batches of 100, exported by the job on the stream, the parts downloaded, uploaded and imported into a new workspace
(bench/cost.py's in-process stack: its request units, S3 requests and invocations, the stream delivered as its
mappings filter it, the consumers the imported messages wake included)."""

from __future__ import annotations

import random

import requests

from bench.common import moto, print_table, write_json
from bench.cost import Stack, _components, batch_body

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


def _row(name: str, r: dict) -> list:
    s3 = sum(r["s3_requests_per_unit"].values())
    return [name, round(r["rru_per_unit"], 3), round(r["wru_per_unit"], 3), round(s3 * 1000, 2), round(r["total"], 2)]


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
            export = _components(stack, messages)
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
            result = _components(stack, messages)
        finally:
            stack.close()
    print_table(
        f"Export and import of {messages:,} messages: per message",
        ["job", "RRU", "WRU", "S3 requests per 1,000", "$ per million"],
        [_row("export", export), _row("import", result)],
    )
    print(f"  export: {exported['parts']} parts, {exported['steps']} steps, {len(data) / messages:.0f} bytes a message")
    print(f"  import: {imported['steps']} steps; WRU by place {result['wru_index_per_unit']} (+ table)")
    out = {"messages": messages, "bytes_per_message": len(data) / messages, "export": export, "import": result}
    write_json("transfer", out)
    return out
