"""Chat (Honcho's dialectic): answer a question from what an observer's memory holds about a peer.

The pure part: reasoning levels, what a chat may read (`Memory`, implemented by `precis.chat.recall`), the evidence
it collects, the answer's shapes (JSON and Server-Sent Events) and `response_format` checks. Engines answer:
`offline` lists the card and the conclusions nearest the query (no LLM), `llm` asks a model that may call search
tools for follow-up rounds. `get_chat_engine` imports an engine only when asked for it (`openai` costs ~0.7 s).
A chat is a read: nothing here or in its engines writes to memory.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from precis.errors import Invalid
from precis.llm import configured

if TYPE_CHECKING:
    from precis.settings import Settings

ReasoningLevel = Literal["minimal", "low", "medium", "high", "max"]
# Follow-up rounds in which the model may call search tools, after the first retrieval.
TOOL_ROUNDS: dict[str, int] = {"minimal": 0, "low": 1, "medium": 2, "high": 4, "max": 8}
# Tokens of memory read into the first prompt, and of the answer, by level.
MEMORY_TOKENS: dict[str, int] = {"minimal": 2_000, "low": 4_000, "medium": 6_000, "high": 8_000, "max": 8_000}
ANSWER_TOKENS: dict[str, int] = {"minimal": 250, "low": 1_000, "medium": 1_000, "high": 1_500, "max": 2_000}
TOOL_RESULT_TOKENS = 1_500  # one tool call's result, at most
CHAT_ENGINES = ("llm", "offline")

_CONCLUSION_FIELDS = ("id", "level", "content", "created_at", "session_id", "observer_id", "observed_id", "source_ids")
_MESSAGE_FIELDS = ("id", "session_id", "peer_id", "created_at")


@dataclass(frozen=True)
class ChatRequest:
    """A question to the memory: `observer`'s view of `observed`, or the whole workspace when observer is None."""

    query: str
    observer: str | None = None
    observed: str | None = None
    session_id: str | None = None
    reasoning_level: ReasoningLevel = "low"
    response_format: dict[str, Any] | None = None

    @property
    def rounds(self) -> int:
        return TOOL_ROUNDS[self.reasoning_level]

    @property
    def answer_tokens(self) -> int:
        return ANSWER_TOKENS[self.reasoning_level]


@dataclass
class Gathered:
    """The first retrieval: the card, the chosen conclusions (views), and with a session its summary and newest
    messages (views), each already within its share of the memory budget."""

    card: list[str] | None = None
    conclusions: list[dict[str, Any]] = field(default_factory=list)
    nearest: list[dict[str, Any]] = field(default_factory=list)  # the conclusions chosen as nearest the query
    summary: str | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Evidence:
    """What a chat read and the tools it called, collected as it reads (not reported by the model)."""

    conclusions: dict[str, dict[str, Any]] = field(default_factory=dict)
    messages: dict[str, dict[str, Any]] = field(default_factory=dict)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)

    def read_conclusions(self, views: list[dict[str, Any]]) -> None:
        for v in views:
            self.conclusions.setdefault(
                v["id"], {f: v.get(f) for f in _CONCLUSION_FIELDS} | {"source_ids": list(v.get("source_ids") or ())}
            )

    def read_messages(self, views: list[dict[str, Any]]) -> None:
        for v in views:
            self.messages.setdefault(v["id"], {f: v.get(f) for f in _MESSAGE_FIELDS})

    def called(self, tool_name: str, tool_input: dict[str, Any]) -> None:
        self.tool_calls.append({"tool_name": tool_name, "tool_input": tool_input})

    def view(self) -> dict[str, Any]:
        """What was read, within one Lambda answer: past it, the largest conclusions' contents are left out, marked
        `"content_omitted": true` (ext; `GET /conclusions/{id}` returns them), largest first."""
        return {
            "conclusions": _fitted_conclusions(list(self.conclusions.values())),
            "messages": list(self.messages.values()),
            "tool_calls": list(self.tool_calls),
            "reasoning_trace_id": None,
        }


