"""What one call of the summarizer did: the summaries it wrote, the jobs it gave up, whether work remains."""

from __future__ import annotations

from dataclasses import dataclass

from precis.events import Event


@dataclass(frozen=True)
class Written:
    summary_type: str
    covers_seq: int
    stored: bool  # False: a concurrent or earlier invocation already stored one covering as much
    job_through_seq: int | None = None  # a step short of its job's end: its item's stream record continues the job
    from_parts: tuple[int, ...] = ()  # a long summary built from short ones: their covers_seq, oldest first
    message_id: str = ""  # the id of message `covers_seq`


@dataclass(frozen=True)
class Failed:
    """A job given up for good (recorded, alarmed and remembered; see `precis.summaries.runner`'s docstring)."""

    summary_type: str
    first_seq: int  # the step that failed: from here to through_seq nothing was summarized
    through_seq: int
    reason: str


@dataclass(frozen=True)
class SummaryOutcome:
    """What one call did: summaries written (steps included), jobs failed or skipped, and whether work remains."""

    written: tuple[Written, ...] = ()
    failed: tuple[Failed, ...] = ()
    skipped: tuple[str, ...] = ()  # summary types not tried: a remembered failure's back-off is running
    work_remains: bool = False  # stopped for time; what was stored stays, and the next call continues from it
    runs: int = 1  # under a lease: 0 when another invocation held it (marked to run again), >1 when marks came
    incarnation: str | None = None  # the session's, when a summary was written
    events: tuple[Event, ...] = ()  # what to publish (summary.created, queue.empty): summarize_under_lease's

    @property
    def continues_by_itself(self) -> bool:
        """A stored step short of its job's end: its summary item's stream record wakes the next invocation."""
        return any(w.stored and w.job_through_seq for w in self.written)
