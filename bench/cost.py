"""What Precis costs a user in AWS: dollars per million messages ingested and per million context reads.

Ingestion: sessions of 200 messages (two peers taking turns, agent runs of four) posted in batches of 10 or of 100
through the real ingest handler, in-process on moto with the template's table and bucket. After each post the
table's stream (NEW_IMAGE records of the writes the meter saw, see `Capacity._stream`) is delivered, filtered by each
mapping's FilterCriteria, to the real summarizer and deriver handlers (their default engines: extractive, offline),
so each message carries the background work it causes. moto's Query and transaction rollbacks touch only the
partitions they name (local/moto_storage.py): same answers, a fraction of the time.
Context reads: the context handler on a 200-message session from that run (summaries, conclusions and card in place),
at 2,000 and 8,000 tokens, with and without `peer_target`.

Every component is priced from what the run did, with the on-demand prices in PRICES:
- DynamoDB: request units from item sizes, as DynamoDB bills them (`Capacity`): each call's stored items are sized
  from the table (before and after images for writes; every item a Query page examines, at its index entry's size on
  an index), rounded per item (1 KB writes, 4 KB reads; Query pages summed, then rounded), doubled for transactions;
  plus the index writes a table write causes (the local index, the sparse global ones and the vector indexes).
- Lambda: GB-s at each function's MemorySize (template.yaml) x billed duration, plus requests. A handler's duration
  is its in-process time outside AWS calls, plus ASSUMED round-trip latencies for its sequential AWS calls (moto's own
  time says nothing about DynamoDB's), rounded up to the millisecond. Stream consumers are invoked once per post
  here; see the notes printed under the table for what the template's batching changes.
- API Gateway HTTP API: one request per 512 KB of request or response. S3: requests by tier.
"""

from __future__ import annotations

import base64
import json
import math
import random
import re
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from bench.common import FAKE_AWS, ROOT, moto, print_table, template, write_json
from bench.front import AWS, http_event, invoke, own
from local.moto_meter import PARTITION_RRU_S, PARTITION_WRU_S, read_units, write_units  # the local stack's meter's
from local.poller import StreamSettings, matches  # imported before any patch of moto: it installs local.moto_patches

# On-demand prices, us-east-1, as assumed for 2026. Sources: "Amazon DynamoDB pricing" (on-demand, Standard table
# class, after the November 2024 cut), "AWS Lambda pricing" (first tier), "Amazon API Gateway pricing" (HTTP APIs,
# first 300 million requests a month, metered in 512 KB increments), "Amazon S3 pricing" (S3 Standard).
# Free tiers are left out.
PRICES = {
    "region": "us-east-1",
    "as_of": "2026 (assumed)",
    "dynamodb_per_million_wru": 0.625,
    "dynamodb_per_million_rru": 0.125,
    "dynamodb_storage_per_gb_month": 0.25,
    "dynamodb_pitr_per_gb_month": 0.20,
    "lambda_per_gb_s": {"x86_64": 0.0000166667, "arm64": 0.0000133334},
    "lambda_per_million_requests": 0.20,
    "api_http_per_million_requests": 1.00,
    "api_http_increment_bytes": 512 * 1024,
    "s3_put_per_thousand": 0.005,  # PUT, COPY, POST, LIST
    "s3_get_per_thousand": 0.0004,  # GET, HEAD and the rest; DELETE is free
    "s3_storage_per_gb_month": 0.023,
}
# Not prices: what a deployed function waits per sequential AWS round trip (moto answers in-process).
ASSUMED_LATENCY_MS = {"dynamodb": 6.0, "s3": 25.0}

WS = "bench"
SESSIONS = 3
SESSION_MESSAGES = 200
BATCHES = (1, 10, 100)
CONTEXT_BATCH = 10  # the run whose session the context reads read
READS = 20  # timed context reads per case (after one warm read)
CONTEXT_CASES = ((2_000, None), (2_000, "alice"), (8_000, None), (8_000, "alice"))
PEERS = ("alice", "assistant")
_VOCABULARY = (
    "budget invoice Lisbon studio design river deadline client proposal meeting contract schedule review "
    "draft figures launch supplier quote travel team agreed decided asked confirmed moved next week because "
    "the and with for about after before the weather tool returned a JSON list of prices dates and shipping "
    "status"
)
WORDS = _VOCABULARY.split()
FACTS = (
    "I moved to {w} last spring.",
    "My sister works on the {w} team.",
    "I like {w} in the morning.",
    "I have a {w} meeting every week.",
    "I prefer short answers about the {w}.",
)
_STREAM_FUNCTIONS = ("SummarizeFunction", "DeriveFunction")


# --- DynamoDB request units (pure; tests/deploy/test_cost_units.py checks them against the developer guide) -----


def number_size(text: str) -> int:
    """Bytes of a DynamoDB number: one per two significant digits (leading and trailing zeros trimmed), plus one."""
    mantissa = text.strip().lower().lstrip("+-").split("e")[0].replace(".", "")
    digits = len(mantissa.strip("0"))
    return (max(digits, 1) + 1) // 2 + 1


def attribute_size(value: dict[str, Any]) -> int:
    """Bytes of a typed AttributeValue (without its name): UTF-8 strings, raw binary, 1 for BOOL and NULL, and 3 plus
    one per element for lists and maps (a map's element counts its name too)."""
    ((kind, v),) = value.items()
    if kind == "S":
        return len(v.encode())
    if kind == "N":
        return number_size(v)
    if kind == "B":
        return len(v) if isinstance(v, bytes | bytearray) else len(base64.b64decode(v))  # base64 text: its raw bytes
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(len(s.encode()) for s in v)
    if kind == "NS":
        return sum(number_size(n) for n in v)
    if kind == "BS":
        return sum(attribute_size({"B": b}) for b in v)
    if kind == "L":
        return 3 + sum(attribute_size(e) + 1 for e in v)
    if kind == "M":
        return 3 + sum(len(k.encode()) + attribute_size(e) + 1 for k, e in v.items())
    raise ValueError(f"unknown attribute type {kind}")


def item_size(item: dict[str, dict[str, Any]] | None) -> int:
    """Bytes of a stored item: every attribute's UTF-8 name plus its value (0 for no item)."""
    return sum(len(name.encode()) + attribute_size(value) for name, value in (item or {}).items())


def query_read_units(sizes: list[int], *, consistent: bool) -> float:
    """RRU of one Query or Scan page: the sizes of all items it examined, summed, then rounded up to 4 KB."""
    return read_units(sum(sizes), consistent=consistent)


def batch_read_units(sizes: list[int], *, consistent: bool) -> float:
    """RRU of a BatchGetItem: each item rounded up to 4 KB on its own (a missing one costs a minimal read)."""
    return sum(read_units(size, consistent=consistent) for size in sizes)


