"""The stream poller against a real moto server: filtering, Lambda's record shape, partial failures,
bisection, retries and the on-failure destination."""

from __future__ import annotations

import json
import time
import urllib.request
from datetime import datetime

import pytest

from local.moto_backend import client, start_moto
from local.poller import StreamPoller, StreamSettings
from local.stream_records import matches
from local.template import template
from local.worker import FunctionPool, InvokeResult, function_environment

TABLE = template().table_name
OK = InvokeResult(True, {"batchItemFailures": []})


@pytest.fixture
def endpoint():
    """A moto server on a free loopback port holding the template's table, bucket and queues."""
    backend = start_moto(template())
    yield backend.endpoint
    urllib.request.urlopen(urllib.request.Request(f"{backend.endpoint}/moto-api/reset", method="POST")).close()
    backend.stop()


def put_message(endpoint: str, seq: int, content: str = "hello") -> None:
    client("dynamodb", endpoint).put_item(
        TableName=TABLE,
        Item={
            "PK": {"S": "WS#w#S#s"},
            "SK": {"S": f"MSG#{seq:012d}"},
            "kind": {"S": "message"},
            "id": {"S": f"m{seq}"},
            "peer_id": {"S": "alice"},
            "content": {"S": content},
            "token_count": {"N": "2"},
            "start_tokens": {"N": str(2 * (seq - 1))},
        },
    )


def put_session(endpoint: str) -> None:
    client("dynamodb", endpoint).put_item(
        TableName=TABLE,
        Item={
            "PK": {"S": "WS#w"},
            "SK": {"S": "SESSION#s"},
            "kind": {"S": "session"},
        },
    )


class Recorder:
    """An invoker that records each event and answers with `respond(event)`."""

    def __init__(self, respond=lambda event: OK):
        self.events: list[dict] = []
        self.results: list[InvokeResult] = []
        self.respond = respond

    def __call__(self, event: dict) -> InvokeResult:
        self.events.append(event)
        self.results.append(self.respond(event))
        return self.results[-1]

    def ids(self) -> list[list[str]]:
        return [[r["dynamodb"]["NewImage"]["id"]["S"] for r in e["Records"]] for e in self.events]


def make_poller(endpoint: str, invoke) -> StreamPoller:
    return StreamPoller.from_template(template(), endpoint, invoke, max_window_s=0, backoff=lambda attempt: 0)


def drain(poller: StreamPoller, until, timeout: float = 10.0) -> None:
    """Poll until `until()` holds, then once more to show nothing else arrives."""
    deadline = time.monotonic() + timeout
    while not until():
        assert time.monotonic() < deadline, "timed out waiting for the poller"
        poller.poll_once()
        time.sleep(0.01)
    poller.poll_once()


def test_delivers_only_message_inserts_shaped_like_lambda(endpoint):
    put_session(endpoint)
    put_message(endpoint, 1)
    recorder = Recorder()
    poller = make_poller(endpoint, recorder)
    drain(poller, lambda: recorder.events)

    assert len(recorder.events) == 1
    (record,) = recorder.events[0]["Records"]
    stream_arn = client("dynamodb", endpoint).describe_table(TableName=TABLE)["Table"]["LatestStreamArn"]
    assert set(record) == {
        "eventID",
        "eventName",
        "eventVersion",
        "eventSource",
        "awsRegion",
        "dynamodb",
        "eventSourceARN",
    }
    assert record["eventName"] == "INSERT"
    assert record["eventVersion"] == "1.1"
    assert record["eventSource"] == "aws:dynamodb"
    assert record["awsRegion"] == "us-east-1"
    assert record["eventSourceARN"] == stream_arn
    assert isinstance(record["eventID"], str) and record["eventID"]
    ddb = record["dynamodb"]
    assert set(ddb) == {
        "ApproximateCreationDateTime",
        "Keys",
        "NewImage",
        "SequenceNumber",
        "SizeBytes",
        "StreamViewType",
    }
    assert isinstance(ddb["ApproximateCreationDateTime"], int | float)
    assert abs(ddb["ApproximateCreationDateTime"] - time.time()) < 60
    assert ddb["Keys"] == {"PK": {"S": "WS#w#S#s"}, "SK": {"S": "MSG#000000000001"}}
    assert ddb["NewImage"]["kind"] == {"S": "message"}
    assert ddb["NewImage"]["token_count"] == {"N": "2"}
    assert ddb["NewImage"]["start_tokens"] == {"N": "0"}
    assert ddb["SequenceNumber"].isdigit()
    assert isinstance(ddb["SizeBytes"], int) and ddb["SizeBytes"] > 0
    assert ddb["StreamViewType"] == "NEW_IMAGE"
    json.dumps(recorder.events[0])  # what the worker receives is plain JSON


