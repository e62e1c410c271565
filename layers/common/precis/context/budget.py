"""What the context read returns: a summary and the newest messages that fit a token budget.

Pure functions over token counts; the storage layer does the reading in two rounds:

1. read the session's summaries and its last message, then `plan_context` picks the summary and says which
   messages could fit (`min_start_tokens`);
2. query the session's messages by `start_tokens >= plan.min_start_tokens` (optionally also
   `<= plan.total_tokens`, which cuts off messages appended since round 1), then `select_messages` trims the
   result to the answer.

A message's `start_tokens` is the tokens of everything before it, so the messages whose `start_tokens` is at
least `total_tokens - budget` are exactly the newest ones whose tokens sum to at most `budget`: the query reads
what is returned, whatever the session's length.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class MessageCost:
    """A message as the budget sees it: its position, its tokens, the tokens before it and its run."""

    seq: int
    token_count: int
    start_tokens: int
    run_start_seq: int

    def __post_init__(self) -> None:
        if self.seq < 1 or self.token_count < 0 or self.start_tokens < 0 or not 1 <= self.run_start_seq <= self.seq:
            raise ValueError(f"inconsistent message cost: {self}")


@dataclass(frozen=True, slots=True)
class SummaryCost:
    """A summary of messages 1..covers_seq; `end_tokens` is the tokens of the messages it covers."""

    summary_type: str
    covers_seq: int
    end_tokens: int
    token_count: int

    def __post_init__(self) -> None:
        if self.covers_seq < 0 or self.token_count < 0 or self.end_tokens < 0:
            raise ValueError(f"inconsistent summary cost: {self}")


@dataclass(frozen=True, slots=True)
class ContextPlan:
    """Round 1's decision: the summary to return and the messages worth querying for."""

    summary: SummaryCost | None
    message_budget: int
    after_seq: int
    min_start_tokens: int
    total_tokens: int
    last_seq: int


@dataclass(frozen=True, slots=True)
class ContextSelection:
    """The answer: the summary, the messages in ascending seq, how many were left out, and the total tokens."""

    summary: SummaryCost | None
    messages: list[MessageCost]
    messages_skipped: int
    token_count: int


class IncompleteCandidates(ValueError):
    """The candidates miss messages the plan needs (index lag, or a query that was not fully paginated)."""


def summary_budget(limit: int) -> int:
    """Tokens a summary may take: 40% of the limit, rounded down."""
    return limit * 2 // 5


def plan_context(
    limit: int,
    summaries: Iterable[SummaryCost],
    last: MessageCost | None,
    *,
    use_summary: bool = True,
    reserve: int = 0,
) -> ContextPlan:
    """Pick the largest summary that fits 40% of `limit` (less `reserve`, the tokens set aside for recalled messages)
    and leaves the newest message verbatim, and bound the messages that could fill the rest (the reserve included:
    what recall leaves unused goes to the newest messages).

    A summary is never worth the newest message: one that covers it, or leaves too little room for it, is passed
    over for a smaller or older one (or none) whenever that message fits `limit` on its own. Otherwise a summary of
    the very messages the context could have shown would take their place and leave the message share empty.
    """
    if limit < 0:
        raise ValueError(f"limit: must be at least 0, got {limit}")
    last_seq = last.seq if last else 0
    total_tokens = last.start_tokens + last.token_count if last else 0
    if not 0 <= reserve <= limit:
        raise ValueError(f"reserve: must be within 0..{limit}, got {reserve}")
    fits = summary_budget(limit - reserve)
    newest_fits = last is not None and last.token_count <= limit
    chosen: SummaryCost | None = None
    seen: set[str] = set()
    for summary in summaries:
        if summary.summary_type in seen:
            raise ValueError(f"summaries: {summary.summary_type!r} given twice")
        seen.add(summary.summary_type)
        # Covers nothing, or covers messages written after `last` was read: not part of this snapshot.
        if last is None or not 1 <= summary.covers_seq <= last_seq:
            continue
        _check_summary_against_last(summary, last)
        leaves_newest = summary.covers_seq < last_seq and last.token_count <= limit - summary.token_count
        if (
            use_summary
            and summary.token_count <= fits
            and (leaves_newest or not newest_fits)
            and (chosen is None or _rank(summary) > _rank(chosen))
        ):
            chosen = summary
    message_budget = limit - (chosen.token_count if chosen else 0)
    return ContextPlan(
        summary=chosen,
        message_budget=message_budget,
        after_seq=chosen.covers_seq if chosen else 0,
        min_start_tokens=max(total_tokens - message_budget, chosen.end_tokens if chosen else 0),
        total_tokens=total_tokens,
        last_seq=last_seq,
    )


