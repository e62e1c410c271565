"""Summarizing a session: what its strategy says is due, in one invocation at a time (`summarize_under_lease`)."""

from __future__ import annotations

import dataclasses
import math
import secrets
import time
from collections.abc import Callable, Sequence
from functools import lru_cache

from aws_lambda_powertools import Logger

from precis.configuration import summary_config
from precis.errors import Invalid
from precis.events import Event, queue_empty, summary_created
from precis.llm import EngineError
from precis.secrets import with_llm_key
from precis.settings import Settings
from precis.store.db import Db
from precis.store.messages import base_of, read_from
from precis.store.records import json_object
from precis.store.resources import session_and_workspace
from precis.store.summaries import drop_summary_lease, read_summary_items, release_summary_lease, take_summary_lease
from precis.summaries.engines import Engine, SummaryRequest, default_engine, get_engine
from precis.summaries.runner.outcome import SummaryOutcome, Written
from precis.summaries.runner.steps import FINISH_MARGIN_S, JobRunner
from precis.summaries.strategies import LONG, SHORT, MessageRef, SummaryCost, decide, needed_from

logger = Logger(child=True)


# The lease of a caller with no deadline: Lambda's longest invocation.
MAX_LEASE_S = 900.0


def summarize_session(
    db: Db,
    settings: Settings,
    ws: str,
    session_id: str,
    *,
    engine_for: Callable[[str], Engine] | None = None,
    remaining_s: Callable[[], float] = lambda: math.inf,
    clock: Callable[[], float] = time.time,
) -> SummaryOutcome:
    """Write every summary the session's strategy says is due, in steps that fit the input budget, while
    `remaining_s()` (seconds left in the invocation) leaves time for another request.

    Raises on a retryable engine failure; a job that fails for good is recorded, not raised. `clock`: epoch
    seconds, for failure back-offs.
    """
    session, workspace = session_and_workspace(db, ws, session_id)
    if session is None or workspace is None or "deleted_at" in session:
        return SummaryOutcome()  # deleted since the message was written: nothing to keep current
    if session.get("forgetting") or session.get("erasing"):
        # Messages being deleted (a summary would not be stored) or a peer's being erased: the last delete's cascade,
        # or the erasure once done with the session, summarizes it (store.forget, store.erase).
        return SummaryOutcome()
    try:
        config = summary_config(json_object(workspace.get("configuration")), json_object(session.get("configuration")))
    except Invalid as exc:
        logger.warning("summary settings invalid; session skipped", extra={"detail": exc.detail})
        return SummaryOutcome()
    raw, markers, parts = read_summary_items(db, ws, session_id)
    stored = {t: SummaryCost(t, s["covers_seq"], s["end_tokens"], s["token_count"]) for t, s in raw.items()}
    first = needed_from(config, stored)
    if first is None:
        return SummaryOutcome()
    # first..newest: bounded by the strategy's cadence
    # (a deleted message's seq is a placeholder: empty, of no tokens, so the cadence still counts by seq)
    items = read_from(db, ws, session_id, first, base=base_of(session), gaps=True)
    unfinished = {t: s["job_through_seq"] for t, s in raw.items() if s.get("job_through_seq")}
    jobs = decide(config, stored, [MessageRef(i["seq"], i["token_count"], i.get("run_id")) for i in items], unfinished)
    if not jobs:
        return SummaryOutcome()
    settings = _with_secret_key(settings)
    name = config.engine or default_engine(settings)
    try:
        engine = (engine_for or (lambda n: _engine(n, settings)))(name)
    except EngineError as exc:
        if exc.retryable:
            raise
        engine = _Unusable(name, exc)
    runner = JobRunner(
        db,
        ws,
        session_id,
        session.get("incarnation"),
        config,
        settings,
        engine,
        {i["seq"]: i for i in items},
        remaining_s,
        clock,
        parts.get(SHORT, []),
        raw[LONG]["covers_seq"] if LONG in raw else 0,
    )
    return dataclasses.replace(runner.run(jobs, raw, markers), incarnation=session.get("incarnation"))


