"""Summary settings inside workspace and session `configuration`.

Honcho's own keys live in `configuration.summary` (enabled, messages_per_short_summary,
messages_per_long_summary, custom_instructions); Precis-only keys live in `configuration.summarizer`,
a top-level section the honcho-ai SDK never parses (it rejects unknown keys inside its known sections).
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from precis.errors import Invalid
from precis.strategies import SummaryConfig, merge_config

SECTION = "summarizer"
_HONCHO = {"enabled": "enabled", "messages_per_short_summary": "messages_per_short_summary",
           "messages_per_long_summary": "messages_per_long_summary", "custom_instructions": "instructions"}


def _level(configuration: dict[str, Any] | None) -> dict[str, Any]:
    """The SummaryConfig fields one level (workspace or session) sets."""
    configuration = configuration or {}
    honcho = configuration.get("summary") or {}
    ours = configuration.get(SECTION) or {}
    if not isinstance(honcho, dict) or not isinstance(ours, dict):
        raise Invalid(f"configuration.summary and configuration.{SECTION} must be objects")
    unknown = sorted(set(honcho) - set(_HONCHO))
    if unknown:
        raise Invalid(f"configuration.summary.{unknown[0]}: not a Honcho summary setting; "
                      f"Precis settings go under configuration.{SECTION}")
    return {**{_HONCHO[k]: v for k, v in honcho.items()}, **ours}


def summary_config(workspace: dict[str, Any] | None, session: dict[str, Any] | None = None) -> SummaryConfig:
    """The effective summary settings of a session; Invalid (422) naming the field when a value is bad."""
    try:
        return merge_config(_level(workspace), _level(session))
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(p) for p in error["loc"]) or "summary settings"
        raise Invalid(f"configuration.{SECTION}.{where}: {error['msg']}") from None
