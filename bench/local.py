"""`make bench local`: the local stack (`make dev`, as a user starts it) under the load a real client brings.

Three scenarios, each on a fresh stack with its default settings (no chaos), over HTTP:

- **import**: one client imports 10 workspaces × 20 sessions × 30 messages of realistic sentences, one request at a
  time (each session created with its two peers, then its turns in one batch of 30 — the targets' row — and, again
  on a fresh stack, in batches of 10), then waits for every session's queue status to be empty: messages/s,
  request latency (p50, p99, max), non-2xx answers, and the seconds from the last post until the queues are empty.
- **writers**: 8 concurrent writers × 10 batches of 10 messages into one session, each batch sent twice with its
  `Idempotency-Key`: messages stored (and whether their seqs are dense), non-2xx, batch latency.
- **reader**: while one client imports (a third of the import's workspaces, batches of 30), an SDK client (honcho-ai,
  over HTTP) pages through a 300-message session 50 at a time and clones it, again and again: the longest it waited.
- **scale**: a 10-message batch's latency with 1,000 and with 100,000 items already in the table (seeded straight
  into moto as other sessions' copied messages, which wake no stream consumer), and their ratio.

Targets (what a real client must see): import ≥ 300 messages/s, 0 non-2xx, max request ≤ 2 s, queues empty ≤ 60 s
after the last post; writers 800/800 dense, 0 non-2xx, p99 ≤ 2 s; a batch at 100k items ≤ 1.5x its latency at 1k;
the reader never waits past a few seconds (≤ 3 s) for a page or a clone.
PRECIS_BENCH_LOCAL_SCALE=0.2 runs a fifth of each (a quick look; the targets are for the full size).
"""

from __future__ import annotations

import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.common import ROOT, percentile, print_table, write_json

SCALE = float(os.environ.get("PRECIS_BENCH_LOCAL_SCALE") or 1.0)
WORKSPACES, SESSIONS, MESSAGES = 10, 20, 30
BATCHES = (30, 10)  # a session's turns in one add_messages call (as an importer posts them), and in threes
WRITERS, WRITER_BATCHES = 8, 10
SEEDED = (1_000, 100_000)
READER_MESSAGES, READER_PAGE = 300, 50
READER_WAIT_S = 3.0
QUEUE_DEADLINE_S = 600.0

_SUBJECTS = ("I", "My sister", "The team", "Our landlord", "My doctor", "Alice", "Bob", "The new manager", "We")
_VERBS = (
    "moved to",
    "booked a trip to",
    "started learning",
    "cancelled the meeting about",
    "finally finished",
    "keeps talking about",
    "is worried about",
    "bought tickets for",
    "wrote a long email about",
)
_OBJECTS = (
    "Lisbon",
    "the quarterly report",
    "Japanese cooking",
    "a second-hand bike",
    "the adoption papers",
    "the marathon in April",
    "a pottery class",
    "the leak in the kitchen",
    "our anniversary dinner",
    "the new hiking boots",
    "a concert at the old theatre",
    "the garden on the roof",
)
_TAILS = (
    "last spring.",
    "yesterday evening.",
    "and it went better than expected.",
    "but nobody answered.",
    "because the price finally dropped.",
    "after thinking about it for weeks.",
    "again, for the third time.",
    "and I'm not sure how I feel about it.",
    "with two friends from work.",
    "on Saturday morning.",
)


