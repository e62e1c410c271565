"""A workspace's model usage: tokens by day, role and model (docs/design.md, "Usage").

An invocation counts its model calls in memory (`precis.llm.meter`) and writes them here once, as it ends (`metered`):
one UpdateItem ADD per (workspace, day, role, model) it touched, to one of `keys.USAGE_SHARDS` items chosen at random,
so a workspace's concurrent invocations never all write the same item. A month is one partition: its reader sums the
shards of each (day, role, model) in one bounded Query. The items expire through the table's TTL a year after their
month (`RETAIN_DAYS`), and a workspace's delete takes those of the months still kept.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, date, datetime, timedelta
from typing import TypedDict

from aws_lambda_powertools.metrics import MetricUnit
from botocore.exceptions import ClientError

from precis import concurrency
from precis.llm.meter import Key, Meter, Spend, metering
from precis.store import keys
from precis.store.db import Db, projection, query_all, query_first, to_item
from precis.store.records import delete_keys

log = logging.getLogger("precis.store.usage")
RETAIN_DAYS = 400  # past the end of the item's month: a year of months, and the one before, stay readable
MONTH_ITEMS_MAX = 6_000  # items one month's read takes (31 days x 6 roles x a few models x 8 shards fit): bounded
MAX_DAYS = 92  # the widest range one read answers: at most 4 month partitions


# (names escaped: DynamoDB reserves many words)
_NAMES = {
    "#n": "calls",
    "#i": "input_tokens",
    "#c": "cached_input_tokens",
    "#o": "output_tokens",
    "#k": "kind",
    "#x": "expires_at",
}


class Row(TypedDict):
    day: str
    role: str
    model: str
    calls: int
    input_tokens: int
    cached_input_tokens: int
    output_tokens: int


def write(db: Db, spent: dict[Key, Spend], *, shard: Callable[[int], int] = random.randrange) -> int:
    """Add `spent` to the usage items, one UpdateItem per key; how many keys could not be written (logged: usage is
    an account of work already done, never a reason to fail it)."""
    failed = 0
    for key, spend in spent.items():
        month_end = _month_after(date.fromisoformat(key.day))
        expires = int(datetime.combine(month_end, datetime.min.time(), UTC).timestamp()) + RETAIN_DAYS * 86_400
        try:
            db.client.update_item(
                TableName=db.table,
                Key=to_item(keys.usage(key.workspace, key.day, key.role, key.model, shard(keys.USAGE_SHARDS))),
                UpdateExpression="ADD #n :n, #i :i, #c :c, #o :o SET #k = :kind, #x = if_not_exists(#x, :x)",
                ExpressionAttributeNames=_NAMES,
                ExpressionAttributeValues=to_item(
                    {
                        ":n": spend.calls,
                        ":i": spend.input_tokens,
                        ":c": spend.cached_input_tokens,
                        ":o": spend.output_tokens,
                        ":kind": "usage",
                        ":x": expires,
                    }
                ),
            )
        except ClientError as exc:
            failed += 1
            log.error("usage not written for %s: %s", key, exc)
    return failed


def publish(spent: dict[Key, Spend]) -> None:
    """CloudWatch metrics of `spent`: calls and tokens by role and model (no workspace: a dimension per tenant would be
    a metric per tenant)."""
    by: dict[tuple[str, str], Spend] = {}
    for key, spend in spent.items():
        by.setdefault((key.role, key.model), Spend()).add(spend)
    for (role, model), spend in sorted(by.items()):
        concurrency.add_dimensioned(
            {"role": role, "model": model},
            {
                "ModelCalls": spend.calls,
                "InputTokens": spend.input_tokens,
                "CachedInputTokens": spend.cached_input_tokens,
                "OutputTokens": spend.output_tokens,
            },
        )


@contextmanager
def metered(db: Callable[[], Db], meter: Meter | None = None) -> Iterator[Meter]:
    """Count the model calls made inside (precis.llm.meter), then write and publish them once; `db` is asked for only
    when there is something to write."""
    with metering(meter) as counting:
        try:
            yield counting
        finally:
            spent = counting.take()
            if spent:
                publish(spent)
                if write(db(), spent):
                    concurrency.add_metric(name="UsageWritesFailed", unit=MetricUnit.Count, value=1)


def read(db: Db, ws: str, first: date, last: date) -> tuple[list[Row], bool]:
    """The workspace's usage from day `first` to `last` (inclusive, at most MAX_DAYS), each (day, role, model)'s
    shards summed, in that order; and whether a month held more items than one read takes (then some are left out)."""
    rows: dict[tuple[str, str, str], Row] = {}
    capped = False
    for month in _months(first, last):
        items = query_first(
            db,
            MONTH_ITEMS_MAX + 1,
            KeyConditionExpression="PK = :pk AND SK BETWEEN :a AND :b",
            ExpressionAttributeValues=to_item(
                {":pk": keys.usage_pk(ws, month), ":a": max(first.isoformat(), month), ":b": last.isoformat() + "#~"}
            ),
        )
        capped = capped or len(items) > MONTH_ITEMS_MAX
        for item in items[:MONTH_ITEMS_MAX]:
            day, role, model = keys.parse_usage_sk(item["SK"])
            row = rows.setdefault(
                (day, role, model),
                Row(day=day, role=role, model=model, calls=0, input_tokens=0, cached_input_tokens=0, output_tokens=0),
            )
            row["calls"] += int(item.get("calls", 0))
            row["input_tokens"] += int(item.get("input_tokens", 0))
            row["cached_input_tokens"] += int(item.get("cached_input_tokens", 0))
            row["output_tokens"] += int(item.get("output_tokens", 0))
    return [rows[k] for k in sorted(rows)], capped


def month_tokens(db: Db, ws: str, day: date) -> int:
    """The tokens (input and output) the workspace spent in `day`'s month up to and including `day`."""
    rows, _capped = read(db, ws, day.replace(day=1), day)
    return sum(r["input_tokens"] + r["output_tokens"] for r in rows)


def delete_workspace(db: Db, ws: str, today: date) -> int:
    """Delete the workspace's usage of the months its items may still live (older ones have expired); how many."""
    first = today - timedelta(days=RETAIN_DAYS + 31)
    months = _months(first.replace(day=1), today)
    found = [
        item
        for month in months
        for item in query_all(
            db,
            KeyConditionExpression="PK = :pk",
            ExpressionAttributeValues=to_item({":pk": keys.usage_pk(ws, month)}),
            **projection(("PK", "SK")),
        )
    ]
    return delete_keys(db, ({"PK": i["PK"], "SK": i["SK"]} for i in found))


def _months(first: date, last: date) -> list[str]:
    """The months (YYYY-MM) from `first`'s to `last`'s."""
    months, at = [], first.replace(day=1)
    while at <= last:
        months.append(at.isoformat()[:7])
        at = _month_after(at)
    return months


def _month_after(day: date) -> date:
    return date(day.year + day.month // 12, day.month % 12 + 1, 1)
