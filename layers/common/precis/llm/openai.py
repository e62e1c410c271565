"""The `openai` provider: chat completions and embeddings from any OpenAI-compatible endpoint (OpenAI, vLLM, Ollama,
llama.cpp, proxies).

The client's own retries are off (max_retries=0): `Model.retrying` retries what `failure` calls retryable. A prompt
over the model's context window (OpenAI's code, or other servers' words, on a 400 or a proxy's 413) is `too_long`.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, cast

import openai

from precis.llm import BadAnswer, EngineError, Failure, Model, Reply, ToolCall, meter

if TYPE_CHECKING:
    from openai.types.chat.completion_create_params import ResponseFormat

_RETRYABLE_STATUS = {408, 409, 429}  # and every 5xx
_THINKING = re.compile(r"^\s*<think>.*?</think>", re.DOTALL)  # reasoning models served by vLLM/Ollama
# OpenAI's code for a prompt over the context window; other servers (vLLM, llama.cpp, proxies) only say it in words.
_CONTEXT_CODE = "context_length_exceeded"
_CONTEXT_WORDS = re.compile(r"context length|context window|context size|prompt is too long|too many tokens", re.I)
# How servers without structured output refuse it (OpenAI: param "response_format"; vLLM, llama.cpp: in words).
_UNSUPPORTED = re.compile(r"response_format|json_schema|structured output", re.I)


class OpenAIModel(Model):
    provider = "openai"

    def __init__(
        self, *, base_url: str | None = None, api_key: str | None = None, cache_key: str | None = None, **options: Any
    ):
        if not (base_url or api_key):
            raise EngineError("llm engine: neither OPENAI_BASE_URL nor OPENAI_API_KEY is configured", retryable=False)
        super().__init__(**options)
        self.cache_key = cache_key  # OpenAI's prompt_cache_key, sent with every chat request when set
        self.structured = True  # off once the server refuses response_format: it is not asked again
        # Local OpenAI-compatible servers often need no key, but the client insists on one.
        self.client = openai.OpenAI(base_url=base_url, api_key=api_key or "unused", timeout=self.timeout, max_retries=0)

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
        params: dict[str, Any] = {"model": model or self.model, "messages": messages, "max_tokens": max_tokens}
        if temperature is not None:
            params["temperature"] = temperature
        if tools:
            params["tools"] = tools
        if self.cache_key:
            params["prompt_cache_key"] = self.cache_key
        reply = _reply(self._create(params, response_format, schema_prompt, timeout), params["model"])
        meter.record(
            reply.model or params["model"],
            input_tokens=reply.input_tokens,
            cached=reply.cached_input_tokens,
            output=reply.output_tokens,
        )
        return reply

    def embed(self, texts: list[str], *, dimensions: int, timeout: float, model: str | None = None) -> list[Any]:
        answer = self.client.embeddings.create(
            model=model or self.model, input=texts, dimensions=dimensions, encoding_format="float", timeout=timeout
        )
        meter.record(
            model or self.model, input_tokens=_usage(getattr(answer, "usage", None), "prompt_tokens"), embed=True
        )
        data = sorted(getattr(answer, "data", None) or [], key=lambda d: getattr(d, "index", 0))
        return [getattr(item, "embedding", None) for item in data]

    def failure(self, exc: Exception) -> Failure | None:
        if not isinstance(exc, openai.APIError):
            return None
        if _context_exceeded(exc):
            return Failure(False, None, exc.message, too_long=True)
        if isinstance(exc, openai.APITimeoutError):
            return Failure(True, None, "request timed out")
        if isinstance(exc, openai.APIConnectionError):
            return Failure(True, None, f"connection failed: {exc}")
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            retryable = status in _RETRYABLE_STATUS or status >= 500
            return Failure(retryable, retry_after(exc.response.headers), f"HTTP {status}: {exc.message}")
        # A body that is not JSON, JSON without choices: a proxy or an overloaded server.
        return Failure(True, None, f"unusable answer: {exc}")

    def _create(
        self, params: dict[str, Any], response_format: dict[str, Any] | None, schema_prompt: str | None, timeout: float
    ) -> Any:
        create = self.client.chat.completions.create
        if response_format is not None and self.structured:
            try:
                # precis.llm's response_format is the chat-completions one (a json_schema format), kept as a plain dict
                return create(**params, response_format=cast("ResponseFormat", response_format), timeout=timeout)
            except openai.BadRequestError as exc:
                if exc.param != "response_format" and not _UNSUPPORTED.search(exc.message or ""):
                    raise
                self.structured = False  # the schema goes in the prompt instead, and the answer is still checked
        if response_format is not None and schema_prompt:
            params = params | {"messages": [*params["messages"], {"role": "system", "content": schema_prompt}]}
        return create(**params, timeout=timeout)


def _reply(completion: Any, asked: str) -> Reply:
    choices = getattr(completion, "choices", None)  # a JSON error body parses into a completion without choices
    if not choices:
        raise BadAnswer("answer without choices")
    message = getattr(choices[0], "message", None)
    content = getattr(message, "content", None)
    calls = tuple(
        ToolCall(c.id, c.function.name, c.function.arguments or "{}")
        for c in getattr(message, "tool_calls", None) or ()
    )
    usage = getattr(completion, "usage", None)
    return Reply(
        text=_THINKING.sub("", content).strip() if isinstance(content, str) else None,
        tool_calls=calls,
        model=getattr(completion, "model", None) or asked,
        input_tokens=_usage(usage, "prompt_tokens"),
        output_tokens=_usage(usage, "completion_tokens"),
        finish_reason=getattr(choices[0], "finish_reason", None),
        cached_input_tokens=_cached(usage),
    )


def _cached(usage: Any) -> int | None:
    """The prompt's tokens OpenAI read from its prompt cache (`prompt_tokens_details.cached_tokens`; None: not said)."""
    value = getattr(getattr(usage, "prompt_tokens_details", None), "cached_tokens", None)
    return value if isinstance(value, int) and value >= 0 else None


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
