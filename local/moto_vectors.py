"""SearchVectors on moto at the cost of the partition it names, as DynamoDB answers it: late, and (with chaos) not
quite exactly.

The first SearchVectors (`nearest_reference`, kept for the tests) walked every item of the table, converting and
scoring each vector in Python: seconds for 100k vectors. Here each vector index of a table keeps, per value of its
HASH attribute, the partition's vectors as a float64 matrix (each rounded to f32 first, as the index keeps them),
with per row the item's key and its INLINE_FILTER values as small ints. A search masks its partition by the
filters, scores every row with one matrix-vector product, and rescores exactly only the rows that product cannot
tell apart from the nearest `top_k`, with the brute force's own `score`: the answer is the brute force's to the
bit over what the index holds, same scores, ties in (hash key, range key) order.

What the index holds is what DynamoDB's would. DynamoDB replicates each write into its vector indexes
asynchronously, so a search right after a write may not see it: here every write (moto_storage.listen: put, update,
delete, batch, transaction and rollback) is filed `Replication.lag_s` after it was made, by `Replication.clock`
(a write the same item's next write overtakes is never filed on its own: the later one is, its lag after it). An
index created by UpdateTable on a table with items backfills for `backfill_s` (DescribeTable says so) and refuses
searches meanwhile, and with `approximate` a search leaves out a share of the true neighbours, as an approximate
index does. In-process (the tests) the clock stands still until told (`advance`, `settle`); the local stack runs it
on the wall clock (local/moto_backend.py).

Nothing is built before an index's first SearchVectors; it is then built once from the table's items whose writes
are due (one still pending is filed when due), and every due write after that re-files the item it changed.
"""

from __future__ import annotations

import copy
import heapq
import math
import os
import random
import weakref
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# One BLAS thread: the local stack shares a laptop's cores with its workers, and a search's one matrix-vector product
# gains nothing from threads that compete with them (80 ms against 80-150 ms at 100k vectors on 2 busy cores).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np  # noqa: E402
from moto.dynamodb.models.dynamo_type import DynamoType, Item
from moto.dynamodb.models.table import Table

from local.moto_storage import number_strings

Key = tuple[DynamoType, "DynamoType | None"]

# How far the matrix-vector product's score of a row may be from the brute force's, per dimension, in units of
# the scale of the terms summed (|q||v|; (|q|+|v|)^2 for EUCLIDEAN's squared distance): a float64 dot product
# of d terms is off by at most about d units of roundoff, Python's compensated sum by about 2. Taken 32 times
# over: a wider margin only rescores a few more rows.
_SLACK = 32 * 2.0**-53

DEFAULT_LAG_S = 0.5  # DynamoDB documents no figure; its replication is usually well under a second
DEFAULT_BACKFILL_S = 5.0  # a new index on a table with items: "even a table with very few items" takes a while
MAX_TOP_K = 100
BACKFILLING = "Cannot search backfilling vector index: {}"  # AWS's "Troubleshooting vector indexes"


class ManualClock:
    """A clock that moves only when told: in-process tests advance it, or settle the index, instead of sleeping."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class Replication:
    """How DynamoDB's vector indexes differ from their table here: how late writes reach them, how long a new index
    backfills, and the share of true neighbours an approximate search leaves out (seeded, so a run repeats)."""

    lag_s: float = DEFAULT_LAG_S
    backfill_s: float = DEFAULT_BACKFILL_S
    clock: Callable[[], float] = field(default_factory=ManualClock)
    approximate: float = 0.0
    seed: int = 0
    dice: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.dice = random.Random(self.seed)


replication = Replication()


def configure(new: Replication) -> None:
    """Replace the replication settings (moto_patches.install: in-process defaults; the local stack: its own)."""
    global replication
    replication = new


def vector_indexes(table: Table) -> list[dict[str, Any]]:
    """The vector indexes a table was created with (or given by UpdateTable), as CreateTable took them."""
    return getattr(table, "vector_indexes", [])


def search_schema(index: dict[str, Any], kind: str) -> list[str]:
    """The attributes of a vector index's SearchSchema of one kind (HASH or INLINE_FILTER)."""
    return [e["AttributeName"] for e in index.get("SearchSchema") or [] if e["SearchSchemaElementType"] == kind]


