"""DynamoDB's Time to Live, locally: moto keeps expired items for ever (it records the table's TTL setting and never
acts on it), so this sweeper does what the TTL service does: it deletes the items whose TTL attribute (a Number, epoch
seconds) has passed, and says which stream records it made, so that they carry the service's `userIdentity`
(type "Service", principal "dynamodb.amazonaws.com", as AWS's stream records of TTL deletions do).

AWS deletes an expired item within days, not at once; here a sweep deletes every item expired by the clock it is
given, so a test decides when the service comes (the delay is the test's, bounded by when it sweeps). `make dev` runs
`TtlService`: a sweep every PRECIS_LOCAL_TTL_S seconds (600 by default), so an item goes within that much of expiring,
far sooner than on AWS; code must not count on either delay.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

SERVICE_IDENTITY = {"type": "Service", "principalId": "dynamodb.amazonaws.com"}
_FIVE_YEARS_S = 5 * 365 * 86_400  # AWS leaves alone an item whose TTL is more than five years in the past
DEFAULT_PERIOD_S = 600.0  # a Scan of the whole table: rare enough to cost a busy local stack nothing
log = logging.getLogger("precis.local.ttl")


class TtlPeriodError(ValueError):
    """PRECIS_LOCAL_TTL_S is not a period the stack can use; the message names it."""


def period_from_env(env: Mapping[str, str]) -> float:
    """PRECIS_LOCAL_TTL_S: seconds between the local TTL service's sweeps, a number above 0 (default 600)."""
    raw = env.get("PRECIS_LOCAL_TTL_S", "").strip()
    if not raw:
        return DEFAULT_PERIOD_S
    try:
        period = float(raw)
    except ValueError:
        period = -1.0
    if not 0 < period < float("inf"):
        raise TtlPeriodError(f"PRECIS_LOCAL_TTL_S: a number of seconds above 0, got {raw!r}")
    return period


class TtlSweeper:
    """Deletes a table's expired items as the TTL service does; `identity(record)` is the userIdentity of a stream
    record this sweeper's delete made (None for any other record)."""

    def __init__(self, client: Any, table: str, clock: Callable[[], float] = time.time) -> None:
        self.client, self.table, self.clock = client, table, clock
        spec = client.describe_time_to_live(TableName=table)["TimeToLiveDescription"]
        self.attribute = spec.get("AttributeName") if spec.get("TimeToLiveStatus") == "ENABLED" else None
        self._removed: set[tuple[str, str]] = set()

    def sweep(self) -> list[dict[str, Any]]:
        """Delete every item expired by now (each on the condition it still is: an item written again in between
        stays); the keys deleted."""
        if self.attribute is None:
            return []
        now = int(self.clock())
        request: dict[str, Any] = {
            "TableName": self.table,
            "FilterExpression": "attribute_exists(#t)",
            "ExpressionAttributeNames": {"#t": self.attribute},
            "ProjectionExpression": "PK, SK, #t",
        }
        deleted = []
        while True:
            page = self.client.scan(**request)
            for item in page["Items"]:
                # Only a Number (epoch seconds) expires, and not one over five years old (AWS's rule); the comparison
                # is made here: moto's filter compares a String with a Number by raising.
                value = item[self.attribute].get("N")
                if value is None or not now - _FIVE_YEARS_S <= float(value) <= now:
                    continue
                key = {"PK": item["PK"], "SK": item["SK"]}
                # Noted before the delete: a stream poller may read its REMOVE record before delete_item returns.
                named = (key["PK"]["S"], key["SK"]["S"])
                fresh = named not in self._removed
                self._removed.add(named)
                try:
                    self.client.delete_item(
                        TableName=self.table,
                        Key=key,
                        ConditionExpression="#t <= :now",
                        ExpressionAttributeNames={"#t": self.attribute},
                        ExpressionAttributeValues={":now": {"N": str(now)}},
                    )
                except self.client.exceptions.ConditionalCheckFailedException:
                    if fresh:
                        self._removed.discard(named)
                    continue
                deleted.append(key)
            if "LastEvaluatedKey" not in page:
                return deleted
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def identity(self, record: dict[str, Any]) -> dict[str, str] | None:
        """The userIdentity of a stream record (GetRecords' shape) if this sweeper's delete made it."""
        keys = record.get("dynamodb", {}).get("Keys", {})
        if record.get("eventName") != "REMOVE" or "PK" not in keys or "SK" not in keys:
            return None
        return SERVICE_IDENTITY if (keys["PK"]["S"], keys["SK"]["S"]) in self._removed else None

    def stamped(self, record: dict[str, Any]) -> dict[str, Any]:
        """`record` with the service's userIdentity when this sweeper's delete made it."""
        identity = self.identity(record)
        return {**record, "userIdentity": identity} if identity else record


class TtlService:
    """The TTL service of `make dev`: a thread that sweeps the table every `every_s` seconds; `stamp` gives the stream
    pollers the service's identity for the REMOVE records its deletes made."""

    def __init__(self, client: Any, table: str, every_s: float = DEFAULT_PERIOD_S) -> None:
        self.sweeper = TtlSweeper(client, table)
        self.every_s = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ttl-service", daemon=True)

    def stamp(self, record: dict[str, Any]) -> dict[str, Any]:
        return self.sweeper.stamped(record)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout: float = 3.0) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                deleted = self.sweeper.sweep()
            except Exception:  # noqa: BLE001 - the service outlives one failed sweep (moto busy, a throttle)
                log.exception("TTL sweep")
                continue
            if deleted:
                log.info("TTL: %d expired item(s) deleted", len(deleted))
