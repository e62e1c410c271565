"""moto's DynamoDB at the cost of what a request touches, its answers unchanged.

moto keeps a table as a dict of partitions and answers by walking all of it: every Query sorts every item of the
table, and every TransactWriteItems deep-copies each table it names so that a cancelled one can be rolled back. A
write's cost then grows with everything stored (an import is quadratic) and a one-item Query on a big table is as
slow as a Scan. DynamoDB costs what a request touches; so does this:

- **An undo log for transactions.** Before a transaction runs, the items at the keys it names are saved (copies of
  those items only); a cancelled one puts exactly them back and drops the stream records its writes added
  (DynamoDB emits none for a cancelled transaction). moto's own code still runs every condition and write.
- **Queries read the partition they name.** A Query on the table, a local index or a global index keyed on the
  table's partition key looks only at that partition's items, kept sorted per partition and narrowed by bisection to
  what the key condition, ExclusiveStartKey, Limit and the 1 MB page can reach; a Query on another global index looks
  at the items carrying its partition key's value (an index of the table's items, kept current by every write).
  moto then evaluates the Query exactly as before over those items, so conditions, filters, projections, paging
  and LastEvaluatedKey are moto's.
- **Listeners hear of every write** (`listen`): the vector search files each write in its per-partition matrices
  (late, as DynamoDB's replication does).
- **A batch is all or nothing** (`all_or_nothing`): BatchWriteItem's undo, the items it named as they were.
- **Less bookkeeping per request.** An item is sized once as it is built (moto re-sizes the whole item for each
  attribute it sets: quadratic in its attributes, and a vector's 256 numbers are walked again for each), refused
  above the same 400 KB; and a data-plane request and its answer (items, keys, counts) are read with `json.loads` and
  written with `json.dumps` instead of moto's shape-walking parser and serializer, which took a third of each request
  and most of a vector's write (anything holding binary values, timestamps or numbers JSON cannot carry exactly goes
  the old way). So is a page of the stream (GetRecords): the stream pollers read every image twice, the deriver's
  vectors included, and moto's serializer walked each of a vector's 256 numbers against the API's shapes.

Nothing is cached before it is first needed: a table's indexes are built on its first Query that uses them, from the
items then stored, and every write after that (put, update, delete, batch, transaction and rollback) keeps them
current. `differential` (tests) runs a Query both ways.
"""

from __future__ import annotations

import bisect
import copy
import functools
import itertools
import json
import re
import threading
import uuid
import weakref
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from json.encoder import encode_basestring_ascii as _encode_string  # json.dumps's own
from typing import Any

import moto.dynamodb.comparisons as _comparisons
import moto.dynamodb.models as _backend_module
import moto.dynamodb.responses as _responses_module
from moto.core.responses import ActionResult
from moto.core.serialize import TimestampSerializer
from moto.core.utils import utcnow
from moto.dynamodb.exceptions import ItemSizeTooLarge, ItemSizeToUpdateTooLarge
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.dynamo_type import DynamoType, Item, LimitedSizeDict
from moto.dynamodb.models.table import RESULT_SIZE_LIMIT, StreamRecord, Table
from moto.dynamodb.models.utilities import bytesize, dynamo_json_dump
from moto.dynamodb.parsing import validators as _validators
from moto.dynamodb.parsing.ast_nodes import DepthFirstTraverser, Node
from moto.dynamodb.parsing.expressions import UpdateExpressionParser
from moto.dynamodb.parsing.reserved_keywords import ReservedKeywords
from moto.dynamodb.responses import DynamoHandler, DynamoResult
from moto.dynamodbstreams.responses import DynamoDBStreamsHandler
from moto.moto_api._internal import mock_random

Key = tuple[DynamoType, "DynamoType | None"]
Listener = Callable[[Table, DynamoType, "DynamoType | None"], None]

_MOTO = {
    "put_item": Table.put_item,
    "delete_item": Table.delete_item,
    "query": Table.query,
    "all_items": Table.all_items,
    "update_item": DynamoDBBackend.update_item,
    "transact_write_items": DynamoDBBackend.transact_write_items,
    "item_init": Item.__init__,
    "item_to_json": Item.to_json,
    "item_project": Item.project,
    "type_init": DynamoType.__init__,
    "limited_setitem": LimitedSizeDict.__setitem__,
    "type_size": DynamoType.size,
    "execute_result": DynamoResult.execute_result,
    "parse_parameters": DynamoHandler.parse_parameters,
    "update_item_action": DynamoHandler.update_item,
    "condition_parser": _comparisons.create_condition_expression_parser,
    "get_records": DynamoDBStreamsHandler.get_records,
    "stream_record_init": StreamRecord.__init__,
    "update_make": UpdateExpressionParser.make,
    "validator_init": _validators.Validator.__init__,
}
_local = threading.local()
_listeners: list[Listener] = []
_STRING_END = "\U0010ffff"
_NARROWED_OPS = ("=", "EQ", "<", "<=", ">", ">=", "BETWEEN", "BEGINS_WITH")


class _TableIndexes:
    """What a table's Queries read besides the table: sorted partitions and the items of each global index value."""

    def __init__(self) -> None:
        self.versions: dict[Any, int] = defaultdict(int)  # partition -> writes so far (invalidates its sorted copies)
        self.sorted: dict[tuple[Any, str | None], tuple[int, list[tuple], list[Item]]] = {}
        self.buckets: dict[str, dict[DynamoType, set[Key]]] = {}  # global index -> its hash value -> item keys
        self.placed: dict[str, dict[Key, DynamoType]] = {}  # global index -> item key -> the value it is filed under


_indexes: weakref.WeakKeyDictionary[Table, _TableIndexes] = weakref.WeakKeyDictionary()


def listen(listener: Listener) -> None:
    """Call `listener(table, hash, range)` after every change to that item (idempotent)."""
    if listener not in _listeners:
        _listeners.append(listener)


def touched(table: Table, hash_key: DynamoType, range_key: DynamoType | None) -> None:
    """The item at (hash_key, range_key) was written, updated, deleted or put back: bring what depends on it up to
    date."""
    indexes = _indexes.get(table)
    if indexes is not None:
        indexes.versions[hash_key] += 1
        if indexes.buckets:
            item = _get(table, hash_key, range_key)
            for name, buckets in indexes.buckets.items():
                _file(indexes, name, buckets, (hash_key, range_key), item, _hash_attribute(table, name))
    for listener in _listeners:
        listener(table, hash_key, range_key)


def _get(table: Table, hash_key: DynamoType, range_key: DynamoType | None) -> Item | None:
    partition = table.items.get(hash_key)
    if partition is None:
        return None
    return partition.get(range_key) if table.range_key_attr else partition


