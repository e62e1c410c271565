"""Erasing a peer (docs/design.md, "Erasing a peer") through the real handlers on moto, and the proof that nothing of
it remains (issue 51, items 2 and 5): a peer with a distinctive id says a canary in several messages of two sessions,
beside two other peers; everything derived is built (summaries, conclusions by and about it, cards, the search index,
vectors, a body in S3, audit records); the peer is erased and the stream settled; then every item of the table and
every version of every object of the bucket is searched for the canary and for the peer's id, and every item is
compared with a workspace that ran the same conversation without the peer."""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

import pytest
from botocore.exceptions import ClientError

from precis.stream import SUMMARIZER, job_of
from tests.handlers import call, invoke
from tests.memory.test_forget import TABLE, Streams, _plain
from tests.memory.test_forget_canary import (
    CANARY,
    LINES,
    bucket_objects,
    canary_message,
    decoded,
    normalized,
    table_items,
    traces,
)
from tests.stream import stream_record

PEER = "zq7erasee"  # the erased peer: an id no other text holds, so a scan for it is meaningful


def conversation(ws: str, streams: Streams, *, peer: bool) -> None:
    """Two sessions of alice and bob (bob observes others); with `peer`, the erased peer observes others too and says
    the canary three times in each, after the others' 37 lines (so every other message keeps its seq in both runs):
    seqs 38-40, which the short summary through 40 covers."""
    assert call("POST", "/v3/workspaces", {"id": ws}).status == 201
    peers = {"alice": {}, "bob": {"observe_others": True}} | ({PEER: {"observe_others": True}} if peer else {})
    lines = [(p, f"{text} ({n})") for n in range(6) for p, text in LINES][:37]
    for session in ("s1", "s2"):
        assert call("POST", f"{_ws(ws)}/sessions", {"id": session, "peers": peers}).status == 201
        for start in range(0, len(lines), 10):  # (37 lines: 10, 10, 10, 7)
            body = {"messages": [{"peer_id": p, "content": f"{session} {t}"} for p, t in lines[start : start + 10]]}
            assert call("POST", f"{_ws(ws)}/sessions/{session}/messages", body).status == 201
            streams.settle()
        if peer:
            said = [
                canary_message(),  # a body in S3
                f"My name is {CANARY} and I live in Tromso.",
                f"I keep a {CANARY} garden with roses.",
            ]
            body = {"messages": [{"peer_id": PEER, "content": t} for t in said]}
            assert call("POST", f"{_ws(ws)}/sessions/{session}/messages", body).status == 201
        streams.settle()
    if peer:  # it leaves s2: what it said there stays, and the erasure finds it all the same
        assert call("DELETE", f"{_ws(ws)}/sessions/s2/peers", [PEER]).status == 200
    # A card set by hand about the peer, and one by the peer about alice: both concluded "about or by" it.
    if peer:
        card = {"peer_card": [f"Knows {CANARY}"]}
        assert call("PUT", f"{_ws(ws)}/peers/bob/card?target={PEER}", card).status == 200
        assert call("PUT", f"{_ws(ws)}/peers/{PEER}/card?target=alice", card).status == 200
    streams.settle()


def _ws(ws: str) -> str:
    return f"/v3/workspaces/{ws}"


def scan(aws) -> list[str]:
    """Every item and object holding the canary or the peer's id, in any form the code stores text in."""
    found = traces(table_items(aws), bucket_objects(aws))
    for item in table_items(aws):
        if PEER in json.dumps({k: decoded(v) for k, v in item.items()}) or PEER in repr(item):
            found.append(f"item {item['PK']['S']} / {item['SK']['S']}")
    for key in bucket_objects(aws):
        if PEER in key:
            found.append(f"object {key}")
    return sorted(set(found))


_UNIT = re.compile(r"\bs2:(\d+):[0-9a-f]{8}\b")


def _normalized(items: list[dict[str, Any]], ws: str) -> Counter[str]:
    """The message delete's canary normalization, and the index-unit nonces of session s2 as well as s1's."""
    out: Counter[str] = Counter()
    for text, n in normalized(items, ws).items():
        out[_UNIT.sub(r"s2:\1:<nonce>", text)] += n
    return out


def derived_from_it(text: str) -> bool:
    """Items the erasure changes by design (docs/design.md, "Erasing a peer"), checked by the scan alone: the
    tombstones at the peer's seqs (no text, no sender once done), the session items (their counts of deletes), the
    summaries (made again, by seq), the derive cursors and the collections' dream state (as for a message delete),
    and the erasure's receipt (a job item with counts, no peer)."""
    item = json.loads(text)
    return item.get("kind") in ("forgotten", "session", "derive_cursor", "dream", "job") or str(
        item.get("SK", "")
    ).startswith("SUMMARY#")


@pytest.fixture(params=["in order", "replayed and reordered"])
def runs(aws, request):
    streams = Streams(aws, chaos=request.param != "in order")
    conversation("wclean", streams, peer=False)
    conversation("werase", streams, peer=True)
    return aws, streams


