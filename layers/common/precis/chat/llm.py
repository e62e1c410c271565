"""The `llm` chat engine: the first retrieval in the prompt, then up to the level's rounds of search tools.

It asks the configured chat model through the LLM seam (`precis.llm`: retries with backoff, error classes), within one
deadline for the whole answer (API Gateway gives a request 30 s). Each round the model may call `search_conclusions` (a
peer chat) and `search_messages`; their results are capped at TOOL_RESULT_TOKENS each, and when the next round could not
fit the input budget the model is asked to answer from what it has. With a `response_format` the answer must validate
against the schema (structured output where the server supports it): one that does not is asked for again, and after the
last attempt the chat is a 422 naming what failed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from precis.chat import (
    TOOL_RESULT_TOKENS,
    ChatRequest,
    Gathered,
    Memory,
    conclusion_line,
    memory_text,
    message_line,
    schema_problem,
)
from precis.llm import BadAnswer, Model, Reply, meter, model_from, model_of
from precis.tokens import count_messages, count_text

if TYPE_CHECKING:
    from precis.settings import Settings

CHAT_TIME_BUDGET = 25.0  # seconds for the whole answer, every round and retry: inside API Gateway's 30 s

SYSTEM = """You answer questions about what is remembered of peers in a conversation system.
{who}
Answer from the memory given and what your tools find; do not invent facts. When the memory holds nothing relevant,
say so briefly. Be concise. Conclusions marked (inferred) were reasoned, not stated."""

_TOOLS = {
    "search_conclusions": {
        "type": "function",
        "function": {
            "name": "search_conclusions",
            "description": "Search what is known about the peer: the conclusions nearest a query, nearest first.",
            "parameters": {
                "type": "object",
                "additionalProperties": False,
                "required": ["query"],
                "properties": {
                    "query": {"type": "string", "description": "what to look for"},
                    "top_k": {"type": "integer", "minimum": 1, "maximum": 20, "description": "how many (default 10)"},
                },
            },
        },
    },
    "search_messages": {
        "type": "function",
        "function": {
            "name": "search_messages",
            "description": "Search the conversation messages, best match first.",
            "parameters": {
                "type": "object",
                "additionalProperties": False,
                "required": ["query"],
                "properties": {
                    "query": {"type": "string", "description": "words to find"},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 20, "description": "how many (default 10)"},
                },
            },
        },
    },
}


class SchemaMismatch(BadAnswer):
    """The answer is not JSON valid against the request's response_format."""