def select_messages(
    plan: ContextPlan,
    candidates: Iterable[MessageCost],
    *,
    whole_runs: bool = False,
) -> ContextSelection:
    """The newest contiguous messages after the summary that fit the plan's budget, in ascending seq.

    With `whole_runs`, a run that only partly fits at the front is dropped (only that one run).
    """
    suffix = _snapshot_suffix(plan, candidates)
    first, used = len(suffix), 0
    # Newest to oldest; stop at the first that does not fit (never skip one in the middle).
    while first > 0 and used + suffix[first - 1].token_count <= plan.message_budget:
        first -= 1
        used += suffix[first].token_count
    if whole_runs and first < len(suffix) and suffix[first].run_start_seq < suffix[first].seq:
        partial_run = suffix[first].run_start_seq
        while first < len(suffix) and suffix[first].run_start_seq == partial_run:
            used -= suffix[first].token_count
            first += 1
    kept = suffix[first:]
    skipped = (kept[0].seq if kept else plan.last_seq + 1) - 1 - plan.after_seq
    return ContextSelection(
        summary=plan.summary,
        messages=kept,
        messages_skipped=skipped,
        token_count=(plan.summary.token_count if plan.summary else 0) + used,
    )


def recall_reserve(limit: int, share: float) -> int:
    """Tokens set aside for recalled messages: `share` of the limit, rounded down."""
    if not 0 <= share <= 1:
        raise ValueError(f"share: must be within 0..1, got {share}")
    return int(limit * share)


@dataclass(frozen=True, slots=True)
class Recallable:
    """A message recall may add: which one (session, seq) and its tokens."""

    key: tuple[str, int]
    token_count: int


def select_recalled(runs: Iterable[Sequence[Recallable]], budget: int) -> list[Recallable]:
    """The recalled messages: whole `runs` (best first; a message alone is a run of one) that fit `budget`, none
    twice, in the order they were chosen. A run that does not fit is passed over for a smaller one further down."""
    chosen: dict[tuple[str, int], Recallable] = {}
    used = 0
    for run in runs:
        run = [m for m in run if m.key not in chosen]
        cost = sum(m.token_count for m in run)
        if run and used + cost <= budget:
            used += cost
            chosen.update((m.key, m) for m in run)
    return list(chosen.values())


def _rank(summary: SummaryCost) -> tuple[int, int, str]:
    # Largest first, then the one covering more; the type only makes exact ties independent of input order.
    return summary.token_count, summary.covers_seq, summary.summary_type


def _check_summary_against_last(summary: SummaryCost, last: MessageCost) -> None:
    covered_before_last = summary.covers_seq < last.seq and summary.end_tokens <= last.start_tokens
    covers_last = summary.covers_seq == last.seq and summary.end_tokens == last.start_tokens + last.token_count
    if not (covered_before_last or covers_last):
        raise ValueError(f"summary {summary.summary_type!r}: end_tokens {summary.end_tokens} disagrees with {last}")


def _snapshot_suffix(plan: ContextPlan, candidates: Iterable[MessageCost]) -> list[MessageCost]:
    """The candidates after the summary and up to the plan's last message, ascending and checked contiguous."""
    seqs: set[int] = set()
    suffix: list[MessageCost] = []
    for message in candidates:
        if message.seq in seqs:
            raise ValueError(f"candidates: message #{message.seq} given twice")
        seqs.add(message.seq)
        # At or before the boundary: 0-token ties with the summary's end, or an over-fetch. After `last_seq`:
        # appended since round 1. Neither belongs to the answer.
        if plan.after_seq < message.seq <= plan.last_seq:
            suffix.append(message)
    if not suffix:
        return suffix
    suffix.sort(key=lambda message: message.seq)
    newest = suffix[-1]
    if newest.seq != plan.last_seq:
        raise IncompleteCandidates(f"candidates: newest is #{newest.seq}, the plan's last is #{plan.last_seq}")
    if newest.start_tokens + newest.token_count != plan.total_tokens:
        raise ValueError(
            f"candidates: #{newest.seq} ends at {newest.start_tokens + newest.token_count} tokens, "
            f"the plan's last ends at {plan.total_tokens}"
        )
    for older, newer in zip(suffix, suffix[1:]):
        if newer.seq != older.seq + 1:
            raise IncompleteCandidates(f"candidates: #{older.seq + 1}..#{newer.seq - 1} missing")
        if newer.start_tokens != older.start_tokens + older.token_count:
            raise ValueError(
                f"candidates: #{newer.seq} starts at {newer.start_tokens} tokens, "
                f"#{older.seq} ends at {older.start_tokens + older.token_count}"
            )
        if newer.run_start_seq not in (newer.seq, older.run_start_seq):
            raise ValueError(
                f"candidates: #{newer.seq} claims run #{newer.run_start_seq}, "
                f"#{older.seq} is in run #{older.run_start_seq}"
            )
    return suffix
