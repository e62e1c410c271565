"""SearchVectors on moto (the local stack's and the tests' DynamoDB) answers as DynamoDB does, and
precis.store.vectors finds the nearest conclusions of a collection through it."""

from __future__ import annotations

import itertools
import math
import random
from array import array

import pytest
from botocore.exceptions import ClientError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from moto.core import DEFAULT_ACCOUNT_ID
from moto.dynamodb.models import dynamodb_backends
from moto.dynamodb.models.table import Table

from local import moto_patches, moto_vectors
from precis.store import vectors
from precis.store.db import Db
from precis.store.vectors import cosine_distance

DIMENSIONS = 4
_tables = itertools.count()


def _create(dynamodb, metric: str = "COSINE", projection: dict | None = None, dimensions: int = DIMENSIONS) -> str:
    name = f"vectors-{next(_tables)}"
    dynamodb.create_table(
        TableName=name,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[
            {"AttributeName": a, "AttributeType": "S"} for a in ("PK", "SK", "vcoll", "level", "vsession")
        ],
        KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}, {"AttributeName": "SK", "KeyType": "RANGE"}],
        VectorIndexes=[
            {
                "IndexName": vectors.VECTOR_INDEX,
                "VectorAttribute": {"AttributeName": vectors.VECTOR_ATTRIBUTE},
                "Dimensions": dimensions,
                "DistanceFunction": metric,
                "Projection": projection or {"ProjectionType": "INCLUDE", "NonKeyAttributes": ["id"]},
                "SearchSchema": [
                    {"AttributeName": "vcoll", "SearchSchemaElementType": "HASH"},
                    {"AttributeName": "level", "SearchSchemaElementType": "INLINE_FILTER"},
                    {"AttributeName": "vsession", "SearchSchemaElementType": "INLINE_FILTER"},
                ],
            }
        ],
    )
    return name


def _put(
    dynamodb,
    table: str,
    id_: str,
    vector: list[float] | None,
    collection: str = "w#a#b",
    level: str = "explicit",
    session: str = "-",
    **extra,
) -> None:
    item = {
        "PK": {"S": f"C#{collection}"},
        "SK": {"S": f"V#{id_}"},
        "id": {"S": id_},
        "vcoll": {"S": collection},
        "level": {"S": level},
        "vsession": {"S": session},
        **extra,
    }
    if vector is not None:
        item["vec"] = vectors.vector_attribute(vector)
    dynamodb.put_item(TableName=table, Item=item)


def _f32(vector: list[float]) -> list[float]:
    return list(array("f", vector))


def _search(dynamodb, table: str, **request):
    """SearchVectors once every write has reached the index."""
    moto_vectors.settle()
    arguments = {
        "TableName": table,
        "IndexName": vectors.VECTOR_INDEX,
        "TopK": 3,
        "SearchVector": vectors.vector_attribute([1.0, 0.0, 0.0, 0.0])["L"],
        "SearchConditionExpression": "vcoll = :c",
        "ExpressionAttributeValues": {":c": {"S": "w#a#b"}},
    }
    return dynamodb.search_vectors(**{**arguments, **request})


# ---------------------------------------------------------------- against brute force

components = st.floats(-1, 1, allow_nan=False, width=32)
vector_st = st.lists(components, min_size=DIMENSIONS, max_size=DIMENSIONS).filter(
    lambda v: math.sqrt(sum(x * x for x in v)) > 1e-3
)
item_st = st.tuples(
    st.sampled_from(["w#a#b", "w#a#c"]),
    st.sampled_from(["explicit", "deductive"]),
    st.sampled_from(["-", "s1", "s2"]),
    st.one_of(st.none(), vector_st),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    items=st.lists(item_st, max_size=25),
    query=vector_st,
    top_k=st.integers(1, 12),
    level=st.sampled_from([None, "explicit", "deductive"]),
    session=st.sampled_from([None, "-", "s1", "s2"]),
    max_distance=st.sampled_from([None, 0.5, 1.0, 2.0]),
)
def test_search_finds_what_brute_force_finds(aws, items, query, top_k, level, session, max_distance):
    dynamodb = aws["dynamodb"]
    table = _create(dynamodb)
    for n, (collection, item_level, item_session, vector) in enumerate(items):
        _put(dynamodb, table, f"c{n}", vector, collection, item_level, item_session)
    moto_vectors.settle()
    hits = vectors.search(
        Db(dynamodb, None, table, ""),
        "w#a#b",
        query,
        top_k,
        level=level,
        session_key=session,
        max_distance=max_distance,
    )

    # Brute force: every vector of the collection that passes the filters, at its f32 cosine distance, nearest first.
    eligible = {
        f"c{n}": cosine_distance(_f32(query), _f32(vector))
        for n, (collection, item_level, item_session, vector) in enumerate(items)
        if vector is not None
        and collection == "w#a#b"
        and level in (None, item_level)
        and session in (None, item_session)
    }
    expected = [d for d in sorted(eligible.values())[:top_k] if max_distance is None or d <= max_distance]
    assert [d for _, d in hits] == pytest.approx(expected, abs=1e-9)
    for found, distance in hits:  # ties may come in either order, but each hit is eligible, at its own distance
        assert eligible[found] == pytest.approx(distance, abs=1e-9)
    dynamodb.delete_table(TableName=table)


