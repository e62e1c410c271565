"""A local Amazon Bedrock Runtime-compatible server on real sockets, for tests and `make dev`.

    with BedrockServer() as server:              # or the tests' `bedrock_server` fixture
        server.script(["throttle", "ok"])        # one mode per request, then `server.mode`
        # the real client: AWS_ENDPOINT_URL_BEDROCK_RUNTIME=server.url (and any AWS credentials)

Routes, as the service has them: POST /model/{modelId}/converse (Converse) and POST /model/{modelId}/invoke
(InvokeModel with Titan Text Embeddings or Cohere Embed bodies). Errors are the service's: the status, the
`x-amzn-ErrorType` header and a JSON `message`.

Modes: ok, throttle (429 ThrottlingException), 500 (InternalServerException), 503 (ServiceUnavailableException),
too_long (400 ValidationException "Input is too long for requested model."), denied (403 AccessDeniedException),
unknown (404 ResourceNotFoundException), invalid (400 ValidationException about something else), garbage (a body
that is not JSON), empty (a message without content).

Converse requests are checked as the service checks them (a ValidationException otherwise): `messages` start with a
user turn and alternate; toolUse/toolResult blocks need a toolConfig; `inferenceConfig.maxTokens` is at least 1; a
`toolChoice` names a configured tool. With `structured_output = False` a toolChoice is refused as models without
forced tool use refuse it (recorded with mode "no_tool_choice"). `max_context_tokens` (None: unlimited) answers a
longer prompt (about four characters a token) with the too_long ValidationException.

Answers: `answer(body)` (body: the Converse request; `default_answer` unless a test sets it) returns text, or
`{"tool_calls": [{"name", "arguments"}]}`. When the request forces a tool (toolChoice `tool`, or `any` and the
answer is text), the text is JSON and becomes that tool's input: the last tool configured for `any`, as
precis.llm.bedrock offers its answer tool last. Embeddings are the texts' hashed feature vectors
(precis.llm.embeddings.HashedEmbedder), so texts that share words are near.
Standalone: `python -m local.models.bedrock_server --port 8002`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from local.models import scripted
from local.models.scripted import ScriptedHandler, ScriptedServer, Standalone, rough_tokens

MODES = ("ok", "throttle", "500", "503", "too_long", "denied", "unknown", "invalid", "garbage", "empty")
ERRORS = {  # mode -> (status, error type, message)
    "throttle": (429, "ThrottlingException", "Too many requests, please wait before trying again."),
    "500": (500, "InternalServerException", "The server encountered an internal error."),
    "503": (503, "ServiceUnavailableException", "The service is unavailable. Try again later."),
    "too_long": (400, "ValidationException", "Input is too long for requested model."),
    "denied": (403, "AccessDeniedException", "You don't have access to the model with the specified model ID."),
    "unknown": (404, "ResourceNotFoundException", "The requested resource could not be found."),
    "invalid": (400, "ValidationException", "The provided request is not valid."),
    "no_tool_choice": (
        400,
        "ValidationException",
        "This model doesn't support the toolChoice field. Remove toolChoice and try again.",
    ),
}
COHERE_MAX_TEXTS = 96


@dataclass(frozen=True)
class Recorded:
    """One request as received: the operation (converse or invoke), the model id, headers, the JSON body, the mode."""

    operation: str
    model: str
    headers: dict[str, str]
    body: Any
    mode: str


def user_texts(body: dict[str, Any]) -> list[str]:
    """The text blocks of the user turns, in order."""
    return [
        block["text"]
        for message in body.get("messages", [])
        if message.get("role") == "user"
        for block in message.get("content", [])
        if isinstance(block, dict) and isinstance(block.get("text"), str)
    ]


def summary_text(body: dict[str, Any]) -> str:
    """The deterministic answer: the last line of the last user text, capped at 40 words and maxTokens."""
    texts = user_texts(body)
    return scripted.summary_of(texts[-1] if texts else "", (body.get("inferenceConfig") or {}).get("maxTokens"))


def example(schema: dict[str, Any], text: str) -> Any:
    """A value valid against a simple JSON Schema, its strings `text`: what the default model puts in a forced tool
    (a conclusion, a card entry), so `make dev` derives something without a scripted answer."""
    kind = schema.get("type")
    if kind == "object":
        properties = schema.get("properties") or {}
        return {name: example(properties[name], text) for name in schema.get("required") or list(properties)}
    if kind == "array":
        return [example(schema.get("items") or {"type": "string"}, text)]
    if kind in ("integer", "number"):
        return schema.get("minimum", 1)
    if kind == "boolean":
        return True
    return (schema.get("enum") or [text])[0]


def default_answer(body: dict[str, Any]) -> str:
    """summary_text, or for a forced tool a JSON value of its input schema whose strings are that text's words."""
    config = body.get("toolConfig") or {}
    forced = (config.get("toolChoice") or {}).get("tool", {}).get("name")
    for tool in config.get("tools", []):
        if tool["toolSpec"]["name"] == forced:
            words = summary_text(body).removeprefix("Summary: ")
            return json.dumps(example(tool["toolSpec"]["inputSchema"]["json"], words))
    return summary_text(body)


