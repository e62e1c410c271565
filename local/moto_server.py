"""A moto server that answers one AWS request at a time.

moto's backends are not thread-safe: two concurrent TransactWriteItems can both pass their conditions
(or crash iterating a dict another thread changes). DynamoDB serializes conflicting writes; a global
lock around moto's WSGI app gives the local stack and the tests the same guarantee, while clients stay
concurrent.
"""

from __future__ import annotations

import threading

from moto.moto_server.threaded_moto_server import ThreadedMotoServer
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import make_server

from local import moto_patches

moto_patches.install()  # every moto server of the local stack and the tests gets DynamoDB's stream semantics


class _Serialized:
    def __init__(self, app):
        self.app, self.lock = app, threading.Lock()

    def __call__(self, environ, start_response):
        with self.lock:
            # Materialize the body inside the lock: moto builds it lazily from backend state.
            return list(self.app(environ, start_response))


class SerializedMotoServer(ThreadedMotoServer):
    """ThreadedMotoServer whose requests run one at a time (start/stop/get_host_and_port as usual)."""

    def _server_entry(self) -> None:
        app = _Serialized(DomainDispatcherApplication(create_backend_app))
        self._server = make_server(self._ip_address, self._port, app, True, request_handler=MotoRequestHandler)
        self._server_ready_event.set()
        self._server.serve_forever()
