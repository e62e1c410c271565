"""Request bodies of the v3 API (pydantic), with the limits the API contract pins."""

from __future__ import annotations

import json
import math
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints

ID_PATTERN = r"^[a-zA-Z0-9_-]+$"
ID_MAX = 100
MAX_BATCH = 100
METADATA_MAX_KEYS = 100
METADATA_MAX_DEPTH = 5
JSON_MAX_BYTES = 65_536  # metadata/configuration as JSON; with the inline body cap (config) an item stays under 400 KB

Id = Annotated[str, StringConstraints(min_length=1, max_length=ID_MAX, pattern=ID_PATTERN)]
SCOPE_ID_MAX = 506
ScopeId = Annotated[str, StringConstraints(min_length=1, max_length=SCOPE_ID_MAX, pattern=ID_PATTERN)]
MESSAGE_ID_PATTERN = r"^[a-zA-Z0-9_-]{1,64}$"


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


def _finite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    return True


def _check_metadata(value: dict[str, Any] | None) -> dict[str, Any] | None:
    if value is None:
        return value
    if len(value) > METADATA_MAX_KEYS:
        raise ValueError(f"metadata: at most {METADATA_MAX_KEYS} top-level keys, got {len(value)}")
    depth = _depth(value)
    if depth > METADATA_MAX_DEPTH:
        raise ValueError(f"metadata: nesting depth at most {METADATA_MAX_DEPTH}, got {depth}")
    if not _finite(value):
        raise ValueError("metadata: numbers must be finite (no NaN or Infinity)")
    size = len(json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass"))
    if size > JSON_MAX_BYTES:
        raise ValueError(f"metadata: at most {JSON_MAX_BYTES} bytes as JSON, got {size}")
    return value


def _check_configuration(value: dict[str, Any] | None) -> dict[str, Any] | None:
    if value is not None and len(json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")) > JSON_MAX_BYTES:
        raise ValueError(f"configuration: at most {JSON_MAX_BYTES} bytes as JSON")
    return value


Metadata = Annotated[dict[str, Any], AfterValidator(_check_metadata)]
Configuration = Annotated[dict[str, Any], AfterValidator(_check_configuration)]


class _Body(BaseModel):
    # Built on first use, not at import: the context function's cold start pays only for the bodies it validates.
    model_config = ConfigDict(extra="forbid", defer_build=True)


class PeerFlags(_Body):
    observe_me: bool | None = None
    observe_others: bool | None = None


class WorkspaceCreate(_Body):
    id: Id
    metadata: Metadata | None = None
    configuration: Configuration | None = None


class ResourceUpdate(_Body):
    metadata: Metadata | None = None
    configuration: Configuration | None = None


class PeerCreate(_Body):
    id: Id
    metadata: Metadata | None = None
    configuration: Configuration | None = None


class SessionCreate(_Body):
    id: Id
    metadata: Metadata | None = None
    configuration: Configuration | None = None
    peers: dict[Id, PeerFlags] | None = None
    scopes: list[ScopeId] | None = Field(None, max_length=100)


class MessageIn(_Body):
    content: str
    peer_id: Id
    metadata: Metadata | None = None
    configuration: dict[str, Any] | None = None  # sent by the SDK; no message-level settings yet
    created_at: datetime | None = None
    run_id: Id | None = None


class MessageBatch(_Body):
    messages: list[MessageIn] = Field(min_length=1, max_length=MAX_BATCH)


class MessageUpdate(_Body):
    metadata: Metadata


class ListBody(_Body):
    filters: dict[str, Any] | None = None


# ---------------------------------------------------------------- derived memory (MEMORY.md)

CONCLUSION_MAX_CHARS = 65_535


class ConclusionIn(_Body):
    content: Annotated[str, StringConstraints(min_length=1, max_length=CONCLUSION_MAX_CHARS)]
    observer_id: Id
    observed_id: Id
    session_id: Id | None = None


class ConclusionBatch(BaseModel):
    """`conclusions` (Honcho's key; `observations` accepted as an alias), 1-100 items."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, defer_build=True)
    conclusions: list[ConclusionIn] = Field(min_length=1, max_length=MAX_BATCH, alias="observations")


class ConclusionQuery(_Body):
    query: Annotated[str, StringConstraints(min_length=1, max_length=10_000)]
    top_k: int = Field(10, ge=1, le=100)
    distance: float | None = Field(None, ge=0, le=1)
    filters: dict[str, Any] | None = None


class PeerCard(_Body):
    peer_card: list[Any]


class RepresentationFilters(_Body):
    session_id: Id | list[Id] | dict[str, list[Id]] | None = None


class RepresentationQuery(_Body):
    """POST /peers/{p}/representation (MEMORY.md): Honcho's defaults are 25 conclusions, no most-frequent share."""

    session_id: Id | None = None
    target: Id | None = None
    search_query: Annotated[str, StringConstraints(min_length=1, max_length=10_000)] | None = None
    search_top_k: int | None = Field(None, ge=1, le=100)
    search_max_distance: float | None = Field(None, ge=0, le=1)
    include_most_frequent: bool = False
    max_conclusions: int = Field(25, ge=1, le=100)
    filters: RepresentationFilters | None = None
    scope: ScopeId | None = None



class ScopeCreate(_Body):
    id: ScopeId
    metadata: Metadata | None = None


class ScopeSessions(_Body):
    session_ids: list[Id] = Field(min_length=1, max_length=MAX_BATCH)


class SearchQuery(_Body):
    """POST …/search (MEMORY.md): the query, the message list's filters, 1-100 results."""

    query: Annotated[str, StringConstraints(min_length=1, max_length=10_000)]
    filters: dict[str, Any] | None = None
    limit: int = Field(10, ge=1, le=100)


class ChatQuery(_Body):
    """POST /peers/{p}/chat and POST /chat (MEMORY.md): a question to the memory. `scope` is one scope (its own view)
    or several (their sessions as an allowlist); `filters.session_id` is the SDK's `sessions` allowlist."""

    query: Annotated[str, StringConstraints(min_length=1, max_length=10_000)]
    session_id: Id | None = None
    target: Id | None = None
    filters: RepresentationFilters | None = None
    scope: ScopeId | Annotated[list[ScopeId], Field(min_length=1, max_length=10)] | None = None
    stream: bool = False
    reasoning_level: Literal["minimal", "low", "medium", "high", "max"] = "low"
    response_format: dict[str, Any] | None = None
    include_evidence: bool = False


class DreamRequest(_Body):
    """POST /schedule_dream (the SDK's schedule_dream): a dream of observer's collection about observed."""

    observer: Id
    observed: Id | None = None
    session_id: Id | None = None
    dream_type: Literal["omni"] = "omni"


# ---------------------------------------------------------------- file upload (issue 14)


def _json_text(value: Any) -> Any:
    """A form field holding JSON (the SDK sends metadata and configuration as `json.dumps` text)."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except RecursionError:
        raise ValueError("nests too deeply") from None
    except ValueError as exc:
        raise ValueError(f"not valid JSON ({exc})") from None


class UploadFields(_Body):
    """The form fields of `POST …/messages/upload` besides `file`; every message of the upload gets them."""

    peer_id: Id
    metadata: Annotated[Metadata | None, BeforeValidator(_json_text)] = None
    configuration: Annotated[Configuration | None, BeforeValidator(_json_text)] = None
    created_at: datetime | None = None
