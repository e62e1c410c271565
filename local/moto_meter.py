"""PRECIS_LOCAL_THROUGHPUT_SCALE: DynamoDB's throughput limits in the local stack, where moto has none.

DynamoDB serves one partition at most 1,000 write units and 3,000 read units a second (a single item never splits, so
one item never more), and an on-demand table at most its account's table quota (40,000 of each by default). The meter
keeps a token bucket per item, per partition key and per table, for reads and for writes, each refilled at its limit
divided by the scale and holding one second of it: a request is refused while any bucket it would draw on is empty,
and an answered one is charged what it consumed (it may leave a bucket in debt, which the refill pays back). With
scale N a laptop's load stands for N times its rate: 1 is AWS's limits, 100 throttles one partition past 10 WRU/s.

Each partition key is one partition: the table has a local index, and DynamoDB keeps such a table's item collection
(everything under one partition key) together, which is why it caps one at 10 GB; split for heat over sort-key
ranges is not modelled. Index writes (local, global, vector) are not charged here (the cost bench counts them), nor
is a new table's warm throughput (4,000 WRU/s and 12,000 RRU/s, which on-demand raises as the load grows).

Pure: the moto server (local/moto_server.py, `Metering`) says which items a request names and what it consumed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping

PARTITION_WRU_S, PARTITION_RRU_S = 1_000, 3_000  # one partition's, so one item's (DynamoDB's partition limits)
TABLE_WRU_S, TABLE_RRU_S = 40_000, 40_000  # an on-demand table's, by the account's default table quota
_KB, _READ_BLOCK = 1024, 4096
_SWEEP_EVERY = 10_000  # charges between sweeps of refilled buckets, so the meter holds only the warm ones

Key = tuple[str, str, str]  # (table, partition key value, sort key value)


class ThroughputError(ValueError):
    """PRECIS_LOCAL_THROUGHPUT_SCALE is not a number the stack can use; the message names it."""


def scale_from_env(env: Mapping[str, str]) -> float | None:
    """The scale `env` asks for: 1 (AWS's limits) unless set, None for `off` (no meter); ThroughputError when it is
    neither `off` nor a positive number."""
    raw = env.get("PRECIS_LOCAL_THROUGHPUT_SCALE", "").strip()
    if not raw:
        return 1.0
    if raw.lower() == "off":
        return None
    try:
        scale = float(raw)
    except ValueError:
        scale = math.nan
    if not (math.isfinite(scale) and scale > 0):
        raise ThroughputError(
            "PRECIS_LOCAL_THROUGHPUT_SCALE: a positive number (1 = DynamoDB's limits, N = N times harsher) or off, "
            f"got {raw!r}"
        )
    return scale


def write_units(size: int, *, transactional: bool = False) -> int:
    """WRU of writing an item of `size` bytes (the larger of its before and after images): one per started KB."""
    return max(1, math.ceil(size / _KB)) * (2 if transactional else 1)


def read_units(size: int, *, consistent: bool, transactional: bool = False) -> float:
    """RRU of reading `size` bytes: one per started 4 KB strongly consistent, half eventually, two transactional."""
    blocks = max(1, math.ceil(size / _READ_BLOCK))
    return blocks * 2 if transactional else blocks if consistent else blocks / 2


class ThroughputMeter:
    """Token buckets per item, partition and table, for reads ("read") and writes ("write"), at DynamoDB's limits
    divided by `scale`, on `clock` (seconds; tests stand it still)."""

    def __init__(self, scale: float = 1.0, clock: Callable[[], float] = time.monotonic):
        self.scale, self.clock = scale, clock
        self.rates = {
            ("read", "item"): PARTITION_RRU_S / scale,
            ("read", "partition"): PARTITION_RRU_S / scale,
            ("read", "table"): TABLE_RRU_S / scale,
            ("write", "item"): PARTITION_WRU_S / scale,
            ("write", "partition"): PARTITION_WRU_S / scale,
            ("write", "table"): TABLE_WRU_S / scale,
        }
        self._buckets: dict[tuple, tuple[float, float]] = {}  # bucket -> (tokens, when); absent: full
        self._charges = 0
        self.refused = 0

    @staticmethod
    def _places(key: Key, index: str | None = None) -> list[tuple[str, tuple]]:
        table, pk, sk = key
        if index:  # a Query of an index: that index's partition (and the table's quota)
            return [("partition", (table, index, pk)), ("table", (table,))]
        places = [("partition", (table, "", pk)), ("table", (table,))]
        return [("item", (table, pk, sk)), *places] if sk is not None else places

    def _tokens(self, kind: str, place: str, where: tuple, now: float) -> float:
        rate = self.rates[kind, place]
        tokens, when = self._buckets.get((kind, place, where), (rate, now))
        return min(rate, tokens + (now - when) * rate)

    def exhausted(self, kind: str, keys: list[Key], index: str | None = None) -> int | None:
        """The position in `keys` of the first one whose item, partition or table has nothing left for `kind`
        (None: the request may run); counts a refusal."""
        now = self.clock()
        for position, key in enumerate(keys):
            for place, where in self._places(key, index):
                if self._tokens(kind, place, where, now) <= 0:
                    self.refused += 1
                    return position
        return None

    def charge(self, kind: str, key: Key, units: float, index: str | None = None) -> None:
        """`units` consumed at `key` (its item, partition and table); `key`'s sort key None: the partition only."""
        now = self.clock()
        for place, where in self._places(key, index):
            self._buckets[kind, place, where] = (self._tokens(kind, place, where, now) - units, now)
        self._charges += 1
        if self._charges % _SWEEP_EVERY == 0:
            self._sweep(now)

    def _sweep(self, now: float) -> None:
        for bucket in [b for b in self._buckets if self._tokens(*b, now) >= self.rates[b[0], b[1]]]:
            del self._buckets[bucket]

    def describe(self) -> str:
        """One line for the log: the limits in force."""
        return (
            f"throughput: DynamoDB's limits / {self.scale:g} ({self.rates['write', 'partition']:g} WRU/s and "
            f"{self.rates['read', 'partition']:g} RRU/s per item or partition, {self.rates['write', 'table']:g} WRU/s "
            f"and {self.rates['read', 'table']:g} RRU/s per table)"
        )
