"""Deriver engines turn a sender's new messages into explicit conclusions about them, and keep their peer card.

`get_deriver_engine` imports an engine's module only when asked for it: `openai` (about 0.7 s to import) is loaded by
the `llm` engine alone. Both engines raise `precis.llm.EngineError`: `retryable` says whether the same request
may succeed later.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from precis.llm import configured

if TYPE_CHECKING:
    from precis.settings import Settings

DERIVER_ENGINES = ("llm", "extractive")


@dataclass(frozen=True, slots=True)
class DeriveMessage:
    """One message as an engine reads it; `created_at` is the stored ISO timestamp (UTC)."""

    id: str
    seq: int
    peer_id: str
    content: str
    created_at: str


@dataclass(frozen=True, slots=True)
class DeriveRequest:
    """The observed sender's new messages, the message before them from another peer (context only), and the
    session's custom instructions."""

    observed: str
    messages: list[DeriveMessage]
    context: DeriveMessage | None = None
    custom_instructions: str | None = None
    max_output_tokens: int = 1024

    def __post_init__(self) -> None:
        if self.max_output_tokens < 1:
            raise ValueError(f"max_output_tokens: must be at least 1, got {self.max_output_tokens}")


@dataclass(frozen=True, slots=True)
class SessionRequest:
    """A session's new messages, every sender's at once: the conclusions are about each of `peers` (the observed
    senders); the other lines, and `context` (the message before the first), are there to be understood."""

    peers: tuple[str, ...]
    messages: list[DeriveMessage]
    context: DeriveMessage | None = None
    custom_instructions: str | None = None
    max_output_tokens: int = 2048


class DeriverEngine(Protocol):
    """Extracts conclusions and proposes peer cards, raising EngineError."""

    name: str

    def derive(self, request: DeriveRequest) -> list[str]:
        """Explicit conclusions from the observed peer's messages, each naming that peer as its subject."""
        ...

    def update_card(
        self, observed: str, card: list[str] | None, counts: dict[str, int], new: list[str]
    ) -> tuple[list[str], dict[str, int]] | None:
        """The new card and its bookkeeping counts from the old ones and new conclusions; None leaves it unchanged."""
        ...


def default_deriver_engine(settings: Settings) -> str:
    """`settings.derive_engine` when set, else `llm` when derivation has a model (Bedrock, or an endpoint or key)."""
    return getattr(settings, "derive_engine", None) or ("llm" if configured(settings, "derive") else "extractive")


def get_deriver_engine(name: str, settings: Settings | None = None, model: str | None = None) -> DeriverEngine:
    """The engine called `name`; the llm engine uses `model`, else the settings' (`model_for("derive")`)."""
    if name == "extractive":
        from precis.memory.engines.extractive import ExtractiveDeriver

        return ExtractiveDeriver()
    if name == "llm":
        from precis.memory.engines.llm import LLMDeriver

        if settings is None:  # its model comes from them (it failed on None further in before)
            raise ValueError("deriver engine 'llm': needs settings")

        return LLMDeriver.from_settings(settings, model=model)
    raise ValueError(f"deriver engine: must be one of {', '.join(DERIVER_ENGINES)}, got {name!r}")
