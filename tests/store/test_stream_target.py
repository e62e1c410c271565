"""Which stream records wake the summarizer, and what each asks of it: the template's filters and the pure target."""

from __future__ import annotations

import json

import pytest

from local.poller import matches
from local.template import template
from precis.errors import Invalid
from precis.stream import DERIVER, SUMMARIZER, StreamTarget, filter_patterns, job_of, stream_target

MESSAGE = {"PK": "WS#w#S#s", "SK": "MSG#000000000001", "kind": "message", "seq": 1}
STEP = {"PK": "WS#w#S#s", "SK": "SUMMARY#rolling", "kind": "summary", "covers_seq": 10, "job_through_seq": 40}
FINAL = {"PK": "WS#w#S#s", "SK": "SUMMARY#rolling", "kind": "summary", "covers_seq": 40}
DELETED = {
    "PK": "WS#w",
    "SK": "SESSION#s",
    "kind": "session",
    "id": "s",
    "incarnation": "abc",
    "deleted_at": "2026-01-01T00:00:00+00:00",
}
PURGED = {**DELETED, "purged_at": "2026-01-01T00:00:01+00:00"}
LIVE = {"PK": "WS#w", "SK": "SESSION#s", "kind": "session", "id": "s", "incarnation": "abc"}


def typed(image: dict) -> dict:
    return {k: {"N": str(v)} if isinstance(v, int) else {"S": v} for k, v in image.items()}


def wakes(event_name: str, image: dict) -> bool:
    props = template().stream_function().stream
    record = {"eventName": event_name, "dynamodb": {"NewImage": typed(image)}}
    return any(matches(json.loads(f["Pattern"]), record) for f in props["FilterCriteria"]["Filters"])


@pytest.mark.parametrize(
    ("event_name", "image", "target"),
    [
        ("INSERT", MESSAGE, StreamTarget("summarize", "w", "s")),
        ("INSERT", STEP, StreamTarget("summarize", "w", "s")),  # a stored step: the job's next step follows
        ("MODIFY", STEP, StreamTarget("summarize", "w", "s")),
        ("MODIFY", DELETED, StreamTarget("purge", "w", "s", "abc")),  # bound to the incarnation that was deleted
    ],
)
def test_what_wakes_the_summarizer_and_what_it_is_asked(event_name, image, target):
    assert wakes(event_name, image)
    assert stream_target(event_name, image) == target


@pytest.mark.parametrize(
    ("event_name", "image"),
    [
        ("MODIFY", FINAL),
        ("INSERT", FINAL),
        ("MODIFY", LIVE),
        ("INSERT", LIVE),
        ("MODIFY", MESSAGE),
        ("MODIFY", PURGED),  # the purge's own mark of completion: waking on it would purge forever
    ],
)
def test_finished_summaries_live_sessions_and_edits_wake_nothing(event_name, image):
    assert not wakes(event_name, image)
    if image not in (MESSAGE, PURGED):
        with pytest.raises(Invalid):
            stream_target(event_name, image)


# ---------------------------------------------------------------- one table: precis.stream's routes are the filters

FUNCTIONS = {SUMMARIZER: "SummarizeFunction", DERIVER: "DeriveFunction"}
KINDS = ("message", "summary", "session", "scope_session", "dream", "conclusion", "card", "idempotency")
FLAGS = ("copy_of", "job_through_seq", "deleted_at", "purged_at", "base_session", "requested")


def template_patterns(consumer: str) -> list[dict]:
    stream = template().stream_function(FUNCTIONS[consumer]).stream
    return [json.loads(f["Pattern"]) for f in stream["FilterCriteria"]["Filters"]]


@pytest.mark.parametrize("consumer", [SUMMARIZER, DERIVER])
def test_the_templates_stream_filters_are_the_routing_tables(consumer):
    def canonical(patterns: list[dict]) -> list[str]:
        def sort(value):
            if isinstance(value, dict):
                return {k: sort(v) for k, v in sorted(value.items())}
            if isinstance(value, list):
                return sorted((sort(v) for v in value), key=json.dumps)
            return value

        return sorted(json.dumps(sort(p)) for p in patterns)

    assert canonical(template_patterns(consumer)) == canonical(filter_patterns(consumer))
    # Lambda takes 5 filters a mapping unless the account's quota is raised (to 10): a fresh account deploys it.
    assert len(template_patterns(consumer)) <= 5


@pytest.mark.parametrize("consumer", [SUMMARIZER, DERIVER])
def test_every_record_wakes_a_consumer_exactly_when_the_table_gives_it_a_job(consumer):
    """Every kind of item, with every combination of the attributes the routes look at, inserted, modified or
    removed: Lambda's filters (as the local stack applies them) let it through exactly when job_of has a job."""
    from itertools import product

    patterns = template_patterns(consumer)
    for kind, event_name, present in product(
        KINDS, ("INSERT", "MODIFY", "REMOVE"), product((False, True), repeat=len(FLAGS))
    ):
        image = {
            "PK": "WS#w#S#s",
            "SK": "X",
            "kind": kind,
            "id": "s",
            **{flag: 7 if flag == "job_through_seq" else "x" for flag, on in zip(FLAGS, present) if on},
        }
        record = {"eventName": event_name, "dynamodb": {"NewImage": typed(image)}}
        filtered = any(matches(p, record) for p in patterns)
        assert filtered == (job_of(consumer, event_name, image) is not None), (kind, event_name, image)
