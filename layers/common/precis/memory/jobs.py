"""The deriver's jobs, whatever woke them: a stream batch's records (what `precis.stream` routes to the deriver), a
session's quiet wake-up, or the five-minute flush. Plain values in (new images, wake-ups), failures out: the handler
turns AWS's events into these and the failures back into batch-item failures.

A stream batch is grouped by session; each session is derived once (every sender of it in one request),
`derive_concurrency` of them at once. A session that fails has its senders' cursors marked due again, so the schedule
retries them later: the cursors never moved, so no message is skipped. A wake-up that finds its session quiet
derives the session's waiting batches, then sends the session's cards wake-up; that one, if the session is still
quiet, refreshes the cards waiting for it. The flush derives every session with a cursor due, and every dream due.

Each target publishes the events of its work (`queue.empty`, `conclusions.created`, `dream.completed`) as soon as
that work is stored, in one `precis.events.publish` (one endpoint read): a session done early in a batch is announced
then, not after the batch's slowest session, so its `queue.empty` arrives when the queue status first shows it empty.
A failed publish is logged and counted, never a failure of the derivation it reports.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.metrics import MetricUnit

from precis import concurrency
from precis.events import Event
from precis.llm import meter
from precis.memory import token_budget, wakeups
from precis.memory.deriver import (
    BackfillTarget,
    DeriveTarget,
    Outcome,
    SessionTarget,
    all_workspaces,
    derive_session,
    due_targets,
    is_quiet,
    mark_failed,
    quiet_wakes,
    session_collections,
    target_of,
)
from precis.memory.dreams import DreamTarget, dreams_due
from precis.memory.dreams import target_of as dream_of
from precis.secrets import with_llm_key
from precis.settings import Settings, get_settings
from precis.store import expiry, retention, usage
from precis.store.db import Db, get_queue_client
from precis.stream import DERIVER, job_of

logger = Logger(child=True)
Target = SessionTarget | BackfillTarget | DreamTarget | retention.ExpiryTarget
TimeLeft = Callable[[], float]


def target(event_name: str, image: dict[str, Any]) -> Target | None:
    """The target of a stream record the deriver has a job for (precis.stream's table), else None."""
    job = job_of(DERIVER, event_name, image)
    if job in ("derive", "backfill"):
        found = target_of(image)
        return SessionTarget(found.workspace, found.session) if isinstance(found, DeriveTarget) else found
    if job == "dream":
        return dream_of(image)
    return retention.expiry_target(event_name, image)


def on_stream(
    db: Db, records: Iterable[tuple[str, dict[str, Any]]], time_left: TimeLeft
) -> dict[Target, Exception | None]:
    """Derive a stream batch ((event name, new image) per record): each target once, then send the quiet wake-ups of
    its llm sessions; each target's failure (None: done). The batch's model calls are metered and written once."""
    targets: dict[Target, list[dict[str, Any]]] = {}
    for event_name, image in records:
        found = target(event_name, image)
        if found is not None:
            targets.setdefault(found, []).append(image)
    outcomes: dict[Target, Outcome | None] = {}
    with usage.metered(lambda: db):
        _merge_index(
            db, [image for found, images in targets.items() if isinstance(found, SessionTarget) for image in images]
        )
        paused = _paused(db, targets)

        def run(found: Target) -> None:
            outcomes[found] = derive(db, found, time_left, images=targets[found], paused=found.workspace in paused)

        failures = concurrency.run_each(sorted(targets, key=repr), run, workers=get_settings().derive_concurrency)
    _send_wakes([(t, targets[t], outcomes.get(t)) for t in targets if isinstance(t, SessionTarget)])
    return failures


def on_wake(db: Db, bodies: Iterable[str], time_left: TimeLeft) -> dict[tuple[str, str], Exception | None]:
    """For each session whose wake-up (an SQS message body) finds it quiet: derive its waiting batches and send its
    cards wake-up, or (a cards wake-up) refresh its waiting cards; each (workspace, session)'s failure (None: done)."""
    wakes = wakeups.newest(filter(None, (wakeups.parse(body) for body in bodies)))
    with usage.metered(lambda: db):
        paused = _paused(db, wakes)

        def woken(wake: wakeups.QuietWake) -> None:
            if not is_quiet(db, wake):
                return
            found = SessionTarget(wake.workspace, wake.session)
            if wake.kind == "cards":
                if wake.workspace not in paused:
                    with meter.workspace(wake.workspace):
                        _refresh_cards(db, found)
                return
            outcome = derive(db, found, time_left, flush=True, paused=wake.workspace in paused)
            if outcome is not None and outcome.batched:
                _send_wakes([], cards=[wakeups.QuietWake(wake.workspace, wake.session, wake.seq, "cards")])

        failures: dict[tuple[str, str], Exception | None] = {}
        for w, exc in concurrency.run_each(wakes, woken, workers=get_settings().derive_concurrency).items():
            failures[(w.workspace, w.session)] = failures.get((w.workspace, w.session)) or exc
    return failures


def on_schedule(db: Db, time_left: TimeLeft) -> dict[str, int]:
    """The flush: every due cursor and every due dream, derived; how many were, how many failed, and how many
    (when any) were held by their workspace's spent token budget (`paused`)."""
    now = datetime.now(UTC)
    workspaces = all_workspaces(db)
    targets: list[Target] = [*due_targets(db, workspaces, now)]
    targets += [dream for ws in workspaces for dream in dreams_due(db, ws, now)]
    with usage.metered(lambda: db):
        paused = _paused(db, targets)

        def run(found: Target) -> None:
            # a due session: its oldest batch waited its age, or failed
            derive(db, found, time_left, flush=True, paused=found.workspace in paused)

        failures = concurrency.run_each(targets, run, workers=get_settings().derive_concurrency)
    failed = [t for t, exc in failures.items() if exc is not None]
    held = sum(1 for t in targets if t.workspace in paused and not isinstance(t, BackfillTarget))
    return {"flushed": len(targets) - len(failed) - held, "failed": len(failed)} | ({"paused": held} if held else {})


def derive(
    db: Db,
    found: Target,
    time_left: TimeLeft,
    images: list[dict[str, Any]] | None = None,
    flush: bool = False,
    paused: bool = False,
) -> Outcome | None:
    """Derive (or backfill, or dream) one target, its model calls metered as its workspace's; the deriver's Outcome
    for a session. `paused` (its workspace's token budget is spent): the messages are indexed for search, the
    cursor is left where it is and marked due, and no dream runs (it stays due); a backfill copies as ever. What
    it stored is announced at once (`publish`)."""
    events: list[Event] = []
    with meter.workspace(found.workspace):
        outcome = _derive(db, found, time_left, images, flush, paused, events)
    if outcome is not None:
        events.extend(outcome.events)
    publish(db, events)
    return outcome


def publish(db: Db, events: list[Event]) -> None:
    """Publish the events of stored work (precis.events); a failure is logged and counted, never raised."""
    if not events:
        return
    from precis.events import publish_configured

    unsent = publish_configured(db, events).unsent
    if unsent:
        concurrency.add_metric(name="EventsUnsent", unit=MetricUnit.Count, value=unsent)


def _derive(
    db: Db,
    found: Target,
    time_left: TimeLeft,
    images: list[dict[str, Any]] | None,
    flush: bool,
    paused: bool,
    events: list[Event],
) -> Outcome | None:
    if isinstance(found, BackfillTarget):
        _backfill(db, found)
        return None
    if isinstance(found, DreamTarget):
        if not paused:
            _dream(db, found, events)
        return None
    if isinstance(found, retention.ExpiryTarget):
        expiry.run(db, found, time_left)  # (a budget pauses spending, never forgetting)
        return None
    from precis.llm.embeddings import configured_embedder

    senders = sorted({i["peer_id"] for i in images or () if isinstance(i.get("peer_id"), str)})
    try:
        if images:
            _index(db, images)
        if paused:
            token_budget.hold(db, found, senders, datetime.now(UTC), images or ())
            logger.info("derive paused: token budget spent", extra={"session": found.session, "senders": senders})
            return None
        outcome = derive_session(
            db,
            get_settings(),
            found,
            engine_for=_engine_for,
            embedder=configured_embedder(),
            senders=senders,
            time_left=time_left,
            flush=flush,
        )
    except Exception:
        concurrency.add_metric(name="DerivationsFailed", unit=MetricUnit.Count, value=1)
        mark_failed(db, found, senders, datetime.now(UTC))
        raise
    if outcome.conclusions:
        concurrency.add_metric(name="ConclusionsWritten", unit=MetricUnit.Count, value=outcome.conclusions)
    logger.info(
        "derive",
        extra={
            "session": found.session,
            "senders": senders,
            "derived": outcome.derived,
            "conclusions": outcome.conclusions,
            "pending": outcome.pending,
            "quiet": flush,
        },
    )
    return outcome


@lru_cache(maxsize=8)
def _engine(name: str, model: str | None, settings: Settings) -> Any:
    """One engine (and HTTP client) per cold start and configuration."""
    from precis.memory.engines import get_deriver_engine

    return get_deriver_engine(name, settings, model=model)


def _engine_for(config: Any) -> Any:
    return _engine(config.engine, config.model if config.engine == "llm" else None, with_llm_key(get_settings()))


def _paused(db: Db, targets: Iterable[Any]) -> set[str]:
    """The workspaces of `targets` whose token budget is spent this month (memory.token_budget); none when the read
    fails (a budget is a limit on spending, never a reason to fail the work it would allow)."""
    try:
        return token_budget.paused_workspaces(db, (t.workspace for t in targets), datetime.now(UTC).date())
    except Exception:  # noqa: BLE001
        logger.exception("reading the token budgets failed; deriving as if none were spent")
        return set()


def _backfill(db: Db, found: BackfillTarget) -> None:
    from precis.llm.embeddings import configured_embedder
    from precis.store import scopes

    try:
        copied = scopes.backfill(db, found.workspace, found.scope, found.session, embedder=configured_embedder())
    except Exception:
        scopes.mark_failed(db, found.workspace, found.scope, found.session)
        raise  # the stream retries the record; the copy resumes where it stopped
    logger.info("backfill", extra={"scope": found.scope, "session": found.session, "copied": copied})


def _merge_index(db: Db, images: list[dict[str, Any]]) -> None:
    """Merge the batch's sessions' fresh index shards, once a batch (its targets run side by side: each merging
    would build the same segment twice and throw one away). A failure is logged: what was not merged is still
    found (its fresh items), and the next batch merges it."""
    from precis.store.search import merge_fresh

    try:
        merge_fresh(db, images)
    except Exception:  # noqa: BLE001 - a merge is an optimisation of reads, never a reason to fail a derivation
        logger.exception("merging the search index's fresh units failed; the next batch merges them")
        concurrency.add_metric(name="IndexMergesFailed", unit=MetricUnit.Count, value=1)


def _index(db: Db, images: list[dict[str, Any]]) -> None:
    """Embed the messages for search, once each (a replayed record finds its vector written)."""
    from precis.llm.embeddings import configured_embedder
    from precis.store.search import index_messages

    semantic = configured_embedder() if get_settings().embedder != "hashed" else None
    index_messages(db, images, semantic=semantic)


def _dream(db: Db, found: DreamTarget, events: list[Event]) -> None:
    from precis.configuration import derive_config
    from precis.llm.embeddings import configured_embedder
    from precis.memory.dreams import run
    from precis.store.records import json_object
    from precis.store.resources import workspace_item

    workspace = workspace_item(db, found.workspace)
    if workspace is None:
        return  # deleted: its collections go with it
    raw = workspace.get("configuration")
    config = derive_config(json_object(raw) if isinstance(raw, str) else raw or {}, {}, get_settings())
    written = run(
        db, found, engine=_engine_for(config), embedder=configured_embedder(), now=datetime.now(UTC), events=events
    )
    logger.info("dream", extra={"observer": found.observer, "observed": found.observed, "deductive": written})


def _send_wakes(
    derived: list[tuple[SessionTarget, list[dict[str, Any]], Outcome | None]], cards: Iterable[wakeups.QuietWake] = ()
) -> None:
    """The quiet wake-ups of a stream batch's llm sessions, or the cards wake-ups of quiet ones (best effort: the
    schedule's flush, and a card's count and age, are the backstops)."""
    settings = get_settings()
    wakes = list(cards) or quiet_wakes(derived)
    delay = settings.derive_card_quiet_s if cards else settings.derive_quiet_s
    if not wakes or not delay or not settings.derive_wake_queue_url:
        return
    unsent = wakeups.send(get_queue_client(), settings.derive_wake_queue_url, wakes, delay)
    if unsent:
        concurrency.add_metric(name="QuietWakeupsUnsent", unit=MetricUnit.Count, value=unsent)


def _refresh_cards(db: Db, found: SessionTarget) -> None:
    """Refresh the cards the quiet session's senders feed that wait for conclusions (llm engines only count them)."""
    from precis.configuration import derive_config
    from precis.memory import card_refresh
    from precis.store.records import json_object
    from precis.store.resources import workspace_item

    workspace = workspace_item(db, found.workspace)
    if workspace is None:
        return
    raw = workspace.get("configuration")
    config = derive_config(json_object(raw) if isinstance(raw, str) else raw or {}, {}, get_settings())
    engine = _engine_for(config)
    for observer, observed in session_collections(db, found.workspace, found.session):
        card_refresh.refresh(db, DreamTarget(found.workspace, observer, observed), engine, datetime.now(UTC))
