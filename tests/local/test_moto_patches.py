"""The local stack's moto keeps DynamoDB's stream semantics across cancelled transactions."""

from __future__ import annotations

import json
from functools import partial

import pytest
from botocore.exceptions import ClientError
from hypothesis import given, settings
from hypothesis import strategies as st


def _put(key: str, condition: bool = False) -> dict:
    put = {"TableName": "precis-local", "Item": {"PK": {"S": key}, "SK": {"S": "x"}, "kind": {"S": "message"}}}
    if condition:
        put["ConditionExpression"] = "attribute_not_exists(PK)"
    return {"Put": put}


def test_stream_readers_see_writes_after_a_cancelled_transaction(moto_server):
    _, clients = moto_server
    from local.moto_backend import client

    dynamodb, streams = clients["dynamodb"], client("dynamodbstreams", moto_server[0])
    arn = dynamodb.describe_table(TableName="precis-local")["Table"]["LatestStreamArn"]
    shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]
    iterator = streams.get_shard_iterator(StreamArn=arn, ShardId=shard, ShardIteratorType="TRIM_HORIZON")[
        "ShardIterator"
    ]

    def read() -> list[str]:
        nonlocal iterator
        page = streams.get_records(ShardIterator=iterator)
        iterator = page["NextShardIterator"]
        return [r["dynamodb"]["Keys"]["PK"]["S"] for r in page["Records"]]

    dynamodb.transact_write_items(TransactItems=[_put("a")])
    assert read() == ["a"]
    with pytest.raises(ClientError, match="TransactionCanceled"):
        dynamodb.transact_write_items(TransactItems=[_put("b", condition=True), _put("a", condition=True)])
    dynamodb.transact_write_items(TransactItems=[_put("c"), _put("d")])
    assert read() == ["c", "d"]  # nothing of the cancelled transaction, and the reader is not stranded
    assert "Item" not in dynamodb.get_item(TableName="precis-local", Key={"PK": {"S": "b"}, "SK": {"S": "x"}})


# ---------------------------------------------------------------- DynamoDB's size limits


def _count(dynamodb) -> int:
    pages = dynamodb.get_paginator("scan").paginate(TableName="precis-local", Select="COUNT")  # 1 MB a page
    return sum(page["Count"] for page in pages)


def _item(key: str, size: int) -> dict:
    return {"PK": {"S": key}, "SK": {"S": "x"}, "kind": {"S": "message"}, "content": {"S": "x" * size}}


@pytest.fixture(params=["in-process", "server"])
def dynamodb(request):
    """A DynamoDB client on moto as the tests use it (mock_aws) and as the local stack does (a moto server)."""
    if request.param == "in-process":
        return request.getfixturevalue("aws")["dynamodb"]
    return request.getfixturevalue("moto_server")[1]["dynamodb"]


def test_a_transaction_over_4_mb_is_refused_before_anything_is_written(dynamodb):
    puts = [{"Put": {"TableName": "precis-local", "Item": _item(f"big{n}", 360_000)}} for n in range(12)]  # 4.3 MB
    with pytest.raises(ClientError) as refused:
        dynamodb.transact_write_items(TransactItems=puts)
    assert refused.value.response["Error"] == {
        "Code": "ValidationException",
        "Message": "Transaction request cannot be larger than 4 MB",
    }
    assert _count(dynamodb) == 0


def test_a_transaction_under_4_mb_is_written(dynamodb):
    puts = [{"Put": {"TableName": "precis-local", "Item": _item(f"big{n}", 380_000)}} for n in range(11)]  # 4.18 MB
    dynamodb.transact_write_items(TransactItems=puts)
    assert _count(dynamodb) == 11


def test_updates_count_toward_the_4_mb_by_the_values_they_write(dynamodb):
    updates = [
        {
            "Update": {
                "TableName": "precis-local",
                "Key": {"PK": {"S": f"u{n}"}, "SK": {"S": "x"}},
                "UpdateExpression": "SET content = :c",
                "ExpressionAttributeValues": {":c": {"S": "x" * 360_000}},
            }
        }
        for n in range(12)
    ]
    with pytest.raises(ClientError, match="Transaction request cannot be larger than 4 MB"):
        dynamodb.transact_write_items(TransactItems=updates)