def table_named(name: str, region: str) -> Table:
    """The table called `name` in moto's backend for `region` (the default account, as the stack's clients use)."""
    from moto.core import DEFAULT_ACCOUNT_ID

    return _backend_module.dynamodb_backends[DEFAULT_ACCOUNT_ID][region].get_table(name)


def item_at(table: Table, key: dict[str, Any]) -> Item | None:
    """The item stored at a typed key (`{"PK": {"S": ...}, "SK": {"S": ...}}`), or None."""
    range_key = DynamoType(key[table.range_key_attr]) if table.range_key_attr else None
    return _get(table, DynamoType(key[table.hash_key_attr]), range_key)


def _file(
    indexes: _TableIndexes, name: str, buckets: dict[DynamoType, set[Key]], key: Key, item: Item | None, attribute: str
) -> None:
    placed = indexes.placed[name]
    old = placed.pop(key, None)
    if old is not None:
        bucket = buckets[old]
        bucket.discard(key)
        if not bucket:
            del buckets[old]
    value = item.attrs.get(attribute) if item is not None else None
    if value is not None:
        buckets.setdefault(value, set()).add(key)
        placed[key] = value


def _hash_attribute(table: Table, index_name: str | None) -> str:
    if not index_name:
        return table.hash_key_attr
    return next(k["AttributeName"] for k in table.get_index(index_name).schema if k["KeyType"] == "HASH")


def _range_attribute(table: Table, index_name: str | None) -> str | None:
    if not index_name:
        return table.range_key_attr
    return next((k["AttributeName"] for k in table.get_index(index_name).schema if k["KeyType"] == "RANGE"), None)


def _table_indexes(table: Table) -> _TableIndexes:
    indexes = _indexes.get(table)
    if indexes is None:
        indexes = _indexes[table] = _TableIndexes()
    return indexes


def _global_bucket(table: Table, index_name: str, value: DynamoType) -> set[Key]:
    indexes = _table_indexes(table)
    buckets = indexes.buckets.get(index_name)
    if buckets is None:  # first Query of this index: file every item once, writes keep it current from now on
        buckets, indexes.placed[index_name] = {}, {}
        attribute = _hash_attribute(table, index_name)
        for item in _MOTO["all_items"](table):
            _file(indexes, index_name, buckets, (item.hash_key, item.range_key), item, attribute)
        indexes.buckets[index_name] = buckets
    return buckets.get(value) or set()


# ---------------------------------------------------------------- writes


def put_item(self: Table, item_attrs: dict[str, Any], *args: Any, **kwargs: Any) -> Item:
    item = _MOTO["put_item"](self, item_attrs, *args, **kwargs)
    touched(self, item.hash_key, item.range_key)
    return item


def _delete_item(self: Table, hash_key: DynamoType, range_key: DynamoType | None) -> Item | None:
    item = _MOTO["delete_item"](self, hash_key, range_key)
    if item is not None:
        touched(self, hash_key, range_key)
    return item


def _keys_of(table: Table, key: dict[str, Any]) -> Key | None:
    """The (hash, range) of an item's key as a request gives it; None if it does not name one of `table`."""
    try:
        hash_key = DynamoType(key[table.hash_key_attr])
        range_key = DynamoType(key[table.range_key_attr]) if table.range_key_attr else None
    except (KeyError, TypeError, AttributeError):
        return None
    return hash_key, range_key


_ADDS = re.compile(
    r"\s*ADD\s+([A-Za-z][A-Za-z0-9_]*\s+:[A-Za-z0-9_]+"
    r"(?:\s*,\s*[A-Za-z][A-Za-z0-9_]*\s+:[A-Za-z0-9_]+)*)\s*"
)
_INTEGER = re.compile(r"-?[0-9]{1,38}")


@functools.cache
def _reserved() -> frozenset[str]:
    return frozenset(ReservedKeywords.get_reserved_keywords())


def _counters(
    table: Table,
    item: Item | None,
    update_expression: str | None,
    names: dict[str, Any] | None,
    values: dict[str, Any] | None,
    attribute_updates: Any,
    expected: Any,
    condition: str | None,
) -> list[tuple[str, int]] | None:
    """The (attribute, increment) pairs of an update that only ADDs integers to plain top-level attributes, none of
    them a key or reserved word, none of them stored as anything but an integer, every value used once: a counter
    bump, which moto's expression machinery (an AST deep-copied and walked by ten processors, a quadratic overlap
    check) takes milliseconds per ADD to apply. Anything else (None) goes moto's way, errors included."""
    if names or attribute_updates or expected or condition or not update_expression or not values:
        return None
    matched = _ADDS.fullmatch(update_expression)
    if matched is None:
        return None
    pairs = [part.split() for part in matched.group(1).split(",")]
    keys = {a["AttributeName"] for a in table.attr}
    attributes = [a for a, _ in pairs]
    if (
        len(set(attributes)) != len(attributes)
        or {v for _, v in pairs} != set(values)
        or keys.intersection(attributes)
        or any(a.upper() in _reserved() for a in attributes)
    ):
        return None
    bumps = []
    for attribute, placeholder in pairs:
        value = values[placeholder]
        if not isinstance(value, dict) or list(value) != ["N"] or not _INTEGER.fullmatch(str(value["N"])):
            return None
        stored = item.attrs.get(attribute) if item is not None else None
        if stored is not None and (stored.type != "N" or not _INTEGER.fullmatch(stored.value)):
            return None
        bumps.append((attribute, int(value["N"])))
    return bumps


def _update_item(self: DynamoDBBackend, table_name: str, key: dict[str, Any], *args: Any, **kwargs: Any) -> Item:
    # moto updates the stored item in place (and puts a new one first when there is none).
    table = self.tables.get(table_name)
    try:
        keys = _keys_of(table, key) if table is not None and not args else None
        if keys is not None and not getattr(_local, "reference", False):
            item = _get(table, *keys)
            bumps = _counters(
                table,
                item,
                kwargs.get("update_expression"),
                kwargs.get("expression_attribute_names"),
                kwargs.get("expression_attribute_values"),
                kwargs.get("attribute_updates"),
                kwargs.get("expected"),
                kwargs.get("condition_expression"),
            )
            if bumps is not None:
                return _add_counters(table, key, keys, item, bumps)
        _local.updating = table  # the one Item moto's update_item deep-copies: the item before it (`_before`)
        try:
            item = _MOTO["update_item"](self, table_name, key, *args, **kwargs)
        finally:
            _local.updating = None
        return _keys_only(item) if getattr(_local, "unanswered", False) else item  # (see _UnreadCopies)
    finally:
        keys = _keys_of(table, key) if table is not None else None
        if keys is not None:
            touched(table, *keys)


_BUMP_FIELDS = frozenset(
    {"TableName", "Key", "UpdateExpression", "ExpressionAttributeValues", "ReturnValues", "ReturnConsumedCapacity"}
)


