"""Independent pieces of one invocation's work at once: a bounded number of threads, and metrics that stay correct.

boto3 clients and the LLM client are thread-safe; Powertools' Metrics is not: `add_metric` reads, changes and
writes back a dict shared by every instance, and prints the metric set (an EMF line) when a metric reaches 100
values, while other threads may be writing log lines to the same stdout. Work run by `run_each` therefore adds its
metrics to a buffer of its own (`add_metric` below), and the calling thread adds them to Metrics once every piece has
ended: EMF lines are printed by one thread, whole, and no value is lost. `add_dimensioned` publishes a set of metrics
under dimensions of their own (tokens by role and model), printed at once as one EMF line of its own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar, copy_context

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

logger = Logger(child=True)
_metrics = Metrics()
_lock = threading.Lock()  # for callers outside run_each that still use threads of their own
_buffer: ContextVar[list[tuple[str, MetricUnit, float]] | None] = ContextVar("precis_metrics_buffer", default=None)


def add_metric(*, name: str, unit: MetricUnit, value: float) -> None:
    """Metrics.add_metric, safe from `run_each`'s threads (held until they have all ended)."""
    buffered = _buffer.get()
    if buffered is not None:
        buffered.append((name, unit, value))
        return
    with _lock:
        _metrics.add_metric(name=name, unit=unit, value=value)


def run_each[T: Hashable](items: Sequence[T], work: Callable[[T], None], *, workers: int) -> dict[T, Exception | None]:
    """`work(item)` for every item, at most `workers` at once; what each raised (None: it succeeded), also logged."""

    def one(item: T) -> tuple[Exception | None, list]:
        buffered: list[tuple[str, MetricUnit, float]] = []
        token = _buffer.set(buffered)
        try:
            work(item)
            return None, buffered
        except Exception as exc:  # the item fails alone; the caller reports it
            logger.warning("work failed", extra={"item": repr(item), "error": repr(exc)})
            return exc, buffered
        finally:
            _buffer.reset(token)

    if not items:
        return {}
    # Each item runs in a copy of the caller's context (a pool's threads start with an empty one): what the caller
    # set, such as the invocation's usage meter (precis.llm.meter), reaches the work; what one item sets stays its own.
    context = copy_context()
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(items))), thread_name_prefix="precis") as pool:
        ended = list(pool.map(lambda item: context.copy().run(one, item), items))
    for _, buffered in ended:
        for name, unit, value in buffered:
            add_metric(name=name, unit=unit, value=value)
    return {item: failure for item, (failure, _) in zip(items, ended)}


def add_dimensioned(
    dimensions: dict[str, str], values: dict[str, float], *, unit: MetricUnit = MetricUnit.Count
) -> None:
    """`values` as metrics under `dimensions` of their own (Metrics' shared set has none), printed at once as one EMF
    line; from the calling thread of `run_each`, never its workers. Nothing when metrics are disabled."""
    from aws_lambda_powertools.metrics import EphemeralMetrics
    from aws_lambda_powertools.metrics.functions import is_metrics_disabled

    if is_metrics_disabled() or not values:
        return
    with _lock:
        metrics = EphemeralMetrics(namespace=_metrics.namespace or "Precis")
        for dimension, label in dimensions.items():
            metrics.add_dimension(name=dimension, value=label)
        for name, value in values.items():
            metrics.add_metric(name=name, unit=unit, value=value)
        metrics.flush_metrics()