def test_a_vector_counts_toward_the_4_mb_as_moto_sizes_a_list_of_numbers():
    from moto.dynamodb.models.dynamo_type import DynamoType
    from moto.dynamodb.models.utilities import bytesize

    from local.moto_patches import transaction_size

    item = {**_item("vec", 10), "vec": {"L": [{"N": str(n / 7)} for n in range(1536)]}}  # sized from its strings
    assert (
        transaction_size([{"Put": {"TableName": "precis-local", "Item": item}}])
        == sum(bytesize(name) + DynamoType(value).size() for name, value in item.items())
        > 1536 * 3
    )


_SCALAR = st.one_of(
    st.text(max_size=8).map(lambda v: {"S": v}),
    st.integers(-(10**30), 10**30).map(lambda n: {"N": str(n)}),
    st.floats(allow_nan=False, allow_infinity=False).map(lambda x: {"N": repr(x)}),
    st.booleans().map(lambda v: {"BOOL": v}),
    st.just({"NULL": True}),
    st.sets(st.text(min_size=1, max_size=4), min_size=1, max_size=3).map(lambda v: {"SS": sorted(v)}),
)
_VALUE = st.recursive(
    _SCALAR,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(lambda v: {"L": v}),
        st.dictionaries(st.text(max_size=4), inner, max_size=3).map(lambda v: {"M": v}),
    ),
    max_leaves=10,
)
_ATTRIBUTES = st.dictionaries(st.text(min_size=1, max_size=6), _VALUE, min_size=1, max_size=4)


@settings(max_examples=200, deadline=None)
@given(
    actions=st.lists(
        st.one_of(
            _ATTRIBUTES.map(lambda item: {"Put": {"TableName": "t", "Item": item}}),
            st.tuples(_ATTRIBUTES, _ATTRIBUTES).map(
                lambda kv: {"Update": {"TableName": "t", "Key": kv[0], "ExpressionAttributeValues": kv[1]}}
            ),
        ),
        min_size=1,
        max_size=4,
    ),
    ascii_only=st.booleans(),
)
def test_a_transactions_size_is_never_more_than_its_requests_json(actions, ascii_only):
    """The local stack skips sizing a transaction whose request is under 4 MB: what it carries counts at most its
    JSON's length, escaped or not (local/moto_storage.py, `request_bytes`)."""
    from local.moto_patches import transaction_size

    body = json.dumps({"TransactItems": actions}, ensure_ascii=ascii_only).encode()
    assert transaction_size(actions) <= len(body)


@pytest.mark.parametrize("write", ["put_item", "transact_write_items"])
def test_moto_refuses_an_item_over_400_kb(dynamodb, write):
    # moto's own rule (not patched): refused from 405,000 bytes, a little under DynamoDB's 409,600, and as a plain
    # ValidationException inside a transaction too.
    for size, accepted in ((400_000, True), (410_000, False)):
        item = _item(f"{write}{size}", size)
        call = (
            partial(dynamodb.put_item, TableName="precis-local", Item=item)
            if write == "put_item"
            else partial(
                dynamodb.transact_write_items, TransactItems=[{"Put": {"TableName": "precis-local", "Item": item}}]
            )
        )
        if accepted:
            call()
        else:
            with pytest.raises(ClientError) as refused:
                call()
            assert refused.value.response["Error"]["Code"] == "ValidationException"
            assert refused.value.response["Error"]["Message"] == "Item size has exceeded the maximum allowed size"


