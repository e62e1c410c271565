"""The `llm` engine: one chat completion against any OpenAI-compatible endpoint, with its own retries.

The openai client's retries are off (max_retries=0): this module retries 408/409/429/5xx, timeouts, connection
errors and unusable answers with exponential backoff and jitter, honouring Retry-After, within a time budget per
summary (so two summaries fit the function's timeout) or the request's own time limit, whichever is shorter, and
never returns an error text as a summary. A prompt over the model's context window raises PromptTooLong: the caller
sends less, never the same request again.
"""

from __future__ import annotations

import json
import random
import re
import time
from collections.abc import Callable
from typing import Any, TypeVar

import openai

from precis.summaries.engines import BadAnswer, EngineError, PromptTooLong, SummaryRequest, SummaryResult
from precis.summaries.engines.prompt import build_messages
from precis.tokens import count_messages, count_text

_RETRYABLE_STATUS = {408, 409, 429}  # and every 5xx
_THINKING = re.compile(r"^\s*<think>.*?</think>", re.DOTALL)  # reasoning models served by vLLM/Ollama

# OpenAI's code for a prompt over the context window; other servers (vLLM, llama.cpp, proxies) only say it in words.
_CONTEXT_CODE = "context_length_exceeded"
_CONTEXT_WORDS = re.compile(r"context length|context window|context size|prompt is too long|too many tokens", re.I)


T = TypeVar("T")


class LLMEngine:
    """Summaries from an OpenAI-compatible chat-completions endpoint."""

    name = "llm"

    def __init__(self, *, model: str, base_url: str | None = None, api_key: str | None = None,
                 timeout: float = 30.0, max_attempts: int = 4, time_budget: float = 50.0, backoff_base: float = 0.5,
                 backoff_max: float = 20.0, sleep: Callable[[float], None] = time.sleep,
                 rng: Callable[[], float] = random.random, clock: Callable[[], float] = time.monotonic):
        if not (base_url or api_key):
            raise EngineError("llm engine: neither OPENAI_BASE_URL nor OPENAI_API_KEY is configured", retryable=False)
        if max_attempts < 1:
            raise ValueError(f"max_attempts: must be at least 1, got {max_attempts}")
        self.model = model
        self.timeout = timeout
        self.max_attempts = max_attempts
        self.time_budget = time_budget
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self._sleep = sleep
        self._rng = rng
        self._clock = clock
        # Local OpenAI-compatible servers often need no key, but the client insists on one.
        self._client = openai.OpenAI(base_url=base_url, api_key=api_key or "unused", timeout=timeout, max_retries=0)

    @classmethod
    def from_settings(cls, settings: Any, **overrides: Any) -> LLMEngine:
        """An engine from precis.settings.Settings; honours optional llm_timeout, llm_max_attempts, llm_time_budget."""
        options: dict[str, Any] = {
            "model": getattr(settings, "llm_model", None) or "gpt-4o-mini",
            "base_url": getattr(settings, "llm_base_url", None),
            "api_key": getattr(settings, "llm_api_key", None),
        }
        for name, option in (("llm_timeout", "timeout"), ("llm_max_attempts", "max_attempts"),
                             ("llm_time_budget", "time_budget")):
            if getattr(settings, name, None) is not None:
                options[option] = getattr(settings, name)
        return cls(**(options | overrides))

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        """One summary; raises EngineError when the endpoint fails or answers nothing usable."""
        messages = build_messages(request)
        params: dict[str, Any] = {"model": request.model or self.model, "messages": messages,
                                  "max_tokens": request.max_output_tokens}
        if request.temperature is not None:
            params["temperature"] = request.temperature
        budget = self.time_budget if request.time_limit_s is None else min(self.time_budget, request.time_limit_s)
        started = time.perf_counter()

        def attempt(timeout: float) -> tuple[Any, str]:
            completion = self._client.chat.completions.create(**params, timeout=timeout)
            return completion, text_of(completion)

        (completion, text), attempts = self.retrying(attempt, budget)
        usage = getattr(completion, "usage", None)
        return SummaryResult(
            text=text,
            prompt=json.dumps(messages, ensure_ascii=False),
            model=getattr(completion, "model", None) or params["model"],
            input_tokens=_usage(usage, "prompt_tokens") or count_messages(messages),
            output_tokens=_usage(usage, "completion_tokens") or count_text(text),
            latency_ms=(time.perf_counter() - started) * 1000,
            attempts=attempts,
        )

    def retrying(self, attempt: Callable[[float], T], budget: float) -> tuple[T, int]:
        """`attempt(timeout)`'s result and how many attempts it took: 408/409/429/5xx, timeouts, connection errors and
        bad answers are retried with backoff within `budget` seconds; a prompt over the context window raises
        PromptTooLong, a refusal or the last failure EngineError."""
        deadline = self._clock() + budget
        for number in range(1, self.max_attempts + 1):
            try:
                return attempt(max(0.001, min(self.timeout, deadline - self._clock()))), number
            except (openai.APIError, json.JSONDecodeError, BadAnswer) as exc:
                if _context_exceeded(exc):
                    raise PromptTooLong(f"llm: prompt over the model's context window: {exc.message}") from exc
                retryable, wait, reason = classify(exc)
                if not retryable:
                    raise EngineError(f"llm: {reason}", retryable=False) from exc
                delay = self._delay(number, wait)
                # Another attempt needs the sleep plus a useful share of a request's timeout.
                if number == self.max_attempts or self._clock() + delay + min(1.0, self.timeout) > deadline:
                    raise EngineError(f"llm: gave up after {number} attempts: {reason}", retryable=True) from exc
                self._sleep(delay)
        raise AssertionError("unreachable")

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        """Exponential backoff with equal jitter, or the server's Retry-After if longer; capped."""
        ceiling = min(self.backoff_max, self.backoff_base * 2 ** (attempt - 1))
        backoff = ceiling / 2 + self._rng() * ceiling / 2
        return min(self.backoff_max, max(backoff, retry_after or 0.0))


