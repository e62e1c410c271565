"""Repairs to moto's DynamoDB, so the local stack and the tests behave like DynamoDB.

- Writes and queries cost what they touch (local/moto_storage.py): a transaction rolls back from an undo log instead
  of deep copies of its tables (which also kept moto's rollback from swapping the table's stream shard for a copy
  nobody reads), and a Query reads the partition or index value it names.
- moto accepts a BatchWriteItem of any number of requests, and two requests for one item when they differ (a put and
  a delete of it, or two puts with other attributes): DynamoDB refuses more than 25 requests and any item named
  twice, with a ValidationException, writing nothing. (moto compared whole requests by serializing every item to JSON:
  most of a batch of vector items' time.)
- moto accepts a transaction of any size; DynamoDB refuses one whose items add up to more than 4 MB
  ("The aggregate size of the items in the transaction cannot exceed 4 MB", TransactWriteItems API reference)
  with a ValidationException, before writing anything.
- moto's in-process backend is not thread-safe; DynamoDB requests are served one at a time, as the moto server
  serves them.
- moto 5.2.5 accepts a table's VectorIndexes and ignores them, and knows no SearchVectors. The indexes given to
  CreateTable (and UpdateTable's VectorIndexUpdates) are kept on the table and described; writes are checked as
  DynamoDB checks them; SearchVectors answers from per-partition matrices (local/moto_vectors.py, see
  `search_vectors`) that writes reach late, as DynamoDB's replication does, takes TopK 1-100 only, and refuses an
  index UpdateTable created on a table with items while it backfills.
- moto's BatchWriteItem writes its requests one by one, so one refused (a vector of the wrong size) leaves the
  earlier ones written; DynamoDB writes none of them.
"""

from __future__ import annotations

import copy as _copy
import math
import re
import threading
from array import array
from collections.abc import Callable
from typing import Any

import moto.backend_index as _backend_index
import moto.dynamodb.urls as _dynamodb_urls
from moto.core.responses import ActionResult
from moto.dynamodb.exceptions import MockValidationException, ResourceNotFoundException
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.dynamo_type import DynamoType, Item
from moto.dynamodb.models.table import Table
from moto.dynamodb.models.utilities import bytesize
from moto.dynamodb.parsing.reserved_keywords import ReservedKeywords
from moto.dynamodb.responses import DynamoHandler, DynamoResult, ProjectionExpressionParser, validate_put_has_empty_keys

from local import moto_sqs, moto_storage, moto_vectors
from local.moto_vectors import numbers as _numbers
from local.moto_vectors import search_schema as _search_schema
from local.moto_vectors import vector_indexes

MAX_TRANSACTION_BYTES = 4 * 1024 * 1024
_undoable_transaction = moto_storage.transact_write_items


def _attributes_size(attributes: dict[str, Any]) -> int:
    """Bytes of `attributes` as DynamoDB counts an item: names plus values (moto's own item-size rule)."""
    return sum(
        bytesize(name) + (moto_storage.PackedNumbers.of(value) or DynamoType(value)).size()
        for name, value in attributes.items()
    )  # a vector sized from its strings (a DynamoType per number)


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
    body = moto_storage.request_bytes(transact_items)  # a request of at most 4 MB carries at most 4 MB of items
    if (body is None or body > MAX_TRANSACTION_BYTES) and transaction_size(transact_items) > MAX_TRANSACTION_BYTES:
        raise MockValidationException("Transaction request cannot be larger than 4 MB")
    return _undoable_transaction(self, transact_items)


# ---------------------------------------------------------------- vector indexes and SearchVectors

# SearchVectors goes to its own host (botocore's endpoint rules: IsSearchOperation), which mock_aws must answer too.
_SEARCH_URLS = (r"https?://search-dynamodb\.(.+)\.amazonaws\.com", r"https?://(.+)\.search-ddb\.(.+)\.amazonaws\.com")
_F32_MAX = 3.4028234663852886e38
_TOKEN = re.compile(r"\s*(?:(?P<value>:[A-Za-z0-9_]+)|(?P<name>#?[A-Za-z0-9_.\[\]]+)|(?P<op><>|<=|>=|[=<>(),]))")
_original_create_table = DynamoHandler.create_table
_original_update_table = DynamoHandler.update_table
_original_validate_table_creation = DynamoHandler._validate_table_creation
_original_describe = Table.describe


