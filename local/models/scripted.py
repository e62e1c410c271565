"""What the fake model servers share: a threaded HTTP server on 127.0.0.1 that answers each request in a mode (the
scripted ones first, one a request, then `mode`), records what it received, and runs standalone or in a thread."""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


def rough_tokens(text: str) -> int:
    """About four characters a token: realistic enough, and distinct from tiktoken so tests see whose count it is."""
    return len(text) // 4 + 1


def summary_of(text: str, max_tokens: Any) -> str:
    """The deterministic answer: the last line of `text` (tags left out), capped at 40 words and `max_tokens`."""
    lines = [line.strip() for line in text.splitlines()]
    lines = [line for line in lines if line and not line.startswith("<")]
    words = (lines[-1] if lines else "nothing to summarize").split()
    cap = min(40, int(max_tokens or 40))
    return "Summary: " + " ".join(words[:cap])


@dataclass(frozen=True)
class Standalone:
    """How a fake server runs as a command (its module's docstring describes it): its name, its default port, the
    variable that points a client at it, and what a prompt too long is answered with."""

    name: str
    port: int
    variable: str
    too_long: str


class ScriptedServer:
    """A threaded HTTP server that records requests and answers in scripted modes; `handler()` answers them."""

    MODES: tuple[str, ...] = ("ok",)
    STANDALONE = Standalone("model server", 8001, "URL", "an error")

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        mode: str = "ok",
        max_context_tokens: int | None = None,
    ):
        self.mode = mode
        self.max_context_tokens = max_context_tokens
        self.structured_output = True
        self.requests: list[Any] = []
        self._script: deque[str] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._ids = itertools.count(1)
        self._httpd = ThreadingHTTPServer((host, port), self.handler())
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    def handler(self) -> type[BaseHTTPRequestHandler]:
        """The request handler class, bound to this server."""
        raise NotImplementedError

    @property
    def url(self) -> str:
        """The endpoint to give a client."""
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def script(self, modes: Iterable[str]) -> None:
        """Answer the next requests with these modes, one each, then fall back to `mode`."""
        modes = list(modes)
        unknown = [m for m in modes if m not in self.MODES]
        if unknown:
            raise ValueError(f"unknown modes {unknown}; known: {', '.join(self.MODES)}")
        with self._lock:
            self._script.extend(modes)

    def next_mode(self) -> str:
        with self._lock:
            return self._script.popleft() if self._script else self.mode

    def record(self, recorded: Any) -> None:
        with self._lock:
            self.requests.append(recorded)

    def next_id(self) -> int:
        return next(self._ids)

    def pause(self, seconds: float) -> None:
        """Wait `seconds` (a hanging answer), or less when the server closes, so closing does not wait for it."""
        self._stopping.wait(seconds)

    def start(self) -> Self:
        name = self.STANDALONE.name.replace(" ", "-").lower()  # llm-server, bedrock-server
        self._thread = threading.Thread(target=self._httpd.serve_forever, name=name, daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._stopping.set()  # wakes hanging handlers so shutdown does not wait for them
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread:
            self._thread.join(timeout=5)

    def serve_forever(self) -> None:
        """Serve on this thread until Ctrl-C (standalone)."""
        try:
            self._httpd.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            self._httpd.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


class ScriptedHandler(BaseHTTPRequestHandler):
    """Answers JSON, quietly; a client that gave up (a timeout test) is not an error."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass

    def answer_headers(self) -> dict[str, str]:
        """Headers every answer carries (a service's request id)."""
        return {}

    def _json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(payload).encode(), "application/json", headers)

    def _send(
        self, status: int, data: bytes, content_type: str = "application/json", headers: dict[str, str] | None = None
    ) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            for name, value in {**self.answer_headers(), **(headers or {})}.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up: nothing to answer


def main(server_class: type[ScriptedServer], argv: list[str] | None = None) -> None:
    """A fake server standalone: `--host`, `--port`, `--mode`, `--max-context-tokens`."""
    standalone = server_class.STANDALONE
    parser = argparse.ArgumentParser(description=(sys.modules[server_class.__module__].__doc__ or "").split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=standalone.port)
    parser.add_argument("--mode", choices=server_class.MODES, default="ok")
    parser.add_argument(
        "--max-context-tokens", type=int, default=None, help=f"answer longer prompts with {standalone.too_long}"
    )
    args = parser.parse_args(argv)
    server = server_class(args.host, args.port, mode=args.mode, max_context_tokens=args.max_context_tokens)
    print(f"{standalone.name} on {server.url} (mode {args.mode}); {standalone.variable}={server.url}", flush=True)
    server.serve_forever()
