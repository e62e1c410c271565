"""The cost benchmark's unit arithmetic (bench/cost.py) against the DynamoDB developer guide's worked examples and
the pricing rules it prices with: item sizes, request units, index writes, API Gateway increments, Lambda GB-s."""

from __future__ import annotations

from collections import Counter

import pytest

from bench.cost import (
    Index,
    api_requests,
    attribute_size,
    batch_read_units,
    billed_ms,
    index_entry,
    index_partition_writes,
    item_size,
    key_kind,
    lambda_dollars,
    number_size,
    query_read_units,
    read_units,
    s3_dollars,
    sustainable_rate,
    write_units,
)

KB = 1024


# --- item sizes ("Item sizes and formats") -------------------------------------------------------------------------


def test_string_size_is_its_utf8_bytes_plus_the_name():
    assert item_size({"name": {"S": "héllo"}}) == len("name") + len("héllo".encode())


@pytest.mark.parametrize(
    ("number", "size"),
    [
        ("7", 2),
        ("12", 2),
        ("123", 3),
        ("1000", 2),
        ("-1000", 2),
        ("0.0012300", 3),
        ("3.14159", 4),
        ("0", 2),
        ("1e-05", 2),
        ("9" * 38, 20),
    ],
)
def test_number_size_is_one_byte_per_two_significant_digits_plus_one(number, size):
    assert number_size(number) == size
    assert attribute_size({"N": number}) == size


def test_binary_counts_raw_bytes_whether_given_raw_or_base64():
    assert attribute_size({"B": b"\x00\x01\x02"}) == 3
    assert attribute_size({"B": "AAEC"}) == 3


def test_bool_and_null_are_one_byte():
    assert item_size({"ok": {"BOOL": True}, "gone": {"NULL": True}}) == len("ok") + 1 + len("gone") + 1


def test_list_and_map_cost_three_bytes_plus_one_per_element():
    assert attribute_size({"L": []}) == 3
    assert attribute_size({"L": [{"S": "ab"}, {"N": "1"}]}) == 3 + (2 + 1) + (2 + 1)
    assert attribute_size({"M": {"a": {"S": "xy"}}}) == 3 + (1 + 2 + 1)
    assert item_size({"m": {"M": {"k": {"M": {}}}}}) == 1 + 3 + (1 + 3 + 1)


def test_no_item_has_no_size():
    assert item_size(None) == 0


# --- request units ("Capacity unit consumption for read/write operations") ----------------------------------------


def test_reading_a_3_5_kb_item_takes_one_unit_strongly_consistent_and_half_eventually():
    assert read_units(3_584, consistent=True) == 1
    assert read_units(3_584, consistent=False) == 0.5


def test_reads_round_up_to_4_kb():
    assert read_units(8 * KB, consistent=True) == 2
    assert read_units(8 * KB, consistent=False) == 1
    assert read_units(8 * KB, consistent=True, transactional=True) == 4
    assert read_units(10 * KB, consistent=True) == 3  # rounded up to 12 KB


def test_reading_nothing_still_costs_a_minimal_read():
    assert read_units(0, consistent=True) == 1
    assert read_units(0, consistent=False) == 0.5
    assert read_units(0, consistent=True, transactional=True) == 2


def test_writing_a_5_5_kb_item_takes_6_units():
    assert write_units(5_632) == 6


def test_a_transactional_write_of_a_1_5_kb_item_takes_4_units():
    assert write_units(1_536, transactional=True) == 4


def test_writes_round_up_to_1_kb_with_at_least_one_unit():
    assert write_units(0) == 1
    assert write_units(KB) == 1
    assert write_units(KB + 1) == 2


def test_a_query_returning_30_items_of_200_bytes_takes_2_units_strongly_consistent():
    assert query_read_units([200] * 30, consistent=True) == 2  # 6,000 bytes, rounded up to 8 KB
    assert query_read_units([200] * 30, consistent=False) == 1


def test_a_query_that_finds_nothing_costs_a_minimal_read():
    assert query_read_units([], consistent=True) == 1


