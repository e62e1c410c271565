"""Engines turn (previous summary, new messages, instructions) into summary text.

`get_engine` imports an engine's module only when asked for it: `openai` (about 0.7 s to import) is loaded
by the `llm` engine alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from precis.llm import configured

if TYPE_CHECKING:
    from precis.settings import Settings

ENGINES = ("llm", "extractive")


@dataclass(frozen=True, slots=True)
class SummaryRequest:
    """What to summarize: the previous summary of this type (if any) and the new messages (peer_id, content), or
    instead of messages the summaries of them (`summaries`: a long cadence summary built from the short ones)."""

    summary_type: str
    previous: str | None
    messages: list[tuple[str, str]]
    instructions: str | None = None
    word_limit: int = 384
    max_output_tokens: int = 512
    model: str | None = None
    temperature: float | None = None
    time_limit_s: float | None = None  # seconds this summary may take, retries included (None: the engine's own)
    dates: Sequence[str | None] | None = None  # per message, when it was written (ISO 8601), if known
    # Short summaries written since the previous summary, oldest first (each covers the conversation from its start).
    summaries: Sequence[str] = ()
    # With `summaries`: tokens of the history the summary stands for (the previous summary and the messages the
    # summaries cover), which the extractive engine sizes its summary by.
    covers_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.word_limit < 1 or self.max_output_tokens < 1:
            raise ValueError(
                f"word_limit and max_output_tokens must be at least 1, got {self.word_limit}, {self.max_output_tokens}"
            )
        if self.time_limit_s is not None and self.time_limit_s <= 0:
            raise ValueError(f"time_limit_s: must be positive, got {self.time_limit_s}")
        if self.dates is not None and len(self.dates) != len(self.messages):
            raise ValueError(f"dates: one per message, got {len(self.dates)} for {len(self.messages)}")
        if self.summaries and self.messages:
            raise ValueError("summaries: a request holds messages or the summaries of them, not both")


@dataclass(frozen=True, slots=True)
class SummaryResult:
    """The summary text and what producing it took (for the audit record); latency covers every attempt."""

    text: str
    prompt: str  # the chat messages sent (or the extractive engine's input), as JSON
    model: str
    input_tokens: int
    output_tokens: int
    latency_ms: float
    attempts: int = 1


class Engine(Protocol):
    """Turns a SummaryRequest into a SummaryResult, raising precis.llm.EngineError.

    An engine that calls a backend also has `timeout`: the seconds one call may take (the summarizer starts no
    call that could not finish before its deadline); an engine without one needs no time worth counting.
    """

    name: str

    def summarize(self, request: SummaryRequest) -> SummaryResult: ...


def word_limit(max_output_tokens: int) -> int:
    """Words to ask for so the text fits `max_output_tokens` (about 3/4 of a word per token in English)."""
    return max(1, max_output_tokens * 3 // 4)


def default_engine(settings: Settings) -> str:
    """`llm` when summaries have a model (Bedrock, or an endpoint or key), else `extractive` (offline summaries on the
    local stack)."""
    return "llm" if configured(settings, "summaries") else "extractive"


def get_engine(name: str, settings: Settings | None = None) -> Engine:
    """The engine called `name`, configured from `settings` (precis.settings.Settings)."""
    if name == "extractive":
        from precis.summaries.engines.extractive import ExtractiveEngine

        return ExtractiveEngine()
    if name == "llm":
        from precis.summaries.engines.llm import LLMEngine

        if settings is None:  # its model comes from them (it failed on None further in before)
            raise ValueError("engine 'llm': needs settings")

        return LLMEngine.from_settings(settings)
    raise ValueError(f"engine: must be one of {', '.join(ENGINES)}, got {name!r}")