def test_an_erased_peer_leaves_no_trace_and_changes_nothing_else(runs):
    """Also with every stream batch delivered twice and its partitions in reversed order (the local stack's chaos)."""
    aws, streams = runs
    before = scan(aws)
    kinds = {t.split(" / ")[-1].split("#")[0] for t in before if t.startswith("item")}
    # What the peer feeds was built: conclusions by and about it, cards, summaries, the index, its body in S3.
    assert {"C", "L", "CARD", "SUMMARY", "PEER"} <= kinds, before
    assert any(t.startswith("object bodies/") for t in before), before

    first = call("DELETE", f"{_ws('werase')}/peers/{PEER}")
    assert first.status == 202 and first.body["status"] == "running", first.body
    # Hidden at once: the peer answers 404, is not listed, cannot post, cannot be made again while it is erased.
    assert call("PUT", f"{_ws('werase')}/peers/{PEER}", {"metadata": {}}).status == 404
    assert call("GET", f"{_ws('werase')}/peers/{PEER}/card").status == 404
    listed = call("POST", f"{_ws('werase')}/peers/list", {}).body["items"]
    assert PEER not in [p["id"] for p in listed]
    body = {"messages": [{"peer_id": PEER, "content": "again"}]}
    assert call("POST", f"{_ws('werase')}/sessions/s1/messages", body).status == 409
    assert call("POST", f"{_ws('werase')}/peers", {"id": PEER}).status == 409
    assert call("DELETE", f"{_ws('werase')}/peers/{PEER}").body["id"] == first.body["id"]  # the same erasure

    streams.settle()

    receipt = call("GET", f"{_ws('werase')}/peers/{PEER}/erasure").body
    assert receipt["status"] == "done" and receipt["id"] == first.body["id"], receipt
    assert receipt["counts"] == {
        "messages": 6,
        "sessions": 2,
        "collections": receipt["counts"]["collections"],
        "conclusions": receipt["counts"]["conclusions"],
        "peers": 1,
    }
    assert receipt["counts"]["collections"] >= 3 and receipt["counts"]["conclusions"] >= 1, receipt
    again = call("DELETE", f"{_ws('werase')}/peers/{PEER}")  # idempotent: the receipt
    assert again.status == 200 and again.body == receipt

    assert scan(aws) == []
    clean, erased = _normalized(table_items(aws), "wclean"), _normalized(table_items(aws), "werase")
    differ = {t for t in (clean - erased) + (erased - clean) if not derived_from_it(t)}
    assert differ == set(), "\n".join(sorted(differ))

    # A new peer of the same id starts empty.
    assert call("POST", f"{_ws('werase')}/peers", {"id": PEER}).status == 201
    assert call("GET", f"{_ws('werase')}/peers/{PEER}/card?target=alice").body == {"peer_card": None}
    sessions = call("POST", f"{_ws('werase')}/peers/{PEER}/sessions", {}).body
    assert sessions["items"] == []


def test_an_erasure_interrupted_mid_way_resumes_and_finishes_once(aws):
    """A write refused at botocore's seam in the middle of the job (its step leaving the first session): the consumer
    reports the record failed, the stream delivers it again, the step runs again from where the job stood, and the
    erasure ends with the same receipt and no trace."""
    from precis.store.db import get_db

    streams = Streams(aws)
    conversation("werase", streams, peer=True)
    assert call("DELETE", f"{_ws('werase')}/peers/{PEER}").status == 202
    client, failed = get_db().client, []
    member = {"PK": {"S": "WS#werase#S#s1"}, "SK": {"S": f"PEER#{PEER}"}}

    def refuse_once(params, **_):
        requests = params.get("RequestItems", {}).get(TABLE, [])
        if not failed and any(r.get("DeleteRequest", {}).get("Key") == member for r in requests):
            failed.append(True)
            raise ClientError({"Error": {"Code": "InternalServerError", "Message": "injected"}}, "BatchWriteItem")

    client.meta.events.register("provide-client-params.dynamodb.BatchWriteItem", refuse_once)
    try:
        for _ in range(200):
            records = [
                stream_record(r["dynamodb"]["NewImage"], r["eventName"])
                for r in streams.read()
                if "NewImage" in r["dynamodb"] and job_of(SUMMARIZER, r["eventName"], _plain(r["dynamodb"]["NewImage"]))
            ]
            if not records:
                break
            event = {"Records": records}
            if invoke("SummarizeFunction", event)["batchItemFailures"]:
                assert failed  # (only the injected failure fails a record)
                assert invoke("SummarizeFunction", event) == {"batchItemFailures": []}  # the stream's redelivery
    finally:
        client.meta.events.unregister("provide-client-params.dynamodb.BatchWriteItem", refuse_once)
    assert failed
    streams.settle()
    receipt = call("GET", f"{_ws('werase')}/peers/{PEER}/erasure").body
    assert receipt["status"] == "done" and receipt["counts"]["messages"] == 6, receipt
    assert receipt["counts"]["sessions"] == 2 and receipt["counts"]["peers"] == 1, receipt
    assert scan(aws) == []
