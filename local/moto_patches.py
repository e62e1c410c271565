"""Repairs to moto's DynamoDB TransactWriteItems, so the local stack and the tests behave like DynamoDB.

- A cancelled transaction (a lost seq race, a peer that already exists) makes moto restore deep copies of
  the tables, stream shard included: every stream reader then holds an iterator on a shard nobody writes to
  any more, and summaries silently stop. After a rollback the live shard is put back, without the records of
  the rolled-back writes (DynamoDB emits none for a cancelled transaction).
- moto backs a table up once per *item* of a transaction (a 100-message batch copies the table 100 times);
  it is backed up once per transaction instead. The backup is used exactly as before.
- moto accepts a transaction of any size; DynamoDB refuses one whose items add up to more than 4 MB
  ("The aggregate size of the items in the transaction cannot exceed 4 MB", TransactWriteItems API reference)
  with a ValidationException, before writing anything.
"""

from __future__ import annotations

import copy as _copy
import threading
from typing import Any

import moto.dynamodb.models as _backend_module
from moto.dynamodb.exceptions import MockValidationException
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.dynamo_type import DynamoType
from moto.dynamodb.models.table import Table
from moto.dynamodb.models.utilities import bytesize

MAX_TRANSACTION_BYTES = 4 * 1024 * 1024
_local = threading.local()
_original = DynamoDBBackend.transact_write_items


class _CopyOncePerTransaction:
    """Stands in for `copy` inside moto's DynamoDB backend: a table is deep-copied once per transaction."""

    def __getattr__(self, name: str) -> Any:
        return getattr(_copy, name)

    @staticmethod
    def deepcopy(obj: Any, memo: dict | None = None) -> Any:
        backups = getattr(_local, "backups", None)
        if backups is None or not isinstance(obj, Table):
            return _copy.deepcopy(obj, memo)
        if id(obj) not in backups:
            backups[id(obj)] = _copy.deepcopy(obj)
        return backups[id(obj)]


def _attributes_size(attributes: dict[str, Any]) -> int:
    """Bytes of `attributes` as DynamoDB counts an item: names plus values (moto's own item-size rule)."""
    return sum(bytesize(name) + DynamoType(value).size() for name, value in attributes.items())


def transaction_size(transact_items: list[dict[str, Any]]) -> int:
    """The aggregate size of the items a TransactWriteItems request carries: each Put's item, and each other
    action's key and expression values."""
    total = 0
    for action in transact_items:
        for kind, op in action.items():
            if kind == "Put":
                total += _attributes_size(op.get("Item") or {})
            else:
                total += _attributes_size(op.get("Key") or {})
                total += _attributes_size(op.get("ExpressionAttributeValues") or {})
    return total


def _transact_write_items(self: DynamoDBBackend, transact_items: list[dict[str, Any]]) -> None:
    if transaction_size(transact_items) > MAX_TRANSACTION_BYTES:
        raise MockValidationException("Transaction request cannot be larger than 4 MB")
    live = {name: (table.stream_shard, len(table.stream_shard.items))
            for name, table in self.tables.items() if table.stream_shard is not None}
    _local.backups = {}
    try:
        return _original(self, transact_items)
    except Exception:
        for name, (shard, length) in live.items():
            table = self.tables.get(name)
            if table is not None and table.stream_shard is not shard:
                del shard.items[length:]
                shard.table, table.stream_shard = table, shard
        raise
    finally:
        _local.backups = None


def install() -> None:
    """Apply the repairs to this process's moto (idempotent): call it before using mock_aws or a moto server."""
    DynamoDBBackend.transact_write_items = _transact_write_items
    _backend_module.copy = _CopyOncePerTransaction()