def _check_vector_index(index: dict[str, Any], attribute_types: dict[str, str]) -> None:
    """Refuse a vector index DynamoDB refuses: its search schema attributes must be declared, each once."""
    names = [e["AttributeName"] for e in index.get("SearchSchema") or []]
    missing = [n for n in names if n not in attribute_types]
    if missing:
        raise MockValidationException(
            "One or more parameter values were invalid: Some index key attributes are not defined in "
            f"AttributeDefinitions. Keys: [{', '.join(missing)}], AttributeDefinitions: "
            f"[{', '.join(sorted(attribute_types))}]"
        )
    if len(_search_schema(index, "HASH")) > 1:
        raise MockValidationException(
            f"One or more parameter values were invalid: vector index {index['IndexName']} has more than one HASH"
        )
    if len(set(names)) != len(names) or index["VectorAttribute"]["AttributeName"] in names:
        raise MockValidationException(
            f"One or more parameter values were invalid: vector index {index['IndexName']} names an attribute twice"
        )


def _key_attributes(body: dict[str, Any]) -> set[str]:
    schemas = [body.get("KeySchema") or []]
    schemas += [
        i["KeySchema"] for kind in ("GlobalSecondaryIndexes", "LocalSecondaryIndexes") for i in body.get(kind) or []
    ]
    return {key["AttributeName"] for schema in schemas for key in schema}


def _validate_table_creation(self: DynamoHandler, **kwargs: Any) -> None:
    # Attributes only a vector index uses are declared too (DynamoDB requires it); moto would call them unused.
    indexes = self.body.get("VectorIndexes") or []
    only_vector = {n for i in indexes for n in _search_schema(i, "HASH") + _search_schema(i, "INLINE_FILTER")}
    only_vector -= _key_attributes(self.body)
    kwargs["attr"] = [a for a in kwargs["attr"] if a["AttributeName"] not in only_vector]
    return _original_validate_table_creation(self, **kwargs)


def _create_table(self: DynamoHandler) -> Any:
    indexes = self.body.get("VectorIndexes") or []
    types = {a["AttributeName"]: a["AttributeType"] for a in self.body.get("AttributeDefinitions") or []}
    for index in indexes:
        _check_vector_index(index, types)
    if len({i["IndexName"] for i in indexes}) != len(indexes):
        raise MockValidationException("One or more parameter values were invalid: Duplicate index name")
    _original_create_table(self)
    table = self.dynamodb_backend.get_table(self.body["TableName"])
    table.vector_indexes = _copy.deepcopy(indexes)
    return DynamoResult(table.describe())


def _update_table(self: DynamoHandler) -> Any:
    _original_update_table(self)
    table = self.dynamodb_backend.get_table(self.body["TableName"])
    indexes = list(vector_indexes(table))
    types = {a["AttributeName"]: a["AttributeType"] for a in table.attr}
    backfills = []
    for update in self.body.get("VectorIndexUpdates") or []:
        if "Create" in update:
            index = update["Create"]
            if any(i["IndexName"] == index["IndexName"] for i in indexes):
                raise MockValidationException(
                    f"One or more parameter values were invalid: Index {index['IndexName']} already exists"
                )
            _check_vector_index(index, types)
            indexes.append(_copy.deepcopy(index))
            if table.items:  # DynamoDB backfills an index added to a table that holds items
                backfills.append(index["IndexName"])
        elif "Delete" in update:
            name = update["Delete"]["IndexName"]
            if not any(i["IndexName"] == name for i in indexes):
                raise ResourceNotFoundException(f"Requested resource not found: Index: {name} not found")
            indexes = [i for i in indexes if i["IndexName"] != name]
    table.vector_indexes = indexes
    for name in backfills:
        moto_vectors.start_backfill(table, name)
    return DynamoResult(table.describe())


