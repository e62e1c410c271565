"""A peer's erasure, metered (`python -m bench erase`): alice and an assistant talk in SESSIONS sessions of MESSAGES
messages (alice says SHARE of them: 10,000 at the defaults), posted in batches of 100 and derived; then alice is erased
and the stream drained until the job is done (bench/cost.py's in-process stack: its request units, S3 requests and
invocations; the message deletes' cascades and the summaries made again included). `PRECIS_BENCH_ERASE=S,M[,SHARE]`
scales it (sessions, messages a session, alice's share). The in-process moto holds every item in memory (about 0.9 GB
per 1,000 messages stored): the defaults erase 10,000 messages of 12,000 in about 11 GB."""

from __future__ import annotations

import os
import random
import time
from collections import Counter
from typing import Any

from bench.common import moto, print_table, write_json
from bench.cost import Stack, batch_body, hot_spots, key_kind

SESSIONS, MESSAGES, SHARE = 6, 2_000, 5 / 6


def _scale() -> tuple[int, int, float]:
    given = os.environ.get("PRECIS_BENCH_ERASE")
    if not given:
        return SESSIONS, MESSAGES, SHARE
    parts = given.split(",")
    return int(parts[0]), int(parts[1]), float(parts[2]) if len(parts) > 2 else 0.5


def run() -> dict:
    sessions, per_session, share = _scale()
    rng = random.Random(11)
    with moto(stream=False) as clients:
        stack = Stack(clients)
        try:
            stack.http("POST", "/v3/workspaces", {"id": "w"})
            for session in range(sessions):
                for start in range(0, per_session, 100):
                    body = batch_body(rng, min(100, per_session - start), start, share)
                    stack.http("POST", f"/v3/workspaces/w/sessions/s{session}/messages", body)
                stack.drain()
            stack.metering = True
            started = time.perf_counter()
            job = stack.http("DELETE", "/v3/workspaces/w/peers/alice")
            polls = 0
            while True:
                status = stack.http("GET", "/v3/workspaces/w/peers/alice/erasure")
                if status["status"] != "running":
                    break
                stack.drain()
                polls += 1
            stack.drain()  # the summaries made again after the last cascades
            wall = time.perf_counter() - started
            stack.metering = False
        finally:
            stack.close()
    assert status["status"] == "done", status
    erased = status["counts"]["messages"]
    units = sum((c for label, c in stack.capacity.totals.items() if label != "setup"), Counter())
    index = sum(units[f"wru_{kind}"] for kind in ("lsi", "gsi", "vector"))
    s3 = sum((Counter(v) for label, v in stack.s3.requests.items() if label != "setup"), Counter())
    billed = {f: sum(ms) for f, ms in stack.runs.billed.items()}
    out: dict[str, Any] = {
        "sessions": sessions,
        "messages": sessions * per_session,
        "alice_share": share,
        "erased": erased,
        "counts": status["counts"],
        "steps": status["steps"],
        "job": job["id"],
        "wall_s": wall,
        "rru": units["rru"],
        "wru": units["wru"] + index,
        "rru_per_message": units["rru"] / erased,
        "wru_per_message": (units["wru"] + index) / erased,
        "s3_requests": dict(s3),
        "billed_ms": billed,
        "requests": {k.removeprefix("op:"): v for k, v in units.items() if k.startswith("op:")},
    }
    # Where the units land, by kind of item (its key's shape), and the hottest item and partition.
    heat = sum((c for label, c in stack.capacity.heat.items() if label != "setup"), Counter())
    by_kind: Counter = Counter()
    for key, value in heat.items():
        if key[1] == "item":
            by_kind[(key[0], key_kind("item", *key[2:]))] += value
    out["by_kind"] = {f"{unit} {kind}": v / erased for (unit, kind), v in by_kind.most_common()}
    out["index_wru"] = {kind: units[f"wru_{kind}"] / erased for kind in ("lsi", "gsi", "vector")}
    out["hot"] = hot_spots(stack.capacity, erased)
    print_table(
        f"Erasing a peer of {erased:,} messages in {sessions} sessions",
        ["", "total", "per message erased"],
        [
            ["RRU", round(units["rru"]), round(out["rru_per_message"], 1)],
            ["WRU", round(units["wru"] + index), round(out["wru_per_message"], 1)],
            ["billed ms (all functions)", sum(billed.values()), round(sum(billed.values()) / erased, 1)],
        ],
    )
    print(
        f"  {status['steps']} job steps; counts {status['counts']}; {wall:.0f} s in process;"
        f" {sessions * per_session:,} messages stored, alice's share {share:.2f}"
    )
    print_table(
        "Where the units land (per message erased)",
        ["unit", "item kind", "per message"],
        [[*label.split(" ", 1), round(v, 2)] for label, v in list(out["by_kind"].items())[:12]]
        + [["wru", f"index ({kind})", round(v, 2)] for kind, v in out["index_wru"].items()],
    )
    hot = out["hot"]
    for name in ("wru_item", "wru_partition", "rru_partition"):
        if hot[name]:
            top = hot[name][0]
            print(f"  hottest {name.replace('_', ' ')}: {top['kind']} {top['per_unit']:.2f} a message erased")
    write_json("erase", out)
    return out
