"""EventBridge Scheduler, locally: invokes each schedule's function with its input, every `rate(...)`.

PRECIS_LOCAL_SCHEDULE_S shortens every period (tests and demos need not wait five minutes); a schedule's run never
overlaps its previous one, and a failed run is only logged (the template's schedules retry nothing either).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from local.template import Template

log = logging.getLogger("precis.local.scheduler")
Invoke = Callable[[dict[str, Any]], Any]


class Scheduler:
    def __init__(self, jobs: list[tuple[str, float, dict[str, Any], Invoke]]):
        self.jobs = jobs
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    @classmethod
    def from_template(cls, tpl: Template, invokers: dict[str, Invoke], every_s: float | None = None) -> Scheduler:
        return cls(
            [
                (s.name, every_s or s.every_s, s.input, invokers[fn.logical_id])
                for fn in tpl.functions.values()
                for s in fn.schedules
            ]
        )

    def start(self) -> None:
        for name, every_s, event, invoke in self.jobs:
            thread = threading.Thread(
                target=self._run, args=(name, every_s, event, invoke), name=f"schedule-{name}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def _run(self, name: str, every_s: float, event: dict[str, Any], invoke: Invoke) -> None:
        while not self._stop.wait(every_s):
            try:
                result = invoke(dict(event))
                if getattr(result, "error", None):
                    log.warning("schedule %s: the function failed: %s", name, result.error)
            except Exception:  # noqa: BLE001 - a schedule outlives one failed run
                log.exception("schedule %s", name)

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout: float = 3.0) -> bool:
        for thread in self._threads:
            thread.join(timeout)
        return not any(t.is_alive() for t in self._threads)
