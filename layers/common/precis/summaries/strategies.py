"""When and what to summarize: pure decisions over a session's messages and its stored summaries.

The summarizer reads in two steps:

1. the session's configuration and summaries; `needed_from` says from which seq messages must be read
   (None: this strategy never summarizes, read nothing);
2. the messages (seq, token_count, run_id) from that seq through the newest stored one; `decide` returns the
   summaries that are due, each as "previous summary + messages first_seq..through_seq".

Runs: consecutive messages sharing a non-null `run_id` form a run; a message without one is a run by itself.
A run is complete once a message outside it follows it, so only the newest run can be open. Summaries end
at the end of a complete run, never inside one, and never take the newest messages from the context: a cadence
summary ends at the last complete run end at or before a multiple of its period (#20, #40, … without run ids,
whatever the batches), a rolling fold keeps the newest `keep_recent_runs` complete runs (and the open one).

A job too large for one request runs in steps (`next_step`), each ending at a run end, so every step's summary
is a valid summary and is stored at once with the job's end (`through_seq`) on it; `decide` continues such an
unfinished job even when the strategy alone would not call it due yet. A job that failed for good is tried
again only when it starts elsewhere, its settings change, or its back-off ends (`failure_holds`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeGuard

from precis.context.budget import SummaryCost  # a stored summary's position and size, as the context budget sees it
from precis.schemas.summary_settings import (  # noqa: F401  (the settings the strategies decide by; re-exported)
    CADENCE_OUTPUT_TOKENS,
    LONG,
    MAX_OUTPUT_TOKENS,
    MIN_OUTPUT_TOKENS,
    ROLLING,
    ROLLING_OUTPUT_DEFAULT_SHARE,
    ROLLING_OUTPUT_SHARE,
    SHORT,
    SummaryConfig,
    default_max_output_tokens,
    merge_config,
    summary_types,
)


@dataclass(frozen=True, slots=True)
class MessageRef:
    """A message as the strategies see it: its position, its tokens and its run."""

    seq: int
    token_count: int
    run_id: str | None

    def __post_init__(self) -> None:
        if self.seq < 1 or self.token_count < 0:
            raise ValueError(f"inconsistent message: {self}")


@dataclass(frozen=True, slots=True)
class SummaryJob:
    """Summarize `previous` + messages first_seq..through_seq into a `summary_type` covering 1..through_seq."""

    summary_type: str
    previous: SummaryCost | None
    first_seq: int
    through_seq: int


@dataclass(frozen=True, slots=True)
class Step:
    """One request of a job: messages first_seq..through_seq, ending at a run end.

    `keep` caps, by seq, the prompt tokens of the messages of a run too large for any request; the others go whole.
    """

    first_seq: int
    through_seq: int
    keep: Mapping[int, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class JobFailure:
    """A job that failed for good: where it started, with which settings, how often in a row, and when to retry."""

    first_seq: int
    fingerprint: str
    failures: int
    retry_at: float  # epoch seconds


@dataclass(frozen=True, slots=True)
class Run:
    """Messages first_seq..last_seq of one run, their tokens, and whether a message outside it followed."""

    first_seq: int
    last_seq: int
    token_count: int
    complete: bool


def needed_from(config: SummaryConfig, summaries: Mapping[str, SummaryCost]) -> int | None:
    """The first seq `decide` needs: one after the oldest boundary among this strategy's summaries (None: none)."""
    types = summary_types(config)
    if not types:
        return None
    return min(_covered(summaries, t) for t in types) + 1


def decide(
    config: SummaryConfig,
    summaries: Mapping[str, SummaryCost],
    messages: Sequence[MessageRef],
    unfinished: Mapping[str, int] | None = None,
) -> list[SummaryJob]:
    """The summaries due now. `messages`: contiguous, from `needed_from(...)` (or earlier) through the newest.

    `unfinished`: by summary type, the end (through_seq) of a job whose steps stopped short of it; that job is due
    whatever the strategy says (through its end, or further when the strategy's own job reaches further).
    Cadence may return a short and a long job at once; both must be written.
    """
    start = needed_from(config, summaries)
    if start is None:
        return []
    _check_messages(messages, start)
    grouped = runs(messages)
    if config.strategy == "cadence":
        jobs = {
            SHORT: _cadence_job(SHORT, config.messages_per_short_summary, summaries, grouped),
            LONG: _cadence_job(LONG, config.messages_per_long_summary, summaries, grouped),
        }
    else:
        jobs = {ROLLING: _rolling_job(config, summaries, messages, grouped)}
    continued = (_continued(t, job, summaries, grouped, (unfinished or {}).get(t)) for t, job in jobs.items())
    return [job for job in continued if job]


def next_step(messages: Sequence[MessageRef], room: int) -> Step:
    """The next request of a job whose rest is `messages` (ending at a run end; `token_count`: each one's cost in
    the prompt): as many whole runs as fit in `room` tokens, at least one.

    A first run that does not fit alone is still sent whole, in one step, with its messages cut to max-min fair
    shares of `room` (see `fair_shares`): splitting it over several requests would end summaries inside a run,
    and a step that always ends at a run end always makes progress that can be stored.
    """
    if not messages:
        raise ValueError("messages: a step needs at least one message")
    grouped = runs(messages)
    used, through = 0, None
    for run in grouped:
        if used + run.token_count > room:
            break
        used, through = used + run.token_count, run.last_seq
    if through is not None:
        return Step(messages[0].seq, through)
    first = grouped[0]
    members = [m for m in messages if m.seq <= first.last_seq]
    shares = fair_shares([m.token_count for m in members], room)
    return Step(
        first.first_seq, first.last_seq, {m.seq: share for m, share in zip(members, shares) if share < m.token_count}
    )


