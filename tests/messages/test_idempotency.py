"""Idempotency-Key is exactly once: a lost answer, a crash or a refusal never stores a batch twice nor loses one.

DynamoDB's side of the failures is played through botocore's own event hooks on the real client (the request
still reaches moto, or is refused as DynamoDB refuses it); the code under test is not patched.
"""

from __future__ import annotations

import json

import pytest
from botocore.exceptions import ClientError, ReadTimeoutError

from precis.messages.ingest import _fingerprint, create_messages
from precis.schemas.bodies import MessageBatch
from precis.settings import get_settings
from precis.store import keys
from precis.store.db import from_item, get_db
from tests.handlers import call

W = "/v3/workspaces/ws1"
S = f"{W}/sessions/s1"


@pytest.fixture
def db(aws):
    get_db.cache_clear()
    assert call("POST", "/v3/workspaces", {"id": "ws1"}).status == 201
    yield get_db()
    get_db.cache_clear()


def stored(db) -> list[dict]:
    out = db.client.query(
        TableName=db.table,
        KeyConditionExpression="PK = :p AND begins_with(SK, :m)",
        ExpressionAttributeValues={":p": {"S": keys.session_pk("ws1", "s1")}, ":m": {"S": "MSG#"}},
    )
    return [from_item(i) for i in out["Items"]]


def record(db, key="k") -> dict | None:
    return from_item(
        db.client.get_item(TableName=db.table, Key={"PK": {"S": f"WS#ws1#S#s1#IDEM#{key}"}, "SK": {"S": "IDEM"}}).get(
            "Item"
        )
    )


def batch(*contents) -> MessageBatch:
    return MessageBatch(messages=[{"content": c, "peer_id": "alice"} for c in contents])


def lose_answers_of(db, operation: str, times: int = 1):
    """After moto has executed `operation`, raise a read timeout instead of answering (a lost response)."""
    left = [times]

    def after_call(http_response, parsed, model, **_):
        if left[0] > 0:
            left[0] -= 1
            raise ReadTimeoutError(endpoint_url="http://dynamodb")

    db.client.meta.events.register(f"after-call.dynamodb.{operation}", after_call)
    return lambda: db.client.meta.events.unregister(f"after-call.dynamodb.{operation}", after_call)


def test_a_commit_whose_answer_was_lost_is_answered_once_and_never_stored_twice(db):
    assert call("POST", f"{W}/sessions", {"id": "s1", "peers": {"alice": {}}}).status == 201
    restore = lose_answers_of(db, "TransactWriteItems")
    status, views = create_messages(db, get_settings(), "ws1", "s1", batch("one", "two"), "k")
    restore()
    assert status == 201 and [v["content"] for v in views] == ["one", "two"]
    assert [m["seq"] for m in stored(db)] == [1, 2]
    assert record(db)["state"] == "done"
    # The client never saw that answer and retries: it gets the same messages, nothing new is written.
    again = call(
        "POST",
        f"{S}/messages",
        {"messages": [{"content": c, "peer_id": "alice"} for c in ("one", "two")]},
        headers={"Idempotency-Key": "k"},
    )
    assert again.status == 201 and [m["id"] for m in again.body] == [v["id"] for v in views]
    assert len(stored(db)) == 2


def test_a_refused_transaction_releases_the_key_for_a_retry(db):
    def refuse(params, **_):
        raise ClientError({"Error": {"Code": "ValidationException", "Message": "refused"}}, "TransactWriteItems")

    db.client.meta.events.register("before-call.dynamodb.TransactWriteItems", refuse)
    with pytest.raises(ClientError):
        create_messages(db, get_settings(), "ws1", "s1", batch("one"), "k")
    db.client.meta.events.unregister("before-call.dynamodb.TransactWriteItems", refuse)
    assert record(db) is None and stored(db) == []
    assert create_messages(db, get_settings(), "ws1", "s1", batch("one"), "k")[0] == 201
    assert len(stored(db)) == 1


def claim_of_a_crashed_request(db, lease_until: float, first_seq: int | None, token: str = "dead") -> None:
    item = {
        "PK": {"S": "WS#ws1#S#s1#IDEM#k"},
        "SK": {"S": "IDEM"},
        "kind": {"S": "idempotency"},
        "state": {"S": "in_progress"},
        "token": {"S": token},
        "fingerprint": {"S": _fingerprint(batch("one"))},
        "expires_at": {"N": str(2_000_000_000)},
        "lease_until": {"N": str(lease_until)},
    }
    if first_seq is not None:
        item["first_seq"] = {"N": str(first_seq)}
    db.client.put_item(TableName=db.table, Item=item)