def index_partition_writes(before: dict | None, after: dict | None, index: Index) -> list[tuple[str, int]]:
    """The WRU a table write spends on one index, from the item's index entries before and after it, as (the index's
    partition key value, WRU) per entry written: a new or removed entry is one write, a changed index key two (the
    delete on the old entry's partition, the put on the new one's), a changed entry one at the larger size."""
    if before == after:
        return []
    if before is None or after is None:
        entry = before or after
        return [(_hash_value(entry, index), write_units(item_size(entry)))]
    if any(before.get(k) != after.get(k) for k in index.required):
        return [
            (_hash_value(before, index), write_units(item_size(before))),
            (_hash_value(after, index), write_units(item_size(after))),
        ]
    return [(_hash_value(after, index), write_units(max(item_size(before), item_size(after))))]


def _hash_value(entry: dict, index: Index) -> str:
    return str(next(iter(entry[index.hash_key].values())))


def sustainable_rate(item_wru: float, partition_wru: float, partition_rru: float) -> tuple[float, str]:
    """Messages/s before the hottest item or partition throttles, given the units each takes per message, and which
    binds ("item writes", "partition writes" or "partition reads")."""
    rates = [
        (PARTITION_WRU_S / item_wru if item_wru else math.inf, "item writes"),
        (PARTITION_WRU_S / partition_wru if partition_wru else math.inf, "partition writes"),
        (PARTITION_RRU_S / partition_rru if partition_rru else math.inf, "partition reads"),
    ]
    return min(rates)


@dataclass(frozen=True)
class Index:
    """What an index holds of an item: present when the item has every `required` attribute (sparse indexes)."""

    name: str
    kind: str  # "lsi", "gsi" or "vector"
    required: tuple[str, ...]  # the index's key attributes (a vector index: its HASH and vector attributes)
    also: tuple[str, ...] = ()  # attributes kept when present (a vector index's inline filters)
    projection: str = "ALL"  # ALL, INCLUDE or KEYS_ONLY
    non_key: tuple[str, ...] = ()

    @property
    def hash_key(self) -> str:
        """The attribute that names an entry's partition (a vector index lists its vector first)."""
        return self.required[1] if self.kind == "vector" else self.required[0]


def indexes_of(definition: dict[str, Any]) -> list[Index]:
    """The indexes of a CreateTable definition (local, global and vector)."""
    out = []
    for kind, section in (("lsi", "LocalSecondaryIndexes"), ("gsi", "GlobalSecondaryIndexes")):
        for index in definition.get(section) or ():
            projection = index.get("Projection") or {}
            out.append(
                Index(
                    index["IndexName"],
                    kind,
                    tuple(k["AttributeName"] for k in index["KeySchema"]),
                    projection=projection.get("ProjectionType", "ALL"),
                    non_key=tuple(projection.get("NonKeyAttributes") or ()),
                )
            )
    for index in definition.get("VectorIndexes") or ():
        schema = index.get("SearchSchema") or []
        projection = index.get("Projection") or {}
        out.append(
            Index(
                index["IndexName"],
                "vector",
                (
                    index["VectorAttribute"]["AttributeName"],
                    *(s["AttributeName"] for s in schema if s["SearchSchemaElementType"] == "HASH"),
                ),
                also=tuple(s["AttributeName"] for s in schema if s["SearchSchemaElementType"] != "HASH"),
                projection=projection.get("ProjectionType", "ALL"),
                non_key=tuple(projection.get("NonKeyAttributes") or ()),
            )
        )
    return out


def index_entry(item: dict | None, index: Index, table_keys: tuple[str, ...]) -> dict | None:
    """The entry `index` holds for `item` (None when the item is not in it): keys plus projected attributes."""
    if item is None or any(a not in item for a in index.required):
        return None
    if index.projection == "ALL":
        return item
    kept = {*table_keys, *index.required, *index.also, *(index.non_key if index.projection == "INCLUDE" else ())}
    return {k: v for k, v in item.items() if k in kept}


def api_requests(request_bytes: int, response_bytes: int, increment: int = PRICES["api_http_increment_bytes"]) -> int:
    """HTTP API requests billed for one call: one per started 512 KB of its request or of its response."""
    return max(1, math.ceil(request_bytes / increment), math.ceil(response_bytes / increment))


def billed_ms(own_s: float, rounds: dict[str, int], latency_ms: dict[str, float] = ASSUMED_LATENCY_MS) -> int:
    """A Lambda invocation's billed milliseconds: its own time plus its sequential AWS round trips, rounded up."""
    return max(1, math.ceil(own_s * 1000 + sum(latency_ms[s] * n for s, n in rounds.items())))


def lambda_dollars(memory_mb: int, durations_ms: list[int], architecture: str = "x86_64") -> float:
    """What invocations of these billed durations cost at `memory_mb`: GB-seconds plus requests."""
    gb_s = memory_mb / 1024 * sum(durations_ms) / 1000
    return (
        gb_s * PRICES["lambda_per_gb_s"][architecture] + len(durations_ms) * PRICES["lambda_per_million_requests"] / 1e6
    )


def s3_dollars(requests: Counter) -> float:
    """S3 request charges: PUT, COPY, POST and LIST at the higher rate, DELETE free, the rest (GET, HEAD) lower."""
    dollars = 0.0
    for op, n in requests.items():
        if op.startswith("Delete"):
            continue
        tier = op.startswith(("Put", "Copy", "Post", "List", "CreateMultipart", "UploadPart", "CompleteMultipart"))
        dollars += n * PRICES["s3_put_per_thousand" if tier else "s3_get_per_thousand"] / 1000
    return dollars


# --- metering a client's calls ------------------------------------------------------------------------------------


class Hooks:
    """botocore event handlers on a client, registered until `detach` (get_db's clients outlive a moto context)."""

    def __init__(self, client, first=None, middle=None, last=None):
        self.events = client.meta.events
        self.handlers = [(self.events.register_first, self.events.unregister, e, h) for e, h in (first or {}).items()]
        self.handlers += [(self.events.register, self.events.unregister, e, h) for e, h in (middle or {}).items()]
        self.handlers += [(self.events.register_last, self.events.unregister, e, h) for e, h in (last or {}).items()]
        for register, _, event, handler in self.handlers:
            register(event, handler)

    def detach(self) -> None:
        for _, unregister, event, handler in self.handlers:
            unregister(event, handler)


class CallClock:
    """Time spent inside AWS calls from any thread (the union of their spans) and the sequential rounds they made:
    a call that starts while none is in flight opens a round; calls overlapping it ride along."""

    def __init__(self):
        self.lock, self.in_flight, self.opened, self.inside = threading.Lock(), 0, 0.0, 0.0
        self.rounds: Counter = Counter()

    def attach(self, client, service: str) -> Hooks:
        def start(**_):
            self._start(service)

        def end(**_):
            self._end()

        return Hooks(
            client,
            first={f"before-call.{service}": start},
            last={f"after-call.{service}": end, f"after-call-error.{service}": end},
        )

    def _start(self, service: str) -> None:
        with self.lock:
            if self.in_flight == 0:
                self.opened = time.perf_counter()
                self.rounds[service] += 1
            self.in_flight += 1

    def _end(self) -> None:
        with self.lock:
            self.in_flight -= 1
            if self.in_flight == 0:
                self.inside += time.perf_counter() - self.opened

    def reading(self) -> tuple[float, Counter]:
        with self.lock:
            return self.inside, Counter(self.rounds)