def sentence(rng: random.Random) -> str:
    """A turn of an everyday conversation: one to three sentences."""
    return " ".join(
        f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)} {rng.choice(_TAILS)}"
        for _ in range(rng.randint(1, 3))
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Client:
    """One keep-alive HTTP connection to the stack; every answer's status and latency is recorded."""

    def __init__(self, port: int):
        self.port = port
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        self.latencies: list[float] = []
        self.failures: list[tuple[int, str]] = []

    def call(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        started = time.perf_counter()
        try:
            self.conn.request(method, path, body=data, headers={"content-type": "application/json", **(headers or {})})
            response = self.conn.getresponse()
            payload = response.read()
            status = response.status
        except (OSError, http.client.HTTPException) as exc:
            self.conn.close()
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
            status, payload = 599, str(exc).encode()
        self.latencies.append(time.perf_counter() - started)
        if not 200 <= status < 300:
            self.failures.append((status, f"{method} {path}: {payload[:200]!r}"))
            return None
        return json.loads(payload) if payload else None


@contextmanager
def stack(**env: str) -> Iterator[tuple[int, str]]:
    """`python -m local` on a free port (its log in a temporary file); yields (port, moto endpoint)."""
    port = _free_port()
    with tempfile.TemporaryDirectory() as tmp:
        dev_json = Path(tmp) / "dev.json"
        log = (Path(tmp) / "stack.log").open("wb")
        environ = {
            **os.environ,
            "PRECIS_LOCAL_CHAOS": "",
            **env,
            "PRECIS_PORT": str(port),
            "PRECIS_DEV_JSON": str(dev_json),
        }
        proc = subprocess.Popen([sys.executable, "-m", "local"], cwd=ROOT, env=environ, stdout=log, stderr=log)
        try:
            deadline = time.monotonic() + 60
            while not dev_json.exists():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the stack did not start:\n{(Path(tmp) / 'stack.log').read_text()}")
                time.sleep(0.1)
            yield port, json.loads(dev_json.read_text())["moto_endpoint"]
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
            log.close()


def _wait_for_queues(client: Client, sessions: list[tuple[str, str]]) -> None:
    """Until every session's queue status is empty: the exact count (a workspace's sums the deriver's cursors, so it
    misses what the deriver has not seen yet). Nothing more is posted, so a session seen empty is not asked again until
    a last round confirms them all; while one is not empty the client asks again every half second, one request at a
    time: the waiting client's own requests are load the stack serves (asking all 200 sessions in turn, without a
    pause, kept the API busy and the stream consumers to their share of moto)."""
    deadline = time.perf_counter() + QUEUE_DEADLINE_S
    left = list(sessions)
    while time.perf_counter() < deadline:
        while left and _queue_empty(client, *left[0]):
            left.pop(0)
        if not left:
            left = [s for s in sessions if not _queue_empty(client, *s)]
            if not left:
                return
        time.sleep(0.5)


def _queue_empty(client: Client, ws: str, session: str) -> bool:
    status = client.call("GET", f"/v3/workspaces/{ws}/queue/status?session_id={session}")
    return status is not None and not status.get("pending_work_units") and not status.get("in_progress_work_units")


def import_conversations(
    port: int, batch_size: int, workspaces: int = WORKSPACES, prefix: str = "import", wait: bool = True
) -> dict[str, Any]:
    rng = random.Random(21)
    client = Client(port)
    names = [f"{prefix}-{w}" for w in range(max(1, round(workspaces * SCALE)))]
    sessions = max(1, round(SESSIONS * SCALE))
    posted = 0
    started = time.perf_counter()
    for ws in names:
        client.call("POST", "/v3/workspaces", {"id": ws})
        for s in range(sessions):
            peers = ("user", f"assistant-{s % 3}")
            client.call("POST", f"/v3/workspaces/{ws}/sessions", {"id": f"s{s}", "peers": {p: {} for p in peers}})
            for start in range(0, MESSAGES, batch_size):
                batch = [
                    {"peer_id": peers[i % 2], "content": sentence(rng)}
                    for i in range(start, min(MESSAGES, start + batch_size))
                ]
                if client.call("POST", f"/v3/workspaces/{ws}/sessions/s{s}/messages", {"messages": batch}):
                    posted += len(batch)
    posting_s = time.perf_counter() - started
    latencies = list(client.latencies)
    waited = time.perf_counter()
    if wait:
        _wait_for_queues(client, [(ws, f"s{s}") for ws in names for s in range(sessions)])
    return {
        "batch": batch_size,
        "messages": posted,
        "seconds": posting_s,
        "messages_per_s": posted / posting_s,
        "requests": len(latencies),
        "p50_ms": percentile(latencies, 0.5) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
        "max_ms": max(latencies) * 1000,
        "non_2xx": len(client.failures),
        "failures": client.failures[:5],
        "queues_empty_s": time.perf_counter() - waited if wait else None,
    }


def sdk_reader_mid_import(port: int) -> dict[str, Any]:
    """An SDK client paging through a long session and cloning it while another client imports."""
    from honcho import Honcho

    setup = Client(port)
    setup.call("POST", "/v3/workspaces", {"id": "reader"})
    setup.call("POST", "/v3/workspaces/reader/sessions", {"id": "long", "peers": {"user": {}, "assistant": {}}})
    rng = random.Random(300)
    for start in range(0, READER_MESSAGES, 100):
        setup.call(
            "POST",
            "/v3/workspaces/reader/sessions/long/messages",
            {
                "messages": [
                    {"peer_id": ("user", "assistant")[i % 2], "content": sentence(rng)}
                    for i in range(start, start + 100)
                ]
            },
        )
    imported: dict[str, Any] = {}
    importer = threading.Thread(
        target=lambda: imported.update(
            import_conversations(port, 30, workspaces=max(1, WORKSPACES // 3), prefix="busy", wait=False)
        )
    )
    session = Honcho(
        base_url=f"http://127.0.0.1:{port}", api_key="local", workspace_id="reader", timeout=120, max_retries=0
    ).session("long")
    waits: dict[str, list[float]] = {"page": [], "clone": []}
    failures: list[tuple[int, str]] = []

    def timed(kind: str, call: Callable[[], Any]) -> Any:
        started = time.perf_counter()
        try:
            return call()
        except Exception as exc:  # noqa: BLE001 - the SDK raises its own errors for any non-2xx; each is counted
            failures.append((getattr(exc, "status_code", 0), f"{kind}: {exc!r}"[:200]))
            return None
        finally:
            waits[kind].append(time.perf_counter() - started)

    importer.start()
    rounds, complete = 0, 0
    while importer.is_alive():
        pages = [
            timed("page", lambda n=n: session.messages(page=n, size=READER_PAGE))
            for n in range(1, READER_MESSAGES // READER_PAGE + 1)
        ]
        complete += sum(len(p.items) if p is not None else 0 for p in pages) == READER_MESSAGES
        timed("clone", session.clone)
        rounds += 1
    importer.join()
    every = waits["page"] + waits["clone"]
    return {
        "rounds": rounds,
        "complete_listings": complete,
        "import_messages": imported.get("messages"),
        "import_msg_per_s": imported.get("messages_per_s"),
        "page_p50_ms": percentile(waits["page"], 0.5) * 1000,
        "page_max_ms": max(waits["page"]) * 1000,
        "clone_p50_ms": percentile(waits["clone"], 0.5) * 1000,
        "clone_max_ms": max(waits["clone"]) * 1000,
        "max_s": max(every),
        "failures": failures[:5],
        "non_2xx": len(failures),
    }


def concurrent_writers(port: int) -> dict[str, Any]:
    setup = Client(port)
    setup.call("POST", "/v3/workspaces", {"id": "writers"})
    setup.call("POST", "/v3/workspaces/writers/sessions", {"id": "one", "peers": {f"w{i}": {} for i in range(WRITERS)}})
    clients = [Client(port) for _ in range(WRITERS)]
    batch_latencies: list[float] = []
    lock = threading.Lock()

    def write(i: int) -> None:
        rng = random.Random(i)
        for b in range(WRITER_BATCHES):
            batch = {
                "messages": [{"peer_id": f"w{i}", "content": f"w{i} b{b} m{m}: {sentence(rng)}"} for m in range(10)]
            }
            for _attempt in range(2):  # the second send is a client's retry: the key makes it a replay
                started = time.perf_counter()
                clients[i].call(
                    "POST", "/v3/workspaces/writers/sessions/one/messages", batch, {"Idempotency-Key": f"w{i}-b{b}"}
                )
                with lock:
                    batch_latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    threads = [threading.Thread(target=write, args=(i,)) for i in range(WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    seqs, number, pages = [], 1, 1
    while number <= pages:
        page = setup.call("POST", f"/v3/workspaces/writers/sessions/one/messages/list?size=100&page={number}", {})
        if page is None:
            break  # counted in the failures
        seqs += [m.get("seq") for m in page["items"]]
        number, pages = number + 1, page["pages"]
    stored = len(seqs)
    dense = sorted(s for s in seqs if s is not None) == list(range(1, stored + 1))
    failures = [f for c in (setup, *clients) for f in c.failures]
    return {
        "stored": stored,
        "expected": WRITERS * WRITER_BATCHES * 10,
        "dense": dense,
        "seconds": elapsed,
        "non_2xx": len(failures),
        "failures": failures[:5],
        "p50_ms": percentile(batch_latencies, 0.5) * 1000,
        "p99_ms": percentile(batch_latencies, 0.99) * 1000,
        "max_ms": max(batch_latencies) * 1000,
    }


def _seed(endpoint: str, count: int) -> None:
    """`count` items of other sessions' copied messages, straight into moto (they wake no stream consumer)."""
    from local.moto_backend import client
    from local.template import template

    dynamodb, table = client("dynamodb", endpoint), template().table_name
    rng = random.Random(count)
    for start in range(0, count, 25):
        requests = []
        for n in range(start, min(count, start + 25)):
            session, seq = n // 500, n % 500 + 1
            requests.append(
                {
                    "PutRequest": {
                        "Item": {
                            "PK": {"S": f"WS#seeded#S#s{session}"},
                            "SK": {"S": f"MSG#{seq:012d}"},
                            "kind": {"S": "message"},
                            "copy_of": {"S": f"WS#parent#S#s{session}"},
                            "seq": {"N": str(seq)},
                            "peer_id": {"S": "user"},
                            "content": {"S": sentence(rng)},
                            "token_count": {"N": "20"},
                            "start_tokens": {"N": str(seq * 20)},
                        }
                    }
                }
            )
        dynamodb.batch_write_item(RequestItems={table: requests})


def batch_latency_at_scale(port: int, endpoint: str, seeded: int) -> dict[str, Any]:
    _seed(endpoint, seeded)
    client = Client(port)
    client.call("POST", "/v3/workspaces", {"id": "scale"})
    client.call("POST", "/v3/workspaces/scale/sessions", {"id": "s", "peers": {"user": {}, "assistant": {}}})
    rng = random.Random(seeded)
    client.latencies.clear()
    for _ in range(30):
        batch = [{"peer_id": ("user", "assistant")[i % 2], "content": sentence(rng)} for i in range(10)]
        client.call("POST", "/v3/workspaces/scale/sessions/s/messages", {"messages": batch})
    return {"seeded": seeded, "p50_ms": percentile(client.latencies, 0.5) * 1000, "non_2xx": len(client.failures)}


def _verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def run() -> None:
    results: dict[str, Any] = {"scale": SCALE}
    imports = []
    for batch_size in BATCHES:
        with stack() as (port, _):
            imports.append(import_conversations(port, batch_size))
    results["imports"] = imports
    imp = results["import"] = imports[0]
    print_table(
        f"import: {max(1, round(WORKSPACES * SCALE))} workspaces × {max(1, round(SESSIONS * SCALE))} "
        f"sessions × {MESSAGES} messages, one request at a time",
        ["batch", "messages", "msg/s", "requests", "p50 ms", "p99 ms", "max ms", "non-2xx", "queues empty s"],
        [
            [
                i["batch"],
                i["messages"],
                i["messages_per_s"],
                i["requests"],
                i["p50_ms"],
                i["p99_ms"],
                i["max_ms"],
                i["non_2xx"],
                i["queues_empty_s"],
            ]
            for i in imports
        ],
    )
    with stack() as (port, _):
        results["writers"] = wr = concurrent_writers(port)
    print_table(
        f"writers: {WRITERS} concurrent × {WRITER_BATCHES} batches of 10, each sent twice with its key",
        ["stored", "dense", "seconds", "non-2xx", "p50 ms", "p99 ms", "max ms"],
        [
            [
                f"{wr['stored']}/{wr['expected']}",
                wr["dense"],
                wr["seconds"],
                wr["non_2xx"],
                wr["p50_ms"],
                wr["p99_ms"],
                wr["max_ms"],
            ]
        ],
    )
    with stack() as (port, _):
        results["reader"] = rd = sdk_reader_mid_import(port)
    print_table(
        f"reader: an SDK client pages through {READER_MESSAGES} messages ({READER_PAGE} a page) and clones the "
        f"session while another client imports",
        [
            "rounds",
            "complete listings",
            "page p50 ms",
            "page max ms",
            "clone p50 ms",
            "clone max ms",
            "errors",
            "import msg/s",
        ],
        [
            [
                rd["rounds"],
                rd["complete_listings"],
                rd["page_p50_ms"],
                rd["page_max_ms"],
                rd["clone_p50_ms"],
                rd["clone_max_ms"],
                rd["non_2xx"],
                rd["import_msg_per_s"],
            ]
        ],
    )
    rows = []
    for seeded in SEEDED:
        with stack() as (port, endpoint):
            rows.append(batch_latency_at_scale(port, endpoint, int(seeded * SCALE)))
    results["scale_rows"] = rows
    ratio = rows[1]["p50_ms"] / rows[0]["p50_ms"]
    print_table(
        "a 10-message batch against the items already stored",
        ["items stored", "batch p50 ms", "non-2xx"],
        [[r["seeded"], r["p50_ms"], r["non_2xx"]] for r in rows],
    )
    checks = [
        (
            f"import (batches of {imp['batch']}) ≥ 300 msg/s",
            f"{imp['messages_per_s']:.0f}",
            imp["messages_per_s"] >= 300,
        ),
        ("import: 0 non-2xx", imp["non_2xx"], imp["non_2xx"] == 0),
        ("import: max request ≤ 2 s", f"{imp['max_ms'] / 1000:.2f} s", imp["max_ms"] <= 2000),
        ("queues empty ≤ 60 s after the last post", f"{imp['queues_empty_s']:.0f} s", imp["queues_empty_s"] <= 60),
        ("writers: 800/800, dense", f"{wr['stored']}/{wr['expected']}", wr["stored"] == wr["expected"] and wr["dense"]),
        ("writers: 0 non-2xx", wr["non_2xx"], wr["non_2xx"] == 0),
        ("writers: p99 batch ≤ 2 s", f"{wr['p99_ms'] / 1000:.2f} s", wr["p99_ms"] <= 2000),
        ("batch at 100k ≤ 1.5x at 1k", f"{ratio:.2f}x", ratio <= 1.5),
        (
            f"reader mid-import: no wait past {READER_WAIT_S:.0f} s, no error",
            f"{rd['max_s']:.2f} s, {rd['non_2xx']}",
            rd["max_s"] <= READER_WAIT_S and rd["non_2xx"] == 0 and rd["complete_listings"] == rd["rounds"],
        ),
    ]
    print_table("targets", ["target", "measured", "verdict"], [[t, m, _verdict(ok)] for t, m, ok in checks])
    for kind, result in [*(("import", i) for i in imports), ("writers", wr), ("reader", rd)]:
        for status, what in result["failures"]:
            print(f"  {kind}: {status} {what}")
    write_json("local", results)
