"""PRECIS_LOCAL_THROUGHPUT_SCALE: DynamoDB's throughput limits in the local stack (local/moto_meter.py, and
`Metering` in local/moto_server.py), on a clock that stands still unless a test moves it."""

from __future__ import annotations

import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from local.moto_backend import client, start_moto
from local.moto_meter import ThroughputError, ThroughputMeter, read_units, scale_from_env, write_units
from local.moto_server import THROUGHPUT_MESSAGE
from local.template import template

TABLE = template().table_name


class Clock:
    """Seconds that pass only when a test says so: set `now`, or a `step` each reading moves it on."""

    def __init__(self) -> None:
        self.now, self.step = 0.0, 0.0

    def __call__(self) -> float:
        self.now += self.step
        return self.now


# ---------------------------------------------------------------- the buckets


def test_scale_divides_dynamodbs_limits():
    assert ThroughputMeter().rates["write", "partition"] == 1_000
    assert ThroughputMeter().rates["read", "partition"] == 3_000
    assert ThroughputMeter().rates["write", "table"] == 40_000
    meter = ThroughputMeter(100)
    assert (meter.rates["write", "item"], meter.rates["read", "item"], meter.rates["write", "table"]) == (10, 30, 400)
    assert "10 WRU/s and 30 RRU/s per item or partition" in meter.describe()


def test_a_hot_item_is_refused_until_its_second_has_refilled():
    clock = Clock()
    meter = ThroughputMeter(100, clock)  # 10 WRU/s an item
    hot = ("t", "p", "a")
    assert meter.exhausted("write", [hot]) is None
    meter.charge("write", hot, 12)  # admitted with tokens left, it may leave the bucket in debt
    assert meter.exhausted("write", [("t", "q", "x"), hot]) == 1  # the position of the hot one
    assert meter.exhausted("read", [hot]) is None  # reads have buckets of their own
    clock.now = 0.1  # 1 WRU of the 2 owed
    assert meter.exhausted("write", [hot]) == 0
    clock.now = 0.21
    assert meter.exhausted("write", [hot]) is None
    assert meter.refused == 2


def test_items_of_one_partition_share_its_limit_and_other_partitions_do_not():
    meter = ThroughputMeter(100, Clock())  # 10 WRU/s a partition
    for n in range(10):
        assert meter.exhausted("write", [("t", "p", f"item{n}")]) is None
        meter.charge("write", ("t", "p", f"item{n}"), 1)
    assert meter.exhausted("write", [("t", "p", "fresh")]) == 0  # a cold item of a hot partition
    assert meter.exhausted("write", [("t", "other", "fresh")]) is None
    assert meter.exhausted("read", [("t", "p", None)]) is None  # a Query of the partition: its reads


def test_a_global_index_has_partitions_of_its_own():
    meter = ThroughputMeter(1_000, Clock())  # 3 RRU/s a partition
    meter.charge("read", ("t", "bench", None), 4, index="ByDue")
    assert meter.exhausted("read", [("t", "bench", None)], index="ByDue") == 0
    assert meter.exhausted("read", [("t", "bench", None)]) is None  # the table's partition of the same value


def test_the_table_has_its_quota():
    meter = ThroughputMeter(1_000, Clock())  # 40 WRU/s the table
    for n in range(40):
        meter.charge("write", ("t", f"p{n}", "a"), 1)
    assert meter.exhausted("write", [("t", "cold", "a")]) == 0
    assert meter.exhausted("write", [("other", "cold", "a")]) is None


def test_units_are_dynamodbs():
    assert (write_units(1), write_units(1_025), write_units(1_500, transactional=True)) == (1, 2, 4)
    assert (read_units(4_097, consistent=True), read_units(100, consistent=False)) == (2, 0.5)
    assert read_units(100, consistent=True, transactional=True) == 2


@pytest.mark.parametrize("raw", ["0", "-1", "many", "inf", "nan"])
def test_a_scale_that_is_not_a_positive_number_is_named(raw):
    with pytest.raises(ThroughputError, match=f"PRECIS_LOCAL_THROUGHPUT_SCALE: a positive number .*got '{raw}'"):
        scale_from_env({"PRECIS_LOCAL_THROUGHPUT_SCALE": raw})


def test_unset_is_aws_limits_and_off_is_no_meter():
    assert scale_from_env({}) == 1  # AWS's limits unless told otherwise: the local stack is never kinder
    assert scale_from_env({"PRECIS_LOCAL_THROUGHPUT_SCALE": "off"}) is None
    assert scale_from_env({"PRECIS_LOCAL_THROUGHPUT_SCALE": " 50 "}) == 50


# ---------------------------------------------------------------- the moto server


@pytest.fixture
def metered():
    """A moto server whose functions' port meters at DynamoDB's limits / 1,000 (1 WRU/s an item or partition),
    its clock standing still."""
    clock = Clock()
    backend = start_moto(template(), meter=ThroughputMeter(1_000, clock))
    yield backend, clock
    backend.stop()


def dynamodb(endpoint: str):
    """A client that does not retry (botocore would retry a ThrottlingException)."""
    return client("dynamodb", endpoint, Config(retries={"mode": "standard", "total_max_attempts": 1}))


def key(pk: str, sk: str) -> dict:
    return {"PK": {"S": pk}, "SK": {"S": sk}}


