"""When and what to summarize: pure decisions over a session's messages and its stored summaries.

The summarizer reads in two steps:

1. the session's configuration and summaries; `needed_from` says from which seq messages must be read
   (None: this strategy never summarizes, read nothing);
2. the messages (seq, token_count, run_id) from that seq through the newest stored one; `decide` returns the
   summaries that are due, each as "previous summary + messages first_seq..through_seq".

Runs: consecutive messages sharing a non-null `run_id` form a run; a message without one is a run by itself.
A run is complete once a message outside it follows it, so only the newest run can be open. Summaries end
at the end of a complete run, never inside one.

A job too large for one request runs in steps (`next_step`), each ending at a run end, so every step's summary
is a valid summary and is stored at once with the job's end (`through_seq`) on it; `decide` continues such an
unfinished job even when the strategy alone would not call it due yet. A job that failed for good is tried
again only when it starts elsewhere, its settings change, or its back-off ends (`failure_holds`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from precis.budget import SummaryCost  # a stored summary's position and size, as the context budget sees it

SHORT = "honcho_chat_summary_short"
LONG = "honcho_chat_summary_long"
ROLLING = "rolling"


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


MIN_OUTPUT_TOKENS = 64
MAX_OUTPUT_TOKENS = 4096
CADENCE_OUTPUT_TOKENS = 512
ROLLING_OUTPUT_SHARE = 4  # a rolling summary holds at most token_threshold / 4 tokens
ROLLING_OUTPUT_DEFAULT_SHARE = 16  # and by default token_threshold / 16 (500 at the default 8000)


def default_max_output_tokens(strategy: str, token_threshold: int) -> int:
    """`max_output_tokens` when no layer sets it: 512 for cadence; for rolling a sixteenth of `token_threshold`
    (about today's 512 at the default 8000, and far under the quarter allowed), within 64..4096."""
    if strategy != "rolling":
        return CADENCE_OUTPUT_TOKENS
    return min(MAX_OUTPUT_TOKENS, max(MIN_OUTPUT_TOKENS, token_threshold // ROLLING_OUTPUT_DEFAULT_SHARE))


class SummaryConfig(BaseModel):
    """A session's summary settings: built-in defaults < the deployment's < the workspace's < the session's.

    No summary may hold more than the history it replaces. What that asks of the settings, per strategy:
    - `rolling`: a fold is due once the summary and the messages after it reach `token_threshold`, and replaces
      all of that but the newest `keep_recent_runs` runs. Its summary may hold at most a quarter of the threshold
      (`max_output_tokens <= token_threshold / 4`, so `token_threshold >= 256`): a summary near the threshold would
      make every later run due a fold that can shrink nothing, and a quarter leaves three quarters of the
      threshold to new runs between folds. Unset, `max_output_tokens` is a sixteenth of the threshold.
    - `cadence`: summaries fall due by message count, and 20 messages may hold fewer tokens than any cap; no
      setting bounds what a summary replaces, so the summarizer caps each request at the tokens it replaces
      (previous summary + messages; see `summarize`), as it does for every strategy.
    - `sliding_window`: writes no summary.
    `whole_runs`: the context's default for `whole_runs` (the query parameter wins).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    strategy: Literal["cadence", "rolling", "sliding_window"] = "cadence"
    engine: Literal["llm", "extractive"] | None = None  # None: the summarizer picks (llm when one is configured)
    messages_per_short_summary: int = Field(20, ge=10)
    messages_per_long_summary: int = Field(60, ge=20)
    token_threshold: int = Field(8000, ge=100)
    keep_recent_runs: int = Field(5, ge=1)
    keep_runs: int = Field(10, ge=1)
    instructions: str | None = Field(None, max_length=4000)
    model: str | None = Field(None, min_length=1, max_length=200)
    # Unset (None): default_max_output_tokens(strategy, token_threshold), filled in before validation.
    max_output_tokens: int = Field(CADENCE_OUTPUT_TOKENS, ge=MIN_OUTPUT_TOKENS, le=MAX_OUTPUT_TOKENS)
    temperature: float | None = Field(None, ge=0, le=2)
    whole_runs: bool = False

    @model_validator(mode="before")
    @classmethod
    def _derived_output(cls, data: Any) -> Any:
        if not isinstance(data, Mapping) or data.get("max_output_tokens") is not None:
            return data
        strategy, threshold = data.get("strategy", "cadence"), data.get("token_threshold", 8000)
        try:
            threshold = int(threshold)
        except (TypeError, ValueError):
            return data  # a bad token_threshold is refused by its own field; the cap is moot
        return {**data, "max_output_tokens": default_max_output_tokens(strategy, threshold)}

    @field_validator("messages_per_long_summary")
    @classmethod
    def _long_after_short(cls, value: int, info: ValidationInfo) -> int:
        short = info.data.get("messages_per_short_summary")
        if short is not None and value <= short:
            raise ValueError(f"messages_per_long_summary must be greater than messages_per_short_summary ({short}), "
                             f"got {value}")
        return value

    @field_validator("token_threshold")
    @classmethod
    def _room_for_a_rolling_summary(cls, value: int, info: ValidationInfo) -> int:
        floor = MIN_OUTPUT_TOKENS * ROLLING_OUTPUT_SHARE
        if _rolls(info) and value < floor:
            raise PydanticCustomError(
                "rolling_threshold",
                "at least {floor} for the rolling strategy, got {value} (its summary may hold a "
                "quarter of it, and max_output_tokens is at least {least})",
                {"floor": floor, "value": value, "least": MIN_OUTPUT_TOKENS})
        return value

    @field_validator("max_output_tokens")
    @classmethod
    def _summary_under_a_quarter(cls, value: int, info: ValidationInfo) -> int:
        threshold = info.data.get("token_threshold")
        if _rolls(info) and threshold is not None and value * ROLLING_OUTPUT_SHARE > threshold:
            raise PydanticCustomError(
                "rolling_output",
                "at most a quarter of token_threshold {threshold} ({most}) for the rolling "
                "strategy, got {value}: a summary must stay far smaller than the history it folds",
                {"threshold": threshold, "most": threshold // ROLLING_OUTPUT_SHARE, "value": value})
        return value


def _rolls(info: ValidationInfo) -> bool:
    return info.data.get("enabled", True) is not False and info.data.get("strategy") == "rolling"


def merge_config(*layers: Mapping[str, Any] | None) -> SummaryConfig:
    """Summary settings from layers, lowest first (deployment, workspace, session); a key set to None inherits.
    Raises ValidationError."""
    merged: dict[str, Any] = {}
    for layer in layers:
        merged.update({k: v for k, v in (layer or {}).items() if v is not None})
    return SummaryConfig.model_validate(merged)


def summary_types(config: SummaryConfig) -> tuple[str, ...]:
    """The summary types this configuration maintains."""
    if not config.enabled:
        return ()
    return {"cadence": (SHORT, LONG), "rolling": (ROLLING,), "sliding_window": ()}[config.strategy]


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
        jobs = {SHORT: _cadence_job(SHORT, config.messages_per_short_summary, summaries, grouped),
                LONG: _cadence_job(LONG, config.messages_per_long_summary, summaries, grouped)}
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
    return Step(first.first_seq, first.last_seq,
                {m.seq: share for m, share in zip(members, shares) if share < m.token_count})


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


def failure_holds(failure: JobFailure | None, job: SummaryJob, fingerprint: str, now: float) -> bool:
    """Whether a job must not be tried now: it failed for good from the same start with the same settings
    (`fingerprint`) and its back-off is still running. New messages do not lift it (they only extend the job's
    end); progress stored elsewhere, changed settings, or the end of the back-off do."""
    return (failure is not None and failure.first_seq == job.first_seq and failure.fingerprint == fingerprint
            and now < failure.retry_at)


def runs(messages: Sequence[MessageRef]) -> list[Run]:
    """Group contiguous messages into runs, oldest first; only the last can be open (a run id, nothing after)."""
    grouped: list[Run] = []
    first = 0
    for i, message in enumerate(messages):
        following = messages[i + 1] if i + 1 < len(messages) else None
        same_run = following is not None and message.run_id is not None and following.run_id == message.run_id
        if not same_run:
            members = messages[first:i + 1]
            grouped.append(Run(
                first_seq=members[0].seq,
                last_seq=message.seq,
                token_count=sum(m.token_count for m in members),
                complete=following is not None or message.run_id is None,
            ))
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


def _cadence_job(summary_type: str, every: int, summaries: Mapping[str, SummaryCost],
                 grouped: list[Run]) -> SummaryJob | None:
    previous = summaries.get(summary_type)
    covered = _covered(summaries, summary_type)
    # Every message up to the last complete run's end is in a complete run: only the newest run can be open.
    ends = [run.last_seq for run in grouped if run.complete and run.last_seq > covered]
    if not ends or ends[-1] - covered < every:
        return None
    return SummaryJob(summary_type, previous, covered + 1, ends[-1])


def _continued(summary_type: str, job: SummaryJob | None, summaries: Mapping[str, SummaryCost], grouped: list[Run],
               target: int | None) -> SummaryJob | None:
    """`job`, or the unfinished job through `target` (the last complete run end up to it) if that reaches further."""
    covered = _covered(summaries, summary_type)
    if target is None or target <= covered:
        return job
    ends = [run.last_seq for run in grouped if run.complete and covered < run.last_seq <= target]
    if not ends or (job is not None and job.through_seq >= ends[-1]):
        return job
    return SummaryJob(summary_type, summaries.get(summary_type), covered + 1, ends[-1])


def _rolling_job(config: SummaryConfig, summaries: Mapping[str, SummaryCost], messages: Sequence[MessageRef],
                 grouped: list[Run]) -> SummaryJob | None:
    previous = summaries.get(ROLLING)
    covered = _covered(summaries, ROLLING)
    tokens = (previous.token_count if previous else 0) + sum(m.token_count for m in messages if m.seq > covered)
    complete = [run for run in grouped if run.complete and run.last_seq > covered]
    # Keep the newest `keep_recent_runs` complete runs, and the open run (if any) on top of them.
    if tokens < config.token_threshold or len(complete) <= config.keep_recent_runs:
        return None
    evicted = complete[: len(complete) - config.keep_recent_runs]
    return SummaryJob(ROLLING, previous, covered + 1, evicted[-1].last_seq)