_KEY_TOKEN = re.compile(r"[#:][A-Za-z0-9_]+")


def moto_table(name: str):
    """The in-process moto table called `name` (this process's mock_aws)."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.dynamodb.models import dynamodb_backends

    return dynamodb_backends[DEFAULT_ACCOUNT_ID][FAKE_AWS["AWS_REGION"]].get_table(name)


def typed(value) -> dict[str, Any]:
    """A moto DynamoType as a typed AttributeValue."""
    if value.type == "L":
        return {"L": [typed(v) for v in value.value]}
    if value.type == "M":
        return {"M": {k: typed(v) for k, v in value.value.items()}}
    return {value.type: value.value}


def lambda_json(item: dict[str, Any]) -> dict[str, Any]:
    """Typed attributes as Lambda's JSON has them: binary values base64-encoded."""

    def one(value):
        ((kind, v),) = value.items()
        if kind == "B":
            return {"B": v if isinstance(v, str) else base64.b64encode(v).decode()}
        if kind == "BS":
            return {"BS": [b if isinstance(b, str) else base64.b64encode(b).decode() for b in v]}
        if kind == "L":
            return {"L": [one(e) for e in v]}
        if kind == "M":
            return {"M": {k: one(e) for k, e in v.items()}}
        return value

    return {name: one(value) for name, value in item.items()}


def stored_item(table, key: dict[str, Any], key_names: tuple[str, ...]) -> dict[str, Any] | None:
    """The item at `key` in a moto table, typed (a handler's thread may be writing it: read again if so)."""
    from moto.dynamodb.models.dynamo_type import DynamoType

    for _ in range(10):
        try:
            item = table.get_item(*(DynamoType(key[k]) for k in key_names))
            return None if item is None else {name: typed(v) for name, v in list(item.attrs.items())}
        except RuntimeError:  # changed while read
            continue
    raise RuntimeError(f"item {key} kept changing while read")


