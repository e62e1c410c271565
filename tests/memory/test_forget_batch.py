"""Messages deleted together (docs/design.md, "Deleting a message", batches): an erasure's or an expiry's deletes
of one sender in one session go as one transaction and one cascade, through the real handlers on moto."""

from __future__ import annotations

from collections import Counter

import pytest

from precis.store.forget import BATCH_MAX
from precis.stream import SUMMARIZER, job_of
from tests.handlers import call, invoke
from tests.memory.test_forget import TABLE, S, Streams, W, _plain, _session, conclusions, messages, post
from tests.stream import stream_record


@pytest.fixture
def ws(aws):
    assert call("POST", "/v3/workspaces", {"id": "ws1"}).status == 201
    assert call("POST", f"{W}/sessions", {"id": "s1", "peers": {"alice": {}, "bob": {"observe_others": True}}}).status
    return aws


def _tombstones(aws) -> list[dict]:
    from precis.store.db import from_item

    out = aws["dynamodb"].query(
        TableName=TABLE,
        KeyConditionExpression="PK = :pk AND begins_with(SK, :m)",
        ExpressionAttributeValues={":pk": {"S": "WS#ws1#S#s1"}, ":m": {"S": "MSG#"}},
        ConsistentRead=True,
    )
    return [i for i in (from_item(i) for i in out["Items"]) if i["kind"] == "forgotten"]


def _drawn(ids: list[str]) -> set[str]:
    from precis.store.conclusions import message_conclusions
    from precis.store.db import get_db

    return {c for found in message_conclusions(get_db(), "ws1", "s1", ids).values() for c in found}


@pytest.mark.parametrize("chaos", [False, True], ids=["in order", "replayed and reordered"])
def test_messages_deleted_together_are_hidden_at_once_and_cleaned_by_one_cascade(ws, chaos):
    from precis.store.db import get_db
    from precis.store.forget import forget_messages
    from precis.store.messages import read_from

    streams = Streams(ws, chaos=chaos)
    cities = ["Lisbon", "Oslo", "Quito", "Hanoi", "Dakar", "Lima", "Perth"]
    lines = [
        line
        for i in range(BATCH_MAX + 4)
        for line in (
            ("alice", f"I moved to {cities[i % len(cities)]} in year {1990 + i}."),
            ("bob", f"Noted, entry {i}."),
        )
    ]
    for start in range(0, len(lines), 100):
        post(*lines[start : start + 100])
    streams.settle()
    items = [i for i in read_from(get_db(), "ws1", "s1", 1) if i["peer_id"] == "alice"]
    first, rest = items[:BATCH_MAX], items[BATCH_MAX:]
    doomed = _drawn([i["id"] for i in first])
    kept = _drawn([i["id"] for i in rest])
    assert doomed and kept and not doomed & kept, "conclusions were drawn from each part"

    taken = forget_messages(get_db(), "ws1", "s1", items)
    assert taken == BATCH_MAX  # one transaction's worth, from the front

    # At once: none of them is listed, and nothing drawn from them is.
    listed = {m["id"] for n in (1, 2) for m in call("POST", f"{S}/messages/list?size=100&page={n}").body["items"]}
    assert not listed & {i["id"] for i in first} and {i["id"] for i in rest} <= listed
    assert not doomed & {c["id"] for c in conclusions()}
    tombs = _tombstones(ws)
    assert len(tombs) == BATCH_MAX
    (lead,) = [t for t in tombs if "running" in t]  # one cascade runs for them all
    assert lead["seq"] == first[0]["seq"] and sorted(lead["forgot_batch"]) == [i["seq"] for i in first[1:]]
    assert all(t["forgot_lead"] == lead["seq"] for t in tombs if t is not lead)
    assert len(_session(ws)["forgetting"]) == BATCH_MAX

    streams.settle()
    tombs = _tombstones(ws)
    for t in tombs:
        left = sorted(k for k in t if k.startswith("forgot") or k == "running")
        assert left == ["forgot", "forgot_at", "forgot_done"], left
    assert "forgetting" not in _session(ws)
    shown = {c["id"] for c in conclusions()}
    assert not doomed & shown and kept <= shown
    assert not _drawn([i["id"] for i in first])
    found = call("POST", f"{W}/search", {"query": "moved to Lisbon"}).body
    assert not {m["id"] for m in found} & {i["id"] for i in first}
    summary = call("GET", f"{S}/summaries").body["short_summary"]
    assert summary is not None and not any(f"year {1990 + i}." in summary["content"] for i in range(BATCH_MAX))