# The fewest tokens a cache checkpoint covers for Bedrock to cache them (Claude Sonnet's; Haiku's and others' are
# larger): a shorter prefix is neither read from nor written to the cache.
CACHE_MIN_TOKENS = 1024


def prompt_tokens(body: dict[str, Any]) -> int:
    """The prompt's size as this server counts it (usage.inputTokens and the context window check)."""
    system = sum(rough_tokens(b["text"]) for b in body.get("system", []) if isinstance(b, dict) and "text" in b)
    return system + sum(
        rough_tokens(json.dumps(m.get("content"))) + 4 for m in body.get("messages", []) if isinstance(m, dict)
    )


def converse_problem(body: Any) -> str | None:
    """What the service would refuse in a Converse request, or None."""
    if not isinstance(body, dict):
        return "the request body must be a JSON object"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    if messages[0].get("role") != "user":
        return (
            "A conversation must start with a user message. Try again with a conversation that starts with a "
            "user message."
        )
    for before, after in zip(messages, messages[1:]):
        if before.get("role") == after.get("role"):
            return "A conversation must alternate between user and assistant roles."
    tool_blocks = any("toolUse" in block or "toolResult" in block for m in messages for block in m.get("content", []))
    config = body.get("toolConfig")
    if tool_blocks and not config:
        return "The toolConfig field must be defined when using toolUse and toolResult content blocks."
    if not isinstance((body.get("inferenceConfig") or {}).get("maxTokens"), int):
        return "inferenceConfig.maxTokens: this server insists on it (Precis always sets it)"
    if config:
        names = [t["toolSpec"]["name"] for t in config.get("tools", [])]
        chosen = (config.get("toolChoice") or {}).get("tool", {}).get("name")
        if chosen is not None and chosen not in names:
            return f"toolChoice names tool {chosen}, which is not in toolConfig.tools"
    return None