@pytest.mark.parametrize(
    "metric, order",
    [
        ("EUCLIDEAN", ["near", "mid", "far"]),
        ("DOT_PRODUCT", ["mid", "near", "far"]),
        ("COSINE", ["near", "mid", "far"]),
    ],
)
def test_each_metric_orders_as_dynamodb_documents(aws, metric, order):
    dynamodb = aws["dynamodb"]
    table = _create(dynamodb, metric)
    for id_, vector in (("near", [1.0, 0.0, 0.0, 0.0]), ("mid", [2.0, 2.0, 0.0, 0.0]), ("far", [0.0, 3.0, 3.0, 0.0])):
        _put(dynamodb, table, id_, vector)
    results = _search(dynamodb, table)["SearchResults"]
    assert [r["Item"]["id"]["S"] for r in results] == order
    expected = {
        "EUCLIDEAN": [0.0, math.sqrt(5), math.sqrt(19)],
        "DOT_PRODUCT": [2.0, 1.0, 0.0],
        "COSINE": [0.0, 1 - 1 / math.sqrt(2), 1.0],
    }[metric]
    assert [r["Score"] for r in results] == pytest.approx(expected)


def test_results_hold_the_projected_attributes(aws):
    dynamodb = aws["dynamodb"]
    included, everything = _create(dynamodb), _create(dynamodb, projection={"ProjectionType": "ALL"})
    for table in (included, everything):
        _put(dynamodb, table, "c1", [1.0, 0.0, 0.0, 0.0], content={"S": "alice lives in Lisbon"})
    (item,) = [r["Item"] for r in _search(dynamodb, included)["SearchResults"]]
    assert set(item) == {"PK", "SK", "id", "vcoll", "level", "vsession", "vec"}  # no content: not projected
    (item,) = [r["Item"] for r in _search(dynamodb, everything)["SearchResults"]]
    assert item["content"] == {"S": "alice lives in Lisbon"}
    (item,) = [
        r["Item"]
        for r in _search(
            dynamodb, everything, ProjectionExpression="#i, content", ExpressionAttributeNames={"#i": "id"}
        )["SearchResults"]
    ]
    assert item == {"id": {"S": "c1"}, "content": {"S": "alice lives in Lisbon"}}


def test_items_without_a_vector_or_collection_are_not_in_the_index(aws):
    dynamodb = aws["dynamodb"]
    table = _create(dynamodb)
    _put(dynamodb, table, "no-vector", None)
    dynamodb.put_item(
        TableName=table,
        Item={
            "PK": {"S": "x"},
            "SK": {"S": "y"},
            "id": {"S": "no-collection"},
            "vec": vectors.vector_attribute([1.0, 0.0, 0.0, 0.0]),
        },
    )
    _put(dynamodb, table, "yes", [0.0, 1.0, 0.0, 0.0])
    assert [r["Item"]["id"]["S"] for r in _search(dynamodb, table)["SearchResults"]] == ["yes"]


def test_describe_table_shows_the_vector_index(aws):
    dynamodb = aws["dynamodb"]
    table = _create(dynamodb)
    (index,) = dynamodb.describe_table(TableName=table)["Table"]["VectorIndexes"]
    assert (index["IndexName"], index["Dimensions"], index["DistanceFunction"], index["IndexStatus"]) == (
        "ByVector",
        DIMENSIONS,
        "COSINE",
        "ACTIVE",
    )
    dynamodb.update_table(TableName=table, VectorIndexUpdates=[{"Delete": {"IndexName": "ByVector"}}])
    assert "VectorIndexes" not in dynamodb.describe_table(TableName=table)["Table"]
    with pytest.raises(ClientError, match="does not have the specified index"):
        _search(dynamodb, table)


