"""A moto server that answers one AWS request at a time, the API's first, with an optional throttling front.

moto's backends are not thread-safe: two concurrent TransactWriteItems can both pass their conditions
(or crash iterating a dict another thread changes). DynamoDB serializes conflicting writes; a global
lock around moto's WSGI app gives the local stack and the tests the same guarantee, while clients stay
concurrent.

DynamoDB serves every caller at once; here one request runs at a time, so a backlog of the stream consumers'
writes (a deriver storing a hundred vectors) would make every API request wait its turn behind them. The stream
consumers therefore get a port of their own (`background_address`), and whenever a request of the API's port waits,
it goes before any waiting on that one: an API request waits for at most the one request in progress.

DynamoDB refuses requests for capacity; moto never does. With `throttle` chaos the functions talk to a
second port whose requests pass through `Throttling` first, while the stack's own clients (the stream
poller, `make invoke`, tests that seed or inspect) keep the direct port.
"""

from __future__ import annotations

import email.utils
import functools
import gc
import io
import json
import random
import re
import selectors
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http import HTTPStatus
from typing import Any

import werkzeug.serving
from botocore.exceptions import ClientError
from moto import backends as _moto_backends
from moto.core import responses as _moto_responses
from moto.core.request import Request
from moto.dynamodb.responses import DynamoHandler
from moto.dynamodbstreams.responses import DynamoDBStreamsHandler
from moto.moto_server.threaded_moto_server import ThreadedMotoServer
from moto.moto_server.werkzeug_app import (
    PRESERVED_HEADER_NAMES_ENVIRON_KEY,
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.exceptions import InternalServerError
from werkzeug.serving import BaseWSGIServer, make_server

from local import moto_patches, moto_storage
from local.moto_meter import ThroughputMeter, read_units, write_units


def install() -> None:
    """Everything a local moto server needs (idempotent): moto_patches' DynamoDB fidelity and speed-ups (which check
    moto's version), and the server's own speed-ups below. Called by every SerializedMotoServer; importing this module
    changes nothing."""
    moto_patches.install()  # every moto server of the local stack and the tests gets DynamoDB's stream semantics
    # moto's dispatcher lists its package directory on every request to recognise a service name: they never change.
    if not hasattr(_moto_backends.list_of_moto_modules, "cache_info"):
        _moto_backends.list_of_moto_modules = functools.cache(
            lambda listed=_moto_backends.list_of_moto_modules: tuple(listed())
        )
    # ... and lists a handler class's methods (inspect.getmembers) to check the action is one: after moto_patches
    # (which adds SearchVectors) they never change either.
    if not hasattr(_moto_responses.method_names_from_class, "cache_info"):
        _moto_responses.method_names_from_class = functools.cache(_moto_responses.method_names_from_class)


_DYNAMODB = "DynamoDB_20120810."
# DynamoDB's own words (API reference, TransactionCanceledException: the ThrottlingError reason of an on-demand
# table; the same text comes with a plain ThrottlingException).
THROUGHPUT_MESSAGE = (
    "Throughput exceeds the current capacity of your table or index. DynamoDB is automatically scaling your table "
    "or index so please try again shortly. If exceptions persist, check if you have a hot key: "
    "https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/bp-partition-key-design.html"
)
PROVISIONED_MESSAGE = (
    "The level of configured provisioned throughput for the table was exceeded. Consider increasing your "
    "provisioning level with the UpdateTable API."
)


class Turns:
    """One request at a time; a waiting foreground request (the API's, the stack's own) goes before every waiting
    background one (the stream consumers'), and the background gets at most a share of moto while the foreground is
    busy.

    An API request makes its DynamoDB calls a few milliseconds apart (its handler works in between): background
    requests slipped into every such gap make each next call wait, and a bulk import ran at a third of its speed
    while the deriver caught up. A background request therefore starts once the foreground has been quiet for
    `quiet_s`, or on its budget: `share` of the time passing accrues to it (up to `burst_s`) and what it runs on that
    permission is spent. Under a steady stream of API requests the consumers get about `share` of moto; with the API
    idle, all of it (in AWS each function has capacity of its own).
    """

    def __init__(
        self,
        quiet_s: float = 0.02,
        share: float = 0.25,
        burst_s: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._lock = threading.Lock()
        # One condition per kind: a turn ending wakes one waiter, of the kind that goes next (waking every waiting
        # request, each to find it must wait again, took a twentieth of moto's time under an import).
        self._ready = (threading.Condition(self._lock), threading.Condition(self._lock))  # foreground, background
        self._busy = False
        self._waiting = [0, 0]  # foreground, background
        self._quiet_s, self._share, self._burst_s = quiet_s, share, burst_s
        self._clock = clock
        self._foreground_ended = float("-inf")
        self._budget, self._budget_at = burst_s, clock()

    def waiting(self) -> tuple[int, int]:
        """(foreground, background) requests waiting for their turn."""
        with self._lock:
            return self._waiting[False], self._waiting[True]

    def background_may_start(self) -> tuple[bool, bool, float]:
        """Whether a background request may start now (the turn being free): (may start, on its budget, seconds until
        it may)."""
        now = self._clock()
        self._budget = min(self._burst_s, self._budget + (now - self._budget_at) * self._share)
        self._budget_at = now
        quiet_in = self._foreground_ended + self._quiet_s - now
        if quiet_in <= 0:
            return True, False, 0.0
        if self._budget > 0:
            return True, True, 0.0
        return False, False, min(quiet_in, -self._budget / self._share)

    @contextmanager
    def turn(self, background: bool) -> Iterator[None]:
        charged = False
        ready = self._ready[background]
        with self._lock:
            self._waiting[background] += 1
            while True:
                if self._busy or (background and self._waiting[False]):
                    ready.wait()
                    continue
                if background:
                    may, charged, wait_s = self.background_may_start()
                    if not may:
                        ready.wait(wait_s)
                        continue
                break
            self._waiting[background] -= 1
            self._busy = True
        started = self._clock()
        try:
            yield
        finally:
            with self._lock:
                self._busy = False
                ended = self._clock()
                if not background:
                    self._foreground_ended = ended
                elif charged:
                    self._budget -= ended - started
                self._ready[not self._waiting[False]].notify()


class _WsgiRequest(Request):
    from_wsgi_server = True  # as moto's Flask app marks its requests: moto adds no Date header of its own


class DirectCalls:
    """DynamoDB's and DynamoDB Streams' calls straight to moto's request handlers; every other call to moto's app.

    moto's app finds the service of a request by its host, then hands it to a Flask app, whose route calls the
    handler, and wraps the answer in a Flask response with CORS headers: for a small GetItem four times the handler's
    own time (two thirds of a trivial request's CPU here, and the stack made thousands of them per minute). The
    handler is moto's, called as moto's route calls it (`dispatch(request, url, headers)`), its answer written as
    moto's app writes it, less the browser headers (CORS) no AWS SDK reads."""

    HANDLERS = {"DynamoDB_20120810": DynamoHandler, "DynamoDBStreams_20120810": DynamoDBStreamsHandler}

    def __init__(self, app) -> None:
        self.app = app

    def __call__(self, environ, start_response):
        handler = self.HANDLERS.get(environ.get("HTTP_X_AMZ_TARGET", "").partition(".")[0])
        if handler is None or environ.get("REQUEST_METHOD") != "POST":
            return self.app(environ, start_response)
        request = _WsgiRequest(environ)
        try:
            status, headers, body = handler.dispatch(request, request.raw_url, dict(request.headers))
        except ClientError as exc:  # as moto's route answers one (convert_to_flask_response)
            status, headers, body = 400, {}, exc.response["Error"]["Message"]
        data = body.encode() if isinstance(body, str) else bytes(body or b"")
        headers = {str(k): str(v) for k, v in headers.items() if str(k).lower() not in ("status", "content-length")}
        headers.setdefault("Content-Type", "text/html; charset=utf-8")
        start_response(
            f"{status} {HTTPStatus(int(status)).phrase}", [*headers.items(), ("Content-Length", str(len(data)))]
        )
        return [data]


class HeapFreezer:
    """Moves what survives each full garbage collection out of the collector's sight (`gc.freeze`).

    moto keeps every item as Python objects: a full collection walked all of them, and as the table grew each one
    took longer (a fifth of the stack's CPU in an import of a few hundred messages). Frozen objects are still freed
    when nothing refers to them (reference counting); only a reference cycle made of frozen objects would stay, and
    the stored items make none. What is created after a freeze is collected as before, young or old."""

    def __init__(self) -> None:
        self._due = False
        gc.collect()
        gc.freeze()  # moto's modules and the rest of what the process imported: they stay
        gc.callbacks.append(self._collected)

    def _collected(self, phase: str, info: dict[str, int]) -> None:
        if phase == "stop" and info.get("generation") == 2:
            self._due = True

    def after_request(self) -> None:
        if self._due:
            self._due = False
            gc.freeze()


class _Serialized:
    def __init__(self, app, turns: Turns, background: bool = False, heap: HeapFreezer | None = None):
        self.app, self.turns, self.background, self.heap = app, turns, background, heap

    def __call__(self, environ, start_response):
        with self.turns.turn(self.background):
            # Materialize the body inside the turn: moto builds it lazily from backend state.
            body = list(self.app(environ, start_response))
            if self.heap is not None:
                self.heap.after_request()
            return body


class Throttling:
    """WSGI front that refuses a fraction `rate` of DynamoDB calls the way DynamoDB does when out of capacity.

    A refused call never reaches moto. Plain calls get HTTP 400 ThrottlingException or
    ProvisionedThroughputExceededException (botocore retries both); a TransactWriteItems may instead be
    cancelled with a ThrottlingError reason, which no SDK retries. The dice are a seeded RNG: the same
    sequence of calls is refused the same way.
    """

    def __init__(self, app, rate: float, seed: int):
        self.app, self.rate = app, rate
        self._rng, self._lock = random.Random(seed), threading.Lock()
        self.refused = 0

    def __call__(self, environ, start_response):
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        if not target.startswith(_DYNAMODB):
            return self.app(environ, start_response)
        with self._lock:
            refuse, roll, pick = self._rng.random() < self.rate, self._rng.random(), self._rng.random()
        if not refuse:
            return self.app(environ, start_response)
        body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))  # read: the connection is reused
        operation = target[len(_DYNAMODB) :]
        if operation == "TransactWriteItems" and roll < 0.5:
            error = self._cancelled(body, pick)
        elif roll < 0.75:
            error = {"__type": "com.amazonaws.dynamodb.v20120810#ThrottlingException", "message": THROUGHPUT_MESSAGE}
        else:
            error = {
                "__type": "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",
                "message": PROVISIONED_MESSAGE,
            }
        with self._lock:
            self.refused += 1
        return _refusal(start_response, error)

    @staticmethod
    def _cancelled(body: bytes, pick: float) -> dict[str, Any]:
        """TransactionCanceledException with one action throttled, `None` for the others, as DynamoDB answers."""
        try:
            actions = len(json.loads(body)["TransactItems"])
        except (ValueError, KeyError, TypeError):
            actions = 1
        return _cancelled_for_capacity(actions, min(int(pick * actions), actions - 1))