def fair_shares(costs: Sequence[int], room: int) -> list[int]:
    """Max-min fair shares of `room` tokens: each cost capped at the largest level L with sum(min(c, L)) <= room,
    so short messages stay whole and only the longest are cut, all to the same length."""
    left, level = max(0, room), max(costs, default=0)
    ordered = sorted(costs)
    for i, cost in enumerate(ordered):
        share = left // (len(ordered) - i)
        if cost > share:
            level = share  # this cost and every larger one get the same share
            break
        left -= cost
    return [min(cost, level) for cost in costs]


def retry_backoff_s(failures: int) -> float:
    """Seconds before a job that failed for good `failures` times in a row is tried again: 10 minutes, doubling,
    at most a day (long enough not to pay for a doomed request per message, short enough for a fixed key to
    show)."""
    return min(86_400.0, 600.0 * 2 ** max(0, failures - 1))


def failure_holds(failure: JobFailure | None, job: SummaryJob, fingerprint: str, now: float) -> TypeGuard[JobFailure]:
    """Whether a job must not be tried now: it failed for good from the same start with the same settings
    (`fingerprint`) and its back-off is still running. New messages do not lift it (they only extend the job's
    end); progress stored elsewhere, changed settings, or the end of the back-off do."""
    return (
        failure is not None
        and failure.first_seq == job.first_seq
        and failure.fingerprint == fingerprint
        and now < failure.retry_at
    )


def runs(messages: Sequence[MessageRef]) -> list[Run]:
    """Group contiguous messages into runs, oldest first; only the last can be open (a run id, nothing after)."""
    grouped: list[Run] = []
    first = 0
    for i, message in enumerate(messages):
        following = messages[i + 1] if i + 1 < len(messages) else None
        same_run = following is not None and message.run_id is not None and following.run_id == message.run_id
        if not same_run:
            members = messages[first : i + 1]
            grouped.append(
                Run(
                    first_seq=members[0].seq,
                    last_seq=message.seq,
                    token_count=sum(m.token_count for m in members),
                    complete=following is not None or message.run_id is None,
                )
            )
            first = i + 1
    return grouped


def _covered(summaries: Mapping[str, SummaryCost], summary_type: str) -> int:
    summary = summaries.get(summary_type)
    return summary.covers_seq if summary else 0


def _check_messages(messages: Sequence[MessageRef], start: int) -> None:
    if messages and messages[0].seq > start:
        raise ValueError(f"messages: must start at #{start} or earlier, got #{messages[0].seq}")
    for older, newer in zip(messages, messages[1:]):
        if newer.seq != older.seq + 1:
            raise ValueError(f"messages: must be contiguous, #{newer.seq} follows #{older.seq}")


def _cadence_job(
    summary_type: str, every: int, summaries: Mapping[str, SummaryCost], grouped: list[Run]
) -> SummaryJob | None:
    previous = summaries.get(summary_type)
    covered = _covered(summaries, summary_type)
    through = cadence_boundary(grouped, every)
    if through <= covered:
        return None
    return SummaryJob(summary_type, previous, covered + 1, through)


def cadence_boundary(grouped: Sequence[Run], every: int) -> int:
    """Where a cadence summary ends (0: nowhere yet): the end of the last complete run at or before the newest
    multiple of `every` that complete runs reach. Without run ids that is #every, #2·every, …, however the messages
    were batched; the messages after it stay for the context to show verbatim (a summary through the newest
    message would leave it nothing to show)."""
    # Only the newest run can be open: every message up to the last complete run's end lies in a complete run.
    reached = max((run.last_seq for run in grouped if run.complete), default=0)
    count = reached - reached % every
    return max((run.last_seq for run in grouped if run.complete and run.last_seq <= count), default=0)


def _continued(
    summary_type: str,
    job: SummaryJob | None,
    summaries: Mapping[str, SummaryCost],
    grouped: list[Run],
    target: int | None,
) -> SummaryJob | None:
    """`job`, or the unfinished job through `target` (the last complete run end up to it) if that reaches further."""
    covered = _covered(summaries, summary_type)
    if target is None or target <= covered:
        return job
    ends = [run.last_seq for run in grouped if run.complete and covered < run.last_seq <= target]
    if not ends or (job is not None and job.through_seq >= ends[-1]):
        return job
    return SummaryJob(summary_type, summaries.get(summary_type), covered + 1, ends[-1])


def _rolling_job(
    config: SummaryConfig, summaries: Mapping[str, SummaryCost], messages: Sequence[MessageRef], grouped: list[Run]
) -> SummaryJob | None:
    previous = summaries.get(ROLLING)
    covered = _covered(summaries, ROLLING)
    tokens = (previous.token_count if previous else 0) + sum(m.token_count for m in messages if m.seq > covered)
    complete = [run for run in grouped if run.complete and run.last_seq > covered]
    # Keep the newest `keep_recent_runs` complete runs, and the open run (if any) on top of them.
    if tokens < config.token_threshold or len(complete) <= config.keep_recent_runs:
        return None
    evicted = complete[: len(complete) - config.keep_recent_runs]
    return SummaryJob(ROLLING, previous, covered + 1, evicted[-1].last_seq)
