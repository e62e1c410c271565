"""The local stack's moto keeps DynamoDB's stream semantics across cancelled transactions."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError


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
    iterator = streams.get_shard_iterator(StreamArn=arn, ShardId=shard,
                                          ShardIteratorType="TRIM_HORIZON")["ShardIterator"]

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
