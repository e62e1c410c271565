"""SearchVectors on moto (the local stack's and the tests' DynamoDB) answers as DynamoDB does, and
precis.store.vectors finds the nearest conclusions of a collection through it."""

from __future__ import annotations

import itertools
import math
from array import array

import pytest
from botocore.exceptions import ClientError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from precis.embed import cosine_distance
from precis.store import vectors
from precis.store.db import Db

DIMENSIONS = 4
_tables = itertools.count()


def _create(dynamodb, metric: str = "COSINE", projection: dict | None = None) -> str:
    name = f"vectors-{next(_tables)}"
    dynamodb.create_table(
        TableName=name, BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": a, "AttributeType": "S"} for a in ("PK", "SK", "vcoll", "level",
                                                                                   "vsession")],
        KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}, {"AttributeName": "SK", "KeyType": "RANGE"}],
        VectorIndexes=[{
            "IndexName": vectors.VECTOR_INDEX, "VectorAttribute": {"AttributeName": vectors.VECTOR_ATTRIBUTE},
            "Dimensions": DIMENSIONS, "DistanceFunction": metric,
            "Projection": projection or {"ProjectionType": "INCLUDE", "NonKeyAttributes": ["id"]},
            "SearchSchema": [{"AttributeName": "vcoll", "SearchSchemaElementType": "HASH"},
                             {"AttributeName": "level", "SearchSchemaElementType": "INLINE_FILTER"},
                             {"AttributeName": "vsession", "SearchSchemaElementType": "INLINE_FILTER"}]}])
    return name


def _put(dynamodb, table: str, id_: str, vector: list[float] | None, collection: str = "w#a#b",
         level: str = "explicit", session: str = "-", **extra) -> None:
    item = {"PK": {"S": f"C#{collection}"}, "SK": {"S": f"V#{id_}"}, "id": {"S": id_}, "vcoll": {"S": collection},
            "level": {"S": level}, "vsession": {"S": session}, **extra}
    if vector is not None:
        item["vec"] = vectors.vector_attribute(vector)
    dynamodb.put_item(TableName=table, Item=item)


def _f32(vector: list[float]) -> list[float]:
    return list(array("f", vector))


def _search(dynamodb, table: str, **request):
    arguments = {"TableName": table, "IndexName": vectors.VECTOR_INDEX, "TopK": 3,
                 "SearchVector": vectors.vector_attribute([1.0, 0.0, 0.0, 0.0])["L"],
                 "SearchConditionExpression": "vcoll = :c", "ExpressionAttributeValues": {":c": {"S": "w#a#b"}}}
    return dynamodb.search_vectors(**{**arguments, **request})


# ---------------------------------------------------------------- against brute force

components = st.floats(-1, 1, allow_nan=False, width=32)
vector_st = st.lists(components, min_size=DIMENSIONS, max_size=DIMENSIONS).filter(
    lambda v: math.sqrt(sum(x * x for x in v)) > 1e-3)
item_st = st.tuples(st.sampled_from(["w#a#b", "w#a#c"]), st.sampled_from(["explicit", "deductive"]),
                    st.sampled_from(["-", "s1", "s2"]), st.one_of(st.none(), vector_st))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(items=st.lists(item_st, max_size=25), query=vector_st, top_k=st.integers(1, 12),
       level=st.sampled_from([None, "explicit", "deductive"]), session=st.sampled_from([None, "-", "s1", "s2"]),
       max_distance=st.sampled_from([None, 0.5, 1.0, 2.0]))
def test_search_finds_what_brute_force_finds(aws, items, query, top_k, level, session, max_distance):
    dynamodb = aws["dynamodb"]
    table = _create(dynamodb)
    for n, (collection, item_level, item_session, vector) in enumerate(items):
        _put(dynamodb, table, f"c{n}", vector, collection, item_level, item_session)
    hits = vectors.search(Db(dynamodb, None, table, ""), "w#a#b", query, top_k, level=level, session_key=session,
                          max_distance=max_distance)

    # Brute force: every vector of the collection that passes the filters, at its f32 cosine distance, nearest first.
    eligible = {f"c{n}": cosine_distance(_f32(query), _f32(vector))
                for n, (collection, item_level, item_session, vector) in enumerate(items)
                if vector is not None and collection == "w#a#b" and level in (None, item_level)
                and session in (None, item_session)}
    expected = [d for d in sorted(eligible.values())[:top_k] if max_distance is None or d <= max_distance]
    assert [d for _, d in hits] == pytest.approx(expected, abs=1e-9)
    for found, distance in hits:  # ties may come in either order, but each hit is eligible, at its own distance
        assert eligible[found] == pytest.approx(distance, abs=1e-9)
    dynamodb.delete_table(TableName=table)


@pytest.mark.parametrize("metric, order", [("EUCLIDEAN", ["near", "mid", "far"]),
                                           ("DOT_PRODUCT", ["mid", "near", "far"]),
                                           ("COSINE", ["near", "mid", "far"])])
