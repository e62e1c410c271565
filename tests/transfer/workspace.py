"""A workspace built through the API for the export and import tests, and a job run as the stream runs it."""

from __future__ import annotations

import json

from local.template import template
from tests.handlers import call, invoke
from tests.stream import stream_record

W = "/v3/workspaces"
PEERS = {"alice": {"role": "user"}, "bob": {"role": "assistant"}, "carol": {"role": "observer"}}


def build(aws, ws: str, *, sessions: int, messages: int, batch: int = 100) -> list[str]:
    """A workspace with metadata and configuration, three peers, `sessions` sessions of `messages` messages each
    (alice and bob taking turns, each with metadata and a client timestamp; carol a member who never speaks),
    conclusions in two collections and a card. Its session ids."""
    assert (
        call(
            "POST", W, {"id": ws, "metadata": {"team": "blue"}, "configuration": {"deriver": {"engine": "extractive"}}}
        ).status
        == 201
    )
    for peer, metadata in PEERS.items():
        assert call("POST", f"{W}/{ws}/peers", {"id": peer, "metadata": metadata}).status == 201
    ids = [f"s{n:03d}" for n in range(sessions)]
    for number, session in enumerate(ids):
        body = {
            "id": session,
            "metadata": {"topic": f"topic {number}"},
            "peers": {"alice": {"observe_others": True}, "bob": {}, "carol": {"observe_me": False}},
        }
        assert call("POST", f"{W}/{ws}/sessions", body).status == 201
        for start in range(0, messages, batch):
            posted = [
                {
                    "peer_id": "alice" if i % 2 == 0 else "bob",
                    "content": f"I walked to the {'lighthouse' if i % 3 else 'harbour'} at dawn {i * 7 % 13} times. "
                    f"Message {i} of {session}.",
                    "metadata": {"i": i, "even": i % 2 == 0},
                    "created_at": f"2026-03-{1 + number % 28:02d}T10:{i // 60 % 60:02d}:{i % 60:02d}+00:00",
                }
                for i in range(start, min(start + batch, messages))
            ]
            reply = call("POST", f"{W}/{ws}/sessions/{session}/messages", {"messages": posted})
            assert reply.status == 201, reply.body
    conclusions = [
        {"content": "Alice likes lighthouses", "observer_id": "alice", "observed_id": "alice", "session_id": ids[0]},
        {"content": "Alice wakes at dawn", "observer_id": "alice", "observed_id": "alice"},
        {"content": "Bob answers questions", "observer_id": "alice", "observed_id": "bob", "session_id": ids[-1]},
        {"content": "Bob mentions the harbour", "observer_id": "alice", "observed_id": "bob"},
    ]
    assert call("POST", f"{W}/{ws}/conclusions", {"conclusions": conclusions}).status in (200, 201)
    card = call("PUT", f"{W}/{ws}/peers/alice/card", {"peer_card": ["Bob: an assistant"]}, target="bob")
    assert card.status == 200, card.body
    return ids


def job_item(aws, ws: str, job: str) -> dict:
    return aws["dynamodb"].get_item(
        TableName="precis-local", Key={"PK": {"S": f"WS#{ws}"}, "SK": {"S": f"JOB#{job}"}}, ConsistentRead=True
    )["Item"]


def run_job(aws, ws: str, job: str, *, limit: int = 1000) -> None:
    """Deliver the job item's latest stream record to the summarizer until the job stops running."""
    for _ in range(limit):
        item = job_item(aws, ws, job)
        if "running" not in item:
            return
        event = "INSERT" if item["step"]["N"] == "0" else "MODIFY"
        answer = invoke("SummarizeFunction", {"Records": [stream_record(item, event)]})
        assert answer == {"batchItemFailures": []}, answer
    raise AssertionError(f"job {job} still running after {limit} records")


def export_lines(aws, ws: str, job: str) -> list[dict]:
    """Every line of a finished export, its parts read in order from the bucket."""
    parts = int(job_item(aws, ws, job)["parts"]["N"])
    body = b"".join(
        aws["s3"].get_object(Bucket=template().bucket_name, Key=f"exports/{ws}/{job}/part-{n:05d}.jsonl")["Body"].read()
        for n in range(1, parts + 1)
    )
    return [json.loads(line) for line in body.decode().splitlines()]