def test_a_batch_with_a_message_deleted_meanwhile_deletes_the_rest(ws):
    from precis.store.db import get_db
    from precis.store.forget import forget_messages
    from precis.store.messages import read_from

    streams = Streams(ws)
    post(*(("alice", f"Line {i} about Zanzibar.") for i in range(5)))
    streams.settle()
    items = list(read_from(get_db(), "ws1", "s1", 1))
    assert call("DELETE", f"{S}/messages/{items[2]['id']}").status == 204
    assert forget_messages(get_db(), "ws1", "s1", items) == 5  # (the one deleted already counts as done)
    assert messages()["items"] == []
    streams.settle()
    assert sorted(t["seq"] for t in _tombstones(ws)) == [1, 2, 3, 4, 5]
    assert all("forgot_done" in t for t in _tombstones(ws)) and "forgetting" not in _session(ws)


def test_an_erasure_summarizes_each_session_once_when_done_with_it(ws, llm_server, monkeypatch):
    """Erasing a peer of more messages than a batch: no summary is made while its batches' cascades run (each would
    otherwise read the session and call the model again, for a summary the running deletes refuse); once the erasure
    is done with the session, it is summarized once, from what is left: every model call made a stored summary."""
    from precis.settings import get_settings

    monkeypatch.setenv("OPENAI_BASE_URL", llm_server.url)
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    get_settings.cache_clear()
    config = {"summarizer": {"engine": "llm"}, "deriver": {"engine": "extractive"}}
    assert call("PUT", W, {"configuration": config}).status == 200
    streams = Streams(ws)
    lines = [
        line
        for i in range(BATCH_MAX + 5)
        for line in (("alice", f"I moved to Lisbon in year {1900 + i}."), ("bob", f"Bob {i}."))
    ]
    for start in range(0, len(lines), 100):
        post(*lines[start : start + 100])
    streams.settle()
    assert call("GET", f"{S}/summaries").body["short_summary"] is not None
    seen: list[dict] = []
    read = streams.read

    def reading() -> list[dict]:
        records = read()
        seen.extend(records)
        return records

    streams.read = reading  # (the test's own stream reader, recording what it hands on)
    before = len(llm_server.requests)

    def about_alice() -> list[dict]:
        return [c for c in conclusions() if "alice" in (c["observer_id"], c["observed_id"])]

    assert about_alice()
    reply = call("DELETE", f"{W}/peers/alice")
    assert reply.status == 202, reply.body
    assert about_alice() == []  # at once, though its erasure deletes them only in its last steps
    streams.settle()
    assert call("GET", f"{W}/peers/alice/erasure").body["status"] == "done"
    written = Counter(
        _plain(r["dynamodb"]["NewImage"])["SK"]
        for r in seen
        if "NewImage" in r["dynamodb"] and _plain(r["dynamodb"]["NewImage"]).get("kind") == "summary"
    )
    calls = [r for r in llm_server.requests[before:] if r.path.endswith("/chat/completions")]
    assert written and set(written.values()) == {1}, written
    assert len(calls) == sum(written.values()), (len(calls), written)
    summaries = call("GET", f"{S}/summaries").body
    assert summaries["short_summary"] is not None
    assert all("Lisbon" not in (s or {}).get("content", "") for s in summaries.values() if isinstance(s, dict))
    assert "erasing" not in _session(ws) and "forgetting" not in _session(ws)
    assert messages()["total"] == BATCH_MAX + 5 and {m["peer_id"] for m in messages()["items"]} == {"bob"}