class Capacity:
    """DynamoDB request units a client's calls consume, by `label`, from the sizes of the items they touch.

    Stored items are read from moto's backend: before a write (its before image) and after it. A Query or Scan page
    is asked again with `plain`, a client on the same moto without these hooks, keys only and without its filter:
    that names every item the page examined. Each successful write that changed something is also recorded as the
    stream record Lambda would receive (`take_records`).
    """

    WRITES = frozenset({"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"})

    def __init__(self, client, plain, definition: dict[str, Any]):
        self.client, self.plain, self.table = client, plain, definition["TableName"]
        self.keys = tuple(k["AttributeName"] for k in definition["KeySchema"])
        self.indexes = indexes_of(definition)
        self.label = "setup"
        self.totals: dict[str, Counter] = defaultdict(Counter)
        # Units by where they land, by `label`: ("wru" | "rru", "item", PK, SK) for a table item, ("wru" | "rru",
        # "partition", index name ("" for the table), partition key value) for a partition. A local index's entries
        # are in their item's partition; a global index has partitions of its own; vector indexes are left out
        # (their limits are not DynamoDB's published ones).
        self.heat: dict[str, Counter] = defaultdict(Counter)
        self.records: list[dict] = []  # the table's stream, as Lambda would receive it (see `_stream`)
        # Reentrant: `_after` holds it (the hooks run in the functions' threads, and a Counter's += is not atomic:
        # units went missing) and `_stream`, which it calls, takes it again.
        self.lock = threading.RLock()
        self.hooks = Hooks(
            client,
            middle={
                "before-parameter-build.dynamodb": self._params,
                "before-call.dynamodb": self._before,
                "after-call.dynamodb": self._after,
            },
        )

    # -- stored items

    def _id(self, key: dict) -> tuple:
        return tuple(next(iter(key[k].values())) for k in self.keys)

    def stored(self, key_list: list[dict]) -> list[dict | None]:
        """The stored items at these keys (None where absent), read from moto's backend: asking moto through a client
        would serialize every item (vectors included), the bulk of the benchmark's time."""
        table = moto_table(self.table)  # looked up each time: a cancelled transaction swaps in moto's backup
        return [stored_item(table, k, self.keys) for k in key_list]

    # -- hooks

    def _params(self, params, model, context, **_):
        context["cost"] = {"op": model.name, "params": params}

    def _before(self, model, context, **_):
        call = context.get("cost")
        if call is None or model.name not in self.WRITES:
            return
        call["actions"] = actions = self._write_actions(model.name, call["params"])
        for action, before in zip(actions, self.stored([a["key"] for a in actions])):
            action["before"] = before

    def _after(self, parsed, model, context, **_):
        with self.lock:
            self._charge(parsed, model, context)

    def _charge(self, parsed, model, context) -> None:
        call = context.get("cost")
        if call is None:
            return
        op, params, totals = model.name, call["params"], self.totals[self.label]
        totals[f"op:{op}"] += 1
        error = (parsed.get("Error") or {}).get("Code")
        if op in self.WRITES:
            self._charge_writes(op, call["actions"], parsed, error, totals)
        elif error:
            totals["errors"] += 1
        elif op == "GetItem":
            (item,) = self.stored([params["Key"]])
            self._charge_item(
                "rru", params["Key"], read_units(item_size(item), consistent=bool(params.get("ConsistentRead")))
            )
        elif op == "BatchGetItem":
            unprocessed = parsed.get("UnprocessedKeys") or {}
            for table, spec in params["RequestItems"].items():
                skipped = {self._id(k) for k in (unprocessed.get(table) or {}).get("Keys", [])}
                read = [k for k in spec["Keys"] if self._id(k) not in skipped]
                for key, item in zip(read, self.stored(read)):  # each item rounded on its own (batch_read_units)
                    self._charge_item(
                        "rru", key, batch_read_units([item_size(item)], consistent=bool(spec.get("ConsistentRead")))
                    )
        elif op == "TransactGetItems":
            got = [t["Get"]["Key"] for t in params["TransactItems"]]
            for key, item in zip(got, self.stored(got)):
                self._charge_item("rru", key, read_units(item_size(item), consistent=True, transactional=True))
        elif op in ("Query", "Scan"):
            sizes, partition = self._examined(op, params)
            units = query_read_units(sizes, consistent=bool(params.get("ConsistentRead")))
            totals["rru"] += units
            if op == "Query" and partition is not None:
                index = next((i for i in self.indexes if i.name == params.get("IndexName")), None)
                place = index.name if index is not None and index.kind != "lsi" else ""  # a local index: the table's
                self.heat[self.label]["rru", "partition", place, partition] += units
        elif op == "SearchVectors":
            totals["search_vectors"] += 1

    def _charge_item(self, unit: str, key: dict, units: float) -> None:
        """Charge `units` ("rru" or "wru") at the item at `key` to the label, the item and its partition."""
        pk, sk = self._id(key)
        self.totals[self.label][unit] += units
        heat = self.heat[self.label]
        heat[unit, "item", pk, sk] += units
        heat[unit, "partition", "", pk] += units

    def _write_actions(self, op: str, params: dict) -> list[dict]:
        def key_of(item):
            return {k: item[k] for k in self.keys}

        if op == "PutItem":
            return [{"kind": "put", "key": key_of(params["Item"]), "new": params["Item"], "tx": False}]
        if op in ("UpdateItem", "DeleteItem"):
            return [{"kind": op.removesuffix("Item").lower(), "key": params["Key"], "tx": False}]
        if op == "BatchWriteItem":
            return [
                {"kind": "put", "key": key_of(r["PutRequest"]["Item"]), "new": r["PutRequest"]["Item"], "tx": False}
                if "PutRequest" in r
                else {"kind": "delete", "key": r["DeleteRequest"]["Key"], "tx": False}
                for requests in params["RequestItems"].values()
                for r in requests
            ]
        out = []
        for entry in params["TransactItems"]:
            ((kind, spec),) = entry.items()
            action = {"kind": {"Put": "put", "Update": "update", "Delete": "delete"}.get(kind, "check"), "tx": True}
            action["key"] = key_of(spec["Item"]) if kind == "Put" else spec["Key"]
            if kind == "Put":
                action["new"] = spec["Item"]
            out.append(action)
        return out

    def _charge_writes(self, op: str, actions: list[dict], parsed: dict, error: str | None, totals: Counter) -> None:
        if error and error not in ("ConditionalCheckFailedException", "TransactionCanceledException"):
            totals["errors"] += 1
            return
        if error:
            # Charged anyway (an upper bound for a cancelled transaction): the items stay as they were.
            totals["failed_conditions" if op != "TransactWriteItems" else "cancelled_transactions"] += 1
            for action in actions:
                size = max(item_size(action["before"]), item_size(action.get("new")) if action["kind"] == "put" else 0)
                self._charge_item("wru", action["key"], write_units(size, transactional=action["tx"]))
            return
        unprocessed = {
            self._id(
                {k: r["PutRequest"]["Item"][k] for k in self.keys} if "PutRequest" in r else r["DeleteRequest"]["Key"]
            )
            for requests in (parsed.get("UnprocessedItems") or {}).values()
            for r in requests
        }
        actions = [a for a in actions if self._id(a["key"]) not in unprocessed]
        updated = [a for a in actions if a["kind"] == "update"]
        for action, after in zip(updated, self.stored([a["key"] for a in updated])):
            action["after"] = after
        for action in actions:
            before = action["before"]
            after = {"put": action.get("new"), "update": action.get("after"), "delete": None, "check": before}[
                action["kind"]
            ]
            size = max(item_size(before), item_size(after))
            self._charge_item("wru", action["key"], write_units(size, transactional=action["tx"]))
            heat = self.heat[self.label]
            for index in self.indexes:
                writes = index_partition_writes(
                    index_entry(before, index, self.keys), index_entry(after, index, self.keys), index
                )
                totals[f"wru_{index.kind}"] += sum(units for _, units in writes)
                if index.kind == "vector":
                    continue
                for partition, units in writes:
                    # A local index's entries share their item's partition (and its 1,000 WRU/s).
                    heat["wru", "partition", "" if index.kind == "lsi" else index.name, partition] += units
            if before != after:  # a write that changes nothing leaves no stream record
                self._stream(action["key"], before, after)

    def _stream(self, key: dict, before: dict | None, after: dict | None) -> None:
        """The stream record of a write (the table's stream is NEW_IMAGE), shaped as Lambda delivers it."""
        with self.lock:
            number = str(10**20 + len(self.records))
            self.records.append(
                {
                    "eventID": f"cost-{number}",
                    "eventName": "INSERT" if before is None else "REMOVE" if after is None else "MODIFY",
                    "eventVersion": "1.1",
                    "eventSource": "aws:dynamodb",
                    "awsRegion": FAKE_AWS["AWS_REGION"],
                    "dynamodb": {
                        "ApproximateCreationDateTime": int(time.time()),
                        "Keys": lambda_json(key),
                        **({"NewImage": lambda_json(after)} if after is not None else {}),
                        "SequenceNumber": number,
                        "SizeBytes": item_size(after or before),
                        "StreamViewType": "NEW_IMAGE",
                    },
                    "eventSourceARN": f"arn:aws:dynamodb:{FAKE_AWS['AWS_REGION']}:123456789012:table/{self.table}"
                    "/stream/2026-01-01T00:00:00.000",
                }
            )

    def take_records(self) -> list[dict]:
        with self.lock:
            records, self.records = self.records, []
        return records

    def _examined(self, op: str, params: dict) -> tuple[list[int], str | None]:
        """Sizes of the items a Query or Scan page examined (index entries on an index), filter or not, and the
        partition key value a Query read (None when it examined nothing)."""
        kept = (
            "TableName",
            "IndexName",
            "KeyConditionExpression",
            "ExclusiveStartKey",
            "Limit",
            "ScanIndexForward",
            "ConsistentRead",
            "Segment",
            "TotalSegments",
        )
        request = {k: v for k, v in params.items() if k in kept}
        used = set(_KEY_TOKEN.findall(params.get("KeyConditionExpression", "")))
        for name in ("ExpressionAttributeNames", "ExpressionAttributeValues"):
            values = {k: v for k, v in (params.get(name) or {}).items() if k in used}
            if values:
                request[name] = values
        request["ProjectionExpression"] = ", ".join(f"#key{i}" for i in range(len(self.keys)))
        request["ExpressionAttributeNames"] = {
            **request.get("ExpressionAttributeNames", {}),
            **{f"#key{i}": k for i, k in enumerate(self.keys)},
        }
        page = getattr(self.plain, "query" if op == "Query" else "scan")(**request)
        index = next((i for i in self.indexes if i.name == params.get("IndexName")), None)
        full = [item for item in self.stored([{k: i[k] for k in self.keys} for i in page["Items"]]) if item]
        entries = [index_entry(item, index, self.keys) if index else item for item in full]
        partition = None
        if entries and entries[0] is not None:
            partition = _hash_value(entries[0], index) if index else self._id(entries[0])[0]
        return [item_size(entry) for entry in entries], partition


class S3Requests:
    """S3 requests a client makes, by `label` and operation, and the bytes it puts."""

    def __init__(self, client):
        self.label, self.requests, self.put_bytes = "setup", defaultdict(Counter), Counter()
        self.hooks = Hooks(client, middle={"before-parameter-build.s3": self._count})

    def _count(self, params, model, **_):
        self.requests[self.label][model.name] += 1
        if model.name == "PutObject":
            self.put_bytes[self.label] += body_size(params.get("Body") or b"")


def body_size(body: Any) -> int:
    """Bytes of an S3 body: text, bytes or a seekable file object (botocore turns bytes into one early)."""
    if isinstance(body, str):
        return len(body.encode())
    if isinstance(body, bytes | bytearray):
        return len(body)
    at = body.tell()
    size = body.seek(0, 2) - at
    body.seek(at)
    return size


# --- the in-process stack -----------------------------------------------------------------------------------------


