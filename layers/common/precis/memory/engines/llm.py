"""The `llm` deriver: conclusions and peer cards from one chat completion against any OpenAI-compatible endpoint.

It asks the configured chat model, through the LLM seam (`precis.llm`: the same timeouts, retries with backoff, time
budget and error classes as every model call), for JSON: structured output with a strict schema where the server
supports it, else the JSON shape in the prompt, read from the text. An answer that is not that JSON (not JSON, the wrong
shape, an empty conclusion) is retried like a server error, then raised as a retryable EngineError; a refused request
(400, 401, 404) is final.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from precis.llm import BadAnswer, Model, meter, model_from, model_of
from precis.memory.cards import MAX_ENTRIES, MAX_ENTRY_CHARS, norm, validate_entries
from precis.memory.engines import DeriveRequest, SessionRequest
from precis.memory.engines.prompt import (
    CARD_FORMAT,
    DREAM_FORMAT,
    EXPLICIT_FORMAT,
    as_session_request,
    build_card_messages,
    build_dream_messages,
    build_session_messages,
)

if TYPE_CHECKING:
    from precis.settings import Settings

T = TypeVar("T")
CARD_MAX_TOKENS = MAX_ENTRIES * MAX_ENTRY_CHARS // 3  # a full card, with room for the JSON around it
DREAM_MAX_TOKENS = 2_000
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


class LLMDeriver:
    """Conclusions and cards from the configured chat model."""

    name = "llm"

    def __init__(self, llm: Model | None = None, **options: Any):
        self.llm = llm or model_of(**options)  # options: the provider's (model, base_url, api_key, timeout, ...)

    @classmethod
    def from_settings(cls, settings: Settings, model: str | None = None, **overrides: Any) -> LLMDeriver:
        """A deriver from precis.settings.Settings: `model`, else derive_model, else llm_model, else the default."""
        return cls(model_from(settings, "derive", model=model or getattr(settings, "derive_model", None), **overrides))

    @property
    def model(self) -> str:
        return self.llm.model

    def derive(self, request: DeriveRequest) -> list[str]:
        """The explicit conclusions about the observed peer, without repeats; raises EngineError."""
        return self.derive_session(as_session_request(request)).get(request.observed, [])

    def derive_session(self, request: SessionRequest) -> dict[str, list[str]]:
        """The explicit conclusions about each target peer, without repeats, from one request; raises EngineError."""
        if not request.messages or not request.peers:
            return {}

        def parse(answer: Any) -> dict[str, list[str]]:
            return _conclusions(answer, request.peers)

        return self._ask(build_session_messages(request), EXPLICIT_FORMAT, request.max_output_tokens, parse)

    def update_card(
        self, observed: str, card: list[str] | None, counts: dict[str, int], new: list[str]
    ) -> tuple[list[str], dict[str, int]] | None:
        """The card the model proposes from the old one and the new conclusions, validated; None when it holds
        nothing valid or nothing new. Counts are kept for the entries that stay."""
        if not new:
            return None
        entries = validate_entries(
            self._ask(build_card_messages(observed, card, new), CARD_FORMAT, CARD_MAX_TOKENS, _card, role="card")
        )
        if not entries or entries == (card or []):
            return None
        return entries, {entry: counts[entry] for entry in entries if entry in counts}

    def dream(self, observed: str, premises: list[dict[str, str]], known: list[str]) -> list[dict[str, Any]]:
        """Deductive conclusions with the ids of their premises (`source_ids`), without repeats."""
        messages = build_dream_messages(observed, premises, known)
        return self._ask(messages, DREAM_FORMAT, DREAM_MAX_TOKENS, _deductions, role="dream")

    def refresh_card(
        self, observed: str, card: list[str] | None, counts: dict[str, int], conclusions: list[str]
    ) -> tuple[list[str], dict[str, int]] | None:
        """The card the model proposes from the old one and the collection's conclusions."""
        return self.update_card(observed, card, counts, conclusions)

    def _ask(
        self,
        messages: list[dict[str, str]],
        response_format: dict[str, Any],
        max_tokens: int,
        parse: Callable[[Any], T],
        role: str = "derive",
    ) -> T:
        """One answer parsed by `parse`, retried as every model call is (a bad answer like a 5xx). Where the server
        refuses structured output the prompt, which asks for the same JSON shape, is sent without it. Its tokens
        count as `role`'s (precis.llm.meter)."""

        def attempt(timeout: float) -> T:
            reply = self.llm.complete(messages, max_tokens=max_tokens, response_format=response_format, timeout=timeout)
            return parse(_json_of(reply.require_text()))

        with meter.role(role):
            answer, _attempts = self.llm.retrying(attempt, self.llm.time_budget)
        return answer


