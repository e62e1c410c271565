"""The local stack's moto answers exactly as moto does, while reading only what a request touches (local/moto_storage).

The reference is moto's own walk over the whole table (`moto_reference`): after random writes (puts, updates that
add and drop index attributes, deletes, batches, committed and cancelled transactions), every Query of the
template's table and indexes — key conditions, Limit, both directions, every page by ExclusiveStartKey, filters,
projections — answers the same both ways, and a cancelled transaction leaves the table and its stream as they were.
"""

from __future__ import annotations

import json
from contextlib import contextmanager

import pytest
from botocore.exceptions import ClientError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from local.moto_storage import moto_reference
from local.template import template

TABLE = template().table_name
PARTITIONS = ("WS#a#S#s1", "WS#a#S#s2", "WS#b")
SKS = [f"MSG#{n:012d}" for n in range(1, 13)] + ["PEER#alice", "PEER#bob", "SESSION#s1", "SUMMARY#short"]

_key = st.tuples(st.sampled_from(PARTITIONS), st.sampled_from(SKS))
_optional = {
    "start_tokens": st.integers(0, 400).map(lambda n: {"N": str(n)}),
    "cws": st.sampled_from(["a", "b"]).map(lambda v: {"S": v}),
    "cid": st.sampled_from(["c1", "c2", "c3", "c4"]).map(lambda v: {"S": v}),
    "due_ws": st.sampled_from(["a", "b"]).map(lambda v: {"S": v}),
    "due_at": st.sampled_from(["2026-01-01", "2026-06-01", "~"]).map(lambda v: {"S": v}),
    "times_derived": st.integers(0, 5).map(lambda n: {"N": str(n)}),
    "list_key": st.just({"S": "workspaces"}),
    "content": st.text("ab ", max_size=20).map(lambda v: {"S": v or "-"}),
    # Binary values take moto's own parser and serializer, not the JSON fast path: the answers must still agree.
    "blob": st.binary(max_size=6).map(lambda v: {"B": v}),
    "blobs": st.sets(st.binary(min_size=1, max_size=3), min_size=1, max_size=3).map(lambda v: {"BS": sorted(v)}),
}


@st.composite
def _item(draw):
    pk, sk = draw(_key)
    item = {"PK": {"S": pk}, "SK": {"S": sk}}
    for name in draw(st.sets(st.sampled_from(sorted(_optional)))):
        item[name] = draw(_optional[name])
    return item


def _key_of(pk_sk):
    return {"PK": {"S": pk_sk[0]}, "SK": {"S": pk_sk[1]}}


def _item_key(item):
    return item["PK"]["S"], item["SK"]["S"]


_write = st.one_of(
    st.tuples(st.just("put"), _item()),
    st.tuples(st.just("delete"), _key),
    st.tuples(st.just("update"), _key, st.sampled_from(sorted(_optional)), st.booleans()),
    st.tuples(st.just("batch"), st.lists(_item(), min_size=1, max_size=5, unique_by=_item_key)),
    st.tuples(st.just("transact"), st.lists(_item(), min_size=1, max_size=4, unique_by=_item_key), st.booleans()),
)


def _apply(dynamodb, write, data) -> None:
    kind = write[0]
    if kind == "put":
        dynamodb.put_item(TableName=TABLE, Item=write[1])
    elif kind == "delete":
        dynamodb.delete_item(TableName=TABLE, Key=_key_of(write[1]))
    elif kind == "update":
        _, key, name, remove = write
        if remove:
            dynamodb.update_item(
                TableName=TABLE, Key=_key_of(key), UpdateExpression="REMOVE #a", ExpressionAttributeNames={"#a": name}
            )
        else:
            value = data.draw(_optional[name])
            dynamodb.update_item(
                TableName=TABLE,
                Key=_key_of(key),
                UpdateExpression="SET #a = :v",
                ExpressionAttributeNames={"#a": name},
                ExpressionAttributeValues={":v": value},
            )
    elif kind == "batch":
        dynamodb.batch_write_item(RequestItems={TABLE: [{"PutRequest": {"Item": i}} for i in write[1]]})
    else:
        _, items, cancel = write
        actions = [{"Put": {"TableName": TABLE, "Item": i}} for i in items]
        if cancel:  # the last action's condition cannot hold: nothing of the transaction may remain
            actions[-1]["Put"]["ConditionExpression"] = "attribute_exists(never_set)"
        before = _everything(dynamodb)
        try:
            dynamodb.transact_write_items(TransactItems=actions)
        except ClientError as exc:
            assert cancel and exc.response["Error"]["Code"] == "TransactionCanceledException"
            assert _everything(dynamodb) == before
        else:
            assert not cancel


def _everything(dynamodb) -> list:
    items = []
    for page in dynamodb.get_paginator("scan").paginate(TableName=TABLE):
        items += page["Items"]
    return sorted(items, key=lambda i: (i["PK"]["S"], i["SK"]["S"]))


_N = st.integers(0, 400).map(lambda n: {"N": str(n)})
_S = st.sampled_from(SKS + ["MSG#", "MSG#0000000000", "P", "T"]).map(lambda v: {"S": v})


