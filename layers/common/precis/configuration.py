"""Summary settings inside workspace and session `configuration`.

Honcho's own keys live in `configuration.summary` (enabled, messages_per_short_summary,
messages_per_long_summary, custom_instructions); Precis-only keys live in `configuration.summarizer`,
a top-level section the honcho-ai SDK never parses (it rejects unknown keys inside its known sections).

Precedence, lowest first: SummaryConfig's built-in defaults < the deployment's defaults (template parameters, read
into Settings) < the workspace's configuration < the session's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from precis.errors import Invalid
from precis.schemas.summary_settings import SummaryConfig, merge_config
from precis.settings import SUMMARY_ENV, get_settings

if TYPE_CHECKING:
    from precis.settings import Settings

SECTION = "summarizer"
_HONCHO = {
    "enabled": "enabled",
    "messages_per_short_summary": "messages_per_short_summary",
    "messages_per_long_summary": "messages_per_long_summary",
    "custom_instructions": "instructions",
}


def _level(configuration: dict[str, Any] | None) -> dict[str, Any]:
    """The SummaryConfig fields one level (workspace or session) sets."""
    configuration = configuration or {}
    honcho = configuration.get("summary") or {}
    ours = configuration.get(SECTION) or {}
    if not isinstance(honcho, dict) or not isinstance(ours, dict):
        raise Invalid(f"configuration.summary and configuration.{SECTION} must be objects")
    unknown = sorted(set(honcho) - set(_HONCHO))
    if unknown:
        raise Invalid(
            f"configuration.summary.{unknown[0]}: not a Honcho summary setting; "
            f"Precis settings go under configuration.{SECTION}"
        )
    return {**{_HONCHO[k]: v for k, v in honcho.items()}, **ours}


def summary_config(
    workspace: dict[str, Any] | None,
    session: dict[str, Any] | None = None,
    *,
    deployment: Mapping[str, Any] | None = None,
) -> SummaryConfig:
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
            message += (
                f" ({field} {deployment[field]} is this deployment's default, {variable} / template parameter "
                f"{parameter}; set configuration.{SECTION}.{field} to override it)"
            )
        raise Invalid(f"configuration.{SECTION}.{where}: {message}") from None


# ---------------------------------------------------------------- the deriver

DERIVER_SECTION = "deriver"
_DERIVER_KEYS = {"engine", "model", "batch_tokens", "max_wait_s"}
_REASONING_KEYS = {"enabled", "custom_instructions"}


@dataclass(frozen=True)
class DeriveConfig:
    """What the deriver does for one session: Honcho's configuration.reasoning (enabled, custom_instructions) and
    Precis's configuration.deriver (engine, model, batch_tokens, max_wait_s), session over workspace over deployment."""

    enabled: bool = True
    custom_instructions: str | None = None
    engine: str = "extractive"
    model: str | None = None
    batch_tokens: int = 2048
    max_wait_s: float = 1800.0


def _derive_level(configuration: dict[str, Any] | None) -> dict[str, Any]:
    configuration = configuration or {}
    reasoning = configuration.get("reasoning") or {}
    ours = configuration.get(DERIVER_SECTION) or {}
    if not isinstance(reasoning, dict) or not isinstance(ours, dict):
        raise Invalid(f"configuration.reasoning and configuration.{DERIVER_SECTION} must be objects")
    for name, allowed, given in (("reasoning", _REASONING_KEYS, reasoning), (DERIVER_SECTION, _DERIVER_KEYS, ours)):
        unknown = sorted(set(given) - allowed)
        if unknown:
            known = ", ".join(sorted(allowed))
            raise Invalid(f"configuration.{name}.{unknown[0]}: unknown setting (known: {known})")
    level: dict[str, Any] = {}
    checks = (
        ("reasoning.enabled", reasoning, "enabled", lambda v: v is None or isinstance(v, bool), "true or false"),
        (
            "reasoning.custom_instructions",
            reasoning,
            "custom_instructions",
            lambda v: v is None or (isinstance(v, str) and len(v) <= 10_000),
            "a string of at most 10000 characters",
        ),
        (
            "deriver.engine",
            ours,
            "engine",
            lambda v: v is None or v in ("auto", "llm", "extractive"),
            "auto, llm or extractive",
        ),
        (
            "deriver.model",
            ours,
            "model",
            lambda v: v is None or (isinstance(v, str) and 0 < len(v) <= 200),
            "a model name",
        ),
        (
            "deriver.batch_tokens",
            ours,
            "batch_tokens",
            lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 100_000),
            "an integer from 0 to 100000",
        ),
        (
            "deriver.max_wait_s",
            ours,
            "max_wait_s",
            lambda v: v is None or (isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v <= 86_400),
            "a number of seconds from 0 to 86400",
        ),
    )
    for where, section, key, ok, what in checks:
        value = section.get(key)
        if not ok(value):
            raise Invalid(f"configuration.{where}: must be {what}, not {value!r}")
        if value is not None and not (key == "engine" and value == "auto"):
            level[key] = value
    return level


