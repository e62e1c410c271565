"""Precis as its callers reach it: the template's handlers invoked as Lambda invokes them (API Gateway v2 events, the
stream's records, the schedule's events), and the AWS requests they make counted at the door of the in-process AWS.

The benches import neither the store nor the tests: what a handler asks of DynamoDB or S3 is seen through botocore's
own event hooks, installed for every client botocore makes after `install()` (as moto's in-process backend installs
its own), so the code measured runs unchanged. A client the bench makes for itself is left out with `own(client)`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

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


class Stream:
    """Lambda's event-source mappings on moto's table stream, in-process: each stream function (of `functions`, else
    every one the template maps) reads the stream from its start with its own position, keeps the records its filters
    match and is invoked with batches of its batch size, until no function has anything left (handlers write records
    too: summaries, cursors).

    The records are read from moto's stream shard in memory, not by GetRecords: moto re-serialises every image
    through its generic serializer (vectors included), which took minutes for a hundred messages."""

    def __init__(self, functions: tuple[str, ...] | None = None):
        from local.poller import StreamSettings
        from local.template import template

        self.consumers = {
            fn.logical_id: StreamSettings.from_properties(fn.stream)
            for fn in template().stream_functions()
            if functions is None or fn.logical_id in functions
        }
        self.seen = {name: -1 for name in self.consumers}  # the last sequence number each function was given
        self.invocations = 0

    @staticmethod
    def _records() -> tuple[str, list[dict]]:
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.dynamodb.models import dynamodb_backends

        table = dynamodb_backends[DEFAULT_ACCOUNT_ID]["us-east-1"].get_table(_table())
        return table.latest_stream_label, [r.record for r in table.stream_shard.items]

    def skip(self) -> None:
        """Let every consumer start after what the stream holds now (a bulk seeding's records: no function of a
        deployment would have been given them)."""
        _, raw = self._records()
        if raw:
            last = int(raw[-1]["dynamodb"]["SequenceNumber"])
            self.seen = dict.fromkeys(self.seen, last)

    def drain(self) -> int:
        """Deliver everything pending to every consumer; the number of records delivered."""
        from local.poller import matches

        delivered, busy = 0, True
        while busy:
            busy = False
            label, raw = self._records()
            arn = f"arn:aws:dynamodb:us-east-1:123456789012:table/{_table()}/stream/{label}"
            for name, settings in self.consumers.items():
                fresh = [r for r in raw if int(r["dynamodb"]["SequenceNumber"]) > self.seen[name]]
                if not fresh:
                    continue
                self.seen[name] = int(fresh[-1]["dynamodb"]["SequenceNumber"])
                records = [
                    r
                    for r in (_lambda_record(x, arn) for x in fresh)
                    if not settings.filters or any(matches(p, r) for p in settings.filters)
                ]
                for start in range(0, len(records), settings.batch_size):
                    batch = records[start : start + settings.batch_size]
                    result = invoke(name, {"Records": batch})
                    self.invocations += 1
                    if (result or {}).get("batchItemFailures"):
                        raise RuntimeError(f"{name} failed records: {result['batchItemFailures']}")
                    delivered += len(batch)
                busy = True
        return delivered


def _lambda_record(record: dict, arn: str) -> dict:
    """A moto stream record as Lambda hands it to the function: its images are already JSON-shaped (as GetRecords
    writes them), its creation time a datetime."""
    from local.stream_records import lambda_record_json

    src = record["dynamodb"]
    created = src["ApproximateCreationDateTime"].timestamp()
    return lambda_record_json({**record, "dynamodb": {**src, "ApproximateCreationDateTime": created}}, arn)


def _table() -> str:
    from local.template import template

    return template().table_name


class Queue:
    """Lambda's SQS event-source mapping of a template queue, in-process: `deliver` receives what is visible (moto
    honours a message's DelaySeconds), invokes the function with batches of the mapping's size as Lambda's SQS records,
    and deletes what it processed. Messages delayed past now wait: `later(seconds)` moves the queue's clock on (a
    pause in the bench's conversation) without the bench sleeping through it."""

    def __init__(self, function: str, sqs):
        from local.sqs_poller import queue_mappings
        from local.template import template

        (self.mapping,) = [m for m in queue_mappings(template()) if m.function == function]
        self.sqs = own(sqs)
        self.url = sqs.get_queue_url(QueueName=self.mapping.queue)["QueueUrl"]
        self.arn = f"arn:aws:sqs:us-east-1:123456789012:{self.mapping.queue}"
        self.invocations = 0

    @staticmethod
    @contextmanager
    def clock() -> Iterator[Callable[[float], None]]:
        """moto's SQS clock, stopped, with a `later(seconds)` that moves it on: only the bench's pauses pass (the
        seconds the handlers take would let a wake-up due after a pause of 9.5 s arrive before the next burst)."""
        from moto.sqs import models

        real = models.unix_time_millis
        now = [real()]
        models.unix_time_millis = lambda dt=None: real(dt) if dt is not None else now[0]

        def later(seconds: float) -> None:
            now[0] += seconds * 1000

        try:
            yield later
        finally:
            models.unix_time_millis = real

    def deliver(self) -> int:
        """Invoke the function with every message visible now; how many it was given."""
        from local.sqs_poller import lambda_record

        given = 0
        while True:
            answer = self.sqs.receive_message(
                QueueUrl=self.url, MaxNumberOfMessages=self.mapping.batch_size, AttributeNames=["All"]
            )
            messages = answer.get("Messages") or []
            if not messages:
                return given
            result = invoke(self.mapping.function, {"Records": [lambda_record(m, self.arn) for m in messages]})
            self.invocations += 1
            if (result or {}).get("batchItemFailures"):
                raise RuntimeError(f"{self.mapping.function} failed messages: {result['batchItemFailures']}")
            for message in messages:
                self.sqs.delete_message(QueueUrl=self.url, ReceiptHandle=message["ReceiptHandle"])
            given += len(messages)


# The handlers as Lambda and API Gateway invoke them: the local runtime's in-process harness (imported above).
__all__ = ["AWS", "Queue", "Reply", "Stream", "call", "handler_module", "http_event", "install", "invoke", "own"]
