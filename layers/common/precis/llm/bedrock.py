"""The `bedrock` provider: Amazon Bedrock models through `bedrock-runtime`, authorised by the function's IAM role.

Chat answers go through Converse: the chat-completions messages become Converse's system blocks and alternating
user/assistant turns, tools become `toolConfig`, and a `response_format` becomes a forced tool whose input schema is
the JSON Schema (the tool's input is the answer's JSON text). `maxTokens` is always set. Embeddings go through
InvokeModel in each family's own body: Titan Text Embeddings (one text a call) and Cohere Embed (up to 96 texts).

The client is botocore's (a boto3 client is the same object), made on first use with a loader that knows the one
service it needs, like the store's (precis.store.db): no client, and no botocore model file, on a cold path that
asks no model. botocore's own retries are off: `Model.retrying` retries what `failure` calls retryable (throttling,
5xx, timeouts), and says access denied or an unknown model once, naming the model id. botocore honours
AWS_ENDPOINT_URL_BEDROCK_RUNTIME, which points the local stack and the tests at a local server.
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
from typing import Any

from precis.llm import BadAnswer, Failure, Model, Reply, ToolCall, meter

SERVICE = "bedrock-runtime"
TITAN_V2 = "amazon.titan-embed-text-v2"
COHERE_BATCH = 96  # texts per Cohere Embed request (the model's limit)
# Errors Bedrock returns for a request that may succeed later; the rest (validation, access, unknown model) are final.
_RETRYABLE_CODES = {
    "ThrottlingException",
    "ServiceUnavailableException",
    "InternalServerException",
    "ModelTimeoutException",
    "ModelNotReadyException",
    "ModelErrorException",
    "RequestTimeout",
    "RequestTimeoutException",
    "TooManyRequestsException",
}
_REFUSED_CODES = {
    "AccessDeniedException": "access denied to",
    "ResourceNotFoundException": "no such model",
    "UnrecognizedClientException": "credentials refused for",
    "ServiceQuotaExceededException": "service quota exceeded for",
}
# How Bedrock's models say the prompt does not fit (a ValidationException): Anthropic's "prompt is too long",
# Bedrock's own "Input is too long for requested model", Titan's and Llama's "too many input tokens" etc.
_TOO_LONG = re.compile(
    r"too long|too many (input )?tokens|context (length|window)|maximum context|input length|"
    r"exceeds? (the )?(model'?s? )?(maximum|max|context)",
    re.I,
)
# How a model without forced tool use refuses toolChoice (Converse: "This model doesn't support the toolChoice ...").
_NO_TOOL_CHOICE = re.compile(r"toolChoice|tool choice|tool use|doesn't support tool", re.I)
_THINKING = re.compile(r"^\s*<think>.*?</think>", re.DOTALL)

_session_lock = threading.Lock()
_session: Any = None


def botocore_session() -> Any:
    """One botocore session per process whose data loader lists only bedrock-runtime (see precis.store.db)."""
    global _session
    with _session_lock:
        if _session is None:
            from botocore.loaders import Loader
            from botocore.session import get_session

            class KnownServices(Loader):
                def list_available_services(self, type_name: str) -> list[str]:
                    return [SERVICE]

            session = get_session()
            paths = session.get_config_variable("data_path")
            extra = [os.path.expanduser(os.path.expandvars(p)) for p in paths.split(os.pathsep)] if paths else []
            session.register_component("data_loader", KnownServices(extra_search_paths=extra))
            _session = session
        return _session


class BedrockModel(Model):
    provider = "bedrock"

    def __init__(self, *, region: str | None = None, **options: Any):
        super().__init__(**options)
        self.region = region
        self.structured = True  # off once the model refuses a forced tool: the schema goes in the prompt instead
        self._clients: dict[int, Any] = {}
        self._lock = threading.Lock()
        self._asked = threading.local()  # the model id of this thread's call, for failures to name

    def client(self, timeout: float) -> Any:
        """A bedrock-runtime client whose read timeout is `timeout` rounded up to a second (one per such timeout:
        botocore sets timeouts per client, and the seam shortens the last attempts to fit a deadline)."""
        seconds = max(1, math.ceil(min(timeout, self.timeout)))
        with self._lock:
            client = self._clients.get(seconds)
            if client is None:
                from botocore.config import Config

                config = Config(
                    retries={"total_max_attempts": 1},
                    connect_timeout=min(5, seconds),
                    read_timeout=seconds,
                    max_pool_connections=32,
                )
                region = self.region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
                client = botocore_session().create_client(SERVICE, region_name=region or None, config=config)
                self._clients[seconds] = client
            return client

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
        model_id = self._asked.model = model or self.model
        answer_tool = _answer_tool(response_format) if response_format is not None and self.structured else None
        specs = [_tool_spec(t) for t in tools or ()]
        request: dict[str, Any] = {"modelId": model_id, "inferenceConfig": {"maxTokens": max_tokens}}
        if temperature is not None:
            request["inferenceConfig"]["temperature"] = temperature
        if answer_tool is not None:
            # With other tools offered the model must call one of them or the answer tool ("any"); alone, the
            # answer tool itself.
            choice = {"any": {}} if specs else {"tool": {"name": answer_tool["toolSpec"]["name"]}}
            request["toolConfig"] = {"tools": [*specs, answer_tool], "toolChoice": choice}
        elif specs:
            request["toolConfig"] = {"tools": specs}
        extra = [schema_prompt] if response_format is not None and answer_tool is None and schema_prompt else []
        # Earlier tool calls stay tool blocks only while their tools are offered (Converse refuses tool blocks
        # without a toolConfig, and the answer tool alone does not name them): else they are told as text.
        system, turns = converse_messages(messages, keep_tools=bool(specs), extra_system=extra)
        request["messages"] = turns
        if system:
            request["system"] = system + ([CACHE_POINT] if caches(model_id, system) else [])
        try:
            answer = self.client(timeout).converse(**request)
        except Exception as exc:
            if answer_tool is None or not _refuses_tool_choice(exc):
                raise
            self.structured = False  # asked once; the schema goes in the prompt and the answer is still checked
            return self.complete(
                messages,
                max_tokens=max_tokens,
                timeout=timeout,
                model=model,
                temperature=temperature,
                tools=tools,
                response_format=response_format,
                schema_prompt=schema_prompt,
            )
        reply = _reply(answer, model_id, answer_tool["toolSpec"]["name"] if answer_tool else None)
        meter.record(
            model_id, input_tokens=reply.input_tokens, cached=reply.cached_input_tokens, output=reply.output_tokens
        )
        return reply

    def embed(self, texts: list[str], *, dimensions: int, timeout: float, model: str | None = None) -> list[Any]:
        model_id = self._asked.model = model or self.model
        if model_id.startswith("cohere.embed"):
            body: dict[str, Any] = {
                "texts": texts,
                "input_type": "search_document",
                "embedding_types": ["float"],
                "truncate": "END",
            }
            if "embed-v4" in model_id:
                body["output_dimension"] = dimensions
            answer = self._invoke(model_id, body, timeout)
            vectors = answer.get("embeddings")
            if isinstance(vectors, dict):  # asked with embedding_types: {"float": [...]}
                vectors = vectors.get("float")
            if not isinstance(vectors, list):
                raise BadAnswer("a Cohere answer without embeddings")
            return vectors
        vectors = []
        for text in texts:  # Titan takes one text a request
            body = {"inputText": text}
            if model_id.startswith(TITAN_V2):
                body |= {"dimensions": dimensions, "normalize": True}
            vectors.append(self._invoke(model_id, body, timeout).get("embedding"))
        return vectors

    def batch_size(self, model: str | None = None) -> int:
        """The most texts one `embed` call should carry for `model`."""
        return COHERE_BATCH if (model or self.model).startswith("cohere.embed") else 1

    def failure(self, exc: Exception) -> Failure | None:
        from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, ReadTimeoutError
        from botocore.parsers import ResponseParserError

        model = getattr(self._asked, "model", None) or self.model
        if isinstance(exc, ClientError):
            error = exc.response.get("Error", {})
            code, message = error.get("Code", ""), error.get("Message", "")
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
            reason = f"{code or 'HTTP ' + str(status)} from model {model!r}: {message}"
            if code == "ValidationException" and _TOO_LONG.search(message):
                return Failure(False, None, reason, too_long=True)
            if code in _REFUSED_CODES:
                return Failure(False, None, f"{_REFUSED_CODES[code]} model {model!r} ({code}: {message})")
            retryable = code in _RETRYABLE_CODES or status in (408, 429) or status >= 500
            headers = exc.response.get("ResponseMetadata", {}).get("HTTPHeaders", {})
            return Failure(retryable, _retry_after(headers), reason)
        if isinstance(exc, NoCredentialsError):
            return Failure(False, None, f"no AWS credentials to call model {model!r}")
        if isinstance(exc, ReadTimeoutError):
            return Failure(True, None, "request timed out")
        if isinstance(exc, (BotoCoreError, ResponseParserError)):  # connection errors; a body that is not JSON
            return Failure(True, None, f"{type(exc).__name__}: {exc}")
        return None

    def _invoke(self, model_id: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        answer = self.client(timeout).invoke_model(
            modelId=model_id, body=json.dumps(body), contentType="application/json", accept="application/json"
        )
        payload = json.loads(answer["body"].read())
        if not isinstance(payload, dict):
            raise BadAnswer("an InvokeModel answer that is not a JSON object")
        # Every InvokeModel here embeds: Titan counts its input in the body, and Bedrock in a header for every model.
        headers = (answer.get("ResponseMetadata") or {}).get("HTTPHeaders") or {}
        counted = payload.get("inputTextTokenCount", headers.get("x-amzn-bedrock-input-token-count"))
        try:
            tokens = int(counted) if counted is not None else None
        except (TypeError, ValueError):
            tokens = None
        meter.record(model_id, input_tokens=tokens, embed=True)
        return payload


def converse_messages(
    messages: list[dict[str, Any]], *, keep_tools: bool, extra_system: list[str] | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Converse's system blocks and turns from chat-completions `messages`: consecutive messages of one role merge
    (Converse wants turns to alternate), a tool result is a user turn's toolResult. Without `keep_tools` (a request
    without toolConfig, which Converse then refuses tool blocks in) earlier tool calls and results become text."""
    system = [{"text": m["content"]} for m in messages if m.get("role") == "system" and m.get("content")]
    system += [{"text": text} for text in extra_system or ()]
    turns: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        if role == "system":
            continue
        content: list[dict[str, Any]] = []
        if role == "tool":
            result = str(message.get("content") or "")
            if keep_tools:
                content.append(
                    {
                        "toolResult": {
                            "toolUseId": message.get("tool_call_id"),
                            "content": [{"text": result or "(empty)"}],
                        }
                    }
                )
            else:
                content.append({"text": f"[tool result]\n{result}"})
            role = "user"
        else:
            if message.get("content"):
                content.append({"text": str(message["content"])})
            for call in message.get("tool_calls") or ():
                function = call.get("function", {})
                if keep_tools:
                    content.append(
                        {
                            "toolUse": {
                                "toolUseId": call.get("id"),
                                "name": function.get("name"),
                                "input": _arguments(function.get("arguments")),
                            }
                        }
                    )
                else:
                    content.append({"text": f"[called {function.get('name')} with {function.get('arguments')}]"})
        if not content:
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(content)
        else:
            turns.append({"role": role, "content": content})
    return system, turns


