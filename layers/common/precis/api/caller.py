"""Whose key the request being served carries, for a route that bounds what it reads by it (the context's recall).

A context variable, not the resolver's context: a router included in a second resolver (the OpenAPI document's)
reads that resolver's context from then on.
"""

from __future__ import annotations

from contextvars import ContextVar

from precis.auth import Principal

_caller: ContextVar[Principal | None] = ContextVar("caller", default=None)


def caller() -> Principal | None:
    """The key of the request being served (None when keys are off, or on a public route)."""
    return _caller.get()


def serving(principal: Principal | None):
    """Mark `principal` as the caller until the returned token is given to `done`."""
    return _caller.set(principal)


def done(token) -> None:
    _caller.reset(token)