def test_each_metric_orders_as_dynamodb_documents(aws, metric, order):
    dynamodb = aws["dynamodb"]
    table = _create(dynamodb, metric)
    for id_, vector in (("near", [1.0, 0.0, 0.0, 0.0]), ("mid", [2.0, 2.0, 0.0, 0.0]), ("far", [0.0, 3.0, 3.0, 0.0])):
        _put(dynamodb, table, id_, vector)
    results = _search(dynamodb, table)["SearchResults"]
    assert [r["Item"]["id"]["S"] for r in results] == order
    expected = {"EUCLIDEAN": [0.0, math.sqrt(5), math.sqrt(19)], "DOT_PRODUCT": [2.0, 1.0, 0.0],
                "COSINE": [0.0, 1 - 1 / math.sqrt(2), 1.0]}[metric]
    assert [r["Score"] for r in results] == pytest.approx(expected)


def test_results_hold_the_projected_attributes(aws):
    dynamodb = aws["dynamodb"]
    included, everything = _create(dynamodb), _create(dynamodb, projection={"ProjectionType": "ALL"})
    for table in (included, everything):
        _put(dynamodb, table, "c1", [1.0, 0.0, 0.0, 0.0], content={"S": "alice lives in Lisbon"})
    item, = [r["Item"] for r in _search(dynamodb, included)["SearchResults"]]
    assert set(item) == {"PK", "SK", "id", "vcoll", "level", "vsession", "vec"}  # no content: not projected
    item, = [r["Item"] for r in _search(dynamodb, everything)["SearchResults"]]
    assert item["content"] == {"S": "alice lives in Lisbon"}
    item, = [r["Item"] for r in _search(dynamodb, everything, ProjectionExpression="#i, content",
                                        ExpressionAttributeNames={"#i": "id"})["SearchResults"]]
    assert item == {"id": {"S": "c1"}, "content": {"S": "alice lives in Lisbon"}}


def test_items_without_a_vector_or_collection_are_not_in_the_index(aws):
    dynamodb = aws["dynamodb"]
    table = _create(dynamodb)
    _put(dynamodb, table, "no-vector", None)
    dynamodb.put_item(TableName=table, Item={"PK": {"S": "x"}, "SK": {"S": "y"}, "id": {"S": "no-collection"},
                                             "vec": vectors.vector_attribute([1.0, 0.0, 0.0, 0.0])})
    _put(dynamodb, table, "yes", [0.0, 1.0, 0.0, 0.0])
    assert [r["Item"]["id"]["S"] for r in _search(dynamodb, table)["SearchResults"]] == ["yes"]


def test_describe_table_shows_the_vector_index(aws):
    dynamodb = aws["dynamodb"]
    table = _create(dynamodb)
    index, = dynamodb.describe_table(TableName=table)["Table"]["VectorIndexes"]
    assert (index["IndexName"], index["Dimensions"], index["DistanceFunction"], index["IndexStatus"]) == (
        "ByVector", DIMENSIONS, "COSINE", "ACTIVE")
    dynamodb.update_table(TableName=table, VectorIndexUpdates=[{"Delete": {"IndexName": "ByVector"}}])
    assert "VectorIndexes" not in dynamodb.describe_table(TableName=table)["Table"]
    with pytest.raises(ClientError, match="does not have the specified index"):
        _search(dynamodb, table)


# ---------------------------------------------------------------- DynamoDB's refusals


@pytest.mark.parametrize("request_, words", [
    ({"IndexName": "ByNothing"}, "does not have the specified index: ByNothing"),
    ({"SearchVector": [{"N": "1"}, {"N": "0"}]}, "SearchVector has 2 dimensions, the vector index expects 4"),
    ({"SearchVector": [{"S": "1"}] * 4}, "SearchVector must be a list of numbers"),
    ({"SearchConditionExpression": "#l = :c", "ExpressionAttributeNames": {"#l": "level"}},
     "HASH attribute vcoll of vector index ByVector must be given"),
    ({"SearchConditionExpression": "vcoll = :c OR vsession = :c"}, "only the equality operator"),
    ({"SearchConditionExpression": "vcoll <> :c"}, "only the equality operator"),
    ({"SearchConditionExpression": "begins_with(vcoll, :c)"}, "only the equality operator"),
    ({"SearchConditionExpression": "vcoll = :c AND level = :c"}, "reserved keyword: level"),
    ({"SearchConditionExpression": "vcoll = :c AND id = :c"}, "attribute id is not a HASH or INLINE_FILTER"),
    ({"SearchConditionExpression": "vcoll = :nope"}, "attribute value used in expression is not defined"),
    ({"SearchConditionExpression": "#v = :c"}, "attribute name used in the document path is not defined"),
    ({"ExpressionAttributeNames": {"#unused": "level"}}, "unused in expressions: keys: {#unused}"),
    ({"ExpressionAttributeValues": {":c": {"S": "w#a#b"}, ":x": {"S": "x"}}}, "unused in expressions: keys: {:x}"),
])
def test_search_refuses_what_dynamodb_refuses(aws, request_, words):
    dynamodb = aws["dynamodb"]
    table = _create(dynamodb)
    with pytest.raises(ClientError, match=words) as refused:
        _search(dynamodb, table, **request_)
    assert refused.value.response["Error"]["Code"] == "ValidationException"


