"""Message ingestion: dense seqs, running token totals, atomic batches, idempotency, large bodies, pages."""

from __future__ import annotations

import threading

import boto3
import pytest

from precis.settings import get_settings
from precis.store import keys
from precis.store.db import Db, from_item
from precis.store.messages import NewMessage, append_messages
from precis.tokens import count_text
from tests.handlers import call

W = "/v3/workspaces/ws1"
S = f"{W}/sessions/s1"


def post(*contents, peer="alice", headers=None, **extra):
    return call(
        "POST",
        f"{S}/messages",
        {"messages": [{"content": c, "peer_id": peer, **extra} for c in contents]},
        headers=headers,
    )


SESSION_PK = keys.session_pk("ws1", "s1")


def stored_messages(client, table="precis-local", pk=SESSION_PK):
    items, kwargs = [], {}
    while True:
        out = client.query(
            TableName=table,
            KeyConditionExpression="PK = :p AND begins_with(SK, :m)",
            ExpressionAttributeValues={":p": {"S": pk}, ":m": {"S": "MSG#"}},
            **kwargs,
        )
        items += [from_item(i) for i in out["Items"]]
        if "LastEvaluatedKey" not in out:
            return items
        kwargs = {"ExclusiveStartKey": out["LastEvaluatedKey"]}


def assert_dense_with_running_tokens(items):
    assert [i["seq"] for i in items] == list(range(1, len(items) + 1))
    running = 0
    for item in items:
        assert item["start_tokens"] == running
        running += item["token_count"]


@pytest.fixture
def ws(aws):
    assert call("POST", "/v3/workspaces", {"id": "ws1"}).status == 201
    return aws


def test_batch_gets_dense_seqs_token_counts_and_running_start_tokens(ws):
    first = post("hello world", "", "a longer message about the weather in Lisbon")
    second = post("and one more")
    assert first.status == second.status == 201
    assert [m["seq"] for m in first.body + second.body] == [1, 2, 3, 4]
    assert [m["token_count"] for m in first.body] == [
        count_text("hello world"),
        0,
        count_text("a longer message about the weather in Lisbon"),
    ]
    assert len({m["id"] for m in first.body + second.body}) == 4
    assert all(len(m["id"]) == 21 for m in first.body)
    assert_dense_with_running_tokens(stored_messages(ws["dynamodb"]))


def test_posting_creates_the_session_and_unknown_peers_as_members(ws):
    assert post("hi", peer="bob").status == 201
    assert call("POST", f"{W}/sessions/list").body["total"] == 1
    assert [p["id"] for p in call("GET", f"{S}/peers").body["items"]] == ["bob"]
    assert [s["id"] for s in call("POST", f"{W}/peers/bob/sessions").body["items"]] == ["s1"]


def test_runs_and_client_timestamps_are_kept(ws):
    reply = post("call", "result", run_id="run-1", created_at="2024-05-01T10:00:00+02:00")
    assert [m["run_id"] for m in reply.body] == ["run-1", "run-1"]
    assert reply.body[0]["created_at"] == "2024-05-01T10:00:00+02:00"
    fetched = call("GET", f"{S}/messages/{reply.body[1]['id']}").body
    assert fetched["created_at"] == "2024-05-01T10:00:00+02:00" and fetched["run_id"] == "run-1"
    runs = [i["run_start_seq"] for i in stored_messages(ws["dynamodb"])]
    assert runs == [1, 1]


def test_a_failed_batch_stores_none_of_its_messages(ws, monkeypatch):
    from precis.errors import Throttled
    from precis.store.db import get_db

    assert post("short").status == 201
    db = get_db()

    def second_put_always_fails(params, **_):
        # DynamoDB evaluates every action: the second put's condition fails, so the first must not be stored either.
        params["TransactItems"][1]["Put"]["ConditionExpression"] = "attribute_exists(SK)"

    db.client.meta.events.register("provide-client-params.dynamodb.TransactWriteItems", second_put_always_fails)
    try:
        with pytest.raises(Throttled):
            append_messages(
                db,
                "ws1",
                "s1",
                [NewMessage("ok", "alice", 1), NewMessage("x" * 50, "alice", 13)],
                inline_max_bytes=10,
                sleep=lambda _: None,
            )
    finally:
        db.client.meta.events.unregister("provide-client-params.dynamodb.TransactWriteItems", second_put_always_fails)
    assert [i["seq"] for i in stored_messages(ws["dynamodb"])] == [1]
    assert "Contents" not in ws["s3"].list_objects_v2(Bucket="precis-local", Prefix="bodies/")  # its body is gone