def _describe(self: Table, base_key: str = "TableDescription") -> dict[str, Any]:
    description = _original_describe(self, base_key)
    if vector_indexes(self):
        description[base_key]["VectorIndexes"] = [
            {
                **_copy.deepcopy(i),
                **_index_status(self, i["IndexName"]),
                "IndexSizeBytes": 0,
                "ItemCount": 0,
                "IndexArn": f"{self.table_arn}/index/{i['IndexName']}",
            }
            for i in vector_indexes(self)
        ]
    return description


def _index_status(table: Table, index_name: str) -> dict[str, Any]:
    if moto_vectors.backfilling(table, index_name):
        return {"IndexStatus": "CREATING", "Backfilling": True}
    return {"IndexStatus": "ACTIVE", "Backfilling": False}


def _check_vector(numbers: list[float] | None, dimensions: int, what: str) -> list[float]:
    if numbers is None:
        raise MockValidationException(f"One or more parameter values were invalid: {what} must be a list of numbers")
    if len(numbers) != dimensions:
        raise MockValidationException(
            f"One or more parameter values were invalid: {what} has {len(numbers)} dimensions, the vector index "
            f"expects {dimensions}"
        )
    if any(not math.isfinite(x) or abs(x) > _F32_MAX for x in numbers):
        raise MockValidationException(
            f"One or more parameter values were invalid: {what} holds a number outside 32-bit float range"
        )
    return list(array("f", numbers))  # the index keeps f32


def _put_item(self: Table, item_attrs: dict[str, Any], *args: Any, **kwargs: Any) -> Item:
    # DynamoDB refuses a write whose vector or search schema attributes do not fit the table's vector indexes.
    types = {a["AttributeName"]: a["AttributeType"] for a in self.attr}
    checked: set[tuple[str, int]] = set()  # indexes on one attribute (the text's terms) check it once
    for index in vector_indexes(self):
        vector = index["VectorAttribute"]["AttributeName"]
        if vector in item_attrs and (vector, index["Dimensions"]) not in checked:
            _check_vector(_numbers(item_attrs[vector]), index["Dimensions"], f"vector attribute {vector}")
            checked.add((vector, index["Dimensions"]))
        for name in _search_schema(index, "HASH") + _search_schema(index, "INLINE_FILTER"):
            if name in item_attrs and next(iter(item_attrs[name])) != types[name]:
                raise MockValidationException(
                    "One or more parameter values were invalid: Type mismatch for Index Key "
                    f"{name} Expected: {types[name]} Actual: {next(iter(item_attrs[name]))} IndexName: "
                    f"{index['IndexName']}"
                )
    return moto_storage.put_item(self, item_attrs, *args, **kwargs)


