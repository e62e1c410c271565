"""The local stack's TTL service (local.ttl.TtlService) with the deriver's stream poller against a real moto server:
an expiry marker past its `expires_at` is deleted by the service, and the poller hands the deriver its REMOVE record
with the TTL service's `userIdentity`, as Lambda does on AWS; a REMOVE made by anyone else carries none."""

from __future__ import annotations

import time
import urllib.request

import pytest

from local.moto_backend import client, start_moto
from local.poller import StreamPoller, StreamSettings, _RecordsReader, filter_header
from local.template import template
from local.ttl import DEFAULT_PERIOD_S, SERVICE_IDENTITY, TtlPeriodError, TtlService, period_from_env
from local.worker import InvokeResult

TABLE = template().table_name
PK = "WS#w#S#s"


@pytest.fixture
def backend():
    backend = start_moto(template())
    yield backend
    urllib.request.urlopen(urllib.request.Request(f"{backend.endpoint}/moto-api/reset", method="POST")).close()
    backend.stop()


def put_marker(endpoint: str, day: str, expires_at: float) -> None:
    client("dynamodb", endpoint).put_item(
        TableName=TABLE,
        Item={
            "PK": {"S": PK},
            "SK": {"S": f"EXPIRY#{day}"},
            "kind": {"S": "expiry"},
            "expires_at": {"N": str(int(expires_at))},
        },
    )


def markers(endpoint: str) -> list[str]:
    items = client("dynamodb", endpoint).query(
        TableName=TABLE,
        KeyConditionExpression="PK = :pk AND begins_with(SK, :e)",
        ExpressionAttributeValues={":pk": {"S": PK}, ":e": {"S": "EXPIRY#"}},
    )["Items"]
    return [i["SK"]["S"] for i in items]


def until(condition, timeout: float = 10.0, step=lambda: None) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        step()
        time.sleep(0.01)


def test_the_service_expires_a_marker_and_the_deriver_gets_its_remove_from_the_ttl_service(backend):
    endpoint = backend.endpoint
    put_marker(endpoint, "2026-01-01", time.time() - 60)  # expired
    put_marker(endpoint, "2026-01-02", time.time() - 60)  # deleted by a purge before the service comes
    put_marker(endpoint, "2999-01-01", time.time() + 86_400)  # not yet
    client("dynamodb", endpoint).delete_item(TableName=TABLE, Key={"PK": {"S": PK}, "SK": {"S": "EXPIRY#2026-01-02"}})

    service = TtlService(client("dynamodb", backend.background_endpoint), TABLE, every_s=0.05)
    events: list[dict] = []

    def invoke(event: dict) -> InvokeResult:
        events.append(event)
        return InvokeResult(True, {"batchItemFailures": []})

    poller = StreamPoller.from_template(
        template(), endpoint, invoke, function="DeriveFunction", max_window_s=0, stamp=service.stamp
    )
    service.start()
    try:
        until(lambda: markers(endpoint) == ["EXPIRY#2999-01-01"])
    finally:
        service.stop()
        assert service.join(timeout=5)

    def removes() -> dict[str, dict]:
        return {r["dynamodb"]["Keys"]["SK"]["S"]: r for e in events for r in e["Records"] if r["eventName"] == "REMOVE"}

    until(lambda: len(removes()) == 2, step=poller.poll_once)
    poller.poll_once()
    by_ttl, by_purge = removes()["EXPIRY#2026-01-01"], removes()["EXPIRY#2026-01-02"]
    assert by_ttl["userIdentity"] == SERVICE_IDENTITY  # at the record's top level, as Lambda delivers it
    assert by_ttl["dynamodb"]["Keys"] == {"PK": {"S": PK}, "SK": {"S": "EXPIRY#2026-01-01"}}
    assert by_ttl["eventSource"] == "aws:dynamodb"
    assert "userIdentity" not in by_purge
    assert len(removes()) == 2  # the marker not expired yet was neither deleted nor delivered


def test_motos_own_filtering_lets_a_remove_of_a_marker_through_with_its_keys_only(backend):
    """The pollers' server-side filter (moto_storage's FILTER_HEADER): a REMOVE holds only the keys (NEW_IMAGE), and
    the deriver's EXPIRY# pattern on the keys must still pass it, while a REMOVE of anything else is dropped."""
    endpoint = backend.endpoint
    put_marker(endpoint, "2026-01-01", time.time() - 60)
    dynamodb = client("dynamodb", endpoint)
    dynamodb.put_item(TableName=TABLE, Item={"PK": {"S": PK}, "SK": {"S": "MSG#000000000001"}, "kind": {"S": "x"}})
    for sk in ("EXPIRY#2026-01-01", "MSG#000000000001"):
        dynamodb.delete_item(TableName=TABLE, Key={"PK": {"S": PK}, "SK": {"S": sk}})
    streams = client("dynamodbstreams", endpoint)
    arn = dynamodb.describe_table(TableName=TABLE)["Table"]["LatestStreamArn"]
    (shard,) = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]
    iterator = streams.get_shard_iterator(StreamArn=arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON")
    patterns = StreamPoller.from_template(template(), endpoint, lambda e: None, function="DeriveFunction").settings
    read = _RecordsReader(endpoint).get_records(iterator["ShardIterator"], 1000, filter_header(arn, patterns.filters))
    assert read is not None
    page, count = read
    assert count == 4
    assert [(r["eventName"], r["dynamodb"]["Keys"]["SK"]["S"]) for r in page["Records"]] == [
        ("REMOVE", "EXPIRY#2026-01-01")
    ]


def test_its_period_comes_from_precis_local_ttl_s():
    assert period_from_env({}) == DEFAULT_PERIOD_S
    assert period_from_env({"PRECIS_LOCAL_TTL_S": "0.5"}) == 0.5
    for bad in ("0", "-1", "soon", "inf", "nan"):
        with pytest.raises(TtlPeriodError, match="PRECIS_LOCAL_TTL_S"):
            period_from_env({"PRECIS_LOCAL_TTL_S": bad})


def test_a_filter_on_the_ttl_services_identity_is_matched_after_the_stamp(backend):
    """AWS's TTL page filters on `userIdentity`: moto's own filtering cannot see the stamp, so such a pattern is
    matched by the poller, after it."""
    endpoint = backend.endpoint
    put_marker(endpoint, "2026-01-01", time.time() - 60)
    put_marker(endpoint, "2026-01-02", time.time() - 60)
    client("dynamodb", endpoint).delete_item(TableName=TABLE, Key={"PK": {"S": PK}, "SK": {"S": "EXPIRY#2026-01-02"}})
    service = TtlService(client("dynamodb", backend.background_endpoint), TABLE)
    assert [k["SK"]["S"] for k in service.sweeper.sweep()] == ["EXPIRY#2026-01-01"]
    events: list[dict] = []
    pattern = {"userIdentity": {"type": ["Service"], "principalId": ["dynamodb.amazonaws.com"]}}
    poller = StreamPoller(
        endpoint,
        TABLE,
        StreamSettings(filters=[pattern]),
        lambda event: events.append(event) or InvokeResult(True, None),
        "arn:aws:lambda:us-east-1:123456789012:function:f",
        stamp=service.stamp,
    )
    until(lambda: events, step=poller.poll_once)
    poller.poll_once()
    assert [(r["eventName"], r["dynamodb"]["Keys"]["SK"]["S"]) for e in events for r in e["Records"]] == [
        ("REMOVE", "EXPIRY#2026-01-01")
    ]
