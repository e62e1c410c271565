"""The context budget: which summary and which messages fit, checked against a brute-force reference."""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from precis.context.budget import (
    ContextPlan,
    ContextSelection,
    IncompleteCandidates,
    MessageCost,
    SummaryCost,
    plan_context,
    select_messages,
    summary_budget,
)

# --- building sessions ----------------------------------------------------------------------------------------


@dataclass
class Session:
    """Every message ever written (`index`), the run each belongs to, and how many round 1 saw (`seen`)."""

    index: list[MessageCost]
    run_of: list[int]  # run label per message, index seq - 1: the reference's own notion of runs
    seen: int

    @property
    def snapshot(self) -> list[MessageCost]:
        return self.index[: self.seen]

    @property
    def last(self) -> MessageCost | None:
        return self.index[self.seen - 1] if self.seen else None


def build(token_counts: list[int], run_lengths: list[int] | None = None, seen: int | None = None) -> Session:
    """A session with these message token counts, grouped in runs of these lengths (default: all alone)."""
    run_lengths = run_lengths or [1] * len(token_counts)
    assert sum(run_lengths) == len(token_counts)
    index: list[MessageCost] = []
    run_of: list[int] = []
    start = 0
    for run, length in enumerate(run_lengths):
        run_start = len(index) + 1
        for _ in range(length):
            tokens = token_counts[len(index)]
            index.append(MessageCost(len(index) + 1, tokens, start, run_start))
            run_of.append(run)
            start += tokens
    return Session(index, run_of, len(index) if seen is None else seen)


def summary(session: Session, covers_seq: int, token_count: int, summary_type: str = "short") -> SummaryCost:
    """A summary of messages 1..covers_seq of `session`, with `end_tokens` derived from them."""
    end_tokens = sum(m.token_count for m in session.index[:covers_seq])
    return SummaryCost(summary_type, covers_seq, end_tokens, token_count)


def index_query(session: Session, plan: ContextPlan) -> list[MessageCost]:
    """What round 2 reads: the session's messages with start_tokens >= min_start_tokens, ascending."""
    return sorted((m for m in session.index if m.start_tokens >= plan.min_start_tokens), key=lambda m: m.start_tokens)


def context(
    session: Session, summaries: list[SummaryCost], limit: int, *, use_summary: bool = True, whole_runs: bool = False
) -> tuple[ContextPlan, ContextSelection]:
    """Both rounds, as the storage layer runs them."""
    plan = plan_context(limit, summaries, session.last, use_summary=use_summary)
    return plan, select_messages(plan, index_query(session, plan), whole_runs=whole_runs)


def seqs(selection: ContextSelection) -> list[int]:
    return [m.seq for m in selection.messages]


# --- the brute-force reference ----------------------------------------------------------------------------------


@dataclass
class Expected:
    summary: SummaryCost | None
    fitting: list[MessageCost]  # the newest messages after the summary that fit, before whole-run packing
    messages: list[MessageCost]
    messages_skipped: int
    token_count: int


def reference(
    session: Session, summaries: list[SummaryCost], limit: int, use_summary: bool, whole_runs: bool
) -> Expected:
    """The answer worked out the slow way, from the full list of messages round 1 saw."""
    messages = session.snapshot
    chosen = None
    newest = messages[-1] if messages else None

    def leaves_the_newest(s: SummaryCost) -> bool:
        """The newest message still shows beside `s`, or it would not show at all (bigger than the limit)."""
        return (
            newest is None
            or newest.token_count > limit
            or (s.covers_seq < newest.seq and s.token_count + newest.token_count <= limit)
        )

    if use_summary:
        fitting_summaries = [
            s
            for s in summaries
            if 1 <= s.covers_seq <= len(messages)
            and s.token_count <= math.floor(Fraction(4, 10) * limit)
            and leaves_the_newest(s)
        ]
        if fitting_summaries:
            largest = max(s.token_count for s in fitting_summaries)
            latest = max(s.covers_seq for s in fitting_summaries if s.token_count == largest)
            chosen = max(
                (s for s in fitting_summaries if (s.token_count, s.covers_seq) == (largest, latest)),
                key=lambda s: s.summary_type,
            )
    after = chosen.covers_seq if chosen else 0
    budget = limit - (chosen.token_count if chosen else 0)

    fitting: list[MessageCost] = []
    for message in reversed(messages):
        if message.seq <= after or sum(m.token_count for m in fitting) + message.token_count > budget:
            break
        fitting.insert(0, message)
    kept = list(fitting)
    if whole_runs and kept:
        oldest = kept[0]
        run = session.run_of[oldest.seq - 1]
        if oldest.seq > 1 and session.run_of[oldest.seq - 2] == run:
            kept = [m for m in kept if session.run_of[m.seq - 1] != run]
    first = kept[0].seq if kept else len(messages) + 1
    return Expected(
        summary=chosen,
        fitting=fitting,
        messages=kept,
        messages_skipped=sum(1 for m in messages if after < m.seq < first),
        token_count=(chosen.token_count if chosen else 0) + sum(m.token_count for m in kept),
    )