# ---------------------------------------------------------------- the partition index against the brute force

METRICS = ("COSINE", "EUCLIDEAN", "DOT_PRODUCT")
# Duplicates, zero vectors and equal scores are common (a few vectors, few distinct components), and any floats.
pool_vector_st = st.sampled_from(
    [
        [0.0] * 4,
        [1.0, 0.0, 0.0, 0.0],
        [0.0, 1.0, 0.0, 0.0],
        [2.0, 0.0, 0.0, 0.0],
        [1.0, 1.0, 0.0, 0.0],
        [-1.0, 0.0, 0.0, -0.0],
        [0.1, 0.2, 0.3, 0.4],
    ]
)
tie_vector_st = st.lists(st.sampled_from([0.0, -0.0, 1.0, -1.0, 0.5, 2.0]), min_size=DIMENSIONS, max_size=DIMENSIONS)
any_vector_st = st.one_of(
    pool_vector_st, tie_vector_st, st.lists(st.floats(-3, 3, allow_nan=False), min_size=DIMENSIONS, max_size=DIMENSIONS)
)
key_st = st.tuples(st.sampled_from(["a", "b", "c", "d"]), st.sampled_from(["1", "2", "3", "4", "5", "6"]))


def _numbers_attribute(vector: list[float]) -> dict:
    return {"L": [{"N": repr(x)} for x in vector]}  # float64 text: the index rounds it to f32


def _s(strategy):
    return strategy.map(lambda value: {"S": value})


def _attributes(collection: str, level: str, session: str, vector: list[float], missing: set[str]) -> dict:
    attributes = {
        "vcoll": {"S": collection},
        "level": {"S": level},
        "vsession": {"S": session},
        "vec": _numbers_attribute(vector),
    }
    return {k: v for k, v in attributes.items() if k not in missing}


attrs_st = st.builds(
    _attributes,
    st.sampled_from(["w#a#b", "w#a#b", "w#a#c"]),
    st.sampled_from(["explicit", "deductive"]),
    st.sampled_from(["-", "s1"]),
    any_vector_st,
    st.one_of(st.just(set()), st.sets(st.sampled_from(["vcoll", "level", "vsession", "vec"]))),
)
search_st = st.tuples(
    st.just("search"),
    any_vector_st,
    st.integers(1, 8),
    st.sampled_from([{"S": "w#a#b"}] * 4 + [{"S": "w#a#c"}, {"S": "w#zz"}, {"N": "1"}]),
    st.sampled_from([None] * 6 + [{"S": "w#a#b"}, {"S": "w#a#c"}]),
    st.sampled_from([None, None, "explicit", "deductive"]),
    st.sampled_from([None, None, "-", "s1", "s9"]),
)
op_st = st.one_of(
    st.tuples(st.just("put"), key_st, attrs_st),
    # UpdateItem is not checked against the index: a vector of the wrong length or type, or none, can be set.
    st.tuples(
        st.just("update"),
        key_st,
        st.sampled_from(["vec", "vcoll", "level"]),
        st.one_of(
            st.none(),
            any_vector_st.map(_numbers_attribute),
            st.just({"L": [{"N": "1"}] * 3}),
            st.just({"L": [{"S": "1"}] * DIMENSIONS}),
            _s(st.sampled_from(["w#a#b", "explicit"])),
        ),
    ),
    st.tuples(st.just("delete"), key_st),
    st.tuples(st.just("batch"), st.dictionaries(key_st, st.one_of(st.none(), attrs_st), min_size=1, max_size=4)),
    st.tuples(st.just("cancelled"), st.dictionaries(key_st, st.one_of(st.none(), attrs_st), min_size=1, max_size=4)),
    st.tuples(st.just("reindex")),
    search_st,
)


def _key(key: tuple[str, str]) -> dict:
    return {"PK": {"S": key[0]}, "SK": {"S": key[1]}}