def numbers(value: Any) -> list[float] | None:
    """The floats of a list-of-numbers AttributeValue (a DynamoType or its JSON), else None."""
    strings = getattr(value, "strings", None)
    if strings is not None and (strings := strings()) is not None:  # a packed list (local/moto_storage.py)
        try:
            return list(map(float, strings))
        except ValueError:
            pass
    if isinstance(value, dict):  # JSON, as a request carries it: read as it is (a DynamoType per number is slow)
        elements = value.get("L") if len(value) == 1 else None
        strings = number_strings(elements)  # the common case, in one pass; any other element by element
        if strings is None and (
            not isinstance(elements, list)
            or not all(isinstance(v, dict) and len(v) == 1 and "N" in v for v in elements)
        ):
            return None
        try:
            return list(map(float, strings if strings is not None else [v["N"] for v in elements]))
        except (TypeError, ValueError):
            pass  # not a number DynamoDB accepts: DynamoType's way below decides as before
    if not isinstance(value, DynamoType):  # (wrapping a DynamoType again would copy every element)
        value = DynamoType(value)
    if value.type != "L" or not all(v.type == "N" for v in value.value):
        return None
    return [float(v.value) for v in value.value]


def score(metric: str, query: list[float], vector: list[float]) -> float:
    """The distance SearchVectors reports (smaller is nearer, but for DOT_PRODUCT)."""
    if metric == "EUCLIDEAN":
        return math.sqrt(sum((a - b) ** 2 for a, b in zip(query, vector)))
    dot = sum(a * b for a, b in zip(query, vector))
    if metric == "DOT_PRODUCT":
        return dot
    norms = math.sqrt(sum(a * a for a in query)) * math.sqrt(sum(b * b for b in vector))
    return 1.0 - dot / norms if norms else 1.0


def _frozen(value: Any) -> Any:
    """A DynamoType's cast value made hashable, equal exactly when the cast values are (lists, maps, sets)."""
    if isinstance(value, list):
        return "L", tuple(_frozen(v) for v in value)
    if isinstance(value, dict):
        return "M", frozenset((k, _frozen(v)) for k, v in value.items())
    if isinstance(value, set):
        return "SS", frozenset(value)
    return value


def _value_key(value: DynamoType) -> Any:
    """Equal for two attribute values exactly when they are equal (DynamoType.__eq__), and hashable."""
    return value.type, _frozen(value.cast_value)


def _item_order(key: Key) -> Any:
    """The order Table.all_items lists items in: the brute force's order among equal scores."""
    hash_key, range_key = key
    return (hash_key, range_key) if range_key else hash_key


def _current(table: Table, hash_key: DynamoType, range_key: DynamoType | None) -> Item | None:
    partition = table.items.get(hash_key)
    if partition is None:
        return None
    return partition.get(range_key) if table.range_key_attr else partition


def _stored_items(table: Table) -> list[Item]:
    if table.range_key_attr:
        return [item for partition in table.items.values() for item in partition.values()]
    return list(table.items.values())


class _Partition:
    """The indexed items of one HASH value: row i holds the vector, squared norm and filter values of keys[i]."""

    def __init__(self, dimensions: int, filters: int) -> None:
        self.matrix = np.empty((8, dimensions))
        self.squares = np.empty(8)
        self.filters = np.empty((8, filters), dtype=np.int64)  # an id per INLINE_FILTER value, -1: absent
        self.keys: list[Key] = []
        self.items: list[Item] = []  # what a search answers: the item as filed (deleted since, it is still here)
        self.order: list[Any] = []
        self.rows: dict[Key, int] = {}

    def add(self, key: Key, vector: np.ndarray, filter_ids: list[int], item: Item) -> None:
        row = len(self.keys)
        if row == len(self.matrix):
            for name in ("matrix", "squares", "filters"):
                old = getattr(self, name)
                grown = np.empty((2 * len(old), *old.shape[1:]), dtype=old.dtype)
                grown[:row] = old
                setattr(self, name, grown)
        self.matrix[row] = vector
        self.squares[row] = self.matrix[row] @ self.matrix[row]
        self.filters[row] = filter_ids
        self.keys.append(key)
        self.items.append(item)
        self.order.append(_item_order(key))
        self.rows[key] = row

    def remove(self, key: Key) -> None:
        """Drop `key`'s row, moving the last row into its place."""
        row, last = self.rows.pop(key), len(self.keys) - 1
        if row != last:
            self.matrix[row], self.squares[row], self.filters[row] = (
                self.matrix[last],
                self.squares[last],
                self.filters[last],
            )
            self.keys[row], self.items[row], self.order[row] = self.keys[last], self.items[last], self.order[last]
            self.rows[self.keys[row]] = row
        self.keys.pop()
        self.items.pop()
        self.order.pop()