def test_a_live_claim_is_409_and_a_dead_one_is_taken_over(db):
    claim_of_a_crashed_request(db, lease_until=4_000_000_000, first_seq=None)
    reply = call(
        "POST",
        f"{S}/messages",
        {"messages": [{"content": "one", "peer_id": "alice"}]},
        headers={"Idempotency-Key": "k"},
    )
    assert reply.status == 409 and "still being processed" in reply.body["detail"]
    claim_of_a_crashed_request(db, lease_until=1.0, first_seq=1)  # died before its transaction committed
    reply = call(
        "POST",
        f"{S}/messages",
        {"messages": [{"content": "one", "peer_id": "alice"}]},
        headers={"Idempotency-Key": "k"},
    )
    assert reply.status == 201 and len(stored(db)) == 1 and record(db)["state"] == "done"


def test_a_dead_claim_whose_batch_committed_is_replayed_not_run_again(db):
    status, views = create_messages(db, get_settings(), "ws1", "s1", batch("one"), None)
    token = "crashed-after-commit"
    db.client.update_item(
        TableName=db.table,
        Key={"PK": {"S": keys.session_pk("ws1", "s1")}, "SK": {"S": keys.message_sk(1)}},
        UpdateExpression="SET batch_token = :t",
        ExpressionAttributeValues={":t": {"S": token}},
    )
    claim_of_a_crashed_request(db, lease_until=1.0, first_seq=1, token=token)
    reply = call(
        "POST",
        f"{S}/messages",
        {"messages": [{"content": "one", "peer_id": "alice"}]},
        headers={"Idempotency-Key": "k"},
    )
    assert reply.status == 201 and [m["id"] for m in reply.body] == [views[0]["id"]]
    assert len(stored(db)) == 1
    assert json.loads(record(db)["answer"])[0]["id"] == views[0]["id"]


def test_a_claim_lasts_as_long_as_the_function_may_still_run(db):
    create_messages(db, get_settings(), "ws1", "s1", batch("one"), "k", lease_s=12.0)
    rec = record(db)
    assert rec["expires_at"] - rec["lease_until"] > 23 * 3600  # the lease is seconds; the record lives a day


def test_throttled_transactions_answer_429_and_store_nothing(db):
    def throttle(params, **_):
        raise ClientError(
            {
                "Error": {"Code": "TransactionCanceledException", "Message": "Transaction cancelled"},
                "CancellationReasons": [{"Code": "ThrottlingError"}],
            },
            "TransactWriteItems",
        )

    db.client.meta.events.register("before-call.dynamodb.TransactWriteItems", throttle)
    try:
        reply = call(
            "POST",
            f"{S}/messages",
            {"messages": [{"content": "one", "peer_id": "alice"}]},
            headers={"Idempotency-Key": "k"},
        )
    finally:
        db.client.meta.events.unregister("before-call.dynamodb.TransactWriteItems", throttle)
    assert reply.status == 429 and "throttl" in reply.body["detail"]
    assert stored(db) == [] and record(db) is None


def test_a_full_session_partition_is_413_with_a_message(db):
    def full(params, **_):
        raise ClientError(
            {
                "Error": {"Code": "TransactionCanceledException", "Message": "Transaction cancelled"},
                "CancellationReasons": [{"Code": "ValidationError", "Message": "Item collection size limit exceeded"}],
            },
            "TransactWriteItems",
        )

    call("POST", f"{S}/messages", {"messages": [{"content": "one", "peer_id": "alice"}]})
    db.client.meta.events.register("before-call.dynamodb.TransactWriteItems", full)
    try:
        reply = call("POST", f"{S}/messages", {"messages": [{"content": "two", "peer_id": "alice"}]})
    finally:
        db.client.meta.events.unregister("before-call.dynamodb.TransactWriteItems", full)
    assert reply.status == 413 and "10 GB" in reply.body["detail"]


def test_a_read_throttled_past_botocores_retries_is_429_not_500(db):
    call("POST", f"{S}/messages", {"messages": [{"content": "one", "peer_id": "alice"}]})

    def throttle(params, **_):
        raise ClientError(
            {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "slow down"}}, "Query"
        )

    db.client.meta.events.register("before-call.dynamodb.Query", throttle)
    try:
        reply = call("POST", f"{S}/messages/list")
    finally:
        db.client.meta.events.unregister("before-call.dynamodb.Query", throttle)
    assert reply.status == 429 and "retry" in reply.body["detail"]
