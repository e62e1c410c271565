"""The DynamoDB client's AttributeValue serialization (store.db.attribute_values_as_they_are): the very request body
botocore's own serializer makes, for any AttributeValues in any operation's slots, and what it stores reads back."""

from __future__ import annotations

import json

from botocore.config import Config
from hypothesis import given
from hypothesis import strategies as st

from precis.store import db

_SCALARS = st.one_of(
    st.builds(lambda n: {"N": n}, st.decimals(allow_nan=False, allow_infinity=False, places=3).map(str)),
    st.builds(lambda s: {"S": s}, st.text(max_size=8)),
    st.builds(lambda b: {"B": b}, st.binary(max_size=8) | st.text(max_size=4)),
    st.builds(lambda b: {"BS": b}, st.lists(st.binary(min_size=1, max_size=4), min_size=1, max_size=3)),
    st.builds(lambda s: {"SS": s}, st.lists(st.text(min_size=1, max_size=4), min_size=1, max_size=3)),
    st.builds(lambda n: {"NS": n}, st.lists(st.integers().map(str), min_size=1, max_size=3)),
    st.just({"NULL": True}),
    st.builds(lambda b: {"BOOL": b}, st.booleans()),
)
ATTRIBUTE_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.builds(lambda values: {"L": values}, st.lists(inner, max_size=4)),
        st.builds(lambda values: {"M": values}, st.dictionaries(st.text(max_size=4), inner, max_size=4)),
    ),
    max_leaves=12,
)
ITEMS = st.dictionaries(st.text(min_size=1, max_size=6), ATTRIBUTE_VALUES, min_size=1, max_size=4)


def _clients():
    config = Config(parameter_validation=False)
    made = [
        db._session().create_client(
            "dynamodb",
            region_name="us-east-1",
            endpoint_url="http://127.0.0.1:9",
            aws_access_key_id="a",
            aws_secret_access_key="b",
            config=config,
        )
        for _ in range(2)
    ]
    return made[0], db.attribute_values_as_they_are(made[1])


BOTOCORE, OURS = _clients()


def _bodies(operation: str, params: dict) -> tuple[dict, dict]:
    model = BOTOCORE.meta.service_model.operation_model(operation)
    theirs = BOTOCORE._serializer.serialize_to_request(params, model)
    ours = OURS._serializer.serialize_to_request(params, model)
    assert ours["headers"] == theirs["headers"] and ours["method"] == theirs["method"]
    return json.loads(ours["body"]), json.loads(theirs["body"])


def test_the_client_uses_it():
    assert type(OURS._serializer).__name__ == "AttributeValueSerializer"
    assert type(BOTOCORE._serializer).__name__ == "JSONSerializer"


@given(
    item=ITEMS,
    key=ATTRIBUTE_VALUES,
    value=ATTRIBUTE_VALUES,
    vector=st.lists(_SCALARS, max_size=6),
    numbers=st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=8),
)
def test_every_operation_slot_serializes_as_botocore_does(item, key, value, vector, numbers):
    from precis.store.vectors import vector_attribute

    # Vectors as the store builds them (a list it marks as numbers only, written without a look at each element).
    item = {**item, "vec": vector_attribute(numbers)}
    requests = {
        "PutItem": {
            "TableName": "table",
            "Item": item,
            "ExpressionAttributeValues": {":v": value},
            "ConditionExpression": "a <> :v",
        },
        "BatchWriteItem": {
            "RequestItems": {"table": [{"PutRequest": {"Item": item}}, {"DeleteRequest": {"Key": {"PK": key}}}]}
        },
        "TransactWriteItems": {
            "TransactItems": [
                {"Put": {"TableName": "table", "Item": item}},
                {
                    "Update": {
                        "TableName": "table",
                        "Key": {"PK": key},
                        "UpdateExpression": "SET a = :v",
                        "ExpressionAttributeValues": {":v": value},
                    }
                },
            ]
        },
        "Query": {
            "TableName": "table",
            "KeyConditionExpression": "PK = :k",
            "ExclusiveStartKey": {"PK": key},
            "ExpressionAttributeValues": {":k": key},
        },
        "SearchVectors": {
            "TableName": "table",
            "IndexName": "index",
            "SearchVector": vector,
            "TopK": 3,
            "ExpressionAttributeValues": {":v": value},
        },
    }
    for operation, params in requests.items():
        ours, theirs = _bodies(operation, params)
        assert ours == theirs, operation


def test_a_vector_item_round_trips_through_dynamodb(aws):
    from precis.store.vectors import vector_attribute

    table = db.get_db()
    item = {
        "PK": {"S": "p"},
        "SK": {"S": "s"},
        "vec": vector_attribute([0.25, -1.5, 3.0] * 85 + [1.0]),
        "blob": {"B": b"\x00\xff"},
        "nested": {"M": {"l": {"L": [{"B": b"x"}, {"NULL": True}, {"BS": [b"a", b"b"]}]}}},
    }
    table.client.put_item(TableName=table.table, Item=item)
    stored = table.client.get_item(TableName=table.table, Key={"PK": {"S": "p"}, "SK": {"S": "s"}})["Item"]
    assert stored == item
