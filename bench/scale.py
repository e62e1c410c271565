"""Load model: summary lag and stream backlog for 1k, 10k and 100k active sessions (a simulation, no AWS).

A deterministic discrete-event simulation of the path from a message write to its summary being stored:
DynamoDB stream shards → Lambda's event source mapping (polls, batching window, batch size,
ParallelizationFactor, reserved concurrency) → the summarizer handler (sessions of a batch one after another,
as `functions/summarize/app.py` does, or several at once) → LLM calls → conditional summary writes. The same
machinery runs the alternative (stream → router Lambda → SQS FIFO, MessageGroupId = session → summarizer)
and the planned deriver. Assumptions are the defaults of `Workload`, `Costs`, `Cadence` and `PeerTokens`;
`ASSUMPTIONS` below says them in words and goes into bench/out/scale.json with the figures.

Lambda semantics modelled (AWS Lambda developer guide, "Using AWS Lambda with Amazon DynamoDB"):
- each shard is polled 4 times a second; a batch is sent when it holds BatchSize records or when the batching
  window, started at the poll that first saw a record, expires;
- ParallelizationFactor P gives a shard P concurrent batches; order is kept per *item* (partition and sort
  key), not per partition key, so the messages of one session (one PK, many SKs) are spread over the P slots
  and two invocations can summarize the same session at once (the loser's LLM call is wasted: its conditional
  put fails);
- one batch in flight per slot; the next batch waits for the invocation to end;
- reserved concurrency caps invocations in flight; a batch that finds none free waits (throttled) for one.
The summarizer reads the table, not the batch: a session's read sees every message written so far, so a batch
can summarize messages whose records are still in later batches.
"""

from __future__ import annotations

import heapq
import math
import multiprocessing
import random
import time
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from bench.common import ROOT, print_table, write_json

LAG_TARGET_S = 30.0
SESSIONS = (1_000, 10_000, 100_000)
# Simulated seconds per load: enough due summaries for stable p99s, small enough to keep the run short.
DURATION_S = {1_000: 1_800.0, 10_000: 600.0, 100_000: 150.0}

ASSUMPTIONS = {
    "sessions": "every simulated session is active for the whole run (active sessions, not registered ones)",
    "writes": "a session posts a turn of 2-4 messages (one append, one transaction) every 30-120 s, uniform: "
              "0.04 messages/s per session on average (1k: 40/s, 10k: 400/s, 100k: 4,000/s)",
    "tokens": "the turn's first message is the user's (20-200 tokens), the rest the agent's (50-400 tokens)",
    "stream": "a write is readable in its shard 0.2 s later; Lambda polls each shard every 0.25 s",
    "shards": "one shard per table partition (observed behaviour, not documented); partitions from throughput: "
              "ceil(write WCU/s / 1,000), a message costing 2 WCU (transactional put of a <1 KB item). "
              "Storage splits (10 GB a partition) only add shards later; shards are also a parameter",
    "summarizer": "Honcho cadence without run ids: a short summary every 20 messages, a long one every 60; "
                  "sessions start at a random point of that cycle",
    "llm": "lognormal latency, sigma 0.5: median 2 s for a short summary, 5 s for a long one, 3 s for a "
           "derivation (p99 = 3.2 x median)",
    "function": "warm invocations: 15 ms overhead, 25 ms of reads per session, 35 ms to store and audit "
                "each summary; no cold starts, errors, retries or throttling by the LLM; an invocation is never cut "
                "at its Timeout (the longest is reported); the lease, when on, is one per session: an invocation "
                "that finds a session leased marks it (in a read's time) and moves on, and the holder, done, reads the "
                "session again if it was marked; taking and letting go are free, and a lease is never lost",
    "deriver": "planned consumer: a derivation per (session, sender) once that sender has 512 tokens not yet "
               "derived (the 30-minute timer never fires: active sessions post every 2 minutes at most)",
    "fan-out": "router: a batch of up to 1,000 records sent as SendMessageBatch calls of 10, 10 at a time "
               "(20 ms each); SQS FIFO delivers 50 ms later; the summarizer takes up to 10 messages of one "
               "group per invocation, one invocation per group at a time",
    "lag": "from the write of the message that makes a summary due to the summary being stored; due events "
           "in the first 10% of the run are warm-up and not counted; those still unserved at the end count "
           "with their age so far",
}


# --- workload ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    """Who writes what when: active sessions posting turns of messages."""

    sessions: int
    duration_s: float
    turn_gap_s: tuple[float, float] = (30.0, 120.0)
    turn_messages: tuple[int, int] = (2, 4)
    user_tokens: tuple[int, int] = (20, 200)
    agent_tokens: tuple[int, int] = (50, 400)
    history: int = 60  # messages a session may already hold: its start is uniform in 0..history-1

    @property
    def messages_per_s(self) -> float:
        mean_turn = sum(self.turn_messages) / 2
        return self.sessions * mean_turn / (sum(self.turn_gap_s) / 2)


@dataclass
class Traffic:
    """The generated writes: per session its messages (write time, sender, tokens) and, in stream order, records."""

    workload: Workload
    start: list[int]  # messages each session held before the run
    times: list[list[float]]  # write time of each message after `start`, by seq
    senders: list[list[int]]  # 0: the user, 1: the agent
    tokens: list[list[int]]
    key_hash: list[int]  # per session: which shard its partition key lands on
    record_session: list[int] = field(default_factory=list)  # records in stream order
    record_seq: list[int] = field(default_factory=list)
    record_time: list[float] = field(default_factory=list)
    record_hash: list[int] = field(default_factory=list)  # per item (PK and SK): which slot of its shard

    def written(self, session: int, at: float) -> int:
        """Messages of `session` in the table at time `at`."""
        return self.start[session] + bisect_right(self.times[session], at)

    def write_time(self, session: int, seq: int) -> float:
        return self.times[session][seq - self.start[session] - 1]


