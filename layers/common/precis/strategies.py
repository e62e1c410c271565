"""When and what to summarize: pure decisions over a session's messages and its stored summaries.

The summarizer reads in two steps:

1. the session's configuration and summaries; `needed_from` says from which seq messages must be read
   (None: this strategy never summarizes, read nothing);
2. the messages (seq, token_count, run_id) from that seq through the newest stored one; `decide` returns the
   summaries that are due, each as "previous summary + messages first_seq..through_seq".

Runs: consecutive messages sharing a non-null `run_id` form a run; a message without one is a run by itself.
A run is complete once a message outside it follows it, so only the newest run can be open. Summaries end
at the end of a complete run, never inside one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

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
class Run:
    """Messages first_seq..last_seq of one run, their tokens, and whether a message outside it followed."""

    first_seq: int
    last_seq: int
    token_count: int
    complete: bool


class SummaryConfig(BaseModel):
    """A session's summary settings (workspace settings with the session's on top)."""

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
    max_output_tokens: int = Field(512, ge=64, le=4096)
    temperature: float | None = Field(None, ge=0, le=2)

    @field_validator("messages_per_long_summary")
    @classmethod
    def _long_after_short(cls, value: int, info: ValidationInfo) -> int:
        short = info.data.get("messages_per_short_summary")
        if short is not None and value <= short:
            raise ValueError(f"messages_per_long_summary must be greater than messages_per_short_summary ({short}), "
                             f"got {value}")
        return value


def merge_config(workspace: Mapping[str, Any] | None, session: Mapping[str, Any] | None) -> SummaryConfig:
    """Session summary settings over workspace ones; a key set to None inherits. Raises ValidationError."""
    merged = {k: v for k, v in (workspace or {}).items() if v is not None}
    merged.update({k: v for k, v in (session or {}).items() if v is not None})
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
) -> list[SummaryJob]:
    """The summaries due now. `messages`: contiguous, from `needed_from(...)` (or earlier) through the newest.

    Cadence may return a short and a long job at once; both must be written.
    """
    start = needed_from(config, summaries)
    if start is None:
        return []
    _check_messages(messages, start)
    grouped = runs(messages)
    if config.strategy == "cadence":
        jobs = (_cadence_job(SHORT, config.messages_per_short_summary, summaries, grouped),
                _cadence_job(LONG, config.messages_per_long_summary, summaries, grouped))
        return [job for job in jobs if job]
    job = _rolling_job(config, summaries, messages, grouped)
    return [job] if job else []


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