def _write(dynamodb, table: str, op: tuple) -> None:
    kind = op[0]
    if kind == "put":
        dynamodb.put_item(TableName=table, Item={**_key(op[1]), "id": {"S": "".join(op[1])}, **op[2]})
    elif kind == "update":
        _, key, name, value = op
        if value is None:
            dynamodb.update_item(
                TableName=table, Key=_key(key), UpdateExpression="REMOVE #a", ExpressionAttributeNames={"#a": name}
            )
        else:
            dynamodb.update_item(
                TableName=table,
                Key=_key(key),
                UpdateExpression="SET #a = :v",
                ExpressionAttributeNames={"#a": name},
                ExpressionAttributeValues={":v": value},
            )
    elif kind == "delete":
        dynamodb.delete_item(TableName=table, Key=_key(op[1]))
    elif kind == "batch":
        dynamodb.batch_write_item(
            RequestItems={
                table: [
                    {"PutRequest": {"Item": {**_key(key), **attrs}}}
                    if attrs is not None
                    else {"DeleteRequest": {"Key": _key(key)}}
                    for key, attrs in op[1].items()
                ]
            }
        )
    elif kind == "cancelled":  # puts and deletes, then a condition that fails: none of it stays
        actions = [
            {"Put": {"TableName": table, "Item": {**_key(key), **attrs}}}
            if attrs is not None
            else {"Delete": {"TableName": table, "Key": _key(key)}}
            for key, attrs in op[1].items()
        ]
        actions.append(
            {
                "ConditionCheck": {
                    "TableName": table,
                    "Key": _key(("z", "z")),
                    "ConditionExpression": "attribute_exists(PK)",
                }
            }
        )
        with pytest.raises(ClientError, match="TransactionCanceledException"):
            dynamodb.transact_write_items(TransactItems=actions)


def _reindex(dynamodb, table: str) -> None:
    """Replace the vector index by one of the next metric, under the same name."""
    (index,) = dynamodb.describe_table(TableName=table)["Table"]["VectorIndexes"]
    metric = METRICS[(METRICS.index(index["DistanceFunction"]) + 1) % len(METRICS)]
    dynamodb.update_table(TableName=table, VectorIndexUpdates=[{"Delete": {"IndexName": vectors.VECTOR_INDEX}}])
    dynamodb.update_table(
        TableName=table,
        VectorIndexUpdates=[
            {
                "Create": {
                    **{
                        k: index[k]
                        for k in ("IndexName", "VectorAttribute", "Dimensions", "Projection", "SearchSchema")
                    },
                    "DistanceFunction": metric,
                }
            }
        ],
    )


def _same_answer(dynamodb, table: str, op: tuple) -> None:
    """SearchVectors through boto3 answers what the brute force answers over the same table, to the bit."""
    _, query, top_k, collection, again, level, session = op
    conditions, values, names = ["vcoll = :c"], {":c": collection}, {}
    if again is not None:  # the HASH attribute given twice: both must hold
        conditions.append("vcoll = :d")
        values[":d"] = again
    if level is not None:
        conditions.append("#l = :l")
        names["#l"], values[":l"] = "level", {"S": level}
    if session is not None:
        conditions.append("vsession = :s")
        values[":s"] = {"S": session}
    expression = " AND ".join(conditions)
    search_vector = _numbers_attribute(query)["L"]
    moto_vectors.settle()  # the brute force reads the table as it is now
    found = dynamodb.search_vectors(
        TableName=table,
        IndexName=vectors.VECTOR_INDEX,
        TopK=top_k,
        SearchVector=search_vector,
        SearchConditionExpression=expression,
        ExpressionAttributeValues=values,
        **({"ExpressionAttributeNames": names} if names else {}),
    )["SearchResults"]
    backend = dynamodb_backends[DEFAULT_ACCOUNT_ID]["us-east-1"]
    equalities = moto_patches.parse_search_condition(expression, names, values, {"vcoll", "level", "vsession"})[0]
    expected = moto_patches.search_vectors_reference(
        backend, table, vectors.VECTOR_INDEX, search_vector, top_k, equalities, []
    )
    assert [(r["Item"], float(r["Score"]).hex()) for r in found] == [(item, s.hex()) for item, s in expected]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    early=st.booleans(),
    seed=st.lists(st.tuples(st.just("put"), key_st, attrs_st), min_size=10, max_size=30),
    ops=st.lists(op_st, max_size=25),
    finals=st.lists(search_st, min_size=1, max_size=4),
)
def test_the_partition_index_answers_what_the_brute_force_answers(aws, early, seed, ops, finals):
    """Whatever was written, updated, deleted, batched, rolled back or re-indexed, SearchVectors answers from its
    per-partition matrices exactly what the brute force over the table answers, for each metric."""
    dynamodb = aws["dynamodb"]
    tables = [_create(dynamodb, metric, projection={"ProjectionType": "ALL"}) for metric in METRICS]
    for table in tables:
        if early:  # built on an empty table: every write after this reaches it through the listener
            _same_answer(dynamodb, table, finals[0])
        for op in seed + ops + finals:
            if op[0] == "search":
                _same_answer(dynamodb, table, op)
            elif op[0] == "reindex":
                _reindex(dynamodb, table)
            else:
                _write(dynamodb, table, op)
        dynamodb.delete_table(TableName=table)


