"""The table and bucket handles, created once per cold start, and plain-value (de)serialization."""

from __future__ import annotations

import gc
import random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Executor, wait
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from typing import TYPE_CHECKING, Any, TypedDict, cast, overload

from botocore.exceptions import ClientError

from precis.errors import Throttled
from precis.settings import get_settings

_THROTTLING = {
    "ThrottlingException",
    "ProvisionedThroughputExceededException",
    "RequestLimitExceeded",
    "ThrottlingError",
}


if TYPE_CHECKING:  # the published stubs (requirements-dev.txt): for the type checker only
    from types_boto3_dynamodb.client import DynamoDBClient
    from types_boto3_dynamodb.type_defs import (
        KeysAndAttributesOutputTypeDef,
        KeysAndAttributesTypeDef,
        TransactWriteItemTypeDef,
    )
    from types_boto3_s3.client import S3Client


@dataclass
class Db:
    client: DynamoDBClient
    s3: S3Client
    table: str
    bucket: str


SERVICES = ("dynamodb", "s3", "sqs", "events")  # events: only a stack with a bus (precis.events) makes its client


def _session() -> Any:
    """A botocore session whose data loader knows it needs only SERVICES.

    botocore checks a service name against a listing of every service it ships (400-odd directories, a stat of
    each version's files: ~10 ms per kind of data file, twice per cold start) before it loads the one model asked
    for. Precis asks for four it ships with; a name botocore lacked would still fail, as DataNotFoundError.
    """
    import os

    from botocore.loaders import Loader
    from botocore.session import get_session

    class KnownServices(Loader):
        def list_available_services(self, type_name: str) -> list[str]:
            return list(SERVICES)

    session = get_session()
    paths = session.get_config_variable("data_path")  # AWS_DATA_PATH, as botocore's own loader reads it
    extra = [os.path.expanduser(os.path.expandvars(p)) for p in paths.split(os.pathsep)] if paths else []
    session.register_component("data_loader", KnownServices(extra_search_paths=extra))
    return session


@lru_cache(maxsize=1)
def get_db() -> Db:
    """Clients for the configured table and bucket (botocore honours AWS_ENDPOINT_URL for the local stack).

    Made by botocore itself, not boto3: `import boto3` also imports s3transfer and boto3's resource layer (~15 ms
    of every cold start), none of which Precis uses; a boto3 client is this same botocore client.
    """
    from botocore.config import Config

    settings = get_settings()
    # No client-side validation: DynamoDB checks every request itself, and walking a batch of vectors' AttributeValues
    # in Python (tens of thousands of them) cost more than the request.
    config = Config(
        retries={"mode": "standard", "max_attempts": 4},
        max_pool_connections=32,
        connect_timeout=2,
        read_timeout=10,
        parameter_validation=False,
    )
    with _no_collection():
        session = _session()
        return Db(
            client=attribute_values_as_they_are(session.create_client("dynamodb", config=config)),
            s3=session.create_client("s3", config=config),
            table=settings.table_name,
            bucket=settings.bucket_name,
        )


def attribute_values_as_they_are(client: Any) -> Any:
    """`client` (botocore's DynamoDB client) serializing each AttributeValue as the JSON it already is.

    botocore walks every AttributeValue through the service model (a shape lookup and a method dispatch per member):
    a 256-number vector costs ~1 ms to serialize, six times its `json.dumps`, and a batch of thirty messages' search
    items spent a third of its request there. An AttributeValue's wire form is the value itself, but for binaries
    (base64): `_wire` writes that directly. Every other shape is still botocore's.
    """
    from botocore.serialize import JSONSerializer

    inner = client._serializer  # set by botocore's client creation (no public way to choose a serializer)
    if type(inner) is not JSONSerializer:  # a validating decorator, or another protocol: left as botocore made it
        return client

    # The ignores below: botocore's JSONSerializer defines these methods; botocore-stubs list only its public one.
    class AttributeValueSerializer(JSONSerializer):
        def _serialize_type_structure(self, serialized: Any, value: Any, shape: Any, key: Any) -> None:
            if shape.name == "AttributeValue" and key is not None:
                serialized[key] = _wire(value)
            else:
                super()._serialize_type_structure(serialized, value, shape, key)  # type: ignore[misc]

        def _serialize_type_list(self, serialized: Any, value: Any, shape: Any, key: Any) -> None:
            if shape.member.name == "AttributeValue":
                serialized[key] = [_wire(v) for v in value]
            else:
                super()._serialize_type_list(serialized, value, shape, key)  # type: ignore[misc]

        def _serialize_type_map(self, serialized: Any, value: Any, shape: Any, key: Any) -> None:
            if shape.value.name == "AttributeValue":
                serialized[key] = {k: _wire(v) for k, v in value.items()}
            else:
                super()._serialize_type_map(serialized, value, shape, key)  # type: ignore[misc]

    client._serializer = AttributeValueSerializer()
    return client