def _arguments(text: Any) -> dict[str, Any]:
    try:
        value = json.loads(text or "{}")
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _tool_spec(tool: dict[str, Any]) -> dict[str, Any]:
    function = tool.get("function", tool)
    spec: dict[str, Any] = {
        "name": function["name"],
        "inputSchema": {"json": function.get("parameters") or {"type": "object"}},
    }
    if function.get("description"):
        spec["description"] = function["description"]
    return {"toolSpec": spec}


def _answer_tool(response_format: dict[str, Any]) -> dict[str, Any] | None:
    """The forced tool that carries a json_schema `response_format`: its input is the answer."""
    schema = (response_format.get("json_schema") or {}) if response_format.get("type") == "json_schema" else {}
    if not isinstance(schema.get("schema"), dict):
        return None
    name = re.sub(r"[^A-Za-z0-9_-]", "_", str(schema.get("name") or "answer"))[:64] or "answer"
    return {
        "toolSpec": {
            "name": name,
            "description": "Give the answer: its input is the answer itself.",
            "inputSchema": {"json": schema["schema"]},
        }
    }


def _refuses_tool_choice(exc: Exception) -> bool:
    from botocore.exceptions import ClientError

    if not isinstance(exc, ClientError):
        return False
    error = exc.response.get("Error", {})
    return error.get("Code") == "ValidationException" and bool(_NO_TOOL_CHOICE.search(error.get("Message", "")))