@pytest.mark.parametrize("metric", METRICS)
def test_near_ties_in_many_dimensions_come_as_the_brute_force_orders_them(aws, metric):
    """In many dimensions the matrix product's scores differ from Python's in their last bits; the rows it cannot
    tell apart are rescored as the brute force scores them, so vectors at the same distance but for rounding
    (permutations of one vector against an all-ones query, scaled copies) come in the brute force's order, with its
    scores."""
    dynamodb = aws["dynamodb"]
    table = _create(dynamodb, metric, dimensions=64)
    rng = random.Random(5)
    mixed = [rng.uniform(-1, 1) * 10 ** rng.randint(-8, 8) for _ in range(64)]  # sums that round, order mattering
    bases = [[rng.uniform(-1, 1) for _ in range(64)] for _ in range(2)]
    for n in range(90):
        if n % 2:  # in session s9: equally near a constant query, but for rounding
            _put(dynamodb, table, f"c{n:02d}", rng.sample(mixed, len(mixed)), session="s9")
        else:
            _put(
                dynamodb,
                table,
                f"c{n:02d}",
                [x * rng.choice([1.0, 3.0, 0.5, 1e-3, 7.0]) for x in bases[n % 4 // 2]],
                session=rng.choice(["-", "s1"]),
            )
    queries = [[1.0] * 64, [-3.0] * 64, bases[0], [3 * x for x in bases[1]], [rng.uniform(-1, 1) for _ in range(64)]]
    for query in queries:
        for top_k, session in ((1, None), (7, None), (100, None), (1, "s9"), (7, "s9"), (20, "s9"), (3, "s1")):
            _same_answer(dynamodb, table, ("search", query, top_k, {"S": "w#a#b"}, None, None, session))


def test_search_reads_only_its_partition(aws, monkeypatch):
    """A search scores in Python only rows of its partition (counted, not timed), and never walks the table."""
    dynamodb = aws["dynamodb"]
    table = _create(dynamodb)
    for n in range(50):
        _put(dynamodb, table, f"other{n}", [1.0, 0.0, 0.0, n / 50], collection="w#a#c")
    for n in range(3):
        _put(dynamodb, table, f"mine{n}", [0.0, 1.0, 0.0, n / 3])
    _search(dynamodb, table)  # builds the index; the next writes reach it through the listener
    _put(dynamodb, table, "mine3", [0.0, 1.0, 0.0, 1.0])
    _put(dynamodb, table, "other50", [1.0, 0.0, 0.0, 1.0], collection="w#a#c")
    scored = []
    score = moto_vectors.score
    monkeypatch.setattr(
        moto_vectors, "score", lambda metric, query, vector: scored.append(vector) or score(metric, query, vector)
    )
    monkeypatch.setattr(Table, "all_items", lambda self: pytest.fail("the search walked the table"))
    found = _search(dynamodb, table, TopK=10)["SearchResults"]
    assert sorted(r["Item"]["id"]["S"] for r in found) == ["mine0", "mine1", "mine2", "mine3"]
    assert 1 <= len(scored) <= 4 and all(vector[1] == 1.0 for vector in scored), scored


# ---------------------------------------------------------------- DynamoDB's refusals


@pytest.mark.parametrize(
    "request_, words",
    [
        ({"IndexName": "ByNothing"}, "does not have the specified index: ByNothing"),
        ({"SearchVector": [{"N": "1"}, {"N": "0"}]}, "SearchVector has 2 dimensions, the vector index expects 4"),
        ({"SearchVector": [{"S": "1"}] * 4}, "SearchVector must be a list of numbers"),
        (
            {"SearchConditionExpression": "#l = :c", "ExpressionAttributeNames": {"#l": "level"}},
            "HASH attribute vcoll of vector index ByVector must be given",
        ),
        ({"SearchConditionExpression": "vcoll = :c OR vsession = :c"}, "only the equality operator"),
        ({"SearchConditionExpression": "vcoll <> :c"}, "only the equality operator"),
        ({"SearchConditionExpression": "begins_with(vcoll, :c)"}, "only the equality operator"),
        ({"SearchConditionExpression": "vcoll = :c AND level = :c"}, "reserved keyword: level"),
        ({"SearchConditionExpression": "vcoll = :c AND id = :c"}, "attribute id is not a HASH or INLINE_FILTER"),
        ({"SearchConditionExpression": "vcoll = :nope"}, "attribute value used in expression is not defined"),
        ({"SearchConditionExpression": "#v = :c"}, "attribute name used in the document path is not defined"),
        ({"ExpressionAttributeNames": {"#unused": "level"}}, "unused in expressions: keys: {#unused}"),
        ({"ExpressionAttributeValues": {":c": {"S": "w#a#b"}, ":x": {"S": "x"}}}, "unused in expressions: keys: {:x}"),
    ],
)
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
    found = _search(
        dynamodb,
        table,
        SearchConditionExpression="(vcoll = :c) AND (vsession = :s AND #l = :l)",
        ExpressionAttributeNames={"#l": "level"},
        ExpressionAttributeValues={":c": {"S": "w#a#b"}, ":s": {"S": "s1"}, ":l": {"S": "explicit"}},
    )
    assert [r["Item"]["id"]["S"] for r in found["SearchResults"]] == ["mine"]


@pytest.mark.parametrize(
    "item, words",
    [
        ({"vec": {"L": [{"N": "1"}] * 3}}, "vector attribute vec has 3 dimensions"),
        ({"vec": {"L": [{"S": "1"}] * 4}}, "vector attribute vec must be a list of numbers"),
        ({"vec": {"L": [{"N": "1e39"}] * 4}}, "outside 32-bit float range"),
        ({"level": {"N": "1"}}, "Type mismatch for Index Key level Expected: S Actual: N"),
    ],
)
def test_writes_that_do_not_fit_the_index_are_refused(aws, item, words):
    dynamodb = aws["dynamodb"]
    table = _create(dynamodb)
    with pytest.raises(ClientError, match=words):
        dynamodb.put_item(TableName=table, Item={"PK": {"S": "p"}, "SK": {"S": "s"}, **item})
    with pytest.raises(ClientError, match=words):  # inside a transaction too, and nothing of it is written
        dynamodb.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": table, "Item": {"PK": {"S": "ok"}, "SK": {"S": "s"}}}},
                {"Put": {"TableName": table, "Item": {"PK": {"S": "p"}, "SK": {"S": "s"}, **item}}},
            ]
        )
    assert dynamodb.scan(TableName=table)["Count"] == 0


