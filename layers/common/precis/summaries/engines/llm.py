"""The `llm` engine: one summary from a chat model behind the LLM seam (`precis.llm`), with its retries.

Retries, backoff, Retry-After and the error classes are the seam's, within a time budget per summary (so two
summaries fit the function's timeout) or the request's own time limit, whichever is shorter; an error text is never
returned as a summary. A prompt over the model's context window raises PromptTooLong: the caller sends less, never
the same request again.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from precis.llm import Model, meter, model_from, model_of
from precis.summaries.engines import SummaryRequest, SummaryResult
from precis.summaries.engines.prompt import build_messages
from precis.tokens import count_messages, count_text

if TYPE_CHECKING:
    from precis.settings import Settings


class LLMEngine:
    """Summaries from the configured chat model."""

    name = "llm"

    def __init__(self, llm: Model | None = None, **options: Any):
        self.llm = llm or model_of(**options)  # options: the provider's (model, base_url, api_key, timeout, ...)

    @classmethod
    def from_settings(cls, settings: Settings, **overrides: Any) -> LLMEngine:
        """An engine from precis.settings.Settings (precis.llm.model_from); `overrides` win."""
        return cls(model_from(settings, "summaries", **overrides))

    @property
    def model(self) -> str:
        return self.llm.model

    @property
    def timeout(self) -> float:
        """Seconds one call may take: the summarizer starts no call that could not finish before its deadline."""
        return self.llm.timeout

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        """One summary; raises EngineError when the model fails or answers nothing usable."""
        messages = build_messages(request)
        budget = (
            self.llm.time_budget if request.time_limit_s is None else min(self.llm.time_budget, request.time_limit_s)
        )
        started = time.perf_counter()

        def attempt(timeout: float) -> tuple[Any, str]:
            reply = self.llm.complete(
                messages,
                model=request.model,
                max_tokens=request.max_output_tokens,
                temperature=request.temperature,
                timeout=timeout,
            )
            return reply, reply.require_text()

        with meter.role("summarize"):
            (reply, text), attempts = self.llm.retrying(attempt, budget)
        return SummaryResult(
            text=text,
            prompt=json.dumps(messages, ensure_ascii=False),
            model=reply.model or request.model or self.llm.model,
            input_tokens=reply.input_tokens or count_messages(messages),
            output_tokens=reply.output_tokens or count_text(text),
            latency_ms=(time.perf_counter() - started) * 1000,
            attempts=attempts,
        )
