"""AWS's limits, met before AWS enforces them: 4 MB transactions, 400 KB items, 6 MB Lambda answers, the index's
projection, and list filters that cost a bounded amount whatever the session's length."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from local.template import template
from precis.context.compose import WINDOW_FIELDS
from precis.settings import Settings, get_settings
from precis.store import keys, messages
from precis.store.db import from_item, get_db
from tests.handlers import call

W = "/v3/workspaces/ws1"
S = f"{W}/sessions/s1"
LAMBDA_RESPONSE_MAX = 6_291_556


@pytest.fixture
def ws(aws, monkeypatch):
    monkeypatch.setenv("PRECIS_MAX_MESSAGE_CHARS", "300000")
    get_settings.cache_clear()
    get_db.cache_clear()
    assert call("POST", "/v3/workspaces", {"id": "ws1"}).status == 201
    return aws


def stored(aws) -> list[dict]:
    out = aws["dynamodb"].query(
        TableName="precis-local",
        KeyConditionExpression="PK = :p AND begins_with(SK, :m)",
        ExpressionAttributeValues={":p": {"S": keys.session_pk("ws1", "s1")}, ":m": {"S": "MSG#"}},
    )
    return [from_item(i) for i in out["Items"]]


def post(messages_, headers=None):
    return call("POST", f"{S}/messages", {"messages": messages_}, headers=headers)


def test_a_batch_larger_than_a_transaction_moves_bodies_to_s3_until_it_fits(ws, monkeypatch):
    monkeypatch.setenv("PRECIS_INLINE_BODY_MAX_BYTES", "300000")
    get_settings.cache_clear()
    reply = post([{"content": f"{i:03d}" + "x" * 45_000, "peer_id": "alice"} for i in range(100)])
    assert reply.status == 201 and len(reply.body) == 100
    items = stored(ws)
    inline = sum(len(i.get("content", "").encode()) for i in items)
    assert inline <= messages.TRANSACTION_BUDGET_BYTES and any("body_key" in i for i in items)
    listed = call("POST", f"{S}/messages/list", size=100).body["items"]
    assert [m["content"][:3] for m in listed] == [f"{i:03d}" for i in range(100)]


def test_a_batch_whose_metadata_alone_passes_a_transaction_is_413_and_stores_nothing(ws):
    metadata = {f"k{i}": "v" * 600 for i in range(100)}  # ~62 KB, under the per-message cap
    reply = post([{"content": "hi", "peer_id": "alice", "metadata": metadata} for _ in range(60)])
    assert reply.status == 413 and "split it" in reply.body["detail"]
    assert stored(ws) == []
    assert ws["s3"].list_objects_v2(Bucket="precis-local").get("KeyCount", 0) == 0


def test_settings_cannot_make_an_item_pass_400_kb():
    with pytest.raises(ValidationError):
        Settings(inline_body_max_bytes=350_000)
    with pytest.raises(ValidationError):
        Settings(max_message_chars=4 * 1024 * 1024)
    assert Settings(inline_body_max_bytes=300_000).inline_body_max_bytes + 65_536 + 1_000 < 400 * 1024


def test_a_message_that_could_never_be_read_back_in_one_answer_is_413(ws, monkeypatch):
    monkeypatch.setenv("PRECIS_MAX_MESSAGE_CHARS", str(1024 * 1024))
    get_settings.cache_clear()
    reply = post([{"content": "\x01" * 1_000_000, "peer_id": "alice"}])  # 6 bytes a character in JSON
    assert reply.status == 413 and "as JSON" in reply.body["detail"]


def test_a_page_of_large_messages_that_cannot_fit_is_413_naming_a_size_that_does(ws):
    """Never a page shorter than its size (the SDK asks for page + 1 with the same size and would skip the rest)."""
    cjk = "記憶" * 100_000  # 200,000 characters, 600 KB of UTF-8
    for _ in range(4):
        assert post([{"content": cjk, "peer_id": "alice"}] * 3).status == 201
    reply = call("POST", f"{S}/messages/list", size=50)
    assert reply.status == 413 and reply.payload_bytes <= LAMBDA_RESPONSE_MAX
    named = int(reply.body["detail"].rsplit(" ", 1)[1])
    assert 1 <= named < 12
    contents = []
    for page in range(1, -(-12 // named) + 1):
        reply = call("POST", f"{S}/messages/list", size=named, page=page)
        assert reply.status == 200 and reply.payload_bytes <= LAMBDA_RESPONSE_MAX
        contents += [m["content"] for m in reply.body["items"]]
    assert contents == [cjk] * 12


def test_the_echo_of_a_large_batch_leaves_out_contents_rather_than_fail_after_storing(ws):
    cjk = "記" * 250_000  # 750 KB a message: 10 of them pass 6 MB
    reply = post([{"content": cjk, "peer_id": "alice"}] * 10)
    assert reply.status == 201 and reply.payload_bytes <= LAMBDA_RESPONSE_MAX
    omitted = [m for m in reply.body if m.get("content_omitted")]
    assert omitted and all(m["content"] == "" for m in omitted)
    assert all(m["content"] == cjk for m in reply.body if not m.get("content_omitted"))
    assert len(stored(ws)) == 10  # all stored; GET returns each in full
    assert call("GET", f"{S}/messages/{omitted[0]['id']}").body["content"] == cjk


def test_the_index_holds_exactly_what_the_context_read_asks_of_it():
    table = template().resource("Table")["Properties"]
    (index,) = [i for i in table["LocalSecondaryIndexes"] if i["IndexName"] == "ByStartTokens"]
    assert index["Projection"]["ProjectionType"] == "INCLUDE"  # not ALL: kind, batch_token... stay in the table
    keys_ = {k["AttributeName"] for k in index["KeySchema"]}
    # Anything the read asks for beyond the projection would be fetched from the table item by item.
    assert set(WINDOW_FIELDS) == set(index["Projection"]["NonKeyAttributes"]) | (keys_ - {"PK"})


def test_a_filtered_list_examines_a_bounded_number_of_messages_and_reads_no_bodies_it_does_not_show(ws, monkeypatch):
    monkeypatch.setenv("PRECIS_INLINE_BODY_MAX_BYTES", "10")
    get_settings.cache_clear()
    post([{"content": f"body number {i}", "peer_id": "bob" if i % 2 else "alice"} for i in range(60)])
    db = get_db()
    reads = []
    db.s3.meta.events.register("before-call.s3.GetObject", lambda params, **_: reads.append(params))
    answer = messages.list_messages(db, "ws1", "s1", {"peer_id": "bob"}, 1, 5, False, scan_limit=20)
    assert [m["content"] for m in answer["items"]] == [f"body number {i}" for i in (1, 3, 5, 7, 9)]
    assert answer["total"] == 10 and answer["scan_limited"] is True
    assert len(reads) == 5  # only the bodies of the page
    narrowed = messages.list_messages(
        db, "ws1", "s1", {"peer_id": "bob", "seq": {"gte": 41}}, 1, 50, False, scan_limit=20
    )
    assert narrowed["total"] == 10 and "scan_limited" not in narrowed
    newest = messages.list_messages(db, "ws1", "s1", {"peer_id": "alice"}, 1, 2, True, scan_limit=20)
    assert [m["seq"] for m in newest["items"]] == [59, 57]


def test_a_filter_on_content_reads_bodies_and_matches_them(ws, monkeypatch):
    monkeypatch.setenv("PRECIS_INLINE_BODY_MAX_BYTES", "10")
    get_settings.cache_clear()
    post(
        [
            {"content": f"{'needle' if i == 7 else 'hay'} in a body long enough for S3", "peer_id": "a"}
            for i in range(12)
        ]
    )
    reply = call("POST", f"{S}/messages/list", {"filters": {"content": {"icontains": "NEEDLE"}}})
    assert reply.status == 200 and [m["seq"] for m in reply.body["items"]] == [8]
    assert json.dumps(reply.body)  # a plain page