def test_repeated_idempotency_key_returns_the_first_answer_and_writes_nothing(ws):
    first = post("once", "twice", headers={"Idempotency-Key": "abc"})
    before = ws["dynamodb"].scan(TableName="precis-local")["Items"]
    again = post("once", "twice", headers={"Idempotency-Key": "abc"})
    assert (again.status, again.body) == (first.status, first.body)
    assert ws["dynamodb"].scan(TableName="precis-local")["Items"] == before
    assert len(stored_messages(ws["dynamodb"])) == 2


def test_idempotency_key_with_another_body_is_a_conflict(ws):
    assert post("once", headers={"Idempotency-Key": "abc"}).status == 201
    reply = post("something else", headers={"Idempotency-Key": "abc"})
    assert reply.status == 409 and "different request body" in reply.body["detail"]
    assert len(stored_messages(ws["dynamodb"])) == 1


def test_idempotency_keys_expire_after_a_day(ws):
    from precis.store import idempotency
    from precis.store.db import get_db

    db = get_db()
    calls = []

    def work(token, on_attempt):
        calls.append(1)
        return 201, ["answer"]

    def run(fingerprint):
        return idempotency.run_once(
            db, "ws1", "s1", "k", fingerprint, work, find_committed=lambda *_: None, now=lambda: clock[0]
        )

    clock = [1_000_000.0]
    assert run("f1")[2] is False
    clock[0] += idempotency.TTL_SECONDS - 1
    assert run("f1")[2] is True
    clock[0] += 2
    assert run("f2")[2] is False
    assert len(calls) == 2
    record = db.client.get_item(TableName="precis-local", Key={"PK": {"S": "WS#ws1#S#s1#IDEM#k"}, "SK": {"S": "IDEM"}})[
        "Item"
    ]
    assert int(record["expires_at"]["N"]) == int(clock[0]) + idempotency.TTL_SECONDS


def test_a_failed_request_releases_its_idempotency_key(ws):
    # Refused inside the claimed work (the batch's metadata cannot fit one transaction): 413, and the key is free.
    metadata = {f"k{i}": "v" * 600 for i in range(100)}
    reply = call(
        "POST",
        f"{S}/messages",
        {"messages": [{"content": "x", "peer_id": "a", "metadata": metadata}] * 60},
        headers={"Idempotency-Key": "k"},
    )
    assert reply.status == 413
    # Refused because the session was deleted: 404, and that key is free too.
    call("POST", f"{W}/sessions", {"id": "gone"})
    call("DELETE", f"{W}/sessions/gone")
    reply = call(
        "POST",
        f"{W}/sessions/gone/messages",
        {"messages": [{"content": "x", "peer_id": "a"}]},
        headers={"Idempotency-Key": "k2"},
    )
    assert reply.status == 404
    assert not [i for i in ws["dynamodb"].scan(TableName="precis-local")["Items"] if "IDEM" in i["PK"]["S"]]
    # Free means usable: the same key now stores its (valid) batch once.
    assert (
        call(
            "POST", f"{S}/messages", {"messages": [{"content": "x", "peer_id": "a"}]}, headers={"Idempotency-Key": "k"}
        ).status
        == 201
    )
    assert len(stored_messages(ws["dynamodb"])) == 1


def test_large_bodies_live_in_s3_and_read_back_transparently(ws, monkeypatch):
    monkeypatch.setenv("PRECIS_INLINE_BODY_MAX_BYTES", "1000")
    monkeypatch.setenv("PRECIS_MAX_MESSAGE_CHARS", str(1024 * 1024))
    get_settings.cache_clear()
    big = "tool output line ✓\n" * 55_000  # > 1 MiB of UTF-8, ~1 M characters
    big = big[: 1024 * 1024]
    reply = post("small", big)
    assert reply.status == 201 and reply.body[1]["content"] == big
    item = stored_messages(ws["dynamodb"])[1]
    assert "content" not in item and item["body_key"].startswith("bodies/ws1/s1/")
    assert ws["s3"].get_object(Bucket="precis-local", Key=item["body_key"])["Body"].read().decode() == big
    assert call("GET", f"{S}/messages/{reply.body[1]['id']}").body["content"] == big
    listed = call("POST", f"{S}/messages/list").body["items"]
    assert [m["content"] for m in listed] == ["small", big]


def test_content_over_the_configured_maximum_is_413(ws, monkeypatch):
    monkeypatch.setenv("PRECIS_MAX_MESSAGE_CHARS", "10")
    get_settings.cache_clear()
    reply = post("x" * 11)
    assert reply.status == 413 and "at most 10 characters, got 11" in reply.body["detail"]