def _refusal(start_response, error: dict[str, Any]):
    """A DynamoDB error answer (HTTP 400, as DynamoDB sends its throttling errors)."""
    data = json.dumps(error).encode()
    start_response(
        "400 Bad Request",
        [
            ("Content-Type", "application/x-amz-json-1.0"),
            ("Content-Length", str(len(data))),
            ("x-amzn-RequestId", str(uuid.uuid4())),
        ],
    )
    return [data]


def _cancelled_for_capacity(actions: int, throttled: int) -> dict[str, Any]:
    """TransactionCanceledException with action `throttled` refused for capacity and `None` for the others."""
    reasons: list[dict[str, str]] = [{"Code": "None"} for _ in range(actions)]
    reasons[throttled] = {"Code": "ThrottlingError", "Message": THROUGHPUT_MESSAGE}
    codes = ", ".join(r["Code"] for r in reasons)
    return {
        "__type": "com.amazonaws.dynamodb.v20120810#TransactionCanceledException",
        "Message": f"Transaction cancelled, please refer cancellation reasons for specific reasons [{codes}]",
        "CancellationReasons": reasons,
    }


_THROTTLED = {"__type": "com.amazonaws.dynamodb.v20120810#ThrottlingException", "message": THROUGHPUT_MESSAGE}
_WRITES = frozenset({"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"})
_READS = frozenset({"GetItem", "BatchGetItem", "TransactGetItems", "Query"})  # not Scan: maintenance only
_CHARGED_ERRORS = ("ConditionalCheckFailedException", "TransactionCanceledException")  # they consume capacity too
_REGION = re.compile(r"Credential=[^/]+/[0-9]+/([^/]+)/")
_KEY_CLAUSE = re.compile(r"([#\w.]+)\s*=\s*(:\w+)")


