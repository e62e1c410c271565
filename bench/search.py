"""Message search's cost: DynamoDB requests and response bytes per `POST /search` (through its handler, counted at the
AWS door) for workspaces of 1,000 → 100,000 messages (100 a session), against reading every message of the workspace
(what a store without an index would do to rank them). The sessions are created through their route and their messages
loaded in bulk by bench/seed.py, as the message route stores them, with their index as the ingest function writes it
(a unit per session: a post of 100) and merged as the deriver merges it. PRECIS_BENCH_SEARCH_SIZES (default
1000,10000,100000) chooses the workspace sizes."""

from __future__ import annotations

import os
import random

from bench.common import Requests, moto, print_table, template, write_json
from bench.front import AWS, call
from bench.seed import Said, write_messages

SIZES = tuple(int(n) for n in os.environ.get("PRECIS_BENCH_SEARCH_SIZES", "1000,10000,100000").split(","))
PER_SESSION = 100
WORDS = (
    "budget invoice Lisbon studio design river deadline client proposal meeting contract schedule review "
    "draft figures launch supplier quote travel team agreed decided asked confirmed moved week"
).split()


def load_messages(client, table: str, ws: str, count: int, rng: random.Random) -> list[str]:
    """`count` messages, PER_SESSION a session (created through the route), and their search index, loaded by
    bench/seed.py as the message route, the ingest function and the deriver store them (the route's transactions would
    make 100,000 slow in moto). Returns the sessions' ids."""
    sessions = []
    for start in range(0, count, PER_SESSION):
        session = f"s{start // PER_SESSION}"
        sessions.append(session)
        assert call("POST", f"/v3/workspaces/{ws}/sessions", {"id": session}).status in (200, 201)
        texts = [" ".join(rng.choice(WORDS) for _ in range(12)) for _ in range(PER_SESSION)]
        said = [Said("alice", text, tokens=12, created_at="2026-11-30T00:00:00+00:00") for text in texts]
        write_messages(client, table, ws, session, said, post=PER_SESSION, index=True, merge=True)
    return sessions


def read_all(client, table: str, ws: str, session: str) -> int:
    """What a store without an index does to rank a session's messages: read them all (a paginated Query of the
    session's partition, in the table's documented layout: "WS#{ws}#S#{id}", messages under "MSG#"). How many."""
    read, kwargs = 0, {}
    while True:
        page = client.query(
            TableName=table,
            KeyConditionExpression="PK = :pk AND begins_with(SK, :m)",
            ExpressionAttributeValues={":pk": {"S": f"WS#{ws}#S#{session}"}, ":m": {"S": "MSG#"}},
            **kwargs,
        )
        read += len(page["Items"])
        if "LastEvaluatedKey" not in page:
            return read
        kwargs = {"ExclusiveStartKey": page["LastEvaluatedKey"]}


def run() -> None:
    rows = []
    rng = random.Random(3)
    for size in SIZES:
        with moto(stream=False) as clients:
            own, table = clients["dynamodb"], template().table_name
            assert call("POST", "/v3/workspaces", {"id": "bench"}).status in (200, 201)
            sessions = load_messages(own, table, "bench", size, rng)
            with Requests(AWS) as counted:
                reply = call("POST", "/v3/workspaces/bench/search", {"query": "Lisbon budget deadline", "limit": 10})
                requests, read = len(counted.ops), counted.bytes
            assert reply.status == 200, reply.body
            found = reply.body
            with Requests(own) as counted:
                for session in sessions:
                    read_all(own, table, "bench", session)
                scan_requests, scan_bytes = len(counted.ops), counted.bytes
            rows.append(
                {
                    "messages": size,
                    "returned": len(found),
                    "requests": requests,
                    "bytes": read,
                    "scan_requests": scan_requests,
                    "scan_bytes": scan_bytes,
                }
            )
    print_table(
        "Message search (limit 10): DynamoDB requests and response bytes per query, against reading every message",
        ["messages", "returned", "requests", "bytes", "read-all requests", "read-all bytes", "bytes saved x"],
        [
            (
                r["messages"],
                r["returned"],
                r["requests"],
                r["bytes"],
                r["scan_requests"],
                r["scan_bytes"],
                r["scan_bytes"] / max(1, r["bytes"]),
            )
            for r in rows
        ],
    )
    write_json("search", rows)