def parse_search_condition(
    expression: str | None, names: dict[str, str], values: dict[str, Any], allowed: set[str]
) -> tuple[dict[str, list[DynamoType]], set[str], set[str]]:
    """The equalities of a SearchConditionExpression: attribute -> values it must equal (all of them), plus the
    expression attribute names and values it used. Only `=` between an attribute of `allowed` (top level) and a
    value, joined by AND and grouped by parentheses, is accepted: anything else is DynamoDB's ValidationException."""
    equalities: dict[str, list[DynamoType]] = {}
    used_names: set[str] = set()
    used_values: set[str] = set()
    if expression is None:
        return equalities, used_names, used_values
    if not expression.strip():
        raise MockValidationException("Invalid SearchConditionExpression: The expression can not be empty;")
    tokens, position, text = [], 0, expression.rstrip()
    while position < len(text):
        match = _TOKEN.match(text, position)
        if not match:
            raise MockValidationException(
                f'Invalid SearchConditionExpression: Syntax error; token: "{text[position:].strip()[:1]}"'
            )
        kind = match.lastgroup
        word = match.group(kind)
        tokens.append(("and", word) if kind == "name" and word.upper() == "AND" else (kind, word))
        position = match.end()

    def refuse(reason: str) -> MockValidationException:
        return MockValidationException(f"Invalid SearchConditionExpression: {reason}")

    def operand(token: tuple[str, str]) -> tuple[str, Any]:
        kind, word = token
        if kind == "value":
            if word not in values:
                raise refuse(
                    f"An expression attribute value used in expression is not defined; attribute value: {word}"
                )
            used_values.add(word)
            return "value", DynamoType(values[word])
        if kind != "name":
            raise refuse(
                "only the equality operator (=) between a search schema attribute and a value, joined by "
                "AND, is supported"
            )
        if word.startswith("#"):
            if word not in names:
                raise refuse(
                    f"An expression attribute name used in the document path is not defined; attribute name: {word}"
                )
            used_names.add(word)
            attribute = names[word]
        else:
            if word.upper() in ReservedKeywords.get_reserved_keywords():
                raise refuse(f"Attribute name is a reserved keyword; reserved keyword: {word}")
            if "." in word or "[" in word:
                raise refuse("only top-level attributes of the search schema can be referenced")
            attribute = word
        if attribute not in allowed:
            raise refuse(f"attribute {attribute} is not a HASH or INLINE_FILTER attribute of the vector index")
        return "name", attribute

    def conjunction(at: int, depth: int) -> int:
        while True:
            if at < len(tokens) and tokens[at] == ("op", "("):
                at = conjunction(at + 1, depth + 1)
                if at >= len(tokens) or tokens[at] != ("op", ")"):
                    raise refuse("Syntax error; unbalanced parentheses")
                at += 1
            else:
                if at + 3 > len(tokens):
                    raise refuse("Syntax error; the expression ends too early")
                left, op, right = tokens[at : at + 3]
                if op != ("op", "="):
                    raise refuse(
                        "only the equality operator (=) between a search schema attribute and a value, "
                        "joined by AND, is supported"
                    )
                sides = dict([operand(left), operand(right)]) if {left[0], right[0]} == {"name", "value"} else None
                if sides is None:
                    raise refuse("an equality compares one search schema attribute with one value")
                equalities.setdefault(sides["name"], []).append(sides["value"])
                at += 3
            if at < len(tokens) and tokens[at][0] == "and":
                at += 1
                continue
            if at == len(tokens) or (depth and tokens[at] == ("op", ")")):
                return at
            raise refuse(
                "only the equality operator (=) between a search schema attribute and a value, joined by "
                "AND, is supported"
            )

    conjunction(0, 0)
    return equalities, used_names, used_values


def _vector_index(table: Table, index_name: str) -> dict[str, Any]:
    index = next((i for i in vector_indexes(table) if i["IndexName"] == index_name), None)
    if index is None:
        raise MockValidationException(f"The table does not have the specified index: {index_name}")
    return index


Nearest = Callable[[Table, dict[str, Any], list[float], int, dict[str, list[DynamoType]]], list[tuple[Item, float]]]


def search_vectors(
    self: DynamoDBBackend,
    table_name: str,
    index_name: str,
    search_vector: list[Any],
    top_k: int,
    equalities: dict[str, list[DynamoType]],
    projection: list[list[str]],
) -> list[tuple[dict[str, Any], float]]:
    """SearchVectors: the `top_k` items of the index nearest to `search_vector` (smallest COSINE or EUCLIDEAN score,
    largest DOT_PRODUCT) whose search schema attributes equal the values of `equalities` (parse_search_condition's);
    each as (its projected attributes, its score). It reads the partition the HASH attribute's value names, from
    matrices the table's writes reach `lag_s` after they are made; exact unless `approximate` (moto_vectors)."""
    return _search_vectors(
        self, table_name, index_name, search_vector, top_k, equalities, projection, moto_vectors.nearest
    )


def search_vectors_reference(
    self: DynamoDBBackend,
    table_name: str,
    index_name: str,
    search_vector: list[Any],
    top_k: int,
    equalities: dict[str, list[DynamoType]],
    projection: list[list[str]],
) -> list[tuple[dict[str, Any], float]]:
    """`search_vectors` by brute force over the whole table as it is now, as it was first written: what the tests
    compare it with (once the index has settled)."""
    return _search_vectors(
        self, table_name, index_name, search_vector, top_k, equalities, projection, moto_vectors.nearest_reference
    )