def _update_item_action(self: DynamoHandler) -> Any:
    """UpdateItem's request handler, a counter bump answered without moto's: moto's parses the expression to check
    which names and values it uses (a hundred ADDs: milliseconds), deep-copies the item and writes it out twice to work
    out the attributes an answer might return. A bump asking for none of them (`_counters` checks the rest) goes
    straight to the backend."""
    body = self.body
    table = self.dynamodb_backend.tables.get(body.get("TableName"))
    plain = (
        table is not None
        and not getattr(_local, "reference", False)
        and body.get("ReturnValues", "NONE") == "NONE"
        and isinstance(body.get("Key"), dict)
        and set(body["Key"]) == {a for a in (table.hash_key_attr, table.range_key_attr) if a}
    )
    keys = _keys_of(table, body["Key"]) if plain and set(body) <= _BUMP_FIELDS else None
    if keys is not None:
        expression, values = body.get("UpdateExpression"), body.get("ExpressionAttributeValues")
        bumps = _counters(table, _get(table, *keys), expression, None, values, None, None, None)
        if bumps is not None:
            # the backend's update_item applies it (`_update_item`), and tells the listeners
            self.dynamodb_backend.update_item(
                body["TableName"],
                body["Key"],
                update_expression=expression,
                expression_attribute_names=None,
                expression_attribute_values=values,
            )
            return DynamoResult({"ConsumedCapacity": {"TableName": body["TableName"], "CapacityUnits": 0.5}})
    _local.unanswered = body.get("ReturnValues", "NONE") == "NONE" and not getattr(_local, "reference", False)
    try:
        return _MOTO["update_item_action"](self)
    finally:
        _local.unanswered = False


def _add_counters(
    table: Table, key: dict[str, Any], keys: Key, item: Item | None, bumps: list[tuple[str, int]]
) -> Item:
    """What moto's update_item does for a counter bump: each counter added to (absent counts as 0), then written as
    moto writes (`_write_attributes`)."""
    totals = [
        (a, DynamoType({"N": str((int(item.attrs[a].value) if item is not None and a in item.attrs else 0) + n)}))
        for a, n in bumps
    ]
    return _write_attributes(table, key, keys, item, totals, [])


def _write_attributes(
    table: Table,
    key: dict[str, Any],
    keys: Key,
    item: Item | None,
    written: list[tuple[str, DynamoType]],
    removes: list[str],
) -> Item:
    """What moto's update_item does once its expression is worked out: the 400 KB refusal (moto's LimitedSizeDict
    check for each attribute set, without its half-applied update when one fails: DynamoDB writes all or nothing),
    a missing item put first (its key alone, through Table.put_item, with moto's stream record), the attributes set
    and removed, then the stream record of the update."""
    original = _before(table, item)
    stored = (
        {a: v.size() for a, v in item.attrs.items()}
        if item is not None
        else {k: DynamoType(v).size() for k, v in key.items()}
    )
    size = sum(bytesize(a) + n for a, n in stored.items())
    for attribute, value in written:
        if size + bytesize(attribute) + value.size() > _ITEM_LIMIT:
            raise ItemSizeToUpdateTooLarge()
        size += value.size() - stored.get(attribute, -bytesize(attribute))
        stored[attribute] = value.size()
    if item is None:
        table.put_item({k: v for k, v in key.items()})
        item = _get(table, *keys)
    for attribute, value in written:
        dict.__setitem__(item.attrs, attribute, value)
    for attribute in removes:
        if attribute in item.attrs:
            dict.__delitem__(item.attrs, attribute)
    if table.stream_shard is not None:
        table.stream_shard.add(original, item)
    return item


def _before(table: Table, item: Item | None) -> Item | None:
    """The item as it was before an update, for the update's stream record: a copy when the stream carries old images;
    else only its keys (the record takes its keys and its event name from it), not a copy of every attribute (the
    deriver's cursor holds its job, the term statistics a thousand counters)."""
    view = (table.stream_specification or {}).get("StreamViewType") if table.stream_shard is not None else None
    if item is None or view in ("OLD_IMAGE", "NEW_AND_OLD_IMAGES") or getattr(_local, "reference", False):
        return copy.deepcopy(item)
    return _keys_only(item)


def _keys_only(item: Item) -> Item:
    keys = Item.__new__(Item)
    keys.hash_key, keys.range_key, keys.attrs = item.hash_key, item.range_key, LimitedSizeDict()
    return keys


class _UnreadCopies:
    """Stands in for `copy` in moto's responses module: UpdateItem's handler copies the item it is about to update
    and writes it and the updated item out to work out the attributes an answer might return; asked for none
    (`_local.unanswered`), both are the items' keys alone. Every other copy is made as before."""

    def __getattr__(self, name: str) -> Any:
        return getattr(copy, name)

    @staticmethod
    def deepcopy(obj: Any, memo: dict | None = None) -> Any:
        if type(obj) is Item and memo is None and getattr(_local, "unanswered", False):
            return _keys_only(obj)
        return copy.deepcopy(obj, memo)


class _NoTableCopies:
    """Stands in for `copy` in moto's backend module: inside a transaction a table is not deep-copied (the undo log
    restores what the transaction changed); the item update_item copies for its stream record is `_before`'s; every
    other copy is made as before."""

    def __getattr__(self, name: str) -> Any:
        return getattr(copy, name)

    @staticmethod
    def deepcopy(obj: Any, memo: dict | None = None) -> Any:
        if isinstance(obj, Table) and getattr(_local, "transaction", False):
            return obj
        updating = getattr(_local, "updating", None)
        if type(obj) is Item and updating is not None and memo is None:
            return _before(updating, obj)
        return copy.deepcopy(obj, memo)


def transact_write_items(self: DynamoDBBackend, transact_items: list[dict[str, Any]]) -> None:
    undo: list[tuple[Table, Key, Item | None, bool]] = []
    for action in transact_items:
        for kind, op in action.items():
            table = self.tables.get(op.get("TableName")) if isinstance(op, dict) else None
            keys = _keys_of(table, op.get("Item" if kind == "Put" else "Key") or {}) if table is not None else None
            if keys is not None:
                item = _get(table, *keys)
                undo.append((table, keys, copy.deepcopy(item) if item is not None else None, keys[0] in table.items))
    shards = {
        id(t): (t, t.stream_shard, len(t.stream_shard.items)) for t, _, _, _ in undo if t.stream_shard is not None
    }
    _local.transaction = True
    try:
        return _MOTO["transact_write_items"](self, transact_items)
    except BaseException:
        _local.transaction = False
        _roll_back(undo, shards)
        raise
    finally:
        _local.transaction = False


