"""The body of POST /peers/{p}/chat and POST /chat, apart from precis.schemas: only the chat function builds it."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints

from precis.schemas import Body, Id, RepresentationFilters, ScopeId


class ChatQuery(Body):
    """POST /peers/{p}/chat and POST /chat (docs/design.md, "What the SDK sees"): a question to the memory. `scope`
    is one scope (its own view) or several (their sessions as an allowlist); `filters.session_id` is the SDK's
    `sessions` allowlist."""

    query: Annotated[str, StringConstraints(min_length=1, max_length=10_000)]
    session_id: Id | None = None
    target: Id | None = None
    filters: RepresentationFilters | None = None
    scope: ScopeId | Annotated[list[ScopeId], Field(min_length=1, max_length=10)] | None = None
    stream: bool = False
    reasoning_level: Literal["minimal", "low", "medium", "high", "max"] = "low"
    response_format: dict[str, Any] | None = None
    include_evidence: bool = False