def _uniform_int(uniform: Callable[[], float], lo: int, hi: int) -> int:
    """An integer in lo..hi (random.randint's range, several times faster)."""
    return lo + int(uniform() * (hi - lo + 1))


def generate(workload: Workload, seed: int = 1) -> Traffic:
    """Turns of every session over the run, deterministic for a seed."""
    rng = random.Random(seed)
    uniform, bits, draw = rng.random, rng.getrandbits, _uniform_int
    lo, hi = workload.turn_gap_s
    traffic = Traffic(workload, [], [], [], [], [])
    records = []
    for session in range(workload.sessions):
        start = draw(uniform, 0, workload.history - 1)
        times, senders, tokens = [], [], []
        t = uniform() * hi  # stagger the sessions: no synchronized first turn
        seq = start
        while t <= workload.duration_s:
            for i in range(draw(uniform, *workload.turn_messages)):
                seq += 1
                times.append(t)
                senders.append(0 if i == 0 else 1)
                tokens.append(draw(uniform, *(workload.user_tokens if i == 0 else workload.agent_tokens)))
                records.append((t, session, seq, bits(32)))
            t += lo + uniform() * (hi - lo)
        traffic.start.append(start)
        traffic.times.append(times)
        traffic.senders.append(senders)
        traffic.tokens.append(tokens)
        traffic.key_hash.append(rng.getrandbits(32))
    records.sort()
    traffic.record_time = [r[0] for r in records]
    traffic.record_session = [r[1] for r in records]
    traffic.record_seq = [r[2] for r in records]
    traffic.record_hash = [r[3] for r in records]
    return traffic


def estimate_shards(messages_per_s: float, wcu_per_message: float = 2.0, partition_wcu: float = 1_000.0) -> int:
    """Stream shards of a table sized by write throughput alone: one per partition of 1,000 WCU/s."""
    return max(1, math.ceil(messages_per_s * wcu_per_message / partition_wcu))


# --- what a consumer decides per session --------------------------------------------------------------------