def derive_config(
    workspace: dict[str, Any] | None, session: dict[str, Any] | None = None, settings: Settings | None = None
) -> DeriveConfig:
    """The effective deriver settings of a session; Invalid (422) naming a bad field."""
    settings = settings or get_settings()
    from precis.llm import configured

    # the summarizer's default (summaries.engines.default_engine): llm when summaries have a model
    engine = settings.derive_engine or ("llm" if configured(settings, "summaries") else "extractive")
    merged: dict[str, Any] = {
        "engine": engine,
        "model": settings.model_for("derive"),
        "batch_tokens": settings.derive_batch_tokens,
        "max_wait_s": settings.derive_max_wait_s,
    }
    for level in (_derive_level(workspace), _derive_level(session)):
        merged.update(level)
    return DeriveConfig(**merged)


# ---------------------------------------------------------------- usage (docs/design.md, "Usage")

USAGE_SECTION = "usage"
_USAGE_KEYS = {"monthly_token_budget"}


def monthly_token_budget(configuration: dict[str, Any] | None) -> int | None:
    """A workspace's `configuration.usage.monthly_token_budget`: the tokens (input and output, every role) its model
    calls may spend in a calendar month (UTC) before derivation pauses; None: no budget; Invalid (422): malformed."""
    section = (configuration or {}).get(USAGE_SECTION)
    if section is None:
        return None
    if not isinstance(section, dict):
        raise Invalid(f"configuration.{USAGE_SECTION} must be an object")
    unknown = sorted(set(section) - _USAGE_KEYS)
    if unknown:
        known = ", ".join(sorted(_USAGE_KEYS))
        raise Invalid(f"configuration.{USAGE_SECTION}.{unknown[0]}: unknown setting (known: {known})")
    budget = section.get("monthly_token_budget")
    if budget is not None and (not isinstance(budget, int) or isinstance(budget, bool) or not 0 <= budget <= 10**15):
        raise Invalid(
            f"configuration.{USAGE_SECTION}.monthly_token_budget: must be an integer from 0 to 10^15 or null, "
            f"not {budget!r}"
        )
    return budget


# ---------------------------------------------------------------- retention (docs/design.md, "Retention")

RETENTION_SECTION = "retention"
RETENTION_MAX_DAYS = 36_500


def _retention_level(configuration: dict[str, Any] | None) -> int | None:
    section = (configuration or {}).get(RETENTION_SECTION)
    if section is None:
        return None
    if not isinstance(section, dict):
        raise Invalid(f"configuration.{RETENTION_SECTION} must be an object")
    unknown = sorted(set(section) - {"days"})
    if unknown:
        raise Invalid(f"configuration.{RETENTION_SECTION}.{unknown[0]}: unknown setting (known: days)")
    days = section.get("days")
    bad = not isinstance(days, int) or isinstance(days, bool) or not 0 <= days <= RETENTION_MAX_DAYS
    if days is not None and bad:
        raise Invalid(
            f"configuration.{RETENTION_SECTION}.days: must be an integer from 0 (keep for ever) to "
            f"{RETENTION_MAX_DAYS} or null, not {days!r}"
        )
    return days


def retention_days(workspace: dict[str, Any] | None, session: dict[str, Any] | None = None) -> int | None:
    """The days a session's new messages are kept (`configuration.retention.days`, the session's over the
    workspace's; 0 at the session keeps its messages whatever the workspace says); None: for ever."""
    days = _retention_level(session)
    if days is None:
        days = _retention_level(workspace)
    return days or None


def merge_configuration(stored: dict[str, Any], sent: dict[str, Any]) -> dict[str, Any]:
    """The configuration a get-or-create of an existing session keeps (Honcho's rule): the keys sent replace the
    stored ones of that name, the others stay; a key sent as null changes nothing."""
    return {**stored, **{key: value for key, value in sent.items() if value is not None}}


def check_configuration(
    workspace: dict[str, Any] | None,
    session: dict[str, Any] | None = None,
    *,
    deployment: Mapping[str, Any] | None = None,
) -> None:
    """Invalid (422) when a workspace's or session's configuration holds a bad summary, deriver, retention or (a
    workspace's) usage setting."""
    summary_config(workspace, session, deployment=deployment)
    derive_config(workspace, session)
    monthly_token_budget(workspace)
    retention_days(workspace, session)


# Every function imports this module while it starts: reading the settings here makes a bad deployment value fail
# the cold start with its message (Lambda's init error), not each request later.
get_settings()
