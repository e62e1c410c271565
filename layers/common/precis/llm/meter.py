"""The tokens every model call spends, counted in memory for one invocation (docs/design.md, "Usage").

An edge (a deriver or summarizer invocation, an API request) opens a `Meter` (`metering`); the work it runs says whose
work it is (`workspace`) and, around a chat call, what for (`role`: summarize, derive, card, dream, chat); the
providers of `precis.llm` add each answer's tokens to the meter of the context they run in (embeddings count as
"embed" whatever the role). Nothing is written here: the edge hands the meter's totals to `precis.store.usage` once,
so a busy workspace's calls cost one write per (day, role, model) an invocation touched, not one per call.

The meter lives in a context variable: `precis.concurrency.run_each` runs each piece of work in a copy of its
caller's context, so work on other threads counts into the same meter (it is thread-safe) under its own workspace.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime

ROLES = ("summarize", "derive", "card", "dream", "chat", "embed")
OTHER = "other"  # a chat call no caller named a role for


@dataclass(frozen=True, slots=True)
class Key:
    workspace: str
    day: str  # YYYY-MM-DD, UTC
    role: str
    model: str


@dataclass(slots=True)
class Spend:
    calls: int = 0
    input_tokens: int = 0  # all of the prompt's, cached or not
    cached_input_tokens: int = 0  # of input_tokens, those read from the provider's prompt cache
    output_tokens: int = 0

    def add(self, other: Spend) -> None:
        self.calls += other.calls
        self.input_tokens += other.input_tokens
        self.cached_input_tokens += other.cached_input_tokens
        self.output_tokens += other.output_tokens

    @property
    def tokens(self) -> int:
        """What a token budget counts: input (cached included) and output."""
        return self.input_tokens + self.output_tokens


class Meter:
    """One invocation's spend by (workspace, day, role, model); thread-safe."""

    def __init__(self, clock: Callable[[], datetime] = lambda: datetime.now(UTC)):
        self.clock = clock
        self._lock = threading.Lock()
        self._spent: dict[Key, Spend] = {}

    def add(self, workspace: str, role: str, model: str, spend: Spend) -> None:
        key = Key(workspace, self.clock().astimezone(UTC).date().isoformat(), role, model)
        with self._lock:
            self._spent.setdefault(key, Spend()).add(spend)

    def take(self) -> dict[Key, Spend]:
        """What was counted since the last take, and none of it again."""
        with self._lock:
            spent, self._spent = self._spent, {}
        return spent


_meter: ContextVar[Meter | None] = ContextVar("precis_meter", default=None)
_workspace: ContextVar[str | None] = ContextVar("precis_meter_workspace", default=None)
_role: ContextVar[str | None] = ContextVar("precis_meter_role", default=None)


@contextmanager
def metering(meter: Meter | None = None) -> Iterator[Meter]:
    """Count the model calls made inside into `meter` (a new one by default); an enclosing meter is set aside."""
    meter = meter or Meter()
    token = _meter.set(meter)
    try:
        yield meter
    finally:
        _meter.reset(token)


@contextmanager
def workspace(ws: str | None) -> Iterator[None]:
    """The calls made inside are `ws`'s."""
    token = _workspace.set(ws)
    try:
        yield
    finally:
        _workspace.reset(token)


@contextmanager
def role(name: str) -> Iterator[None]:
    """The chat calls made inside are for `name` (one of ROLES)."""
    token = _role.set(name)
    try:
        yield
    finally:
        _role.reset(token)


def use_workspace(ws: str) -> None:
    """The calls made from here to the end of the enclosing `workspace` scope are `ws`'s (an edge that learns whose
    work it is only as it runs, as an MCP tool does)."""
    _workspace.set(ws)


def current_workspace() -> str | None:
    return _workspace.get()


def record(model: str, *, input_tokens: int | None, cached: int | None = None, output: int | None = None, embed=False):
    """One answer's tokens (None: the server did not say), counted into the current meter under the current workspace
    and role; nothing when no meter or workspace is set (a bench, a test calling an engine directly)."""
    meter, ws = _meter.get(), _workspace.get()
    if meter is None or not ws:
        return
    spend = Spend(1, max(0, input_tokens or 0), max(0, cached or 0), max(0, output or 0))
    meter.add(ws, "embed" if embed else _role.get() or OTHER, model, spend)