@dataclass
class Invocations:
    """Billed milliseconds of each invocation, by function; API Gateway requests, by function."""

    billed: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    api: Counter = field(default_factory=Counter)
    wall_s: Counter = field(default_factory=Counter)


class Stack:
    """The template's handlers called in-process as API Gateway and the stream's event-source mappings would call
    them, metered: DynamoDB units, S3 requests, API requests and billed durations."""

    def __init__(self, clients: dict[str, Any]):
        from local.template import table_definition

        self.plain = own(clients["dynamodb"])
        # The handlers' requests, wherever their clients are made: metered at the door of the in-process AWS.
        self.capacity = Capacity(AWS, self.plain, table_definition(template()))
        self.s3 = S3Requests(AWS)
        self.clock = CallClock()
        self.hooks = [
            self.capacity.hooks,
            self.s3.hooks,
            self.clock.attach(AWS, "dynamodb"),
            self.clock.attach(AWS, "s3"),
        ]
        self.runs = Invocations()
        self.mappings = {
            name: StreamSettings.from_properties(template().functions[name].stream) for name in _STREAM_FUNCTIONS
        }
        self.metering = False

    def close(self) -> None:
        for hooks in self.hooks:
            hooks.detach()

    def label(self, name: str) -> None:
        self.capacity.label = self.s3.label = name

    def invoke(self, function: str, event: dict) -> dict:
        self.label(function if self.metering else "setup")
        inside, rounds = self.clock.reading()
        started = time.perf_counter()
        out = invoke(function, event)
        wall = time.perf_counter() - started
        inside_after, rounds_after = self.clock.reading()
        if self.metering:
            self.runs.billed[function].append(billed_ms(wall - (inside_after - inside), rounds_after - rounds))
            self.runs.wall_s[function] += wall
        self.label("setup")
        return out

    def http(self, method: str, url: str, body: Any = None) -> dict:
        """One API request through its handler; the answer's body, parsed."""
        function, event = http_event(method, url, body)
        out = self.invoke(function, event)
        assert out["statusCode"] < 300, out
        if self.metering:
            self.runs.api[function] += api_requests(
                len((event.get("body") or "").encode()), len(json.dumps(out, ensure_ascii=False).encode())
            )
        return json.loads(out["body"]) if out.get("body") else None

    def drain(self) -> None:
        """Deliver the table's stream to each mapping's function (filtered, in batches of its BatchSize) until it
        holds nothing new: what the consumers write may wake them again."""
        while records := self.capacity.take_records():
            for function, settings in self.mappings.items():
                wanted = [r for r in records if not settings.filters or any(matches(p, r) for p in settings.filters)]
                for start in range(0, len(wanted), settings.batch_size):
                    answer = self.invoke(function, {"Records": wanted[start : start + settings.batch_size]})
                    assert not (answer or {}).get("batchItemFailures"), (function, answer)

    def stored_bytes(self) -> int:
        """What the table stores, as DynamoDB bills storage: items and index entries, 100 bytes of overhead each."""
        total = 0
        for partition in list(moto_table(self.capacity.table).items.values()):
            for stored in list(partition.values()):
                item = {name: typed(v) for name, v in stored.attrs.items()}
                total += item_size(item) + 100
                for index in self.capacity.indexes:
                    entry = index_entry(item, index, self.capacity.keys)
                    total += item_size(entry) + 100 if entry is not None else 0
        return total


# --- workload -----------------------------------------------------------------------------------------------------


def batch_body(rng: random.Random, size: int, start: int, alice_share: float = 0.5) -> dict:
    """A batch of turns: alice states a fact among filler, the assistant answers at some length; runs of four.
    `alice_share`: the part of the messages that are alice's (half: the two take turns)."""
    messages = []
    for i in range(start, start + size):
        peer = PEERS[i % 2] if alice_share == 0.5 else PEERS[int((i + 1) * alice_share) == int(i * alice_share)]
        if peer == "alice":
            filler = " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 60)))
            text = f"{rng.choice(FACTS).format(w=rng.choice(WORDS))} {filler.capitalize()}."
        else:
            words = rng.randint(20, 120) if rng.random() < 0.7 else rng.randint(120, 300)
            text = " ".join(rng.choice(WORDS) for _ in range(words)).capitalize() + "."
        messages.append({"content": text, "peer_id": peer, "run_id": f"run-{i // 4}"})
    return {"messages": messages}


@contextmanager
def recorded_summaries() -> Iterator[list]:
    """The extractive summarizer's requests and answers, kept to be priced as LLM tokens after the run."""
    from precis.summaries.engines.extractive import ExtractiveEngine

    seen: list = []
    original = ExtractiveEngine.summarize

    def summarize(self, request):
        result = original(self, request)
        seen.append((request, result.text))
        return result

    ExtractiveEngine.summarize = summarize
    try:
        yield seen
    finally:
        ExtractiveEngine.summarize = original


def summary_tokens(seen: list) -> dict[str, int]:
    """LLM calls and tokens the `llm` summary engine would have spent on the same requests (output: the length of
    the extractive answer, under the same word cap)."""
    from precis.summaries.engines.prompt import prompt_tokens
    from precis.tokens import count_text

    return {
        "calls": len(seen),
        "input": sum(prompt_tokens(r) for r, _ in seen),
        "output": sum(count_text(text) for _, text in seen),
    }


def session_history(stack: Stack, session: str) -> list[dict]:
    """The session's messages in order, as the API lists them (unmetered)."""
    history: list[dict] = []
    page = pages = 1
    while page <= pages:
        answer = stack.http("POST", f"/v3/workspaces/{WS}/sessions/{session}/messages/list?page={page}&size=100", {})
        history += answer["items"]
        page, pages = page + 1, answer["pages"]
    return history


def derive_tokens(stack: Stack, sessions: list[str], post: int, batch_tokens: int) -> dict[str, int]:
    """LLM calls and input tokens the `llm` deriver would spend on these sessions, posted `post` messages at a time:
    after each post, the session's underived messages (every sender's) are extracted in one request once they hold
    `batch_tokens` (the session's end flushes the rest, as its quiet wake-up does), and the session's end refreshes
    each sender's card once (its cards wake-up; a session's conclusions are fewer than the 50 that would refresh it
    sooner): calls counted, the card prompts' tokens not."""
    from precis.memory.deriver import MAX_JOB_MESSAGES
    from precis.memory.engines import DeriveMessage, SessionRequest
    from precis.memory.engines.prompt import prompt_tokens

    def as_message(m: dict) -> DeriveMessage:
        return DeriveMessage(m["id"], m["seq"], m["peer_id"], m.get("content") or "", m["created_at"])

    extractions = tokens = cards = 0
    for session in sessions:
        history = session_history(stack, session)
        pending: list[dict] = []
        for end in range(post, len(history) + post, post):
            pending += history[end - post : end]
            flush = end >= len(history)
            while pending and (flush or sum(m["token_count"] for m in pending) >= batch_tokens):
                job, pending = pending[:MAX_JOB_MESSAGES], pending[MAX_JOB_MESSAGES:]
                before = history[job[0]["seq"] - 2] if job[0]["seq"] > 1 else None
                context = as_message(before) if before and before["peer_id"] != job[0]["peer_id"] else None
                peers = tuple(sorted({m["peer_id"] for m in job}))
                tokens += prompt_tokens(SessionRequest(peers, [as_message(m) for m in job], context))
                extractions += 1
        cards += len({m["peer_id"] for m in history})
    return {"calls": extractions + cards, "extractions": extractions, "input": tokens}