class Metering:
    """WSGI front (inside the request's turn, so the items it sizes hold still) that meters DynamoDB's throughput
    rules (local/moto_meter.py): a request that would draw on an exhausted item, partition or table never reaches
    moto and is refused as DynamoDB refuses it (ThrottlingException; a transaction cancelled with a ThrottlingError
    reason on the action that named the hot key; a batch refused whole, which botocore retries); an answered one
    is charged the units it consumed, from the sizes of the items before and after it."""

    def __init__(self, app, meter: ThroughputMeter):
        self.app, self.meter = app, meter

    def __call__(self, environ, start_response):
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        operation = target[len(_DYNAMODB) :] if target.startswith(_DYNAMODB) else ""
        if operation not in _WRITES | _READS:
            return self.app(environ, start_response)
        body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        environ["wsgi.input"] = io.BytesIO(body)
        try:
            params = json.loads(body)
            region = _REGION.search(environ.get("HTTP_AUTHORIZATION", ""))
            named = self._named(operation, params, region.group(1) if region else "us-east-1")
            index = self._global_index(named, params.get("IndexName") if operation == "Query" else None)
        except Exception:  # noqa: BLE001 - a malformed request or an unknown table: moto says what is wrong with it
            return self.app(environ, start_response)
        kind = "write" if operation in _WRITES else "read"
        keys = [(table.name, pk, sk) for table, pk, sk, *_ in named]
        hot = self.meter.exhausted(kind, keys, index)
        if hot is not None:
            if operation in ("TransactWriteItems", "TransactGetItems"):
                return _refusal(start_response, _cancelled_for_capacity(len(named), hot))
            return _refusal(start_response, _THROTTLED)
        before = [self._size(table, key) for table, _, _, key, _ in named] if kind == "write" else []
        status: list[str] = []

        def recording(line: str, headers, exc_info=None):
            status.append(line)
            return start_response(line, headers, exc_info)

        answer = list(self.app(environ, recording))
        ok = bool(status) and status[0].startswith("200")
        if kind == "write":
            if not ok and not any(code.encode() in b"".join(answer) for code in _CHARGED_ERRORS):
                return answer
            for (table, pk, sk, key, tx), was in zip(named, before):
                self.meter.charge(
                    "write", (table.name, pk, sk), write_units(max(was, self._size(table, key)), transactional=tx)
                )
        elif ok:
            self._charge_reads(operation, params, named, answer, index)
        return answer

    @staticmethod
    def _global_index(named: list, index: str | None) -> str | None:
        """A Query's index if it has partitions of its own (a global one); a local index is in the table's."""
        if not index or not named:
            return None
        return index if any(i.name == index for i in named[0][0].global_indexes) else None

    def _charge_reads(self, operation: str, params: dict, named: list, answer: list[bytes], index: str | None) -> None:
        if operation == "Query":  # what it answered (moto does not say what it examined)
            units = read_units(sum(len(part) for part in answer), consistent=bool(params.get("ConsistentRead")))
            for table, pk, sk, _, _ in named:
                self.meter.charge("read", (table.name, pk, sk), units, index)
            return
        for table, pk, sk, key, tx in named:
            consistent = tx or bool(
                params.get("ConsistentRead")
                or (params.get("RequestItems") or {}).get(table.name, {}).get("ConsistentRead")
            )
            self.meter.charge(
                "read",
                (table.name, pk, sk),
                read_units(self._size(table, key), consistent=consistent, transactional=tx),
            )

    @staticmethod
    def _size(table, key: dict) -> int:
        item = moto_storage.item_at(table, key)
        return item.size() if item is not None else 0

    def _named(self, operation: str, params: dict, region: str) -> list[tuple]:
        """(table, partition key value, sort key value, key, transactional) of each item the request names; for a
        Query, its partition with sort key None."""

        def one(table_name: str, key_or_item: dict, tx: bool = False) -> tuple:
            table = moto_storage.table_named(table_name, region)
            key = {a: key_or_item[a] for a in (table.hash_key_attr, table.range_key_attr) if a}
            sk = str(next(iter(key[table.range_key_attr].values()))) if table.range_key_attr else ""
            return table, str(next(iter(key[table.hash_key_attr].values()))), sk, key, tx

        if operation in ("GetItem", "UpdateItem", "DeleteItem"):
            return [one(params["TableName"], params["Key"])]
        if operation == "PutItem":
            return [one(params["TableName"], params["Item"])]
        if operation == "BatchGetItem":
            return [one(name, key) for name, spec in params["RequestItems"].items() for key in spec["Keys"]]
        if operation == "BatchWriteItem":
            return [
                one(name, r["PutRequest"]["Item"] if "PutRequest" in r else r["DeleteRequest"]["Key"])
                for name, requests in params["RequestItems"].items()
                for r in requests
            ]
        if operation in ("TransactWriteItems", "TransactGetItems"):
            out = []
            for entry in params["TransactItems"]:
                ((action, spec),) = entry.items()
                out.append(one(spec["TableName"], spec["Item"] if action == "Put" else spec["Key"], tx=True))
            return out
        table = moto_storage.table_named(params["TableName"], region)
        index = params.get("IndexName")
        schema = table.get_index(index).schema if index else [{"AttributeName": table.hash_key_attr, "KeyType": "HASH"}]
        hash_attr = next(k["AttributeName"] for k in schema if k["KeyType"] == "HASH")
        names = params.get("ExpressionAttributeNames") or {}
        for name, value in _KEY_CLAUSE.findall(params["KeyConditionExpression"]):
            if names.get(name, name) == hash_attr:
                return [(table, str(next(iter(params["ExpressionAttributeValues"][value].values()))), None, {}, False)]
        return []