@contextmanager
def all_or_nothing(named: list[tuple[Table, dict[str, Any]]]) -> Iterator[None]:
    """Put back the items the block puts or deletes (each a table and the key or item a request names) and their
    stream records if it raises: a BatchWriteItem with one request refused writes none. A put replaces an item and a
    delete removes it, never changing it in place, so the items as they were are kept, not copies of them."""
    before = []
    for table, attributes in named:
        keys = _keys_of(table, attributes)
        if keys is not None:
            before.append((table, keys, _get(table, *keys), keys[0] in table.items))
    shards = {
        id(t): (t, t.stream_shard, len(t.stream_shard.items)) for t, _, _, _ in before if t.stream_shard is not None
    }
    try:
        yield
    except BaseException:
        _roll_back(before, shards)
        raise


def _roll_back(saved: list[tuple[Any, Any, Any, bool]], shards: dict[int, tuple[Any, Any, int]]) -> None:
    """Put back each saved item (newest change first) and cut each stream shard back to its length before."""
    for table, (hash_key, range_key), item, partition_existed in reversed(saved):
        _restore(table, hash_key, range_key, item, partition_existed)
    for table, shard, length in shards.values():
        del shard.items[length:]
        table.stream_shard = shard


def _restore(
    table: Table, hash_key: DynamoType, range_key: DynamoType | None, item: Item | None, partition_existed: bool
) -> None:
    if not table.range_key_attr:
        if item is None:
            table.items.pop(hash_key, None)
        else:
            table.items[hash_key] = item
    else:
        partition = table.items.get(hash_key)
        if item is not None:
            table.items[hash_key][range_key] = item
        elif partition is not None:
            partition.pop(range_key, None)
            if not partition and not partition_existed:
                del table.items[hash_key]
    touched(table, hash_key, range_key)


# ---------------------------------------------------------------- queries


def _all_items(self: Table) -> list[Item]:
    narrowed = getattr(_local, "candidates", None)
    return narrowed if narrowed is not None else _MOTO["all_items"](self)


def _sorted_partition(
    table: Table, hash_key: DynamoType, index_name: str | None, range_attr: str | None
) -> tuple[list[tuple], list[Item]]:
    """The partition's items in the index's order ((range value, SK) for an index, (SK,) for the table), and their
    sort keys; items without the index's range attribute are not in the index."""
    indexes = _table_indexes(table)
    version = indexes.versions[hash_key]
    cached = indexes.sorted.get((hash_key, index_name))
    if cached is None or cached[0] != version:
        partition = table.items.get(hash_key) or {}
        values = partition.values() if table.range_key_attr else [partition]
        if index_name and range_attr:
            keyed = [
                ((v.cast_value, item.range_key.cast_value), item)
                for item in values
                if (v := item.attrs.get(range_attr)) is not None
            ]
        else:
            keyed = [((item.range_key.cast_value,), item) for item in values]
        keyed.sort(key=lambda pair: pair[0])
        cached = (version, [k for k, _ in keyed], [item for _, item in keyed])
        indexes.sorted[(hash_key, index_name)] = cached
    return cached[1], cached[2]


def _bounds(keys: list[tuple], comparison: str | None, values: list[DynamoType]) -> tuple[int, int]:
    """The slice of `keys` (sorted) whose first component can satisfy the key condition (generous at the edges)."""
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


def _partition_candidates(
    table: Table,
    hash_key: DynamoType,
    comparison: str | None,
    values: list[DynamoType],
    limit: int | None,
    exclusive_start_key: dict[str, Any] | None,
    forward: bool,
    index_name: str | None,
    range_attr: str | None,
) -> list[Item]:
    keys, items = _sorted_partition(table, hash_key, index_name, range_attr)
    if comparison and not (index_name and range_attr is None):
        lo, hi = _bounds(keys, comparison, values)
    else:
        lo, hi = 0, len(keys)
    if exclusive_start_key:
        sk = DynamoType(exclusive_start_key[table.range_key_attr]).cast_value
        start = (
            (sk,) if not (index_name and range_attr) else (DynamoType(exclusive_start_key[range_attr]).cast_value, sk)
        )
        if forward:
            lo = max(lo, bisect.bisect_right(keys, start))
        else:
            hi = min(hi, bisect.bisect_left(keys, start))
    attribute = range_attr or table.range_key_attr
    inside = range(lo, hi) if forward else range(hi - 1, lo - 1, -1)
    beyond = range(max(lo, hi), len(items)) if forward else range(min(lo, hi) - 1, -1, -1)
    chosen, count, size = [], 0, 0
    # moto's page loop stops (setting LastEvaluatedKey) before an item once the page is full by Limit or would pass
    # 1 MB with it, whether or not the item matches: past the key range an item can only be that trigger, so the
    # walk beyond the range ends at the first one.
    for position in itertools.chain(inside, beyond):
        item = items[position]
        if (limit and count == limit) or size + item.size() > RESULT_SIZE_LIMIT:
            chosen.append(item)
            break
        if position in inside and not (comparison and not item.attrs[attribute].compare(comparison, values)):
            chosen.append(item)
            count += 1
            size += item.size()
    return chosen if forward else chosen[::-1]


def _candidates(
    table: Table,
    hash_key: DynamoType | None,
    comparison: str | None,
    values: list[DynamoType],
    limit: int | None,
    exclusive_start_key: dict[str, Any] | None,
    forward: bool,
    index_name: str | None,
    kwargs: dict[str, Any],
) -> list[Item] | None:
    """The items moto's Query needs to see to answer exactly as over the whole table (None: let it see all)."""
    if (
        hash_key is None
        or len(kwargs.get("hash_key_conditions") or ()) > 1
        or len(kwargs.get("range_key_conditions") or ()) > 1
    ):
        return None
    if comparison and comparison.upper() not in _NARROWED_OPS:
        return None
    if index_name and index_name not in {i.name for i in table.all_indexes()}:
        return None  # moto's own error
    hash_attr, range_attr = _hash_attribute(table, index_name), _range_attribute(table, index_name)
    if hash_attr != table.hash_key_attr:
        keys = _global_bucket(table, index_name, hash_key)
        return sorted(
            (item for key in keys if (item := _get(table, *key)) is not None),
            key=lambda i: (i.hash_key, i.range_key) if i.range_key else i.hash_key,
        )
    if not table.range_key_attr:
        item = table.items.get(hash_key)
        return [item] if item is not None else []
    return _partition_candidates(
        table, hash_key, comparison, values, limit, exclusive_start_key, forward, index_name, range_attr
    )