# --- property: the module agrees with the reference -------------------------------------------------------------

token_counts = st.one_of(st.just(0), st.integers(0, 20), st.integers(0, 5000))


@st.composite
def cases(draw):
    """A session (possibly with messages appended after round 1), its summaries, a limit and the flags."""
    run_lengths = draw(st.lists(st.integers(1, 6), max_size=25))
    session = build(draw(st.lists(token_counts, min_size=sum(run_lengths), max_size=sum(run_lengths))), run_lengths)
    written = len(session.index)
    session.seen = max(0, written - draw(st.one_of(st.just(0), st.integers(0, 8))))
    # Summaries end at run ends (or cover nothing); one may cover messages appended after round 1.
    run_ends = [0] + [
        m.seq for m in session.index if m.seq == written or session.run_of[m.seq] != session.run_of[m.seq - 1]
    ]
    total = sum(m.token_count for m in session.snapshot)
    limit = draw(st.one_of(st.integers(1, 100_000), st.integers(1, 300), st.integers(1, max(1, min(total, 100_000)))))
    seen_run_ends = [end for end in run_ends if 1 <= end <= session.seen] or run_ends
    near_fit = limit * 2 // 5 + 1  # sizes around the 40% line, so summaries often just fit or just miss
    types = draw(
        st.lists(st.sampled_from(["short", "long", "rolling"]), unique=True, min_size=1, max_size=3) | st.just([])
    )
    summaries = [
        summary(
            session,
            draw(st.sampled_from(seen_run_ends) | st.sampled_from(run_ends)),
            draw(st.one_of(st.integers(0, 50), st.integers(0, 50_000), st.integers(0, near_fit))),
            summary_type,
        )
        for summary_type in types
    ]
    use_summary = draw(st.sampled_from([True, True, False]))
    return session, summaries, limit, use_summary, draw(st.booleans())


@settings(max_examples=400, deadline=None)
@given(cases())
def test_context_matches_brute_force_reference(case):
    """Plan plus index query plus selection give exactly the reference's summary, messages and counts."""
    session, summaries, limit, use_summary, whole_runs = case
    plan, selection = context(session, summaries, limit, use_summary=use_summary, whole_runs=whole_runs)
    expected = reference(session, summaries, limit, use_summary, whole_runs)

    assert plan.summary == expected.summary
    assert plan.message_budget == limit - (expected.summary.token_count if expected.summary else 0)
    assert plan.after_seq == (expected.summary.covers_seq if expected.summary else 0)
    assert plan.total_tokens == sum(m.token_count for m in session.snapshot)
    assert plan.last_seq == len(session.snapshot)
    assert selection.summary == expected.summary
    assert selection.messages == expected.messages
    assert selection.messages_skipped == expected.messages_skipped
    assert selection.token_count == expected.token_count


@settings(max_examples=400, deadline=None)
@given(cases())
def test_context_invariants_hold(case):
    """Within the limit; ascending, contiguous, after the boundary, ending at the last message; whole runs."""
    session, summaries, limit, use_summary, whole_runs = case
    plan, selection = context(session, summaries, limit, use_summary=use_summary, whole_runs=whole_runs)
    after = selection.summary.covers_seq if selection.summary else 0
    got = seqs(selection)

    assert selection.token_count <= limit
    assert selection.token_count == (selection.summary.token_count if selection.summary else 0) + sum(
        m.token_count for m in selection.messages
    )
    if selection.summary:
        assert selection.summary.token_count <= summary_budget(limit)
    assert got == list(range(got[0], got[0] + len(got))) if got else True
    assert all(seq > after for seq in got)  # the boundary message is never repeated
    if got:
        assert got[-1] == len(session.snapshot)
        assert selection.messages[0].run_start_seq == got[0] or not whole_runs
    first = got[0] if got else len(session.snapshot) + 1
    assert selection.messages_skipped == first - 1 - after
    assert selection.messages_skipped + len(got) == len(session.snapshot) - after


