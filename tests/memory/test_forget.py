"""Deleting one message (docs/design.md, "Deleting a message") through the real handlers on moto: what the route makes
invisible at once, and what the stream's cascade removes."""

from __future__ import annotations

import zlib

import pytest

from precis.stream import DERIVER, SUMMARIZER, job_of
from tests.handlers import call, invoke, post_messages
from tests.stream import stream_record

W = "/v3/workspaces/ws1"
S = f"{W}/sessions/s1"
TABLE = "precis-local"


class Streams:
    """The table's stream read from where it stands, each record handed to the consumers whose filters take it, as
    Lambda's event source mappings do; `settle` runs them until nothing new comes."""

    def __init__(self, aws, *, chaos: bool = False):
        self.streams, self.dynamodb = aws["dynamodbstreams"], aws["dynamodb"]
        # As the local stack's replay chaos (tests/stack.py): every batch twice, and the records of different
        # partitions in reversed order (a partition's own records keep their order, as DynamoDB Streams keeps it).
        self.chaos = chaos
        arn = self.dynamodb.describe_table(TableName=TABLE)["Table"]["LatestStreamArn"]
        shards = self.streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]
        self.iterators = [
            self.streams.get_shard_iterator(StreamArn=arn, ShardId=s["ShardId"], ShardIteratorType="TRIM_HORIZON")[
                "ShardIterator"
            ]
            for s in shards
        ]

    def read(self) -> list[dict]:
        records = []
        for i, iterator in enumerate(self.iterators):
            while True:
                page = self.streams.get_records(ShardIterator=iterator, Limit=1000)
                iterator = page["NextShardIterator"]
                records += page["Records"]
                if not page["Records"]:
                    break
            self.iterators[i] = iterator
        return records

    def settle(self, rounds: int = 60, *, before=lambda function, event: None) -> None:
        for _ in range(rounds):
            records = self.read()
            if not records:
                return
            for consumer, function in ((SUMMARIZER, "SummarizeFunction"), (DERIVER, "DeriveFunction")):
                chosen = [
                    stream_record(r["dynamodb"]["NewImage"], r["eventName"])
                    for r in records
                    if "NewImage" in r["dynamodb"]
                    and job_of(consumer, r["eventName"], _plain(r["dynamodb"]["NewImage"])) is not None
                ]
                for batch in self._batches(chosen):
                    event = {"Records": batch}
                    before(function, event)
                    answer = invoke(function, event)
                    assert answer == {"batchItemFailures": []}, (function, answer)
        raise AssertionError("the stream did not settle")

    def _batches(self, records: list[dict]) -> list[list[dict]]:
        if not records:
            return []
        if not self.chaos:
            return [records]
        by_partition: dict[str, list[dict]] = {}
        for record in records:
            by_partition.setdefault(record["dynamodb"]["Keys"]["PK"]["S"], []).append(record)
        reordered = [r for pk in reversed(list(by_partition)) for r in by_partition[pk]]
        return [reordered, reordered]


def _plain(image: dict) -> dict:
    from precis.store.db import from_item

    return from_item(image)


def post(*messages: tuple[str, str]) -> list[dict]:
    return post_messages("s1", *messages)


def conclusions(**filters) -> list[dict]:
    reply = call("POST", f"{W}/conclusions/list?size=100", {"filters": filters} if filters else None)
    assert reply.status == 200, reply.body
    return reply.body["items"]


def messages() -> dict:
    reply = call("POST", f"{S}/messages/list?size=100")
    assert reply.status == 200, reply.body
    return reply.body


@pytest.fixture
def ws(aws):
    assert call("POST", "/v3/workspaces", {"id": "ws1"}).status == 201
    assert call("POST", f"{W}/sessions", {"id": "s1", "peers": {"alice": {}, "bob": {"observe_others": True}}}).status
    return aws


