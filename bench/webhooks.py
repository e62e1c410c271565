"""`make bench webhooks`: events as a receiver gets them from the local stack (`make dev`).

Two runs, each on a fresh stack with its default settings: under PRECIS_LOCAL_CHAOS=replay,shards (every stream batch
and every SQS batch delivered twice, partitions in either order), and without chaos (as AWS delivers nearly always).
Two workspaces, each with an endpoint at its own path of one receiver: a real HTTP server on 127.0.0.1 that checks
every delivery's Standard Webhooks signature with its own code (HMAC-SHA256 of `{webhook-id}.{webhook-timestamp}.`
and the body, under the endpoint's `whsec_` secret). SESSIONS sessions in the first workspace and OTHER_SESSIONS in
the second, each a burst of MESSAGES messages between two peers, all posted together. Then, per session, the seconds
from its last post to:

- **event**: the last `queue.empty` of type `representation` of its two senders (Honcho's unit: the session and the
  sender, `observed`; the units the session's status counts);
- **status**: the session's queue status first showing nothing pending or in progress, asked by one client that polls
  every session in turn and then sleeps POLL_S (the way an SDK waits today): the figure is late by up to a poll
  period (printed), the time between two polls of one session.

Target (issue 50): the event arrives within the time the status takes: event p95 ≤ status p95. Also counted:
deliveries, distinct `webhook-id`s and the duplicate rate (a second delivery under an id already received: a receiver
drops it), deliveries whose workspace is not the endpoint's (target 0), bad signatures (target 0), and every event type
seen. PRECIS_BENCH_WEBHOOKS_SCALE=0.3 runs a third of the sessions (a quick look).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import random
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from bench.common import percentile, print_table, write_json
from bench.local import Client, sentence, stack

SCALE = float(os.environ.get("PRECIS_BENCH_WEBHOOKS_SCALE") or 1.0)
SESSIONS, OTHER_SESSIONS, MESSAGES = 12, 3, 20
POLL_S = 0.25
DEADLINE_S = 600.0
TOLERANCE_S = 300  # Standard Webhooks' suggested timestamp tolerance


def _valid(secret: str, headers: Any, body: bytes) -> bool:
    """Standard Webhooks' check, written from its specification (not precis.webhooks.signing)."""
    msg_id, stamp = headers.get("webhook-id") or "", headers.get("webhook-timestamp") or ""
    if not msg_id or not stamp.isdigit() or abs(time.time() - int(stamp)) > TOLERANCE_S:
        return False
    key = base64.b64decode(secret.removeprefix("whsec_"))
    expected = base64.b64encode(hmac.new(key, f"{msg_id}.{stamp}.".encode() + body, hashlib.sha256).digest())
    offered = [s.split(",", 1)[1] for s in (headers.get("webhook-signature") or "").split() if s.startswith("v1,")]
    return any(hmac.compare_digest(expected.decode(), s) for s in offered)


class Receiver:
    """A real HTTP receiver: every delivery kept with its arrival time, path and whether its signature held."""

    def __init__(self) -> None:
        self.secrets: dict[str, str] = {}  # path -> whsec_
        self.got: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                arrived = time.perf_counter()
                entry = {
                    "at": arrived,
                    "path": self.path,
                    "id": self.headers.get("webhook-id"),
                    "valid": _valid(receiver.secrets.get(self.path, ""), self.headers, body),
                    "event": json.loads(body),
                }
                with receiver.lock:
                    receiver.got.append(entry)
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def snapshot(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.got)


def _representation_empty(got: list[dict[str, Any]], ws: str, session: str, peers: tuple[str, ...]) -> float | None:
    """When the last of the session's senders' representation units was reported empty (None: not all yet)."""
    last: dict[str, float] = {}
    for entry in got:
        event = entry["event"]
        data = event.get("data") or {}
        if (
            event.get("type") == "queue.empty"
            and data.get("queue_type") == "representation"
            and data.get("workspace_id") == ws
            and data.get("session_id") == session
            and data.get("observed") in peers
        ):
            last[data["observed"]] = max(last.get(data["observed"], 0.0), entry["at"])
    return max(last.values()) if len(last) == len(peers) else None


