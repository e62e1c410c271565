"""Ingestion: messages per second and DynamoDB requests per batch of 1, 10 and 100 messages.

Batches go through the real ingest handler in-process (API Gateway v2 events, pydantic validation, tiktoken
counts, one transaction per batch) against in-process moto with the template's table and stream. Every batch
size starts from an empty table; rates are from the median batch. Time spent inside DynamoDB calls
(moto's work plus botocore's parsing) is measured apart from the rest, which is what the function itself spends:
moto's storage times say little about DynamoDB's, while the function's own time and the request counts carry
over. moto rolls a transaction back from an undo log, not copies of the table (local/moto_storage.py).
"""

from __future__ import annotations

import random
import threading
import time

from bench.common import ROOT, Requests, median, moto, print_table, write_json
from bench.front import AWS, call

BATCHES = {1: 300, 10: 60, 100: 20}  # timed batches per batch size
NEW_PEERS = (1, 10, 100)
WS = "bench"
WORDS = (
    "the agent called the weather tool for Lisbon and got 21°C with light wind then it answered the user "
    'about flights hotels trains prices dates a JSON result {"ok": true} and a short follow-up'
).split()


def batch_body(rng: random.Random, size: int, start: int, peers: tuple[str, ...] = ("alice", "assistant")) -> dict:
    """A batch as agents post it: turns of a user and an assistant, tool calls and results under one run id."""
    messages = []
    for i in range(size):
        words = rng.randint(15, 80) if rng.random() < 0.7 else rng.randint(80, 300)
        messages.append(
            {
                "content": " ".join(rng.choice(WORDS) for _ in range(words)),
                "peer_id": peers[(start + i) % len(peers)],
                "run_id": f"run-{(start + i) // 4}",
            }
        )
    return {"messages": messages}


class StorageClock:
    """Seconds spent inside the handler's DynamoDB calls: from just before moto answers to the parsed response."""

    def __init__(self, client):
        self.client, self.seconds, self._started = client, 0.0, threading.local()

    def _send(self, **_):
        self._started.at = time.perf_counter()

    def _done(self, **_):
        at = getattr(self._started, "at", None)
        if at is not None:
            self.seconds += time.perf_counter() - at
            self._started.at = None

    def __enter__(self):
        self.client.meta.events.register_first("before-send.dynamodb", self._send)
        self.client.meta.events.register("needs-retry.dynamodb", self._done)
        return self

    def __exit__(self, *exc):
        self.client.meta.events.unregister("before-send.dynamodb", self._send)
        self.client.meta.events.unregister("needs-retry.dynamodb", self._done)


def run() -> dict:
    rng = random.Random(42)
    rows, results = [], {}
    for size, batches in BATCHES.items():
        with moto():
            assert call("POST", "/v3/workspaces", {"id": WS}).status == 201
            url = f"/v3/workspaces/{WS}/sessions/s-{size}/messages"
            call("POST", f"/v3/workspaces/{WS}/sessions/warm/messages", batch_body(rng, 1, 0))  # tiktoken loaded
            with Requests(AWS) as requests, StorageClock(AWS) as storage:
                assert call("POST", url, batch_body(rng, size, 0)).status == 201
                first_requests, first_ops = len(requests.ops), requests.by_op()
                call("POST", url, batch_body(rng, 2, 0))  # both peers are members from here on
                per_batch, wall, stored, ops = [], [], [], ""
                for batch_no in range(1, batches + 1):
                    body = batch_body(rng, size, batch_no * size)
                    requests.reset()
                    storage.seconds = 0.0
                    started = time.perf_counter()
                    reply = call("POST", url, body)
                    wall.append(time.perf_counter() - started)
                    stored.append(storage.seconds)
                    assert reply.status == 201, reply.body
                    per_batch.append(len(requests.ops))
                    ops = requests.by_op()
        own = [w - s for w, s in zip(wall, stored)]
        results[size] = {
            "batches": len(wall),
            "messages_per_s": size / median(wall),
            "function_messages_per_s": size / median(own),
            "median_ms_per_batch": median(wall) * 1000,
            "median_function_ms_per_batch": median(own) * 1000,
            "requests_per_batch": median(per_batch),
            "max_requests_per_batch": max(per_batch),
            "ops_per_batch": ops,
            "first_batch_requests": first_requests,
            "first_batch_ops": first_ops,
        }
        rows.append(
            [
                size,
                len(wall),
                size / median(wall),
                size / median(own),
                median(wall) * 1000,
                median(own) * 1000,
                max(per_batch),
                first_requests,
            ]
        )
        print(f"  batch of {size}: {len(wall)} batches timed", flush=True)

    print_table(
        "Ingestion through the handler, in-process moto (median batch)",
        ["batch", "batches", "msg/s", "msg/s fn*", "ms/batch", "ms/batch fn*", "requests/batch", "first batch**"],
        rows,
    )
    print("*  fn: the function's own time (validation, token counts, items, JSON), DynamoDB calls excluded")
    print("** requests of the first batch of a new session (creates the session and the memberships)")
    print(
        f"requests per batch (session exists): {results[100]['ops_per_batch']}; "
        f"first batch of a new session: {results[100]['first_batch_ops']}"
    )

    peer_rows = []
    with moto():
        assert call("POST", "/v3/workspaces", {"id": WS}).status == 201
        with Requests(AWS) as requests:
            for peers in NEW_PEERS:
                requests.reset()
                names = tuple(f"peer-{peers}-{i}" for i in range(peers))
                reply = call(
                    "POST", f"/v3/workspaces/{WS}/sessions/peers-{peers}/messages", batch_body(rng, 100, 0, names)
                )
                assert reply.status == 201, reply.body
                peer_rows.append([peers, len(requests.ops), requests.by_op()])
    results["first_batch_by_new_peers"] = {row[0]: {"requests": row[1], "ops": row[2]} for row in peer_rows}
    print_table(
        "First 100-message batch of a new session, by how many of its peers are new",
        ["new peers", "requests", "operations"],
        peer_rows,
    )

    ratio = results[100]["function_messages_per_s"] / results[1]["function_messages_per_s"]
    print(
        f"\n100-message batch: {results[100]['max_requests_per_batch']} DynamoDB requests once the session exists, "
        f"{results[100]['first_batch_requests']} for a new session's first (target: at most 6); "
        f"the function handles {ratio:.1f}x the messages per second of single-message posts"
    )
    path = write_json("ingest", results)
    print(f"wrote {path.relative_to(ROOT)}")
    return results