def test_an_erasure_whose_cascades_finish_before_it_leaves_the_session_summarizes_it_itself(ws):
    """The peer's messages fill the session's deletes in progress (a batch) and the erasure waits; their
    cascades all finish meanwhile, making no summary while it marks the session; it then reads the rest of the
    session (no more of the peer's), clears its mark and, no cascade being left to do it, summarizes the session from
    what is left. (The stream delivered in that order: the job's records held back while the cascades run.)"""
    streams = Streams(ws)
    said = [("alice", f"I moved to Lisbon in year {1700 + i}.") for i in range(BATCH_MAX)]
    lines = said + [("bob", f"Plain line {i} about Xylophonics.") for i in range(150)]
    for start in range(0, len(lines), 100):
        post(*lines[start : start + 100])
    streams.settle()
    assert call("GET", f"{S}/summaries").body["short_summary"] is not None
    assert call("DELETE", f"{W}/peers/alice").status == 202
    pending: list[dict] = []

    def deliver(kind: str) -> int:
        pending.extend(streams.read())
        chosen = [r for r in pending if "NewImage" in r["dynamodb"] and _image(r).get("kind") == kind]
        pending[:] = [r for r in pending if r not in chosen]
        routed = [
            stream_record(r["dynamodb"]["NewImage"], r["eventName"])
            for r in chosen
            if job_of(SUMMARIZER, r["eventName"], _image(r)) is not None
        ]
        if routed:
            assert invoke("SummarizeFunction", {"Records": routed}) == {"batchItemFailures": []}
        return len(routed)

    deliver("job")  # the job's steps: a batch, then it waits for room
    assert len(_session(ws)["forgetting"]) == BATCH_MAX and _session(ws)["erasing"] == ["alice"]
    while deliver("forgotten"):  # every cascade, to the end: none summarizes the marked session
        pass
    assert "forgetting" not in _session(ws) and call("GET", f"{S}/summaries").body["short_summary"] is None
    while deliver("job") and call("GET", f"{W}/peers/alice/erasure").body["status"] == "running":
        pass
    summaries = call("GET", f"{S}/summaries").body
    assert summaries["short_summary"] is not None and "Lisbon" not in summaries["short_summary"]["content"]
    assert "erasing" not in _session(ws)
    streams.settle()
    assert call("GET", f"{W}/peers/alice/erasure").body["status"] == "done"


def _image(record: dict) -> dict:
    return _plain(record["dynamodb"]["NewImage"])


def test_an_erasure_takes_the_peer_s_merged_messages_out_of_the_index_segments(ws):
    """Messages merged into the search index's segments before the erasure: its batches' cascades leave the segments
    to the erasure, which rewrites them once it is done with the session; nothing the peer said is left in them, and
    the others' messages are still found."""
    import zlib

    from precis.store import text_index
    from precis.store.db import from_item, get_db

    streams = Streams(ws)
    said = [("alice", f"My zqalpaca{i} grazes near the quarry.") for i in range(BATCH_MAX + 10)]
    lines = [line for pair in zip(said, (("bob", f"The zqwombat{i} naps.") for i in range(len(said)))) for line in pair]
    for start in range(0, len(lines), 100):
        post(*lines[start : start + 100])
    streams.settle()
    text_index.merge(get_db(), "ws1", ["s1"], min_docs=1)  # (whatever the stream left unmerged)

    def holding(word: str) -> list[str]:
        found = []
        for raw in ws["dynamodb"].scan(TableName=TABLE)["Items"]:
            item = from_item(raw)
            inflated = "".join(zlib.decompress(v).decode() for v in item.values() if isinstance(v, bytes))
            if word in (str(item) + inflated).lower():
                found.append(f"{item['PK']} {item['SK']}")
        return found

    assert [k for k in holding("zqalpaca") if "#XG#" in k]  # merged into a segment
    assert call("DELETE", f"{W}/peers/alice").status == 202
    streams.settle()
    assert call("GET", f"{W}/peers/alice/erasure").body["status"] == "done"
    assert holding("zqalpaca") == []
    assert [k for k in holding("zqwombat") if "#XG#" in k]
    assert call("POST", f"{W}/search", {"query": "zqwombat3"}).body[0]["content"] == "The zqwombat3 naps."
