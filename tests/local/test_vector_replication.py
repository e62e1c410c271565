"""The vector index as DynamoDB runs it, on moto: writes reach it late, TopK is 1-100, a new index on a table with
items backfills, an approximate search misses some neighbours, and a BatchWriteItem with one refused request writes
nothing. In-process the index's clock stands still until a test moves it (`moto_vectors.advance`, `settle`)."""

from __future__ import annotations

import copy

import pytest
from botocore.exceptions import ClientError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from moto.core import DEFAULT_ACCOUNT_ID
from moto.dynamodb.models import dynamodb_backends

from local import moto_storage, moto_vectors
from local.chaos import Chaos
from precis.store import vectors
from tests.local.test_search_vectors import DIMENSIONS, _create, _key, _numbers_attribute, _put

LAG = moto_vectors.DEFAULT_LAG_S


def _found(dynamodb, table: str, top_k: int = 10, vector: list[float] | None = None) -> list[str]:
    """The ids SearchVectors answers now, without settling the index first."""
    answer = dynamodb.search_vectors(
        TableName=table,
        IndexName=vectors.VECTOR_INDEX,
        TopK=top_k,
        SearchVector=_numbers_attribute(vector or [1.0, 0.0, 0.0, 0.0])["L"],
        SearchConditionExpression="vcoll = :c",
        ExpressionAttributeValues={":c": {"S": "w#a#b"}},
    )
    return [r["Item"]["id"]["S"] for r in answer["SearchResults"]]


def _backend():
    return dynamodb_backends[DEFAULT_ACCOUNT_ID]["us-east-1"]


# ---------------------------------------------------------------- TopK


@pytest.mark.parametrize("top_k", [101, 1000])
def test_top_k_above_100_is_refused_as_dynamodb_refuses_it(aws, top_k):
    dynamodb = aws["dynamodb"]
    table = _create(dynamodb)
    with pytest.raises(ClientError, match=f"Provided TopK value '{top_k}' is out of valid range") as refused:
        _found(dynamodb, table, top_k)
    assert refused.value.response["Error"]["Code"] == "ValidationException"
    assert _found(dynamodb, table, 100) == []


# ---------------------------------------------------------------- asynchronous replication


def test_a_write_reaches_the_index_its_lag_after_it_was_made(aws):
    dynamodb = aws["dynamodb"]
    table = _create(dynamodb)
    _found(dynamodb, table)  # the index is built (empty): what follows reaches it through replication only
    _put(dynamodb, table, "new", [1.0, 0.0, 0.0, 0.0])
    assert _found(dynamodb, table) == []
    moto_vectors.advance(LAG * 0.99)
    assert _found(dynamodb, table) == []
    moto_vectors.advance(LAG * 0.02)
    assert _found(dynamodb, table) == ["new"]


def test_a_deleted_item_is_found_as_it_was_until_the_delete_reaches_the_index(aws):
    dynamodb = aws["dynamodb"]
    table = _create(dynamodb)
    _put(dynamodb, table, "gone", [1.0, 0.0, 0.0, 0.0], content={"S": "was here"})
    moto_vectors.settle()
    assert _found(dynamodb, table) == ["gone"]
    dynamodb.delete_item(TableName=table, Key={"PK": {"S": "C#w#a#b"}, "SK": {"S": "V#gone"}})
    assert _found(dynamodb, table) == ["gone"]
    moto_vectors.advance(LAG)
    assert _found(dynamodb, table) == []


def test_an_item_rewritten_before_its_write_is_filed_is_filed_once_the_last_write_is_due(aws):
    dynamodb = aws["dynamodb"]
    table = _create(dynamodb)
    _found(dynamodb, table)
    _put(dynamodb, table, "moving", [1.0, 0.0, 0.0, 0.0])
    moto_vectors.advance(LAG / 2)
    _put(dynamodb, table, "moving", [0.0, 1.0, 0.0, 0.0])  # overtakes the first write
    moto_vectors.advance(LAG / 2)
    assert _found(dynamodb, table) == []
    moto_vectors.advance(LAG / 2)
    answer = dynamodb.search_vectors(
        TableName=table,
        IndexName=vectors.VECTOR_INDEX,
        TopK=1,
        SearchVector=_numbers_attribute([0, 1, 0, 0])["L"],
        SearchConditionExpression="vcoll = :c",
        ExpressionAttributeValues={":c": {"S": "w#a#b"}},
    )["SearchResults"]
    assert [(r["Item"]["id"]["S"], float(r["Score"])) for r in answer] == [("moving", 0.0)]


def test_an_index_first_searched_holds_only_the_writes_due(aws):
    """Built on its first search, the index reads the table's items whose writes are due, not the newer ones."""
    dynamodb = aws["dynamodb"]
    table = _create(dynamodb)
    _put(dynamodb, table, "old", [1.0, 0.0, 0.0, 0.0])
    moto_vectors.advance(LAG)
    _put(dynamodb, table, "new", [1.0, 0.0, 0.0, 0.0])
    assert _found(dynamodb, table) == ["old"]
    moto_vectors.advance(LAG)
    assert sorted(_found(dynamodb, table)) == ["new", "old"]


