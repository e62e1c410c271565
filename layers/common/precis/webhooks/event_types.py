"""The events Precis sends (to webhook endpoints and, when the stack has one, its EventBridge bus): Honcho's two, then
Precis's own. An endpoint subscribes to all of them or to a subset (its `event_types`)."""

EVENT_TYPES = (
    "queue.empty",
    "test.event",
    "summary.created",
    "conclusions.created",
    "conclusions.deleted",
    "dream.completed",
    "session.deleted",
    "peer.deleted",
)
