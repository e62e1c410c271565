"""Two speed-ups of in-process moto for benchmarks, so timings measure Precis rather than moto's bookkeeping.

Neither changes what moto answers (the context benchmark checks that on its 1,000-message session):

- `narrow_queries`: moto evaluates every Query by walking *every item of the table* in Python (sorting them
  and sizing each), so a one-item Query on a 100,000-message session costs as much as reading all of it, and
  each page of a paginated Query walks the table again. DynamoDB reads only the key range. While installed,
  each Query on the base table or a local index is first narrowed to the items its key condition,
  ExclusiveStartKey, Limit and 1 MB page can reach (found by bisecting a sorted copy of the partition's keys);
  moto then evaluates the Query exactly as before over those items. The sorted keys are cached per partition
  and rebuilt when the partition's size changes: fine for a benchmark that seeds, then only reads.
- `copy_tables_once_per_transaction`: moto backs up (deep-copies) the whole table once per *item* of a
  TransactWriteItems; `local/moto_patches.py` (which the local stack uses too) copies it once per transaction.

Two more for benchmarks whose table keeps changing (bench/cost.py): `query_one_partition` (a Query looks at its
partition only; nothing cached) and `back_up_written_partitions` (a transaction's backup copies only the partitions
it writes).
"""

from __future__ import annotations

import bisect
import copy
import itertools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from moto.dynamodb.models.dynamo_type import DynamoType
from moto.dynamodb.models.table import RESULT_SIZE_LIMIT, LocalSecondaryIndex, Table

from local import moto_patches

_local = threading.local()
_sorted_cache: dict[tuple[int, Any, str | None], tuple[int, list[tuple], list[Any]]] = {}
_STRING_END = "\U0010ffff"


def _sort_key(item, index_attr: str | None) -> tuple | None:
    sk = item.range_key.cast_value
    if index_attr is None:
        return (sk,)
    value = item.attrs.get(index_attr)
    return None if value is None else (value.cast_value, sk)


def _partition(table: Table, hash_key: DynamoType, index_name: str | None) -> tuple[list[tuple], list[Any]]:
    index_attr = None
    if index_name:
        index = table.get_index(index_name)
        (index_attr,) = [k["AttributeName"] for k in index.schema if k["KeyType"] == "RANGE"]
    partition = table.items.get(hash_key) or {}
    cache_key = (id(table), hash_key.value, index_name)
    cached = _sorted_cache.get(cache_key)
    if cached is None or cached[0] != len(partition):
        keyed = sorted(((k, item) for item in partition.values() if (k := _sort_key(item, index_attr)) is not None),
                       key=lambda pair: pair[0])
        cached = (len(partition), [k for k, _ in keyed], [item for _, item in keyed])
        _sorted_cache[cache_key] = cached
    return cached[1], cached[2]


def _bounds(keys: list[tuple], comparison: str | None, values: list[Any]) -> tuple[int, int]:
    """Slice of `keys` (sorted) whose first component can satisfy the key condition (generous at the edges)."""
    lo, hi = 0, len(keys)
    firsts = [v.cast_value for v in values]
    op = (comparison or "").upper()
    if op in ("=", "EQ", "BETWEEN", ">", ">=", "BEGINS_WITH"):
        lo = bisect.bisect_left(keys, (firsts[0],))
    if op in ("=", "EQ", "<", "<="):
        hi = bisect.bisect_right(keys, (firsts[0], _STRING_END))
    elif op == "BETWEEN":
        hi = bisect.bisect_right(keys, (firsts[1], _STRING_END))
    elif op == "BEGINS_WITH":
        hi = bisect.bisect_right(keys, (firsts[0] + _STRING_END,))
    return lo, hi


def _start_key(dct: dict[str, Any], index_attr: str | None) -> tuple:
    sk = DynamoType(dct["SK"]).cast_value
    return (sk,) if index_attr is None else (DynamoType(dct[index_attr]).cast_value, sk)


def _candidates(table: Table, hash_key, comparison, values, limit, exclusive_start_key, forward,
                index_name) -> list[Any] | None:
    if hash_key is None or table.range_key_attr != "SK":
        return None
    if index_name and not isinstance(table.get_index(index_name), LocalSecondaryIndex):
        return None  # a global index partitions by another key: leave it to moto
    if comparison and comparison.upper() not in ("=", "EQ", "<", "<=", ">", ">=", "BETWEEN", "BEGINS_WITH"):
        return None
    index_attr = None
    if index_name:
        (index_attr,) = [k["AttributeName"] for k in table.get_index(index_name).schema if k["KeyType"] == "RANGE"]
    keys, items = _partition(table, hash_key, index_name)
    lo, hi = _bounds(keys, comparison, values)
    if exclusive_start_key:
        start = _start_key(exclusive_start_key, index_attr)
        if forward:
            lo = max(lo, bisect.bisect_right(keys, start))
        else:
            hi = min(hi, bisect.bisect_left(keys, start))
    attr = index_attr or "SK"
    inside = range(lo, hi) if forward else range(hi - 1, lo - 1, -1)
    beyond = range(max(lo, hi), len(items)) if forward else range(min(lo, hi) - 1, -1, -1)
    chosen, count, size = [], 0, 0
    # Mirror moto's page loop: before matching an item, it stops (setting LastEvaluatedKey) when the page is full
    # by Limit or would pass 1 MB with this item, whether or not the item matches. Items past the key range can
    # only be that trigger, so the walk beyond the range ends at the first one.
    for position in itertools.chain(inside, beyond):
        item = items[position]
        if (limit and count == limit) or size + item.size() > RESULT_SIZE_LIMIT:
            chosen.append(item)
            break
        if position in inside and not (comparison and not item.attrs[attr].compare(comparison, values)):
            chosen.append(item)
            count += 1
            size += item.size()
    return chosen if forward else chosen[::-1]