_touched: list[tuple] = []


def _record(table, hash_key, range_key) -> None:
    _touched.append((table.name, hash_key, range_key))


attrs_st = st.builds(
    lambda c, v: {"vcoll": {"S": c}, "level": {"S": "explicit"}, "vsession": {"S": "-"}, "vec": _numbers_attribute(v)},
    st.sampled_from(["w#a#b", "w#a#b", "w#a#c"]),
    st.lists(st.sampled_from([0.0, 1.0, -1.0, 0.5]), min_size=DIMENSIONS, max_size=DIMENSIONS),
)
key_st = st.tuples(st.sampled_from(["a", "b"]), st.sampled_from(["1", "2", "3", "4"]))
op_st = st.one_of(
    st.tuples(st.just("put"), key_st, attrs_st),
    st.tuples(st.just("delete"), key_st),
    st.tuples(st.just("unvector"), key_st),
    st.tuples(st.just("batch"), st.dictionaries(key_st, st.one_of(st.none(), attrs_st), min_size=1, max_size=3)),
    st.tuples(st.just("advance"), st.sampled_from([0.1, 0.3, 0.5, 1.0])),
    st.tuples(
        st.just("search"),
        st.lists(st.sampled_from([0.0, 1.0, -1.0]), min_size=DIMENSIONS, max_size=DIMENSIONS).filter(any),
        st.integers(1, 6),
    ),
)


class _Replicated:
    """What the model says the index holds: the table's items as they were when their last write came due."""

    def __init__(self, items):
        self.items = items

    def all_items(self):
        return sorted(self.items, key=lambda item: (item.hash_key, item.range_key))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.lists(st.tuples(st.just("put"), key_st, attrs_st), max_size=6), ops=st.lists(op_st, max_size=30))
def test_the_lagging_index_answers_the_brute_force_over_what_has_replicated(aws, seed, ops):
    """Whatever is written, deleted, batched and whenever the clock moves, SearchVectors answers what the brute force
    answers over the items as they were when their latest write came due (a model kept here, beside the table)."""
    dynamodb = aws["dynamodb"]
    table = _create(dynamodb, projection={"ProjectionType": "ALL"})
    moto_table = _backend().get_table(table)
    lag, clock = moto_vectors.replication.lag_s, moto_vectors.replication.clock
    # The model reads the index's own clock (which earlier examples moved on), so its sums are the index's floats.
    now, pending, replicated = clock(), {}, {}
    moto_storage.listen(_record)
    _touched.clear()
    _found(dynamodb, table)  # built empty: every write goes through replication
    for op in seed + ops:
        kind = op[0]
        if kind == "put":
            dynamodb.put_item(TableName=table, Item={**_key(op[1]), "id": {"S": "".join(op[1])}, **op[2]})
        elif kind == "delete":
            dynamodb.delete_item(TableName=table, Key=_key(op[1]))
        elif kind == "unvector":
            dynamodb.update_item(TableName=table, Key=_key(op[1]), UpdateExpression="REMOVE vec")
        elif kind == "batch":
            dynamodb.batch_write_item(
                RequestItems={
                    table: [
                        {"PutRequest": {"Item": {**_key(key), "id": {"S": "".join(key)}, **attrs}}}
                        if attrs is not None
                        else {"DeleteRequest": {"Key": _key(key)}}
                        for key, attrs in op[1].items()
                    ]
                }
            )
        elif kind == "advance":
            moto_vectors.advance(op[1])
            now = clock()
            for key in [k for k, due in pending.items() if due <= now]:
                del pending[key]
                partition = moto_table.items.get(key[0])
                item = partition.get(key[1]) if partition is not None else None
                if item is None:
                    replicated.pop(key, None)
                else:
                    replicated[key] = copy.deepcopy(item)
        else:
            _, query, top_k = op
            expected = moto_vectors.nearest_reference(
                _Replicated(list(replicated.values())),
                moto_vectors.vector_indexes(moto_table)[0],
                [float(x) for x in query],
                top_k,
                {"vcoll": [moto_storage.DynamoType({"S": "w#a#b"})]},
            )
            assert _found(dynamodb, table, top_k, query) == [item.attrs["id"].value for item, _ in expected]
        for name, hash_key, range_key in _touched:
            if name == table:
                pending.pop((hash_key, range_key), None)
                pending[(hash_key, range_key)] = now + lag
        _touched.clear()
    dynamodb.delete_table(TableName=table)


# ---------------------------------------------------------------- backfilling