def test_the_moto_server_answers_many_calls_on_one_connection(moto_server):
    """Keep-alive: each AWS call used to cost a new connection (and a server thread). Bodies are read whole, so the
    next request on the connection starts where the last one ended, whatever the body held."""
    import http.client
    import json
    from urllib.parse import urlsplit

    split = urlsplit(moto_server[0])
    conn = http.client.HTTPConnection(split.hostname, split.port, timeout=30)
    headers = {
        "Content-Type": "application/x-amz-json-1.0",
        "X-Amz-Target": "DynamoDB_20120810.GetItem",
        "Authorization": "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/dynamodb/aws4_request, "
        "SignedHeaders=host, Signature=0",
    }
    moto_server[1]["dynamodb"].put_item(
        TableName="precis-local", Item={"PK": {"S": "k"}, "SK": {"S": "x"}, "content": {"S": "kept"}}
    )
    sockets = set()
    for padding in (0, 5, 70_000):  # a body longer than one read of the socket
        body = json.dumps({"TableName": "precis-local", "Key": {"PK": {"S": "k"}, "SK": {"S": "x"}}}) + " " * padding
        conn.request("POST", "/", body=body, headers=headers)
        sockets.add(id(conn.sock))
        response = conn.getresponse()
        answer = json.loads(response.read())
        assert response.status == 200 and answer["Item"]["content"] == {"S": "kept"}
        assert response.getheader("Connection") != "close"
    assert len(sockets) == 1 and conn.sock is not None
    conn.close()


# ---------------------------------------------------------------- BatchWriteItem's refusals


def _batch(dynamodb, *requests: dict) -> dict:
    return dynamodb.batch_write_item(RequestItems={"precis-local": list(requests)})


def _put_request(key: str, content: str = "x") -> dict:
    return {"PutRequest": {"Item": {**_item(key, 0), "content": {"S": content}}}}


def _delete_request(key: str) -> dict:
    return {"DeleteRequest": {"Key": {"PK": {"S": key}, "SK": {"S": "x"}}}}


@pytest.mark.parametrize(
    "twice",
    [
        [_put_request("a", "first"), _put_request("b"), _put_request("a", "second")],  # moto took differing puts
        [_put_request("a"), _delete_request("a")],  # and a put and a delete of one item
        [_delete_request("a"), _put_request("b"), _delete_request("a")],
    ],
    ids=["two-puts", "put-and-delete", "two-deletes"],
)
def test_a_batch_naming_an_item_twice_is_refused_and_writes_nothing(dynamodb, twice):
    _batch(dynamodb, _put_request("a", "stored"))
    with pytest.raises(ClientError) as refused:
        _batch(dynamodb, *twice)
    assert refused.value.response["Error"] == {
        "Code": "ValidationException",
        "Message": "Provided list of item keys contains duplicates",
    }
    stored = dynamodb.get_item(TableName="precis-local", Key={"PK": {"S": "a"}, "SK": {"S": "x"}})["Item"]
    assert stored["content"] == {"S": "stored"} and _count(dynamodb) == 1


def test_a_batch_of_more_than_25_requests_is_refused_and_writes_nothing(dynamodb):
    with pytest.raises(ClientError) as refused:
        _batch(dynamodb, *(_put_request(f"k{n}") for n in range(26)))
    assert refused.value.response["Error"]["Code"] == "ValidationException"
    assert "less than or equal to 25" in refused.value.response["Error"]["Message"]
    assert _count(dynamodb) == 0


def test_a_batch_of_25_puts_and_deletes_of_distinct_items_is_written(dynamodb):
    _batch(dynamodb, *(_put_request(f"old{n}") for n in range(5)))
    answer = _batch(
        dynamodb, *(_put_request(f"new{n}") for n in range(20)), *(_delete_request(f"old{n}") for n in range(5))
    )
    assert answer["UnprocessedItems"] == {}
    assert _count(dynamodb) == 20
    with pytest.raises(ClientError, match="cannot contain an empty string value"):
        _batch(dynamodb, {"PutRequest": {"Item": {"PK": {"S": ""}, "SK": {"S": "x"}}}})


def test_the_repairs_refuse_a_moto_they_were_not_written_for():
    from local.moto_patches import MOTO_VERSION, check_moto_version

    check_moto_version()  # the pinned one
    with pytest.raises(RuntimeError, match=f"moto {MOTO_VERSION}'s internals, but moto 5.3.0 is installed"):
        check_moto_version("5.3.0")
