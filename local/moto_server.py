"""A moto server that answers one AWS request at a time, with an optional throttling front for the functions.

moto's backends are not thread-safe: two concurrent TransactWriteItems can both pass their conditions
(or crash iterating a dict another thread changes). DynamoDB serializes conflicting writes; a global
lock around moto's WSGI app gives the local stack and the tests the same guarantee, while clients stay
concurrent.

DynamoDB refuses requests for capacity; moto never does. With `throttle` chaos the functions talk to a
second port whose requests pass through `Throttling` first, while the stack's own clients (the stream
poller, `make invoke`, tests that seed or inspect) keep the direct port.
"""

from __future__ import annotations

import json
import random
import threading
import uuid
from typing import Any

from moto.moto_server.threaded_moto_server import ThreadedMotoServer
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import BaseWSGIServer, make_server

from local import moto_patches

moto_patches.install()  # every moto server of the local stack and the tests gets DynamoDB's stream semantics

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


class _Serialized:
    def __init__(self, app):
        self.app, self.lock = app, threading.Lock()

    def __call__(self, environ, start_response):
        with self.lock:
            # Materialize the body inside the lock: moto builds it lazily from backend state.
            return list(self.app(environ, start_response))


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
        operation = target[len(_DYNAMODB):]
        if operation == "TransactWriteItems" and roll < 0.5:
            error = self._cancelled(body, pick)
        elif roll < 0.75:
            error = {"__type": "com.amazonaws.dynamodb.v20120810#ThrottlingException", "message": THROUGHPUT_MESSAGE}
        else:
            error = {"__type": "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",
                     "message": PROVISIONED_MESSAGE}
        with self._lock:
            self.refused += 1
        data = json.dumps(error).encode()
        start_response("400 Bad Request", [("Content-Type", "application/x-amz-json-1.0"),
                                           ("Content-Length", str(len(data))), ("x-amzn-RequestId", str(uuid.uuid4()))])
        return [data]

    @staticmethod
    def _cancelled(body: bytes, pick: float) -> dict[str, Any]:
        """TransactionCanceledException with one action throttled, `None` for the others, as DynamoDB answers."""
        try:
            actions = len(json.loads(body)["TransactItems"])
        except (ValueError, KeyError, TypeError):
            actions = 1
        throttled = min(int(pick * actions), actions - 1)
        reasons = [{"Code": "None"} for _ in range(actions)]
        reasons[throttled] = {"Code": "ThrottlingError", "Message": THROUGHPUT_MESSAGE}
        codes = ", ".join(r["Code"] for r in reasons)
        return {
            "__type": "com.amazonaws.dynamodb.v20120810#TransactionCanceledException",
            "Message": f"Transaction cancelled, please refer cancellation reasons for specific reasons [{codes}]",
            "CancellationReasons": reasons,
        }


class SerializedMotoServer(ThreadedMotoServer):
    """ThreadedMotoServer whose requests run one at a time (start/stop/get_host_and_port as usual).

    With `throttle` (a rate and a seed), a second port serves the same moto through `Throttling`:
    `functions_address` is where the functions should send their AWS calls.
    """

    def __init__(self, *args: Any, throttle: tuple[float, int] | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._throttle = throttle
        self._front: BaseWSGIServer | None = None
        self._front_thread: threading.Thread | None = None
        self.throttling: Throttling | None = None

    def _server_entry(self) -> None:
        app = _Serialized(DomainDispatcherApplication(create_backend_app))
        self._server = make_server(self._ip_address, self._port, app, True, request_handler=MotoRequestHandler)
        if self._throttle is not None:
            self.throttling = Throttling(app, *self._throttle)
            self._front = make_server(self._ip_address, 0, self.throttling, True, request_handler=MotoRequestHandler)
            self._front_thread = threading.Thread(target=self._front.serve_forever, name="moto-functions", daemon=True)
            self._front_thread.start()
        self._server_ready_event.set()
        self._server.serve_forever()

    @property
    def functions_address(self) -> tuple[str, int]:
        """(host, port) the functions use: the throttling front if there is one, else moto itself."""
        server = self._front or self._server
        assert server is not None, "Make sure to call start() first"
        host, port = server.server_address[:2]
        return str(host), port

    def stop(self) -> None:
        if self._front is not None:
            self._front.shutdown()
            self._front_thread.join()
        super().stop()