def run_once(chaos: str) -> dict[str, Any]:
    rng = random.Random(50)
    receiver = Receiver()
    sessions = max(1, round(SESSIONS * SCALE))
    with stack(PRECIS_LOCAL_CHAOS=chaos) as (port, _):
        client = Client(port)
        plan = {"hooks-a": sessions, "hooks-b": max(1, round(OTHER_SESSIONS * SCALE))}
        for ws in plan:
            client.call("POST", "/v3/workspaces", {"id": ws})
            made = client.call("POST", f"/v3/workspaces/{ws}/webhooks", {"url": f"{receiver.url}/{ws}"})
            receiver.secrets[f"/{ws}"] = made["secret"]
        units = [(ws, f"s{s}", ("user", f"agent-{s}")) for ws, count in plan.items() for s in range(count)]
        for ws, session, peers in units:
            client.call("POST", f"/v3/workspaces/{ws}/sessions", {"id": session, "peers": {p: {} for p in peers}})
        last_post: dict[tuple[str, str], float] = {}
        for ws, session, peers in units:
            batch = [{"peer_id": peers[i % 2], "content": sentence(rng)} for i in range(MESSAGES)]
            client.call("POST", f"/v3/workspaces/{ws}/sessions/{session}/messages", {"messages": batch})
            last_post[(ws, session)] = time.perf_counter()
        status_at: dict[tuple[str, str], float] = {}
        event_at: dict[tuple[str, str], float] = {}
        polled: dict[tuple[str, str], float] = {}
        periods: list[float] = []  # between two polls of one session: the status figure's resolution
        deadline = time.perf_counter() + DEADLINE_S
        while time.perf_counter() < deadline and len(event_at) + len(status_at) < 2 * len(units):
            got = receiver.snapshot()
            for ws, session, peers in units:
                key = (ws, session)
                if key not in event_at and (at := _representation_empty(got, ws, session, peers)) is not None:
                    event_at[key] = at
                if key not in status_at:
                    if key in polled:
                        periods.append(time.perf_counter() - polled[key])
                    polled[key] = time.perf_counter()
                    status = client.call("GET", f"/v3/workspaces/{ws}/queue/status?session_id={session}")
                    if status and not status.get("pending_work_units") and not status.get("in_progress_work_units"):
                        status_at[key] = time.perf_counter()
            time.sleep(POLL_S)
        # Deliveries still on their way (a replayed batch's second events) arrive within the same poll rounds.
        settle = time.perf_counter() + 10 * POLL_S
        while time.perf_counter() < settle:
            time.sleep(POLL_S)
        got = receiver.snapshot()
        failures = client.failures
    ids = Counter(e["id"] for e in got)
    foreign = [e for e in got if (e["event"].get("data") or {}).get("workspace_id") != e["path"].strip("/")]
    event_s = [event_at[k] - last_post[k] for k in event_at]
    status_s = [status_at[k] - last_post[k] for k in status_at]
    return {
        "chaos": chaos or "none",
        "sessions": len(units),
        "messages": len(units) * MESSAGES,
        "event_seen": len(event_at),
        "status_seen": len(status_at),
        "event_p50_s": percentile(event_s, 0.5) if event_s else None,
        "event_p95_s": percentile(event_s, 0.95) if event_s else None,
        "status_p50_s": percentile(status_s, 0.5) if status_s else None,
        "status_p95_s": percentile(status_s, 0.95) if status_s else None,
        "poll_period_s": sum(periods) / len(periods) if periods else None,
        "deliveries": len(got),
        "distinct_ids": len(ids),
        "duplicate_rate": (len(got) - len(ids)) / len(got) if got else 0.0,
        "foreign": len(foreign),
        "bad_signatures": sum(not e["valid"] for e in got),
        "types": dict(Counter(e["event"].get("type") for e in got)),
        "non_2xx": len(failures),
    }


def run() -> None:
    runs = [run_once(chaos) for chaos in ("replay,shards", "")]
    write_json("webhooks", runs)
    sessions = runs[0]["sessions"]
    print_table(
        f"webhooks: {sessions} sessions × {MESSAGES} messages in two workspaces, one receiver; seconds from a "
        f"session's last post to its queue.empty (representation) received, and to its queue status first empty "
        f"(polled every {POLL_S} s)",
        ["chaos", "events seen", "event p50", "event p95", "status p50", "status p95", "status poll period"],
        [
            [
                r["chaos"],
                r["event_seen"],
                r["event_p50_s"],
                r["event_p95_s"],
                r["status_p50_s"],
                r["status_p95_s"],
                r["poll_period_s"],
            ]
            for r in runs
        ],
    )
    print_table(
        "deliveries (a duplicate: a second delivery under the same webhook-id)",
        ["chaos", "deliveries", "distinct ids", "duplicate rate", "other workspace's", "bad signatures", "non-2xx API"],
        [
            [
                r["chaos"],
                r["deliveries"],
                r["distinct_ids"],
                r["duplicate_rate"],
                r["foreign"],
                r["bad_signatures"],
                r["non_2xx"],
            ]
            for r in runs
        ],
    )
    types = sorted({t for r in runs for t in r["types"]})
    print_table(
        "event types received",
        ["type", *(r["chaos"] for r in runs)],
        [[t, *(r["types"].get(t, 0) for r in runs)] for t in types],
    )
    for r in runs:
        seen = r["event_seen"] == r["sessions"] and r["foreign"] == 0 and r["bad_signatures"] == 0
        late = (r["event_p95_s"] or float("inf")) - (r["status_p95_s"] or 0.0)
        print(
            f"target, chaos {r['chaos']}: every session's queue.empty, none foreign, all signed: {seen}; event p95 "
            f"{late:+.2f} s against the status's (a poll period is {r['poll_period_s'] or 0:.2f} s): "
            f"{'met' if late <= 0 else 'within one poll period' if late <= (r['poll_period_s'] or 0) else 'not met'}"
        )
