"""The one seam every model call goes through: summaries, derivation, dreams, chat and embeddings.

A provider is a `Model`: `complete` (one chat answer, with tools and structured output) and `embed`. This class owns
what every provider shares: retries of 408/409/429/5xx, timeouts, connection errors and unusable answers with
exponential backoff and jitter, honouring the server's Retry-After, within a time budget (or the caller's deadline,
whichever is shorter); each call's timeout; and the error classes (EngineError, PromptTooLong, BadAnswer). A provider
module says what its client's failures mean (`failure`) and translates the chat-completions shape that messages,
tools and `response_format` are written in. The providers: `openai` (any OpenAI-compatible endpoint, with a key) and
`bedrock` (Amazon Bedrock through the function's IAM role); each role (summaries, derive, chat) may use its own.

Importing this package is cheap: a provider's module, and its client library (`openai` ≈ 0.7 s, botocore's
bedrock-runtime client), is imported by `model_from`/`model_of` alone.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from precis.settings import Settings

T = TypeVar("T")
PROVIDERS = ("openai", "bedrock")
ROLES = ("summaries", "derive", "chat")  # the roles that ask a chat model; embeddings choose by `embedder`


class EngineError(Exception):
    """A model call failed; `retryable` says whether trying the same request later may succeed."""

    def __init__(self, message: str, *, retryable: bool):
        super().__init__(message)
        self.retryable = retryable


class BadAnswer(Exception):
    """A 200 answer that holds nothing usable (no text, not the JSON asked for, the wrong number of vectors): retried
    like a server error unless `retryable` is False (asking again cannot help)."""

    def __init__(self, message: str, *, retryable: bool = True):
        super().__init__(message)
        self.retryable = retryable


class PromptTooLong(EngineError):
    """The model's context window cannot hold the prompt: send less, never the same request again."""

    def __init__(self, message: str):
        super().__init__(message, retryable=False)


@dataclass(frozen=True, slots=True)
class Failure:
    """What a failed attempt means: retry it (after `wait` seconds when the server asked), or not; `too_long` when the
    prompt does not fit the model."""

    retryable: bool
    wait: float | None
    reason: str
    too_long: bool = False


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text, as the model wrote it


@dataclass(frozen=True, slots=True)
class Reply:
    """One chat answer: its text (a reasoning model's <think> block removed; None when it has none), the tools it
    calls, the model that answered and the tokens it counted (None when the server did not say; cached: 0 when it
    said none were)."""

    text: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    model: str | None = None
    input_tokens: int | None = None  # all of the prompt's, cached or not
    output_tokens: int | None = None
    finish_reason: str | None = None
    cached_input_tokens: int | None = None  # of input_tokens, those read from the provider's prompt cache

    def require_text(self) -> str:
        """The text; BadAnswer when the answer has none."""
        if self.text is None:
            raise BadAnswer(f"answer without text (finish_reason {self.finish_reason!r})")
        if not self.text:
            raise BadAnswer(f"empty answer (finish_reason {self.finish_reason!r})")
        return self.text