@settings(max_examples=400, deadline=None)
@given(cases())
def test_index_query_reads_about_what_is_returned(case):
    """Round 2 reads the fitting messages, plus only 0-token boundary ties, a dropped partial run, or appends."""
    session, summaries, limit, use_summary, whole_runs = case
    plan, selection = context(session, summaries, limit, use_summary=use_summary, whole_runs=whole_runs)
    expected = reference(session, summaries, limit, use_summary, whole_runs)
    read = index_query(session, plan)
    boundary_end = plan.summary.end_tokens if plan.summary else 0

    in_snapshot = [m for m in read if plan.after_seq < m.seq <= plan.last_seq]
    assert in_snapshot == expected.fitting  # exactly the suffix that fits, nothing older
    unselected = [m for m in in_snapshot if m not in selection.messages]
    if whole_runs:
        assert len({m.run_start_seq for m in unselected}) <= 1
    else:
        assert unselected == []
    for tie in (m for m in read if m.seq <= plan.after_seq):
        assert (tie.token_count, tie.start_tokens) == (0, boundary_end)
    for appended in (m for m in read if m.seq > plan.last_seq):
        assert appended.start_tokens >= plan.total_tokens  # a `<= total_tokens` bound cuts these to ties


@settings(max_examples=200, deadline=None)
@given(cases(), st.randoms(use_true_random=False))
def test_selection_ignores_order_and_over_fetch(case, rnd):
    """Any superset of the index query, in any order, selects the same messages."""
    session, summaries, limit, use_summary, whole_runs = case
    plan, selection = context(session, summaries, limit, use_summary=use_summary, whole_runs=whole_runs)
    everything = list(session.index)
    rnd.shuffle(everything)
    assert select_messages(plan, everything, whole_runs=whole_runs) == selection


# --- the pinned details ------------------------------------------------------------------------------------------


def test_summary_budget_is_forty_percent_rounded_down():
    """40% of the limit, in integers."""
    assert [summary_budget(n) for n in (0, 1, 2, 3, 5, 7, 100_000)] == [0, 0, 0, 1, 2, 2, 40_000]


def test_context_never_repeats_summary_boundary():
    """Messages start strictly after the message the summary covers."""
    session = build([10] * 6)
    plan, selection = context(session, [summary(session, 4, 20)], 1000)
    assert seqs(selection) == [5, 6]
    assert selection.messages_skipped == 0
    assert selection.token_count == 40


def test_zero_token_boundary_message_is_read_but_not_repeated():
    """An empty message at the summary's end ties with the next start_tokens and is still left out."""
    session = build([10, 10, 0, 0, 10])
    plan, selection = context(session, [summary(session, 4, 5)], 1000)
    assert [m.seq for m in index_query(session, plan)] == [3, 4, 5]
    assert seqs(selection) == [5]
    assert selection.token_count == 15


def test_summary_too_large_for_forty_percent_is_dropped_and_messages_span_whole_history():
    """A summary over 40% of the limit is not returned; messages come from the whole history."""
    session = build([10] * 10)
    plan, selection = context(session, [summary(session, 6, 41)], 100)
    assert selection.summary is None
    assert plan.after_seq == 0
    assert seqs(selection) == list(range(1, 11))
    assert selection.token_count == 100


def test_largest_fitting_summary_wins():
    """Among summaries within 40%, the largest is returned; the oversized one is passed over."""
    session = build([10] * 10)
    short, long = summary(session, 8, 30, "short"), summary(session, 6, 39, "long")
    oversized = summary(session, 4, 41, "rolling")
    plan, selection = context(session, [short, long, oversized], 100)
    assert selection.summary == long
    assert seqs(selection) == list(range(7, 11))  # 4 × 10 fits in 100 - 39; #6 is covered
    assert selection.token_count == 79


def test_a_recall_reserve_shrinks_the_summarys_share_and_stays_in_the_messages_budget():
    """With 50 of 100 tokens set aside for recall, a summary gets 40% of the other 50; the reserve is message budget
    (what recall leaves unused, the newest messages take)."""
    session = build([10] * 10)
    long, short = summary(session, 6, 39, "long"), summary(session, 8, 20, "short")
    plan = plan_context(100, [long, short], session.last, reserve=50)
    assert plan.summary == short and plan.message_budget == 80
    assert plan_context(100, [long, short], session.last).summary == long
    with pytest.raises(ValueError, match="reserve"):
        plan_context(100, [], session.last, reserve=101)