@st.composite
def _query(draw):
    """A Query of the table or one of its indexes, as a dict of boto3 arguments."""
    index = draw(st.sampled_from([None, "ByStartTokens", "ByFrequency", "ByConclusion", "ByDue", "ByListKey"]))
    hash_attr, range_attr, hash_values, range_values = {
        None: ("PK", "SK", PARTITIONS, _S),
        "ByStartTokens": ("PK", "start_tokens", PARTITIONS, _N),
        "ByFrequency": ("PK", "times_derived", PARTITIONS, st.integers(0, 5).map(lambda n: {"N": str(n)})),
        "ByConclusion": ("cws", "cid", ("a", "b"), st.sampled_from(["c1", "c2", "c3", "c4"]).map(lambda v: {"S": v})),
        "ByDue": (
            "due_ws",
            "due_at",
            ("a", "b"),
            st.sampled_from(["2026-01-01", "2026-06-01", "~"]).map(lambda v: {"S": v}),
        ),
        "ByListKey": ("list_key", "PK", ("workspaces",), st.sampled_from(PARTITIONS).map(lambda v: {"S": v})),
    }[index]
    values = {":h": {"S": draw(st.sampled_from(hash_values))}}
    condition = "#h = :h"
    op = draw(st.sampled_from([None, "=", "<", "<=", ">", ">=", "between", "begins_with"]))
    if op == "between":
        low, high = sorted(
            [draw(range_values), draw(range_values)], key=lambda v: float(v["N"]) if "N" in v else v["S"]
        )
        values[":a"], values[":b"] = low, high
        condition += " AND #r BETWEEN :a AND :b"
    elif op == "begins_with":
        value = draw(range_values)
        if "S" in value:
            values[":a"] = {"S": value["S"][: draw(st.integers(0, 6))] or "M"}
            condition += " AND begins_with(#r, :a)"
    elif op:
        values[":a"] = draw(range_values)
        condition += f" AND #r {op} :a"
    names = {"#h": hash_attr}
    if ":a" in values:
        names["#r"] = range_attr
    query = {
        "TableName": TABLE,
        "KeyConditionExpression": condition,
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": values,
        "ScanIndexForward": draw(st.booleans()),
    }
    if index:
        query["IndexName"] = index
    if draw(st.booleans()):
        query["Limit"] = draw(st.integers(1, 6))
    if draw(st.booleans()):
        query["FilterExpression"] = "attribute_exists(content)"
    if draw(st.booleans()):
        query["ProjectionExpression"] = "PK, SK, content"
    if index is None and draw(st.booleans()):
        query["ConsistentRead"] = True
    return query


def _all_pages(dynamodb, query: dict) -> list:
    pages, start = [], None
    for _ in range(200):
        page = dynamodb.query(**query, **({"ExclusiveStartKey": start} if start else {}))
        pages.append((page["Items"], page.get("LastEvaluatedKey"), page["Count"], page["ScannedCount"]))
        start = page.get("LastEvaluatedKey")
        if not start:
            return pages
    raise AssertionError("paging did not end")


@pytest.fixture(scope="module")
def dynamodb():
    import boto3
    from moto import mock_aws

    from local import moto_patches
    from local.template import create_resources

    moto_patches.install()
    with mock_aws():
        clients = {name: boto3.client(name) for name in ("dynamodb", "s3", "sqs")}
        create_resources(template(), clients["dynamodb"], clients["s3"], clients["sqs"])
        yield clients["dynamodb"]


def _empty(dynamodb) -> None:
    for item in _everything(dynamodb):
        dynamodb.delete_item(TableName=TABLE, Key={"PK": item["PK"], "SK": item["SK"]})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    writes=st.lists(_write, min_size=1, max_size=25), queries=st.lists(_query(), min_size=1, max_size=8), data=st.data()
)
def test_every_query_answers_as_moto_walking_the_whole_table(dynamodb, writes, queries, data):
    _empty(dynamodb)
    for i, write in enumerate(writes):
        _apply(dynamodb, write, data)
        if i % 5 == 4:  # queries between writes too: what the first query cached must follow later writes
            query = data.draw(_query())
            with moto_reference():
                expected = _all_pages(dynamodb, query)
            assert _all_pages(dynamodb, query) == expected, query
    for query in queries:
        with moto_reference():
            expected = _all_pages(dynamodb, query)
        assert _all_pages(dynamodb, query) == expected, query


