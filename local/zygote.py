"""A zygote: one process that imports the libraries every function uses once, then forks each Lambda worker.

A worker started as a new interpreter spent most of its cold start importing boto3, botocore, pydantic and
Powertools (over half a second of CPU here, seconds beside a busy stack), and its first write loading the tiktoken
encoding (0.7 s more): eight writers arriving together waited for four such starts while the stream consumers started
theirs. A worker forked from the zygote has those libraries and the layer's default encoding already; it still
imports its handler itself (the function's init, as Lambda runs it), in the function's own environment, so a cold
start still runs the function's init code. Cold starts are therefore cheaper here than on Lambda.

The zygote imports third-party libraries only (`PRELOAD`): none reads the environment when imported, so a worker
forked from it sees what a new interpreter would. The layer (`precis`) and the function's code are imported by each
worker after the fork, with the function's environment, `PYTHONPATH` and `PYTHONWARNINGS` applied as the interpreter
would have applied them.

The parent talks to the zygote over a Unix socket (SOCK_SEQPACKET: one message per request): the worker's
environment, and three descriptors (its stdin, its protocol pipe, the parent's stderr of the moment, which a new
process would have inherited). The zygote answers with the worker's pid; the parent follows the worker through a
pidfd (it is the zygote's child, not the parent's). The zygote ends when the parent does (its socket closes).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import warnings
from typing import IO

from local.template import ENCODINGS_DIR, ROOT

# What every function imports (about 0.6 s of a 0.7 s cold import; the rest is the layer and the handler).
PRELOAD = (
    "boto3",
    "botocore.session",
    "botocore.client",
    "botocore.httpsession",
    "pydantic",
    "aws_lambda_powertools",
    "aws_lambda_powertools.logging",
    "aws_lambda_powertools.metrics",
    "aws_lambda_powertools.event_handler",
    "aws_lambda_powertools.event_handler.openapi.params",
    "aws_lambda_powertools.utilities.batch",
    "aws_lambda_powertools.utilities.typing",
    "asyncio",
    "concurrent.futures",
    "local.runtime",
)
_MAX_MESSAGE = 1 << 20  # a worker's environment, as JSON


class ForkedProcess:
    """A worker forked by the zygote, with what the pool uses of a `subprocess.Popen`: its pipes, `poll`, `wait`,
    `kill`. Its exit status belongs to the zygote (its parent), so `returncode` is -9 for a worker we killed and 1 for
    one that ended on its own."""

    def __init__(self, pid: int, stdin: IO[bytes], stdout: IO[bytes]):
        self.pid, self.stdin, self.stdout = pid, stdin, stdout
        self.returncode: int | None = None
        self._killed = False
        try:
            self._pidfd: int | None = os.pidfd_open(pid)
        except ProcessLookupError:  # gone already
            self._pidfd, self.returncode = None, 1

    def _ended(self, timeout: float | None) -> bool:
        if self._pidfd is None:
            return True
        if not select.select([self._pidfd], [], [], timeout)[0]:
            return False
        os.close(self._pidfd)
        self._pidfd = None
        self.returncode = -signal.SIGKILL if self._killed else 1
        return True

    def poll(self) -> int | None:
        self._ended(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._ended(timeout):
            raise subprocess.TimeoutExpired("worker", timeout or 0)
        assert self.returncode is not None
        return self.returncode

    def kill(self) -> None:
        if self._pidfd is not None:
            self._killed = True
            signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)


class Zygote:
    """The parent's side: `spawn` a worker with an environment. One per process (`shared`), started on first use."""

    def __init__(self) -> None:
        from local.runtime import BASE_ENVIRONMENT  # what a process needs to run, as every worker gets it

        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = {k: v for k, v in os.environ.items() if k in BASE_ENVIRONMENT}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "local.zygote", str(theirs.fileno())],
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
            cwd=ROOT,
            env=env,
        )
        theirs.close()
        self._socket, self._lock = ours, threading.Lock()

    def spawn(self, env: dict[str, str]) -> ForkedProcess:
        """A worker forked with `env` (a new process's environment: PYTHONPATH and PYTHONWARNINGS are applied)."""
        stdin_r, stdin_w = os.pipe()
        stdout_r, stdout_w = os.pipe()
        try:
            with self._lock:
                socket.send_fds(self._socket, [json.dumps(env).encode()], [stdin_r, stdout_w, 2])
                answer = self._socket.recv(64)
        finally:
            os.close(stdin_r)
            os.close(stdout_w)
        if not answer:
            os.close(stdin_w)
            os.close(stdout_r)
            raise OSError("the zygote has exited")
        return ForkedProcess(int(answer), os.fdopen(stdin_w, "wb"), os.fdopen(stdout_r, "rb"))