def test_the_real_summarizer_reports_no_failures(endpoint):
    tpl = template()
    fn = tpl.stream_function()
    pool = FunctionPool(fn, function_environment(tpl, fn, endpoint), size=1)
    recorder = Recorder(pool.invoke)
    try:
        put_message(endpoint, 1)
        drain(make_poller(endpoint, recorder), lambda: recorder.results, timeout=60)
    finally:
        pool.close()
    result = recorder.results[0]
    assert result.ok, result.error
    assert result.payload == {"batchItemFailures": []}
    assert len(recorder.results) == 1


def test_partial_failure_retries_from_the_lowest_failed_record(endpoint):
    for seq in (1, 2, 3):
        put_message(endpoint, seq)

    def respond(event: dict) -> InvokeResult:
        if len(recorder.events) == 1:
            second = event["Records"][1]["dynamodb"]["SequenceNumber"]
            return InvokeResult(True, {"batchItemFailures": [{"itemIdentifier": second}]})
        return OK

    recorder = Recorder(respond)
    poller = make_poller(endpoint, recorder)
    drain(poller, lambda: len(recorder.events) >= 2)
    assert recorder.ids() == [["m1", "m2", "m3"], ["m2", "m3"]]


def dead_letters(endpoint: str) -> list[dict]:
    """The on-failure records in the template's dead-letter queue."""
    sqs = client("sqs", endpoint)
    url = sqs.get_queue_url(QueueName=template().queue_names["SummarizeDLQ"])["QueueUrl"]
    messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
    return [json.loads(m["Body"]) for m in messages]


def test_function_errors_bisect_then_dead_letter_and_move_on(endpoint):
    put_message(endpoint, 1, content="poison")
    put_message(endpoint, 2)

    def respond(event: dict) -> InvokeResult:
        if any(r["dynamodb"]["NewImage"]["content"]["S"] == "poison" for r in event["Records"]):
            return InvokeResult(False, {"errorType": "RuntimeError", "errorMessage": "boom"}, "RuntimeError: boom")
        return OK

    recorder = Recorder(respond)
    poller = make_poller(endpoint, recorder)
    drain(poller, lambda: ["m2"] in recorder.ids())
    put_message(endpoint, 3)
    drain(poller, lambda: ["m3"] in recorder.ids())

    # Bisected once, then the poison record alone: the first try and MaximumRetryAttempts (3) retries.
    assert recorder.ids() == [["m1", "m2"], ["m1"], ["m1"], ["m1"], ["m1"], ["m2"], ["m3"]]

    (failure,) = dead_letters(endpoint)
    poison = recorder.events[1]["Records"][0]
    table = client("dynamodb", endpoint).describe_table(TableName=TABLE)["Table"]
    shard = client("dynamodbstreams", endpoint).describe_stream(StreamArn=table["LatestStreamArn"])
    info = failure["DDBStreamBatchInfo"]
    assert info["shardId"] == shard["StreamDescription"]["Shards"][0]["ShardId"]
    assert info["startSequenceNumber"] == info["endSequenceNumber"] == poison["dynamodb"]["SequenceNumber"]
    assert info["batchSize"] == 1
    assert info["streamArn"] == table["LatestStreamArn"]
    for key in ("approximateArrivalOfFirstRecord", "approximateArrivalOfLastRecord"):
        assert datetime.fromisoformat(info[key]).timestamp() == poison["dynamodb"]["ApproximateCreationDateTime"]
    assert failure["requestContext"]["condition"] == "RetryAttemptsExhausted"
    assert failure["requestContext"]["approximateInvokeCount"] == 4
    assert failure["requestContext"]["functionArn"].endswith(":function:precis-summarize-local")
    assert failure["responseContext"] == {"statusCode": 200, "executedVersion": "$LATEST", "functionError": "Unhandled"}
    assert failure["version"] == "1.0"
    assert datetime.fromisoformat(failure["timestamp"])


