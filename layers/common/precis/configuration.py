"""Summary settings inside workspace and session `configuration`.

Honcho's own keys live in `configuration.summary` (enabled, messages_per_short_summary,
messages_per_long_summary, custom_instructions); Precis-only keys live in `configuration.summarizer`,
a top-level section the honcho-ai SDK never parses (it rejects unknown keys inside its known sections).

Precedence, lowest first: SummaryConfig's built-in defaults < the deployment's defaults (template parameters, read
into Settings) < the workspace's configuration < the session's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from precis.config import SUMMARY_ENV, get_settings
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


def summary_config(workspace: dict[str, Any] | None, session: dict[str, Any] | None = None, *,
                   deployment: Mapping[str, Any] | None = None) -> SummaryConfig:
    """The effective summary settings of a session over `deployment` (default: this deployment's, from Settings);
    Invalid (422) naming the field, and the deployment's variable when the value came from there."""
    deployment = get_settings().summary_defaults if deployment is None else deployment
    levels = (_level(workspace), _level(session))
    try:
        return merge_config(deployment, *levels)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(p) for p in error["loc"]) or "summary settings"
        message = error["msg"].removeprefix("Value error, ")
        field = str(error["loc"][0]) if error["loc"] else ""
        if field in deployment and all(level.get(field) is None for level in levels):
            variable, parameter = SUMMARY_ENV[field]
            message += (f" ({field} {deployment[field]} is this deployment's default, {variable} / template parameter "
                        f"{parameter}; set configuration.{SECTION}.{field} to override it)")
        raise Invalid(f"configuration.{SECTION}.{where}: {message}") from None


# Every function imports this module while it starts: reading the settings here makes a bad deployment value fail
# the cold start with its message (Lambda's init error), not each request later.
get_settings()