def summarize_under_lease(
    db: Db,
    settings: Settings,
    ws: str,
    session_id: str,
    *,
    records: Sequence[str] = (),
    engine_for: Callable[[str], Engine] | None = None,
    remaining_s: Callable[[], float] = lambda: math.inf,
    clock: Callable[[], float] = time.time,
) -> SummaryOutcome:
    """`summarize_session`, by one invocation at a time per session: the stream consumer's way in.

    `records`: the stream sequence numbers of the caller's records for this session. The caller takes the session's
    lease until its own deadline; if another invocation holds it, the caller marks it dirty and returns at once
    (`runs` 0), and may acknowledge its records. The holder, done, lets go only if no mark came meanwhile; else it
    clears the mark and summarizes again. A mark is made only while the lease is held, and a holder lets go only
    unmarked, so every record acknowledged this way is followed by a read of the session (the holder's next run)
    that sees its message. When the holder cannot run again (no time left, an error, a crash), its own records are
    retried, and their retry reads the session after every mark:
    - out of time with work left that no stored step continues, or marked with under FINISH_MARGIN_S left: the
      lease is dropped and TimeoutError raised, so its records fail and are retried at once (a record of one's own
      comes back; waiting for a message that may never come, or for the lease to expire, would leave the marks
      unserved);
    - any other error: the lease is dropped and the error raised, as before;
    - a crash: the invocation ends without letting go; Lambda retries its batch, and the first retried record the
      lease was taken for takes it over (`take_summary_lease`); otherwise the lease expires at the deadline.
    Raises what summarize_session raises. `clock`: epoch seconds, for the lease and failure back-offs.
    """
    owner = secrets.token_hex(8)
    until = clock() + min(remaining_s(), MAX_LEASE_S)
    if not take_summary_lease(db, ws, session_id, owner=owner, until=until, clock=clock, records=records):
        logger.info(
            "session being summarized by another invocation: marked to run again", extra={"session": session_id}
        )
        return SummaryOutcome(runs=0)
    outcomes: list[SummaryOutcome] = []
    try:
        while True:
            outcome = summarize_session(
                db, settings, ws, session_id, engine_for=engine_for, remaining_s=remaining_s, clock=clock
            )
            outcomes.append(outcome)
            if outcome.work_remains and not outcome.continues_by_itself:
                raise TimeoutError(f"session '{session_id}': no summary step fit the time left")
            if release_summary_lease(db, ws, session_id, owner=owner):
                merged = _merged(outcomes)
                return dataclasses.replace(merged, events=tuple(_events(ws, session_id, merged, outcome, clock())))
            if remaining_s() < FINISH_MARGIN_S:
                raise TimeoutError(f"session '{session_id}': marked to run again with no time left")
            logger.info(
                "session marked while being summarized: summarizing again",
                extra={"session": session_id, "runs": len(outcomes)},
            )
    except BaseException:
        try:
            drop_summary_lease(db, ws, session_id, owner=owner)
        except Exception as exc:  # the crash case: the retry of the records takes the lease over
            logger.warning("summarizer lease not dropped", extra={"session": session_id, "error": str(exc)})
        raise


def _events(ws: str, session_id: str, merged: SummaryOutcome, last: SummaryOutcome, now: float) -> list[Event]:
    """A `summary.created` per whole summary stored, and the summary `queue.empty` when the last run left nothing due
    (no job failed, backed off, stopped for time or continued by a stored step) after one was stored: under the lease,
    released unmarked, no message came meanwhile. Ids from the session's incarnation and what each covers."""
    stored: list[Written] = [w for w in merged.written if w.stored]
    events = [
        summary_created(
            ws,
            session_id,
            summary_type=w.summary_type,
            message_id=w.message_id,
            covers_seq=w.covers_seq,
            incarnation=merged.incarnation,
            now=now,
        )
        for w in stored
        if not w.job_through_seq
    ]
    idle = not (last.failed or last.skipped or last.work_remains or last.continues_by_itself)
    if events and idle:
        position = max(w.covers_seq for w in stored)
        events.append(
            queue_empty(
                ws, "summary", session_id, observed=None, incarnation=merged.incarnation, position=position, now=now
            )
        )
    return events


def _merged(outcomes: list[SummaryOutcome]) -> SummaryOutcome:
    """One outcome for the runs made under one lease."""
    return SummaryOutcome(
        written=tuple(w for o in outcomes for w in o.written),
        failed=tuple(f for o in outcomes for f in o.failed),
        skipped=tuple(dict.fromkeys(t for o in outcomes for t in o.skipped)),
        work_remains=outcomes[-1].work_remains,
        runs=len(outcomes),
        incarnation=next((o.incarnation for o in outcomes if o.incarnation), None),
    )


def _with_secret_key(settings: Settings) -> Settings:
    """Settings with the LLM API key from Secrets Manager when the environment has none (deployed stacks) and a role
    needs it (precis.secrets.with_llm_key)."""
    return with_llm_key(settings)


@lru_cache(maxsize=4)
def _engine(name: str, settings: Settings) -> Engine:
    """One engine (and HTTP client) per cold start and configuration."""
    return get_engine(name, settings)


class _Unusable:
    """Stands in for an engine that cannot be built (`llm` with neither endpoint nor key): each call fails as its
    construction did, so each job is recorded and backed off like any request that fails for good."""

    timeout = 0.0

    def __init__(self, name: str, error: EngineError):
        self.name, self.error = name, error

    def summarize(self, request: SummaryRequest):
        raise self.error
