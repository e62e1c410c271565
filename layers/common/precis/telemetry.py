"""Powertools' `log_metrics`, made quiet when metrics are disabled.

With POWERTOOLS_METRICS_DISABLED=true, Powertools flushes nothing at the end of an invocation but keeps the values, and
once one metric holds 100 of them (the EMF limit) `add_metric` prints the whole set to stdout anyway. A warm function
with metrics turned off would still log EMF lines every hundred invocations or so; dropping the values after each
invocation makes "disabled" mean nothing is printed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from aws_lambda_powertools import Metrics
from aws_lambda_powertools.metrics.functions import is_metrics_disabled


def log_metrics(metrics: Metrics) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def decorate(handler: Callable[..., Any]) -> Callable[..., Any]:
        flushing = metrics.log_metrics(handler)

        @functools.wraps(handler)
        def run(event: Any, context: Any) -> Any:
            try:
                return flushing(event, context)
            finally:
                if is_metrics_disabled():
                    metrics.clear_metrics()

        return run

    return decorate