class LLMChat:
    name = "llm"

    def __init__(self, llm: Model | None = None, *, max_input_tokens: int = 16_000, **options: Any):
        self.llm = llm or model_of(**options)  # options: the provider's (model, base_url, api_key, timeout, ...)
        self.max_input_tokens = max_input_tokens

    @classmethod
    def from_settings(cls, settings: Settings, **overrides: Any) -> LLMChat:
        max_input = overrides.pop("max_input_tokens", None) or getattr(settings, "llm_max_input_tokens", None) or 16_000
        return cls(
            model_from(settings, "chat", **({"time_budget": CHAT_TIME_BUDGET} | overrides)), max_input_tokens=max_input
        )

    @property
    def model(self) -> str:
        return self.llm.model

    def answer(self, request: ChatRequest, memory: Memory, gathered: Gathered) -> str | None:
        """The model's answer; EngineError (with a SchemaMismatch cause for a schema never met) when it fails."""
        deadline = self.llm.clock() + self.llm.time_budget
        who = (
            f"You speak for {request.observer}: what {request.observer} knows about {request.observed}."
            if request.observer
            else "You can see the whole workspace: every peer and session."
        )
        known = memory_text(request, gathered) or "(nothing remembered yet)"
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM.format(who=who)},
            {"role": "user", "content": f"<memory>\n{known}\n</memory>\n\nQuestion: {request.query}"},
        ]
        tools = [_TOOLS["search_conclusions"]] if memory.searches_conclusions else []
        tools.append(_TOOLS["search_messages"])
        run = {
            "search_conclusions": lambda a: _conclusions(memory, a),
            "search_messages": lambda a: _messages(memory, a),
        }
        for round_no in range(request.rounds + 1):
            offer = round_no < request.rounds and self._fits_another_round(messages, request)
            reply = self._ask(messages, request, tools if offer else None, deadline)
            calls = reply.tool_calls if offer else ()
            if not calls:
                return reply.text or None
            messages.append(
                {
                    "role": "assistant",
                    "content": reply.text or "",
                    "tool_calls": [
                        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                        for c in calls
                    ],
                }
            )
            for call in calls:
                messages.append(
                    {"role": "tool", "tool_call_id": call.id, "content": _run(memory, run, call.name, call.arguments)}
                )
        raise AssertionError("unreachable: the last round offers no tools")

    def _fits_another_round(self, messages: list[dict[str, Any]], request: ChatRequest) -> bool:
        """Whether two more tool results and the answer still fit the model's input budget."""
        spent = count_messages([{"role": m["role"], "content": m.get("content") or ""} for m in messages])
        return spent + 2 * TOOL_RESULT_TOKENS + request.answer_tokens <= self.max_input_tokens

    def _ask(
        self, messages: list[dict[str, Any]], request: ChatRequest, tools: list[dict[str, Any]] | None, deadline: float
    ) -> Reply:
        schema = request.response_format
        response_format = schema_prompt = None
        if schema is not None:  # structured output where the server supports it, else the schema in the prompt
            response_format = {
                "type": "json_schema",
                "json_schema": {"name": "answer", "schema": schema, "strict": False},
            }
            schema_prompt = (
                "Answer with one JSON object, and nothing else, valid against this JSON Schema:\n" + json.dumps(schema)
            )

        def attempt(timeout: float) -> Reply:
            reply = self.llm.complete(
                messages,
                max_tokens=request.answer_tokens,
                tools=tools,
                timeout=timeout,
                response_format=response_format,
                schema_prompt=schema_prompt,
            )
            if tools and reply.tool_calls:
                return reply
            text = reply.require_text()
            if schema is not None:
                problem = schema_problem(text, schema)
                if problem is not None:
                    raise SchemaMismatch(f"the answer does not match response_format: {problem}")
            return reply

        with meter.role("chat"):
            reply, _attempts = self.llm.retrying(attempt, max(0.001, deadline - self.llm.clock()))
        return reply


def _run(memory: Memory, run: dict[str, Callable[[dict[str, Any]], str]], name: str, arguments: str | None) -> str:
    """A tool's result as the model reads it; a call the model got wrong is answered with what was wrong."""
    try:
        args = json.loads(arguments or "{}")
    except ValueError:
        return f"error: the arguments are not JSON: {(arguments or '')[:80]!r}"
    if name not in run or not isinstance(args, dict):
        return f"error: no tool {name!r} takes these arguments; the tools are {', '.join(run)}"
    query = args.get("query")
    if not isinstance(query, str) or not query.strip():
        return "error: query: a non-empty string is required"
    memory.evidence.called(name, args)
    return run[name](args)


def _count(args: dict[str, Any], name: str) -> int:
    value = args.get(name)
    return max(1, min(20, value)) if isinstance(value, int) and not isinstance(value, bool) else 10


def _capped(lines: list[str], empty: str) -> str:
    kept, used = [], 0
    for line in lines:
        cost = count_text(line) + 1
        if used + cost > TOOL_RESULT_TOKENS:
            break
        kept.append(line)
        used += cost
    return "\n".join(kept) or empty


def _conclusions(memory: Memory, args: dict[str, Any]) -> str:
    found = memory.search_conclusions(args["query"], _count(args, "top_k"))
    return _capped([conclusion_line(c) for c in found], "no conclusions found")


def _messages(memory: Memory, args: dict[str, Any]) -> str:
    found = memory.search_messages(args["query"], _count(args, "limit"))
    return _capped([message_line(m) for m in found], "no messages found")
