"""SQS's timing in moto, as AWS keeps it, and a local clock for it.

- AWS bounds a message's visibility timeout at 12 hours from the receive it was received by (a ChangeMessageVisibility
  past that is refused); moto counts the 12 hours from when the message was sent, so a webhook delivery's later
  retries (hours after it was sent, each delayed up to 6 hours) would be refused locally and not on AWS.
- PRECIS_LOCAL_SQS_DELAY_SCALE (the local stack; 1 unless set): visibility timeouts and message delays last that
  fraction of the seconds asked, so a test sees a day of webhook retries (1 minute doubling to 6 hours) in seconds,
  in the same order and proportions, without touching the code that asks for them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from moto.core.utils import unix_time_millis
from moto.sqs.exceptions import InvalidParameterValue, ReceiptHandleIsInvalid
from moto.sqs.models import Message, SQSBackend

MAX_VISIBILITY_S = 43200  # SQS: 12 hours from the receive
_scale = [1.0]


class DelayScaleError(ValueError):
    """PRECIS_LOCAL_SQS_DELAY_SCALE is not a number the stack can use; the message names it."""


def scale_from_env(env: Mapping[str, str]) -> float:
    """PRECIS_LOCAL_SQS_DELAY_SCALE: a number in (0, 1] (default 1: as on AWS)."""
    raw = env.get("PRECIS_LOCAL_SQS_DELAY_SCALE", "").strip()
    if not raw:
        return 1.0
    try:
        scale = float(raw)
    except ValueError:
        scale = -1.0
    if not 0 < scale <= 1:
        raise DelayScaleError(f"PRECIS_LOCAL_SQS_DELAY_SCALE: a number above 0 and at most 1, got {raw!r}")
    return scale


def configure(scale: float) -> None:
    """Let this process's SQS delays last `scale` of their seconds."""
    _scale[0] = scale


def _change_visibility(self: Message, visibility_timeout: int) -> None:
    self.visible_at = unix_time_millis() + int(visibility_timeout) * 1000 * _scale[0]


def _delay(self: Message, delay_seconds: int) -> None:
    self.delayed_until = unix_time_millis() + int(delay_seconds) * 1000 * _scale[0]


_mark_received = Message.mark_received


def _marked_received(self: Message, visibility_timeout: int | None = None) -> None:
    self.received_at_ms = unix_time_millis()  # the 12 hours count from here
    _mark_received(self, visibility_timeout)


def _change_message_visibility(self: SQSBackend, queue_name: str, receipt_handle: str, visibility_timeout: int) -> Any:
    queue = self.get_queue(queue_name)
    for message in queue._messages:
        if message.had_receipt_handle(receipt_handle):
            received = getattr(message, "received_at_ms", None) or unix_time_millis()
            if unix_time_millis() + int(visibility_timeout) * 1000 - received > MAX_VISIBILITY_S * 1000:
                raise InvalidParameterValue(
                    f"Value {visibility_timeout} for parameter VisibilityTimeout is invalid. Reason: Total "
                    f"VisibilityTimeout for the message is beyond the limit [{MAX_VISIBILITY_S} seconds]"
                )
            message.change_visibility(visibility_timeout)
            if message.visible and message in queue.pending_messages:
                queue.pending_messages.remove(message)
            return None
    raise ReceiptHandleIsInvalid


def install() -> None:
    """Apply to this process's moto (idempotent)."""
    Message.change_visibility = _change_visibility  # type: ignore[method-assign]
    Message.delay = _delay  # type: ignore[method-assign]
    Message.mark_received = _marked_received  # type: ignore[method-assign]
    SQSBackend.change_message_visibility = _change_message_visibility  # type: ignore[method-assign]