class Model:
    """A provider's chat and embedding calls, with the retries, deadlines and error classes every caller shares."""

    provider = "none"

    def __init__(
        self,
        *,
        model: str,
        timeout: float = 30.0,
        max_attempts: int = 4,
        time_budget: float = 50.0,
        backoff_base: float = 0.5,
        backoff_max: float = 20.0,
        sleep: Callable[[float], None] = time.sleep,
        rng: Callable[[], float] = random.random,
        clock: Callable[[], float] = time.monotonic,
    ):
        if max_attempts < 1:
            raise ValueError(f"max_attempts: must be at least 1, got {max_attempts}")
        self.model = model
        self.timeout = timeout
        self.max_attempts = max_attempts
        self.time_budget = time_budget
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.sleep = sleep
        self.rng = rng
        self.clock = clock

    def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        max_tokens: int,
        timeout: float,
        model: str | None = None,
        temperature: float | None = None,
        tools: list[dict[str, Any]] | None = None,
        response_format: dict[str, Any] | None = None,
        schema_prompt: str | None = None,
    ) -> Reply:
        """One answer to chat-completions `messages`. With `response_format` (a json_schema format) the provider asks
        for structured output; where the server refuses it, once and for all, the request goes without it and with
        `schema_prompt` (if any) as a last system message."""
        raise NotImplementedError

    def embed(self, texts: list[str], *, dimensions: int, timeout: float, model: str | None = None) -> list[Any]:
        """One raw embedding per text, in order (the caller checks and normalises them)."""
        raise NotImplementedError

    def batch_size(self, model: str | None = None) -> int:
        """The most texts one `embed` call should carry (OpenAI takes up to 2048; a smaller request fails faster)."""
        return 256

    def failure(self, exc: Exception) -> Failure | None:
        """What the provider's failure `exc` means; None when it is not a model failure (it is raised as it is)."""
        return None

    def retrying(self, attempt: Callable[[float], T], budget: float, *, name: str = "llm") -> tuple[T, int]:
        """`attempt(timeout)`'s result and how many attempts it took, retried with backoff within `budget` seconds; a
        prompt over the context window raises PromptTooLong, a refusal or the last failure EngineError (messages
        begin with `name`)."""
        deadline = self.clock() + budget
        for number in range(1, self.max_attempts + 1):
            try:
                return attempt(max(0.001, min(self.timeout, deadline - self.clock()))), number
            except Exception as exc:
                failure = self._classify(exc)
                if failure is None:
                    raise
                if failure.too_long:
                    raise PromptTooLong(f"{name}: prompt over the model's context window: {failure.reason}") from exc
                if not failure.retryable:
                    raise EngineError(f"{name}: {failure.reason}", retryable=False) from exc
                delay = self._delay(number, failure.wait)
                # Another attempt needs the sleep plus a useful share of a request's timeout.
                if number == self.max_attempts or self.clock() + delay + min(1.0, self.timeout) > deadline:
                    raise EngineError(
                        f"{name}: gave up after {number} attempts: {failure.reason}", retryable=True
                    ) from exc
                self.sleep(delay)
        raise AssertionError("unreachable")

    def _classify(self, exc: Exception) -> Failure | None:
        if isinstance(exc, BadAnswer):
            return Failure(exc.retryable, None, f"unusable answer: {exc}")
        if isinstance(exc, json.JSONDecodeError):  # a body that is not JSON: a proxy or an overloaded server
            return Failure(True, None, f"unusable answer: {exc}")
        return self.failure(exc)

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        """Exponential backoff with equal jitter, or the server's Retry-After if longer; capped."""
        ceiling = min(self.backoff_max, self.backoff_base * 2 ** (attempt - 1))
        backoff = ceiling / 2 + self.rng() * ceiling / 2
        return min(self.backoff_max, max(backoff, retry_after or 0.0))


class Embedder(Protocol):
    """Turns texts into L2-normalised vectors of `dimensions` floats, one per text, in order."""

    dimensions: int

    def embed(self, texts: list[str]) -> list[list[float]]: ...


def provider_of(settings: Settings, role: str | None = None) -> str:
    """The provider `settings` choose for `role` (its own, else llm_provider, else openai)."""
    own = getattr(settings, f"{role}_provider", None) if role else None
    return own or getattr(settings, "llm_provider", None) or "openai"


def configured(settings: Settings, role: str | None = None) -> bool:
    """Whether `settings` configure a model for `role`: Bedrock (IAM needs no key), or an OpenAI-compatible endpoint
    or key. The `llm` engines are the default only then."""
    if provider_of(settings, role) == "bedrock":
        return True
    return bool(getattr(settings, "llm_base_url", None) or getattr(settings, "llm_api_key", None))


def model_of(provider: str = "openai", **options: Any) -> Model:
    """A `provider` model built from `options` (model, timeouts, retries and the provider's own)."""
    if provider == "openai":
        from precis.llm.openai import OpenAIModel

        return OpenAIModel(**options)
    if provider == "bedrock":
        from precis.llm.bedrock import BedrockModel

        return BedrockModel(**options)
    raise ValueError(f"llm provider: must be one of {', '.join(PROVIDERS)}, got {provider!r}")


def model_from(settings: Settings, role: str | None = None, **overrides: Any) -> Model:
    """The model `settings` (precis.settings.Settings) configure for `role`: its provider, its model (`model_for`:
    the one set, else the provider's default), the endpoint and key (openai) or region (bedrock), and the optional
    llm_timeout, llm_max_attempts and llm_time_budget; `overrides` win."""
    provider = provider_of(settings, role)
    options: dict[str, Any] = {"provider": provider, "model": settings.model_for(role)}
    if provider == "bedrock":
        options["region"] = getattr(settings, "bedrock_region", None)
    else:
        base_url = getattr(settings, "llm_base_url", None)
        options |= {"base_url": base_url, "api_key": getattr(settings, "llm_api_key", None)}
        if not base_url or "api.openai.com" in base_url:
            # OpenAI's prompt cache routes requests that share a key together: one key per deployment (its table),
            # so every call of this stack reaches the prefixes its other calls cached. (Other OpenAI-compatible
            # servers may refuse a field they do not know: none is sent to them.)
            options["cache_key"] = f"precis:{getattr(settings, 'table_name', 'precis')}"
    for name, option in (
        ("llm_timeout", "timeout"),
        ("llm_max_attempts", "max_attempts"),
        ("llm_time_budget", "time_budget"),
    ):
        if getattr(settings, name, None) is not None:
            options[option] = getattr(settings, name)
    options |= {k: v for k, v in overrides.items() if k != "model" or v}
    return model_of(**options)