def test_a_cancelled_transaction_restores_updated_and_deleted_items_and_their_stream(dynamodb):
    _empty(dynamodb)
    base = {
        "PK": {"S": "WS#a#S#s1"},
        "SK": {"S": "MSG#000000000001"},
        "start_tokens": {"N": "5"},
        "content": {"S": "kept"},
    }
    doomed = {"PK": {"S": "WS#a#S#s1"}, "SK": {"S": "MSG#000000000002"}, "content": {"S": "kept too"}}
    dynamodb.put_item(TableName=TABLE, Item=base)
    dynamodb.put_item(TableName=TABLE, Item=doomed)
    before = _everything(dynamodb)
    with moto_reference():
        index_before = _all_pages(
            dynamodb,
            {
                "TableName": TABLE,
                "IndexName": "ByStartTokens",
                "KeyConditionExpression": "PK = :p",
                "ExpressionAttributeValues": {":p": base["PK"]},
            },
        )
    with pytest.raises(ClientError, match="TransactionCanceled"):
        dynamodb.transact_write_items(
            TransactItems=[
                {
                    "Update": {
                        "TableName": TABLE,
                        "Key": {"PK": base["PK"], "SK": base["SK"]},
                        "UpdateExpression": "SET content = :c REMOVE start_tokens",
                        "ExpressionAttributeValues": {":c": {"S": "changed"}},
                    }
                },
                {"Delete": {"TableName": TABLE, "Key": {"PK": doomed["PK"], "SK": doomed["SK"]}}},
                {"Put": {"TableName": TABLE, "Item": {"PK": {"S": "WS#new"}, "SK": {"S": "WS"}}}},
                {
                    "ConditionCheck": {
                        "TableName": TABLE,
                        "Key": {"PK": {"S": "WS#b"}, "SK": {"S": "WS"}},
                        "ConditionExpression": "attribute_exists(PK)",
                    }
                },
            ]
        )
    assert _everything(dynamodb) == before
    assert (
        _all_pages(
            dynamodb,
            {
                "TableName": TABLE,
                "IndexName": "ByStartTokens",
                "KeyConditionExpression": "PK = :p",
                "ExpressionAttributeValues": {":p": base["PK"]},
            },
        )
        == index_before
    )


_VALUE = st.recursive(
    st.one_of(
        st.integers(-5, 5).map(lambda n: {"N": str(n)}),
        st.text("ab", max_size=3).map(lambda v: {"S": v}),
        st.binary(max_size=3).map(lambda v: {"B": v}),
        st.booleans().map(lambda v: {"BOOL": v}),
        st.just({"NULL": True}),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(lambda v: {"L": v}),
        st.dictionaries(st.sampled_from(["x", "y", "B"]), inner, max_size=3).map(lambda v: {"M": v}),
    ),
    max_leaves=8,
)


# Long enough to be kept packed, and written into stream records as their JSON text (local/moto_storage.py).
# Numbers of an attribute no vector index reads are not checked by moto: strings JSON escapes are kept packed too.
_VECTOR = st.lists(
    st.sampled_from(["0", "-1.5", "0.25", "3e-05", "12", " 7", "é", 'x"y', "a\\b", "\x7f", "\n"]),
    min_size=16,
    max_size=20,
).map(lambda ns: {"L": [{"N": n} for n in ns]})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    writes=st.lists(_write, min_size=1, max_size=12),
    nested=st.lists(
        st.tuples(_key, st.dictionaries(st.sampled_from(["vector", "meta"]), _VALUE | _VECTOR, min_size=1)), max_size=4
    ),
    data=st.data(),
)
def test_stream_records_answer_as_moto_writes_them(dynamodb, writes, nested, data):
    """GetRecords' JSON fast path: the same records as moto's serializer gives, binary values (top level and nested),
    lists of numbers (vectors kept as JSON text among them: their SizeBytes too) and maps included."""
    streams = _streams(dynamodb)
    arn = dynamodb.describe_table(TableName=TABLE)["Table"]["LatestStreamArn"]
    shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][-1]["ShardId"]
    start = streams.get_shard_iterator(StreamArn=arn, ShardId=shard, ShardIteratorType="LATEST")["ShardIterator"]
    for write in writes:
        _apply(dynamodb, write, data)
    for key, attributes in nested:
        dynamodb.put_item(TableName=TABLE, Item={**_key_of(key), **attributes})
    fast = streams.get_records(ShardIterator=start, Limit=1000)
    with moto_reference():
        reference = streams.get_records(ShardIterator=start, Limit=1000)
    for page in (fast, reference):
        page.pop("ResponseMetadata")
        page.pop("NextShardIterator")  # a new iterator's name each time
    assert fast == reference
    assert len(fast["Records"]) >= len(nested)
    # Each record's size is moto's: the length of its JSON, the size itself at 1 (vectors written out in full).
    from moto.dynamodb.models.utilities import dynamo_json_dump

    stored = _stored_records()
    records = stored[len(stored) - len(fast["Records"]) :]
    assert [r["dynamodb"]["SizeBytes"] for r in records] == [
        len(dynamo_json_dump({**r["dynamodb"], "SizeBytes": 1})) for r in records
    ]


def _streams(dynamodb):
    import boto3

    return boto3.client("dynamodbstreams", region_name=dynamodb.meta.region_name)


_COUNTER_NAMES = ("x1", "x2f", "ndocs", "count", "PK", "content", "start_tokens")  # a reserved word, a key, strings


@st.composite
def _bump(draw):
    """An UpdateItem that may or may not be a plain counter bump: ADDs of integers (or not), a condition, a name."""
    names = draw(st.lists(st.sampled_from(_COUNTER_NAMES), min_size=1, max_size=4))
    values = {
        f":v{i}": draw(
            st.one_of(
                st.integers(-3, 10**20).map(lambda n: {"N": str(n)}), st.just({"N": "1.5"}), st.just({"S": "one"})
            )
        )
        for i in range(len(names))
    }
    request = {
        "UpdateExpression": "ADD " + ", ".join(f"{n} :v{i}" for i, n in enumerate(names)),
        "ExpressionAttributeValues": values,
    }
    if draw(st.booleans()):
        request["ConditionExpression"] = "attribute_not_exists(never_set)"
    returned = draw(st.sampled_from([None, "NONE", "ALL_NEW", "UPDATED_OLD"]))  # absent or NONE: as the term stats ask
    if returned is not None:
        request["ReturnValues"] = returned
    return draw(st.sampled_from(PARTITIONS)), request