class _VectorIndex:
    """One vector index of a table: its items, partitioned by their HASH value."""

    def __init__(self, definition: dict[str, Any]) -> None:
        self.definition = copy.deepcopy(definition)
        self.vector = definition["VectorAttribute"]["AttributeName"]
        self.dimensions = definition["Dimensions"]
        self.metric = definition["DistanceFunction"]
        self.hashes = search_schema(definition, "HASH")
        self.filters = search_schema(definition, "INLINE_FILTER")
        self.ids: list[dict[Any, int]] = [{} for _ in self.filters]  # per INLINE_FILTER: value key -> its id
        self.partitions: dict[tuple, _Partition] = {}
        self.placed: dict[Key, tuple] = {}  # item key -> the partition it is in

    def file(self, key: Key, item: Item | None) -> None:
        """Put the index in step with the item now at `key` (None: there is none)."""
        old = self.placed.pop(key, None)
        if old is not None:
            partition = self.partitions[old]
            partition.remove(key)
            if not partition.keys:
                del self.partitions[old]
        attrs = item.attrs if item is not None else {}
        if self.vector not in attrs or any(h not in attrs for h in self.hashes):
            return  # not in the index (sparse, like a GSI)
        values = numbers(attrs[self.vector])
        if values is None or len(values) != self.dimensions:
            return  # written before the index existed: DynamoDB does not index it
        vector = np.frombuffer(array("f", values), dtype=np.float32)
        if not np.isfinite(vector).all():
            return  # beyond f32 (written before the index existed): no distance to it
        where = tuple(_value_key(attrs[h]) for h in self.hashes)
        filter_ids = [
            ids.setdefault(_value_key(attrs[name]), len(ids)) if name in attrs else -1
            for name, ids in zip(self.filters, self.ids)
        ]
        partition = self.partitions.get(where)
        if partition is None:
            partition = self.partitions[where] = _Partition(self.dimensions, len(self.filters))
        partition.add((item.hash_key, item.range_key), vector, filter_ids, item)
        self.placed[key] = where

    def search(
        self, query: list[float], top_k: int, equalities: dict[str, list[DynamoType]]
    ) -> list[tuple[Item, float]]:
        """The items and scores of the `top_k` rows nearest to `query` among those `equalities` allow."""
        where, wanted = [], []
        for names, out in ((self.hashes, where), (self.filters, wanted)):
            for name in names:
                keys = {_value_key(v) for v in equalities.get(name, ())}
                if len(keys) > 1:
                    return []  # one attribute cannot equal two different values
                out.append(keys.pop() if keys else None)
        partition = self.partitions.get(tuple(where))
        if partition is None:
            return []
        n = len(partition.keys)
        rows = None
        for column, (value, ids) in enumerate(zip(wanted, self.ids)):
            if value is not None:
                if value not in ids:
                    return []
                matching = partition.filters[:n, column] == ids[value]
                rows = matching if rows is None else rows & matching
        rows = np.arange(n) if rows is None else np.flatnonzero(rows)
        if not len(rows):
            return []
        return [(partition.items[row], distance) for row, distance in self._nearest(partition, rows, query, top_k)]

    def _nearest(
        self, partition: _Partition, rows: np.ndarray, query: list[float], top_k: int
    ) -> list[tuple[int, float]]:
        q = np.array(query)
        n = len(partition.keys)
        if len(rows) == n:
            dots = partition.matrix[:n] @ q
        elif len(rows) * 4 < n:  # a narrow filter: multiply only its rows
            dots = partition.matrix[rows] @ q
        else:
            dots = (partition.matrix[:n] @ q)[rows]
        # [lower, upper] holds each row's exact distance (DOT_PRODUCT negated: smaller is nearer throughout);
        # `margin` is 0 only where the distance is known exactly (a zero vector).
        squares, q_squares = partition.squares[rows], float(q @ q)
        norms, q_norm = np.sqrt(squares), math.sqrt(q_squares)
        slack = _SLACK * (self.dimensions + 4)
        if self.metric == "EUCLIDEAN":
            fast = q_squares + squares - 2 * dots
            margin = slack * (q_norm + norms) ** 2
            lower, upper = np.sqrt(np.maximum(fast - margin, 0.0)), np.sqrt(np.maximum(fast + margin, 0.0))
        elif self.metric == "DOT_PRODUCT":
            margin = slack * q_norm * norms
            lower, upper = -dots - margin, -dots + margin
        else:  # COSINE: 1.0 for a zero vector
            scale = q_norm * norms
            with np.errstate(divide="ignore", invalid="ignore"):
                fast = 1.0 - dots / scale
            margin = np.full(len(rows), slack)
            zero = scale == 0
            if zero.any():
                fast[zero], margin[zero] = 1.0, 0.0
            lower, upper = fast - margin, fast + margin
        k = min(top_k, len(rows))
        bound = np.partition(upper, k - 1)[k - 1]
        # The rows whose exact distance can be as near as the k-th nearest exact distance, ties included, scored
        # exactly as the brute force scores them.
        candidates = np.flatnonzero(lower <= bound)
        picked = rows[candidates].tolist()
        exact = np.full(len(picked), 1.0 if self.metric == "COSINE" else 0.0)  # a zero vector's exact distance
        known: dict[bytes, float] = {}
        for i in np.flatnonzero(margin[candidates] > 0).tolist():
            vector = partition.matrix[picked[i]]
            raw = vector.tobytes()  # duplicates are scored once
            if raw not in known:
                known[raw] = score(self.metric, query, vector.tolist())
            exact[i] = known[raw]
        keys = -exact if self.metric == "DOT_PRODUCT" else exact
        kth = np.partition(keys, k - 1)[k - 1]
        nearer, tied = np.flatnonzero(keys < kth).tolist(), np.flatnonzero(keys == kth).tolist()

        def order(i: int) -> Any:
            return partition.order[picked[i]]

        chosen = nearer + heapq.nsmallest(k - len(nearer), tied, key=order)  # ties in the brute force's order
        chosen.sort(key=lambda i: (keys[i], order(i)))
        return [(picked[i], float(exact[i])) for i in chosen]


