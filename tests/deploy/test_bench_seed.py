"""bench/seed.py writes what the front door writes: a conversation posted through the message route and the same
conversation loaded in bulk by the benches' loader read back the same through the routes a caller uses (the message
list, the context, the three searches), and are stored as the same items, kind by kind, attribute by attribute.

What legitimately differs, and is left out of the comparison: a message id's tail (random, `make_message_id`: the
head that encodes the seq is compared), the index unit's nonce (random in the route, the post's first seq in the
loader: the unit's session and first seq are compared), the route's index-by second `ibu` (its start plus the
function's remaining time; the loader's is fixed in the past: only its presence is compared), a segment's id (its
creation time and a random tail: segments are named by their place in the manifest), and the workspace's name, which
is the only difference between the two copies' keys.

A second session, LONG, is long enough for its search index to be merged: the route's posts are each followed by
the deriver's delivery of the stream (its merge), the loader's by its own `merge`."""

from __future__ import annotations

import json
import re
import zlib
from typing import Any

import pytest

from bench.front import Stream, call
from bench.seed import Said, write_messages
from local.template import template

FRONT, SEEDED, SESSION = "front", "seeded", "s1"
POST = 25  # messages a post: the conversation is two posts (and two index units), a run across their boundary
# A session of three posts in another fresh shard than SESSION's: the second post takes the shard to the merge's 100
# messages (a segment), the third stays fresh.
LONG, LONG_MESSAGES, LONG_POST = "s2", 130, 50
WORDS = (
    "the refund policy covers parts but not labour; the orders tool returned a JSON list of items with prices, dates "
    "and shipping status for Lisbon and Porto, so I opened ticket 4521 and asked finance about the invoice deadline"
).split()


def conversation(count: int = 45) -> list[Said]:
    """`count` messages of two peers: single turns and agent runs (one across the first posts' boundary), some with
    metadata."""
    said: list[Said] = []
    runs = {5: 3, 12: 4, 23: 5, 38: 2}  # first index of a run -> its length (23..27 spans the first post's end)
    run_id, left = None, 0
    for i in range(count):
        if i in runs:
            run_id, left = f"run-{i}", runs[i]
        peer = "assistant" if left or i % 2 else "alice"
        words = [WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(3 + (i * 5) % 17)]
        said.append(
            Said(
                peer,
                " ".join(words) + f" #{i}",
                run_id=run_id if left else None,
                metadata={"turn": i, "tag": "x" * (i % 3)} if i % 4 == 0 else None,
                created_at=f"2024-05-01T{10 + i // 60:02d}:{i % 60:02d}:00+00:00",
            )
        )
        left = max(0, left - 1)
    return said


@pytest.fixture(scope="module")
def both():
    """In-process moto with the template's resources (as the `aws` fixture, once for the module), the conversation
    posted to FRONT through the route and loaded into SEEDED by bench/seed.py; the test's own clients."""
    import boto3
    from moto import mock_aws

    from local import iam, moto_patches
    from local.template import create_resources

    moto_patches.install()
    with mock_aws():
        clients = {name: iam.exempt(boto3.client(name)) for name in ("dynamodb", "s3", "sqs")}
        create_resources(template(), clients["dynamodb"], clients["s3"], clients["sqs"])
        _load(clients)
        yield clients


def _post(ws: str, session: str, said: list[Said]) -> None:
    body = {
        "messages": [
            {
                "peer_id": m.peer,
                "content": m.content,
                "created_at": m.created_at,
                **({"run_id": m.run_id} if m.run_id else {}),
                **({"metadata": m.metadata} if m.metadata else {}),
            }
            for m in said
        ]
    }
    reply = call("POST", f"/v3/workspaces/{ws}/sessions/{session}/messages", body)
    assert reply.status == 201, reply.body