def _outcome(dynamodb, bumps) -> list:
    """Each bump's answer (ALL_NEW, or the error code and message) and, at the end, every item and stream image."""
    streams = _streams(dynamodb)
    arn = dynamodb.describe_table(TableName=TABLE)["Table"]["LatestStreamArn"]
    shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][-1]["ShardId"]
    start = streams.get_shard_iterator(StreamArn=arn, ShardId=shard, ShardIteratorType="LATEST")["ShardIterator"]
    answers = []
    for pk, request in bumps:
        try:
            answer = dynamodb.update_item(TableName=TABLE, Key={"PK": {"S": pk}, "SK": {"S": "TERMS"}}, **request)
            answer.pop("ResponseMetadata")
            answers.append(answer)
        except ClientError as exc:
            answers.append((exc.response["Error"]["Code"], exc.response["Error"]["Message"]))
    records = streams.get_records(ShardIterator=start, Limit=1000)["Records"]
    images = [(r["eventName"], r["dynamodb"].get("OldImage"), r["dynamodb"].get("NewImage")) for r in records]
    return [answers, _everything(dynamodb), images]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    bumps=st.lists(_bump(), min_size=1, max_size=8),
    seed=st.sampled_from([None, {"x1": {"S": "text"}}, {"x1": {"N": "2.5"}}]),
)
def test_counter_bumps_answer_as_moto_applies_them(dynamodb, bumps, seed):
    """ADDs of integers to plain attributes skip moto's expression machinery (the term statistics' hundred-counter
    updates): answers, items and stream records are moto's, and everything else still goes moto's way."""
    outcomes = []
    for reference in (True, False):
        _empty(dynamodb)
        if seed:
            dynamodb.put_item(TableName=TABLE, Item={"PK": {"S": PARTITIONS[0]}, "SK": {"S": "TERMS"}, **seed})
        if reference:
            with moto_reference():
                outcomes.append(_outcome(dynamodb, bumps))
        else:
            outcomes.append(_outcome(dynamodb, bumps))
    assert outcomes[1] == outcomes[0]


def test_a_counter_bump_past_400_kb_is_refused_and_changes_nothing(dynamodb):
    _empty(dynamodb)
    key = {"PK": {"S": PARTITIONS[0]}, "SK": {"S": "TERMS"}}
    dynamodb.put_item(TableName=TABLE, Item={**key, "content": {"S": "a" * 404_500}})
    before = _everything(dynamodb)
    with pytest.raises(ClientError, match="Item size to update has exceeded the maximum allowed size"):
        dynamodb.update_item(
            TableName=TABLE,
            Key=key,
            UpdateExpression="ADD " + ", ".join(f"x{i} :one" for i in range(200)),
            ExpressionAttributeValues={":one": {"N": "1"}},
        )
    assert _everything(dynamodb) == before


def _vector(seed: int) -> dict:
    return {"L": [{"N": str((seed * 7 + i) % 13 / 4)} for i in range(256)]}


