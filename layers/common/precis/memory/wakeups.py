"""The deriver's quiet wake-ups: an SQS message per session whose batches wait, delayed by the quiet period.

A wake-up names the session and the newest message the deriver had seen in it when it was sent. When it fires, the
deriver derives the session's waiting batches if no newer message came since (`deriver.is_quiet`); else the
newer message's own wake-up comes later. A `cards` wake-up, sent by that derivation and delayed by the cards' quiet
period, refreshes the session's waiting cards the same way (memory/card_refresh.py). SQS delivers at least once: a
wake-up is only a reason to look, and the cursors make a second look harmless.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("precis.memory.wakeups")
MAX_DELAY_S = 900  # SQS's longest DelaySeconds
_BATCH = 10  # SendMessageBatch's most entries


@dataclass(frozen=True)
class QuietWake:
    workspace: str
    session: str
    seq: int  # the newest message of the session the sender of the wake-up had seen
    kind: str = "derive"  # or "cards": refresh the session's waiting cards


def body(wake: QuietWake) -> str:
    value: dict[str, object] = {"workspace": wake.workspace, "session": wake.session, "seq": wake.seq}
    if wake.kind != "derive":
        value["kind"] = wake.kind
    return json.dumps(value, sort_keys=True)


def parse(text: str) -> QuietWake | None:
    """The wake-up a message body holds; None for anything else (nothing to do for it)."""
    try:
        value = json.loads(text)
        wake = QuietWake(value["workspace"], value["session"], int(value["seq"]), value.get("kind", "derive"))
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    strings = isinstance(wake.workspace, str) and isinstance(wake.session, str)
    return wake if strings and wake.kind in ("derive", "cards") else None


def newest(wakes: Iterable[QuietWake]) -> list[QuietWake]:
    """One wake-up per session and kind, the one that saw the newest message (an older one would only find it)."""
    by_session: dict[tuple[str, str, str], QuietWake] = {}
    for wake in wakes:
        seen = by_session.get((wake.workspace, wake.session, wake.kind))
        if seen is None or wake.seq > seen.seq:
            by_session[(wake.workspace, wake.session, wake.kind)] = wake
    return sorted(by_session.values(), key=lambda w: (w.workspace, w.session, w.kind))


def send(client: Any, queue_url: str, wakes: list[QuietWake], delay_s: float) -> int:
    """Send `wakes` delayed by `delay_s` (whole seconds, at most 900); how many could not be sent."""
    delay = min(MAX_DELAY_S, math.ceil(delay_s))
    unsent = 0
    for start in range(0, len(wakes), _BATCH):
        entries = [
            {"Id": str(i), "MessageBody": body(w), "DelaySeconds": delay}
            for i, w in enumerate(wakes[start : start + _BATCH])
        ]
        try:
            answer = client.send_message_batch(QueueUrl=queue_url, Entries=entries)
        except Exception as exc:  # noqa: BLE001 - a wake-up is a shortcut: the schedule's flush still comes
            log.warning("could not send %d quiet wake-up(s): %s", len(entries), exc)
            unsent += len(entries)
            continue
        unsent += len(answer.get("Failed") or ())
    return unsent