class Numbers(list[Any]):
    """The elements of a list AttributeValue that are numbers only (`{"N": "0.5"}` each, a vector's): no binary
    among them, so `_wire` writes the list as it is instead of looking at each of its hundreds of elements."""


def _wire(value: dict[str, Any]) -> dict[str, Any]:
    """An AttributeValue as DynamoDB's JSON protocol writes it, as botocore's serializer would: the value itself (not
    a copy) unless it holds binaries, which go as base64."""
    if "L" in value:
        if type(value["L"]) is Numbers:
            return value
        return {**value, "L": [_wire(v) for v in value["L"]]}
    if "M" in value:
        return {**value, "M": {k: _wire(v) for k, v in value["M"].items()}}
    if "B" in value:
        return {**value, "B": _base64(value["B"])}
    if "BS" in value:
        return {**value, "BS": [_base64(v) for v in value["BS"]]}
    return value


def _base64(value: bytes | str) -> str:
    import base64

    return base64.b64encode(value.encode() if isinstance(value, str) else value).decode()


@lru_cache(maxsize=1)
def get_queue_client() -> Any:
    """The SQS client the deriver sends its quiet wake-ups with (made on first use: only the deriver needs it)."""
    from botocore.config import Config

    config = Config(retries={"mode": "standard", "max_attempts": 4}, connect_timeout=2, read_timeout=10)
    with _no_collection():
        return _session().create_client("sqs", config=config)


@lru_cache(maxsize=1)
def get_events_client() -> Any:
    """The EventBridge client events are put on the stack's bus with (made on first use: only when it has one)."""
    from botocore.config import Config

    config = Config(retries={"mode": "standard", "max_attempts": 4}, connect_timeout=2, read_timeout=10)
    with _no_collection():
        return _session().create_client("events", config=config)


@contextmanager
def _no_collection() -> Iterator[None]:
    """No garbage collection while the clients are built, then freeze what was built (as precis.startup does for
    the imports): the service models are ~100,000 objects that live as long as the process, and collecting while
    they are made costs ~14 ms of a cold request for nothing."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
        gc.freeze()


def to_attr(value: Any) -> dict[str, Any]:
    """A plain JSON-like value as a DynamoDB AttributeValue (numbers keep their exact text)."""
    if value is None:
        return {"NULL": True}
    if isinstance(value, bool):
        return {"BOOL": value}
    if isinstance(value, (int, Decimal)):
        return {"N": str(value)}
    if isinstance(value, float):
        return {"N": repr(value)}
    if isinstance(value, str):
        return {"S": value}
    if isinstance(value, (bytes, bytearray)):
        return {"B": bytes(value)}
    if isinstance(value, dict):
        return {"M": {str(k): to_attr(v) for k, v in value.items()}}
    if isinstance(value, (list, tuple)):
        return {"L": [to_attr(v) for v in value]}
    raise TypeError(f"cannot store {type(value).__name__}")


def from_attr(attr: dict[str, Any]) -> Any:
    ((kind, value),) = attr.items()
    if kind == "S":
        return value
    if kind == "N":
        return int(value) if value.lstrip("-").isdigit() else float(value)
    if kind == "BOOL":
        return value
    if kind == "NULL":
        return None
    if kind == "M":
        return {k: from_attr(v) for k, v in value.items()}
    if kind == "L":
        return [from_attr(v) for v in value]
    if kind == "B":
        return bytes(value)
    if kind == "SS":
        return sorted(value)
    if kind == "NS":
        return sorted(from_attr({"N": v}) for v in value)
    raise TypeError(f"unexpected attribute type {kind}")


def to_item(values: Mapping[str, Any]) -> dict[str, Any]:
    return {k: to_attr(v) for k, v in values.items() if v is not None}


@overload
def from_item(item: Mapping[str, Any]) -> dict[str, Any]: ...
@overload
def from_item(item: None) -> None: ...
@overload
def from_item(item: Mapping[str, Any] | None) -> dict[str, Any] | None: ...


def from_item(item: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return None if item is None else {k: from_attr(v) for k, v in item.items()}


class Projection(TypedDict):
    ProjectionExpression: str
    ExpressionAttributeNames: dict[str, str]


def returned_item(exc: ClientError) -> dict[str, Any] | None:
    """The item a failed condition returned (ReturnValuesOnConditionCheckFailure="ALL_OLD"), as plain values; None
    when none was asked for or none was there. botocore-stubs' error response does not list it."""
    return from_item(cast("Mapping[str, Any] | None", exc.response.get("Item")))


def projection(fields: tuple[str, ...]) -> Projection:
    """Request arguments that read only `fields` (names escaped: several are DynamoDB reserved words)."""
    return {
        "ProjectionExpression": ", ".join(f"#p{i}" for i in range(len(fields))),
        "ExpressionAttributeNames": {f"#p{i}": f for i, f in enumerate(fields)},
    }