def _reply(answer: dict[str, Any], asked: str, answer_tool: str | None) -> Reply:
    message = (answer.get("output") or {}).get("message")
    if not isinstance(message, dict) or not isinstance(message.get("content"), list):
        raise BadAnswer("answer without a message")
    texts, calls, answer_text = [], [], None
    for block in message["content"]:
        if not isinstance(block, dict):
            continue
        if isinstance(block.get("text"), str):
            texts.append(block["text"])
        use = block.get("toolUse")
        if isinstance(use, dict):
            if use.get("name") == answer_tool:
                answer_text = json.dumps(use.get("input"))
            else:
                calls.append(
                    ToolCall(str(use.get("toolUseId")), str(use.get("name")), json.dumps(use.get("input") or {}))
                )
    usage = answer.get("usage") or {}
    if answer_text is not None:
        text: str | None = answer_text  # the structured answer; words around it are not the answer
    else:
        text = _THINKING.sub("", "".join(texts)).strip() if texts else None
    return Reply(
        text=text,
        tool_calls=tuple(calls) if answer_text is None else (),
        model=asked,
        # Converse counts what it read from and wrote to the prompt cache apart from inputTokens: the prompt is all 3
        input_tokens=_count(
            sum(usage.get(k) or 0 for k in ("inputTokens", "cacheReadInputTokens", "cacheWriteInputTokens"))
        ),
        output_tokens=_count(usage.get("outputTokens")),
        finish_reason=answer.get("stopReason"),
        cached_input_tokens=usage.get("cacheReadInputTokens")
        if isinstance(usage.get("cacheReadInputTokens"), int)
        else None,
    )


CACHE_POINT = {"cachePoint": {"type": "default"}}
# The models Bedrock caches prompts for, by a part of their id (an inference profile's too), and the fewest tokens a
# checkpoint must cover for them (Bedrock's prompt caching guide); below that a checkpoint caches nothing.
CACHE_MIN_TOKENS = (
    ("anthropic.claude-3-5-haiku", 2048),
    ("anthropic.claude-haiku-4-5", 4096),
    ("anthropic.claude-3-7-sonnet", 1024),
    ("anthropic.claude-sonnet-4", 1024),
    ("anthropic.claude-opus-4", 1024),
    ("amazon.nova", 1000),
)


def caches(model_id: str, system: list[dict[str, Any]]) -> bool:
    """Whether a `cachePoint` after the system blocks would be cached: a model Bedrock caches prompts for, and a
    system prefix of at least its minimum (counted with this package's tokenizer, which reads a little high)."""
    minimum = next((n for part, n in CACHE_MIN_TOKENS if part in model_id), None)
    if minimum is None:
        return False
    from precis.tokens import count_text

    return sum(count_text(block.get("text", "")) for block in system) >= minimum


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and value > 0 else None


def _retry_after(headers: dict[str, Any]) -> float | None:
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None