def _load(aws: dict[str, Any]) -> None:
    """Each session posted to FRONT through the route, the deriver given the stream after each post (as its event
    mapping gives it a post's inserts), and loaded into SEEDED by bench/seed.py, merged after each post."""
    said, long = conversation(), conversation(LONG_MESSAGES)
    for ws in (FRONT, SEEDED):
        assert call("POST", "/v3/workspaces", {"id": ws}).status in (200, 201)
    deriver = Stream(("DeriveFunction",))
    for session, messages, post in ((SESSION, said, POST), (LONG, long, LONG_POST)):
        for at in range(0, len(messages), post):
            _post(FRONT, session, messages[at : at + post])
            deriver.drain()
    peers = {"alice": {}, "assistant": {}}
    table = template().table_name
    for session, messages, post in ((SESSION, said, POST), (LONG, long, LONG_POST)):
        reply = call("POST", f"/v3/workspaces/{SEEDED}/sessions", {"id": session, "peers": peers})
        assert reply.status in (200, 201)
        write_messages(aws["dynamodb"], table, SEEDED, session, messages, post=post, index=True, merge=True)


def _id_head(value: Any) -> Any:
    """A message id's head, which encodes its seq (the tail is random); any other id as it is."""
    return value[:7] if isinstance(value, str) and len(value) == 21 else value


def _same(value: Any, ws: str) -> Any:
    """An answer with its workspace's name taken out and each message id cut to its seq's head."""
    if isinstance(value, dict):
        return {k: _id_head(v) if k == "id" else _same(v, ws) for k, v in value.items()}
    if isinstance(value, list):
        return [_same(v, ws) for v in value]
    return "WS" if value == ws else value


def _both(method: str, path: str, body: Any = None, **query: Any) -> tuple[Any, Any]:
    replies = [call(method, path.format(ws=ws), body, **query) for ws in (FRONT, SEEDED)]
    for reply in replies:
        assert reply.status == 200, reply.body
    return _same(replies[0].body, FRONT), _same(replies[1].body, SEEDED)


def test_the_message_list_is_the_same(both):
    front, seeded = _both("POST", "/v3/workspaces/{ws}/sessions/s1/messages/list", {}, size=100)
    assert len(front["items"]) == 45
    assert front == seeded


@pytest.mark.parametrize("tokens", [120, 600, 100_000])
def test_the_context_is_the_same(both, tokens):
    front, seeded = _both("GET", "/v3/workspaces/{ws}/sessions/s1/context", tokens=tokens)
    assert front["messages"] and front == seeded


@pytest.mark.parametrize("query", ["refund invoice deadline", "Lisbon", "ticket finance orders prices"])
def test_the_searches_rank_the_same(both, query):
    for where in ("", "/sessions/s1", "/peers/alice", "/peers/assistant"):
        front, seeded = _both("POST", f"/v3/workspaces/{{ws}}{where}/search", {"query": query, "limit": 20})
        assert front, where
        assert [(m["session_id"], m["seq"]) for m in front] == [(m["session_id"], m["seq"]) for m in seeded]
        assert front == seeded


def _kind(pk: str, sk: str) -> str | None:
    """The item kinds the loader writes, by key; None for the rest (workspace, session, peers, members)."""
    if re.search(r"#S#s\d$", pk) and sk.startswith("MSG#"):
        return "message"
    if re.search(r"#S#s\d#XD$", pk):
        return "text"
    if re.search(r"#XF#\d+$", pk):
        return "fresh"
    if "#XG#" in pk:
        return "segment"
    if pk.endswith("#XM"):
        return "manifest"
    return None


def _unpacked(value: dict[str, Any], incarnations: dict[str, str]) -> Any:
    """A packed value (zlib JSON) as its JSON, a session's incarnation (random) named by its session: a doc table's
    rows are [session, seq, incarnation]."""
    data = json.loads(zlib.decompress(value["B"]))
    if isinstance(data, list):
        data = [
            [row[0], row[1], f"incarnation of {row[0]}" if row[2] == incarnations.get(row[0]) else row[2]]
            if isinstance(row, list) and len(row) == 3 and isinstance(row[0], str)
            else row
            for row in data
        ]
    return data


