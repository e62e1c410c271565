"""Call the real handlers in-process with API Gateway HTTP API (v2.0) events, as the gateway would (local.inprocess),
and record the DynamoDB requests they make."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from local.inprocess import Form, Reply, call, handler_module, http_event, invoke, route_of

__all__ = [
    "Form",
    "Reply",
    "call",
    "dynamodb_requests",
    "handler_module",
    "http_event",
    "invoke",
    "post_messages",
    "route_of",
]


@contextmanager
def dynamodb_requests() -> Iterator[list[tuple[str, dict]]]:
    """Every DynamoDB request the handlers make meanwhile, as (operation, parameters), recorded by botocore's own
    event hook on the handlers' client: the code under test runs unchanged."""
    from precis.store.db import get_db

    client = get_db().client
    seen: list[tuple[str, dict]] = []

    def record(params: dict, model, **_) -> None:
        seen.append((model.name, params))

    client.meta.events.register("provide-client-params.dynamodb", record)
    try:
        yield seen
    finally:
        client.meta.events.unregister("provide-client-params.dynamodb", record)


def post_messages(session: str, *messages: tuple[str, str], workspace: str = "ws1") -> list[dict]:
    """Add `messages`, each (peer, text), to a session of the workspace, which must answer 201; the stored messages."""
    reply = call(
        "POST",
        f"/v3/workspaces/{workspace}/sessions/{session}/messages",
        {"messages": [{"peer_id": peer, "content": text} for peer, text in messages]},
    )
    assert reply.status == 201, reply.body
    return reply.body