def _json_of(text: str) -> Any:
    """The JSON in an answer: the whole text, a fenced block, or the outermost {...} of a chatty answer."""
    fenced = _FENCE.match(text)
    body = fenced.group(1) if fenced else text
    start, end = body.find("{"), body.rfind("}")
    for candidate in (body, body[start : end + 1] if 0 <= start < end else None):
        if candidate is not None:
            try:
                return json.loads(candidate)
            except ValueError:
                continue
    raise BadAnswer(f"answer is not JSON: {text[:80]!r}")


def _conclusions(answer: Any, peers: tuple[str, ...]) -> dict[str, list[str]]:
    """Each target peer's conclusions. A conclusion names its peer (with one target peer, it is that peer's
    whatever it names); one that names none of the targets is the target's its text begins with (the instructions
    make the peer the subject), else dropped (a line of the context's sender)."""
    items = answer.get("explicit") if isinstance(answer, dict) else None
    if not isinstance(items, list):
        raise BadAnswer('answer without an "explicit" list')
    found: dict[str, dict[str, str]] = {peer: {} for peer in peers}
    for item in items:
        content = item.get("content") if isinstance(item, dict) else None
        if not isinstance(content, str) or not content.strip():
            raise BadAnswer(f"conclusion without content: {json.dumps(item)[:80]}")
        text = " ".join(content.split())
        named = item.get("peer")
        peer = peers[0] if len(peers) == 1 else named if isinstance(named, str) and named in found else None
        peer = peer or _subject(text, peers)  # unnamed (an answer without the schema): whom it is about
        if peer is None:
            continue
        found[peer].setdefault(norm(text), text)
    return {peer: list(texts.values()) for peer, texts in found.items() if texts}


def _subject(text: str, peers: tuple[str, ...]) -> str | None:
    """The target peer `text` begins with ("alice moved…", "alice's sister…"), the longest id first."""
    folded = norm(text)
    for peer in sorted(peers, key=len, reverse=True):
        if any(folded.startswith(norm(peer) + end) for end in (" ", "'", "’")):
            return peer
    return None


def _deductions(answer: Any) -> list[dict[str, Any]]:
    items = answer.get("deductive") if isinstance(answer, dict) else None
    if not isinstance(items, list):
        raise BadAnswer('answer without a "deductive" list')
    found: dict[str, dict[str, Any]] = {}
    for item in items:
        content = item.get("content") if isinstance(item, dict) else None
        premises = item.get("premises") if isinstance(item, dict) else None
        if not isinstance(content, str) or not content.strip() or not isinstance(premises, list):
            raise BadAnswer(f"deduction without content or premises: {json.dumps(item)[:80]}")
        text = " ".join(content.split())
        found.setdefault(norm(text), {"content": text, "source_ids": [p for p in premises if isinstance(p, str)]})
    return list(found.values())


def _card(answer: Any) -> list[str]:
    entries = answer.get("peer_card") if isinstance(answer, dict) else None
    if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
        raise BadAnswer('answer without a "peer_card" list of strings')
    return entries