def test_an_index_added_to_a_table_with_items_backfills_before_it_answers(aws):
    dynamodb = aws["dynamodb"]
    table = _create(dynamodb)
    _put(dynamodb, table, "there", [1.0, 0.0, 0.0, 0.0])
    (index,) = dynamodb.describe_table(TableName=table)["Table"]["VectorIndexes"]
    dynamodb.update_table(TableName=table, VectorIndexUpdates=[{"Delete": {"IndexName": vectors.VECTOR_INDEX}}])
    dynamodb.update_table(
        TableName=table,
        VectorIndexUpdates=[
            {
                "Create": {
                    k: index[k]
                    for k in (
                        "IndexName",
                        "VectorAttribute",
                        "Dimensions",
                        "DistanceFunction",
                        "Projection",
                        "SearchSchema",
                    )
                }
            }
        ],
    )
    (described,) = dynamodb.describe_table(TableName=table)["Table"]["VectorIndexes"]
    assert (described["IndexStatus"], described["Backfilling"]) == ("CREATING", True)
    with pytest.raises(ClientError, match="Cannot search backfilling vector index: ByVector") as refused:
        _found(dynamodb, table)
    assert refused.value.response["Error"]["Code"] == "ValidationException"
    moto_vectors.advance(moto_vectors.DEFAULT_BACKFILL_S)
    (described,) = dynamodb.describe_table(TableName=table)["Table"]["VectorIndexes"]
    assert (described["IndexStatus"], described["Backfilling"]) == ("ACTIVE", False)
    assert _found(dynamodb, table) == ["there"]


def test_an_index_added_to_an_empty_table_answers_at_once(aws):
    dynamodb = aws["dynamodb"]
    table = _create(dynamodb)
    (index,) = dynamodb.describe_table(TableName=table)["Table"]["VectorIndexes"]
    dynamodb.update_table(TableName=table, VectorIndexUpdates=[{"Delete": {"IndexName": vectors.VECTOR_INDEX}}])
    dynamodb.update_table(
        TableName=table,
        VectorIndexUpdates=[
            {
                "Create": {
                    k: index[k]
                    for k in (
                        "IndexName",
                        "VectorAttribute",
                        "Dimensions",
                        "DistanceFunction",
                        "Projection",
                        "SearchSchema",
                    )
                }
            }
        ],
    )
    assert dynamodb.describe_table(TableName=table)["Table"]["VectorIndexes"][0]["IndexStatus"] == "ACTIVE"
    assert _found(dynamodb, table) == []


# ---------------------------------------------------------------- approximate


def test_approximate_leaves_out_a_share_of_the_true_neighbours_repeatably(aws):
    dynamodb = aws["dynamodb"]
    table = _create(dynamodb)
    for n in range(40):
        _put(dynamodb, table, f"c{n:02d}", [1.0, n / 40, 0.0, 0.0])
    moto_vectors.settle()
    exact = _found(dynamodb, table, 10)
    answers = []
    for _ in range(2):
        moto_vectors.configure(moto_vectors.Replication(approximate=0.3, seed=7))
        answers.append([_found(dynamodb, table, 10) for _ in range(20)])
    assert answers[0] == answers[1]  # the seed repeats the run
    missed = [set(exact) - set(found) for found in answers[0]]
    # The next neighbours stand in for missed ones (of twice TopK candidates, so nearly always all 10), in order.
    assert all(len(found) <= 10 for found in answers[0]) and sum(len(found) == 10 for found in answers[0]) >= 15
    moto_vectors.configure(moto_vectors.Replication())
    whole = _found(dynamodb, table, 20)
    assert all(found == [i for i in whole if i in found] for found in answers[0])
    assert any(missed) and not all(missed)
    assert 0.1 < sum(map(len, missed)) / (10 * 20) < 0.5


def test_chaos_names_the_index_modes():
    chaos = Chaos.from_env(
        {
            "PRECIS_LOCAL_CHAOS": "lag,approximate",
            "PRECIS_LOCAL_CHAOS_LAG_S": "8",
            "PRECIS_LOCAL_CHAOS_APPROXIMATE": "0.25",
            "PRECIS_LOCAL_CHAOS_SEED": "3",
        }
    )
    assert (chaos.index_lag_s, chaos.approximate_share) == (8.0, 0.25)
    assert "lag (writes reach the vector indexes 8 s late)" in chaos.describe()
    assert "approximate (25% of the nearest neighbours left out)" in chaos.describe()
    assert Chaos.from_env({"PRECIS_LOCAL_VECTOR_LAG_S": "0"}).index_lag_s == 0.0


# ---------------------------------------------------------------- BatchWriteItem


def test_a_batch_with_one_refused_request_writes_none_of_them(aws):
    dynamodb = aws["dynamodb"]
    table = _create(dynamodb)
    _put(dynamodb, table, "kept", [1.0, 0.0, 0.0, 0.0])
    good = {"PutRequest": {"Item": {"PK": {"S": "p"}, "SK": {"S": "1"}, "vec": _numbers_attribute([1, 0, 0, 0])}}}
    delete = {"DeleteRequest": {"Key": {"PK": {"S": "C#w#a#b"}, "SK": {"S": "V#kept"}}}}
    bad = {"PutRequest": {"Item": {"PK": {"S": "p"}, "SK": {"S": "2"}, "vec": {"L": [{"N": "1"}] * 3}}}}
    with pytest.raises(ClientError, match="vector attribute vec has 3 dimensions"):
        dynamodb.batch_write_item(RequestItems={table: [good, delete, bad]})
    assert [i["SK"]["S"] for i in dynamodb.scan(TableName=table)["Items"]] == ["V#kept"]
    moto_vectors.settle()
    assert _found(dynamodb, table) == ["kept"]
