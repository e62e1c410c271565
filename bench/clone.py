"""Session clone's cost: the clone request's latency and DynamoDB requests for sessions of 100 → 100,000 messages,
the context read on a clone (while it reads through its parent, and once its background copy is done) against the
same read on the ordinary session, and what the background copy costs: the summarizer (the function whose stream
filter routes a clone's session record to its `copy` job, precis/stream.py's ROUTES) invoked with the records of
moto's stream as its event-source mapping delivers them, its requests counted at the AWS door. Sessions are loaded
in bulk by bench/seed.py (through bench/context.py's `seed_session`)."""

from __future__ import annotations

import os
import random
import time

from bench.common import Requests, moto, print_table, template, write_json
from bench.context import WS, add_summaries, read_context, seed_session, text_pool
from bench.front import AWS, Stream, call

SIZES = tuple(int(s) for s in os.environ.get("PRECIS_BENCH_CLONE_SIZES", "100,1000,10000,100000").split(","))
# In-process moto copies its whole table for every transaction, so a transaction's time grows with the table there
# (not in DynamoDB): the clone's milliseconds below are moto's, its request count is Precis's. The background copy
# (a transaction per 24 items) is timed up to this length only.
COPY_UP_TO = 1_000
BUDGET = 8_000


def _context(session: str) -> tuple[int, int, float]:
    """The context route's requests, bytes read and time on `session` (through its handler)."""
    read_context(None, WS, session, BUDGET)  # warm
    with Requests(AWS) as counted:
        started = time.perf_counter()
        read_context(None, WS, session, BUDGET)
        seconds = time.perf_counter() - started
    return len(counted.ops), counted.bytes, seconds * 1000


def run() -> None:
    rows = []
    rng = random.Random(11)
    for size in SIZES:
        # The stream only where the background copy runs (moto keeps every record of a 100,000-message seeding).
        with moto(stream=size <= COPY_UP_TO) as clients:
            # The bench's own clients seed the session; the routes' and the summarizer's are counted apart.
            table = template().table_name
            stream = Stream(("SummarizeFunction",)) if size <= COPY_UP_TO else None
            assert call("POST", "/v3/workspaces", {"id": WS}).status in (200, 201)
            session = f"s{size}"
            assert call(
                "POST", f"/v3/workspaces/{WS}/sessions", {"id": session, "peers": {"alice": {}, "assistant": {}}}
            ).status in (200, 201)
            costs = seed_session(clients["dynamodb"], table, session, size, text_pool(rng), rng)
            add_summaries(clients["dynamodb"], table, session, costs, rng)
            if stream is not None:
                stream.skip()  # the seeding's records: the bench's, not the clone's (no summarizer would see them)
            with Requests(AWS) as counted:
                started = time.perf_counter()
                reply = call("POST", f"/v3/workspaces/{WS}/sessions/{session}/clone")
                clone_ms = (time.perf_counter() - started) * 1000
            assert reply.status == 201, reply.body
            clone = reply.body["id"]
            clone_requests, clone_bytes = len(counted.ops), counted.bytes
            plain = _context(session)
            through = _context(clone)
            copy_requests, copy_s, copied = None, None, (None, 0, None)
            if stream is not None:  # the summarizer, on the clone's stream record (and each copy step's)
                with Requests(AWS) as counted:
                    started = time.perf_counter()
                    assert stream.drain() >= 1
                    copy_s = time.perf_counter() - started
                copy_requests = len(counted.ops)
                copied = _context(clone)
            rows.append(
                {
                    "messages": size,
                    "clone_ms": clone_ms,
                    "clone_requests": clone_requests,
                    "clone_bytes": clone_bytes,
                    "context_requests": plain[0],
                    "context_bytes": plain[1],
                    "context_ms": plain[2],
                    "clone_context_requests": through[0],
                    "clone_context_bytes": through[1],
                    "clone_context_ms": through[2],
                    "copied_context_requests": copied[0],
                    "copied_context_bytes": copied[1],
                    "copy_requests": copy_requests,
                    "copy_s": copy_s,
                }
            )
            print(f"  {size:,} messages done", flush=True)
    print_table(
        "Session clone: the request (7 DynamoDB requests whatever the length; its ms grow with moto's "
        "table copies, not DynamoDB's), and the context read (8,000 tokens) on the session, on its clone while "
        "it reads through, and once copied",
        [
            "messages",
            "clone ms",
            "clone requests",
            "context requests / KB",
            "clone's context requests / KB",
            "after copy requests / KB",
            "background copy requests",
            "copy s",
        ],
        [
            (
                r["messages"],
                r["clone_ms"],
                r["clone_requests"],
                f"{r['context_requests']} / {r['context_bytes'] / 1024:.0f}",
                f"{r['clone_context_requests']} / {r['clone_context_bytes'] / 1024:.0f}",
                f"{r['copied_context_requests']} / {r['copied_context_bytes'] / 1024:.0f}"
                if r["copied_context_requests"] is not None
                else "—",
                r["copy_requests"] if r["copy_requests"] is not None else "—",
                r["copy_s"] if r["copy_s"] is not None else "—",
            )
            for r in rows
        ],
    )
    write_json("clone", rows)