def _fitted_conclusions(views: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from precis.sizes import ANSWER_BUDGET, framed_bytes, item_cost

    budget = ANSWER_BUDGET // 2  # the rest for the answer itself (at most a few thousand tokens) and the messages' ids
    costs = [item_cost(v) for v in views]
    raw, escaped = sum(c[0] for c in costs), sum(c[1] for c in costs)
    if framed_bytes(raw, escaped) <= budget:
        return views
    fitted = list(views)
    for at in sorted(range(len(views)), key=lambda i: -costs[i][0]):
        text_raw, text_escaped = item_cost(views[at].get("content") or "")
        fitted[at] = {**views[at], "content": "", "content_omitted": True}
        raw, escaped = raw - text_raw, escaped - text_escaped
        if framed_bytes(raw, escaped) <= budget:
            break
    return fitted


class Memory(Protocol):
    """What an engine may read. Every read is recorded in `evidence`."""

    evidence: Evidence
    searches_conclusions: bool  # False for a workspace chat: conclusions are searched per (observer, observed)

    def gather(self, query: str, budget: int) -> Gathered: ...

    def search_conclusions(self, query: str, top_k: int) -> list[dict[str, Any]]: ...

    def search_messages(self, query: str, limit: int) -> list[dict[str, Any]]: ...


class ChatEngine(Protocol):
    name: str

    def answer(self, request: ChatRequest, memory: Memory, gathered: Gathered) -> str | None: ...


def get_chat_engine(name: str, settings: Settings | None = None, **options: Any) -> ChatEngine:
    """The engine called `name`, configured from `settings` (precis.settings.Settings)."""
    if name == "offline":
        from precis.chat.offline import OfflineChat

        return OfflineChat()
    if name == "llm":
        from precis.chat.llm import LLMChat

        if settings is None:  # its model comes from them (it failed on None further in before)
            raise ValueError("chat engine 'llm': needs settings")

        return LLMChat.from_settings(settings, **options)
    raise ValueError(f"chat engine: must be one of {', '.join(CHAT_ENGINES)}, got {name!r}")


def chat_engine_name(settings: Settings) -> str:
    """`llm` when the chat role has a model (Bedrock, or an endpoint or key), else `offline` (chat works on the local
    stack with no LLM)."""
    return "llm" if configured(settings, "chat") else "offline"


# ---------------------------------------------------------------- the prompt's memory


def memory_text(request: ChatRequest, gathered: Gathered) -> str:
    """The first retrieval as the prompt shows it: tagged sections, only those with something in them."""
    parts = []
    if gathered.card:
        parts.append("<peer_card>\n" + "\n".join(gathered.card) + "\n</peer_card>")
    if gathered.conclusions:
        parts.append(
            "<conclusions>\n" + "\n".join(conclusion_line(c) for c in gathered.conclusions) + "\n</conclusions>"
        )
    if gathered.summary:
        parts.append(f"<session_summary>\n{gathered.summary}\n</session_summary>")
    if gathered.messages:
        parts.append(
            "<recent_messages>\n" + "\n".join(message_line(m) for m in gathered.messages) + "\n</recent_messages>"
        )
    return "\n\n".join(parts)


def conclusion_line(view: dict[str, Any]) -> str:
    line = f"- [{view['id']}] {view['content']}"
    return line + " (inferred)" if view.get("level") == "deductive" else line


def message_line(view: dict[str, Any]) -> str:
    return f"- [{str(view.get('created_at', ''))[:19]}] {view['peer_id']}: {view['content']}"


# ---------------------------------------------------------------- response_format


def check_response_format(schema: dict[str, Any] | None) -> None:
    """422 unless `schema` is a JSON Schema whose root is an object."""
    if schema is None:
        return
    from jsonschema import SchemaError, validators

    if schema.get("type") != "object":
        raise Invalid(f'response_format: the schema\'s root must have "type": "object", got {schema.get("type")!r}')
    try:
        validators.validator_for(schema).check_schema(schema)
    except SchemaError as exc:
        raise Invalid(f"response_format: not a valid JSON Schema: {exc.message}") from None


def schema_problem(text: str, schema: dict[str, Any]) -> str | None:
    """Why `text` is not a JSON document valid against `schema`; None when it is."""
    from jsonschema import validators

    try:
        document = json.loads(text)
    except ValueError as exc:
        return f"not JSON: {exc}"
    error = next(iter(validators.validator_for(schema)(schema).iter_errors(document)), None)
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "(root)"
    return f"at {where}: {error.message}"


# ---------------------------------------------------------------- the answer's shapes


def answer_body(content: str | None, evidence: Evidence | None) -> dict[str, Any]:
    body: dict[str, Any] = {"content": content}
    if evidence is not None:
        body["evidence"] = evidence.view()
    return body


_PIECE = re.compile(r"\S+\s*|\s+")


def pieces(text: str, words: int = 4) -> list[str]:
    """`text` in consecutive pieces of a few words that join back to it exactly."""
    tokens = _PIECE.findall(text)
    return ["".join(tokens[i : i + words]) for i in range(0, len(tokens), words)]


def sse_body(content: str | None, evidence: Evidence | None) -> str:
    """Honcho's Server-Sent Events: a `delta` event per piece, then `{"done": true}` (with the evidence); see
    docs/design.md, "What the SDK sees"."""
    events = [{"delta": {"content": piece}, "done": False} for piece in pieces(content or "")]
    final: dict[str, Any] = {"done": True}
    if evidence is not None:
        final["evidence"] = evidence.view()
    events.append(final)
    return "".join(f"data: {json.dumps(e, ensure_ascii=False, separators=(',', ':'))}\n\n" for e in events)