# --- scenarios ----------------------------------------------------------------------------------------------------


def _components(stack: Stack, units: int) -> dict[str, Any]:
    """Dollars per million units (messages or reads) by component, and what they came from."""
    functions = template().functions
    raw = template().raw
    defaults = raw["Globals"]["Function"]
    per = 1e6 / units
    capacity = [c for label, c in stack.capacity.totals.items() if label != "setup"]
    rru = sum(c["rru"] for c in capacity)
    wru_table = sum(c["wru"] for c in capacity)
    wru_index = {kind: sum(c[f"wru_{kind}"] for c in capacity) for kind in ("lsi", "gsi", "vector")}
    wru = wru_table + sum(wru_index.values())
    by_function = {}
    lambda_total = 0.0
    for name, billed in stack.runs.billed.items():
        props = raw["Resources"][name]["Properties"]
        memory = int(props.get("MemorySize", defaults["MemorySize"]))
        arch = (props.get("Architectures") or defaults.get("Architectures") or ["x86_64"])[0]
        dollars = lambda_dollars(memory, billed, arch)
        lambda_total += dollars
        c = stack.capacity.totals.get(name, Counter())
        by_function[name] = {
            "memory_mb": memory,
            "architecture": arch,
            "invocations_per_million": len(billed) * per,
            "mean_billed_ms": sum(billed) / len(billed),
            "lambda_per_million": dollars * per,
            "mean_in_process_ms": stack.runs.wall_s[name] * 1000 / len(billed),
            "rru_per_unit": c["rru"] / units,
            "wru_per_unit": (c["wru"] + c["wru_lsi"] + c["wru_gsi"] + c["wru_vector"]) / units,
            "requests": {k.removeprefix("op:"): v for k, v in c.items() if k.startswith("op:")},
            "s3_requests": dict(stack.s3.requests.get(name, {})),
            "search_vectors_per_unit": c["search_vectors"] / units,
            "failed_conditions": c["failed_conditions"],
            "cancelled_transactions": c["cancelled_transactions"],
            "errors": c["errors"],
            "timeout_s": functions[name].timeout,
        }
    s3_requests = sum((Counter(v) for k, v in stack.s3.requests.items() if k != "setup"), Counter())
    api = sum(stack.runs.api.values())
    dynamodb = (rru * PRICES["dynamodb_per_million_rru"] + wru * PRICES["dynamodb_per_million_wru"]) / 1e6 * per
    out = {
        "units": units,
        "rru_per_unit": rru / units,
        "wru_per_unit": wru / units,
        "wru_table_per_unit": wru_table / units,
        "wru_index_per_unit": {k: v / units for k, v in wru_index.items()},
        "dynamodb": dynamodb,
        "lambda": lambda_total * per,
        "api_gateway": api * PRICES["api_http_per_million_requests"] / 1e6 * per,
        "api_requests_per_unit": api / units,
        "s3": s3_dollars(s3_requests) * per,
        "s3_requests_per_unit": {k: v / units for k, v in s3_requests.items()},
        "search_vectors_per_unit": sum(c["search_vectors"] for c in capacity) / units,
        "functions": by_function,
    }
    out["total"] = out["dynamodb"] + out["lambda"] + out["api_gateway"] + out["s3"]
    out["hot"] = hot_spots(stack.capacity, units)
    return out


def hot_spots(capacity: Capacity, units: int, top: int = 5) -> dict[str, Any]:
    """The items and partitions that took the most units per unit of work (message or read), hottest first, and the
    rate one workspace sustains before the hottest of them throttles (`sustainable_rate`)."""
    heat = sum((c for label, c in capacity.heat.items() if label != "setup"), Counter())

    def ranked(unit: str, where: str) -> list[dict[str, Any]]:
        rows = sorted(((v, k[2:]) for k, v in heat.items() if k[:2] == (unit, where)), reverse=True)[:top]
        return [{"key": list(key), "kind": key_kind(where, *key), "per_unit": v / units} for v, key in rows]

    out = {f"{unit}_{where}": ranked(unit, where) for unit in ("wru", "rru") for where in ("item", "partition")}
    # The search index's own (its fresh shards, segments, manifest and texts), whatever else is hotter.
    index_heat = Counter({k: v for k, v in heat.items() if any(m in k[3] or m in k[2] for m in _INDEX_MARKS)})
    for unit in ("wru", "rru"):
        for where in ("item", "partition"):
            best = max(((v, k[2:]) for k, v in index_heat.items() if k[:2] == (unit, where)), default=None)
            out[f"index_{unit}_{where}"] = (
                {"key": list(best[1]), "kind": key_kind(where, *best[1]), "per_unit": best[0] / units} if best else None
            )
    rate, bound = sustainable_rate(
        *(out[name][0]["per_unit"] if out[name] else 0.0 for name in ("wru_item", "wru_partition", "rru_partition"))
    )
    out["sustainable_per_s"], out["bound_by"] = rate, bound
    return out


_INDEX_MARKS = ("#XF#", "#XG#", "#XM", "#XD")  # the search index's partitions (store/keys.py)


# What the bench's keys stand for, to name the hot ones: its own names (workspace, sessions, peers, shards, segments,
# ids) are replaced by their roles. The bench builds no key; these only label the ones the handlers wrote.
_KEY_ROLES = (
    (re.compile(rf"^WS#{WS}(?=#|$)"), "WS#{ws}"),
    (re.compile(r"#S#[^#]+"), "#S#{session}"),
    (re.compile(r"#P#[^#]+"), "#P#{peer}"),
    (re.compile(r"#XF#[0-9]+$"), "#XF#{shard}"),
    (re.compile(r"#XG#[^#]+$"), "#XG#{segment}"),
    (re.compile(r"#C#[^#]+#[^#]+"), "#C#{observer}#{observed}"),
    (re.compile(r"#CID#[^#]+"), "#CID#{id}"),
    (re.compile(r"#IDEM#.*"), "#IDEM#{key}"),
)
_PARTITION_KINDS = {
    "WS#{ws}": "workspace (peers, sessions)",
    "WS#{ws}#XF#{shard}": "fresh index shard",
    "WS#{ws}#XG#{segment}": "index segment",
    "WS#{ws}#XM": "index manifest",
    "WS#{ws}#S#{session}": "session (messages, cursors)",
    "WS#{ws}#S#{session}#XD": "session indexed texts",
    "WS#{ws}#S#{session}#MV": "session message vectors",
    "WS#{ws}#P#{peer}": "peer's sessions",
    "WS#{ws}#C#{observer}#{observed}": "collection (conclusions)",
}
# A segment's items by their sort key's first letter (text_index.Segment.build).
_SEGMENT_ITEMS = {"H": "header", "S": "session list", "D": "doc table", "T": "term bucket", "W": "long term's chunk"}