def test_a_deleted_message_and_what_was_drawn_from_it_are_gone_at_once_and_then_for_good(ws):
    streams = Streams(ws)
    posted = post(
        ("alice", "I moved to Lisbon last spring."),
        ("bob", "I play the cello."),
        ("alice", "My sister is Ana."),
    )
    streams.settle()
    assert {c["content"] for c in conclusions(observer_id="alice", observed_id="alice")} == {
        "alice moved to Lisbon last spring",
        "alice's sister is Ana",
    }
    assert call("DELETE", f"{S}/messages/{posted[0]['id']}").status == 204
    # At once: the message, its conclusions (in every collection), its place in search.
    assert call("GET", f"{S}/messages/{posted[0]['id']}").status == 404
    listed = messages()
    assert [m["id"] for m in listed["items"]] == [posted[1]["id"], posted[2]["id"]]
    assert listed["total"] == 2
    assert all("Lisbon" not in c["content"] for c in conclusions())
    found = call("POST", f"{W}/search", {"query": "Lisbon spring"})
    assert found.status == 200 and found.body == []
    shown = call("POST", f"{W}/peers/bob/representation", {"target": "alice"})
    assert (
        shown.status == 200
        and "sister" in shown.body["representation"]
        and "Lisbon" not in shown.body["representation"]
    )
    assert call("GET", f"{W}/peers/alice/card").body["peer_card"] is None  # marked until the cascade rebuilds it
    context = call("GET", f"{S}/context?tokens=1000").body
    assert [m["id"] for m in context["messages"]] == [posted[1]["id"], posted[2]["id"]]
    assert context["token_count"] == posted[1]["token_count"] + posted[2]["token_count"]
    # Then the cascade.
    streams.settle()
    assert all("Lisbon" not in c["content"] for c in conclusions())
    assert {c["content"] for c in conclusions(observer_id="alice", observed_id="alice")} == {"alice's sister is Ana"}
    assert call("GET", f"{W}/peers/alice/card").body["peer_card"] == ["RELATIONSHIP: alice's sister is Ana"]
    assert call("DELETE", f"{S}/messages/{posted[0]['id']}").status == 404
    assert messages()["total"] == 2


def test_deleting_what_is_not_a_live_message_is_404_and_a_peer_key_may_not(ws):
    (posted,) = post(("alice", "I moved to Lisbon last spring."))
    assert call("DELETE", f"{S}/messages/AAAAAAAAAAAAAAAAAAAAA").status == 404
    assert call("DELETE", f"{W}/sessions/nope/messages/{posted['id']}").status == 404
    assert call("DELETE", f"{S}/messages/{posted['id']}").status == 204
    assert call("DELETE", f"{S}/messages/{posted['id']}").status == 404  # its tombstone is no message
    assert call("PUT", f"{S}/messages/{posted['id']}", {"metadata": {"a": 1}}).status == 404


def _tombstone(aws, seq: int) -> dict:
    from precis.store.db import from_item

    key = {"PK": {"S": "WS#ws1#S#s1"}, "SK": {"S": f"MSG#{seq:012d}"}}
    return from_item(aws["dynamodb"].get_item(TableName=TABLE, Key=key, ConsistentRead=True)["Item"])


def test_a_derivation_that_read_the_message_before_its_delete_writes_nothing_of_it(ws):
    """The engine's answer is stored on the cursor before its conclusions are written: a delete meanwhile drops the
    stored job, so the derivation reads the session again (the message gone) and derives the rest, each once."""
    from botocore.exceptions import ClientError

    from precis.store.db import get_db

    streams = Streams(ws)
    posted = post(("alice", "I moved to Lisbon last spring."), ("alice", "My sister is Ana."))
    records = [
        r
        for r in streams.read()
        if "NewImage" in r["dynamodb"] and job_of(DERIVER, r["eventName"], _plain(r["dynamodb"]["NewImage"]))
    ]
    event = {"Records": [stream_record(r["dynamodb"]["NewImage"], r["eventName"]) for r in records]}
    client = get_db().client

    def down(**_):  # the conclusions' transaction fails once the job is stored
        raise ClientError({"Error": {"Code": "InternalServerError", "Message": "down"}}, "TransactWriteItems")

    client.meta.events.register("before-call.dynamodb.TransactWriteItems", down)
    try:
        assert invoke("DeriveFunction", event)["batchItemFailures"]
    finally:
        client.meta.events.unregister("before-call.dynamodb.TransactWriteItems", down)
    assert conclusions() == []
    assert call("DELETE", f"{S}/messages/{posted[0]['id']}").status == 204
    streams.settle()  # the delete's cascade is done before the stream retries the derivation
    assert "forgetting" not in _session(ws)
    assert invoke("DeriveFunction", event) == {"batchItemFailures": []}  # the stream's retry
    streams.settle()
    assert [c["content"] for c in conclusions(observer_id="alice", observed_id="alice")] == ["alice's sister is Ana"]
    queue = call("GET", f"{W}/queue/status", session_id="s1")
    assert queue.status == 200, queue.body
    assert queue.body["pending_work_units"] == 0 and queue.body["in_progress_work_units"] == 0