def _search_vectors(
    self: DynamoDBBackend,
    table_name: str,
    index_name: str,
    search_vector: list[Any],
    top_k: int,
    equalities: dict[str, list[DynamoType]],
    projection: list[list[str]],
    nearest: Nearest,
) -> list[tuple[dict[str, Any], float]]:
    table = self.get_table(table_name)
    index = _vector_index(table, index_name)
    if not 1 <= top_k <= moto_vectors.MAX_TOP_K:  # (botocore refuses below 1 itself)
        raise MockValidationException(f"Provided TopK value '{top_k}' is out of valid range")
    if nearest is moto_vectors.nearest and moto_vectors.backfilling(table, index_name):
        raise MockValidationException(moto_vectors.BACKFILLING.format(index_name))
    query = _check_vector(_numbers({"L": search_vector}), index["Dimensions"], "SearchVector")
    missing = [h for h in _search_schema(index, "HASH") if h not in equalities]
    if missing:
        raise MockValidationException(
            f"Invalid SearchConditionExpression: the HASH attribute {missing[0]} of vector index {index_name} must be "
            "given a value with ="
        )
    projected = _projected_names(table, index)
    results = []
    for item, score in nearest(table, index, query, top_k, equalities):
        attributes = (item.project(projection) if projection else item).to_json()["Attributes"]
        if projected is not None:
            attributes = {k: v for k, v in attributes.items() if k in projected}
        results.append((attributes, score))
    return results


def _projected_names(table: Table, index: dict[str, Any]) -> set[str] | None:
    """The attributes a vector index holds (None: all of them)."""
    projection = index.get("Projection") or {}
    if projection.get("ProjectionType") == "ALL":
        return None
    names = {k["AttributeName"] for k in table.schema} | {index["VectorAttribute"]["AttributeName"]}
    names |= {e["AttributeName"] for e in index.get("SearchSchema") or []}
    return names | set(projection.get("NonKeyAttributes") or [])


def _search_vectors_action(self: DynamoHandler) -> Any:
    body = self.body
    names = body.get("ExpressionAttributeNames") or {}
    values = self._get_expr_attr_values()
    index = _vector_index(self.dynamodb_backend.get_table(body["TableName"]), body["IndexName"])
    parser = ProjectionExpressionParser(self._get_projection_expression(), names)
    projection = parser.parse()
    equalities, used_names, used_values = parse_search_condition(
        body.get("SearchConditionExpression"),
        names,
        values,
        set(_search_schema(index, "HASH") + _search_schema(index, "INLINE_FILTER")),
    )
    # As in every DynamoDB request, each expression attribute name and value given must be used.
    for kind, unused in (
        ("Names", set(names) - used_names - set(parser.expr_attr_names_found)),
        ("Values", set(values) - used_values),
    ):
        if unused:
            keys = ", ".join(sorted(unused))
            raise MockValidationException(
                f"Value provided in ExpressionAttribute{kind} unused in expressions: keys: {{{keys}}}"
            )
    results = self.dynamodb_backend.search_vectors(
        body["TableName"], body["IndexName"], body["SearchVector"], int(body["TopK"]), equalities, projection
    )
    return DynamoResult({"SearchResults": [{"Item": item, "Score": score} for item, score in results]})


def _route_search_host() -> None:
    routed = {p.pattern for service, p in _backend_index.backend_url_patterns if service == "dynamodb"}
    for pattern in _SEARCH_URLS:
        if pattern not in _dynamodb_urls.url_bases:
            _dynamodb_urls.url_bases.append(pattern)
        if pattern not in routed:
            _backend_index.backend_url_patterns.append(("dynamodb", re.compile(pattern)))


MAX_BATCH_WRITES = 25
_BATCH_TOO_LARGE = (
    "1 validation error detected: Value at 'requestItems' failed to satisfy constraint: Map value must "
    "satisfy constraint: [Member must have length less than or equal to 25, Member must have length "
    "greater than or equal to 1]"
)


