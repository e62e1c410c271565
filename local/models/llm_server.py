"""A local OpenAI-compatible chat-completions server on real sockets, for tests and `make dev`.

    with LLMServer() as server:                  # or the tests' `llm_server` fixture
        server.script(["429", "500", "ok"])      # one mode per request, then `server.mode`
        openai.OpenAI(base_url=server.url, api_key="test")

Modes: ok, 400 (a request the server refuses), 429 (with Retry-After), 500, garbage (a body that is not JSON),
nochoices (JSON with an error and no choices), empty (empty content), nousage (ok without a usage block),
hang (answers after `hang_seconds`), context_length (OpenAI's 400 `context_length_exceeded`, whatever the size),
401 (a rejected API key).

Tool calls: `answer` may return `{"tool_calls": [{"name", "arguments"}]}` instead of text, and the server answers
with those calls (finish_reason "tool_calls"), as a model calling tools does.

Structured output: `answer` is a function of the request body, so a test scripts JSON answers with it; with
`structured_output = False` the server refuses a `response_format` of type json_schema with a 400, as servers
without structured output support do (recorded with mode "unsupported").

A model with a small context window: `max_context_tokens` (None: unlimited) answers any prompt longer than that
(`prompt_tokens`, about four characters a token) with the `context_length_exceeded` 400, as OpenAI does, and
records the request with mode "context_length".
Standalone: `python -m local.models.llm_server --port 8001 [--max-context-tokens 4096]`.
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from local.models import scripted
from local.models.scripted import ScriptedHandler, ScriptedServer, Standalone, rough_tokens

MODES = ("ok", "400", "401", "429", "500", "garbage", "nochoices", "empty", "nousage", "hang", "context_length")
PATHS = ("/v1/chat/completions", "/chat/completions")


@dataclass(frozen=True)
class Recorded:
    """One request as received: path, headers (lower-case names), and the JSON body (or the raw text)."""

    path: str
    headers: dict[str, str]
    body: Any
    mode: str


@dataclass(frozen=True)
class Reported:
    """What one answer said it spent (its `usage` block), beside the request it answered: what a bill would count."""

    kind: str  # "chat" or "embeddings"
    body: Any
    model: str
    usage: dict[str, Any]


def summary_text(body: dict[str, Any]) -> str:
    """The deterministic answer: the last line of the last user message, capped at 40 words and max_tokens."""
    user = [m.get("content") for m in body.get("messages", []) if isinstance(m, dict) and m.get("role") == "user"]
    cap = body.get("max_tokens") or body.get("max_completion_tokens")
    return scripted.summary_of(str(user[-1] if user else ""), cap)


# OpenAI's prompt caching: automatic for prompts of 1,024 tokens or more, served in steps of 128 tokens of a prefix
# seen before (`usage.prompt_tokens_details.cached_tokens`).
CACHE_MIN_TOKENS, CACHE_STEP_TOKENS = 1024, 128


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def prompt_tokens(body: dict[str, Any]) -> int:
    """The prompt's size as this server counts it (usage.prompt_tokens, and the context window check)."""
    return sum(rough_tokens(str(m.get("content", ""))) + 4 for m in body.get("messages", []) if isinstance(m, dict))


_PUNCTUATION = ".,!?;:()[]'\""


def test_embedding(text: str, dimensions: int = 256) -> list[float]:
    """The test embedder: a unit vector of the text's character trigrams (hashed, signed). Near for texts that share
    spellings ("relocate", "relocation"), blind to meaning: a stand-in with a signal of its own beside BM25's words,
    not a model."""
    import hashlib
    import math

    vector = [0.0] * dimensions
    for word in text.casefold().split():
        padded = " " + word.strip(_PUNCTUATION) + " "
        for i in range(len(padded) - 2):
            digest = hashlib.blake2b(padded[i : i + 3].encode(), digest_size=4).digest()
            slot = int.from_bytes(digest[:3], "big") % dimensions
            vector[slot] += 1.0 if digest[3] & 1 else -1.0
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return [x / norm for x in vector] if any(vector) else [1.0] + [0.0] * (dimensions - 1)