class BedrockServer(ScriptedServer):
    """A threaded HTTP server on 127.0.0.1 that records requests and answers as scripted. Its `url` is the endpoint to
    give the client (AWS_ENDPOINT_URL_BEDROCK_RUNTIME, or endpoint_url)."""

    MODES = MODES
    STANDALONE = Standalone("Bedrock server", 8002, "AWS_ENDPOINT_URL_BEDROCK_RUNTIME", "a ValidationException")
    requests: list[Recorded]

    def __init__(
        self, host: str = "127.0.0.1", port: int = 0, *, mode: str = "ok", max_context_tokens: int | None = None
    ):
        super().__init__(host, port, mode=mode, max_context_tokens=max_context_tokens)
        self.answer: Callable[[dict[str, Any]], str | dict[str, Any]] = default_answer
        self._cache: set[str] = set()  # the cached prefixes (system blocks before a cachePoint)

    def handler(self) -> type[_Handler]:
        return type("Handler", (_Handler,), {"bedrock": self})

    def converse(self, body: dict[str, Any], *, empty: bool = False) -> dict[str, Any]:
        config = body.get("toolConfig") or {}
        tools = [t["toolSpec"]["name"] for t in config.get("tools", [])]
        choice = config.get("toolChoice") or {}
        answer = "" if empty else self.answer(body)
        content: list[dict[str, Any]]
        if isinstance(answer, dict):  # the model calls tools
            content = [
                {
                    "toolUse": {
                        "toolUseId": f"tooluse_{self.next_id()}",
                        "name": c["name"],
                        "input": c.get("arguments", {}),
                    }
                }
                for c in answer["tool_calls"]
            ]
            stop, text = "tool_use", json.dumps(content)
        elif "tool" in choice or ("any" in choice and tools):
            name = choice["tool"]["name"] if "tool" in choice else tools[-1]
            try:
                given = json.loads(answer)
            except ValueError:
                given = {"answer": answer}  # a tool's input is always a JSON object
            content = [{"toolUse": {"toolUseId": f"tooluse_{self.next_id()}", "name": name, "input": given}}]
            stop, text = "tool_use", answer
        else:
            content = [{"text": answer}] if answer else []
            stop, text = "end_turn", answer
        inputs, outputs = prompt_tokens(body), rough_tokens(text)
        usage = {"inputTokens": inputs, "outputTokens": outputs, "totalTokens": inputs + outputs}
        cached = self._cached(body)
        if cached is not None:  # (Converse counts the cache's reads and writes apart from inputTokens)
            read, written = cached
            usage |= {"inputTokens": inputs - read - written, "cacheReadInputTokens": read}
            usage |= {"cacheWriteInputTokens": written}
        return {
            "output": {"message": {"role": "assistant", "content": content}},
            "stopReason": stop,
            "usage": usage,
            "metrics": {"latencyMs": 1},
        }

    def _cached(self, body: dict[str, Any]) -> tuple[int, int] | None:
        """(tokens read from the prompt cache, tokens written to it) for a request with a `cachePoint` in its system
        blocks, as Bedrock caches for models that support it: the blocks before the checkpoint, when they hold
        CACHE_MIN_TOKENS or more (a prefix seen before is read, a new one written); None without a checkpoint."""
        system = [b for b in body.get("system", []) if isinstance(b, dict)]
        at = next((i for i, b in enumerate(system) if "cachePoint" in b), None)
        if at is None:
            return None
        prefix = system[:at]
        tokens = sum(rough_tokens(b.get("text", "")) for b in prefix)
        if tokens < CACHE_MIN_TOKENS:
            return 0, 0
        key = json.dumps(prefix, sort_keys=True)
        with self._lock:
            seen = key in self._cache
            self._cache.add(key)
        return (tokens, 0) if seen else (0, tokens)

    def invoke(self, model: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        from precis.llm.embeddings import HashedEmbedder

        if model.startswith("amazon.titan-embed-text"):
            text = body.get("inputText")
            if not isinstance(text, str) or not text:
                return 400, {"message": "inputText: a non-empty string is required"}
            dimensions = body.get("dimensions", 1024) if "v2" in model else 1536
            if dimensions not in ((256, 512, 1024) if "v2" in model else (1536,)):
                return 400, {"message": f"dimensions: {dimensions} is not one of 256, 512, 1024"}
            return 200, {
                "embedding": HashedEmbedder(dimensions).embed([text])[0],
                "inputTextTokenCount": rough_tokens(text),
            }
        if model.startswith("cohere.embed"):
            texts = body.get("texts")
            if not isinstance(texts, list) or not 0 < len(texts) <= COHERE_MAX_TEXTS:
                return 400, {"message": f"texts: between 1 and {COHERE_MAX_TEXTS} texts are required"}
            if not body.get("input_type"):
                return 400, {"message": "input_type: required"}
            vectors = HashedEmbedder(body.get("output_dimension", 1024)).embed(texts)
            embeddings = {"float": vectors} if "float" in (body.get("embedding_types") or ()) else vectors
            return 200, {
                "id": f"emb-{self.next_id()}",
                "texts": texts,
                "embeddings": embeddings,
                "response_type": "embeddings_by_type" if isinstance(embeddings, dict) else "embeddings_floats",
            }
        return 404, {"message": f"Model {model} is not an embedding model this server knows"}


class _Handler(ScriptedHandler):
    bedrock: BedrockServer

    def answer_headers(self) -> dict[str, str]:
        return {"x-amzn-RequestId": f"req-{self.bedrock.next_id()}"}

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        parts = self.path.split("?")[0].split("/")
        if len(parts) != 4 or parts[1] != "model" or parts[3] not in ("converse", "invoke"):
            self._error(404, "UnknownOperationException", f"no route {self.path}")
            return
        model, operation = unquote(parts[2]), parts[3]
        try:
            body = json.loads(raw)
        except ValueError:
            body = raw.decode("utf-8", "replace")
        server = self.bedrock
        mode = server.next_mode()
        problem = converse_problem(body) if operation == "converse" else None
        if operation == "converse" and mode == "ok" and problem is None:
            if server.max_context_tokens is not None and prompt_tokens(body) > server.max_context_tokens:
                mode = "too_long"
            elif not server.structured_output and (body.get("toolConfig") or {}).get("toolChoice"):
                mode = "no_tool_choice"
        server.record(Recorded(operation, model, {k.lower(): v for k, v in self.headers.items()}, body, mode))
        if mode in ERRORS:
            self._error(*ERRORS[mode])
        elif mode == "garbage":
            self._send(200, b"<html><body>upstream proxy error</body></html>")
        elif problem is not None:
            self._error(400, "ValidationException", problem)
        elif operation == "converse":
            self._json(200, server.converse(body, empty=mode == "empty"))
        elif not isinstance(body, dict):
            self._error(400, "ValidationException", "Malformed input request: the body is not JSON")
        else:
            status, payload = server.invoke(model, body)
            if status == 200:
                self._json(200, payload)
            else:
                self._error(
                    status, "ValidationException" if status == 400 else "ResourceNotFoundException", payload["message"]
                )

    def _error(self, status: int, error_type: str, message: str) -> None:
        self._json(status, {"message": message}, {"x-amzn-ErrorType": f"{error_type}:http://internal.amazon.com/"})


def main(argv: list[str] | None = None) -> None:
    scripted.main(BedrockServer, argv)


if __name__ == "__main__":
    main()