class _Replica:
    """A table's vector indexes as DynamoDB keeps them apart from it: the writes not filed yet, the indexes built,
    and the indexes still backfilling."""

    def __init__(self) -> None:
        # item key -> when its latest write is due, in the order written (the lag is one, so that is the order due)
        self.pending: dict[Key, float] = {}
        self.built: dict[str, _VectorIndex] = {}
        self.backfills: dict[str, float] = {}  # index name -> when its backfill ends

    def catch_up(self, table: Table, now: float) -> None:
        """File every write due by `now` in the built indexes (dropped or replaced ones are forgotten)."""
        pending = self.pending
        definitions = vector_indexes(table) if self.built else ()
        while pending:
            key = next(iter(pending))
            if pending[key] > now:
                break
            del pending[key]
            if self.built:
                item = _current(table, *key)
                for name, index in list(self.built.items()):
                    if index.definition in definitions:
                        index.file(key, item)
                    else:
                        del self.built[name]  # dropped or replaced by UpdateTable: rebuilt if searched again


_replicas: weakref.WeakKeyDictionary[Table, _Replica] = weakref.WeakKeyDictionary()


def _replica(table: Table) -> _Replica:
    replica = _replicas.get(table)
    if replica is None:
        replica = _replicas[table] = _Replica()
    return replica


