"""Summary strategies: when and what to summarize, checked against brute-force references."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from precis.summaries.strategies import (
    LONG,
    ROLLING,
    SHORT,
    JobFailure,
    MessageRef,
    Step,
    SummaryConfig,
    SummaryCost,
    SummaryJob,
    decide,
    failure_holds,
    fair_shares,
    merge_config,
    needed_from,
    next_step,
    retry_backoff_s,
)

# --- brute-force references (deliberately not sharing code with precis.summaries.strategies) --------------------------


def labels(run_ids: list[str | None]) -> list[int]:
    """A run label per message: a new label whenever the run id is missing or changes."""
    out: list[int] = []
    for i, run_id in enumerate(run_ids):
        same = i > 0 and run_id is not None and run_ids[i - 1] == run_id
        out.append(out[-1] if same else (out[-1] + 1 if out else 0))
    return out


def in_complete_run(run_ids: list[str | None], i: int, lab: list[int] | None = None) -> bool:
    """Message index i lies in a complete run: it has no run id, or a message of another run follows it."""
    lab = lab or labels(run_ids)
    return run_ids[i] is None or any(lab[j] != lab[i] for j in range(i + 1, len(run_ids)))


def run_ends(run_ids: list[str | None]) -> set[int]:
    """Seqs (1-based) that end a run, open or not."""
    lab = labels(run_ids)
    return {i + 1 for i in range(len(lab)) if i + 1 == len(lab) or lab[i + 1] != lab[i]}


def complete_run_ends(run_ids: list[str | None]) -> set[int]:
    lab = labels(run_ids)
    return {seq for seq in run_ends(run_ids) if in_complete_run(run_ids, seq - 1, lab)}


def ref_boundary(run_ids: list[str | None], every: int) -> int:
    """Where the cadence puts a summary of these messages (0: nowhere): the last complete run end at or before the
    largest multiple of `every` whose messages all lie in complete runs."""
    lab = labels(run_ids)
    multiples = [
        k for k in range(every, len(run_ids) + 1, every) if all(in_complete_run(run_ids, i, lab) for i in range(k))
    ]
    return max((e for e in complete_run_ends(run_ids) if e <= max(multiples, default=0)), default=0)


def ref_cadence(run_ids: list[str | None], covered: int, every: int) -> int | None:
    """through_seq of a due cadence summary: the boundary, when it lies after `covered`."""
    through = ref_boundary(run_ids, every)
    return through if through > covered else None


def ref_rolling(
    run_ids: list[str | None], tokens: list[int], previous: SummaryCost | None, threshold: int, keep: int
) -> int | None:
    covered = previous.covers_seq if previous else 0
    total = (previous.token_count if previous else 0) + sum(tokens[covered:])
    lab = labels(run_ids)
    after = sorted({lab[i] for i in range(covered, len(lab))})
    complete = [r for r in after if all(in_complete_run(run_ids, i, lab) for i in range(len(lab)) if lab[i] == r)]
    if total < threshold or len(complete) <= keep:
        return None
    evicted = complete[: len(complete) - keep]
    return max(i + 1 for i in range(len(lab)) if lab[i] in evicted)


# --- building sessions ----------------------------------------------------------------------------------------


@dataclass
class Session:
    run_ids: list[str | None]
    tokens: list[int]

    def refs(self, first: int = 1) -> list[MessageRef]:
        return [
            MessageRef(seq, self.tokens[seq - 1], self.run_ids[seq - 1]) for seq in range(first, len(self.run_ids) + 1)
        ]

    def summary(self, summary_type: str, covers: int, token_count: int = 100) -> SummaryCost:
        return SummaryCost(summary_type, covers, sum(self.tokens[:covers]), token_count)


@st.composite
def sessions(draw, min_size: int = 0, max_size: int = 150, run_ids: tuple[str, ...] = ("a", "b", "c")) -> Session:
    """Messages with run ids from a small alphabet (so ids recur after other runs) and random token counts."""
    n = draw(st.integers(min_size, max_size))  # drawn first: long sessions are as likely as short ones
    ids = draw(st.lists(st.one_of(st.none(), st.sampled_from(run_ids)), min_size=n, max_size=n))
    return Session(ids, draw(st.lists(st.integers(0, 400), min_size=n, max_size=n)))


@st.composite
def boundary(draw, session: Session) -> int | None:
    """An existing summary's covers_seq: None (no summary) or the end of a complete run."""
    return draw(st.one_of(st.none(), st.sampled_from(sorted(complete_run_ends(session.run_ids) | {0}))))