def key_shape(pk: str) -> str:
    """A partition key with the bench's names replaced by their roles (`WS#bench#XF#03` -> `WS#{ws}#XF#{shard}`)."""
    for pattern, role in _KEY_ROLES:
        pk = pattern.sub(role, pk)
    return pk


def key_kind(where: str, first: str, second: str) -> str:
    """A readable name for a hot item (PK, SK) or partition (index, value): "index manifest", "fresh index shard"."""
    if where == "partition" and first:  # a global index's partition: named by the index
        return f"{first} index: {re.sub(rf'(?<![^#]){WS}(?![^#])', '{ws}', key_shape(second))}"
    shape = key_shape(first if where == "item" else second)
    kind = _PARTITION_KINDS.get(shape, shape)
    if where == "item":
        if shape == "WS#{ws}#XM":
            return kind  # (one item)
        if shape == "WS#{ws}#XF#{shard}":
            return f"{kind}: a post's unit"
        if shape == "WS#{ws}#XG#{segment}":
            return f"{kind}: {_SEGMENT_ITEMS.get(second[:1], second)}"
        return f"{kind}: {re.sub(r'[0-9]+', '{n}', second.split('#')[0])}"
    return kind


def ingest(batch: int, rng: random.Random) -> dict[str, Any]:
    """Sessions of SESSION_MESSAGES posted in batches of `batch`, with the work the stream makes of them; after the
    smallest batch size, the context reads too (on a session it wrote)."""
    from precis.settings import get_settings

    # The table's stream is built from the writes the meter sees (Capacity._stream): moto's own stream would
    # serialize every image it records, vectors included, which makes up most of the run's time.
    with moto(stream=False) as clients, recorded_summaries() as summaries:
        stack = Stack(clients)
        try:
            stack.http("POST", "/v3/workspaces", {"id": WS})
            stack.http("POST", f"/v3/workspaces/{WS}/sessions/warm/messages", batch_body(rng, 4, 0))
            stack.drain()  # every function's module imported and its clients made: the runs below are warm
            summaries.clear()
            stored_before = stack.stored_bytes()
            sessions = [f"s{i}" for i in range(SESSIONS)]
            stack.metering = True
            for session in sessions:
                for start in range(0, SESSION_MESSAGES, batch):
                    stack.http(
                        "POST", f"/v3/workspaces/{WS}/sessions/{session}/messages", batch_body(rng, batch, start)
                    )
                    stack.drain()
            stack.metering = False
            messages = SESSIONS * SESSION_MESSAGES
            result = _components(stack, messages)
            result["stored_bytes_per_message"] = (stack.stored_bytes() - stored_before) / messages
            result["s3_put_bytes_per_message"] = (
                sum(v for k, v in stack.s3.put_bytes.items() if k != "setup") / messages
            )
            llm = {
                "summarizer": summary_tokens(summaries),
                "deriver": derive_tokens(stack, sessions, batch, get_settings().derive_batch_tokens),
            }
            result["llm"] = {
                **llm,
                "per_million": {
                    part: {k: v * 1e6 / messages for k, v in counts.items()} for part, counts in llm.items()
                },
            }
            if batch == CONTEXT_BATCH:
                result["context"] = contexts(stack)
        finally:
            stack.close()
    return result


def contexts(stack: Stack) -> dict[str, dict[str, Any]]:
    """Context reads on the first session of an ingest run, metered per case."""
    out = {}
    url = f"/v3/workspaces/{WS}/sessions/s0/context"
    for tokens, peer in CONTEXT_CASES:
        query = f"?tokens={tokens}" + (f"&peer_target={peer}" if peer else "")
        stack.http("GET", url + query)  # warm: first use of this path (threads, caches)
        stack.capacity.totals.clear()
        stack.s3.requests.clear()
        stack.runs = Invocations()
        stack.metering = True
        answer = None
        for _ in range(READS):
            answer = stack.http("GET", url + query)
        stack.metering = False
        result = _components(stack, READS)
        result["answer"] = {
            "messages": len(answer["messages"]),
            "summary": (answer.get("summary") or {}).get("summary_type"),
            "representation": bool(answer.get("peer_representation")),
            "card": bool(answer.get("peer_card")),
            "token_count": answer.get("token_count"),
        }
        out[f"{tokens}{'+peer' if peer else ''}"] = result
    return out


def run() -> dict:
    rng = random.Random(16)
    started = time.perf_counter()
    results = {}
    for batch in BATCHES:
        results[f"ingest_{batch}"] = ingest(batch, rng)
        print(
            f"  ingest, batches of {batch}: {SESSIONS * SESSION_MESSAGES} messages "
            f"({time.perf_counter() - started:.0f} s)",
            flush=True,
        )
    reads = results[f"ingest_{CONTEXT_BATCH}"].pop("context")
    rows = [[f"ingest, batch of {batch} (per message)", *_money(results[f"ingest_{batch}"])] for batch in BATCHES]
    for (tokens, peer), (name, r) in zip(CONTEXT_CASES, reads.items()):
        results[f"context_{name}"] = r
        rows.append([f"context {tokens // 1000}k{' + peer_target' if peer else ''} (per read)", *_money(r)])
    print_table(
        "What Precis costs in AWS: $ per million messages ingested, per million context reads",
        ["scenario", "RRU/op", "WRU/op", "DynamoDB $", "Lambda $", "API GW $", "S3 $", "total $", "x API GW"],
        rows,
    )
    print(_prices_line(results))
    _print_breakdown(results)
    _print_hot(results)
    _print_notes(results)
    path = write_json(
        "cost",
        {
            "prices": PRICES,
            "assumed_latency_ms": ASSUMED_LATENCY_MS,
            "sessions": SESSIONS,
            "session_messages": SESSION_MESSAGES,
            "reads_per_case": READS,
            "results": results,
        },
    )
    print(f"wrote {path.relative_to(ROOT)}")
    return results


def _money(r: dict) -> list:
    return [
        r["rru_per_unit"],
        r["wru_per_unit"],
        r["dynamodb"],
        r["lambda"],
        r["api_gateway"],
        r["s3"],
        r["total"],
        r["total"] / r["api_gateway"],
    ]


def _prices_line(results: dict) -> str:
    p = PRICES
    architectures = sorted({f["architecture"] for r in results.values() for f in r["functions"].values()})
    lambda_price = ", ".join(f"{a} ${p['lambda_per_gb_s'][a]:.10f}/GB-s" for a in architectures)
    return (
        f"prices ({p['region']}, on-demand, {p['as_of']}): DynamoDB ${p['dynamodb_per_million_wru']}/M WRU, "
        f"${p['dynamodb_per_million_rru']}/M RRU; Lambda {lambda_price} + "
        f"${p['lambda_per_million_requests']:.2f}/M requests; API Gateway HTTP "
        f"${p['api_http_per_million_requests']:.2f}/M requests (per {p['api_http_increment_bytes'] // 1024} KB); "
        f"S3 PUT ${p['s3_put_per_thousand']}/1k, GET ${p['s3_get_per_thousand']}/1k. Assumed round trips: "
        + ", ".join(f"{k} {v:g} ms" for k, v in ASSUMED_LATENCY_MS.items())
    )


