"""Events: what happened to a workspace's memory (`kinds`: the types, their data, their deterministic ids) and how
they leave (`publish`: a delivery message per subscribed endpoint on the webhook queue, and the EventBridge bus when
the stack has one). Producers publish after their work is stored; a publish never fails that work."""

from precis.events.kinds import (
    Event,
    conclusions_created,
    conclusions_deleted,
    dream_completed,
    event_id,
    peer_deleted,
    queue_empty,
    session_deleted,
    summary_created,
    test_event,
)
from precis.events.publish import Published, publish, publish_configured, send_test

__all__ = [
    "Event",
    "Published",
    "conclusions_created",
    "conclusions_deleted",
    "dream_completed",
    "event_id",
    "peer_deleted",
    "publish",
    "publish_configured",
    "queue_empty",
    "send_test",
    "session_deleted",
    "summary_created",
    "test_event",
]
