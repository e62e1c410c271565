"""DynamoDB's Time to Live, locally: moto keeps expired items for ever (it records the table's TTL setting and never
acts on it), so this sweeper does what the TTL service does: it deletes the items whose TTL attribute (a Number, epoch
seconds) has passed, and says which stream records it made, so that they carry the service's `userIdentity`
(type "Service", principal "dynamodb.amazonaws.com", as AWS's stream records of TTL deletions do).

AWS deletes an expired item within days, not at once; here a sweep deletes every item expired by the clock it is
given, so a test decides when the service comes (the delay is the test's, bounded by when it sweeps).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

SERVICE_IDENTITY = {"type": "Service", "principalId": "dynamodb.amazonaws.com"}
_FIVE_YEARS_S = 5 * 365 * 86_400  # AWS leaves alone an item whose TTL is more than five years in the past


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
                try:
                    self.client.delete_item(
                        TableName=self.table,
                        Key=key,
                        ConditionExpression="#t <= :now",
                        ExpressionAttributeNames={"#t": self.attribute},
                        ExpressionAttributeValues={":now": {"N": str(now)}},
                    )
                except self.client.exceptions.ConditionalCheckFailedException:
                    continue
                self._removed.add((key["PK"]["S"], key["SK"]["S"]))
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