def test_a_cascade_interrupted_mid_way_is_finished_by_the_redelivery(ws):
    """S3 refuses the body's delete after the conclusions and the index are done: the record fails, the tombstone
    says which steps are done, the reads still show nothing of it, and the stream's retry finishes the rest."""
    from precis.store.db import get_db

    streams = Streams(ws)
    posted = post(("alice", "I moved to Lisbon last spring. " + "Lisbon is lovely in spring. " * 700))
    streams.settle()
    assert conclusions()
    assert call("DELETE", f"{S}/messages/{posted[0]['id']}").status == 204
    records = [
        r
        for r in streams.read()
        if "NewImage" in r["dynamodb"] and job_of(SUMMARIZER, r["eventName"], _plain(r["dynamodb"]["NewImage"]))
    ]
    event = {"Records": [stream_record(r["dynamodb"]["NewImage"], r["eventName"]) for r in records]}
    s3 = get_db().s3

    def refuse(parsed, **_):
        parsed["Errors"] = [{"Key": "bodies/x", "Code": "AccessDenied", "Message": "Access Denied"}]

    s3.meta.events.register("after-call.s3.DeleteObjects", refuse)
    try:
        assert invoke("SummarizeFunction", event)["batchItemFailures"]
    finally:
        s3.meta.events.unregister("after-call.s3.DeleteObjects", refuse)
    tomb = _tombstone(ws, 1)
    assert tomb["forgot_step"] == 2 and "forgot_done" not in tomb  # conclusions and search done, the body not
    assert conclusions() == [] and call("POST", f"{W}/search", {"query": "Lisbon"}).body == []
    assert "forgetting" in _session(ws)
    assert invoke("SummarizeFunction", event) == {"batchItemFailures": []}  # the stream's retry
    streams.settle()
    assert "forgot_done" in _tombstone(ws, 1) and "forgetting" not in _session(ws)
    bucket = ws["s3"].list_buckets()["Buckets"][0]["Name"]
    assert not ws["s3"].list_object_versions(Bucket=bucket, Prefix="bodies/").get("Versions")


def _session(aws) -> dict:
    from precis.store.db import from_item

    key = {"PK": {"S": "WS#ws1"}, "SK": {"S": "SESSION#s1"}}
    return from_item(aws["dynamodb"].get_item(TableName=TABLE, Key=key, ConsistentRead=True)["Item"])


def test_no_summary_read_before_the_delete_is_stored_after_it(ws):
    """A summarizer that read the message before its delete answered: its write is refused while the delete's
    cascade runs (the session's `forgetting`), and the cascade summarizes again without it."""
    streams = Streams(ws)
    texts = [("alice" if i % 2 else "bob", f"Plain line number {i} about Xylophonics.") for i in range(20)]
    posted = post(*texts)
    inserts = [
        r
        for r in streams.read()
        if "NewImage" in r["dynamodb"] and job_of(SUMMARIZER, r["eventName"], _plain(r["dynamodb"]["NewImage"]))
    ]
    assert call("DELETE", f"{S}/messages/{posted[3]['id']}").status == 204
    late = {"Records": [stream_record(r["dynamodb"]["NewImage"], r["eventName"]) for r in inserts]}
    assert invoke("SummarizeFunction", late) == {"batchItemFailures": []}
    assert call("GET", f"{S}/summaries").body["short_summary"] is None  # refused while the delete runs
    streams.settle()
    summary = call("GET", f"{S}/summaries").body["short_summary"]
    assert summary is not None and "number 3 " not in summary["content"]