_read_whole = threading.local()  # on: this thread's request was read whole (`_RequestHandler.make_environ`)


@functools.lru_cache(maxsize=2)
def _date_of(second: int) -> str:
    return email.utils.formatdate(second, usegmt=True)


def _http_date() -> str:
    return _date_of(int(time.time()))


class _Replay(io.RawIOBase):
    """A request's head read ahead, then the connection: what werkzeug's way reads after `_aws_call` declined."""

    def __init__(self, head: bytes, inner: Any) -> None:
        super().__init__()
        self._head, self.inner = io.BytesIO(head), inner
        self._left = len(head)

    def spent(self) -> bool:
        return self._left == 0

    def readable(self) -> bool:
        return True

    def readline(self, limit: int = -1) -> bytes:  # type: ignore[override]
        if self._left:
            line = self._head.readline(limit)
            self._left -= len(line)
            return line
        return self.inner.readline(limit)

    def read(self, size: int = -1) -> bytes:  # type: ignore[override]
        if not self._left:
            return self.inner.read(size)
        data = self._head.read(size if size is not None and size >= 0 else -1)
        self._left -= len(data)
        if size is None or size < 0:
            return data + self.inner.read()
        return data + (self.inner.read(size - len(data)) if len(data) < size else b"")

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


class _Selectors:
    """Stands in for `selectors` in werkzeug's server: after each answer werkzeug polls the socket for what is left
    of the request (a new epoll object, three system calls and up to 10 ms of waiting for each AWS call); a request
    that was read whole has nothing left, so its poll finds nothing at once. Any other request polls as before."""

    def __getattr__(self, name: str) -> Any:
        return getattr(selectors, name)

    @staticmethod
    def DefaultSelector() -> Any:  # noqa: N802 - the name werkzeug calls
        return _NothingLeft() if getattr(_read_whole, "on", False) else selectors.DefaultSelector()


