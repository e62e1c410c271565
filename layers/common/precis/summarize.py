"""Summarization entry point for the stream consumer (strategies arrive with the summaries issue)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from precis.errors import Invalid


def note_message(item: Mapping[str, Any]) -> tuple[str, str, int]:
    """Identify the session and seq of a stored message item; raises Invalid for anything else."""
    try:
        pk, sk = item["PK"], item["SK"]
        ws, session = pk.removeprefix("WS#").split("#S#", 1)
        seq = int(sk.removeprefix("MSG#"))
    except (KeyError, ValueError, AttributeError) as exc:
        raise Invalid(f"stream record is not a message item: {exc!r}") from exc
    return ws, session, seq