def plain(n: int) -> Session:
    return Session([None] * n, [10] * n)


def apply(summaries: dict[str, SummaryCost], session: Session, jobs: list[SummaryJob]) -> None:
    """What the summarizer does with the jobs: store each new summary (token_count fixed at 50)."""
    for job in jobs:
        summaries[job.summary_type] = session.summary(job.summary_type, job.through_seq, 50)


def call(config: SummaryConfig, summaries: dict[str, SummaryCost], session: Session) -> list[SummaryJob]:
    """Read as the summarizer must: from needed_from through the newest message."""
    start = needed_from(config, summaries)
    return decide(config, summaries, session.refs(start) if start else [])


# --- cadence --------------------------------------------------------------------------------------------------


@settings(max_examples=300)
@given(st.data(), sessions(), st.integers(10, 30), st.integers(20, 70), st.booleans())
def test_cadence_matches_reference(data, session, short_every, long_every, read_all):
    long_every = max(long_every, short_every + 1)
    config = SummaryConfig(messages_per_short_summary=short_every, messages_per_long_summary=long_every)
    summaries = {t: session.summary(t, c) for t in (SHORT, LONG) if (c := data.draw(boundary(session))) is not None}
    start = needed_from(config, summaries)
    jobs = decide(config, summaries, session.refs(1 if read_all else start))
    expected = []
    for summary_type, every in ((SHORT, short_every), (LONG, long_every)):
        previous = summaries.get(summary_type)
        covered = previous.covers_seq if previous else 0
        through = ref_cadence(session.run_ids, covered, every)
        if through is not None:
            expected.append(SummaryJob(summary_type, previous, covered + 1, through))
    assert jobs == expected
    for job in jobs:  # the contract, stated directly
        assert job.through_seq in complete_run_ends(session.run_ids)
        assert job.first_seq == (job.previous.covers_seq if job.previous else 0) + 1
        assert job.first_seq - 1 in run_ends(session.run_ids) | {0}  # never starts inside a run


@pytest.mark.parametrize(("short_every", "long_every"), [(20, 60), (10, 25), (15, 45)])
def test_cadence_one_message_at_a_time_without_run_ids_hits_multiples(short_every, long_every):
    config = SummaryConfig(messages_per_short_summary=short_every, messages_per_long_summary=long_every)
    summaries: dict[str, SummaryCost] = {}
    written: dict[str, list[int]] = {SHORT: [], LONG: []}
    for n in range(1, 201):
        session = plain(n)
        jobs = call(config, summaries, session)
        for job in jobs:
            written[job.summary_type].append(job.through_seq)
        apply(summaries, session, jobs)
    assert written[SHORT] == list(range(short_every, 201, short_every))
    assert written[LONG] == list(range(long_every, 201, long_every))


def test_cadence_pinned_points_are_20_40_60():
    summaries: dict[str, SummaryCost] = {}
    due_at: list[tuple[int, str]] = []
    for n in range(1, 121):
        jobs = call(SummaryConfig(), summaries, plain(n))
        due_at += [(n, job.summary_type) for job in jobs]
        apply(summaries, plain(n), jobs)
    assert due_at == [
        (20, SHORT),
        (40, SHORT),
        (60, SHORT),
        (60, LONG),
        (80, SHORT),
        (100, SHORT),
        (120, SHORT),
        (120, LONG),
    ]