def _vector_life(dynamodb) -> list:
    """What a vector item goes through: put, read, projected, copied into a cancelled transaction, updated beside
    and into, compared, removed; every answer, then the table and the stream's images."""
    streams = _streams(dynamodb)
    arn = dynamodb.describe_table(TableName=TABLE)["Table"]["LatestStreamArn"]
    shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][-1]["ShardId"]
    start = streams.get_shard_iterator(StreamArn=arn, ShardId=shard, ShardIteratorType="LATEST")["ShardIterator"]
    key = {"PK": {"S": PARTITIONS[0]}, "SK": {"S": "MSG#000000000001"}}
    answers: list = []

    def call(name, **request):
        try:
            answer = getattr(dynamodb, name)(**request)
            answer.pop("ResponseMetadata", None)
            answers.append(answer)
        except ClientError as exc:
            answers.append((exc.response["Error"]["Code"], exc.response["Error"]["Message"]))

    call("put_item", TableName=TABLE, Item={**key, "vec": _vector(1), "content": {"S": "a"}})
    call(
        "batch_write_item",
        RequestItems={
            TABLE: [
                {
                    "PutRequest": {
                        "Item": {"PK": {"S": PARTITIONS[0]}, "SK": {"S": f"MSG#00000000000{n}"}, "vec": _vector(n)}
                    }
                }
                for n in (2, 3)
            ]
        },
    )
    call("get_item", TableName=TABLE, Key=key)
    call(
        "query",
        TableName=TABLE,
        KeyConditionExpression="PK = :p",
        ProjectionExpression="SK, vec[2], content",
        ExpressionAttributeValues={":p": key["PK"]},
    )
    call(
        "transact_write_items",
        TransactItems=[
            {
                "Update": {
                    "TableName": TABLE,
                    "Key": key,
                    "UpdateExpression": "SET content = :c",
                    "ExpressionAttributeValues": {":c": {"S": "b"}},
                }
            },
            {
                "ConditionCheck": {
                    "TableName": TABLE,
                    "Key": {"PK": {"S": "WS#b"}, "SK": {"S": "WS"}},
                    "ConditionExpression": "attribute_exists(PK)",
                }
            },
        ],
    )
    call(
        "update_item",
        TableName=TABLE,
        Key=key,
        UpdateExpression="SET content = :c",
        ReturnValues="ALL_OLD",
        ExpressionAttributeValues={":c": {"S": "c"}},
    )
    call(
        "update_item",
        TableName=TABLE,
        Key=key,
        UpdateExpression="SET content = :c",
        ConditionExpression="vec = :v",
        ExpressionAttributeValues={":c": {"S": "d"}, ":v": _vector(1)},
    )
    call(
        "update_item",
        TableName=TABLE,
        Key=key,
        UpdateExpression="SET content = :c",
        ConditionExpression="vec = :v",
        ExpressionAttributeValues={":c": {"S": "e"}, ":v": _vector(9)},
    )
    call(
        "update_item",
        TableName=TABLE,
        Key=key,
        UpdateExpression="SET vec[1] = :n",
        ReturnValues="UPDATED_NEW",
        ExpressionAttributeValues={":n": {"N": "42"}},
    )
    call(
        "update_item",
        TableName=TABLE,
        Key={**key, "SK": {"S": "MSG#000000000002"}},
        ReturnValues="ALL_NEW",
        UpdateExpression="SET big = :b",
        ExpressionAttributeValues={":b": {"S": "x" * 404_200}},
    )
    call("delete_item", TableName=TABLE, Key={**key, "SK": {"S": "MSG#000000000003"}}, ReturnValues="ALL_OLD")
    records = streams.get_records(ShardIterator=start, Limit=1000)["Records"]
    images = [(r["eventName"], r["dynamodb"].get("OldImage"), r["dynamodb"].get("NewImage")) for r in records]
    return [answers, _everything(dynamodb), images]


def _stored_records() -> list[dict]:
    """The table's stream records as moto holds them (`StreamRecord.record`)."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.dynamodb.models import dynamodb_backends

    return [r.record for r in dynamodb_backends[DEFAULT_ACCOUNT_ID]["us-east-1"].get_table(TABLE).stream_shard.items]


def test_vectors_packed_in_moto_answer_as_moto_lists_of_numbers(dynamodb):
    """A vector is stored as one packed object, not a DynamoType per number: every answer, item and stream image of
    its life is what moto's own lists give (sizes included), and updating into it unpacks it."""
    outcomes = []
    for reference in (True, False):
        _empty(dynamodb)
        if reference:
            with moto_reference():
                outcomes.append(_vector_life(dynamodb))
        else:
            outcomes.append(_vector_life(dynamodb))
    assert outcomes[1] == outcomes[0]
    # Its records' sizes are moto's: the length of the record's JSON with the size itself at 1, vectors written out.
    from moto.dynamodb.models.utilities import dynamo_json_dump

    records = _stored_records()[-len(outcomes[1][2]) :]
    assert [r["dynamodb"]["SizeBytes"] for r in records] == [
        len(dynamo_json_dump({**r["dynamodb"], "SizeBytes": 1})) for r in records
    ]
    assert any(len(r["dynamodb"].get("NewImage", {}).get("vec", {}).get("L", [])) == 256 for r in records)
    answers = outcomes[1][0]
    # vec = :v compares every number
    assert "ConsumedCapacity" in answers[6] and answers[7][0] == "ConditionalCheckFailedException"
    assert answers[8]["Attributes"]["vec"]["L"][1] == {"N": "42"}
    assert answers[9][0] == "ValidationException", answers[9]  # over 400 KB with the vector counted


_CONDITIONS = (  # the same few expressions again and again, with other names and values: a parse is reused
    ("attribute_not_exists(PK)", {}, {}),
    ("#n = :v", {"#n": "start_tokens"}, {":v": "N"}),
    ("#n = :v", {"#n": "content"}, {":v": "S"}),
    ("start_tokens < :v OR attribute_not_exists(start_tokens)", {}, {":v": "N"}),
    ("begins_with(content, :v)", {}, {":v": "S"}),
    ("attribute_exists(#n) AND start_tokens >= :v", {"#n": "content"}, {":v": "N"}),
    ("attribute_exists(PK)", {}, {":v": "N"}),  # a value it does not use: refused each time
)


