"""The local TTL service (local.ttl) against moto's table and stream: it deletes what DynamoDB's TTL would, and the
REMOVE records it made carry the service's identity, as AWS's do."""

from __future__ import annotations

from local.ttl import SERVICE_IDENTITY, TtlSweeper

TABLE = "precis-local"
NOW = 1_780_000_000


def _put(client, sk: str, **attributes) -> None:
    item = {"PK": {"S": "P"}, "SK": {"S": sk}, **{k: {"N": str(v)} for k, v in attributes.items()}}
    client.put_item(TableName=TABLE, Item=item)


def _keys(client) -> list[str]:
    return sorted(i["SK"]["S"] for i in client.scan(TableName=TABLE)["Items"] if i["PK"]["S"] == "P")


def _records(aws) -> list[dict]:
    arn = aws["dynamodb"].describe_table(TableName=TABLE)["Table"]["LatestStreamArn"]
    streams = aws["dynamodbstreams"]
    records = []
    for shard in streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]:
        iterator = streams.get_shard_iterator(StreamArn=arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON")
        records += streams.get_records(ShardIterator=iterator["ShardIterator"])["Records"]
    return records


def test_it_deletes_what_has_expired_by_its_clock_and_nothing_else(aws):
    client = aws["dynamodb"]
    _put(client, "past", expires_at=NOW - 1)
    _put(client, "now", expires_at=NOW)
    _put(client, "future", expires_at=NOW + 1)
    _put(client, "ancient", expires_at=NOW - 6 * 365 * 86_400)  # AWS leaves an item expired over five years ago
    _put(client, "other", retain_until=NOW - 1)  # not the table's TTL attribute
    client.put_item(TableName=TABLE, Item={"PK": {"S": "P"}, "SK": {"S": "text"}, "expires_at": {"S": "1"}})
    clock = [float(NOW)]
    sweeper = TtlSweeper(client, TABLE, lambda: clock[0])
    assert sorted(k["SK"]["S"] for k in sweeper.sweep()) == ["now", "past"]
    assert _keys(client) == ["ancient", "future", "other", "text"]
    clock[0] += 1
    assert [k["SK"]["S"] for k in sweeper.sweep()] == ["future"]
    assert sweeper.sweep() == []


def test_its_removals_carry_the_ttl_services_identity_and_no_other_record_does(aws):
    client = aws["dynamodb"]
    _put(client, "a", expires_at=NOW - 1)
    _put(client, "b", expires_at=NOW + 100)
    client.delete_item(TableName=TABLE, Key={"PK": {"S": "P"}, "SK": {"S": "b"}})  # a user's delete
    sweeper = TtlSweeper(client, TABLE, lambda: float(NOW))
    sweeper.sweep()
    stamped = [
        (r["eventName"], r["dynamodb"]["Keys"]["SK"]["S"], sweeper.stamped(r).get("userIdentity"))
        for r in _records(aws)
    ]
    assert ("REMOVE", "a", SERVICE_IDENTITY) in stamped
    assert ("REMOVE", "b", None) in stamped
    assert all(identity is None for event, _, identity in stamped if event != "REMOVE")
