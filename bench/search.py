"""Message search's cost: DynamoDB requests and response bytes per `POST /search` (through its handler, counted at the
AWS door) for workspaces of 1,000 → 100,000 messages (100 a session), against reading every message of the workspace
(what a store without an index would do to rank them). The messages are loaded in bulk, their index written as the
ingest function writes it (`text_index.index_texts`, a unit per session)."""

from __future__ import annotations

import random

from bench.common import Requests, moto, print_table, write_json
from bench.front import AWS, call

SIZES = (1_000, 10_000, 100_000)
PER_SESSION = 100
WORDS = (
    "budget invoice Lisbon studio design river deadline client proposal meeting contract schedule review "
    "draft figures launch supplier quote travel team agreed decided asked confirmed moved week"
).split()


def load_messages(db, ws: str, count: int, rng: random.Random) -> list[str]:
    """Messages (by BatchWriteItem: the write path's transactions would make loading 100,000 slow in moto) and their
    search index, a unit per session, as the ingest function writes it."""
    from precis.store import keys, text_index
    from precis.store.db import to_item
    from precis.store.messages import make_message_id

    sessions, requests = [], []
    for start in range(0, count, PER_SESSION):
        session = f"s{start // PER_SESSION}"
        sessions.append(session)
        texts = [" ".join(rng.choice(WORDS) for _ in range(12)) for _ in range(PER_SESSION)]
        for offset, text in enumerate(texts, start=1):
            message = {
                **keys.message(ws, session, offset),
                "kind": "message",
                "id": make_message_id(offset),
                "seq": offset,
                "peer_id": "alice",
                "content": text,
                "token_count": 12,
                "start_tokens": 12 * (offset - 1),
                "run_start_seq": offset,
                "run_index": offset,
                "metadata": "{}",
                "created_at": "2026-11-30T00:00:00+00:00",
            }
            requests.append({"PutRequest": {"Item": to_item(message)}})
        for i in range(0, len(requests), 25):
            db.client.batch_write_item(RequestItems={db.table: requests[i : i + 25]})
        requests = []
        text_index.index_texts(
            db,
            ws,
            session,
            f"{session}:1:bench",
            [text_index.Text(i, "alice", t) for i, t in enumerate(texts, start=1)],
        )
    return sessions


def run() -> None:
    from precis.store import keys
    from precis.store.db import Db, query_all, to_item

    rows = []
    rng = random.Random(3)
    for size in SIZES:
        with moto(stream=False) as clients:
            db = Db(client=clients["dynamodb"], s3=clients["s3"], table="precis-local", bucket="precis-local")
            assert call("POST", "/v3/workspaces", {"id": "bench"}).status in (200, 201)
            sessions = load_messages(db, "bench", size, rng)
            with Requests(AWS) as counted:
                reply = call("POST", "/v3/workspaces/bench/search", {"query": "Lisbon budget deadline", "limit": 10})
                requests, read = len(counted.ops), counted.bytes
            assert reply.status == 200, reply.body
            found = reply.body
            with Requests(db.client) as counted:
                for session in sessions:
                    query_all(
                        db,
                        KeyConditionExpression="PK = :pk AND begins_with(SK, :m)",
                        ExpressionAttributeValues=to_item({":pk": keys.session_pk("bench", session), ":m": "MSG#"}),
                    )
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