def test_batch_get_rounds_each_item_on_its_own():
    # The guide's example: 1.5 KB and 6.5 KB read together count as 4 KB + 8 KB = 12 KB, not 8 KB.
    assert batch_read_units([1_536, 6_656], consistent=True) == 3
    assert batch_read_units([1_536, 6_656], consistent=False) == 1.5


# --- index writes --------------------------------------------------------------------------------------------------

TABLE_KEYS = ("PK", "SK")
BY_FREQUENCY = Index("ByFrequency", "gsi", ("PK", "times_derived"), projection="INCLUDE", non_key=("content",))


def _conclusion(times: int, content: str = "alice moved to Lisbon", **extra) -> dict:
    return {
        "PK": {"S": "C#a"},
        "SK": {"S": "C#1"},
        "times_derived": {"N": str(times)},
        "content": {"S": content},
        "norm": {"S": "x" * 2_000},
        **extra,
    }


def test_an_index_keeps_keys_and_projected_attributes_only():
    entry = index_entry(_conclusion(1), BY_FREQUENCY, TABLE_KEYS)
    assert set(entry) == {"PK", "SK", "times_derived", "content"}
    assert index_entry(_conclusion(1), Index("all", "gsi", ("PK", "times_derived")), TABLE_KEYS) == _conclusion(1)
    keys_only = Index("keys", "gsi", ("PK", "times_derived"), projection="KEYS_ONLY", non_key=("content",))
    assert set(index_entry(_conclusion(1), keys_only, TABLE_KEYS)) == {"PK", "SK", "times_derived"}


def test_an_item_without_the_index_key_is_not_in_a_sparse_index():
    item = _conclusion(1)
    del item["times_derived"]
    assert index_entry(item, BY_FREQUENCY, TABLE_KEYS) is None


def test_a_vector_index_needs_its_vector_and_partition_attributes_and_keeps_its_filters():
    vectors = Index("ByVector", "vector", ("vec", "vcoll"), also=("level",), projection="INCLUDE", non_key=("id",))
    item = {
        "PK": {"S": "V"},
        "SK": {"S": "1"},
        "vec": {"L": [{"N": "0.5"}]},
        "vcoll": {"S": "c"},
        "level": {"S": "explicit"},
        "id": {"S": "i"},
        "other": {"S": "o"},
    }
    assert set(index_entry(item, vectors, TABLE_KEYS)) == {"PK", "SK", "vec", "vcoll", "level", "id"}
    assert index_entry({k: v for k, v in item.items() if k != "vec"}, vectors, TABLE_KEYS) is None


def index_write_units(before: dict | None, after: dict | None, index: Index) -> int:
    return sum(units for _, units in index_partition_writes(before, after, index))


def test_index_writes_follow_what_the_index_stores():
    def entry(item):
        return index_entry(item, BY_FREQUENCY, TABLE_KEYS)

    new = entry(_conclusion(1))
    assert index_write_units(None, new, BY_FREQUENCY) == 1  # put
    assert index_write_units(new, None, BY_FREQUENCY) == 1  # delete
    assert index_write_units(new, new, BY_FREQUENCY) == 0  # nothing it holds changed
    assert index_write_units(entry(_conclusion(1, other={"S": "y"})), new, BY_FREQUENCY) == 0
    assert index_write_units(new, entry(_conclusion(2)), BY_FREQUENCY) == 2  # key moved: delete and put
    longer = entry(_conclusion(1, content="z" * 1_500))
    assert index_write_units(new, longer, BY_FREQUENCY) == 2  # in place, at the larger size