def _index(table: Table, replica: _Replica, definition: dict[str, Any]) -> _VectorIndex:
    """The table's structure for this index, built now from the table's items whose writes are due if there is
    none for this very definition (UpdateTable can drop an index and create another under its name)."""
    index = replica.built.get(definition["IndexName"])
    if index is None or index.definition != definition:
        index = replica.built[definition["IndexName"]] = _VectorIndex(definition)
        for item in _stored_items(table):
            key = (item.hash_key, item.range_key)
            if key not in replica.pending:
                index.file(key, item)
    return index


def on_write(table: Table, hash_key: DynamoType, range_key: DynamoType | None) -> None:
    """moto_storage's listener: the write at this key reaches the table's vector indexes `lag_s` from now, and the
    writes due by now reach them."""
    if not vector_indexes(table):
        return
    replica = _replica(table)
    now = replication.clock()
    key = (hash_key, range_key)
    replica.pending.pop(key, None)  # an earlier write of the item not filed yet: this one is filed instead
    replica.pending[key] = now + replication.lag_s
    replica.catch_up(table, now)


def start_backfill(table: Table, index_name: str) -> None:
    """UpdateTable created this index on a table that holds items: it backfills for `backfill_s`."""
    _replica(table).backfills[index_name] = replication.clock() + replication.backfill_s


def backfilling(table: Table, index_name: str) -> bool:
    """Whether the index is still backfilling (DescribeTable: CREATING, Backfilling; SearchVectors refused)."""
    replica = _replicas.get(table)
    until = replica.backfills.get(index_name) if replica is not None else None
    if until is None:
        return False
    if replication.clock() < until:
        return True
    del replica.backfills[index_name]
    return False


def settle() -> None:
    """File every pending write and end every backfill, in every table: the index as if time enough had passed."""
    for table, replica in list(_replicas.items()):
        replica.catch_up(table, math.inf)
        replica.backfills.clear()


def advance(seconds: float) -> None:
    """Move the in-process clock on (ManualClock only: the wall clock moves by itself), filing what is then due in
    every table: with a ManualClock a write is filed exactly when the clock passes its due time."""
    clock = replication.clock
    if not isinstance(clock, ManualClock):
        raise TypeError("advance: the vector index runs on the wall clock here; only a ManualClock is advanced")
    clock.advance(seconds)
    for table, replica in list(_replicas.items()):
        replica.catch_up(table, clock())


def nearest(
    table: Table, definition: dict[str, Any], query: list[float], top_k: int, equalities: dict[str, list[DynamoType]]
) -> list[tuple[Item, float]]:
    """The `top_k` items of the index nearest to `query` (f32 values) whose search schema attributes equal the
    values of `equalities` (all of them; the HASH attribute's is given), each with its score, nearest first: among
    the writes filed by now, and with `approximate`, less a share of them."""
    replica = _replica(table)
    replica.catch_up(table, replication.clock())
    index = _index(table, replica, definition)
    share = replication.approximate
    if not share:
        return index.search(query, top_k, equalities)
    # An approximate index misses some true neighbours and answers with the next ones instead.
    found = index.search(query, 2 * top_k, equalities)
    return [hit for hit in found if replication.dice.random() >= share][:top_k]


def nearest_reference(
    table: Table, definition: dict[str, Any], query: list[float], top_k: int, equalities: dict[str, list[DynamoType]]
) -> list[tuple[Item, float]]:
    """`nearest` by brute force over the whole table, as SearchVectors was first answered: what the tests compare
    `nearest` with."""
    hashes = search_schema(definition, "HASH")
    vector_name, metric = definition["VectorAttribute"]["AttributeName"], definition["DistanceFunction"]
    scored = []
    for item in table.all_items():
        attrs = item.attrs
        if vector_name not in attrs or any(h not in attrs for h in hashes):
            continue
        if not all(name in attrs and all(attrs[name] == v for v in wanted) for name, wanted in equalities.items()):
            continue
        vector = numbers(attrs[vector_name])
        if vector is None or len(vector) != definition["Dimensions"]:
            continue
        vector = list(array("f", vector))
        if not all(map(math.isfinite, vector)):
            continue
        scored.append((score(metric, query, vector), item))
    scored.sort(key=lambda pair: -pair[0] if metric == "DOT_PRODUCT" else pair[0])
    return [(item, distance) for distance, item in scored[:top_k]]
