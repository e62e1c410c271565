"""The load model's core (bench/scale.py): Lambda's per-shard semantics and the lag it measures, on small runs."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import replace

import pytest

from bench.scale import (
    Cadence,
    Costs,
    FanoutSettings,
    PeerTokens,
    StreamSettings,
    Traffic,
    Workload,
    estimate_shards,
    generate,
    percentile,
    simulate_fanout,
    simulate_stream,
)

INSTANT = Costs(invoke_s=0.0, read_s=0.0, write_s=0.0, llm_scale=0.0)
CONSTANT = Costs(invoke_s=0.0, read_s=0.0, write_s=0.0, llm_sigma=0.0)  # every LLM call takes its median
EVERY_MESSAGE = Cadence(kinds=("short",), every=(1,), llm_median_s=(1.0,))  # each message makes a summary due


def traffic_of(writes: list[tuple[float, int]], sessions: int, *, duration_s: float = 100.0,
               item_hash: list[int] | None = None) -> Traffic:
    """Traffic from (write time, session) pairs in time order: all sessions on shard 0, new sessions (seq 1 up)."""
    traffic = Traffic(Workload(sessions, duration_s), [0] * sessions, [[] for _ in range(sessions)],
                      [[] for _ in range(sessions)], [[] for _ in range(sessions)], [0] * sessions)
    for i, (t, session) in enumerate(writes):
        traffic.times[session].append(t)
        traffic.senders[session].append(1)
        traffic.tokens[session].append(100)
        traffic.record_time.append(t)
        traffic.record_session.append(session)
        traffic.record_seq.append(len(traffic.times[session]))
        traffic.record_hash.append(item_hash[i] if item_hash else i)
    return traffic


@pytest.fixture(scope="module")
def busy() -> Traffic:
    return generate(Workload(300, 600.0), seed=3)


def by_slot(stats) -> dict[int, list[tuple[float, float, list[int]]]]:
    slots = defaultdict(list)
    for slot, start, end, records in stats.deliveries:
        slots[slot].append((start, end, records))
    return {slot: sorted(batches) for slot, batches in slots.items()}


def test_same_seed_same_figures(busy):
    settings = StreamSettings(shards=2, parallelization=5, batch_size=100, workers=None)
    assert simulate_stream(busy, settings)[0] == simulate_stream(busy, settings)[0]
    assert generate(Workload(50, 100.0), seed=9).record_time == generate(Workload(50, 100.0), seed=9).record_time


def test_a_slot_has_one_batch_in_flight_and_sends_its_records_once_in_stream_order(busy):
    _, stats = simulate_stream(busy, StreamSettings(shards=2, parallelization=4, batch_size=10), trace=True)
    seen = []
    for batches in by_slot(stats).values():
        for (_, end, _), (start, _, _) in zip(batches, batches[1:]):
            assert start >= end  # the next batch waits for the invocation to end
        records = [i for _, _, batch in batches for i in batch]
        assert records == sorted(records)
        seen += records
    assert len(seen) == len(set(seen))


def test_with_one_slot_per_shard_a_sessions_records_arrive_in_seq_order(busy):
    _, stats = simulate_stream(busy, StreamSettings(shards=3, parallelization=1, batch_size=7), trace=True)
    last_seq = {}
    for _, _, _, records in sorted(stats.deliveries, key=lambda d: d[1]):
        for i in records:
            session, seq = busy.record_session[i], busy.record_seq[i]
            assert seq > last_seq.get(session, 0)
            last_seq[session] = seq


def test_parallelization_keeps_order_per_item_not_per_session(busy):
    # Lambda's documented guarantee for DynamoDB with P > 1: the records of one session (one PK) spread over slots.
    _, stats = simulate_stream(busy, StreamSettings(shards=1, parallelization=4, batch_size=10), trace=True)
    slots_of = defaultdict(set)
    for slot, _, _, records in stats.deliveries:
        for i in records:
            slots_of[busy.record_session[i]].add(slot)
    assert max(len(slots) for slots in slots_of.values()) > 1


def test_batches_hold_at_most_batch_size_records_and_a_session_can_repeat_in_one(busy):
    _, stats = simulate_stream(busy, StreamSettings(shards=1, parallelization=1, batch_size=10), trace=True)
    sizes = [len(records) for _, _, _, records in stats.deliveries]
    assert max(sizes) == 10
    assert any(len({busy.record_session[i] for i in records}) < len(records) for *_, records in stats.deliveries)


@pytest.mark.parametrize("window_s", [0.0, 1.0, 3.0])
def test_with_an_instant_llm_lag_is_bounded_by_propagation_poll_and_window(busy, window_s):
    settings = StreamSettings(shards=2, parallelization=3, batch_size=20, window_s=window_s, concurrency=None)
    result, stats = simulate_stream(busy, settings, costs=INSTANT)
    bound = settings.propagation_s + settings.poll_s + window_s
    assert stats.lags and result["lag_max_s"] <= bound + 1e-9


def test_more_parallelization_never_raises_lag_when_every_record_costs_the_same():
    # One message per session, each making a summary due, batches of one record: a slot is a FIFO server of
    # constant service time, and splitting the queue over more servers can only bring completions forward.
    writes = [(i * 0.37, i) for i in range(120)]  # 2.7 records/s against 1 s of LLM each
    traffic = traffic_of(writes, 120, duration_s=60.0)
    lags = {}
    for p in (1, 2, 4, 8):
        settings = StreamSettings(shards=1, parallelization=p, batch_size=1, window_s=0, concurrency=None)
        result, _ = simulate_stream(traffic, settings, EVERY_MESSAGE, CONSTANT)
        lags[p] = [result[k] for k in ("lag_p50_s", "lag_p95_s", "lag_p99_s", "lag_max_s")]
    for fewer, more in zip((1, 2, 4), (2, 4, 8)):
        assert all(b <= a + 1e-9 for a, b in zip(lags[fewer], lags[more]))
    assert lags[8][3] < lags[1][3]


@pytest.mark.parametrize(("workers", "duration"), [(1, 5.0), (2, 3.0), (5, 1.0), (None, 1.0)])
def test_an_invocation_lasts_the_sum_or_the_max_of_its_sessions_llm_calls(workers, duration):
    # Five sessions with one due message each, all in one batch (the window gathers them).
    traffic = traffic_of([(0.1 * i, i) for i in range(5)], 5, duration_s=30.0)
    settings = StreamSettings(shards=1, parallelization=1, batch_size=100, window_s=5, workers=workers)
    _, stats = simulate_stream(traffic, settings, EVERY_MESSAGE, CONSTANT)
    assert stats.invocations == 1
    assert stats.durations == [pytest.approx(duration)]


def test_a_lease_stops_the_duplicate_llm_calls_that_parallel_batches_make(busy):
    settings = StreamSettings(shards=1, parallelization=10, batch_size=100, workers=None)
    without, _ = simulate_stream(busy, settings)
    with_lease, _ = simulate_stream(busy, replace(settings, lease=True))
    assert without["wasted_share"] > 0.1
    assert with_lease["wasted_share"] == 0
    assert with_lease["llm_calls_per_s"] < without["llm_calls_per_s"]


def test_one_slot_per_shard_never_wastes_an_llm_call(busy):
    result, _ = simulate_stream(busy, StreamSettings(shards=2, parallelization=1, batch_size=100, workers=None))
    assert result["wasted_share"] == 0


def test_reserved_concurrency_caps_invocations_and_the_excess_waits(busy):
    result, _ = simulate_stream(busy, StreamSettings(shards=4, parallelization=5, batch_size=10, concurrency=3))
    assert result["peak_concurrency"] == 3
    assert result["throttled"] > 0


def test_the_fanout_summarizes_a_session_one_invocation_at_a_time(busy):
    result, _ = simulate_fanout(busy, FanoutSettings(shards=2, concurrency=50))
    assert result["wasted_share"] == 0
    assert result["unserved"] < result["due"] / 10


def test_a_summary_is_due_at_the_write_that_completes_its_cadence():
    traffic = traffic_of([(float(i), 0) for i in range(25)], 1, duration_s=30.0)
    cadence = Cadence()
    assert cadence.due_seq(traffic, 0, 0, covered=0, first=True) == 20
    assert cadence.due_seq(traffic, 0, 1, covered=0, first=True) == 60


def test_a_derivation_is_due_once_a_sender_has_the_threshold_in_new_tokens():
    traffic = traffic_of([(float(i), 0) for i in range(12)], 1, duration_s=30.0)
    traffic.senders[0] = [0, 1] * 6
    traffic.tokens[0] = [200] * 12
    rule = PeerTokens(threshold=512)
    assert rule.due_seq(traffic, 0, 0, covered=0, first=False) == 5  # the user's 1st, 3rd, 5th: 600 tokens
    assert rule.due_seq(traffic, 0, 1, covered=6, first=False) == 12  # the agent's 8th, 10th, 12th
    assert rule.due_seq(traffic, 0, 1, covered=10, first=False) is None


def test_shards_follow_write_throughput():
    assert estimate_shards(0) == 1
    assert estimate_shards(400) == 1  # 10k sessions: 800 WCU/s
    assert estimate_shards(4_000) == 8


def test_percentile_is_nearest_rank():
    values = list(range(1, 101))
    assert percentile(values, 50) == 50
    assert percentile(values, 99) == 99
    assert percentile(values, 100) == 100
    assert math.isnan(percentile([], 99))