def _query(
    self: Table,
    hash_key: DynamoType | None,
    range_comparison: str | None,
    range_objs: list[DynamoType],
    limit: int,
    exclusive_start_key: dict[str, Any],
    scan_index_forward: bool,
    projection_expressions: list[list[str]] | None,
    index_name: str | None = None,
    *args: Any,
    **kwargs: Any,
) -> Any:
    call = (
        hash_key,
        range_comparison,
        range_objs,
        limit,
        exclusive_start_key,
        scan_index_forward,
        projection_expressions,
        index_name,
        *args,
    )
    if getattr(_local, "reference", False):
        return _MOTO["query"](self, *call, **kwargs)
    try:
        narrowed = _candidates(
            self,
            hash_key,
            range_comparison,
            range_objs,
            limit,
            exclusive_start_key,
            scan_index_forward is not False,
            index_name,
            kwargs,
        )
    except (TypeError, KeyError, ValueError, ArithmeticError):
        narrowed = None  # keys of mixed types or a malformed start key: moto's walk answers (or refuses) as it does
    if narrowed is None:
        return _MOTO["query"](self, *call, **kwargs)
    _local.candidates = narrowed
    try:
        return _MOTO["query"](self, *call, **kwargs)
    finally:
        _local.candidates = None


# ---------------------------------------------------------------- per-request bookkeeping

_ITEM_LIMIT = 405000  # moto's LimitedSizeDict: DynamoDB's 400 KB, measured between 409 and 410 KB
_JSON_ANSWERS = {
    "GetItem",
    "BatchGetItem",
    "Query",
    "Scan",
    "PutItem",
    "UpdateItem",
    "DeleteItem",
    "BatchWriteItem",
    "TransactWriteItems",
    "TransactGetItems",
    "SearchVectors",
}


def _item_init(self: Item, hash_key: DynamoType, range_key: DynamoType | None, attrs: dict[str, Any]) -> None:
    """moto's Item, sized once: its check after each attribute fails exactly when the whole item is over the limit
    (sizes only add up), so one check of the whole is the same check. A vector is kept packed (`PackedNumbers`)."""
    self.hash_key, self.range_key = hash_key, range_key
    pack = PackedNumbers.of if not getattr(_local, "reference", False) else (lambda _value: None)
    values = {key: pack(value) or DynamoType(value) for key, value in attrs.items()}
    if sum(bytesize(key) + value.size() for key, value in values.items()) > _ITEM_LIMIT:
        raise ItemSizeTooLarge
    self.attrs = LimitedSizeDict.__new__(LimitedSizeDict)
    dict.update(self.attrs, values)


def number_strings(elements: Any) -> tuple[str, ...] | None:
    """The strings of a JSON list of numbers as a request carries it (`[{"N": "0.5"}, ...]`), else None.

    A vector is read here twice in a row (checked for its indexes, then packed into the item): the last list read is
    remembered, by identity (a request's parameters are not changed while it is served)."""
    if type(elements) is not list:
        return None
    last = getattr(_local, "strings", None)
    if last is not None and last[0] is elements and last[1] == len(elements):
        return last[2]
    strings = tuple([n for e in elements if type(e) is dict and len(e) == 1 and type(n := e.get("N")) is str])
    strings = strings if len(strings) == len(elements) else None
    _local.strings = (elements, len(elements), strings)
    return strings


class PackedNumbers(DynamoType):
    """A list of numbers (a vector: 256 for a text's terms, more for an embedding) as the request wrote it, one object
    instead of a DynamoType per number, which was most of a vector's write, copy and stream record. It is sized,
    copied, written out (`Item.to_json`) and read by the vector search from its strings; anything that wants the
    elements themselves (a condition on it, an update into it, an equality) gets moto's list, which it then stays."""

    _SMALLEST = 16  # shorter lists are not worth it

    def __init__(self, strings: tuple[str, ...]) -> None:  # not super().__init__: it would build the elements
        self.type = "L"
        self._strings: tuple[str, ...] | None = strings
        self._elements: list[DynamoType] | None = None

    @classmethod
    def of(cls, value: Any) -> PackedNumbers | None:
        """A packed list for the JSON of a long enough list of numbers (`{"L": [{"N": "0.5"}, ...]}`), else None."""
        if type(value) is not dict or len(value) != 1:
            return None
        strings = number_strings(value.get("L"))
        return cls(strings) if strings is not None and len(strings) >= cls._SMALLEST else None

    @property  # type: ignore[override]
    def value(self) -> list[DynamoType]:
        if self._strings is not None:
            self._elements, self._strings = [DynamoType({"N": n}) for n in self._strings], None
        return self._elements  # type: ignore[return-value]

    @value.setter
    def value(self, elements: list[DynamoType]) -> None:
        self._elements, self._strings = elements, None

    def strings(self) -> tuple[str, ...] | None:
        """The numbers as written, while nothing has unpacked them."""
        return self._strings

    def size(self) -> int:
        return sum(map(len, self._strings)) if self._strings is not None else super().size()

    def __deepcopy__(self, memo: dict[int, Any]) -> DynamoType:
        if self._strings is None:
            return super().__deepcopy__(memo)
        return memo.setdefault(id(self), PackedNumbers(self._strings))  # the strings never change: shared


def _type_init(self: DynamoType, value: Any) -> None:
    # moto copies a DynamoType given to it by its type and value: a packed one's elements are unpacked for the copy.
    if type(value) is PackedNumbers:
        value = DynamoType({"L": value.value})
    _MOTO["type_init"](self, value)


def _limited_setitem(self: LimitedSizeDict, key: str, value: Any) -> None:
    # moto sizes a value by `type(v) is DynamoType` (else by its repr): a packed list is sized as the list it is.
    if type(value) is not PackedNumbers and not any(type(v) is PackedNumbers for v in self.values()):
        _MOTO["limited_setitem"](self, key, value)
        return
    if sum(bytesize(k) + _size(v) for k, v in (*self.items(), (key, value))) > _ITEM_LIMIT:
        raise ItemSizeTooLarge
    dict.__setitem__(self, key, value)


def _size(value: Any) -> int:
    return value.size() if isinstance(value, DynamoType) else bytesize(str(value))


_SET_ELEMENT = {"NS": "N", "SS": "S", "BS": "B"}


def _type_size(self: DynamoType) -> int:
    """moto's `DynamoType.size`, the same number: moto wraps each value of a map in a new DynamoType to size it, which
    copies the value's whole subtree, at every level of nesting (a stored job of conclusions, a map of lists of maps,
    was built again several times over by each sizing, and an update sizes the whole item once per attribute set)."""
    kind, value = self.type, self.value
    if kind == "N":
        return len(str(value))
    if kind in _SET_ELEMENT:
        element = _SET_ELEMENT[kind]  # moto sizes each element as a DynamoType of the set's element type
        return sum(len(str(v)) if element == "N" else 1 if isinstance(v, bool) else bytesize(v) for v in value)
    if kind == "L":
        return sum([v.size() for v in value])
    if kind == "M":
        return sum(
            [bytesize(k) + (v.size() if type(v) is DynamoType else DynamoType(v).size()) for k, v in value.items()]
        )
    if isinstance(value, bool):
        return 1
    return bytesize(value)


