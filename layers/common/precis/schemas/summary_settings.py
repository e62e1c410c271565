"""A session's summary settings (`SummaryConfig`) and how its layers merge: what the context read and the settings
check need from the strategies, without the planning (`precis.summaries.strategies`) that only the summarizer runs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

SHORT = "honcho_chat_summary_short"
LONG = "honcho_chat_summary_long"
ROLLING = "rolling"

MIN_OUTPUT_TOKENS = 64
MAX_OUTPUT_TOKENS = 4096
CADENCE_OUTPUT_TOKENS = 512
ROLLING_OUTPUT_SHARE = 4  # a rolling summary holds at most token_threshold / 4 tokens
ROLLING_OUTPUT_DEFAULT_SHARE = 16  # and by default token_threshold / 16 (500 at the default 8000)


def default_max_output_tokens(strategy: str, token_threshold: int) -> int:
    """`max_output_tokens` when no layer sets it: 512 for cadence; for rolling a sixteenth of `token_threshold`
    (about today's 512 at the default 8000, and far under the quarter allowed), within 64..4096."""
    if strategy != "rolling":
        return CADENCE_OUTPUT_TOKENS
    return min(MAX_OUTPUT_TOKENS, max(MIN_OUTPUT_TOKENS, token_threshold // ROLLING_OUTPUT_DEFAULT_SHARE))


class SummaryConfig(BaseModel):
    """A session's summary settings: built-in defaults < the deployment's < the workspace's < the session's.

    No summary may hold more than the history it replaces. What that asks of the settings, per strategy:
    - `rolling`: a fold is due once the summary and the messages after it reach `token_threshold`, and replaces
      all of that but the newest `keep_recent_runs` runs. Its summary may hold at most a quarter of the threshold
      (`max_output_tokens <= token_threshold / 4`, so `token_threshold >= 256`): a summary near the threshold would
      make every later run due a fold that can shrink nothing, and a quarter leaves three quarters of the
      threshold to new runs between folds. Unset, `max_output_tokens` is a sixteenth of the threshold.
    - `cadence`: summaries fall due by message count, and 20 messages may hold fewer tokens than any cap; no
      setting bounds what a summary replaces, so the summarizer caps each request at the tokens it replaces
      (previous summary + messages; see `summarize`), as it does for every strategy.
    - `sliding_window`: writes no summary.
    `whole_runs`: the context's default for `whole_runs` (the query parameter wins).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    strategy: Literal["cadence", "rolling", "sliding_window"] = "cadence"
    engine: Literal["llm", "extractive"] | None = None  # None: the summarizer picks (llm when one is configured)
    messages_per_short_summary: int = Field(20, ge=10)
    messages_per_long_summary: int = Field(60, ge=20)
    token_threshold: int = Field(8000, ge=100)
    keep_recent_runs: int = Field(5, ge=1)
    keep_runs: int = Field(10, ge=1)
    instructions: str | None = Field(None, max_length=4000)
    model: str | None = Field(None, min_length=1, max_length=200)
    # Unset (None): default_max_output_tokens(strategy, token_threshold), filled in before validation.
    max_output_tokens: int = Field(CADENCE_OUTPUT_TOKENS, ge=MIN_OUTPUT_TOKENS, le=MAX_OUTPUT_TOKENS)
    temperature: float | None = Field(None, ge=0, le=2)
    whole_runs: bool = False

    @model_validator(mode="before")
    @classmethod
    def _derived_output(cls, data: Any) -> Any:
        if not isinstance(data, Mapping) or data.get("max_output_tokens") is not None:
            return data
        strategy, threshold = data.get("strategy", "cadence"), data.get("token_threshold", 8000)
        try:
            threshold = int(threshold)
        except (TypeError, ValueError):
            return data  # a bad token_threshold is refused by its own field; the cap is moot
        return {**data, "max_output_tokens": default_max_output_tokens(strategy, threshold)}

    @field_validator("messages_per_long_summary")
    @classmethod
    def _long_after_short(cls, value: int, info: ValidationInfo) -> int:
        short = info.data.get("messages_per_short_summary")
        if short is not None and value <= short:
            raise ValueError(
                f"messages_per_long_summary must be greater than messages_per_short_summary ({short}), got {value}"
            )
        return value

    @field_validator("token_threshold")
    @classmethod
    def _room_for_a_rolling_summary(cls, value: int, info: ValidationInfo) -> int:
        floor = MIN_OUTPUT_TOKENS * ROLLING_OUTPUT_SHARE
        if _rolls(info) and value < floor:
            raise PydanticCustomError(
                "rolling_threshold",
                "at least {floor} for the rolling strategy, got {value} (its summary may hold a "
                "quarter of it, and max_output_tokens is at least {least})",
                {"floor": floor, "value": value, "least": MIN_OUTPUT_TOKENS},
            )
        return value

    @field_validator("max_output_tokens")
    @classmethod
    def _summary_under_a_quarter(cls, value: int, info: ValidationInfo) -> int:
        threshold = info.data.get("token_threshold")
        if _rolls(info) and threshold is not None and value * ROLLING_OUTPUT_SHARE > threshold:
            raise PydanticCustomError(
                "rolling_output",
                "at most a quarter of token_threshold {threshold} ({most}) for the rolling "
                "strategy, got {value}: a summary must stay far smaller than the history it folds",
                {"threshold": threshold, "most": threshold // ROLLING_OUTPUT_SHARE, "value": value},
            )
        return value


def _rolls(info: ValidationInfo) -> bool:
    return info.data.get("enabled", True) is not False and info.data.get("strategy") == "rolling"


def merge_config(*layers: Mapping[str, Any] | None) -> SummaryConfig:
    """Summary settings from layers, lowest first (deployment, workspace, session); a key set to None inherits.
    Raises ValidationError."""
    merged: dict[str, Any] = {}
    for layer in layers:
        merged.update({k: v for k, v in (layer or {}).items() if v is not None})
    return SummaryConfig.model_validate(merged)


def summary_types(config: SummaryConfig) -> tuple[str, ...]:
    """The summary types this configuration maintains."""
    if not config.enabled:
        return ()
    return {"cadence": (SHORT, LONG), "rolling": (ROLLING,), "sliding_window": ()}[config.strategy]