def query_all(db: Db, **request: Any) -> list[dict[str, Any]]:
    """Every item a Query matches, following its pages (DynamoDB stops a page at 1 MB)."""
    items: list[dict[str, Any]] = []
    while True:
        out = db.client.query(TableName=db.table, **request)
        items += [from_item(i) for i in out["Items"]]
        if "LastEvaluatedKey" not in out:
            return items
        request["ExclusiveStartKey"] = out["LastEvaluatedKey"]


def each[T, R](pool: Executor, work: Callable[[T], R], items: Iterable[T]) -> list[R]:
    """`work(item)` for every item in `pool`'s threads, their results in order; every one has ended before this
    returns or raises (the first error): an error never leaves writes running after the request has answered (Lambda
    would run them during a later invocation, and the caller's retry would race them)."""
    futures = [pool.submit(work, item) for item in items]
    wait(futures)
    return [f.result() for f in futures]


def query_first(db: Db, count: int, **request: Any) -> list[dict[str, Any]]:
    """The first `count` items a Query matches (fewer when it matches fewer), following its pages: a read bounded
    whatever the partition holds. Ask for one more than you keep to learn whether more lie beyond."""
    items: list[dict[str, Any]] = []
    while len(items) < count:
        out = db.client.query(TableName=db.table, Limit=count - len(items), **request)
        items += [from_item(i) for i in out["Items"]]
        if "LastEvaluatedKey" not in out:
            break
        request["ExclusiveStartKey"] = out["LastEvaluatedKey"]
    return items


def read_item(db: Db, key: dict[str, str]) -> dict[str, Any] | None:
    """The item at `key`, or None: one strongly consistent GetItem."""
    return from_item(db.client.get_item(TableName=db.table, Key=to_item(key), ConsistentRead=True).get("Item"))


def batch_get(db: Db, key_list: list[dict[str, str]], fields: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """The items at `key_list` that exist (consistent reads, 100 keys a request, unprocessed keys retried)."""
    found: list[dict[str, Any]] = []
    for start in range(0, len(key_list), 100):
        keys_list = [to_item(k) for k in key_list[start : start + 100]]
        wanted: KeysAndAttributesTypeDef = (
            {"Keys": keys_list, "ConsistentRead": True, **projection(fields)}
            if fields
            else {"Keys": keys_list, "ConsistentRead": True}
        )
        request: Mapping[str, KeysAndAttributesTypeDef | KeysAndAttributesOutputTypeDef] = {db.table: wanted}
        while request:
            out = db.client.batch_get_item(RequestItems=request)
            found += [from_item(i) for i in out["Responses"].get(db.table, [])]
            request = out.get("UnprocessedKeys") or {}
    return found


def error_code(exc: ClientError) -> str:
    return exc.response.get("Error", {}).get("Code", "")


def cancellation_codes(exc: ClientError) -> list[str]:
    """The per-action reasons of a cancelled transaction ("None" for actions that were fine)."""
    return [r.get("Code") or "None" for r in exc.response.get("CancellationReasons") or []]


def is_throttling(exc: ClientError) -> bool:
    """Whether DynamoDB refused for capacity (after botocore's own retries): the caller should retry later."""
    return error_code(exc) in _THROTTLING or any(c in _THROTTLING for c in cancellation_codes(exc))


def raise_if_throttled(exc: ClientError) -> None:
    """Throttled (429) for a request DynamoDB refused for capacity, so the client backs off instead of seeing a 500."""
    if is_throttling(exc):
        raise Throttled("the table is throttling requests; retry with backoff") from exc


def transact(db: Db, actions: list[dict[str, Any]], *, attempts: int = 4) -> None:
    """TransactWriteItems, retried while it only lost to a concurrent transaction on the same items.

    Raises the ClientError for any other cancellation (a condition failed: the caller reads the reasons), and
    Throttled (429) when DynamoDB cancelled it for capacity.
    """
    for attempt in range(attempts):
        try:
            # The store builds its actions as plain dicts (AttributeValues from to_item); DynamoDB checks their shape.
            db.client.transact_write_items(TransactItems=cast("list[TransactWriteItemTypeDef]", actions))
            return
        except ClientError as exc:
            raise_if_throttled(exc)
            codes = cancellation_codes(exc)
            conflict = error_code(exc) == "TransactionConflictException" or (
                "TransactionConflict" in codes and set(codes) <= {"None", "TransactionConflict"}
            )
            if not conflict or attempt == attempts - 1:
                raise
            time.sleep(random.uniform(0, 0.02 * 2**attempt))


def mark_applied(db: Db, key: dict[str, Any], token: str, name: str) -> dict[str, Any]:
    """A transaction action adding `name` to the `applied` set of the item at `key` (AttributeValues) while its
    stored `job` is `token` and `name` is not there yet: a step of a stored job is written at most once."""
    return {
        "Update": {
            "TableName": db.table,
            "Key": key,
            "UpdateExpression": "ADD applied :name",
            "ConditionExpression": "job.#token = :token AND NOT contains(applied, :one)",
            "ExpressionAttributeNames": {"#token": "token"},
            "ExpressionAttributeValues": {":name": {"SS": [name]}, ":token": {"S": token}, ":one": {"S": name}},
        }
    }