@dataclass(frozen=True)
class Cadence:
    """The summarizer's cadence strategy: a summary of each kind every `every[kind]` messages."""

    kinds: tuple[str, ...] = ("short", "long")
    every: tuple[int, ...] = (20, 60)
    llm_median_s: tuple[float, ...] = (2.0, 5.0)

    def initial(self, traffic: Traffic) -> list[list[int]]:
        """Per session and kind, the last message the stored summary covers when the run starts."""
        return [[start // n * n for n in self.every] for start in traffic.start]

    def due_seq(self, traffic: Traffic, session: int, kind: int, covered: int, first: bool) -> int | None:
        """The message whose write makes the next summary of `kind` due (it may not be written yet)."""
        return covered + self.every[kind]


@dataclass(frozen=True)
class PeerTokens:
    """The planned deriver: one LLM call per (session, sender) once the sender has `threshold` new tokens."""

    kinds: tuple[str, ...] = ("user", "agent")
    threshold: int = 512
    llm_median_s: tuple[float, ...] = (3.0, 3.0)

    def initial(self, traffic: Traffic) -> list[list[int]]:
        return [[start for _ in self.kinds] for start in traffic.start]

    def due_seq(self, traffic: Traffic, session: int, kind: int, covered: int, first: bool) -> int | None:
        """The message that brings the sender's tokens since `covered` to the threshold (None: not in this run)."""
        # Until its first derivation in the run, a sender has tokens carried over from before: a share that is
        # stable per session (taken from its hash) so that sessions start at different points of the cycle.
        total = (traffic.key_hash[session] >> (11 + 10 * kind)) % self.threshold if first else 0  # not the shard bits
        start = traffic.start[session]
        senders, tokens = traffic.senders[session], traffic.tokens[session]
        for i in range(covered - start, len(tokens)):
            if senders[i] == kind:
                total += tokens[i]
                if total >= self.threshold:
                    return start + i + 1
        return None


Rule = Cadence | PeerTokens
RULES: dict[str, Rule] = {"summarizer": Cadence(), "deriver": PeerTokens()}


# --- costs and settings ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Costs:
    """Time the function spends outside the LLM, and the LLM's latency spread."""

    invoke_s: float = 0.015
    read_s: float = 0.025
    write_s: float = 0.035
    llm_sigma: float = 0.5
    llm_scale: float = 1.0  # 0: an instant LLM (tests)


@dataclass(frozen=True)
class StreamSettings:
    """The event source mapping and the function, as template.yaml sets them."""

    shards: int
    parallelization: int = 1
    batch_size: int = 100
    window_s: float = 1.0
    concurrency: int | None = 20  # reserved concurrency; None: unreserved (account limit)
    workers: int | None = 1  # sessions of a batch summarized at once: 1 is today's handler, None all of them
    lease: bool = False  # one invocation at a time per session: the others mark it, and the holder runs again
    poll_s: float = 0.25
    propagation_s: float = 0.2
    timeout_s: float = 120.0


@dataclass(frozen=True)
class FanoutSettings:
    """Stream → router Lambda → SQS FIFO (MessageGroupId = session) → summarizer."""

    shards: int
    router_parallelization: int = 2
    router_batch_size: int = 1_000
    router_window_s: float = 0.0
    concurrency: int | None = 200  # the summarizer's reserved concurrency (its SQS mapping's maximum)
    group_batch: int = 10
    send_s: float = 0.02  # one SendMessageBatch of 10
    parallel_sends: int = 10
    queue_delay_s: float = 0.05
    poll_s: float = 0.25
    propagation_s: float = 0.2
    timeout_s: float = 120.0


# --- the event loop and its parts ----------------------------------------------------------------------------


class Clock:
    """Events in time order; ties in the order they were scheduled."""

    def __init__(self, end: float):
        self.end, self._heap, self._n = end, [], 0

    def at(self, t: float, fn: Callable, *args) -> None:
        if t <= self.end:
            self._n += 1
            heapq.heappush(self._heap, (t, self._n, fn, args))

    def run(self) -> None:
        heap = self._heap
        while heap:
            t, _, fn, args = heapq.heappop(heap)
            fn(t, *args)


class Pool:
    """Concurrent executions of one function: `limit` at most, the rest wait in order (throttled)."""

    def __init__(self, limit: int | None):
        self.limit = limit if limit is not None else math.inf
        self.in_flight = self.peak = self.throttled = 0
        self.busy_s, self._since = 0.0, 0.0
        self._waiting: deque[Callable[[float], None]] = deque()

    def account(self, t: float) -> None:
        """Add the execution time up to `t` to `busy_s`."""
        self.busy_s += self.in_flight * (t - self._since)
        self._since = t

    def free(self) -> bool:
        return self.in_flight < self.limit

    def acquire(self, t: float, start: Callable[[float], None]) -> None:
        if self.in_flight < self.limit:
            self.account(t)
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
            start(t)
        else:
            self.throttled += 1
            self._waiting.append(start)

    def release(self, t: float) -> None:
        self.account(t)
        self.in_flight -= 1
        if self._waiting:
            self.acquire(t, self._waiting.popleft())


@dataclass
class Stats:
    """What one simulation measured."""

    lags: list[float] = field(default_factory=list)
    unserved: int = 0
    llm_calls: int = 0
    llm_in_flight: int = 0
    llm_peak: int = 0  # LLM calls in flight at once, across all invocations: what the provider must allow
    wasted_calls: int = 0  # LLM calls whose conditional put failed: another invocation covered as much
    invocations: int = 0
    durations: list[float] = field(default_factory=list)
    ages: list[float] = field(default_factory=list)  # iterator age (stream) or oldest message age (queue)
    delivered: int = 0
    deliveries: list[tuple[int, float, float, list[int]]] | None = None  # (slot, start, end, records): tests


@dataclass
class _Invocation:
    started: float
    waiting: deque[int]  # sessions no worker has taken yet
    done: Callable[[float], None]
    working: int = 0


class Handler:
    """The consumer function: per session, read, decide what is due, call the LLM, store conditionally."""

    def __init__(self, clock: Clock, traffic: Traffic, rule: Rule, costs: Costs, stats: Stats, rng: random.Random,
                 *, workers: int | None, lease: bool, warmup: float):
        self.clock, self.traffic, self.rule, self.costs, self.stats = clock, traffic, rule, costs, stats
        self.rng, self.workers, self.lease, self.warmup = rng, workers, lease, warmup
        self.covered = rule.initial(traffic)
        self.due = [[rule.due_seq(traffic, s, k, c, True) for k, c in enumerate(row)]
                    for s, row in enumerate(self.covered)]
        self.marked: dict[int, bool] = {}  # leased sessions: whether another invocation marked the lease since
        self._mu = [math.log(m) if m > 0 else None for m in rule.llm_median_s]

    def llm_s(self, kind: int) -> float:
        mu = self._mu[kind]
        if mu is None or self.costs.llm_scale == 0:
            return 0.0
        return self.costs.llm_scale * self.rng.lognormvariate(mu, self.costs.llm_sigma)

    def handle(self, t: float, sessions: Sequence[int], done: Callable[[float], None]) -> None:
        """One invocation from `t`: its workers take the sessions in order, each summarizing one at a time (workers
        None: one per session, the invocation ends with the slowest)."""
        self.stats.invocations += 1
        run = _Invocation(t, deque(sessions), done)
        for _ in range(len(sessions) if self.workers is None else min(self.workers, len(sessions))):
            run.working += 1
            self.clock.at(t + self.costs.invoke_s, self._work, run)

    def _work(self, t: float, run: _Invocation) -> None:
        if run.waiting:
            self._serve(t, run.waiting.popleft(), lambda end: self._work(end, run))
            return
        run.working -= 1
        if run.working == 0:
            self.stats.durations.append(t - run.started)
            run.done(t)

    def _serve(self, t: float, session: int, done: Callable[[float], None]) -> None:
        """One session for one worker, as `summarize_under_lease` does; `done(end)` when the worker is free again."""
        if not self.lease:
            self.clock.at(self._session(t, session), done)
        elif session in self.marked:  # held by another invocation: mark it, leave the work to the holder
            self.marked[session] = True
            self.clock.at(t + self.costs.read_s, done)
        else:
            self.marked[session] = False
            self.clock.at(self._session(t, session), self._release, session, done)

    def _release(self, t: float, session: int, done: Callable[[float], None]) -> None:
        """Let go of the session's lease, or, if it was marked meanwhile, read the session again first."""
        if self.marked[session]:
            self.marked[session] = False
            self.clock.at(self._session(t, session), self._release, session, done)
            return
        del self.marked[session]
        done(t)

    def _session(self, t: float, session: int) -> float:
        """Read the session at `t`, schedule the stores of what is due; when this session's work ends."""
        written = self.traffic.written(session, t)
        t += self.costs.read_s
        for kind, due in enumerate(self.due[session]):
            if due is None or due > written:
                continue
            t += self.llm_s(kind) + self.costs.write_s
            stats = self.stats
            stats.llm_calls += 1
            stats.llm_in_flight += 1
            stats.llm_peak = max(stats.llm_peak, stats.llm_in_flight)
            self.clock.at(t, self._store, session, kind, written)
        return t

    def _store(self, t: float, session: int, kind: int, covers: int) -> None:
        self.stats.llm_in_flight -= 1
        if covers <= self.covered[session][kind]:  # put_summary's condition: never regress or duplicate
            self.stats.wasted_calls += 1
            return
        due = self.due[session][kind]
        if due is not None and due <= covers:
            written_at = self.traffic.write_time(session, due)
            if written_at >= self.warmup:
                self.stats.lags.append(t - written_at)
        self.covered[session][kind] = covers
        self.due[session][kind] = self.rule.due_seq(self.traffic, session, kind, covers, False)

    def close(self, end: float) -> None:
        """Count the due events nobody served by `end`, with their age so far."""
        for session, row in enumerate(self.due):
            for due in row:
                if due is not None and due <= self.traffic.written(session, end):
                    written_at = self.traffic.write_time(session, due)
                    if written_at >= self.warmup:
                        self.stats.lags.append(end - written_at)
                        self.stats.unserved += 1


class StreamSource:
    """Lambda's pollers on the stream: per shard, `parallelization` slots, each with one batch in flight."""

    def __init__(self, clock: Clock, traffic: Traffic, *, shards: int, parallelization: int, batch_size: int,
                 window_s: float, poll_s: float, propagation_s: float, pool: Pool,
                 deliver: Callable[[float, list[int], Callable[[float], None]], None], stats: Stats,
                 rng: random.Random, warmup: float):
        self.clock, self.traffic, self.pool, self.deliver, self.stats = clock, traffic, pool, deliver, stats
        self.p, self.batch, self.window, self.poll, self.warmup = parallelization, batch_size, window_s, poll_s, warmup
        slots = shards * parallelization
        self.records: list[list[int]] = [[] for _ in range(slots)]
        self.visible: list[list[float]] = [[] for _ in range(slots)]
        for i, (session, t, h) in enumerate(zip(traffic.record_session, traffic.record_time, traffic.record_hash)):
            slot = traffic.key_hash[session] % shards * parallelization + h % parallelization
            self.records[slot].append(i)
            self.visible[slot].append(t + propagation_s)
        self.phase = [rng.uniform(0, poll_s) for _ in range(shards)]
        self.next = [0] * slots
        for slot in range(slots):
            self._form(slot, 0.0)

    def _tick(self, slot: int, t: float) -> float:
        """The first poll of the slot's shard at or after `t`."""
        phase = self.phase[slot // self.p]
        return phase + math.ceil((t - phase) / self.poll - 1e-9) * self.poll

    def _form(self, slot: int, free_at: float) -> None:
        """The slot is free at `free_at`: when its next batch goes out, and which records it holds."""
        visible, lo = self.visible[slot], self.next[slot]
        if lo >= len(visible):
            return
        head = visible[lo]
        first_poll = free_at if head <= free_at else self._tick(slot, head)
        send = first_poll + self.window
        if lo + self.batch - 1 < len(visible):
            full = visible[lo + self.batch - 1]
            send = min(send, first_poll if full <= first_poll else self._tick(slot, full))
        if send > self.clock.end:
            return  # still waiting when the run ends
        hi = bisect_right(visible, send, lo, min(lo + self.batch, len(visible)))
        self.next[slot] = hi
        self.clock.at(send, self._ready, slot, lo, hi)

    def _ready(self, t: float, slot: int, lo: int, hi: int) -> None:
        self.pool.acquire(t, lambda start: self._start(start, slot, lo, hi))

    def _start(self, t: float, slot: int, lo: int, hi: int) -> None:
        batch = self.records[slot][lo:hi]
        self.stats.delivered += len(batch)
        if t >= self.warmup:
            self.stats.ages.append(t - self.traffic.record_time[batch[-1]])  # IteratorAge: the batch's last record
        self.deliver(t, batch, lambda end: self._done(end, slot, t, batch))

    def _done(self, t: float, slot: int, started: float, batch: list[int]) -> None:
        if self.stats.deliveries is not None:
            self.stats.deliveries.append((slot, started, t, batch))
        self.pool.release(t)
        self._form(slot, t)

    def backlog(self, end: float) -> tuple[int, float]:
        """Records readable by `end` and not yet sent, and the age of the oldest of them."""
        waiting, oldest = 0, 0.0
        for slot, visible in enumerate(self.visible):
            lo = self.next[slot]
            hi = bisect_right(visible, end, lo)
            waiting += hi - lo
            if hi > lo:
                oldest = max(oldest, end - self.traffic.record_time[self.records[slot][lo]])
        return waiting, oldest


class FifoQueue:
    """SQS FIFO with one message group per session, consumed by Lambda: one batch per group in flight."""

    def __init__(self, clock: Clock, traffic: Traffic, pool: Pool, handler: Handler, stats: Stats, *,
                 group_batch: int, warmup: float):
        self.clock, self.traffic, self.pool, self.handler, self.stats = clock, traffic, pool, handler, stats
        self.group_batch, self.warmup = group_batch, warmup
        self.pending: dict[int, deque[float]] = {}  # session → write times of its queued messages
        self.ready: list[tuple[float, int]] = []  # (oldest queued write, session) of idle groups with messages
        self.busy: set[int] = set()

    def send(self, t: float, messages: list[tuple[int, float]]) -> None:
        """Messages (session, write time) arrive in the queue at `t`, in order."""
        for session, written_at in messages:
            queued = self.pending.setdefault(session, deque())
            queued.append(written_at)
            if len(queued) == 1 and session not in self.busy:
                heapq.heappush(self.ready, (written_at, session))
        self._dispatch(t)

    def _dispatch(self, t: float) -> None:
        while self.ready and self.pool.free():
            _, session = heapq.heappop(self.ready)
            queued = self.pending[session]
            oldest, taken = queued[0], min(self.group_batch, len(queued))
            for _ in range(taken):
                queued.popleft()
            self.busy.add(session)
            self.stats.delivered += taken
            if t >= self.warmup:
                self.stats.ages.append(t - oldest)
            self.pool.acquire(t, lambda start, s=session: self._start(start, s))

    def _start(self, t: float, session: int) -> None:
        self.handler.handle(t, [session], lambda end: self._done(end, session))

    def _done(self, t: float, session: int) -> None:
        self.busy.discard(session)
        self.pool.release(t)
        queued = self.pending[session]
        if queued:
            heapq.heappush(self.ready, (queued[0], session))
        self._dispatch(t)

    def backlog(self, end: float) -> tuple[int, float]:
        waiting = [q[0] for q in self.pending.values() if q]
        return sum(len(q) for q in self.pending.values()), max((end - w for w in waiting), default=0.0)


# --- running one configuration -----------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (nearest rank) of `values`; nan when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


def _summary(traffic: Traffic, stats: Stats, pool: Pool, backlog: tuple[int, float], end: float,
             timeout_s: float, slots: float) -> dict[str, Any]:
    written = bisect_right(traffic.record_time, end)
    lags = sorted(stats.lags)
    pool.account(end)
    return {
        "records_per_s": written / end, "sent_per_s": stats.delivered / end, "llm_peak": stats.llm_peak,
        "lag_p50_s": percentile(lags, 50), "lag_p95_s": percentile(lags, 95), "lag_p99_s": percentile(lags, 99),
        "lag_max_s": lags[-1] if lags else float("nan"), "due": len(lags), "unserved": stats.unserved,
        "llm_calls_per_s": stats.llm_calls / end,
        "wasted_share": stats.wasted_calls / stats.llm_calls if stats.llm_calls else 0.0,
        "invocations_per_s": stats.invocations / end,
        "duration_p99_s": percentile(stats.durations, 99),
        "duration_max_s": max(stats.durations, default=0.0),
        "over_timeout": sum(d > timeout_s for d in stats.durations),
        "age_p99_s": percentile(stats.ages, 99), "age_max_s": max([*stats.ages, backlog[1]], default=0.0),
        "backlog_end": backlog[0], "backlog_age_end_s": backlog[1],
        "peak_concurrency": pool.peak, "mean_concurrency": pool.busy_s / end,
        "utilization": pool.busy_s / end / slots if slots else float("nan"),
        "throttled": pool.throttled,
    }


def simulate_stream(traffic: Traffic, settings: StreamSettings, rule: Rule = Cadence(), costs: Costs = Costs(),
                    *, seed: int = 7, trace: bool = False) -> tuple[dict[str, Any], Stats]:
    """One run of the stream → summarizer path; a summary of the figures and the raw measurements."""
    rng = random.Random(seed)
    end = traffic.workload.duration_s
    warmup = 0.1 * end
    clock, stats, pool = Clock(end), Stats(deliveries=[] if trace else None), Pool(settings.concurrency)
    handler = Handler(clock, traffic, rule, costs, stats, rng, workers=settings.workers, lease=settings.lease,
                      warmup=warmup)
    session_of = traffic.record_session

    def deliver(t: float, batch: list[int], done: Callable[[float], None]) -> None:
        handler.handle(t, list(dict.fromkeys(session_of[i] for i in batch)), done)

    source = StreamSource(clock, traffic, shards=settings.shards, parallelization=settings.parallelization,
                          batch_size=settings.batch_size, window_s=settings.window_s, poll_s=settings.poll_s,
                          propagation_s=settings.propagation_s, pool=pool, deliver=deliver, stats=stats, rng=rng,
                          warmup=warmup)
    clock.run()
    handler.close(end)
    slots = min(settings.shards * settings.parallelization, pool.limit)
    return _summary(traffic, stats, pool, source.backlog(end), end, settings.timeout_s, slots), stats


def simulate_fanout(traffic: Traffic, settings: FanoutSettings, rule: Rule = Cadence(), costs: Costs = Costs(),
                    *, seed: int = 7) -> tuple[dict[str, Any], Stats]:
    """One run of stream → router → SQS FIFO (group = session) → summarizer."""
    rng = random.Random(seed)
    end = traffic.workload.duration_s
    warmup = 0.1 * end
    clock, stats, pool = Clock(end), Stats(), Pool(settings.concurrency)
    router_stats, router_pool = Stats(), Pool(None)
    handler = Handler(clock, traffic, rule, costs, stats, rng, workers=1, lease=False, warmup=warmup)
    queue = FifoQueue(clock, traffic, pool, handler, stats, group_batch=settings.group_batch, warmup=warmup)

    def route(t: float, batch: list[int], done: Callable[[float], None]) -> None:
        calls = math.ceil(len(batch) / 10)
        finished = t + costs.invoke_s + math.ceil(calls / settings.parallel_sends) * settings.send_s
        messages = [(traffic.record_session[i], traffic.record_time[i]) for i in batch]
        clock.at(finished + settings.queue_delay_s, queue.send, messages)
        clock.at(finished, done)

    StreamSource(clock, traffic, shards=settings.shards, parallelization=settings.router_parallelization,
                 batch_size=settings.router_batch_size, window_s=settings.router_window_s, poll_s=settings.poll_s,
                 propagation_s=settings.propagation_s, pool=router_pool, deliver=route, stats=router_stats, rng=rng,
                 warmup=warmup)
    clock.run()
    handler.close(end)
    result = _summary(traffic, stats, pool, queue.backlog(end), end, settings.timeout_s, pool.limit)
    result["router_age_p99_s"] = percentile(router_stats.ages, 99)
    return result, stats


# --- the benchmark -----------------------------------------------------------------------------------------

# What the recommendation puts in the template (the handler change and the lease are code, not settings).
RECOMMENDED = {"parallelization": 10, "batch_size": 1_000, "window_s": 1, "workers": 16, "lease": True}
Job = dict[str, Any]  # table, path, consumer, sessions, duration_s, settings
_TRAFFIC: list[Traffic] = []  # the load being run; set before the workers fork, so they share it


def _case(job: Job) -> dict[str, Any]:
    """Run one configuration (in a worker process) on the load being run."""
    started = time.perf_counter()
    traffic = _TRAFFIC[0]
    rule = RULES[job["consumer"]]
    if job["path"] == "stream":
        settings = StreamSettings(**job["settings"])
        result, _ = simulate_stream(traffic, settings, rule)
    else:
        settings = FanoutSettings(**job["settings"])
        result, _ = simulate_fanout(traffic, settings, rule)
    return {**{k: v for k, v in job.items() if k != "settings"}, **asdict(settings), **result,
            "simulation_s": round(time.perf_counter() - started, 2)}


def _shards(sessions: int) -> int:
    return estimate_shards(Workload(sessions, 1).messages_per_s)


def _jobs() -> list[Job]:
    jobs: list[Job] = []

    def add(table: str, sessions: int, path: str = "stream", consumer: str = "summarizer",
            duration_s: float | None = None, **settings: Any) -> None:
        settings.setdefault("shards", _shards(sessions))
        jobs.append({"table": table, "path": path, "consumer": consumer, "sessions": sessions,
                     "duration_s": duration_s or DURATION_S[sessions], "settings": settings})

    for n in SESSIONS:
        for p in (1, 10) if n == 100_000 else (1, 2, 5, 10):  # 100k is the slow load: bracket it
            for batch in (10, 100):
                add("today", n, parallelization=p, batch_size=batch)
            for batch in (100, 1_000):
                add("concurrent", n, parallelization=p, batch_size=batch, workers=None)
        for concurrency in {1_000: (20,), 10_000: (50, 100), 100_000: (1_000,)}[n]:
            add("fanout", n, "fanout", concurrency=concurrency)
        for workers in (32, None) if n == 10_000 else (None,):
            add("deriver", n, consumer="deriver", **{**RECOMMENDED, "workers": workers}, concurrency=None)
        add("deriver", n, "fanout", "deriver", concurrency=100 if n == 1_000 else 1_000)
    # Shards beyond the throughput estimate come from storage splits; slots (shards x P) beyond the reserved
    # concurrency wait for it.
    for shards, concurrency in ((1, 20), (4, 20), (4, 40), (8, 20), (8, 40), (8, None)):
        add("caps", 10_000, shards=shards, **RECOMMENDED, concurrency=concurrency)
    for concurrency in (20, 40, 80):
        add("caps", 100_000, **RECOMMENDED, concurrency=concurrency)
    for workers in (1, 4, 8, 16, 32, None):
        add("workers", 10_000, **{**RECOMMENDED, "workers": workers})
    for window in (0, 1, 5):
        for lease in (False, True):
            add("window", 10_000, **{**RECOMMENDED, "lease": lease, "window_s": window})
    for n in (250, 500, 1_000, 2_000):
        add("shard", n, duration_s=1_800.0, shards=1, parallelization=10, batch_size=10, concurrency=None)
    for n in (1_000, 2_000):
        add("shard", n, duration_s=1_800.0, shards=1, parallelization=10, batch_size=10, concurrency=None, lease=True)
    for n in (5_000, 10_000, 12_500, 15_000, 20_000, 25_000):
        add("shard", n, duration_s=600.0, shards=1, **RECOMMENDED, concurrency=None)
    return jobs


def run() -> None:
    started = time.perf_counter()
    jobs, rows = _jobs(), []
    loads = sorted({(j["sessions"], j["duration_s"]) for j in jobs}, key=lambda load: -load[0] * load[1])
    for sessions, duration in loads:
        # One workload per load, generated here and shared with the two workers by fork.
        _TRAFFIC[:] = [generate(Workload(sessions, duration), seed=sessions)]
        mine = [j for j in jobs if (j["sessions"], j["duration_s"]) == (sessions, duration)]
        with ProcessPoolExecutor(max_workers=2, mp_context=multiprocessing.get_context("fork")) as pool:
            rows += pool.map(_case, mine)
    _report(rows, time.perf_counter() - started)


def _ok(row: dict[str, Any]) -> bool:
    """p99 lag within the target, and not falling behind (the oldest waiting record younger than the target)."""
    return row["lag_p99_s"] <= LAG_TARGET_S and row["backlog_age_end_s"] <= LAG_TARGET_S


def _pick(rows: list[dict[str, Any]], **match: Any) -> list[dict[str, Any]]:
    return [r for r in rows if all(r.get(k) == v for k, v in match.items())]


def _one(rows: list[dict[str, Any]], **match: Any) -> dict[str, Any]:
    found = _pick(rows, **match)
    if len(found) != 1:
        raise LookupError(f"{len(found)} results match {match}")
    return found[0]


HEADERS = ["sessions", "shards", "P", "batch", "window", "workers", "lease", "reserved", "sent/s", "LLM calls/s",
           "LLM peak", "wasted", "lag p50 s", "p95", "p99", "max", "iter age p99", "behind at end", "peak conc",
           "longest inv s", "p99<=30s"]


def _cell(value: int | None) -> int | str:
    return "all" if value is None else value


def _rows(rows: list[dict[str, Any]]) -> list[list[Any]]:
    return [[r["sessions"], r["shards"], r["parallelization"], r["batch_size"], f"{r['window_s']:g}",
             _cell(r["workers"]),
             r["lease"], "-" if r["concurrency"] is None else r["concurrency"], r["sent_per_s"], r["llm_calls_per_s"],
             r["llm_peak"], r["wasted_share"], r["lag_p50_s"], r["lag_p95_s"], r["lag_p99_s"], r["lag_max_s"],
             r["age_p99_s"], r["backlog_age_end_s"], r["peak_concurrency"], r["duration_max_s"], _ok(r)]
            for r in rows]


FANOUT_HEADERS = ["consumer", "sessions", "shards", "reserved", "sent/s", "invocations/s", "LLM calls/s", "LLM peak",
                  "lag p50 s", "p95", "p99", "max", "oldest msg p99", "router age p99", "behind at end", "peak conc",
                  "mean conc", "p99<=30s"]


def _fanout_rows(rows: list[dict[str, Any]]) -> list[list[Any]]:
    return [[r["consumer"], r["sessions"], r["shards"], r["concurrency"], r["sent_per_s"], r["invocations_per_s"],
             r["llm_calls_per_s"], r["llm_peak"], r["lag_p50_s"], r["lag_p95_s"], r["lag_p99_s"], r["lag_max_s"],
             r["age_p99_s"], r["router_age_p99_s"], r["backlog_age_end_s"], r["peak_concurrency"],
             r["mean_concurrency"], _ok(r)]
            for r in rows]


def _report(rows: list[dict[str, Any]], elapsed: float) -> None:
    print("Assumptions:")
    for key, text in ASSUMPTIONS.items():
        print(f"  {key}: {text}")
    print("Shards from throughput: " + ", ".join(
        f"{n:,} sessions = {Workload(n, 1).messages_per_s:,.0f} messages/s → {_shards(n)}" for n in SESSIONS))
    print("Simulated: " + ", ".join(f"{n:,} sessions {d:,.0f} s" for n, d in DURATION_S.items())
          + ". P: ParallelizationFactor; workers: sessions of a batch summarized at once (1: a sequential handler); "
            "lease: one invocation at a time per session (the others mark it, the holder runs again); reserved '-': "
            "none; wasted: share of LLM calls whose summary another invocation had already stored; behind at end: age "
            "of the oldest record not yet sent to the function when the run ends")

    def table(name: str, *order: str) -> list[dict[str, Any]]:
        return sorted(_pick(rows, table=name),
                      key=lambda r: tuple(math.inf if r.get(k) is None else r[k] for k in order))

    print_table("Today's handler, window 1 s, reserved concurrency 20", HEADERS,
                _rows(table("today", "sessions", "batch_size", "parallelization")))
    print_table("All sessions of a batch at once, no lease, window 1 s, reserved concurrency 20", HEADERS,
                _rows(table("concurrent", "sessions", "batch_size", "parallelization")))
    print_table("Recommended mapping: shards (storage splits add them) and reserved concurrency", HEADERS,
                _rows(table("caps", "sessions", "shards", "concurrency")))
    print_table("10k sessions, 1 shard, recommended mapping: sessions summarized at once per invocation", HEADERS,
                _rows(table("workers", "workers")))
    print_table("10k sessions, 1 shard, recommended mapping: batching window, with and without the lease", HEADERS,
                _rows(table("window", "window_s", "lease")))
    print_table("What one shard carries (no reserved concurrency): today's handler (P 10, batch 10) and the "
                "recommended mapping. A partition takes 1,000 WCU/s: 500 messages/s, 12,500 sessions", HEADERS,
                _rows(table("shard", "workers", "lease", "sessions")))
    print_table("Fan-out: stream → router (P 2, batch 1,000) → SQS FIFO, group = session → summarizer, one "
                "session per invocation", FANOUT_HEADERS, _fanout_rows(table("fanout", "sessions", "concurrency")))
    print_table("Planned deriver on its own stream mapping (recommended settings, no reserved concurrency)", HEADERS,
                _rows([r for r in table("deriver", "sessions", "workers") if r["path"] == "stream"]))
    print_table("Planned deriver behind the fan-out (reserved: the SQS mapping's maximum concurrency, at most 1,000)",
                FANOUT_HEADERS, _fanout_rows([r for r in table("deriver", "sessions") if r["path"] == "fanout"]))
    advice = recommend(rows)
    print("\nRecommendation")
    for line in advice:
        print(f"- {line}")
    path = write_json("scale", {"assumptions": ASSUMPTIONS, "lag_target_s": LAG_TARGET_S, "recommended": RECOMMENDED,
                                "recommendation": advice, "results": rows, "elapsed_s": round(elapsed, 1)})
    print(f"\n({len(rows)} simulations in {elapsed:.0f} s; figures in {path.relative_to(ROOT)})")


def _fits(rows: list[dict[str, Any]]) -> tuple[int, int | None]:
    """The most sessions among `rows` that keep p99 within the target, and the fewest that do not."""
    ok = [r["sessions"] for r in rows if _ok(r)]
    over = [r["sessions"] for r in rows if not _ok(r)]
    return max(ok, default=0), min(over, default=None)


def recommend(rows: list[dict[str, Any]]) -> list[str]:
    """The template's stream settings, and when to fan out instead, with the figures behind them."""
    def lag(r: dict[str, Any]) -> str:
        p99 = r["lag_p99_s"]
        return f"p99 {p99:.1f} s" if p99 < 100 else f"p99 {p99:,.0f} s"

    now = _one(rows, table="today", sessions=10_000, parallelization=1, batch_size=100)
    today_fits, today_fails = _fits(_pick(rows, table="shard", workers=1, lease=False))
    today_ok = _one(rows, table="shard", workers=1, lease=False, sessions=today_fits)
    today_bad = _one(rows, table="shard", workers=1, lease=False, sessions=today_fails)
    lease_fits, lease_fails = _fits(_pick(rows, table="shard", workers=1, lease=True))
    lease_ok = _one(rows, table="shard", workers=1, lease=True, sessions=lease_fits)
    lease_bad = _one(rows, table="shard", workers=1, lease=True, sessions=lease_fails)
    rec = _one(rows, table="caps", sessions=10_000, shards=1)
    by_workers = {r["workers"]: r for r in _pick(rows, table="workers")}
    bounded = sorted(w for w in by_workers if w is not None)
    least = min((w for w in bounded if _ok(by_workers[w])), default=bounded[-1])
    below = max((w for w in bounded if w < least), default=least)
    no_lease = _one(rows, table="window", window_s=1, lease=False)
    windows = [r for r in _pick(rows, table="window", lease=True)]
    caps = {(r["sessions"], r["shards"], r["concurrency"]): r for r in _pick(rows, table="caps")}
    fits, fails = _fits(_pick(rows, table="shard", workers=RECOMMENDED["workers"]))
    shard_ok = _one(rows, table="shard", workers=RECOMMENDED["workers"], sessions=fits)
    shard_bad = _one(rows, table="shard", workers=RECOMMENDED["workers"], sessions=fails)
    fan = {(r["sessions"], r["concurrency"]): r for r in _pick(rows, table="fanout")}
    derive = {(r["sessions"], r["path"], r.get("workers")): r for r in _pick(rows, table="deriver")}
    d10, d10_32 = derive[(10_000, "stream", None)], derive[(10_000, "stream", 32)]
    d100, d100_fan = derive[(100_000, "stream", None)], derive[(100_000, "fanout", None)]
    big = caps[(100_000, 8, 80)]
    return [
        f"Today's template (P 1, batch 100, window 1 s, reserved 20, a batch's sessions one after another) does not "
        f"keep up at 10k sessions: {lag(now)}, the oldest unsent record {now['backlog_age_end_s']:.0f} s old at the "
        f"end. Each slot makes one LLM call at a time, so even at P 10 one shard carries about "
        f"{today_fits:,} active sessions ({today_fits:,}: {lag(today_ok)}; {today_fails:,}: {lag(today_bad)}), "
        f"{lease_fits:,} with a lease that stops duplicate LLM calls ({lag(lease_ok)}; {lease_fails:,}: "
        f"{lag(lease_bad)}).",
        f"Handler: summarize the sessions of a batch concurrently, at least {least} at once ({below}: "
        f"{lag(by_workers[below])}; {least}: {lag(by_workers[least])}; {RECOMMENDED['workers']}, used below: "
        f"{lag(by_workers[RECOMMENDED['workers']])}; all: {lag(by_workers[None])}), and take a lease "
        f"per session before reading it (an invocation that finds it held marks it and moves on; the holder reads the "
        f"session again before letting go). Lambda keeps order per item (PK and SK), not per "
        f"session, so with P > 1 a session's records land in several concurrent batches: without the lease "
        f"{no_lease['wasted_share']:.0%} of LLM calls are wasted ({no_lease['llm_calls_per_s']:.1f} calls/s instead of "
        f"{rec['llm_calls_per_s']:.1f}).",
        f"Template: ParallelizationFactor 10, BatchSize 1000, MaximumBatchingWindowInSeconds 1, Timeout 120 kept. "
        f"At 10k sessions (1 shard): p50 {rec['lag_p50_s']:.1f} s, p95 {rec['lag_p95_s']:.1f} s, {lag(rec)}, max "
        f"{rec['lag_max_s']:.0f} s; iterator age p99 {rec['age_p99_s']:.1f} s; longest invocation "
        f"{rec['duration_max_s']:.0f} s. The window hardly matters under load (0, 1, 5 s: "
        + ", ".join(f"{r['lag_p99_s']:.1f}" for r in sorted(windows, key=lambda r: r["window_s"]))
        + " s p99); 1 s keeps invocations few when traffic is light.",
        f"ReservedConcurrentExecutions: at least 10 per shard; 20 holds only while the table has 2 shards or fewer. "
        f"At 10k sessions with 4 shards, 20 gives {lag(caps[(10_000, 4, 20)])} (40: {lag(caps[(10_000, 4, 40)])}); "
        f"with 8 shards, 20 gives {lag(caps[(10_000, 8, 20)])} (40: {lag(caps[(10_000, 8, 40)])}; none reserved: "
        f"{lag(caps[(10_000, 8, None)])}, peak {caps[(10_000, 8, None)]['peak_concurrency']}). 100k sessions "
        f"(8 shards) need 80: {lag(big)} (40: {lag(caps[(100_000, 8, 40)])}). Storage splits add shards over time, "
        f"so reserve 100, or reserve nothing and alarm on IteratorAge above 30 s.",
        f"One shard with these settings carries about {fits:,} active sessions "
        f"({shard_ok['records_per_s']:.0f} messages/s: {lag(shard_ok)}; {fails:,}: {lag(shard_bad)}). That is a "
        f"partition's own ceiling: 1,000 WCU/s, 500 transactional message writes/s, 12,500 sessions. A hotter "
        f"partition splits, and its shard with it, so the stream path scales with shards (100k sessions, 8 shards: "
        f"{lag(big)}), with little headroom per shard.",
        f"SQS fan-out (router → SQS FIFO, group = session) is needed once a shard's messages/s exceed what its 10 "
        f"slots carry (batch size / batch time each): about {today_fits:,} sessions a shard with today's sequential "
        f"handler; about {fits:,} ({shard_ok['records_per_s']:.0f} messages/s) with the recommended one, which only "
        f"more messages per partition (writes at 1 WCU, outside a transaction) or slower LLM calls would cross; and, "
        f"whatever the load, for a third consumer of the stream (a shard serves two readers at once: summarizer and "
        f"deriver take both). Fan-out costs executions, one per LLM call in flight: 10k sessions need 100 "
        f"({lag(fan[(10_000, 100)])}; 50: {lag(fan[(10_000, 50)])}), 100k need 1,000 ({lag(fan[(100_000, 1_000)])}, "
        f"mean {fan[(100_000, 1_000)]['mean_concurrency']:.0f}), the maximum of one SQS mapping and the default "
        f"account limit, unless the function summarizes the groups of a batch concurrently.",
        f"Planned deriver: {d10['llm_calls_per_s'] / rec['llm_calls_per_s']:.1f}x the summarizer's LLM calls "
        f"({d10['llm_calls_per_s']:.0f}/s at 10k). On its own stream mapping it needs every due (session, sender) of "
        f"a batch at once (32 at once: {lag(d10_32)}; all: {lag(d10)}; 100k: {lag(d100)}, "
        f"{d100['llm_peak']:,} LLM calls in flight at the peak); behind the fan-out one SQS mapping cannot carry 100k "
        f"({lag(d100_fan)} at 1,000 executions). At 100k sessions the LLM provider's rate limit "
        f"({big['llm_calls_per_s'] + d100['llm_calls_per_s']:,.0f} calls/s for both) binds before Lambda does.",
    ]