def _item_to_json(self: Item, root_attr_name: str = "Attributes") -> dict[str, Any]:
    packed = {
        name: strings
        for name, value in self.attrs.items()
        if type(value) is PackedNumbers and (strings := value.strings()) is not None
    }
    if not packed:
        return _MOTO["item_to_json"](self, root_attr_name)
    rest = copy.copy(self)
    rest.attrs = {name: value for name, value in self.attrs.items() if name not in packed}
    written = _MOTO["item_to_json"](rest, root_attr_name)[root_attr_name]
    return {
        root_attr_name: {
            name: {"L": [{"N": n} for n in packed[name]]} if name in packed else written[name] for name in self.attrs
        }
    }


def _item_project(self: Item, projection_expressions: list[list[str]]) -> Item:
    # moto turns the whole item into Python values (a Decimal per vector number) to pick the paths from it: only the
    # top-level attributes the paths start with can be picked.
    named = {path[0] for path in projection_expressions if path}
    rest = copy.copy(self)
    rest.attrs = {name: value for name, value in self.attrs.items() if name in named}
    return _MOTO["item_project"](rest, projection_expressions)


def _execute_result(self: DynamoResult, context: Any) -> Any:
    if (
        context.operation_model.name in _JSON_ANSWERS
        and isinstance(self.result, dict)
        and not getattr(_local, "reference", False)
    ):
        try:
            # moto's separators, so an answer's bytes (which the benchmarks count) are what they were
            answer = {k: v for k, v in self.result.items() if v is not None}
            if "ConsumedCapacity" in answer:
                answer["ConsumedCapacity"] = _doubles(answer["ConsumedCapacity"])
            body = json.dumps(answer, default=_unwritable)
        except TypeError:
            pass  # bytes (binary attributes), datetimes, Decimals: moto's serializer writes them
        else:
            return 200, {"Content-Type": "application/x-amz-json-1.0"}, body
    return _MOTO["execute_result"](self, context)


def _doubles(capacity: Any) -> Any:
    """Consumed capacity as moto's serializer writes it: its units are Doubles in the API's shapes (4.0, never 4, as
    BatchGetItem's count of keys would otherwise be written)."""
    if isinstance(capacity, list):
        return [_doubles(c) for c in capacity]
    if isinstance(capacity, dict):
        return {
            k: float(v) if k.endswith("CapacityUnits") and isinstance(v, int) else _doubles(v)
            for k, v in capacity.items()
        }
    return capacity


def _parse_parameters(self: DynamoHandler, request: Any) -> None:
    data = request.data
    if (
        self._get_action() in _JSON_ANSWERS
        and not getattr(_local, "reference", False)
        and b'"B"' not in data
        and b'"BS"' not in data
    ):  # moto's parser turns binary values into bytes
        try:
            params = json.loads(data)
        except ValueError:
            params = None  # moto's parser says what is wrong with it
        if isinstance(params, dict):
            self.params = params
            _local.request = (params, len(data))
            return
    _MOTO["parse_parameters"](self, request)


def request_bytes(parameter: Any) -> int | None:
    """The length of the JSON body this thread's request was read from, if `parameter` is one of its parameters (the
    object itself) and it was read here: every item size DynamoDB counts in it is at most that (a value's JSON is
    never shorter than its size)."""
    read = getattr(_local, "request", None)
    return read[1] if read is not None and any(value is parameter for value in read[0].values()) else None


def _unwritable(value: Any) -> Any:
    raise TypeError(type(value).__name__)


class _StreamRecords(ActionResult):
    """GetRecords' answer, written with `json.dumps`: moto's serializer walks every attribute value of every image
    against the API's shapes, and a page of the deriver's vector items (257 values each) took most of the stack's
    time. The same JSON: timestamps as moto writes them (epoch seconds, to the millisecond); a nested binary value
    goes moto's way."""

    def __init__(self, result: Any, headers: dict[str, str] | None = None) -> None:
        super().__init__(result)
        self._headers = headers or {}

    def execute_result(self, context: Any) -> Any:
        texts: list[str] = []
        marker = uuid.uuid4().hex  # no value of a request can know it

        def default(value: Any) -> Any:
            if type(value) is _RawJson:
                texts.append(value.text)
                return f"{marker}{len(texts) - 1}"
            return _epoch(value)

        try:
            body = json.dumps(self.result, default=default)
        except TypeError:  # a nested binary value is bytes (a top-level one is already base64, as moto writes it)
            return ActionResult(_plain_page(self.result)).execute_result(context)
        if texts:
            body = re.sub(f'"{marker}([0-9]+)"', lambda m: texts[int(m[1])], body)
        return 200, {"Content-Type": "application/x-amz-json-1.0", **self._headers}, body


def _epoch(value: Any) -> Any:
    if isinstance(value, datetime):
        return TimestampSerializer._timestamp_unixtimestamp(value)
    raise TypeError(type(value).__name__)


# A local stream poller (local/poller.py) names its event filter in this header: the page then holds only the records
# that pass it, and the other says how many the page read (its iterator moves past them all). Lambda filters before a
# function sees a record too; here the filter runs before the page is written, so the records a filter drops (most of
# them: every item the deriver writes) are never written out and read back by each poller.
FILTER_HEADER = "X-Precis-Stream-Filter"
READ_HEADER = "X-Precis-Records-Read"


def _get_records(self: DynamoDBStreamsHandler) -> ActionResult:
    result = _MOTO["get_records"](self)
    if getattr(_local, "reference", False):
        return ActionResult(_plain_page(result.result))
    wanted = next((v for k, v in (self.headers or {}).items() if k.lower() == FILTER_HEADER.lower()), None)
    if not wanted:
        return _StreamRecords(result.result)
    records = result.result.get("Records") or []
    passes = _stream_filter(wanted)
    return _StreamRecords(
        {**result.result, "Records": [r for r in records if passes(r)]}, {READ_HEADER: str(len(records))}
    )


@functools.lru_cache(maxsize=16)
def _stream_filter(wanted: str) -> Callable[[dict[str, Any]], bool]:
    """Whether a record (as a page holds it) passes the filter a poller sent: `{"arn": its stream, "patterns": [...]}`,
    matched as the poller matches (`local.stream_records.matches`) against the record Lambda would deliver."""
    from local.stream_records import lambda_record_json, matches

    spec = json.loads(wanted)
    arn, patterns = spec["arn"], spec["patterns"]
    named = {
        name
        for p in patterns
        for image in ("NewImage", "OldImage")
        for name in ((p.get("dynamodb") or {}).get(image) or {})
    }

    def passes(record: dict[str, Any]) -> bool:
        dynamodb = record["dynamodb"]
        if any(
            type(v) is _RawJson and k in named
            for image in ("NewImage", "OldImage")
            for k, v in (dynamodb.get(image) or {}).items()
        ):
            record = _plain(record)  # a pattern names an attribute kept as text: match its value
        shaped = {
            **record,
            "dynamodb": {
                **record["dynamodb"],
                "ApproximateCreationDateTime": _epoch(dynamodb["ApproximateCreationDateTime"]),
            },
        }  # the time as the page writes it
        event = lambda_record_json(shaped, arn)
        return any(matches(p, event) for p in patterns)

    return passes


