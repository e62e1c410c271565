"""A webhook receiver for the tests: a real HTTP server on 127.0.0.1 that checks each delivery by the Standard
Webhooks rules with its own code (written from the specification, never `precis.webhooks.signing`: a reference does
not share the code it checks), answers a scripted status, and keeps what it was sent."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOLERANCE_S = 300  # the specification's suggested window for webhook-timestamp, either way


class Refused(Exception):
    """The delivery fails the Standard Webhooks checks."""


def verify(secrets: list[str], headers: Mapping[str, str], body: bytes, now: float, tolerance_s: int = TOLERANCE_S):
    """The delivery's webhook-id when one of `secrets` (whsec_…) signed it within the tolerance; else Refused."""
    h = {k.lower(): v for k, v in headers.items()}
    if not all(k in h for k in ("webhook-id", "webhook-timestamp", "webhook-signature")):
        raise Refused("missing a webhook-* header")
    msg_id, stamp = h["webhook-id"], h["webhook-timestamp"]
    if not stamp.isdigit() or abs(now - int(stamp)) > tolerance_s:
        raise Refused("timestamp outside the tolerance")
    content = msg_id.encode() + b"." + stamp.encode() + b"." + body
    offered = [s.split(",", 1)[1] for s in h["webhook-signature"].split() if s.startswith("v1,")]
    for secret in secrets:
        key = base64.b64decode(secret[len("whsec_") :] if secret.startswith("whsec_") else secret)
        expected = base64.b64encode(hmac.new(key, content, hashlib.sha256).digest()).decode()
        if any(hmac.compare_digest(expected, o) for o in offered):
            return msg_id
    raise Refused("no signature matches")


@dataclass
class Received:
    id: str
    headers: dict[str, str]
    body: dict


@dataclass
class Receiver:
    """Answers `statuses` in turn (the last one repeated); a delivery it cannot verify is a 401. `accepted` holds the
    verified deliveries it answered 2xx, `requests` counts every POST."""

    secrets: list[str] = field(default_factory=list)
    statuses: list[int] = field(default_factory=lambda: [204])
    clock: Callable[[], float] = time.time
    answer_body: bytes = b"no"
    accepted: list[Received] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    requests: int = 0

    def __post_init__(self) -> None:
        outer = self
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                raw = self.rfile.read(int(self.headers["Content-Length"]))
                with lock:
                    outer.requests += 1
                    try:
                        msg_id = verify(outer.secrets, dict(self.headers.items()), raw, outer.clock())
                    except Refused as exc:
                        outer.refused.append(str(exc))
                        status = 401
                    else:
                        status = outer.statuses.pop(0) if len(outer.statuses) > 1 else outer.statuses[0]
                        if 200 <= status < 300:
                            outer.accepted.append(Received(msg_id, dict(self.headers.items()), json.loads(raw)))
                self.send_response(status)
                self.send_header("Content-Length", str(len(outer.answer_body)))
                self.end_headers()
                self.wfile.write(outer.answer_body)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