@st.composite
def _conditional_write(draw):
    expression, names, kinds = draw(st.sampled_from(_CONDITIONS))
    values = {
        name: {"N": str(draw(st.integers(0, 400)))} if kind == "N" else {"S": draw(st.sampled_from(["", "a", "b"]))}
        for name, kind in kinds.items()
    }
    request = {
        "ConditionExpression": expression,
        **({"ExpressionAttributeNames": names} if names else {}),
        **({"ExpressionAttributeValues": values} if values else {}),
    }
    return draw(st.sampled_from(["put", "delete", "transact"])), draw(_item()), request


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(writes=st.lists(_conditional_write(), min_size=1, max_size=10))
def test_conditions_answer_as_moto_parses_each_of_them(dynamodb, writes):
    outcomes = []
    for reference in (True, False):
        _empty(dynamodb)
        answers = []
        with moto_reference() if reference else _nothing():
            for kind, item, request in writes:
                try:
                    if kind == "put":
                        dynamodb.put_item(TableName=TABLE, Item=item, **request)
                    elif kind == "delete":
                        dynamodb.delete_item(TableName=TABLE, Key={"PK": item["PK"], "SK": item["SK"]}, **request)
                    else:
                        dynamodb.transact_write_items(
                            TransactItems=[{"Put": {"TableName": TABLE, "Item": item, **request}}]
                        )
                    answers.append("ok")
                except ClientError as exc:
                    answers.append((exc.response["Error"]["Code"], exc.response["Error"]["Message"]))
        outcomes.append([answers, _everything(dynamodb)])
    assert outcomes[1] == outcomes[0]


@contextmanager
def _nothing():
    yield


def test_a_condition_parsed_before_is_evaluated_with_this_requests_names_and_values(dynamodb):
    _empty(dynamodb)
    key = {"PK": {"S": PARTITIONS[0]}, "SK": {"S": SKS[0]}}
    dynamodb.put_item(TableName=TABLE, Item={**key, "start_tokens": {"N": "5"}, "content": {"S": "4"}})

    def holds(name: str, value: dict) -> bool:
        try:
            dynamodb.put_item(
                TableName=TABLE,
                Item={**key, "start_tokens": {"N": "5"}, "content": {"S": "4"}},
                ConditionExpression="#n = :v",
                ExpressionAttributeNames={"#n": name},
                ExpressionAttributeValues={":v": value},
            )
            return True
        except ClientError as exc:
            assert exc.response["Error"]["Code"] == "ConditionalCheckFailedException"
            return False

    assert [
        holds("start_tokens", {"N": "4"}),
        holds("start_tokens", {"N": "5"}),
        holds("content", {"N": "5"}),
        holds("content", {"S": "4"}),
        holds("start_tokens", {"N": "4"}),
    ] == [False, True, False, True, False]


# ---------------------------------------------------------------- update expressions, parsed and checked once each

# (expression, names, value kinds): SETs of many clauses, functions, arithmetic, nested paths, REMOVE, ADD, DELETE,
# and ones moto refuses for the expression alone (two actions on one path, a key attribute, two SET clauses) or for the
# names it is given (the same expression, overlapping only under some names).
_UPDATES = (
    ("SET a = :v", {}, {":v": "S"}),
    ("SET a = :v, b = :w, c = :v, due_ws = :w, cws = :v, cid = :w", {}, {":v": "S", ":w": "N"}),
    ("SET #x = :v, #y = :w", {"#x": "a", "#y": "b"}, {":v": "S", ":w": "S"}),
    ("SET #x = :v, #y = :w", {"#x": "a", "#y": "a"}, {":v": "S", ":w": "S"}),
    ("SET #x = :v, #y = :w", {"#x": "a", "#y": "SK"}, {":v": "S", ":w": "S"}),
    ("SET n = if_not_exists(n, :zero) + :one, a = if_not_exists(a, :v)", {}, {":zero": "N", ":one": "N", ":v": "S"}),
    ("SET l = list_append(if_not_exists(l, :empty), :more)", {}, {":empty": "L", ":more": "L"}),
    ("SET m.k = :v", {}, {":v": "S"}),
    ("SET m = :map", {}, {":map": "M"}),
    ("REMOVE a, b", {}, {}),
    ("SET a = :v REMOVE b, c", {}, {":v": "N"}),
    ("ADD n :one, s :set", {}, {":one": "N", ":set": "SS"}),
    ("DELETE s :set", {}, {":set": "SS"}),
    ("SET a = :v, a = :w", {}, {":v": "S", ":w": "S"}),
    ("SET a = :v SET b = :w", {}, {":v": "S", ":w": "S"}),
    ("SET PK = :v", {}, {":v": "S"}),
    ("SET a = :v ADD n :one REMOVE c", {}, {":v": "S", ":one": "N"}),
)
_VALUES = {
    "S": st.sampled_from(["x", "y"]).map(lambda v: {"S": v}),
    "N": st.integers(-2, 3).map(lambda n: {"N": str(n)}),
    "L": st.lists(st.sampled_from([{"S": "p"}, {"N": "1"}]), max_size=2).map(lambda v: {"L": v}),
    "M": st.just({"M": {"k": {"S": "v"}}}),
    "SS": st.sets(st.sampled_from(["p", "q", "r"]), min_size=1).map(lambda v: {"SS": sorted(v)}),
}
_SEEDS = (
    None,
    {"n": {"S": "text"}},
    {"n": {"N": "4"}, "s": {"SS": ["p"]}, "m": {"M": {}}, "l": {"L": []}},
    {"a": {"N": "1"}, "b": {"S": "x"}, "c": {"S": "y"}},
)