def text_of(completion: Any) -> str:
    """The text of a chat completion, without a reasoning model's <think> block; BadAnswer when there is none."""
    choices = getattr(completion, "choices", None)  # a JSON error body parses into a completion without choices
    if not choices:
        raise BadAnswer("answer without choices")
    message = getattr(choices[0], "message", None)
    content = getattr(message, "content", None)
    if not isinstance(content, str):
        raise BadAnswer(f"answer without text (finish_reason {getattr(choices[0], 'finish_reason', None)!r})")
    text = _THINKING.sub("", content).strip()
    if not text:
        raise BadAnswer(f"empty answer (finish_reason {getattr(choices[0], 'finish_reason', None)!r})")
    return text


def classify(exc: Exception) -> tuple[bool, float | None, str]:
    """(retryable, seconds the server asked to wait, reason) for a failed attempt."""
    if isinstance(exc, BadAnswer):
        return exc.retryable, None, f"unusable answer: {exc}"
    if isinstance(exc, openai.APITimeoutError):
        return True, None, "request timed out"
    if isinstance(exc, openai.APIConnectionError):
        return True, None, f"connection failed: {exc}"
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        retryable = status in _RETRYABLE_STATUS or status >= 500
        return retryable, retry_after(exc.response.headers), f"HTTP {status}: {exc.message}"
    # A body that is not JSON, JSON without choices, an empty or non-text answer: a proxy or an overloaded server.
    return True, None, f"unusable answer: {exc}"


def _context_exceeded(exc: Exception) -> bool:
    """Whether the server refused the request because the prompt does not fit the model (400, or 413 from a proxy)."""
    if not isinstance(exc, openai.APIStatusError) or exc.status_code not in (400, 413):
        return False
    return exc.code == _CONTEXT_CODE or bool(_CONTEXT_WORDS.search(exc.message or ""))


def retry_after(headers: Any) -> float | None:
    """Seconds a 429/503 asks to wait (Retry-After-Ms, or Retry-After in seconds); None for an HTTP date or none."""
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        try:
            return float(headers.get(name)) / scale
        except (TypeError, ValueError):
            continue  # absent, or an HTTP date: fall back to backoff
    return None


def _usage(usage: Any, field: str) -> int | None:
    value = getattr(usage, field, None)
    return value if isinstance(value, int) and value > 0 else None