class _RawJson:
    """An attribute of a stream record's image kept as the numbers it was written with (a packed vector's strings),
    its JSON written when a page first carries it: moto renders each image as dicts, a dict per number of a vector,
    then dumps the record to size it, and GetRecords dumps it again for each stream poller. The text is spliced into
    each page (`_StreamRecords`); anything else that reads the record (`StreamRecord.record`, moto's own serializer)
    gets the value itself."""

    __slots__ = ("strings", "_text")

    def __init__(self, strings: tuple[str, ...]) -> None:
        self.strings, self._text = strings, None  # a tuple: the item's list may be unpacked and changed later

    @property
    def text(self) -> str:
        """`{"L": [{"N": "0.5"}, ...]}`, as `json.dumps` writes it."""
        if self._text is None:
            self._text = '{"L": [' + ", ".join(['{"N": ' + _encode_string(n) + "}" for n in self.strings]) + "]}"
        return self._text

    def length(self) -> int:
        """The length of `text`, counted without writing it when no number needs escaping."""
        if self._text is None:
            joined = "".join(self.strings)
            if joined.isascii() and joined.isprintable() and '"' not in joined and "\\" not in joined:
                n = len(self.strings)  # {"L": [...]} around n of {"N": "..."}, ", " between them
                return len(joined) + 9 * n + 9 + 2 * max(n - 1, 0)
        return len(self.text)

    def to_json(self) -> Any:
        return json.loads(self.text)


def _image(item: Item) -> dict[str, Any]:
    """An item's image as moto's stream record holds it (`Item.to_json`), its packed vectors as their JSON text."""
    packed = {
        name: strings
        for name, value in item.attrs.items()
        if type(value) is PackedNumbers and (strings := value.strings()) is not None
    }
    if not packed:
        return item.to_json()["Attributes"]
    rest = copy.copy(item)
    rest.attrs = {name: value for name, value in item.attrs.items() if name not in packed}
    written = _MOTO["item_to_json"](rest)["Attributes"]
    return {name: _RawJson(packed[name]) if name in packed else written[name] for name in item.attrs}


def _stream_record_init(
    self: StreamRecord, table: Table, stream_type: str, event_name: str, old: Item | None, new: Item | None, seq: int
) -> None:
    """moto's StreamRecord, its images' vectors kept as JSON text (`_RawJson`) and its size counted from that text:
    the same record and the same SizeBytes (moto's length of the record's JSON)."""
    if getattr(_local, "reference", False):
        _MOTO["stream_record_init"](self, table, stream_type, event_name, old, new, seq)
        return
    rec = old if old is not None else new
    keys = {table.hash_key_attr: rec.hash_key.to_json()}  # type: ignore[union-attr]
    if table.range_key_attr is not None and rec is not None:
        keys[table.range_key_attr] = rec.range_key.to_json()  # type: ignore[union-attr]
    dynamodb: dict[str, Any] = {
        "StreamViewType": stream_type,
        "ApproximateCreationDateTime": utcnow(),
        "SequenceNumber": str(seq),
        "SizeBytes": 1,
        "Keys": keys,
    }
    record = {
        "eventID": mock_random.uuid4().hex,
        "eventName": event_name,
        "eventSource": "aws:dynamodb",
        "eventVersion": "1.0",
        "awsRegion": "us-east-1",
        "dynamodb": dynamodb,
    }
    if stream_type in ("NEW_IMAGE", "NEW_AND_OLD_IMAGES") and new is not None:
        dynamodb["NewImage"] = _image(new)
    if stream_type in ("OLD_IMAGE", "NEW_AND_OLD_IMAGES") and old is not None:
        dynamodb["OldImage"] = _image(old)
    # moto sizes a record by its JSON (dynamo_json_dump): a text spliced in counts its length, a placeholder 0 none
    texts = [
        v.length() - 1
        for image in ("NewImage", "OldImage")
        for v in dynamodb.get(image, {}).values()
        if type(v) is _RawJson
    ]
    dynamodb["SizeBytes"] = len(dynamo_json_dump(_placeheld(dynamodb))) + sum(texts)
    self._raw = record
    self._packed = bool(texts)


def _placeheld(dynamodb: dict[str, Any]) -> dict[str, Any]:
    """The record moto sizes, its JSON texts as a 0 and its time as the number moto's encoder writes for it."""
    return {
        **dynamodb,
        "ApproximateCreationDateTime": _unix_time(dynamodb["ApproximateCreationDateTime"]),
        **{
            image: {k: 0 if type(v) is _RawJson else v for k, v in dynamodb[image].items()}
            for image in ("NewImage", "OldImage")
            if image in dynamodb
        },
    }


_EPOCH = datetime(1970, 1, 1)


def _unix_time(value: datetime) -> float:
    delta = value - _EPOCH  # moto's unix_time, which builds its epoch again on each call
    return (delta.days * 86400) + (delta.seconds + (delta.microseconds / 1e6))


def _plain(record: dict[str, Any]) -> dict[str, Any]:
    """A stream record with its images' JSON texts read back into values: moto's record exactly."""
    dynamodb = record["dynamodb"]
    return {
        **record,
        "dynamodb": {
            **dynamodb,
            **{
                image: {k: v.to_json() if type(v) is _RawJson else v for k, v in dynamodb[image].items()}
                for image in ("NewImage", "OldImage")
                if image in dynamodb
            },
        },
    }


def _record_get(self: StreamRecord) -> dict[str, Any]:
    return _plain(self._raw) if self._packed else self._raw


def _record_set(self: StreamRecord, record: dict[str, Any]) -> None:  # moto's own __init__ (the reference)
    self._raw, self._packed = record, False


def _record_to_json(self: StreamRecord) -> dict[str, Any]:
    """What GetRecords' page is made of: the record with its JSON texts (`_StreamRecords` splices them in)."""
    return self._raw


def _plain_page(result: dict[str, Any]) -> dict[str, Any]:
    return {**result, "Records": [_plain(r) for r in result.get("Records") or []]}


class _ParsedCondition:
    """What moto's ConditionExpressionParser gives its callers, for an expression parsed before with the same names and
    values: the condition (an op tree, which only reads the item it is asked about) and the names and values it used.
    A transaction of messages has a condition per message, each the same few words; moto lexed and parsed each anew
    (a tenth of a post's time in moto)."""

    def __init__(self, parser: Any) -> None:
        self._op = parser.parse()
        self._names, self._values = list(parser.expr_attr_names_found), list(parser.expr_attr_values_found)
        self.expr_attr_names_found: list[str] = []
        self.expr_attr_values_found: list[str] = []

    def parse(self) -> Any:
        self.expr_attr_names_found, self.expr_attr_values_found = list(self._names), list(self._values)
        return self._op