@contextmanager
def narrow_queries() -> Iterator[None]:
    original_query, original_all_items = Table.query, Table.all_items

    def all_items(self):
        narrowed = getattr(_local, "narrowed", None)
        return narrowed if narrowed is not None else original_all_items(self)

    def query(self, hash_key, range_comparison, range_objs, limit, exclusive_start_key, scan_index_forward,
              projection_expressions, index_name=None, *args, **kwargs):
        call = (hash_key, range_comparison, range_objs, limit, exclusive_start_key, scan_index_forward,
                projection_expressions, index_name, *args)
        narrowed = _candidates(self, hash_key, range_comparison, range_objs, limit, exclusive_start_key,
                               scan_index_forward is not False, index_name)
        if narrowed is None:
            return original_query(self, *call, **kwargs)
        _local.narrowed = narrowed
        try:
            return original_query(self, *call, **kwargs)
        finally:
            _local.narrowed = None

    Table.query, Table.all_items = query, all_items
    try:
        yield
    finally:
        Table.query, Table.all_items = original_query, original_all_items
        _sorted_cache.clear()


@contextmanager
def copy_tables_once_per_transaction() -> Iterator[None]:
    """moto backs a table up once per transaction, as the local stack's moto does (local/moto_patches.py)."""
    moto_patches.install()
    yield


@contextmanager
def query_one_partition() -> Iterator[None]:
    """moto sorts the whole table for every Query, then deep-copies every item that matches (before its Limit);
    while installed, a Query keyed on the table's partition key (the table itself, a local index, or a global index
    that shares the key) looks only at that partition's items, in the same order, and the matches are not copied
    (what follows only reads them or projects them into new items). Safe while the table changes, unlike
    `narrow_queries`: nothing is cached."""
    from moto.dynamodb.models import table as table_module

    original_query, original_all_items, original_copy = Table.query, Table.all_items, table_module.copy

    class _Copy:
        def __getattr__(self, name: str) -> Any:
            return getattr(original_copy, name)

        @staticmethod
        def deepcopy(obj: Any, memo: dict | None = None) -> Any:
            return list(obj) if isinstance(obj, list) else original_copy.deepcopy(obj, memo)

    def all_items(self):
        narrowed = getattr(_local, "partition", None)
        return narrowed if narrowed is not None else original_all_items(self)

    def query(self, hash_key, range_comparison, range_objs, limit, exclusive_start_key, scan_index_forward,
              projection_expressions, index_name=None, *args, **kwargs):
        call = (hash_key, range_comparison, range_objs, limit, exclusive_start_key, scan_index_forward,
                projection_expressions, index_name, *args)
        attribute = self.hash_key_attr
        if index_name:
            schema = self.get_index(index_name).schema
            attribute = next(k["AttributeName"] for k in schema if k["KeyType"] == "HASH")
        if hash_key is None or attribute != self.hash_key_attr or len(kwargs.get("hash_key_conditions") or ()) > 1:
            return original_query(self, *call, **kwargs)
        partition = self.items.get(hash_key) or {}
        _local.partition = (sorted(partition.values(), key=lambda item: item.range_key) if self.range_key_attr
                            else [partition])
        try:
            return original_query(self, *call, **kwargs)
        finally:
            _local.partition = None

    Table.query, Table.all_items, table_module.copy = query, all_items, _Copy()
    try:
        yield
    finally:
        Table.query, Table.all_items, table_module.copy = original_query, original_all_items, original_copy


@contextmanager
def back_up_written_partitions() -> Iterator[None]:
    """moto deep-copies every table a TransactWriteItems names, to roll back a cancelled one: a table full of vectors
    makes that most of a benchmark's time. While installed, the backup deep-copies only the partitions the
    transaction writes and shares the rest, which cannot change under it (moto serves one request at a time,
    local/moto_patches.py), so a rollback restores the same state."""
    from moto.dynamodb import models as backend_module
    from moto.dynamodb.models import DynamoDBBackend

    moto_patches.install()
    original_copy, original_transact = backend_module.copy, DynamoDBBackend.transact_write_items

    class _Copy:
        def __getattr__(self, name: str) -> Any:
            return getattr(original_copy, name)

        @staticmethod
        def deepcopy(obj: Any, memo: dict | None = None) -> Any:
            written = getattr(_local, "written", None)
            if written is None or not isinstance(obj, Table):
                return original_copy.deepcopy(obj, memo)
            if id(obj) not in _local.backups:  # moto asks once per action: one backup per transaction
                backup = copy.copy(obj)
                backup.items = {key: copy.deepcopy(part) if key in written.get(obj.name, ()) else part
                                for key, part in obj.items.items()}
                _local.backups[id(obj)] = backup
            return _local.backups[id(obj)]

    def transact_write_items(self, transact_items: list[dict[str, Any]]) -> None:
        written: dict[str, set] = {}
        for action in transact_items:
            (_, spec), = action.items()
            table = self.tables.get(spec.get("TableName"))
            key = spec.get("Key") or spec.get("Item") or {}
            if table is not None and table.hash_key_attr in key:
                written.setdefault(table.name, set()).add(DynamoType(key[table.hash_key_attr]))
        _local.written, _local.backups = written, {}
        try:
            return original_transact(self, transact_items)
        finally:
            _local.written = _local.backups = None

    backend_module.copy, DynamoDBBackend.transact_write_items = _Copy(), transact_write_items
    try:
        yield
    finally:
        backend_module.copy, DynamoDBBackend.transact_write_items = original_copy, original_transact
