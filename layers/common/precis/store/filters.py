"""Honcho-style list filters, evaluated against a resource's JSON shape (pure)."""

from __future__ import annotations

from typing import Any

from precis.errors import Invalid

_LOGICAL = {"AND", "OR", "NOT"}
_OPERATORS = {"gte", "lte", "gt", "lt", "ne", "in", "contains", "icontains"}


def _compare(op: str, actual: Any, expected: Any) -> bool:
    try:
        if op == "ne":
            return bool(actual != expected)
        if op == "in":
            if not isinstance(expected, list):
                raise Invalid(f"filters: 'in' takes a list, got {type(expected).__name__}")
            return bool(actual in expected)
        if op == "contains":
            return bool(expected in actual) if isinstance(actual, (str, list, dict)) else False
        if op == "icontains":
            return isinstance(actual, str) and str(expected).lower() in actual.lower()
        if actual is None:
            return False
        return bool(
            {"gte": actual >= expected, "lte": actual <= expected, "gt": actual > expected, "lt": actual < expected}[op]
        )
    except TypeError:
        return False


def _match_value(condition: Any, actual: Any, path: str) -> bool:
    if condition == "*":
        return True
    if isinstance(condition, dict) and condition and set(condition) <= _OPERATORS:
        return all(_compare(op, actual, expected) for op, expected in condition.items())
    if isinstance(condition, dict) and isinstance(actual, dict):
        return all(_match_value(v, actual.get(k), f"{path}.{k}") for k, v in condition.items())
    return bool(actual == condition)


def matches(filters: dict[str, Any] | None, record: dict[str, Any]) -> bool:
    """Whether `record` passes `filters` (equality on fields and metadata keys, AND/OR/NOT, operators)."""
    if not filters:
        return True
    if not isinstance(filters, dict):
        raise Invalid("filters: must be an object")
    for key, condition in filters.items():
        if key in _LOGICAL:
            clauses = condition if isinstance(condition, list) else [condition]
            if not all(isinstance(c, dict) for c in clauses):
                raise Invalid(f"filters: {key} takes a list of filter objects")
            results = [matches(c, record) for c in clauses]
            ok = all(results) if key == "AND" else any(results) if key == "OR" else not any(results)
        else:
            ok = _match_value(condition, record.get(key), key)
        if not ok:
            return False
    return True