def test_index_writes_land_on_the_partitions_of_the_entries_they_write():
    by_due = Index("ByDue", "gsi", ("due_ws", "due_at"))
    old = {"PK": {"S": "p"}, "SK": {"S": "s"}, "due_ws": {"S": "w1"}, "due_at": {"S": "1"}}
    moved = {**old, "due_ws": {"S": "w2"}}
    assert index_partition_writes(None, old, by_due) == [("w1", 1)]
    assert index_partition_writes(old, None, by_due) == [("w1", 1)]
    assert index_partition_writes(old, old, by_due) == []
    assert index_partition_writes(old, moved, by_due) == [("w1", 1), ("w2", 1)]  # delete there, put here
    later = {**old, "due_at": {"S": "2"}, "note": {"S": "x" * 1_500}}
    assert index_partition_writes(old, later, by_due) == [("w1", 1), ("w1", 2)]  # sort key moved: delete, 1.5 KB put
    grown = {**old, "note": {"S": "x" * 1_500}}
    assert index_partition_writes(old, grown, by_due) == [("w1", 2)]  # in place, at the larger size
    vectors = Index("ByVector", "vector", ("vec", "vcoll"))
    entry = {"PK": {"S": "p"}, "SK": {"S": "s"}, "vec": {"L": []}, "vcoll": {"S": "c"}}
    assert index_partition_writes(None, entry, vectors) == [("c", 1)]  # a vector index's partition: its HASH


def test_a_workspace_sustains_what_its_hottest_item_or_partition_allows():
    # 1,000 WRU/s for an item or a partition, 3,000 RRU/s for a partition (DynamoDB's per-partition limits).
    assert sustainable_rate(2.0, 4.0, 3.0) == (250.0, "partition writes")
    assert sustainable_rate(5.0, 5.0, 3.0) == (200.0, "item writes")
    assert sustainable_rate(1.0, 1.0, 30.0) == (100.0, "partition reads")
    assert sustainable_rate(0.0, 0.0, 0.0)[0] == float("inf")


def test_hot_keys_are_named_by_what_they_hold():
    assert key_kind("item", "WS#bench#XM", "#") == "index manifest"
    assert key_kind("item", "WS#bench#XF#03", "s0:1:0a1b2c3d#000") == "fresh index shard: a post's unit"
    assert key_kind("partition", "", "WS#bench#XF#03") == "fresh index shard"
    assert key_kind("item", "WS#bench#XG#1.1733356800000.0a1b2c3d", "T00002") == "index segment: term bucket"
    assert key_kind("item", "WS#bench#XG#0.1733356800000.0a1b2c3d", "H") == "index segment: header"
    assert key_kind("partition", "", "WS#bench#XG#0.1733356800000.0a1b2c3d") == "index segment"
    assert key_kind("item", "WS#bench#S#s0#XD", "0000000042") == "session indexed texts: {n}"
    assert key_kind("partition", "", "WS#bench#S#s0") == "session (messages, cursors)"
    assert key_kind("partition", "ByDue", "bench") == "ByDue index: {ws}"


# --- the other services --------------------------------------------------------------------------------------------


def test_http_api_requests_are_metered_per_512_kb():
    assert api_requests(2_000, 30_000) == 1
    assert api_requests(512 * KB, 100) == 1
    assert api_requests(513 * KB, 100) == 2
    assert api_requests(100, 1_100 * KB) == 3


def test_lambda_bills_whole_milliseconds_of_own_time_plus_round_trips():
    assert billed_ms(0.0102, {"dynamodb": 2}, {"dynamodb": 6.0}) == 23
    assert billed_ms(0.0, {}, {"dynamodb": 6.0}) == 1


def test_lambda_dollars_are_gb_seconds_plus_requests():
    # A million 100 ms invocations at 512 MB: 50,000 GB-s.
    dollars = lambda_dollars(512, [100] * 1_000_000, "x86_64")
    assert dollars == pytest.approx(50_000 * 0.0000166667 + 0.20)
    assert lambda_dollars(512, [100] * 1_000_000, "arm64") < dollars


def test_s3_requests_are_priced_by_tier_and_deletes_are_free():
    assert s3_dollars(Counter({"PutObject": 1_000})) == pytest.approx(0.005)
    assert s3_dollars(Counter({"GetObject": 1_000, "HeadObject": 1_000})) == pytest.approx(0.0008)
    assert s3_dollars(Counter({"DeleteObject": 1_000, "ListObjectVersions": 1_000})) == pytest.approx(0.005)
