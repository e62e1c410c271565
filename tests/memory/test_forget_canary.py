"""Proof that nothing of a deleted message remains (issue 51, item 5): a canary string planted in a message, everything
derived from it built (summaries, conclusions, cards, the search index, vectors, audit records, a body in S3, an
idempotency record), the message deleted and the stream settled; then every item of the table and every version of
every object of the bucket is searched for the canary in each form the code stores text in, and every item that was
not derived from it is compared with a workspace that ran the same conversation without it."""

from __future__ import annotations

import base64
import contextlib
import json
import re
import zlib
from collections import Counter
from typing import Any

import pytest

from precis.lexical import terms
from tests.handlers import call
from tests.memory.test_forget import TABLE, Streams

CANARY = "Xqzvkplm4417"
LINES = [
    ("alice", "I moved to Lisbon last spring."),
    ("bob", "I play the cello on Sundays."),
    ("alice", "My sister is Ana and she paints."),
    ("bob", "I work as a nurse in Porto."),
    ("alice", "I like green tea in the morning."),
    ("bob", "The weather was lovely at the beach."),
    ("alice", "We should plan the trip to the mountains."),
]


def canary_message() -> str:
    """Past the inline limit (16 KB), so its body lives in S3; the first sentence is a fact the deriver draws and the
    card keeps, and its rare words are what an extractive summary keeps."""
    filler = " ".join(f"Entry {i} of the {CANARY} diary." for i in range(600))
    return f"I moved to {CANARY} Heights last year. {filler}"


def conversation(ws: str, streams: Streams, *, canary: bool) -> None:
    assert call("POST", "/v3/workspaces", {"id": ws}).status == 201
    peers = {"alice": {}, "bob": {"observe_others": True}}
    assert call("POST", f"/v3/workspaces/{ws}/sessions", {"id": "s1", "peers": peers}).status == 201
    lines = [(peer, f"{text} ({n})") for n in range(17) for peer, text in LINES][:119]  # 119 messages
    for start in range(0, len(lines), 7):
        body = {"messages": [{"peer_id": p, "content": t} for p, t in lines[start : start + 7]]}
        assert call("POST", f"/v3/workspaces/{ws}/sessions/s1/messages", body).status == 201
        streams.settle()
    if canary:
        body = {"messages": [{"peer_id": "alice", "content": canary_message()}]}
        reply = call("POST", f"/v3/workspaces/{ws}/sessions/s1/messages", body, headers={"Idempotency-Key": "k1"})
        assert reply.status == 201
    streams.settle()


# ---------------------------------------------------------------- what is stored, read independently of the store


def table_items(aws) -> list[dict[str, Any]]:
    items, request = [], {"TableName": TABLE}
    while True:
        out = aws["dynamodb"].scan(**request)
        items += out["Items"]
        if "LastEvaluatedKey" not in out:
            return items
        request["ExclusiveStartKey"] = out["LastEvaluatedKey"]


def bucket_objects(aws) -> dict[str, bytes]:
    """Every version (and delete marker) of every object, by key#version."""
    s3, bucket = aws["s3"], _bucket(aws)
    found: dict[str, bytes] = {}
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
        for version in page.get("Versions", ()):
            body = s3.get_object(Bucket=bucket, Key=version["Key"], VersionId=version["VersionId"])["Body"].read()
            found[f"{version['Key']}#{version['VersionId']}"] = body
        for marker in page.get("DeleteMarkers", ()):
            found[f"{marker['Key']}#{marker['VersionId']}"] = b""
    return found


def _bucket(aws) -> str:
    (bucket,) = [b["Name"] for b in aws["s3"].list_buckets()["Buckets"]]
    return bucket


def decoded(value: Any) -> Any:
    """A DynamoDB attribute as plain data, binary ones inflated when they are zlib'd JSON (the index's packing)."""
    ((kind, inner),) = value.items()
    if kind == "M":
        return {k: decoded(v) for k, v in inner.items()}
    if kind == "L":
        return [decoded(v) for v in inner]
    if kind in ("SS", "NS"):
        return sorted(inner)
    if kind == "B":
        raw = bytes(inner)
        try:
            return {"<zlib>": json.loads(zlib.decompress(raw))}
        except (zlib.error, ValueError):
            return {"<bytes>": base64.b64encode(raw).decode()}
    if kind == "N":
        return float(inner) if "." in inner or "e" in inner.lower() else int(inner)
    return inner


def forms() -> list[str]:
    """The canary as the code may store it: as written, lowercased, its index term (stemmed), base64 of its text."""
    return sorted(
        {CANARY, CANARY.lower(), *terms(CANARY)} | {base64.b64encode(CANARY.encode()).decode().rstrip("=")[:12]}
    )


def traces(items: list[dict[str, Any]], objects: dict[str, bytes]) -> list[str]:
    found = []
    wanted = forms()
    for item in items:
        text = json.dumps({k: decoded(v) for k, v in item.items()}, ensure_ascii=False)
        escaped = json.dumps({k: decoded(v) for k, v in item.items()})
        raw = repr(item)
        if any(w in text or w in escaped or w in raw for w in wanted):
            found.append(f"item {item['PK']['S']} / {item['SK']['S']}")
    for key, body in objects.items():
        text = body.decode("utf-8", "replace")
        with contextlib.suppress(zlib.error):
            text += zlib.decompress(body).decode("utf-8", "replace")
        if any(w in text or w in key for w in wanted) or any(w.encode() in body for w in wanted):
            found.append(f"object {key}")
    return found