@settings(max_examples=200)
@given(sessions(1, 150, ("a", "b")), st.lists(st.integers(1, 40), min_size=1, max_size=150))
def test_cadence_boundaries_do_not_depend_on_how_messages_were_batched(session, batches):
    """Messages arriving in batches of any sizes (the summarizer running after each) leave, after each batch, the
    summaries a single batch of everything so far would: the reference's boundary for those messages."""
    config = SummaryConfig(messages_per_short_summary=10, messages_per_long_summary=25)
    summaries: dict[str, SummaryCost] = {}
    n, total = 0, len(session.run_ids)
    for size in batches + [total]:
        n = min(total, n + size)
        arrived = Session(session.run_ids[:n], session.tokens[:n])
        apply(summaries, arrived, call(config, summaries, arrived))
        for summary_type, every in ((SHORT, 10), (LONG, 25)):
            boundary = ref_boundary(arrived.run_ids, every)
            assert (summaries[summary_type].covers_seq if summary_type in summaries else 0) == boundary
        if n == total:
            break


@settings(max_examples=300)
@given(sessions(1, 150), st.integers(10, 30))
def test_cadence_keeps_the_messages_after_the_newest_multiple_verbatim(session, every):
    """The contract, stated directly: a cadence summary covers no message after the newest multiple of its period
    that complete runs reach, so those (fewer than `every`, plus any run open or straddling it) stay verbatim;
    without run ids it covers exactly that multiple."""
    jobs = call(
        SummaryConfig(messages_per_short_summary=every, messages_per_long_summary=max(20, every + 1)), {}, session
    )
    short = next((job for job in jobs if job.summary_type == SHORT), None)
    complete = [i + 1 for i in range(len(session.run_ids)) if in_complete_run(session.run_ids, i)]
    multiple = (max(complete, default=0) // every) * every
    if short is not None:
        assert short.through_seq <= multiple and short.through_seq in complete_run_ends(session.run_ids)
        assert not any(short.through_seq < e <= multiple for e in complete_run_ends(session.run_ids))
    if all(run_id is None for run_id in session.run_ids):
        assert (short.through_seq if short else 0) == len(session.run_ids) // every * every


@pytest.mark.parametrize(("n", "short", "long"), [(31, 20, 0), (50, 40, 0), (61, 60, 60), (119, 100, 60)])
def test_cadence_batch_without_run_ids_covers_the_newest_multiple(n, short, long):
    """One post of n messages: the short summary covers #20, #40, … (not #n), the long #60, #120, …"""
    expected = [SummaryJob(t, None, 1, through) for t, through in ((SHORT, short), (LONG, long)) if through]
    assert call(SummaryConfig(), {}, plain(n)) == expected


def test_cadence_batch_reaching_both_periods_returns_both_jobs():
    assert call(SummaryConfig(), {}, plain(61)) == [SummaryJob(SHORT, None, 1, 60), SummaryJob(LONG, None, 1, 60)]


def test_cadence_is_incremental_from_the_previous_summary_of_its_type():
    session = plain(65)
    summaries = {SHORT: session.summary(SHORT, 40), LONG: session.summary(LONG, 0)}
    assert needed_from(SummaryConfig(), summaries) == 1
    jobs = call(SummaryConfig(), summaries, session)
    assert jobs == [SummaryJob(SHORT, summaries[SHORT], 41, 60), SummaryJob(LONG, summaries[LONG], 1, 60)]


def test_cadence_waits_for_an_open_run_to_complete():
    ids: list[str | None] = [None] * 15 + ["r"] * 10
    assert call(SummaryConfig(), {}, Session(ids, [1] * 25)) == []  # only 15 messages in complete runs
    ids.append(None)  # run r is complete now, and so is #26: #20 is reached, but lies inside r (#16..#25)
    assert call(SummaryConfig(), {}, Session(ids, [1] * 26)) == [SummaryJob(SHORT, None, 1, 15)]


def test_cadence_never_ends_inside_a_run_that_is_still_open():
    ids: list[str | None] = [None] * 19 + ["r"] * 30
    assert call(SummaryConfig(), {}, Session(ids, [1] * 49)) == []
    ids.append("s")  # r completes (#20..#49); the new run s is open; #40 lies inside r: the summary ends before it
    assert call(SummaryConfig(), {}, Session(ids, [1] * 50)) == [SummaryJob(SHORT, None, 1, 19)]
    ids += ["t"] * 10 + [None]  # #60 is reached and ends a run (s is #50, t #51..#60)
    assert call(SummaryConfig(), {}, Session(ids, [1] * 61)) == [
        SummaryJob(SHORT, None, 1, 60),
        SummaryJob(LONG, None, 1, 60),
    ]


def test_reused_run_id_after_another_run_is_a_new_run():
    ids = ["a"] * 12 + ["b"] * 3 + ["a"] * 5  # the second a (#16..#20) is open; #1..#12 and b are complete
    config = SummaryConfig(messages_per_short_summary=15, messages_per_long_summary=40)
    assert call(config, {}, Session(ids, [1] * 20)) == [SummaryJob(SHORT, None, 1, 15)]


# --- rolling --------------------------------------------------------------------------------------------------


@settings(max_examples=300)
@given(st.data(), sessions(), st.integers(256, 20_000), st.integers(1, 8), st.integers(0, 3000), st.booleans())
def test_rolling_matches_reference(data, session, threshold, keep, summary_tokens, read_all):
    config = SummaryConfig(strategy="rolling", token_threshold=threshold, keep_recent_runs=keep)
    covers = data.draw(boundary(session))
    summaries = {ROLLING: session.summary(ROLLING, covers, summary_tokens)} if covers is not None else {}
    previous = summaries.get(ROLLING)
    start = needed_from(config, summaries)
    jobs = decide(config, summaries, session.refs(1 if read_all else start))
    through = ref_rolling(session.run_ids, session.tokens, previous, threshold, keep)
    covered = previous.covers_seq if previous else 0
    assert jobs == ([SummaryJob(ROLLING, previous, covered + 1, through)] if through is not None else [])
    for job in jobs:
        assert job.through_seq in complete_run_ends(session.run_ids)
        # Exactly `keep` complete runs stay after the new boundary (plus the open run, if any).
        later = {seq for seq in complete_run_ends(session.run_ids) if seq > job.through_seq}
        assert len(later) == keep


@settings(max_examples=100)
@given(sessions(1, 120, ("a", "b")), st.integers(256, 3000), st.integers(1, 6))
def test_rolling_one_message_at_a_time_keeps_the_recent_runs_and_stays_under_threshold(session, threshold, keep):
    config = SummaryConfig(strategy="rolling", token_threshold=threshold, keep_recent_runs=keep)
    summaries: dict[str, SummaryCost] = {}
    for n in range(1, len(session.run_ids) + 1):
        arrived = Session(session.run_ids[:n], session.tokens[:n])
        jobs = call(config, summaries, arrived)
        assert len(jobs) <= 1
        apply(summaries, arrived, jobs)
        # After each step, nothing is due any more: the fold is complete in one job.
        assert call(config, summaries, arrived) == []


@settings(max_examples=150)
@given(
    sessions(1, 120, ("a", "b")),
    st.lists(st.integers(1, 30), min_size=1, max_size=120),
    st.integers(256, 3000),
    st.integers(1, 6),
)
def test_rolling_keeps_its_newest_runs_verbatim_however_messages_were_batched(session, batches, threshold, keep):
    """After any batch, at least `keep_recent_runs` complete runs (and the open one) lie after the rolling summary:
    a fold never takes the newest runs from the context, whatever the batch sizes."""
    config = SummaryConfig(strategy="rolling", token_threshold=threshold, keep_recent_runs=keep)
    summaries: dict[str, SummaryCost] = {}
    n, total = 0, len(session.run_ids)
    for size in batches + [total]:
        n = min(total, n + size)
        arrived = Session(session.run_ids[:n], session.tokens[:n])
        apply(summaries, arrived, call(config, summaries, arrived))
        if ROLLING in summaries:
            covered = summaries[ROLLING].covers_seq
            assert covered in complete_run_ends(arrived.run_ids)
            assert len({e for e in complete_run_ends(arrived.run_ids) if e > covered}) >= keep
        if n == total:
            break


def test_rolling_folds_all_but_the_newest_runs():
    ids = ["r1"] * 3 + ["r2"] * 3 + ["r3"] * 3 + ["r4"] * 2  # r4 is open
    session = Session(ids, [100] * 11)
    config = SummaryConfig(strategy="rolling", token_threshold=1000, keep_recent_runs=1)
    assert call(config, {}, session) == [SummaryJob(ROLLING, None, 1, 6)]  # keeps r3 and the open r4


def test_rolling_waits_for_the_threshold():
    session = Session([None] * 9, [100] * 9)
    config = SummaryConfig(strategy="rolling", token_threshold=1000, keep_recent_runs=2)
    assert call(config, {}, session) == []
    assert call(config, {}, Session([None] * 10, [100] * 10)) == [SummaryJob(ROLLING, None, 1, 8)]


def test_rolling_counts_the_previous_summary_tokens():
    session = Session([None] * 8, [100] * 8)
    previous = session.summary(ROLLING, 2, token_count=500)
    config = SummaryConfig(strategy="rolling", token_threshold=1000, keep_recent_runs=2)
    assert call(config, {ROLLING: previous}, session) == [SummaryJob(ROLLING, previous, 3, 6)]
    small = session.summary(ROLLING, 2, token_count=300)
    assert call(config, {ROLLING: small}, session) == []


def test_rolling_needs_more_than_keep_recent_runs_after_the_summary():
    session = Session(["a"] * 30 + ["b"] * 30 + [None], [100] * 61)
    config = SummaryConfig(strategy="rolling", token_threshold=256, keep_recent_runs=3)
    assert call(config, {}, session) == []  # three complete runs: nothing to fold


# --- unfinished jobs (a large job stored step by step) --------------------------------------------------------


def ref_level(costs: list[int], room: int) -> int:
    """The largest cap L (brute force) with sum(min(c, L)) <= room."""
    return max(level for level in range(max(costs, default=0) + 1) if sum(min(c, level) for c in costs) <= max(0, room))


@settings(max_examples=300)
@given(st.data(), sessions(1), st.integers(10, 30), st.integers(20, 70), st.booleans())
def test_an_unfinished_job_continues_through_its_end_or_further(data, session, short_every, long_every, rolling):
    long_every = max(long_every, short_every + 1)
    config = (
        SummaryConfig(strategy="rolling", token_threshold=2000, keep_recent_runs=2)
        if rolling
        else SummaryConfig(messages_per_short_summary=short_every, messages_per_long_summary=long_every)
    )
    types = (ROLLING,) if rolling else (SHORT, LONG)
    summaries = {t: session.summary(t, c) for t in types if (c := data.draw(boundary(session))) is not None}
    ends = sorted(complete_run_ends(session.run_ids))
    unfinished = {t: data.draw(st.sampled_from(ends)) for t in types if ends and data.draw(st.booleans())}
    start = needed_from(config, summaries)
    jobs = decide(config, summaries, session.refs(start), unfinished)
    alone = {job.summary_type: job for job in decide(config, summaries, session.refs(start))}
    expected = []
    for summary_type in types:
        covered = summaries[summary_type].covers_seq if summary_type in summaries else 0
        target = unfinished.get(summary_type, 0)
        through = max(
            alone[summary_type].through_seq if summary_type in alone else 0,
            max((e for e in ends if covered < e <= target), default=0),
        )
        if through:
            expected.append(SummaryJob(summary_type, summaries.get(summary_type), covered + 1, through))
    assert jobs == expected


def test_a_short_summary_stored_part_way_is_finished_without_new_messages():
    # A job through #50 (planned when summaries came every 10 messages) stored its first step, through #45.
    session = plain(55)
    part = {SHORT: session.summary(SHORT, 45)}
    assert call(SummaryConfig(), part, session) == []  # cadence alone (every 20): #40 is covered, #60 not reached
    assert decide(SummaryConfig(), part, session.refs(1), {SHORT: 50}) == [SummaryJob(SHORT, part[SHORT], 46, 50)]
    # Once the cadence is due again on its own, the job reaches as far as the cadence says.
    longer = plain(70)
    assert decide(SummaryConfig(), part, longer.refs(1), {SHORT: 50})[0] == SummaryJob(SHORT, part[SHORT], 46, 60)


@settings(max_examples=300)
@given(st.lists(st.integers(0, 300), max_size=12), st.integers(-50, 2000))
def test_fair_shares_match_the_brute_force_cap(costs, room):
    shares = fair_shares(costs, room)
    level = ref_level(costs, room)
    assert shares == [min(c, level) for c in costs]
    assert sum(shares) <= max(0, room)
    if sum(costs) <= room:
        assert shares == costs  # nothing is cut when everything fits


@settings(max_examples=300)
@given(sessions(1, 60), st.integers(-20, 3000))
def test_next_step_takes_the_most_whole_runs_that_fit_else_cuts_the_first_run(session, room):
    refs = session.refs()
    step = next_step(refs, room)
    ends = sorted(run_ends(session.run_ids))
    fitting = [e for e in ends if sum(session.tokens[:e]) <= room]
    assert step.first_seq == 1 and step.through_seq in ends
    if fitting:
        assert step == Step(1, fitting[-1])
    else:
        assert step.through_seq == ends[0]  # the first run alone, each message cut to a fair share
        costs = session.tokens[: ends[0]]
        level = ref_level(costs, room)
        assert step.keep == {seq: level for seq, c in enumerate(costs, 1) if c > level}
        assert sum(min(c, step.keep.get(seq, c)) for seq, c in enumerate(costs, 1)) <= max(0, room)


@settings(max_examples=200)
@given(sessions(1, 80), st.integers(1, 1500))
def test_steps_chain_through_a_job_each_ending_at_a_run_end(session, room):
    ends = run_ends(session.run_ids)
    refs, first, steps = session.refs(), 1, []
    while first <= len(refs):
        step = next_step(refs[first - 1 :], room)
        assert step.first_seq == first and step.through_seq in ends
        steps.append(step)
        first = step.through_seq + 1
    assert steps[-1].through_seq == len(refs)


def test_next_step_needs_a_message():
    with pytest.raises(ValueError, match="at least one message"):
        next_step([], 100)


def test_a_failed_job_holds_until_it_starts_elsewhere_its_settings_change_or_its_back_off_ends():
    job = SummaryJob(SHORT, None, 21, 40)
    failure = JobFailure(first_seq=21, fingerprint="f1", failures=1, retry_at=1000.0)
    assert failure_holds(failure, job, "f1", now=999.0)
    assert failure_holds(failure, SummaryJob(SHORT, None, 21, 80), "f1", now=999.0)  # new messages: still held
    assert not failure_holds(failure, SummaryJob(SHORT, None, 31, 80), "f1", now=999.0)  # progress stored elsewhere
    assert not failure_holds(failure, job, "f2", now=999.0)  # settings changed
    assert not failure_holds(failure, job, "f1", now=1000.0)  # back-off over
    assert not failure_holds(None, job, "f1", now=0.0)
    assert [retry_backoff_s(n) for n in (1, 2, 3)] == [600.0, 1200.0, 2400.0]
    assert retry_backoff_s(50) == 86_400.0


# --- sliding window and disabled ------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["cadence", "rolling", "sliding_window"])
def test_disabled_config_never_summarizes(strategy):
    config = SummaryConfig(enabled=False, strategy=strategy, token_threshold=100)
    assert needed_from(config, {}) is None
    assert decide(config, {}, plain(500).refs()) == []


# --- what decide accepts --------------------------------------------------------------------------------------


def test_decide_refuses_messages_that_start_after_the_needed_seq():
    session = plain(70)
    summaries = {SHORT: session.summary(SHORT, 40), LONG: session.summary(LONG, 20)}
    with pytest.raises(ValueError, match="must start at #21 or earlier, got #41"):
        decide(SummaryConfig(), summaries, session.refs(41))


def test_decide_refuses_gaps():
    refs = plain(30).refs()
    with pytest.raises(ValueError, match="contiguous"):
        decide(SummaryConfig(), {}, refs[:10] + refs[11:])


def test_summaries_newer_than_the_messages_read_make_no_job():
    session = plain(25)
    summaries = {SHORT: SummaryCost(SHORT, 40, 400, 10), LONG: session.summary(LONG, 0)}
    assert decide(SummaryConfig(), summaries, session.refs()) == []


def test_no_messages_no_jobs():
    assert decide(SummaryConfig(), {}, []) == []


# --- configuration --------------------------------------------------------------------------------------------


def test_defaults():
    config = SummaryConfig()
    assert (config.enabled, config.strategy, config.engine) == (True, "cadence", None)
    assert (config.messages_per_short_summary, config.messages_per_long_summary) == (20, 60)
    assert (config.token_threshold, config.keep_recent_runs, config.keep_runs) == (8000, 5, 10)
    assert (config.max_output_tokens, config.temperature, config.instructions, config.model) == (512, None, None, None)


def test_merge_config_layers_session_over_workspace():
    config = merge_config(
        {"strategy": "rolling", "token_threshold": 2000, "instructions": "be brief"},
        {"token_threshold": 3000, "instructions": None, "keep_recent_runs": 2},
    )
    assert (config.strategy, config.token_threshold, config.keep_recent_runs) == ("rolling", 3000, 2)
    assert config.instructions == "be brief"  # None inherits
    assert merge_config(None, None) == SummaryConfig()


def test_merge_config_validates_the_merged_settings():
    merge_config({"messages_per_short_summary": 30}, None)
    with pytest.raises(
        ValidationError, match="messages_per_long_summary must be greater than messages_per_short_summary"
    ):
        merge_config({"messages_per_long_summary": 40}, {"messages_per_short_summary": 40})


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("messages_per_short_summary", 9),
        ("messages_per_long_summary", 19),
        ("token_threshold", 99),
        ("keep_recent_runs", 0),
        ("keep_runs", 0),
        ("max_output_tokens", 63),
        ("max_output_tokens", 4097),
        ("temperature", 2.5),
        ("temperature", -0.1),
        ("instructions", "x" * 4001),
        ("model", ""),
        ("strategy", "hourly"),
        ("engine", "gpt"),
        ("enabled", "maybe"),
        ("token_threshold", "lots"),
    ],
)
def test_bad_values_are_refused_naming_the_field(field, value):
    with pytest.raises(ValidationError) as caught:
        merge_config({field: value}, None)
    assert [error["loc"] for error in caught.value.errors()] == [(field,)]
    assert field in str(caught.value)


def test_unknown_keys_are_refused_by_name():
    with pytest.raises(ValidationError) as caught:
        merge_config(None, {"messages_per_summary": 5})
    assert caught.value.errors()[0]["loc"] == ("messages_per_summary",)
    assert "Extra inputs are not permitted" in str(caught.value)


def test_long_must_exceed_short():
    with pytest.raises(ValidationError) as caught:
        SummaryConfig(messages_per_short_summary=30, messages_per_long_summary=30)
    assert caught.value.errors()[0]["loc"] == ("messages_per_long_summary",)
    SummaryConfig(messages_per_short_summary=30, messages_per_long_summary=31)