def error_of(call) -> dict:
    with pytest.raises(ClientError) as caught:
        call()
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    return caught.value.response


def test_a_hot_item_is_throttled_as_dynamodb_throttles_it(metered):
    backend, clock = metered
    ddb = dynamodb(backend.functions_endpoint)
    assert backend.functions_endpoint != backend.endpoint
    ddb.put_item(TableName=TABLE, Item={**key("hot", "a"), "n": {"N": "1"}})
    error = error_of(lambda: ddb.put_item(TableName=TABLE, Item={**key("hot", "a"), "n": {"N": "2"}}))
    assert error["Error"] == {"Code": "ThrottlingException", "Message": THROUGHPUT_MESSAGE}
    error_of(lambda: ddb.put_item(TableName=TABLE, Item={**key("hot", "b"), "n": {"N": "1"}}))  # same partition
    ddb.put_item(TableName=TABLE, Item={**key("cold", "a"), "n": {"N": "1"}})  # another partition
    own = client("dynamodb", backend.endpoint)  # the stack's own clients are never metered
    own.put_item(TableName=TABLE, Item={**key("hot", "c"), "n": {"N": "1"}})
    assert own.get_item(TableName=TABLE, Key=key("hot", "a"))["Item"]["n"] == {"N": "1"}
    assert "Item" not in own.get_item(TableName=TABLE, Key=key("hot", "b"))
    clock.now = 1.0  # a second later the partition has refilled
    ddb.put_item(TableName=TABLE, Item={**key("hot", "a"), "n": {"N": "3"}})
    assert own.get_item(TableName=TABLE, Key=key("hot", "a"))["Item"]["n"] == {"N": "3"}


def test_a_transaction_naming_a_hot_item_is_cancelled_whole_with_a_throttling_reason(metered):
    backend, _ = metered
    ddb = dynamodb(backend.functions_endpoint)
    ddb.put_item(TableName=TABLE, Item=key("hot", "a"))
    error = error_of(
        lambda: ddb.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": TABLE, "Item": key("cold", "a")}},
                {"Put": {"TableName": TABLE, "Item": key("hot", "b")}},
            ]
        )
    )
    assert error["Error"]["Code"] == "TransactionCanceledException"
    assert [r["Code"] for r in error["CancellationReasons"]] == ["None", "ThrottlingError"]
    assert error["CancellationReasons"][1]["Message"] == THROUGHPUT_MESSAGE
    assert "Item" not in client("dynamodb", backend.endpoint).get_item(TableName=TABLE, Key=key("cold", "a"))


def test_reads_are_metered_per_partition(metered):
    backend, _ = metered
    ddb = dynamodb(backend.functions_endpoint)  # 3 RRU/s a partition
    client("dynamodb", backend.endpoint).put_item(TableName=TABLE, Item={**key("p", "a"), "v": {"S": "x" * 9_000}})
    ddb.get_item(TableName=TABLE, Key=key("p", "a"), ConsistentRead=True)  # 3 RRU: the partition's second
    query = {
        "TableName": TABLE,
        "KeyConditionExpression": "#pk = :pk",
        "ExpressionAttributeNames": {"#pk": "PK"},
        "ExpressionAttributeValues": {":pk": {"S": "p"}},
    }
    assert error_of(lambda: ddb.query(**query))["Error"]["Code"] == "ThrottlingException"
    assert ddb.query(**{**query, "ExpressionAttributeValues": {":pk": {"S": "q"}}})["Count"] == 0


# ---------------------------------------------------------------- the service


def test_a_post_refused_for_capacity_answers_429_and_stores_no_part_of_its_messages(metered, monkeypatch):
    from precis.store.db import get_db
    from tests.handlers import call

    backend, clock = metered
    own = client("dynamodb", backend.endpoint)

    def stored() -> set[tuple[str, str]]:
        return {(i["PK"]["S"], i["SK"]["S"]) for i in own.scan(TableName=TABLE)["Items"]}

    monkeypatch.setenv("AWS_ENDPOINT_URL", backend.endpoint)  # the workspace and the session, unmetered
    get_db.cache_clear()
    try:
        assert call("POST", "/v3/workspaces", {"id": "w"}).status in (200, 201)
        assert call("POST", "/v3/workspaces/w/sessions", {"id": "s"}).status in (200, 201)
        before = stored()
        monkeypatch.setenv("AWS_ENDPOINT_URL", backend.functions_endpoint)  # the post, metered: 1 WRU/s a partition
        get_db.cache_clear()
        post = {"messages": [{"content": "hello there world", "peer_id": "alice"}]}
        reply = call("POST", "/v3/workspaces/w/sessions/s/messages", post)
        assert (reply.status, reply.body) == (429, {"detail": "the table is throttling requests; retry with backoff"})
        assert backend.server.meter.refused >= 1
        new = stored() - before
        assert not [k for k in new if k[1].startswith("MSG#") or "#X" in k[0]], new  # no message, no index entry
        clock.step = 10.0  # from now on every reading of the clock is ten seconds on: the buckets are always full
        assert call("POST", "/v3/workspaces/w/sessions/s/messages", post).status == 201
        messages = sorted(k[1] for k in stored() if k[1].startswith("MSG#"))
        assert messages == ["MSG#000000000001"]  # the refused post took no seq
    finally:
        get_db.cache_clear()