_parsed_conditions: dict[tuple[str, str, str], _ParsedCondition] = {}
_PARSED_CONDITIONS = 2048


def _condition_parser(expression: str | None, names: dict[str, str] | None, values: dict[str, Any] | None) -> Any:
    if not expression or getattr(_local, "reference", False):
        return _MOTO["condition_parser"](expression, names, values)
    try:
        key = (expression, json.dumps(names, sort_keys=True), json.dumps(values, sort_keys=True))
    except TypeError:  # bytes (a binary value): parsed each time
        return _MOTO["condition_parser"](expression, names, values)
    parsed = _parsed_conditions.get(key)
    if parsed is None:
        parsed = _ParsedCondition(_MOTO["condition_parser"](expression, names, values))  # an invalid one raises
        if len(_parsed_conditions) >= _PARSED_CONDITIONS:
            _parsed_conditions.clear()
        _parsed_conditions[key] = parsed
    return parsed


class _UpdateExpressions:
    """moto's update-expression machinery, its per-expression work done once per expression.

    An update with ten SET clauses (a derive cursor's) cost moto ~20 ms: it parsed the expression twice (the request
    handler, then the backend), deep-copied the tree for its validators, and its validators walked it over and over
    (the action count looks at every clause from every clause: quadratic), building their lookup tables anew at each
    node. Now a parsed tree is kept per expression (the handler only reads it; the validators copy it before they change
    it, with a plain copy of its nodes), the checks that read only the expression, its names and the table's keys pass
    once per such triple, and each traverser's node types are listed once per class. What is checked against the item
    and the values runs for every request, as before."""

    STATIC = (
        _validators.ActionCountValidator,
        _validators.OverlappingPathsValidator,
        _validators.UpdateHashRangeKeyValidator,
    )
    LIMIT = 2048

    def __init__(self) -> None:
        self.parsed: dict[str, Node] = {}
        self.trees: dict[int, Node] = {}  # id -> tree, for the trees in `parsed` (alive while they are there)
        self.passed: set[tuple[int, str, tuple[str, ...]]] = set()

    def make(self, expression: str) -> Node:
        tree = self.parsed.get(expression)
        if tree is None:
            tree = _MOTO["update_make"](expression)  # an invalid one raises, and is not kept
            if len(self.parsed) >= self.LIMIT:
                self.parsed.clear()
                self.trees.clear()
                self.passed.clear()
            self.parsed[expression] = self.trees[id(tree)] = tree
        return tree

    def static_key(self, tree: Node, names: dict[str, str] | None, table: Table) -> tuple | None:
        if self.trees.get(id(tree)) is not tree:
            return None
        return id(tree), json.dumps(names or {}, sort_keys=True), tuple(table.table_key_attrs)


_updates = _UpdateExpressions()


def _make_update(cls: type, expression: str) -> Node:
    if getattr(_local, "reference", False):
        return _MOTO["update_make"](expression)
    return _updates.make(expression)


def _copy_tree(node: Node, parent: Node | None = None) -> Node:
    """A copy of an expression tree: new nodes and child lists, the same strings and numbers (moto deep-copied it
    through copy.deepcopy, a quarter of an update's time)."""
    copied = object.__new__(type(node))
    copied.__dict__.update(node.__dict__)
    copied.parent = parent
    if node.children is not None:
        copied.children = [
            _copy_tree(c, copied) if isinstance(c, Node) else c if type(c) in (str, int) else copy.deepcopy(c)
            for c in node.children
        ]
    return copied


def _validator_init(
    self: _validators.Validator,
    expression: Node,
    expression_attribute_names: dict[str, str],
    expression_attribute_values: dict[str, dict[str, Any]],
    item: Item,
    table: Table,
) -> None:
    if getattr(_local, "reference", False):
        _MOTO["validator_init"](self, expression, expression_attribute_names, expression_attribute_values, item, table)
        return
    self.expression_attribute_names = expression_attribute_names
    self.expression_attribute_values = expression_attribute_values
    self.item, self.table = item, table
    self.processors = self.get_ast_processors()
    self.node_to_validate = _copy_tree(expression)
    self.static_key = _updates.static_key(expression, expression_attribute_names, table)


def _validate_update(self: _validators.UpdateExpressionValidator) -> Node:
    key = getattr(self, "static_key", None)
    checked = key is not None and key in _updates.passed
    n = self.node_to_validate
    for processor in self.processors:
        static = isinstance(processor, _UpdateExpressions.STATIC)
        if not (static and checked):
            n = processor.traverse(n)
        if static and key is not None and not checked and type(processor) is _UpdateExpressions.STATIC[-1]:
            _updates.passed.add(key)  # the three passed (each raises when it does not)
    return n


@functools.cache
def _node_types(traverser: type) -> tuple[type, ...]:
    return tuple(traverser._processing_map(traverser.__new__(traverser)))


def _nodes_to_be_processed(self: DepthFirstTraverser) -> tuple[type, ...]:
    return _node_types(type(self))


@contextmanager
def moto_reference() -> Iterator[None]:
    """Queries in this thread walk the whole table, counter bumps take moto's expression machinery, vectors are
    stored as moto's lists and answers are written by moto's serializer, as moto does unpatched: the reference the
    tests compare with."""
    _local.reference = True
    try:
        yield
    finally:
        _local.reference = False


def install() -> None:
    """Patch this process's moto (idempotent). moto_patches.install calls it; `Table.put_item` is wrapped there, around
    its own checks, with `put_item`."""
    Table.delete_item = _delete_item
    Table.query = _query
    Table.all_items = _all_items
    DynamoDBBackend.update_item = _update_item
    DynamoDBBackend.transact_write_items = transact_write_items
    _backend_module.copy = _NoTableCopies()
    _responses_module.copy = _UnreadCopies()
    Item.__init__ = _item_init
    Item.to_json = _item_to_json
    Item.project = _item_project
    DynamoType.__init__ = _type_init
    LimitedSizeDict.__setitem__ = _limited_setitem
    DynamoType.size = _type_size
    DynamoResult.execute_result = _execute_result
    DynamoHandler.parse_parameters = _parse_parameters
    DynamoHandler.update_item = _update_item_action
    for module in (_comparisons, _responses_module, _backend_module):
        module.create_condition_expression_parser = _condition_parser
    DynamoDBStreamsHandler.get_records = _get_records
    StreamRecord.__init__ = _stream_record_init
    StreamRecord.record = property(_record_get, _record_set)
    StreamRecord.to_json = _record_to_json
    UpdateExpressionParser.make = classmethod(_make_update)
    _validators.Validator.__init__ = _validator_init
    _validators.UpdateExpressionValidator.validate = _validate_update
    DepthFirstTraverser.nodes_to_be_processed = _nodes_to_be_processed