class _NothingLeft:
    def register(self, *args: Any) -> None:
        pass

    def select(self, timeout: float | None = None) -> list[Any]:
        return []

    def close(self) -> None:
        pass


class _RequestHandler(MotoRequestHandler):
    """moto's request handler, keeping the connection open between requests.

    werkzeug closes every connection after its answer (it cannot tell whether the app read the whole body), so each
    AWS call of every function and poller paid a new TCP connection and a new server thread. A request whose body has
    a Content-Length is read whole before moto sees it, so the next request starts where it ends; any other request
    (a chunked body) still closes its connection.
    """

    # werkzeug writes an answer's head and body apart: without this the body can wait for a delayed ACK (40 ms).
    disable_nagle_algorithm = True
    _keep_alive = False

    def handle_one_request(self) -> None:
        """An AWS JSON call (a POST with an X-Amz-Target and a Content-Length: every DynamoDB and Streams call) is read
        and answered here, through the same WSGI app as any request; anything else goes werkzeug's way. http.server
        parses a request's head with the email package and werkzeug builds its environ and writes its answer a header
        at a time: for a small call, a third of the server's time."""
        line = self.rfile.readline(65537)
        head = [line]
        while len(head) < 101 and line not in (b"\r\n", b"\n", b""):
            line = self.rfile.readline(65537)
            head.append(line)
        if not head[0]:
            self.close_connection = True
            return
        environ = self._aws_call(head)
        if environ is None:
            self.rfile = _Replay(b"".join(head), self.rfile)
            super().handle_one_request()
            if isinstance(self.rfile, _Replay) and self.rfile.spent():
                self.rfile = self.rfile.inner
            return
        answer: list[Any] = []
        self.environ = environ

        def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
            answer[:] = [status, headers]

        try:
            chunks = self.server.app(environ, start_response)
            try:
                body = b"".join(chunks)
            finally:
                if hasattr(chunks, "close"):
                    chunks.close()
        except Exception:  # noqa: BLE001 - as werkzeug does: the traceback on stderr, a 500, the connection closed
            traceback.print_exc()
            body = b"".join(InternalServerError()(environ, start_response))
            self.close_connection = True
        status, headers = answer
        lines = [
            f"{self.protocol_version} {status}",
            f"Server: {self.server_version}",
            f"Date: {_http_date()}",
            *(f"{k}: {v}" for k, v in headers),
        ]
        if not any(k.lower() == "content-length" for k, _ in headers):
            lines.append(f"Content-Length: {len(body)}")
        self.wfile.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        self.wfile.flush()

    def _aws_call(self, head: list[bytes]) -> dict[str, Any] | None:
        """The WSGI environ werkzeug and moto's handler would build for this request, its body read; None when it is not
        a plain AWS JSON call (the head is then read again werkzeug's way)."""
        try:
            method, target, version = head[0].decode("latin-1").rstrip("\r\n").split(" ")
        except ValueError:
            return None
        if method != "POST" or version != "HTTP/1.1" or head[-1] not in (b"\r\n", b"\n") or not target.startswith("/"):
            return None
        environ: dict[str, Any] = {}
        for raw in head[1:-1]:
            name, colon, value = raw.decode("latin-1").partition(":")
            name = name.strip()
            if not colon or not name or "_" in name or raw[:1] in (b" ", b"\t"):
                return None  # a folded line, a name moto keeps as written, or no header at all: werkzeug's way
            key = name.upper().replace("-", "_")
            key = key if key in ("CONTENT_TYPE", "CONTENT_LENGTH") else f"HTTP_{key}"
            value = value.strip(" \t\r\n")
            environ[key] = f"{environ[key]},{value}" if key in environ else value
        length = environ.get("CONTENT_LENGTH", "")
        if (
            "HTTP_X_AMZ_TARGET" not in environ
            or not length.isdigit()
            or "HTTP_TRANSFER_ENCODING" in environ
            or "HTTP_EXPECT" in environ
            or "?" in target
            or "%" in target
        ):
            return None
        self.command, self.path, self.request_version = method, target, version
        self.close_connection = environ.get("HTTP_CONNECTION", "").lower() == "close"
        environ.update(
            {
                "wsgi.version": (1, 0),
                "wsgi.url_scheme": "http",
                "wsgi.input": io.BytesIO(self.rfile.read(int(length))),
                "wsgi.errors": sys.stderr,
                "wsgi.multithread": self.server.multithread,
                "wsgi.multiprocess": self.server.multiprocess,
                "wsgi.run_once": False,
                "werkzeug.socket": self.connection,
                "SERVER_SOFTWARE": self.server_version,
                "REQUEST_METHOD": method,
                "SCRIPT_NAME": "",
                "PATH_INFO": target,
                "QUERY_STRING": "",
                "REQUEST_URI": target,
                "RAW_URI": target,
                "REMOTE_ADDR": self.client_address[0],
                "REMOTE_PORT": self.client_address[1],
                "SERVER_NAME": self.server.server_address[0],
                "SERVER_PORT": str(self.server.server_address[1]),
                "SERVER_PROTOCOL": version,
                PRESERVED_HEADER_NAMES_ENVIRON_KEY: {},
            }
        )
        return environ

    def run_wsgi(self) -> None:
        connection = self.rfile
        try:
            super().run_wsgi()
        finally:
            self.rfile = connection

    def make_environ(self) -> dict[str, Any]:
        environ = super().make_environ()
        length = self.headers.get("Content-Length", "")
        self._keep_alive = _read_whole.on = length.isdigit() and "Transfer-Encoding" not in self.headers
        if self._keep_alive:
            environ["wsgi.input"] = io.BytesIO(self.rfile.read(int(length)))
            # After its answer werkzeug reads whatever else the socket holds (it expects to close it): here that would
            # be the client's next request, so for this request it reads from an empty stream (and does not wait for
            # the socket first: `_Selectors`).
            self.rfile = io.BytesIO()
        return environ

    def send_header(self, keyword: str, value: str) -> None:
        if self._keep_alive and keyword.lower() == "connection" and value.lower() == "close":
            return
        super().send_header(keyword, value)

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        """Not a line per AWS call: the gateway and the pollers say what the stack did."""