@st.composite
def _update(draw):
    expression, names, kinds = draw(st.sampled_from(_UPDATES))
    request = {
        "UpdateExpression": expression,
        **({"ExpressionAttributeNames": names} if names else {}),
        **({"ExpressionAttributeValues": {n: draw(_VALUES[k]) for n, k in kinds.items()}} if kinds else {}),
    }
    if draw(st.booleans()):
        request["ConditionExpression"] = "attribute_not_exists(never_set)"
    return draw(st.sampled_from(["update", "transact"])), draw(st.sampled_from(SKS[:3])), request


def _updates_outcome(dynamodb, updates, seed) -> list:
    streams = _streams(dynamodb)
    arn = dynamodb.describe_table(TableName=TABLE)["Table"]["LatestStreamArn"]
    shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][-1]["ShardId"]
    start = streams.get_shard_iterator(StreamArn=arn, ShardId=shard, ShardIteratorType="LATEST")["ShardIterator"]
    if seed:
        dynamodb.put_item(TableName=TABLE, Item={"PK": {"S": PARTITIONS[0]}, "SK": {"S": SKS[0]}, **seed})
    answers = []
    for i, (kind, sk, request) in enumerate(updates):
        key = {"PK": {"S": PARTITIONS[0]}, "SK": {"S": sk}}
        returned = ("ALL_NEW", None, "NONE", "UPDATED_OLD", "ALL_OLD", "UPDATED_NEW")[i % 6]
        try:
            if kind == "update":
                answer = dynamodb.update_item(
                    TableName=TABLE, Key=key, **request, **({"ReturnValues": returned} if returned else {})
                )
                answer.pop("ResponseMetadata")
            else:
                answer = dynamodb.transact_write_items(
                    TransactItems=[{"Update": {"TableName": TABLE, "Key": key, **request}}]
                )
                answer.pop("ResponseMetadata")
            answers.append(answer)
        except ClientError as exc:
            answers.append((exc.response["Error"]["Code"], exc.response["Error"]["Message"]))
    records = streams.get_records(ShardIterator=start, Limit=1000)["Records"]
    images = [(r["eventName"], r["dynamodb"]["Keys"], r["dynamodb"].get("NewImage")) for r in records]
    return [answers, _everything(dynamodb), images]


@pytest.mark.parametrize("view", ["NEW_AND_OLD_IMAGES", "OLD_IMAGE", "NEW_IMAGE", "KEYS_ONLY"])
def test_an_updates_stream_record_is_motos_whatever_images_the_stream_carries(dynamodb, view):
    """An update's record takes the item before it from a copy when the stream carries old images, from its keys
    alone when not: the records (ordinary updates, counter bumps, a first write) are moto's either way."""
    streams = _streams(dynamodb)
    outcomes = []
    for reference in (True, False):
        table = f"images-{view}-{reference}"
        dynamodb.create_table(
            TableName=table,
            BillingMode="PAY_PER_REQUEST",
            KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "PK", "AttributeType": "S"}],
            StreamSpecification={"StreamEnabled": True, "StreamViewType": view},
        )
        arn = dynamodb.describe_table(TableName=table)["Table"]["LatestStreamArn"]
        shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]
        with moto_reference() if reference else _nothing():
            key = {"PK": {"S": "a"}}
            dynamodb.put_item(TableName=table, Item={**key, "job": {"M": {"c": {"L": [{"S": "x"}, {"N": "1"}]}}}})
            dynamodb.update_item(
                TableName=table,
                Key=key,
                UpdateExpression="SET job.c[0] = :y, t = :t",
                ExpressionAttributeValues={":y": {"S": "y"}, ":t": {"S": "t"}},
            )
            dynamodb.update_item(
                TableName=table, Key=key, UpdateExpression="ADD n :one", ExpressionAttributeValues={":one": {"N": "1"}}
            )
            dynamodb.update_item(
                TableName=table,
                Key={"PK": {"S": "b"}},
                UpdateExpression="SET t = :t",
                ExpressionAttributeValues={":t": {"S": "t"}},
            )
            dynamodb.update_item(
                TableName=table,
                Key={"PK": {"S": "c"}},
                UpdateExpression="ADD n :one",
                ExpressionAttributeValues={":one": {"N": "1"}},
            )
            iterator = streams.get_shard_iterator(StreamArn=arn, ShardId=shard, ShardIteratorType="TRIM_HORIZON")[
                "ShardIterator"
            ]
            records = streams.get_records(ShardIterator=iterator)["Records"]
        outcomes.append(
            [
                (
                    r["eventName"],
                    {k: v for k, v in r["dynamodb"].items() if k in ("Keys", "NewImage", "OldImage", "StreamViewType")},
                )
                for r in records
            ]
        )
        dynamodb.delete_table(TableName=table)
    assert len(outcomes[0]) == 7 and outcomes[1] == outcomes[0]  # an update of no item: its put, then the update


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(updates=st.lists(_update(), min_size=1, max_size=10), seed=st.sampled_from(_SEEDS))
def test_update_expressions_answer_as_moto_parses_and_checks_each_of_them(dynamodb, updates, seed):
    """An expression is parsed once and its checks that read only it, its names and the table's keys pass once: the
    answers (or errors), items and stream images are moto's, request after request, whatever the items hold."""
    outcomes = []
    for reference in (True, False):
        _empty(dynamodb)
        with moto_reference() if reference else _nothing():
            outcomes.append(_updates_outcome(dynamodb, updates, seed))
    assert outcomes[1] == outcomes[0]