# ---------------------------------------------------------------- the differential comparison

_ISO = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:\+00:00|Z)?")
_SEGMENT = re.compile(r"\b(\d)\.\d{13}\.[0-9a-f]{8}\b")
_UNIT = re.compile(r"\bs1:(\d+):[0-9a-f]{8}\b")
# Fields whose values differ between two runs by nature, and why:
_VOLATILE = {
    "expires_at",  # an idempotency record's TTL: the wall clock
    "lease_until",  # a lease's end: the wall clock
    "ibu",  # the epoch second a post's index unit is written by: the wall clock
    "token",  # an idempotency claim's random token
    "batch_token",  # the same token, on the messages it stored
    "incarnation",  # a session's random incarnation (its values inside the index's packed docs are mapped below)
    "version",  # a collection head's or the manifest's optimistic-concurrency counter: bumped by every write
}


def normalized(items: list[dict[str, Any]], ws: str) -> Counter[str]:
    """The items of workspace `ws` with what differs between two runs by nature replaced by stable names: the
    workspace id, message ids (by seq), conclusion ids (by collection and text), the incarnation, times, segment ids
    and index-unit nonces; every other byte compared as stored."""
    mine = [{k: decoded(v) for k, v in i.items()} for i in items if _workspace_of(i) == ws]
    names: dict[str, str] = {}
    for item in mine:
        if item.get("kind") == "message":
            names[item["id"]] = f"<m{item['seq']}>"
        elif item.get("kind") == "conclusion":
            names[item["id"]] = f"<c {item['observer_id']}/{item['observed_id']}: {item['content']}>"
        elif item.get("kind") == "session":
            names[item.get("incarnation", "-")] = "<incarnation>"
    pattern = re.compile("|".join(re.escape(n) for n in sorted(names, key=len, reverse=True)))
    out: Counter[str] = Counter()
    for item in mine:
        kept = {k: v for k, v in item.items() if k not in _VOLATILE}
        text = json.dumps(kept, sort_keys=True, ensure_ascii=False)
        text = pattern.sub(lambda m: names[m.group(0)], text)
        text = text.replace(ws, "<ws>")
        text = _ISO.sub("<time>", text)
        text = _SEGMENT.sub(r"<segment \1>", text)
        text = _UNIT.sub(r"s1:\1:<nonce>", text)
        out[text] += 1
    return out


def _workspace_of(item: dict[str, Any]) -> str:
    pk = item["PK"]["S"]
    return pk.split("#")[1] if pk.startswith(("WS#", "USAGE#")) else ""


def derived_from_it(text: str) -> bool:
    """Items the canary's delete changes by design (docs/design.md, "Deleting a message"), checked by the canary scan
    alone: the tombstone at its seq (no text: its place and id), the session item (its count of deletes), the
    summaries that covered it and their parts (made again without it, by seq: the cadence's steps differ), the derive
    cursors (past its seq; `forgets` counts the delete), the collections' dream state (`fresh` counted its
    conclusion when it was written) and the idempotency record of its post (ids and counts, no text)."""
    item = json.loads(text)
    return item.get("kind") in ("forgotten", "session", "derive_cursor", "dream", "idempotency") or str(
        item.get("SK", "")
    ).startswith("SUMMARY#")


@pytest.fixture(params=["in order", "replayed and reordered"])
def runs(aws, request):
    streams = Streams(aws, chaos=request.param != "in order")
    conversation("wclean", streams, canary=False)
    conversation("wcanary", streams, canary=True)
    return aws, streams


def test_a_deleted_message_leaves_no_trace_and_changes_nothing_else(runs):
    """Also with every stream batch delivered twice and its partitions in reversed order (the local stack's chaos)."""
    aws, streams = runs
    before = traces(table_items(aws), bucket_objects(aws))
    kinds = {t.split(" / ")[-1].split("#")[0] for t in before if t.startswith("item")}
    # Everything the canary feeds was built: its conclusions (text, lexical text) and cards, its summaries and their
    # parts, its index entries, its body (the message item holds only its key) and the summaries' audit records.
    assert {"C", "L", "CARD", "SUMMARY"} <= kinds, before
    assert any("XD" in t or "XF" in t or "XG" in t for t in before), before
    assert any(t.startswith("object bodies/") for t in before) and any(t.startswith("object audit/") for t in before)

    listed = call("POST", "/v3/workspaces/wcanary/sessions/s1/messages/list", page=2, size=100).body
    (planted,) = [m for m in listed["items"] if CANARY in m["content"]]
    assert call("DELETE", f"/v3/workspaces/wcanary/sessions/s1/messages/{planted['id']}").status == 204
    streams.settle()

    assert traces(table_items(aws), bucket_objects(aws)) == []
    clean, canary = normalized(table_items(aws), "wclean"), normalized(table_items(aws), "wcanary")
    differ = {t for t in (clean - canary) + (canary - clean) if not derived_from_it(t)}
    assert differ == set(), "\n".join(sorted(differ))