def test_records_past_the_maximum_age_are_dead_lettered_without_an_invocation(endpoint):
    put_message(endpoint, 1)
    recorder = Recorder()
    poller = make_poller(endpoint, recorder)
    poller.settings.max_age_s = 0  # every record is older than "now"
    for _ in range(3):
        poller.poll_once()
    assert recorder.events == []
    (failure,) = dead_letters(endpoint)
    assert failure["requestContext"]["condition"] == "RecordAgeExceeded"
    assert failure["requestContext"]["approximateInvokeCount"] == 0
    assert failure["DDBStreamBatchInfo"]["batchSize"] == 1


@pytest.mark.parametrize(
    ("pattern", "event", "expected"),
    [
        ({"a": {"b": ["x"]}}, {"a": {"b": "x"}}, True),
        ({"a": {"b": ["x"]}}, {"a": {"b": "y"}}, False),
        ({"a": {"b": ["x"]}}, {"a": {}}, False),
        ({"a": ["x", "y"]}, {"a": ["z", "y"]}, True),
        ({"a": [{"prefix": "MSG#"}]}, {"a": "MSG#1"}, True),
        ({"a": [{"prefix": "MSG#"}]}, {"a": "SUMMARY#1"}, False),
        ({"a": [{"exists": True}]}, {"a": 1}, True),
        ({"a": [{"exists": False}]}, {"a": 1}, False),
        ({"a": [{"exists": False}]}, {"b": 1}, True),
        ({"a": [{"anything-but": ["x", "y"]}]}, {"a": "z"}, True),
        ({"a": [{"anything-but": ["x", "y"]}]}, {"a": "x"}, False),
        ({"a": [{"anything-but": ["x"]}]}, {}, False),
        ({"a": [1]}, {"a": 1}, True),
        ({"a": ["x"], "b": ["y"]}, {"a": "x", "b": "z"}, False),
    ],
)
def test_filter_patterns(pattern, event, expected):
    assert matches(pattern, event) is expected


@pytest.mark.parametrize(
    ("event_name", "image", "wakes"),
    [
        ("INSERT", {"kind": {"S": "message"}}, True),
        ("MODIFY", {"kind": {"S": "message"}}, False),
        ("INSERT", {"kind": {"S": "session"}}, False),
        ("INSERT", {"kind": {"S": "summary"}}, False),
        ("INSERT", {}, False),
    ],
)
def test_the_templates_filters_wake_the_summarizer_for_message_inserts(event_name, image, wakes):
    settings = StreamSettings.from_properties(template().stream_function().stream)
    record = {"eventName": event_name, "dynamodb": {"NewImage": image}}
    assert any(matches(p, record) for p in settings.filters) is wakes


def test_the_pollers_json_read_of_get_records_shapes_records_as_botocores_parse_does(moto_server):
    """The pollers read GetRecords with json.loads (botocore's parse of a big stream took the stack's process): the
    Lambda records are the same as from boto3's answer, binary values, vectors, nested maps, old and new images."""
    from local.moto_backend import client
    from local.poller import _RecordsReader
    from local.stream_records import lambda_record, lambda_record_json

    endpoint, clients = moto_server
    dynamodb, table = clients["dynamodb"], template().table_name
    streams = client("dynamodbstreams", endpoint)
    arn = dynamodb.describe_table(TableName=table)["Table"]["LatestStreamArn"]
    shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]
    key = {"PK": {"S": "WS#w#S#s"}, "SK": {"S": "MSG#000000000001"}}
    dynamodb.put_item(
        TableName=table,
        Item={
            **key,
            "blob": {"B": b"\x00\xff"},
            "tvec": {"L": [{"N": str(n / 8)} for n in range(256)]},
            "meta": {"M": {"tags": {"SS": ["a", "b"]}, "n": {"N": "1.5"}}},
        },
    )
    dynamodb.update_item(
        TableName=table, Key=key, UpdateExpression="SET content = :c", ExpressionAttributeValues={":c": {"S": "héllo"}}
    )
    dynamodb.delete_item(TableName=table, Key=key)
    iterator = streams.get_shard_iterator(StreamArn=arn, ShardId=shard, ShardIteratorType="TRIM_HORIZON")[
        "ShardIterator"
    ]
    page, read = _RecordsReader(endpoint).get_records(iterator, 1000)
    assert read == 3  # read as JSON, not handed back to boto3
    parsed = streams.get_records(ShardIterator=iterator, Limit=1000)
    assert [r["eventName"] for r in parsed["Records"]] == ["INSERT", "MODIFY", "REMOVE"]
    assert [lambda_record_json(r, arn) for r in page["Records"]] == [lambda_record(r, arn) for r in parsed["Records"]]
    assert _RecordsReader(endpoint).get_records("not-an-iterator", 1000) is None  # an error: boto3 says what


