"""Which record of the table's stream wakes which job: one table, read by both stream consumers and by the test that
holds the template's event filters to it (pure: an event name and a new image in, a job out).

The summarizer keeps summaries current, purges deleted sessions, copies what clones inherited and carries out message
deletes; the deriver
derives conclusions from messages, backfills a scope's new sessions and runs scheduled dreams. Lambda's event
filtering (template.yaml, FilterCriteria) drops every other record before either is invoked; `filter_patterns`
says what those filters must be, and `tests/store/test_stream_target.py` checks the template says it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from precis.errors import Invalid
from precis.store.records import session_of, workspace_of

SUMMARIZER, DERIVER = "summarizer", "deriver"


@dataclass(frozen=True)
class Route:
    """Records of item `kind` written by one of `events`, with the attributes `present` and without those `absent`,
    wake `consumer`'s `job`."""

    consumer: str
    job: str
    kind: str
    events: tuple[str, ...]
    present: tuple[str, ...] = ()
    absent: tuple[str, ...] = ()

    def matches(self, event_name: str, image: dict[str, Any]) -> bool:
        return (
            event_name in self.events
            and image.get("kind") == self.kind
            and all(image.get(a) not in (None, "") for a in self.present)
            and all(a not in image for a in self.absent)
        )


ROUTES = (
    # A message stored (a clone's copy of an inherited message wakes nothing: what it needs came with the clone).
    Route(SUMMARIZER, "summarize", "message", ("INSERT",), absent=("copy_of",)),
    # A step of a summary job too large for one request stored: the next step follows.
    Route(SUMMARIZER, "summarize", "summary", ("INSERT", "MODIFY"), present=("job_through_seq",)),
    # A session marked deleted (a purge out of time touches it to go on; its mark of completion wakes nothing).
    Route(SUMMARIZER, "purge", "session", ("MODIFY",), present=("deleted_at",), absent=("purged_at",)),
    # A clone whose inherited messages are still to be copied into its own partition (each step stored wakes the next).
    Route(SUMMARIZER, "copy", "session", ("INSERT", "MODIFY"), present=("base_session",), absent=("deleted_at",)),
    # An export or import job started or moved on a step while it runs: its next step follows (precis.transfer).
    Route(SUMMARIZER, "transfer", "job", ("INSERT", "MODIFY"), present=("running",)),
    # A message deleted (its tombstone), while its cascade runs (each step it notes, or a touch, goes on; the last
    # removes `running`).
    Route(SUMMARIZER, "forget", "forgotten", ("INSERT", "MODIFY"), present=("running",)),
    Route(DERIVER, "derive", "message", ("INSERT",), absent=("copy_of",)),
    # A session added to a scope: its conclusions so far are copied into the scope.
    Route(DERIVER, "backfill", "scope_session", ("INSERT",)),
    # A dream scheduled by POST /schedule_dream runs at once (one armed by its count waits for the flush).
    Route(DERIVER, "dream", "dream", ("INSERT", "MODIFY"), present=("requested",)),
    # A session's expiry still running (store.retention): each round stored wakes the next.
    Route(DERIVER, "expire", "expiry", ("INSERT", "MODIFY"), present=("requested",)),
)

# A session's expiry marker removed (store.retention): a REMOVE record carries only the keys (NEW_IMAGE), so its
# filter names them, not a new image; only the deriver's. Whether the TTL service removed it (`userIdentity`) is
# checked by the deriver (store.retention.expiry_target): Lambda documents filtering DynamoDB records on their
# `dynamodb` key, and a marker is removed otherwise only with its session's whole partition (a purge, rare).
EXPIRY_REMOVED = {"eventName": ["REMOVE"], "dynamodb": {"Keys": {"SK": {"S": [{"prefix": "EXPIRY#"}]}}}}

# The DynamoDB type of each attribute a route names, for the filter patterns.
_TYPES = {
    "kind": "S",
    "copy_of": "S",
    "job_through_seq": "N",
    "deleted_at": "S",
    "purged_at": "S",
    "base_session": "S",
    "requested": "S",
    "running": "S",
}


def job_of(consumer: str, event_name: str, image: dict[str, Any]) -> str | None:
    """The job a record (its event name and new image, as plain values) asks of `consumer`, or None."""
    return next((r.job for r in ROUTES if r.consumer == consumer and r.matches(event_name, image)), None)


def filter_patterns(consumer: str) -> list[dict[str, Any]]:
    """Lambda event-filter patterns that let through exactly the records `consumer` has a job for."""
    kinds: dict[tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]], list[str]] = {}
    for route in (r for r in ROUTES if r.consumer == consumer):
        kinds.setdefault((route.events, route.present, route.absent), []).append(route.kind)
    patterns = []
    # Routes that differ only in their item's kind share a pattern: a mapping takes 5 filters (Lambda's quota).
    for (events, present, absent), names in kinds.items():
        image: dict[str, Any] = {"kind": {"S": names}}
        image |= {a: {_TYPES[a]: [{"exists": True}]} for a in present}
        image |= {a: {_TYPES[a]: [{"exists": False}]} for a in absent}
        patterns.append({"eventName": list(events), "dynamodb": {"NewImage": image}})
    if consumer == DERIVER:
        patterns.append(EXPIRY_REMOVED)
    return patterns


@dataclass(frozen=True)
class StreamTarget:
    """`summarize` a session after a message insert (or a step of a long summary job), `purge` the incarnation a
    delete marked, `copy` what a clone inherited into its own partition, run a `transfer` job's next steps, or
    `forget` message `seq` (deleted)."""

    action: str
    workspace: str
    session: str
    incarnation: str | None = None
    step: int | None = None  # a `transfer` job's (its `session` is the job's id)
    seq: int | None = None


def stream_target(event_name: str, image: dict[str, Any]) -> StreamTarget:
    """What a stream record asks of the summarizer; Invalid for a record it has no job for."""
    job = job_of(SUMMARIZER, event_name, image)
    if job == "summarize":
        return StreamTarget(job, *session_of(image))
    if job == "forget":
        return StreamTarget(job, *session_of(image), seq=int(image["seq"]))
    if job in ("purge", "copy"):
        return StreamTarget(job, workspace_of(image), image["id"], image.get("incarnation"))
    if job == "transfer":
        return StreamTarget(job, workspace_of(image), image["id"], step=int(image.get("step") or 0))
    raise Invalid(f"stream record asks nothing of the summarizer: {event_name} of kind={image.get('kind')!r}")
