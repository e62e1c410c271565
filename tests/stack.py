"""The local stack (`python -m local`) as a subprocess on a free port, for end-to-end tests."""

from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from local.template import ROOT

# The end-to-end flows run as harsh as AWS delivers streams: every batch twice, partitions in either order.
# A test opts out with env={"PRECIS_LOCAL_CHAOS": ""}.
DEFAULT_CHAOS = "replay,shards"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def request(port: int, method: str, path: str, headers: dict | None = None, body: bytes | None = None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, response.headers, response.read()
    finally:
        conn.close()


class Stack:
    """`python -m local` in a subprocess on a free port, its announcement file and logs under `tmp`.

    With `own_group` it leads a process group of its own (its workers are in it), as `make dev` does in a
    terminal, so that `signal_group` reaches the stack and its workers but not pytest.
    """

    def __init__(self, tmp: Path, env: dict[str, str] | None = None, own_group: bool = False):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.dev_json = tmp / "dev.json"
        self.log = tmp / "stack.log"
        env = {
            **os.environ,
            "PRECIS_LOCAL_CHAOS": DEFAULT_CHAOS,
            **(env or {}),
            "PRECIS_PORT": str(self.port),
            "PRECIS_DEV_JSON": str(self.dev_json),
        }
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "local"], cwd=ROOT, env=env, stdout=log, stderr=log, start_new_session=own_group
            )
        self.own_group = own_group

    def wait_healthy(self, timeout: float = 120.0) -> None:
        # Generous: on two busy cores (other work, or `make test`'s second worker) a stack took 30-40 s to answer.
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"the stack exited:\n{self.log.read_text()}"
            try:
                if request(self.port, "GET", "/health")[0] == 200:
                    return
            except OSError:
                time.sleep(0.1)
        raise AssertionError(f"no /health within {timeout} s:\n{self.log.read_text()}")

    def signal_group(self, sig: int = signal.SIGTERM) -> None:
        """Send `sig` to the stack's whole process group, as a terminal's Ctrl-C or a supervisor's stop does."""
        assert self.own_group, "Stack(own_group=True): else the group is pytest's"
        os.killpg(self.proc.pid, sig)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()  # never leave a stack behind a failed test (its workers see EOF and exit)
            raise


def wait_for(predicate, timeout: float = 20.0):
    """Poll `predicate` until it returns something truthy (the stack's background work: summaries, conclusions)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"not true within {timeout} s")