def _print_breakdown(results: dict) -> None:
    ingests = [(batch, results[f"ingest_{batch}"]) for batch in BATCHES]
    print_table(
        "... ingestion by function: per million messages, and DynamoDB units and requests per message",
        ["batch", "function", "MB", "invocations", "billed ms", "Lambda $", "RRU", "WRU", "requests"],
        [
            [
                batch,
                name.removesuffix("Function"),
                f["memory_mb"],
                f["invocations_per_million"],
                f["mean_billed_ms"],
                f["lambda_per_million"],
                f["rru_per_unit"],
                f["wru_per_unit"],
                sum(f["requests"].values()) / r["units"],
            ]
            for batch, r in ingests
            for name, f in r["functions"].items()
        ],
    )
    print_table(
        "... ingestion's write units per message, by where they land, and what it leaves stored",
        [
            "batch",
            "table",
            "local index",
            "global indexes",
            "vector indexes*",
            "SearchVectors",
            "stored B/msg",
            "S3 B/msg",
        ],
        [
            [
                batch,
                r["wru_table_per_unit"],
                *r["wru_index_per_unit"].values(),
                r["search_vectors_per_unit"],
                r["stored_bytes_per_message"],
                r["s3_put_bytes_per_message"],
            ]
            for batch, r in ingests
        ],
    )
    print_table(
        "... LLM calls and tokens per million messages if the llm engines ran (not priced; see notes)",
        ["batch", "summaries", "input tokens", "output tokens", "extractions", "input tokens", "card updates"],
        [
            [batch, s["calls"], s["input"], s["output"], d["extractions"], d["input"], d["calls"] - d["extractions"]]
            for batch, r in ingests
            for s, d in [(r["llm"]["per_million"]["summarizer"], r["llm"]["per_million"]["deriver"])]
        ],
    )


def _print_hot(results: dict) -> None:
    rows = []
    for batch in BATCHES:
        hot = results[f"ingest_{batch}"]["hot"]
        item, partition = hot["wru_item"][0], hot["wru_partition"][0]
        reads = hot["rru_partition"][0] if hot["rru_partition"] else {"kind": "-", "per_unit": 0.0}
        rows.append(
            [
                batch,
                item["kind"],
                item["per_unit"],
                PARTITION_WRU_S / item["per_unit"],
                partition["kind"],
                partition["per_unit"],
                reads["kind"],
                reads["per_unit"],
                hot["sustainable_per_s"],
                hot["bound_by"],
            ]
        )
    print_table(
        "... one workspace's hottest item and partition: units per message, and the messages/s it sustains before "
        f"DynamoDB throttles it ({PARTITION_WRU_S:,} WRU/s per item or partition, {PARTITION_RRU_S:,} RRU/s per "
        "partition)",
        [
            "post",
            "hottest item (writes)",
            "WRU/msg",
            "its msg/s",
            "hottest partition (writes)",
            "WRU/msg",
            "hottest partition (reads)",
            "RRU/msg",
            "msg/s",
            "bound by",
        ],
        rows,
    )
    index_rows = []
    for batch in BATCHES:
        hot = results[f"ingest_{batch}"]["hot"]
        item, partition, reads = hot["index_wru_item"], hot["index_wru_partition"], hot["index_rru_partition"]
        rate, bound = sustainable_rate(*((x or {}).get("per_unit", 0.0) for x in (item, partition, reads)))
        index_rows.append(
            [
                batch,
                *((x or {}).get(f, "-") for x in (item, partition, reads) for f in ("kind", "per_unit")),
                rate,
                bound,
            ]
        )
    print_table(
        "... the search index's own hottest item and partition (its fresh shards, segments, manifest, texts): units "
        "per message, and the messages/s they alone allow",
        [
            "post",
            "item (writes)",
            "WRU/msg",
            "partition (writes)",
            "WRU/msg",
            "partition (reads)",
            "RRU/msg",
            "msg/s",
            "bound by",
        ],
        index_rows,
    )
    print(
        "Hot spots: a write's units land on its item and its partition (a local index's entries in the same "
        "partition), a global index's on that index's partition; vector indexes are left out. A partition here is "
        "one partition key: the table has a local index, so DynamoDB keeps each key's item collection in one "
        "partition (no split for heat; a single item never splits either). Posts are sequential and the stream is "
        "drained after each, so the deriver merges a fresh index shard as soon as it holds 100 messages: under "
        "concurrent posts a shard holds more between merges (a merge takes up to 99 posts' items at once) and the "
        "index manifest changes once a merge or compaction, whatever the posts' rate; each post writes one item to "
        "one of its workspace's 8 fresh shards."
    )


def _print_notes(results: dict) -> None:
    first = results[f"ingest_{CONTEXT_BATCH}"]
    stored_gb = first["stored_bytes_per_message"] * 1e6 / 1024**3
    s3_gb = first["s3_put_bytes_per_message"] * 1e6 / 1024**3
    window = template().functions["SummarizeFunction"].stream
    print(
        f"Sessions of {SESSION_MESSAGES} messages, each message's summaries and derived memory included; "
        f"context reads: mean of {READS}."
    )
    print(
        "LLM: summaries as the llm engine would be asked for them (its prompt; output as long as the extractive "
        "answer); extractions batched as the llm deriver batches them (a session's messages, 2,048 tokens), a card "
        "update per sender at the session's end (counted, not sized); embeddings: hashed (offline), none bought."
    )
    print(
        f"Storage, not in the totals: per million messages DynamoDB keeps {stored_gb:,.2f} GB with its indexes "
        f"(${stored_gb * PRICES['dynamodb_storage_per_gb_month']:,.2f}/month, PITR "
        f"${stored_gb * PRICES['dynamodb_pitr_per_gb_month']:,.2f}/month more) and S3 {s3_gb:,.3f} GB of audit "
        f"records (${s3_gb * PRICES['s3_storage_per_gb_month']:,.3f}/month)."
    )
    print(
        f"Stream consumers were invoked once per post, as when posts to a shard come more than its batching window "
        f"({window['MaximumBatchingWindowInSeconds']} s) apart; under load a batch holds up to "
        f"{window['BatchSize']} records, which cuts invocations (${PRICES['lambda_per_million_requests']:.2f} per "
        "million) but hardly GB-s. Lambda's reads of the stream (GetRecords) are free."
    )
    print(
        "* Vector indexes are priced as global indexes (a write per entry changed, 1 WRU per KB); SearchVectors "
        "requests are counted, not priced. Index writes inside a transaction cost what they cost outside one "
        "(the 2x is the table's)."
    )
    print(
        "Left out: data transfer out, CloudWatch Logs and metrics, X-Ray traces, Secrets Manager (read once per "
        "cold start), cold starts, the deriver's 5-minute flush and dreams, free tiers, LLM and embedding bills."
    )