def _batch_write_item(self: DynamoHandler) -> Any:
    """moto's BatchWriteItem, with DynamoDB's refusals: more than 25 requests, or one item named twice."""
    batches = self.body["RequestItems"]
    if not 1 <= sum(map(len, batches.values())) <= MAX_BATCH_WRITES:
        raise MockValidationException(_BATCH_TOO_LARGE)
    puts, deletes, named = [], [], set()
    for table_name, requests in batches.items():
        table = self.dynamodb_backend.get_table(table_name)
        key_names = [n for n in (table.hash_key_attr, table.range_key_attr) if n]
        for request in requests:
            ((kind, body),) = request.items()
            attributes = body["Item"] if kind == "PutRequest" else body["Key"]
            if kind == "PutRequest":
                validate_put_has_empty_keys(
                    attributes,
                    table,
                    custom_error_msg=(
                        "One or more parameter values are not valid. The AttributeValue for a key attribute cannot "
                        "contain an empty string value. Key: {}"
                    ),
                )
                puts.append((table_name, attributes))
            else:
                deletes.append((table_name, attributes))
            key = (table_name, *(repr(sorted((attributes.get(n) or {}).items())) for n in key_names))
            if key in named:
                raise MockValidationException("Provided list of item keys contains duplicates")
            named.add(key)
    named = [(self.dynamodb_backend.get_table(name), attributes) for name, attributes in puts + deletes]
    with moto_storage.all_or_nothing(named):  # a request refused half way (a vector too long) undoes the others
        for table_name, item in puts:
            self.dynamodb_backend.put_item(table_name, item)
        for table_name, key in deletes:
            self.dynamodb_backend.delete_item(table_name, key)
    consumed = [{"TableName": name, "CapacityUnits": 1.0, "Table": {"CapacityUnits": 1.0}} for name in batches]
    return ActionResult({"ConsumedCapacity": consumed, "ItemCollectionMetrics": {}, "UnprocessedItems": {}})


_serial = threading.RLock()
_call_action = DynamoHandler.call_action


def _serialized_call_action(self: DynamoHandler) -> Any:
    """One DynamoDB request at a time in this process, as the moto server already does: moto's backend is not
    thread-safe (a transaction deep-copies a table another thread is writing: "dictionary changed size during
    iteration"), and the functions run their work in threads (precis.concurrency), as they do on Lambda."""
    with _serial:
        return _call_action(self)


# The moto these repairs were written against: they replace moto internals (handlers, backends, models) by name, and
# another version may have moved or changed them. A new moto is taken by raising this after the differential tests
# (tests/local) pass on it.
MOTO_VERSION = "5.2.5"


def check_moto_version(installed: str | None = None) -> None:
    """RuntimeError unless the installed moto is the one the repairs were written for."""
    from importlib.metadata import version

    installed = installed or version("moto")
    if installed != MOTO_VERSION:
        raise RuntimeError(
            f"local/ replaces moto {MOTO_VERSION}'s internals, but moto {installed} is installed: pin "
            f"moto=={MOTO_VERSION} (requirements-dev.txt), or check the repairs against {installed} "
            f"(tests/local) and raise MOTO_VERSION"
        )


_version_checked = False


def install() -> None:
    """Apply the repairs to this process's moto (idempotent): call it before using mock_aws or a moto server."""
    global _version_checked
    if not _version_checked:
        check_moto_version()
        _version_checked = True
    moto_storage.install()
    moto_storage.listen(moto_vectors.on_write)
    moto_sqs.install()  # SQS's 12 hours of visibility from the receive, and the stack's delay scale
    # In-process (the tests) the index's clock stands still until a test moves it or settles the index: no write
    # is searchable by luck of timing. A moto server of the local stack sets its own (local/moto_backend.py).
    moto_vectors.configure(moto_vectors.Replication())
    DynamoHandler.call_action = _serialized_call_action
    DynamoDBBackend.transact_write_items = _transact_write_items
    DynamoHandler._validate_table_creation = _validate_table_creation
    DynamoHandler.create_table = _create_table
    DynamoHandler.update_table = _update_table
    DynamoHandler.search_vectors = _search_vectors_action
    DynamoHandler.batch_write_item = _batch_write_item
    DynamoDBBackend.search_vectors = search_vectors
    Table.describe = _describe
    Table.put_item = _put_item
    _route_search_host()
