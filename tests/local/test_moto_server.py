"""The local moto server's direct path for DynamoDB and DynamoDB Streams calls (local/moto_server.py, `DirectCalls`)
answers what moto's own app answers: the same request, sent to both (they share moto's backend), gets the same
status, body and headers an SDK reads."""

from __future__ import annotations

import json
import threading
import urllib.request

import pytest
from werkzeug.serving import make_server

from local.template import template

TABLE = template().table_name
_READ_HEADERS = ("content-type", "x-amz-crc32")  # what botocore reads of an answer's headers


@pytest.fixture
def servers(moto_server):
    """(the stack's moto endpoint, moto's own app on another port), one backend."""
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

    plain = make_server("127.0.0.1", 0, DomainDispatcherApplication(create_backend_app), threaded=True)
    thread = threading.Thread(target=plain.serve_forever, daemon=True)
    thread.start()
    yield moto_server[0], f"http://127.0.0.1:{plain.server_address[1]}", moto_server[1]["dynamodb"]
    plain.shutdown()


def _send(endpoint: str, target: str, body: dict | bytes) -> tuple[int, dict, object]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(
        endpoint + "/",
        data=data,
        method="POST",
        headers={
            "X-Amz-Target": target,
            "Content-Type": "application/x-amz-json-1.0",
            "Authorization": "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/dynamodb/aws4_request, "
            "SignedHeaders=host, Signature=0",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            status, headers, raw = answer.status, answer.headers, answer.read()
    except urllib.error.HTTPError as error:
        status, headers, raw = error.code, error.headers, error.read()
    try:
        decoded: object = json.loads(raw)
    except ValueError:
        decoded = raw
    return status, {k: headers.get(k) for k in _READ_HEADERS}, decoded


def _stream_arn(dynamodb) -> str:
    return dynamodb.describe_table(TableName=TABLE)["Table"]["LatestStreamArn"]


def test_dynamodb_and_streams_calls_answer_as_motos_own_app(servers):
    direct, plain, dynamodb = servers
    key = {"PK": {"S": "WS#direct"}, "SK": {"S": "PEER#alice"}}
    dynamodb.put_item(TableName=TABLE, Item={**key, "name": {"S": "Alice"}, "n": {"N": "3"}})
    arn = _stream_arn(dynamodb)
    shard = None
    calls = [
        ("DynamoDB_20120810.GetItem", {"TableName": TABLE, "Key": key, "ConsistentRead": True}),
        ("DynamoDB_20120810.GetItem", {"TableName": TABLE, "Key": {"PK": {"S": "WS#direct"}, "SK": {"S": "none"}}}),
        ("DynamoDB_20120810.GetItem", {"TableName": "no-such-table", "Key": key}),
        ("DynamoDB_20120810.GetItem", {"TableName": TABLE}),
        (
            "DynamoDB_20120810.Query",
            {
                "TableName": TABLE,
                "KeyConditionExpression": "PK = :p",
                "ExpressionAttributeValues": {":p": {"S": "WS#direct"}},
            },
        ),
        ("DynamoDB_20120810.Query", {"TableName": TABLE, "KeyConditionExpression": "PK = "}),
        (
            "DynamoDB_20120810.PutItem",
            {
                "TableName": TABLE,
                "Item": {**key, "name": {"S": "Eve"}},
                "ConditionExpression": "attribute_not_exists(PK)",
            },
        ),
        (
            "DynamoDB_20120810.UpdateItem",
            {
                "TableName": TABLE,
                "Key": key,
                "UpdateExpression": "SET n = :n",
                "ConditionExpression": "n = :other",
                "ReturnValues": "ALL_NEW",
                "ExpressionAttributeValues": {":n": {"N": "4"}, ":other": {"N": "9"}},
            },
        ),
        ("DynamoDB_20120810.DescribeTable", {"TableName": TABLE}),
        ("DynamoDB_20120810.NoSuchAction", {}),
        ("DynamoDB_20120810.GetItem", b"{not json"),
        ("DynamoDBStreams_20120810.DescribeStream", {"StreamArn": arn}),
        ("DynamoDBStreams_20120810.DescribeStream", {"StreamArn": arn + "-missing"}),
    ]
    for target, body in calls:
        answers = [_send(endpoint, target, body) for endpoint in (direct, plain)]
        if target.endswith("DescribeTable"):  # the table's counters move between the two calls' moments: not here
            for _status, _headers, decoded in answers:
                decoded["Table"].pop("ItemCount", None), decoded["Table"].pop("TableSizeBytes", None)
        assert answers[0] == answers[1], target
        if target.endswith("DescribeStream") and answers[0][0] == 200:
            shard = answers[0][2]["StreamDescription"]["Shards"][0]["ShardId"]
    iterator = _send(
        direct,
        "DynamoDBStreams_20120810.GetShardIterator",
        {"StreamArn": arn, "ShardId": shard, "ShardIteratorType": "TRIM_HORIZON"},
    )[2]
    records = [_send(endpoint, "DynamoDBStreams_20120810.GetRecords", iterator) for endpoint in (direct, plain)]
    # each answer's next iterator is a token of its own (and so is the checksum over it)
    assert [(status, headers["content-type"], body["Records"]) for status, headers, body in records] == [
        (200, "application/x-amz-json-1.0", records[1][2]["Records"])
    ] * 2 and records[0][2]["Records"]


def test_other_services_still_reach_motos_app(moto_server):
    clients = moto_server[1]
    assert clients["s3"].list_buckets()["Buckets"] and clients["sqs"].list_queues().get("QueueUrls")


def test_a_connection_carries_request_after_request_and_a_chunked_one_ends_it(moto_server):
    """A request with a Content-Length is read whole and its connection serves the next one (each AWS call does not
    pay a new connection); a chunked request, which the server cannot tell it read whole, still closes it."""
    import http.client
    import urllib.parse

    address = urllib.parse.urlsplit(moto_server[0])
    connection = http.client.HTTPConnection(address.hostname, address.port, timeout=30)
    headers = {
        "X-Amz-Target": "DynamoDB_20120810.ListTables",
        "Content-Type": "application/x-amz-json-1.0",
        "Authorization": "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/dynamodb/aws4_request, "
        "SignedHeaders=host, Signature=0",
    }
    sockets = []
    # Plain AWS calls, and calls the server reads werkzeug's way (a query string, a header name with an underscore,
    # an Expect), in turns on one connection.
    for path, extra in [
        ("/", {}),
        ("/?a=1", {}),
        ("/", {"X_Odd": "1"}),
        ("/", {}),
        ("/", {"Expect": "100-continue"}),
        ("/", {}),
    ]:
        connection.request("POST", path, body=b"{}", headers={**headers, **extra})
        answer = connection.getresponse()
        assert answer.status == 200 and TABLE in json.loads(answer.read())["TableNames"]
        assert answer.getheader("Content-Length") and answer.getheader("Date") and answer.getheader("x-amz-crc32")
        sockets.append(connection.sock)
    assert sockets[0] is not None and sockets == [sockets[0]] * 6  # one connection throughout
    connection.request("POST", "/", body=iter([b"{", b"}"]), headers=headers, encode_chunked=True)
    answer = connection.getresponse()
    assert answer.status == 200 and TABLE in json.loads(answer.read())["TableNames"]
    assert answer.getheader("Connection", "").lower() == "close"
    connection.close()