def test_equal_sized_summaries_prefer_the_later_coverage():
    """Two summaries of the same size: the one covering more messages wins."""
    session = build([10] * 10)
    earlier, later = summary(session, 4, 20, "long"), summary(session, 8, 20, "short")
    assert plan_context(100, [later, earlier], session.last).summary == later
    assert plan_context(100, [earlier, later], session.last).summary == later


def test_without_summary_messages_get_the_whole_budget():
    """use_summary=False returns no summary and gives messages the whole limit."""
    session = build([10] * 10)
    plan, selection = context(session, [summary(session, 9, 5)], 55, use_summary=False)
    assert (selection.summary, plan.message_budget, plan.after_seq) == (None, 55, 0)
    assert seqs(selection) == [6, 7, 8, 9, 10]
    assert selection.messages_skipped == 5


def test_message_larger_than_budget_returns_no_messages_and_counts_it_skipped():
    """A newest message bigger than the budget leaves no messages; everything after the summary is skipped."""
    session = build([10, 10, 10, 500])
    plan, selection = context(session, [summary(session, 2, 10)], 100)
    assert selection.messages == []
    assert selection.messages_skipped == 2
    assert selection.token_count == 10


def test_messages_stop_at_first_that_does_not_fit():
    """Contiguity: a small older message is not taken past a big one that does not fit."""
    session = build([1, 1, 90, 5, 5])
    plan, selection = context(session, [], 50)
    assert seqs(selection) == [4, 5]
    assert selection.messages_skipped == 3


def test_whole_runs_drops_only_the_oldest_partial_run():
    """The partly fitting oldest run goes; the complete runs after it stay."""
    # runs: [1 2 3] [4 5] [6] [7 8]; 60 tokens fit #3..#8 (6 × 10), splitting the first run.
    session = build([10] * 8, [3, 2, 1, 2])
    plan, selection = context(session, [], 60, whole_runs=True)
    assert seqs(selection) == [4, 5, 6, 7, 8]
    assert selection.messages_skipped == 3
    assert selection.token_count == 50
    plan, selection = context(session, [], 60)
    assert seqs(selection) == [3, 4, 5, 6, 7, 8]


def test_whole_runs_keeps_a_run_that_fits_entirely():
    """When the oldest kept message starts its run, nothing is dropped."""
    session = build([10] * 8, [3, 2, 1, 2])
    plan, selection = context(session, [], 50, whole_runs=True)
    assert seqs(selection) == [4, 5, 6, 7, 8]


def test_whole_runs_drops_a_single_run_that_only_partly_fits():
    """One long run that does not fit whole returns no messages rather than its tail."""
    session = build([10] * 5, [5])
    plan, selection = context(session, [], 30, whole_runs=True)
    assert selection.messages == []
    assert selection.messages_skipped == 5
    assert selection.token_count == 0


def test_empty_session_returns_nothing():
    """No messages: no summary, no messages, nothing skipped, zero tokens."""
    plan = plan_context(100, [], None)
    assert plan == ContextPlan(None, 100, 0, 0, 0, 0)
    assert select_messages(plan, []) == ContextSelection(None, [], 0, 0)


def test_empty_messages_cost_nothing_and_are_returned():
    """Messages with 0 tokens fit any budget, including one already used up, but never past one that does not."""
    session = build([0, 50, 0, 0])
    plan, selection = context(session, [], 50)
    assert seqs(selection) == [1, 2, 3, 4]
    assert selection.messages_skipped == 0
    assert selection.token_count == 50
    plan, selection = context(session, [], 1)
    assert seqs(selection) == [3, 4]
    assert selection.messages_skipped == 2


def test_a_summary_covering_the_newest_message_is_passed_over_when_that_message_fits():
    """A summary through the last message would leave the message share empty: the messages it covers come
    instead, or the older summary that leaves them."""
    session = build([10, 10, 0])
    plan, selection = context(session, [summary(session, 3, 8)], 100)
    assert (selection.summary, seqs(selection), selection.token_count) == (None, [1, 2, 3], 20)
    older = summary(session, 1, 5, "long")
    plan, selection = context(session, [summary(session, 3, 8), older], 100)
    assert (selection.summary, seqs(selection), selection.token_count) == (older, [2, 3], 15)


def test_a_summary_is_passed_over_when_the_newest_message_fits_only_without_it():
    """The newest message (often the question) verbatim beats a summary of older ones."""
    session = build([10] * 5 + [70])
    plan, selection = context(session, [summary(session, 4, 40)], 100)
    assert selection.summary is None and seqs(selection) == [3, 4, 5, 6]
    plan, selection = context(session, [summary(session, 4, 30)], 100)
    assert selection.summary.token_count == 30 and seqs(selection) == [6]


