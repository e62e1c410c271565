"""Publishing events: one delivery message per (event, subscribed endpoint) on the webhook queue, and each event on
the EventBridge bus when the stack has one.

Costs: per workspace with events, one Query of its endpoints (at most 10 small items; 0.5 RRU eventually consistent,
also when it has none: a workspace without endpoints costs that read and no SQS request); then one SendMessageBatch
per 10 deliveries and, with a bus, one PutEvents per 10 events (whether or not the workspace has endpoints).

Failures: `publish` never raises. Producers call it after their work is stored, so a failed send never fails nor
repeats that work; what could not be sent is logged and counted (`Published.unsent`). A producer whose work is retried
anyway (a stream record, a request) publishes again with the same ids, which receivers drop as duplicates.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from precis.events.kinds import Event
from precis.store import webhooks
from precis.store.db import Db
from precis.webhooks import delivery

log = logging.getLogger("precis.events")
_BATCH = 10  # SendMessageBatch's and PutEvents' most entries
SOURCE = "precis"  # the EventBridge events' Source


@dataclass(frozen=True)
class Published:
    deliveries: int = 0  # delivery messages sent to the webhook queue
    bus: int = 0  # events put on the EventBridge bus
    unsent: int = 0  # deliveries and bus entries that could not be sent (logged)


def subscribed(endpoint: webhooks.WebhookItem, event_type: str) -> bool:
    """Whether an endpoint takes events of `event_type`: not disabled, and subscribed to it (no `event_types`: all).
    A `test.event` goes to every enabled endpoint: it tests the endpoint, not a subscription."""
    item: dict[str, Any] = dict(endpoint)
    if item.get("disabled_at"):
        return False
    wanted = item.get("event_types")
    return wanted is None or event_type == "test.event" or event_type in wanted


def publish(
    db: Db,
    events: Iterable[Event],
    *,
    sqs: Any = None,
    queue_url: str | None = None,
    eventbridge: Any = None,
    bus: str | None = None,
) -> Published:
    """Send `events` to their workspaces' subscribed endpoints (through the webhook queue, when `queue_url`) and to the
    bus (when `bus`); never raises."""
    events = list({e.id: e for e in events}.values())  # one event twice in a batch: sent once
    deliveries: list[dict[str, Any]] = []
    unsent = sent = 0
    if queue_url and sqs is not None:
        by_workspace: dict[str, list[Event]] = {}
        for event in events:
            by_workspace.setdefault(event.workspace, []).append(event)
        for ws, found in sorted(by_workspace.items()):
            try:
                endpoints = webhooks.endpoints(db, ws)
            except Exception:  # noqa: BLE001 - the events are lost to the endpoints; the work that made them stands
                log.exception("events not published: endpoints unreadable", extra={"workspace": ws})
                unsent += len(found)
                continue
            deliveries += [
                delivery.message(ws, e["id"], event.type, dict(event.data), event_id=event.id, now=event.created)
                for event in found
                for e in endpoints
                if subscribed(e, event.type)
            ]
        failed = _send(sqs, queue_url, deliveries)
        sent, unsent = len(deliveries) - failed, unsent + failed
    put = 0
    if bus and eventbridge is not None and events:
        failed = _put(eventbridge, bus, events)
        put, unsent = len(events) - failed, unsent + failed
    if unsent:
        log.warning("events: %d deliveries or bus entries not sent", unsent)
    return Published(sent, put, unsent)


def _send(sqs: Any, queue_url: str, messages: list[dict[str, Any]]) -> int:
    """Send the delivery messages, 10 a request; how many could not be sent."""
    unsent = 0
    for start in range(0, len(messages), _BATCH):
        entries = [{"Id": str(i), "MessageBody": json.dumps(m)} for i, m in enumerate(messages[start : start + _BATCH])]
        try:
            answer = sqs.send_message_batch(QueueUrl=queue_url, Entries=entries)
        except Exception as exc:  # noqa: BLE001 - see the module's docstring
            log.warning("could not send %d webhook deliveries: %s", len(entries), exc)
            unsent += len(entries)
            continue
        unsent += len(answer.get("Failed") or ())
    return unsent


def detail(event: Event) -> dict[str, Any]:
    """An EventBridge event's Detail: the event's id, workspace, type, data and time."""
    return {
        "id": event.id,
        "workspace_id": event.workspace,
        "type": event.type,
        "data": dict(event.data),
        "timestamp": _stamp(event.created),
    }


def _put(eventbridge: Any, bus: str, events: list[Event]) -> int:
    """Put the events on the bus, 10 a request; how many could not be put."""
    failed = 0
    for start in range(0, len(events), _BATCH):
        entries = [
            {
                "Source": SOURCE,
                "DetailType": e.type,
                "Detail": json.dumps(detail(e)),
                "EventBusName": bus,
                "Time": datetime.fromtimestamp(e.created, UTC),
            }
            for e in events[start : start + _BATCH]
        ]
        try:
            answer = eventbridge.put_events(Entries=entries)
        except Exception as exc:  # noqa: BLE001 - see the module's docstring
            log.warning("could not put %d events on the bus: %s", len(entries), exc)
            failed += len(entries)
            continue
        failed += int(answer.get("FailedEntryCount") or 0)
    return failed


def _stamp(now: float) -> str:
    return datetime.fromtimestamp(now, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def publish_configured(db: Db, events: Iterable[Event]) -> Published:
    """`publish` to the deployment's webhook queue and bus (its settings), the clients made on first use; nothing to
    publish to (no queue, no bus) costs nothing. Never raises."""
    events = list(events)
    if not events:
        return Published()
    from precis.settings import get_settings
    from precis.store.db import get_events_client, get_queue_client

    try:
        settings = get_settings()
        queue_url, bus = settings.webhook_queue_url, settings.event_bus_name
        if not queue_url and not bus:
            return Published()
        sqs = get_queue_client() if queue_url else None
        eventbridge = get_events_client() if bus else None
    except Exception:  # noqa: BLE001 - never a failure of the work the events announce
        log.exception("events not published: no client")
        return Published(unsent=len(events))
    return publish(db, events, sqs=sqs, queue_url=queue_url, eventbridge=eventbridge, bus=bus)


def send_test(db: Db, workspace: str, *, now: float) -> Published:
    """GET …/webhooks/test: a `test.event` to each of the workspace's enabled endpoints (NotFound for a workspace
    that does not exist), and to the bus; Unavailable (503) when it could not be sent, so the caller may retry."""
    from precis.errors import Unavailable
    from precis.events.kinds import test_event
    from precis.store.resources import require_workspace

    require_workspace(db, workspace)
    published = publish_configured(db, [test_event(workspace, now=now)])
    if published.unsent:
        raise Unavailable("the test event could not be queued for delivery; retry")
    return published