def test_an_expression_that_passed_under_some_names_is_checked_again_under_others(dynamodb):
    """The same SET overlaps, or names a key attribute, only under some names: each request is refused as its own
    names make it, after the expression passed under others (and the other way round)."""
    _empty(dynamodb)
    key = {"PK": {"S": PARTITIONS[0]}, "SK": {"S": SKS[0]}}

    def code(names: dict) -> str:
        try:
            dynamodb.update_item(
                TableName=TABLE,
                Key=key,
                UpdateExpression="SET #x = :v, #y = :w",
                ExpressionAttributeNames=names,
                ExpressionAttributeValues={":v": {"S": "1"}, ":w": {"S": "2"}},
            )
            return "ok"
        except ClientError as exc:
            return exc.response["Error"]["Code"]

    overlapping, on_a_key, fine = {"#x": "a", "#y": "a"}, {"#x": "a", "#y": "SK"}, {"#x": "a", "#y": "b"}
    assert [code(n) for n in (fine, overlapping, on_a_key, fine, overlapping, fine)] == [
        "ok",
        "ValidationException",
        "ValidationException",
        "ok",
        "ValidationException",
        "ok",
    ]
    assert dynamodb.get_item(TableName=TABLE, Key=key)["Item"] == {**key, "a": {"S": "1"}, "b": {"S": "2"}}


_scalar = st.one_of(
    st.integers(-(10**6), 10**6).map(lambda n: {"N": str(n)}),
    st.text(max_size=8).map(lambda v: {"S": v}),
    st.binary(max_size=6).map(lambda v: {"B": v}),
    st.booleans().map(lambda v: {"BOOL": v}),
    st.just({"NULL": True}),
    st.sets(st.text(min_size=1, max_size=4), min_size=1, max_size=3).map(lambda v: {"SS": sorted(v)}),
    st.sets(st.integers(-99, 99), min_size=1, max_size=3).map(lambda v: {"NS": [str(n) for n in sorted(v)]}),
    st.sets(st.binary(min_size=1, max_size=3), min_size=1, max_size=3).map(lambda v: {"BS": sorted(v)}),
)
_attribute_value = st.recursive(
    _scalar,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(lambda v: {"L": v}),
        st.dictionaries(st.text(max_size=5), inner, max_size=4).map(lambda v: {"M": v}),
    ),
    max_leaves=25,
)


@given(_attribute_value)
@settings(max_examples=300, deadline=None)
def test_a_values_size_is_motos_to_the_byte(value):
    """DynamoType.size is moto's number (which builds each map value again to size it, at every level)."""
    from moto.dynamodb.models.dynamo_type import DynamoType

    from local import moto_patches
    from local.moto_storage import _MOTO

    moto_patches.install()
    typed = DynamoType(value)
    assert typed.size() == _MOTO["type_size"](typed)


def test_answers_reporting_capacity_are_motos_to_the_byte(dynamodb):
    """The JSON fast path writes consumed capacity as moto's serializer does (Doubles: BatchGetItem's 4 keys are 4.0),
    so what a benchmark counts in bytes is the same with the fast path and without it."""
    _empty(dynamodb)
    items = [{"PK": {"S": "WS#a#S#s1"}, "SK": {"S": f"MSG#{n:012d}"}, "content": {"S": "x" * n}} for n in range(1, 5)]
    for item in items:
        dynamodb.put_item(TableName=TABLE, Item=item)
    bodies: list[bytes] = []

    def keep(http_response, **_):
        bodies.append(http_response.content)

    requests = [
        ("batch_get_item", {"RequestItems": {TABLE: {"Keys": [_key_of(_item_key(i)) for i in items]}}}),
        ("get_item", {"TableName": TABLE, "Key": _key_of(_item_key(items[0]))}),
        (
            "query",
            {
                "TableName": TABLE,
                "KeyConditionExpression": "PK = :p",
                "ExpressionAttributeValues": {":p": {"S": "WS#a#S#s1"}},
            },
        ),
        ("put_item", {"TableName": TABLE, "Item": items[0]}),
    ]
    dynamodb.meta.events.register("after-call.dynamodb", keep)
    try:
        for total in ("TOTAL", "INDEXES"):
            for operation, request in requests:
                with moto_reference():
                    getattr(dynamodb, operation)(**request, ReturnConsumedCapacity=total)
                getattr(dynamodb, operation)(**request, ReturnConsumedCapacity=total)
    finally:
        dynamodb.meta.events.unregister("after-call.dynamodb", keep)
    assert len(bodies) == 16 and all(b"ConsumedCapacity" in b for b in bodies)
    # moto's serializer orders keys by the API's shapes, the fast path as moto's result holds them: the same JSON, and
    # the same length (a 4 written for 4.0 is two bytes short)
    assert [json.loads(b) for b in bodies[0::2]] == [json.loads(b) for b in bodies[1::2]]
    assert [len(b) for b in bodies[0::2]] == [len(b) for b in bodies[1::2]]