def test_a_filtered_page_holds_what_the_pollers_filter_passes_and_reads_past_the_rest(moto_server):
    """The pollers send their filter with GetRecords, and the local moto leaves out what it drops: the records that
    pass are those the poller's own match of the whole page passes, shaped alike, and the page says how many it
    read. A pattern naming a vector attribute (kept as JSON text in the stream) is matched against its value."""
    from local.moto_backend import client
    from local.poller import _RecordsReader, filter_header
    from local.stream_records import lambda_record_json

    endpoint, clients = moto_server
    dynamodb, table = clients["dynamodb"], template().table_name
    streams = client("dynamodbstreams", endpoint)
    arn = dynamodb.describe_table(TableName=table)["Table"]["LatestStreamArn"]
    shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]
    vector = {"L": [{"N": str(n / 8)} for n in range(256)]}
    for seq in range(1, 7):
        key = {"PK": {"S": "WS#w#S#s"}, "SK": {"S": f"MSG#{seq:012d}"}}
        kind = ("message", "search", "message")[seq % 3]
        dynamodb.put_item(
            TableName=table,
            Item={
                **key,
                "kind": {"S": kind},
                **({"tvec": vector} if seq % 3 else {}),
                **({"copy_of": {"S": "x"}} if seq == 4 else {}),
            },
        )
        dynamodb.update_item(
            TableName=table, Key=key, UpdateExpression="SET n = :n", ExpressionAttributeValues={":n": {"N": str(seq)}}
        )
    dynamodb.delete_item(TableName=table, Key={"PK": {"S": "WS#w#S#s"}, "SK": {"S": f"MSG#{1:012d}"}})
    iterator = streams.get_shard_iterator(StreamArn=arn, ShardId=shard, ShardIteratorType="TRIM_HORIZON")[
        "ShardIterator"
    ]
    reader = _RecordsReader(endpoint)
    everything, total = reader.get_records(iterator, 1000)
    assert total == len(everything["Records"]) == 13
    patterns_cases = [
        StreamSettings.from_properties(template().stream_function().stream).filters,  # the summarizer's
        [{"eventName": ["MODIFY"], "dynamodb": {"NewImage": {"n": {"N": ["5", "6"]}}}}],
        [{"dynamodb": {"NewImage": {"tvec": {"L": [{"exists": True}]}}}}, {"eventName": ["REMOVE"]}],
        [{"dynamodb": {"NewImage": {"tvec": [{"exists": False}]}}}],
    ]
    for patterns in patterns_cases:
        expected = [lambda_record_json(r, arn) for r in everything["Records"]]
        expected = [r for r in expected if any(matches(p, r) for p in patterns)]
        page, read = reader.get_records(iterator, 1000, filter_header(arn, patterns))
        assert read == 13 and reader.get_records(page["NextShardIterator"], 1000)[1] == 0  # past them all
        assert [lambda_record_json(r, arn) for r in page["Records"]] == expected
        assert 0 < len(expected) < 13


def test_a_page_its_filter_drops_whole_still_counts_as_progress(endpoint):
    """The poller reads on without waiting while the stream holds records, even when none of a page is for it."""
    put_session(endpoint)  # a session item: the summarizer's filter drops it
    recorder = Recorder()
    poller = make_poller(endpoint, recorder)
    assert poller.poll_once() is True
    assert poller.poll_once() is False and recorder.events == []