def _stored(client, ws: str) -> dict[tuple[str, str, str], dict[str, Any]]:
    """The workspace's items of the loader's kinds, read with the test's own client: keyed by (kind, PK without the
    workspace, SK), their differing-by-right values normalized (see the module's doc)."""
    items, kwargs = [], {}
    while True:
        page = client.scan(TableName=template().table_name, **kwargs)
        items += page["Items"]
        if "LastEvaluatedKey" not in page:
            break
        kwargs = {"ExclusiveStartKey": page["LastEvaluatedKey"]}
    mine = [i for i in items if i["PK"]["S"] == f"WS#{ws}" or i["PK"]["S"].startswith(f"WS#{ws}#")]
    incarnations = {
        i["SK"]["S"].removeprefix("SESSION#"): i["incarnation"]["S"]
        for i in mine
        if i["SK"]["S"].startswith("SESSION#") and "incarnation" in i
    }
    manifest = next((i for i in mine if i["PK"]["S"] == f"WS#{ws}#XM"), None)
    segments = [s["id"] for s in json.loads(manifest["segs"]["S"])] if manifest else []
    place = {segment: f"segment {n}" for n, segment in enumerate(segments)}  # (in the manifest's order)
    out = {}
    for item in mine:
        pk, sk = item["PK"]["S"], item["SK"]["S"]
        if (kind := _kind(pk, sk)) is None:
            continue
        key_sk = re.sub(r"[0-9a-f]{8}(?=#\d+$)", "*", sk) if kind == "fresh" else sk  # a unit's nonce
        normal: dict[str, Any] = {}
        for name, value in item.items():
            if name == "SK":
                normal[name] = key_sk
            elif name in ("ib", "u"):  # the unit: its session and first seq; not its nonce
                normal[name] = re.sub(r"[0-9a-f]{8}$", "*", value["S"])
            elif name == "ibu":
                normal[name] = "present"
            elif name == "id":
                normal[name] = value["S"][:7]
            elif name == "PK":
                head, _, segment = pk.removeprefix(f"WS#{ws}").partition("#XG#")
                normal[name] = f"{head}#XG#{place.get(segment, segment)}" if segment else head
            elif name == "z":
                normal[name] = _unpacked(value, incarnations)
            elif name == "segs":
                normal[name] = [{**s, "id": place[s["id"]]} for s in json.loads(value["S"])]
            else:
                normal[name] = value
        out[kind, normal["PK"], key_sk] = normal
    return out


def test_the_stored_items_are_the_same_kind_by_kind(both):
    front, seeded = _stored(both["dynamodb"], FRONT), _stored(both["dynamodb"], SEEDED)
    kinds = {kind for kind, _, _ in front}
    assert kinds == {"message", "text", "fresh", "segment", "manifest"}
    for kind in sorted(kinds):
        mine = {key: item for key, item in seeded.items() if key[0] == kind}
        theirs = {key: item for key, item in front.items() if key[0] == kind}
        assert sorted(mine) == sorted(theirs), kind
        names = {key: sorted(item) for key, item in theirs.items()}
        assert {key: sorted(item) for key, item in mine.items()} == names, f"{kind}: attribute names differ"
        assert mine == theirs, f"{kind}: values differ"
    units = {item["ib"] for key, item in front.items() if key[0] == "message" and key[1] == f"#S#{SESSION}"}
    assert units == {"s1:1:*", "s1:26:*"}  # two posts, two units
    # LONG's first two posts merged into one segment (the doc table names its messages), its third still fresh
    (segment,) = [item for key, item in front.items() if key[0] == "segment" and key[2].startswith("D")]
    assert [row[:2] for row in segment["z"]] == [[LONG, seq] for seq in range(1, 2 * LONG_POST + 1)]
    assert {key[2] for key in front if key[0] == "fresh" and key[1] == "#XF#02"} == {"s2:101:*#000"}
