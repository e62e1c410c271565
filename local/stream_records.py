"""A DynamoDB stream record as Lambda's event-source mapping delivers it, and Lambda's event filtering of it.

Shared by the stream pollers (local.poller), which deliver the records, and the local moto (local.moto_storage),
which applies a poller's filter before it writes a GetRecords page: neither imports the other.
"""

from __future__ import annotations

import base64
from typing import Any

from local.template import LocalNames

REGION = LocalNames().region


# ---------------------------------------------------------------- event filtering


def _matches_value(matcher: Any, value: Any, present: bool) -> bool:
    if isinstance(matcher, dict):
        ((op, arg),) = matcher.items()
        if op == "exists":
            return present == bool(arg)
        if not present:
            return False
        if op == "prefix":
            return isinstance(value, str) and value.startswith(arg)
        if op == "anything-but":
            return value not in (arg if isinstance(arg, list) else [arg])
        raise ValueError(f"unsupported filter operator {op!r}")
    return present and value == matcher


def matches(pattern: dict[str, Any], event: Any) -> bool:
    """Whether `event` matches a Lambda event-filtering `pattern` (nested keys, exact values, prefix,
    exists, anything-but); an array value in the event matches if any element does."""
    if not isinstance(event, dict):
        return False
    for key, rule in pattern.items():
        present = key in event
        value = event.get(key)
        if isinstance(rule, dict):
            # An absent object matches only a rule all of whose leaves ask for absence ({"exists": false}): exists
            # matching works on leaves, so `{"purged_at": {"S": [{"exists": false}]}}` holds when purged_at is absent.
            if not (matches(rule, value) if present else _wants_absence(rule)):
                return False
            continue
        values = value if isinstance(value, list) else [value]
        if not any(_matches_value(m, v, present) for m in rule for v in values):
            return False
    return True


def _wants_absence(rule: Any) -> bool:
    if isinstance(rule, dict):
        return all(_wants_absence(r) for r in rule.values())
    return all(isinstance(m, dict) and m == {"exists": False} for m in rule)


# ---------------------------------------------------------------- records


def _attribute_json(value: dict[str, Any]) -> dict[str, Any]:
    """A typed AttributeValue as Lambda's JSON has it (boto3 hands binary back as bytes)."""
    ((kind, v),) = value.items()
    if kind == "B":
        return {"B": base64.b64encode(v).decode()}
    if kind == "BS":
        return {"BS": [base64.b64encode(b).decode() for b in v]}
    if kind == "M":
        return {"M": {k: _attribute_json(x) for k, x in v.items()}}
    if kind == "L":
        return {"L": [_attribute_json(x) for x in v]}
    return value


def lambda_record(record: dict[str, Any], stream_arn: str) -> dict[str, Any]:
    """A GetRecords record (as boto3 parses it) shaped as Lambda delivers it to the function."""
    src = record["dynamodb"]
    images = {
        key: {name: _attribute_json(v) for name, v in src[key].items()}
        for key in ("Keys", "NewImage", "OldImage")
        if key in src
    }
    return _lambda_shaped(record, int(src["ApproximateCreationDateTime"].timestamp()), images, stream_arn)


def _lambda_shaped(record: dict[str, Any], created: int, images: dict[str, Any], stream_arn: str) -> dict[str, Any]:
    src = record["dynamodb"]
    ddb: dict[str, Any] = {"ApproximateCreationDateTime": created, **images}
    ddb.update(SequenceNumber=src["SequenceNumber"], SizeBytes=src["SizeBytes"], StreamViewType=src["StreamViewType"])
    return {
        "eventID": record["eventID"],
        "eventName": record["eventName"],
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": record.get("awsRegion", REGION),
        "dynamodb": ddb,
        "eventSourceARN": stream_arn,
    }


def lambda_record_json(record: dict[str, Any], stream_arn: str) -> dict[str, Any]:
    """A GetRecords record as its JSON has it (`_RecordsReader`) shaped as Lambda delivers it: the same as
    `lambda_record` gives for botocore's parse of it."""
    src = record["dynamodb"]
    images = {key: src[key] for key in ("Keys", "NewImage", "OldImage") if key in src}
    return _lambda_shaped(record, int(src["ApproximateCreationDateTime"]), images, stream_arn)