def test_a_clone_of_a_session_with_a_deleted_message_reads_like_its_parent(ws):
    streams = Streams(ws)
    posted = post(("alice", "One."), ("bob", "Two."), ("alice", "Three."), ("bob", "Four."))
    streams.settle()
    assert call("DELETE", f"{S}/messages/{posted[1]['id']}").status == 204
    streams.settle()
    clone = call("POST", f"{S}/clone")
    assert clone.status == 201, clone.body
    streams.settle()  # the clone's copy
    path = f"{W}/sessions/{clone.body['id']}"
    context = call("GET", f"{path}/context?tokens=1000")
    assert context.status == 200, context.body
    assert [m["content"] for m in context.body["messages"]] == ["One.", "Three.", "Four."]
    listed = call("POST", f"{path}/messages/list").body
    assert [m["content"] for m in listed["items"]] == ["One.", "Three.", "Four."]
    assert post_messages(clone.body["id"], ("alice", "Five."))[0]["seq"] == 5
    assert [m["content"] for m in call("GET", f"{path}/context?tokens=1000").body["messages"]][-1] == "Five."


def test_a_session_whose_newest_message_was_deleted_takes_appends_and_clones(ws):
    streams = Streams(ws)
    posted = post(("alice", "One."), ("bob", "Two."))
    assert call("DELETE", f"{S}/messages/{posted[1]['id']}").status == 204
    streams.settle()
    (third,) = post(("alice", "Three."))
    assert third["seq"] == 3  # the deleted seq is never given again
    assert call("DELETE", f"{S}/messages/{third['id']}").status == 204
    clone = call("POST", f"{S}/clone")
    assert clone.status == 201, clone.body
    streams.settle()
    path = f"{W}/sessions/{clone.body['id']}"
    assert [m["content"] for m in call("GET", f"{path}/context?tokens=1000").body["messages"]] == ["One."]
    assert post_messages(clone.body["id"], ("alice", "Four."))[0]["seq"] == 4
    assert [m["content"] for m in call("GET", f"{S}/context?tokens=1000").body["messages"]] == ["One."]


def test_the_card_of_an_observer_who_left_the_session_is_rebuilt_too(ws):
    streams = Streams(ws)
    posted = post(("alice", "I moved to Lisbon last spring."), ("alice", "My sister is Ana."))
    streams.settle()
    card = call("GET", f"{W}/peers/bob/card", target="alice").body["peer_card"]
    assert any("Lisbon" in entry for entry in card)
    assert call("DELETE", f"{S}/peers", ["bob"]).status in (200, 204)
    assert call("DELETE", f"{S}/messages/{posted[0]['id']}").status == 204
    streams.settle()
    assert call("GET", f"{W}/peers/bob/card", target="alice").body["peer_card"] == [
        "RELATIONSHIP: alice's sister is Ana"
    ]
    assert all("Lisbon" not in c["content"] for c in conclusions(observer_id="bob"))


def test_the_keys_that_may_edit_a_message_may_delete_it_a_peer_key_may_not(ws, monkeypatch):
    from precis.auth import mint_key
    from tests.hostile import SECRET, admin_key

    posted = post(("alice", "One."), ("bob", "Two."), ("alice", "Three."))
    admin_key(monkeypatch)  # keys checked, as deployed

    def bearer(**claims) -> dict[str, str]:
        return {"Authorization": f"Bearer {mint_key(SECRET, **claims)}"}

    def delete(message: dict, headers: dict[str, str]) -> int:
        return call("DELETE", f"{S}/messages/{message['id']}", headers=headers).status

    assert delete(posted[0], bearer(workspace="ws1", peer="alice")) == 403  # a member's key reads, but may not edit
    assert delete(posted[0], bearer(workspace="ws2")) == 403
    assert delete(posted[0], {}) == 401
    assert delete(posted[0], bearer(workspace="ws1", session="s1")) == 204
    assert delete(posted[1], bearer(workspace="ws1")) == 204
    assert delete(posted[2], bearer(admin=True)) == 204