_shared: Zygote | None = None
_shared_lock = threading.Lock()


def enabled() -> bool:
    """Fork workers from a zygote unless PRECIS_LOCAL_ZYGOTE=0 (or the platform has no pidfd)."""
    return os.environ.get("PRECIS_LOCAL_ZYGOTE", "1") != "0" and hasattr(os, "pidfd_open")


def shared() -> Zygote:
    """This process's zygote, started now if it is not running."""
    global _shared
    with _shared_lock:
        if _shared is None or _shared.proc.poll() is not None:
            _shared = Zygote()
        return _shared


# ---------------------------------------------------------------- the zygote process


def _name(name: str) -> None:
    """The worker's name in `ps -o comm` and /proc/<pid>/comm (its command line stays the zygote's)."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME
    except (OSError, AttributeError):
        pass


def _become_worker(env: dict[str, str], stdin: int, protocol: int, stderr: int) -> None:
    """In the forked child: the descriptors and environment a new interpreter would have had, then the worker."""
    for fd, target in ((stdin, 0), (protocol, 1), (stderr, 2)):
        os.dup2(fd, target)
        os.close(fd)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the zygote's reaping is not the worker's
    _name(env.get("AWS_LAMBDA_FUNCTION_NAME", "worker"))
    os.environ.clear()
    os.environ.update(env)
    sys.path[1:1] = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    for option in filter(None, env.get("PYTHONWARNINGS", "").split(",")):
        warnings._setoption(option)  # noqa: SLF001 - what the interpreter does with PYTHONWARNINGS at startup
    sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the worker's stdin for its life
    sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", closefd=False, buffering=1)  # noqa: SIM115
    from local.runtime import serve

    code = 1
    try:
        code = serve()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _load_encoding() -> None:
    """The layer's default tiktoken encoding, from the files that ship with it (0.7 s of each writer's first call
    otherwise). tiktoken keeps it by name: a worker's `get_encoding` gets it, after its own checks of the files. Only
    once `make encodings` has verified the files: tiktoken would download a missing one."""
    if not (ENCODINGS_DIR / ".verified").exists():
        return
    os.environ["TIKTOKEN_CACHE_DIR"] = str(ENCODINGS_DIR)
    try:
        import tiktoken

        tiktoken.get_encoding("o200k_base")
    except Exception:  # noqa: BLE001 - an optimisation: the worker loads it itself
        pass
    finally:
        del os.environ["TIKTOKEN_CACHE_DIR"]


def main(fd: int) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the parent decides
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the workers
    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    _load_encoding()
    parent = socket.socket(fileno=fd)
    while True:
        try:
            data, fds, _flags, _address = socket.recv_fds(parent, _MAX_MESSAGE, 3)
        except OSError:
            return 0
        if not data:
            return 0  # the parent has gone
        pid = os.fork()
        if pid == 0:
            try:
                parent.close()
                _become_worker(json.loads(data), *fds)
            finally:
                os._exit(1)
        for descriptor in fds:
            os.close(descriptor)
        parent.send(str(pid).encode())


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1])))