def test_a_table_must_declare_its_search_schema_attributes(aws):
    with pytest.raises(ClientError, match="not defined in AttributeDefinitions. Keys: \\[vcoll\\]"):
        aws["dynamodb"].create_table(
            TableName="undeclared",
            BillingMode="PAY_PER_REQUEST",
            AttributeDefinitions=[{"AttributeName": "PK", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}],
            VectorIndexes=[
                {
                    "IndexName": "ByVector",
                    "VectorAttribute": {"AttributeName": "vec"},
                    "Dimensions": 4,
                    "DistanceFunction": "COSINE",
                    "Projection": {"ProjectionType": "KEYS_ONLY"},
                    "SearchSchema": [{"AttributeName": "vcoll", "SearchSchemaElementType": "HASH"}],
                }
            ],
        )


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
    moto_vectors.settle()  # the server's moto is this process's: its writes reach the index now, not half a second on
    hits = vectors.search(
        Db(dynamodb, None, table, ""), "w#a#b", [1.0, 0.0, 0.0, 0.0], 5, level="explicit", session_key="-"
    )
    assert [h[0] for h in hits] == ["lisbon", "tea"]
    assert hits[0][1] == pytest.approx(1 - 1 / math.sqrt(1.04), abs=1e-6)
    with pytest.raises(ClientError, match="SearchVector has 2 dimensions"):
        vectors.search(Db(dynamodb, None, table, ""), "w#a#b", [1.0, 0.0], 5)