def test_the_mcp_tools_never_return_a_deleted_message_or_what_was_drawn_from_it(ws):
    import json as _json

    posted = post(("alice", "I moved to Lisbon last spring."), ("alice", "My sister is Ana."))
    Streams(ws).settle()
    assert call("DELETE", f"{S}/messages/{posted[0]['id']}").status == 204  # the cascade not run yet

    def tool(name: str, **arguments) -> str:
        text = _json.dumps(
            {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
        )
        reply = call("POST", "/mcp", raw=text, headers={"MCP-Protocol-Version": "2025-06-18"})
        assert reply.status == 200, reply.body
        return _json.dumps(reply.body)

    for name, arguments in [
        ("get_session_messages", {"session_id": "s1"}),
        ("get_session_context", {"session_id": "s1"}),
        ("get_representation", {"peer_id": "alice"}),
        ("get_peer_context", {"peer_id": "alice"}),
        ("get_peer_card", {"peer_id": "alice"}),
        ("list_conclusions", {"peer_id": "alice"}),
        ("query_conclusions", {"peer_id": "alice", "query": "Lisbon"}),
        ("search", {"query": "Lisbon spring"}),
        ("chat", {"peer_id": "alice", "query": "Where did alice move?"}),
    ]:
        answer = tool(name, workspace_id="ws1", **arguments)
        assert "Lisbon" not in answer, (name, answer)
    assert "Ana" in tool("get_representation", workspace_id="ws1", peer_id="alice")
    gone = tool("get_session_message", workspace_id="ws1", session_id="s1", message_id=posted[0]["id"])
    assert "not found" in gone


def _deduce(body: dict):
    """The local model's dream: one deduction from the Lisbon conclusion, one from the others; no card."""
    import json as _json

    text = _json.dumps(body.get("response_format") or {})
    prompt = body["messages"][-1]["content"]
    if "deductive_conclusions" in text or "<explicit>" in prompt:
        lines = [line for line in prompt.splitlines() if line.startswith("[")]
        ids = {line[1 : line.index("]")]: line for line in lines}
        lisbon = [i for i, line in ids.items() if "Lisbon" in line]
        others = [i for i, line in ids.items() if "Lisbon" not in line]
        deductive = [
            {"content": "alice knows Portuguese cities well", "premises": lisbon},
            {"content": "alice has family nearby", "premises": others},
        ]
        return _json.dumps({"deductive": deductive})
    if "peer_card" in text:
        return _json.dumps({"peer_card": []})
    return _json.dumps({"explicit": []})


def test_deductions_from_a_deleted_messages_conclusions_go_with_them(ws, llm_server, monkeypatch):
    from precis.settings import get_settings
    from precis.store import keys
    from precis.store.db import from_item, to_item

    streams = Streams(ws)
    posted = post(("alice", "I moved to Lisbon last spring."), ("alice", "My sister is Ana."))
    streams.settle()
    monkeypatch.setenv("OPENAI_BASE_URL", llm_server.url)
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("PRECIS_LLM_MAX_ATTEMPTS", "2")
    get_settings.cache_clear()
    llm_server.answer = _deduce
    assert call("POST", f"{W}/schedule_dream", {"observer": "alice"}).status == 204
    dream = ws["dynamodb"].get_item(TableName=TABLE, Key=to_item(keys.dream("ws1", "alice", "alice")))["Item"]
    assert invoke("DeriveFunction", {"Records": [stream_record(dream, "MODIFY")]}) == {"batchItemFailures": []}

    def deduced() -> list[str]:
        return sorted(c["content"] for c in conclusions(observer_id="alice", observed_id="alice", level="deductive"))

    assert deduced() == ["alice has family nearby", "alice knows Portuguese cities well"]
    assert call("DELETE", f"{S}/messages/{posted[0]['id']}").status == 204
    assert deduced() == ["alice has family nearby"]  # at once: its premise is being deleted
    shown = call("POST", f"{W}/peers/alice/representation", {}).body["representation"]
    assert "Portuguese" not in shown and "family nearby" in shown
    streams.settle()
    assert deduced() == ["alice has family nearby"]
    stored = [from_item(i) for i in ws["dynamodb"].scan(TableName=TABLE)["Items"]]
    assert not [i for i in stored if "Portuguese" in str(i)]


def test_a_merge_that_read_the_unit_before_the_delete_never_merges_the_message(ws):
    """A merge reads a fresh unit, then the message is deleted and its cascade writes the unit again without it before
    the merge commits: the merge's delete of the unit (on condition its count is the one it read) fails, and the
    merge made again takes the unit as it is now."""
    from precis.store import text_index
    from precis.store.db import from_item, get_db

    streams = Streams(ws)
    posted = post(("alice", "Zebra crossing one."), ("bob", "Quokka sighting two."), ("alice", "Walrus tusk three."))
    streams.settle()  # (the deriver merges nothing: the shard holds far fewer than MERGE_MIN_DOCS)
    client, raced = get_db().client, []

    def race(**_):  # the merge's commit is its first transaction: the delete and its cascade come first
        if not raced:
            raced.append(True)
            assert call("DELETE", f"{S}/messages/{posted[1]['id']}").status == 204
            streams.settle()

    client.meta.events.register("before-call.dynamodb.TransactWriteItems", race)
    try:
        merged = text_index.merge(get_db(), "ws1", ["s1"], min_docs=1)
    finally:
        client.meta.events.unregister("before-call.dynamodb.TransactWriteItems", race)
    assert raced and merged == 2
    assert call("POST", f"{W}/search", {"query": "Zebra crossing"}).body[0]["id"] == posted[0]["id"]
    assert call("POST", f"{W}/search", {"query": "Quokka sighting"}).body == []
    stored = [from_item(i) for i in ws["dynamodb"].scan(TableName=TABLE)["Items"]]

    def text(item: dict) -> str:
        inflated = [zlib.decompress(v).decode() for v in item.values() if isinstance(v, bytes)]
        return str(item) + "".join(inflated)

    assert [i["SK"] for i in stored if "quokka" in text(i).lower()] == []
    assert [i for i in stored if "#XG#" in i["PK"] and "zebra" in text(i).lower()]  # merged into a segment


def _fresh(aws) -> set[tuple[str, int]]:
    """(session, seq) of every message the workspace's fresh index units hold, read from the table."""
    import json

    items = aws["dynamodb"].scan(TableName=TABLE)["Items"]
    return {
        (i["s"]["S"], entry[0])
        for i in items
        if i.get("kind", {}).get("S") == "xfresh"
        for entry in json.loads(zlib.decompress(i["z"]["B"]))
    }


def test_a_clone_s_delete_of_an_inherited_message_takes_it_out_of_the_clone_s_index_only(ws):
    """A clone's copy keeps its parent's `ib`, but the clone's copied page holds its text: the delete takes it out of
    that page (which can then merge), never out of the parent's unit."""
    from precis.store import text_index
    from precis.store.db import get_db

    streams = Streams(ws)
    posted = post(("alice", "Zebra crossing one."), ("bob", "Quokka sighting two."), ("alice", "Walrus tusk three."))
    streams.settle()
    clone = call("POST", f"{S}/clone")
    assert clone.status == 201, clone.body
    clone_id = clone.body["id"]
    streams.settle()  # the clone's copy, indexed as one page of the clone's
    assert call("DELETE", f"{W}/sessions/{clone_id}/messages/{posted[1]['id']}").status == 204
    streams.settle()
    assert _fresh(ws) == {("s1", 1), ("s1", 2), ("s1", 3), (clone_id, 1), (clone_id, 3)}
    found = call("POST", f"{W}/search", {"query": "Quokka sighting"}).body
    assert [(m["session_id"], m["id"]) for m in found] == [("s1", posted[1]["id"])]
    # No unit waits for the text of a deleted message: everything merges.
    assert text_index.merge(get_db(), "ws1", ["s1", clone_id], min_docs=1) == 5
    assert _fresh(ws) == set()


def test_a_delete_never_changes_another_session_s_fresh_unit_in_the_same_shard(ws):
    """Whatever unit a delete's cascade names (a clone's tombstone written by the release before named its copy's
    parent's unit), it changes only its own session's fresh items."""
    from precis.store import text_index
    from precis.store.db import get_db
    from precis.store.text_index import FRESH_SHARDS

    # A second session whose fresh items share s1's partition (crc32, as the index spreads sessions over its shards).
    shard = zlib.crc32(b"s1") % FRESH_SHARDS
    other = next(f"t{n}" for n in range(100) if zlib.crc32(f"t{n}".encode()) % FRESH_SHARDS == shard)
    assert call("POST", f"{W}/sessions", {"id": other, "peers": {"alice": {}}}).status == 201
    post(("alice", "Zebra crossing one."), ("bob", "Quokka sighting two."))
    post_messages(other, ("alice", "Walrus tusk three."), ("alice", "Quokka again four."))
    key = {"PK": {"S": "WS#ws1#S#s1"}, "SK": {"S": f"MSG#{2:012d}"}}
    unit = ws["dynamodb"].get_item(TableName=TABLE, Key=key, ConsistentRead=True)["Item"]["ib"]["S"]
    assert text_index.forget_in_unit(get_db(), "ws1", other, unit, [2]) == 0
    assert _fresh(ws) == {("s1", 1), ("s1", 2), (other, 1), (other, 2)}
    assert [m["session_id"] for m in call("POST", f"{W}/search", {"query": "Quokka sighting"}).body][0] == "s1"