def test_pages_are_exact_seq_ranges_in_both_directions(ws):
    for start in range(0, 250, 100):
        assert post(*[f"m{i}" for i in range(start, min(start + 100, 250))]).status == 201
    pages = [call("POST", f"{S}/messages/list", page=n, size=100).body for n in (1, 2, 3, 4)]
    assert [p["total"] for p in pages] == [250] * 4 and [p["pages"] for p in pages] == [3] * 4
    assert [m["content"] for p in pages for m in p["items"]] == [f"m{i}" for i in range(250)]
    assert pages[3]["items"] == []
    newest = call("POST", f"{S}/messages/list", page=1, size=7, reverse="true").body["items"]
    assert [m["seq"] for m in newest] == [250, 249, 248, 247, 246, 245, 244]


def test_late_pages_cost_the_same_requests_as_the_first(ws):
    from precis.store.db import get_db

    for start in range(0, 300, 100):
        post(*[f"m{i}" for i in range(start, start + 100)])
    db = get_db()
    counts = []

    def count(**_):
        counts[-1] += 1

    db.client.meta.events.register("before-call.dynamodb", count)
    for page_no in (1, 6):
        counts.append(0)
        assert len(call("POST", f"{S}/messages/list", page=page_no, size=50).body["items"]) == 50
    db.client.meta.events.unregister("before-call.dynamodb", count)
    assert counts[0] == counts[1] <= 3


def test_filters_on_peer_and_metadata(ws):
    post("a1", peer="alice", metadata={"topic": "x", "n": 1})
    post("b1", peer="bob", metadata={"topic": "y", "n": 5})
    post("a2", peer="alice", metadata={"topic": "y", "n": 9})
    by_peer = call("POST", f"{S}/messages/list", {"filters": {"peer_id": "alice"}}).body
    assert [m["content"] for m in by_peer["items"]] == ["a1", "a2"] and by_peer["total"] == 2
    by_meta = call("POST", f"{S}/messages/list", {"filters": {"metadata": {"topic": "y"}}}).body
    assert [m["content"] for m in by_meta["items"]] == ["b1", "a2"]
    ops = call(
        "POST",
        f"{S}/messages/list",
        {"filters": {"AND": [{"metadata": {"n": {"gte": 5}}}, {"NOT": [{"peer_id": "bob"}]}]}},
    ).body
    assert [m["content"] for m in ops["items"]] == ["a2"]


def test_metadata_update_keeps_content(ws):
    mid = post("immutable", metadata={"a": 1}).body[0]["id"]
    updated = call("PUT", f"{S}/messages/{mid}", {"metadata": {"b": [1, {"c": 2}]}})
    assert updated.status == 200 and updated.body["metadata"] == {"b": [1, {"c": 2}]}
    assert call("GET", f"{S}/messages/{mid}").body["content"] == "immutable"


def test_a_deleted_session_answers_404_at_once(ws):
    post("hello")
    assert call("DELETE", S).status == 202
    assert call("POST", f"{S}/messages/list").status == 404
    assert call("POST", f"{W}/sessions/list").body["total"] == 0
    assert post("again").status == 404
    assert call("POST", f"{W}/sessions", {"id": "s1"}).status == 409


def test_eight_concurrent_writers_end_dense_unique_and_complete(moto_server):
    url, clients = moto_server
    from botocore.config import Config

    db = Db(
        client=boto3.client("dynamodb", endpoint_url=url, config=Config(max_pool_connections=16)),
        s3=clients["s3"],
        table="precis-local",
        bucket="precis-local",
    )
    from precis.store import resources

    resources.get_or_create_workspace(db, "ws1")
    errors = []

    def writer(w: int):
        try:
            for b in range(3):
                batch = [
                    NewMessage(
                        content=f"w{w} b{b} m{m} " + "word " * m,
                        peer_id=f"p{w}",
                        token_count=count_text(f"w{w} b{b} m{m} " + "word " * m),
                    )
                    for m in range(10)
                ]
                append_messages(db, "ws1", "s1", batch, inline_max_bytes=16_384)
        except Exception as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    items = stored_messages(db.client)
    assert len(items) == 240
    assert_dense_with_running_tokens(items)
    assert sorted(i["content"] for i in items) == sorted(
        f"w{w} b{b} m{m} " + "word " * m for w in range(8) for b in range(3) for m in range(10)
    )
    # each batch is contiguous: a writer's 10 messages were claimed together
    for start in range(0, 240, 10):
        assert len({i["content"].split(" m")[0] for i in items[start : start + 10]}) == 1
