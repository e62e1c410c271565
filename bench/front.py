"""Precis as its callers reach it: the template's handlers invoked as Lambda invokes them (API Gateway v2 events, the
stream's records, the schedule's events), and the AWS requests they make counted at the door of the in-process AWS.

The benches import neither the store nor the tests: what a handler asks of DynamoDB or S3 is seen through botocore's
own event hooks, installed for every client botocore makes after `install()` (as moto's in-process backend installs
its own), so the code measured runs unchanged. A client the bench makes for itself is left out with `own(client)`.
"""

from __future__ import annotations

from local.inprocess import Reply, call, handler_module, http_event, invoke

# The events the meters listen to: each is forwarded to AWS's emitter first, in the middle and last of a client's own
# handlers, so a meter registered with register_first / register / register_last keeps its place.
_EVENTS = (
    "provide-client-params",
    "before-parameter-build",
    "before-call",
    "before-send",
    "needs-retry",
    "after-call",
    "after-call-error",
)


class _Emitters:
    """What a meter registers on, as on a client's `meta.events`: three emitters, one per place."""

    def __init__(self) -> None:
        from botocore.hooks import HierarchicalEmitter

        self.first, self.middle, self.last = HierarchicalEmitter(), HierarchicalEmitter(), HierarchicalEmitter()

    def register_first(self, event: str, handler) -> None:
        self.first.register(event, handler)

    def register(self, event: str, handler) -> None:
        self.middle.register(event, handler)

    def register_last(self, event: str, handler) -> None:
        self.last.register(event, handler)

    def unregister(self, event: str, handler) -> None:
        for emitter in (self.first, self.middle, self.last):
            emitter.unregister(event, handler)


class _Meta:
    def __init__(self) -> None:
        self.events = _Emitters()


class _Aws:
    """Every AWS client of this process but the bench's own, as one client-like object: meters (`Requests`, the cost
    bench's `Capacity`) register on `AWS.meta.events` exactly as on a client's."""

    def __init__(self) -> None:
        self.meta = _Meta()


AWS = _Aws()


def _forward(place: str):
    def forward(event_name: str, **kwargs):
        emitter = getattr(AWS.meta.events, place)
        for _handler, response in emitter.emit(event_name, **kwargs):
            if response is not None:
                return response
        return None

    forward.__name__ = f"forward_{place}"
    return forward


_FORWARDERS = {place: _forward(place) for place in ("first", "middle", "last")}


def install() -> None:
    """Forward the meters' events of every botocore session made from now on (the handlers' clients included)."""
    from botocore import handlers

    if any(spec[1] in _FORWARDERS.values() for spec in handlers.BUILTIN_HANDLERS):
        return
    for event in _EVENTS:
        handlers.BUILTIN_HANDLERS.append((event, _FORWARDERS["first"], handlers.REGISTER_FIRST))
        handlers.BUILTIN_HANDLERS.append((event, _FORWARDERS["middle"]))
        handlers.BUILTIN_HANDLERS.append((event, _FORWARDERS["last"], handlers.REGISTER_LAST))


def own(client):
    """`client`, the bench's own (seeding, reading a result, sizing items): its requests are not counted."""
    for event in _EVENTS:
        for forwarder in _FORWARDERS.values():
            client.meta.events.unregister(event, forwarder)
    return client


# The handlers as Lambda and API Gateway invoke them: the local runtime's in-process harness (imported above).
__all__ = ["AWS", "Reply", "call", "handler_module", "http_event", "install", "invoke", "own"]