def test_a_summary_covering_a_newest_message_too_large_for_the_limit_is_still_returned():
    """When not even the newest message fits alone, no message can show: the summary is all there is."""
    session = build([10, 10, 500])
    plan, selection = context(session, [summary(session, 3, 8)], 100)
    assert plan.min_start_tokens == plan.total_tokens == 520
    assert selection.messages == []
    assert selection.messages_skipped == 0
    assert selection.token_count == 8


@settings(max_examples=400, deadline=None)
@given(cases())
def test_context_keeps_the_newest_message_whenever_it_fits(case):
    """Never the whole message share traded for a summary: if the newest message fits the limit, it is returned
    (whole runs aside: a run that only partly fits is dropped whole)."""
    session, summaries, limit, use_summary, whole_runs = case
    plan, selection = context(session, summaries, limit, use_summary=use_summary, whole_runs=False)
    if session.last is not None and session.last.token_count <= limit:
        assert selection.messages and selection.messages[-1] == session.last
    if selection.summary is not None and not selection.messages:
        assert session.last.token_count > limit


def test_summary_covering_nothing_or_beyond_last_message_is_ignored():
    """A summary of no messages, or of messages written after round 1 read the last one, is not returned."""
    session = build([10] * 6, seen=4)
    beyond, empty = summary(session, 6, 5, "long"), summary(session, 0, 5, "short")
    plan, selection = context(session, [beyond, empty], 100)
    assert selection.summary is None
    assert seqs(selection) == [1, 2, 3, 4]


def test_messages_appended_after_the_plan_are_ignored():
    """Messages written between the two rounds are not part of this answer."""
    session = build([10] * 6, seen=4)
    plan, selection = context(session, [], 25)
    assert seqs(selection) == [3, 4]
    assert selection.token_count == 20


def test_limit_below_zero_is_rejected():
    """A negative limit is a caller's bug."""
    with pytest.raises(ValueError, match="limit"):
        plan_context(-1, [], None)


def test_summary_end_tokens_disagreeing_with_last_message_is_rejected():
    """A summary whose covered tokens exceed what the last message says exists is corrupt."""
    session = build([10] * 4)
    with pytest.raises(ValueError, match="end_tokens"):
        plan_context(100, [SummaryCost("short", 2, 35, 5)], session.last)
    with pytest.raises(ValueError, match="end_tokens"):
        plan_context(100, [SummaryCost("short", 4, 39, 5)], session.last)


def test_same_summary_type_twice_is_rejected():
    """Each summary type exists once per session."""
    session = build([10] * 4)
    with pytest.raises(ValueError, match="twice"):
        plan_context(100, [summary(session, 2, 5), summary(session, 4, 5)], session.last)


def test_duplicate_candidates_are_rejected():
    """The same seq twice means the query was paged or merged wrongly."""
    session = build([10] * 4)
    plan = plan_context(100, [], session.last)
    with pytest.raises(ValueError, match="twice"):
        select_messages(plan, session.index + [session.index[-1]])


def test_candidates_missing_the_newest_message_are_incomplete():
    """An index that has not caught up with the last message is reported, not answered from older messages."""
    session = build([10] * 4)
    plan = plan_context(100, [], session.last)
    with pytest.raises(IncompleteCandidates, match="newest"):
        select_messages(plan, session.index[:3])


def test_candidates_with_a_gap_are_incomplete():
    """A message missing in the middle of the candidates is reported, never silently skipped."""
    session = build([10] * 4)
    plan = plan_context(100, [], session.last)
    with pytest.raises(IncompleteCandidates, match="missing"):
        select_messages(plan, [session.index[0], session.index[2], session.index[3]])


def test_candidates_with_broken_token_chain_are_rejected():
    """start_tokens must be the running total; a break means corrupt counts."""
    session = build([10] * 3)
    plan = plan_context(100, [], session.last)
    broken = [session.index[0], MessageCost(2, 10, 11, 2), MessageCost(3, 9, 21, 3)]
    with pytest.raises(ValueError, match="starts at"):
        select_messages(plan, broken)


def test_message_cost_rejects_impossible_values():
    """Negative counts, seq 0 and a run starting after its message are refused at construction."""
    for bad in [(0, 1, 0, 0), (1, -1, 0, 1), (1, 1, -1, 1), (2, 1, 0, 3)]:
        with pytest.raises(ValueError):
            MessageCost(*bad)