werkzeug.serving.selectors = _Selectors()  # type: ignore[assignment]


class SerializedMotoServer(ThreadedMotoServer):
    """ThreadedMotoServer whose requests run one at a time (start/stop/get_host_and_port as usual).

    A second port serves the same moto in the background's turns (`background_address`, for the stream consumers).
    With `throttle` (a rate and a seed), the API functions get a port of their own that serves it through
    `Throttling` (`functions_address`), and the background port throttles the same way. With a `meter`
    (local/moto_meter.py) the functions get a port of their own too, and both it and the background port refuse what
    DynamoDB's throughput limits would (`Metering`); the stack's own clients (the poller, the tests) never are.
    """

    def __init__(
        self,
        *args: Any,
        throttle: tuple[float, int] | None = None,
        freeze_heap: bool = False,
        meter: ThroughputMeter | None = None,
        **kwargs: Any,
    ):
        install()
        super().__init__(*args, **kwargs)
        self._throttle = throttle
        self.meter = meter
        self.heap = HeapFreezer() if freeze_heap else None
        self._fronts: dict[str, BaseWSGIServer] = {}
        self._front_threads: list[threading.Thread] = []
        self.throttling: Throttling | None = None
        self.turns = Turns()

    def _serve(self, name: str, app) -> None:
        server = make_server(self._ip_address, 0, app, True, request_handler=_RequestHandler)
        self._fronts[name] = server
        thread = threading.Thread(target=server.serve_forever, name=f"moto-{name}", daemon=True)
        thread.start()
        self._front_threads.append(thread)

    def _server_entry(self) -> None:
        moto = DirectCalls(DomainDispatcherApplication(create_backend_app))
        app = _Serialized(moto, self.turns, heap=self.heap)
        metered = Metering(moto, self.meter) if self.meter is not None else moto  # inside the turn: items hold still
        functions = _Serialized(metered, self.turns, heap=self.heap) if self.meter is not None else app
        background = _Serialized(metered, self.turns, background=True, heap=self.heap)
        self._server = make_server(self._ip_address, self._port, app, True, request_handler=_RequestHandler)
        if self._throttle is not None:
            self.throttling = Throttling(functions, *self._throttle)
            self._serve("functions", self.throttling)
            background = Throttling(background, self._throttle[0], self._throttle[1] + 1)
        elif self.meter is not None:
            self._serve("functions", functions)
        self._serve("background", background)
        self._server_ready_event.set()
        self._server.serve_forever()

    def _address(self, server: BaseWSGIServer | None) -> tuple[str, int]:
        assert server is not None, "Make sure to call start() first"
        host, port = server.server_address[:2]
        return str(host), port

    @property
    def functions_address(self) -> tuple[str, int]:
        """(host, port) the API functions use: the throttling front if there is one, else moto itself."""
        return self._address(self._fronts.get("functions") or self._server)

    @property
    def background_address(self) -> tuple[str, int]:
        """(host, port) the stream consumers use: served after every waiting request of the other ports."""
        return self._address(self._fronts.get("background"))

    def stop(self) -> None:
        for front in self._fronts.values():
            front.shutdown()
        for thread in self._front_threads:
            thread.join()
        super().stop()