class LLMServer(ScriptedServer):
    """A threaded HTTP server on 127.0.0.1 that records requests and answers as scripted."""

    MODES = MODES
    STANDALONE = Standalone("LLM server", 8001, "OPENAI_BASE_URL", "HTTP 400 context_length_exceeded")
    requests: list[Recorded]

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        mode: str = "ok",
        retry_after: str = "0",
        hang_seconds: float = 5.0,
        max_context_tokens: int | None = None,
    ):
        super().__init__(host, port, mode=mode, max_context_tokens=max_context_tokens)
        self.retry_after = retry_after
        self.hang_seconds = hang_seconds
        self.answer: Callable[[dict[str, Any]], str | dict[str, Any]] = summary_text
        self.reported: list[Reported] = []  # every usage block answered, in order
        self._prompts: deque[str] = deque(maxlen=256)  # the long prompts seen last (the prompt cache)

    def handler(self) -> type[_Handler]:
        return type("Handler", (_Handler,), {"llm": self})

    @property
    def url(self) -> str:
        """The base URL to give an OpenAI client (ends in /v1)."""
        return f"{super().url}/v1"

    def completion(self, body: dict[str, Any], *, usage: bool = True, content: str | None = None) -> dict[str, Any]:
        answer = self.answer(body) if content is None else content
        if isinstance(answer, dict):  # {"tool_calls": [{"name", "arguments"}]}: the model calls tools
            calls = [
                {
                    "id": f"call_{self.next_id()}",
                    "type": "function",
                    "function": {"name": c["name"], "arguments": json.dumps(c.get("arguments", {}))},
                }
                for c in answer["tool_calls"]
            ]
            message, finish, text = {"role": "assistant", "content": None, "tool_calls": calls}, "tool_calls", ""
        else:
            text = answer
            message, finish = {"role": "assistant", "content": text}, "stop"
        reply: dict[str, Any] = {
            "id": f"chatcmpl-local-{self.next_id()}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": f"{body.get('model', 'local')}-local",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        }
        if usage:
            prompt = prompt_tokens(body)
            completion = rough_tokens(text)
            reply["usage"] = {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
                "prompt_tokens_details": {"cached_tokens": self._cached(body, prompt)},
            }
            with self._lock:
                self.reported.append(Reported("chat", body, reply["model"], reply["usage"]))
        return reply

    def _cached(self, body: dict[str, Any], prompt: int) -> int:
        """Tokens of the prompt OpenAI's automatic caching would serve: none under CACHE_MIN_TOKENS; else the longest
        prefix this server has seen before (its messages' text, in this server's tokens), in CACHE_STEP_TOKENS steps
        from CACHE_MIN_TOKENS. Every prompt of CACHE_MIN_TOKENS or more is kept for the next."""
        if prompt < CACHE_MIN_TOKENS:
            return 0
        text = json.dumps(body.get("messages", []), sort_keys=True)
        with self._lock:
            shared = max((_common_prefix(text, seen) for seen in self._prompts), default=0)
            self._prompts.append(text)
        tokens = min(shared // 4, prompt)
        return (
            0
            if tokens < CACHE_MIN_TOKENS
            else CACHE_MIN_TOKENS + (tokens - CACHE_MIN_TOKENS) // CACHE_STEP_TOKENS * CACHE_STEP_TOKENS
        )


class _Handler(ScriptedHandler):
    llm: LLMServer

    def do_GET(self) -> None:
        if self.path.rstrip("/") in ("/v1/models", "/models"):
            self._json(200, {"object": "list", "data": [{"id": "local", "object": "model", "owned_by": "precis"}]})
        else:
            self._json(404, {"error": {"message": f"no route {self.path}", "type": "invalid_request_error"}})

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode("utf-8", "replace")
        if self.path.split("?")[0].rstrip("/") in ("/v1/embeddings", "/embeddings"):
            self._embeddings(raw)
            return
        if self.path.split("?")[0] not in PATHS:
            self._json(404, {"error": {"message": f"no route {self.path}", "type": "invalid_request_error"}})
            return
        try:
            body = json.loads(raw)
        except ValueError:
            body = raw
        llm = self.llm
        mode = llm.next_mode()
        if (
            isinstance(body, dict)
            and llm.max_context_tokens is not None
            and mode in ("ok", "nousage")
            and prompt_tokens(body) > llm.max_context_tokens
        ):
            mode = "context_length"
        if (
            isinstance(body, dict)
            and not llm.structured_output
            and mode in ("ok", "nousage")
            and (body.get("response_format") or {}).get("type") == "json_schema"
        ):
            mode = "unsupported"
        llm.record(Recorded(self.path, {k.lower(): v for k, v in self.headers.items()}, body, mode))
        if not isinstance(body, dict):
            self._json(400, {"error": {"message": "body must be a JSON object", "type": "invalid_request_error"}})
        elif mode == "400":
            self._json(
                400,
                {
                    "error": {
                        "message": f"model {body.get('model')!r} does not exist",
                        "type": "invalid_request_error",
                        "code": "model_not_found",
                    }
                },
            )
        elif mode == "401":
            self._json(
                401,
                {
                    "error": {
                        "message": "Incorrect API key provided",
                        "type": "invalid_request_error",
                        "code": "invalid_api_key",
                    }
                },
            )
        elif mode == "unsupported":
            self._json(
                400,
                {
                    "error": {
                        "message": "response_format of type 'json_schema' is not supported by this model",
                        "type": "invalid_request_error",
                        "param": "response_format",
                        "code": None,
                    }
                },
            )
        elif mode == "context_length":
            size, window = prompt_tokens(body), llm.max_context_tokens or 0
            self._json(
                400,
                {
                    "error": {
                        "message": f"This model's maximum context length is {window} tokens. However, your messages "
                        f"resulted in {size} tokens. Please reduce the length of the messages.",
                        "type": "invalid_request_error",
                        "param": "messages",
                        "code": "context_length_exceeded",
                    }
                },
            )
        elif mode == "429":
            self._json(
                429,
                {"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}},
                {"Retry-After": llm.retry_after},
            )
        elif mode == "500":
            self._json(500, {"error": {"message": "The server had an error", "type": "server_error"}})
        elif mode == "garbage":
            self._send(200, b"<html><body>upstream proxy error</body></html>", "application/json")
        elif mode == "nochoices":
            self._json(200, {"error": {"message": "model overloaded, try again", "type": "server_error"}})
        elif mode == "empty":
            self._json(200, llm.completion(body, content=""))
        elif mode == "hang":
            llm.pause(llm.hang_seconds)
            self._json(200, llm.completion(body))
        else:
            self._json(200, llm.completion(body, usage=mode != "nousage"))

    def _embeddings(self, raw: str) -> None:
        """OpenAI's embeddings route, answered by `test_embedding` (what the semantic side of search is tested
        and benchmarked with)."""
        try:
            body = json.loads(raw)
            texts = [body["input"]] if isinstance(body["input"], str) else list(body["input"])
            dimensions = int(body.get("dimensions") or 256)
        except (ValueError, KeyError, TypeError):
            self._json(
                400, {"error": {"message": "input: a string or a list of strings", "type": "invalid_request_error"}}
            )
            return
        self.llm.record(Recorded(self.path, {k.lower(): v for k, v in self.headers.items()}, body, "ok"))
        usage = {
            "prompt_tokens": sum(rough_tokens(t) for t in texts),
            "total_tokens": sum(rough_tokens(t) for t in texts),
        }
        with self.llm._lock:
            self.llm.reported.append(Reported("embeddings", body, body.get("model", "local"), usage))
        data = [
            {"object": "embedding", "index": i, "embedding": test_embedding(t, dimensions)} for i, t in enumerate(texts)
        ]
        self._json(
            200,
            {
                "object": "list",
                "data": data,
                "model": body.get("model", "local"),
                "usage": usage,
            },
        )


def main(argv: list[str] | None = None) -> None:
    scripted.main(LLMServer, argv)


if __name__ == "__main__":
    main()