def test_parenthesised_equalities_joined_by_and_are_accepted(aws):
    dynamodb = aws["dynamodb"]
    table = _create(dynamodb)
    _put(dynamodb, table, "mine", [1.0, 0.0, 0.0, 0.0], session="s1")
    _put(dynamodb, table, "other", [1.0, 0.0, 0.0, 0.0], session="s2")
    found = _search(dynamodb, table, SearchConditionExpression="(vcoll = :c) AND (vsession = :s AND #l = :l)",
                    ExpressionAttributeNames={"#l": "level"},
                    ExpressionAttributeValues={":c": {"S": "w#a#b"}, ":s": {"S": "s1"}, ":l": {"S": "explicit"}})
    assert [r["Item"]["id"]["S"] for r in found["SearchResults"]] == ["mine"]


@pytest.mark.parametrize("item, words", [
    ({"vec": {"L": [{"N": "1"}] * 3}}, "vector attribute vec has 3 dimensions"),
    ({"vec": {"L": [{"S": "1"}] * 4}}, "vector attribute vec must be a list of numbers"),
    ({"vec": {"L": [{"N": "1e39"}] * 4}}, "outside 32-bit float range"),
    ({"level": {"N": "1"}}, "Type mismatch for Index Key level Expected: S Actual: N"),
])
def test_writes_that_do_not_fit_the_index_are_refused(aws, item, words):
    dynamodb = aws["dynamodb"]
    table = _create(dynamodb)
    with pytest.raises(ClientError, match=words):
        dynamodb.put_item(TableName=table, Item={"PK": {"S": "p"}, "SK": {"S": "s"}, **item})
    with pytest.raises(ClientError, match=words):  # inside a transaction too, and nothing of it is written
        dynamodb.transact_write_items(TransactItems=[
            {"Put": {"TableName": table, "Item": {"PK": {"S": "ok"}, "SK": {"S": "s"}}}},
            {"Put": {"TableName": table, "Item": {"PK": {"S": "p"}, "SK": {"S": "s"}, **item}}}])
    assert dynamodb.scan(TableName=table)["Count"] == 0


def test_a_table_must_declare_its_search_schema_attributes(aws):
    with pytest.raises(ClientError, match="not defined in AttributeDefinitions. Keys: \\[vcoll\\]"):
        aws["dynamodb"].create_table(
            TableName="undeclared", BillingMode="PAY_PER_REQUEST",
            AttributeDefinitions=[{"AttributeName": "PK", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}],
            VectorIndexes=[{"IndexName": "ByVector", "VectorAttribute": {"AttributeName": "vec"}, "Dimensions": 4,
                            "DistanceFunction": "COSINE", "Projection": {"ProjectionType": "KEYS_ONLY"},
                            "SearchSchema": [{"AttributeName": "vcoll", "SearchSchemaElementType": "HASH"}]}])


def test_vector_attribute_is_a_list_of_f32_numbers():
    attribute = vectors.vector_attribute([0.1, -0.0, 1e-3, 1 / 3])
    assert attribute == {"L": [{"N": "0.100000001"}, {"N": "0"}, {"N": "0.00100000005"}, {"N": "0.333333343"}]}
    assert _f32([float(n["N"]) for n in attribute["L"]]) == _f32([0.1, 0.0, 1e-3, 1 / 3])  # exactly the f32s
    with pytest.raises(ValueError):
        vectors.vector_attribute([math.nan, 0.0])


# ---------------------------------------------------------------- the local stack's moto server


def test_search_through_a_moto_server(moto_server):
    _, clients = moto_server
    dynamodb = clients["dynamodb"]
    table = _create(dynamodb)
    _put(dynamodb, table, "lisbon", [1.0, 0.2, 0.0, 0.0])
    _put(dynamodb, table, "tea", [0.0, 1.0, 0.0, 0.0])
    _put(dynamodb, table, "deduced", [1.0, 0.2, 0.0, 0.0], level="deductive")
    hits = vectors.search(Db(dynamodb, None, table, ""), "w#a#b", [1.0, 0.0, 0.0, 0.0], 5, level="explicit",
                          session_key="-")
    assert [h[0] for h in hits] == ["lisbon", "tea"]
    assert hits[0][1] == pytest.approx(1 - 1 / math.sqrt(1.04), abs=1e-6)
    with pytest.raises(ClientError, match="SearchVector has 2 dimensions"):
        vectors.search(Db(dynamodb, None, table, ""), "w#a#b", [1.0, 0.0], 5)
