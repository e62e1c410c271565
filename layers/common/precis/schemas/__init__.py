"""Request bodies of the v3 API (pydantic), with the limits the API contract pins."""

from __future__ import annotations

import json
import math
import re
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

ID_PATTERN = r"^[a-zA-Z0-9_-]+$"
ID_MAX = 100
MAX_BATCH = 100
METADATA_MAX_KEYS = 100
METADATA_MAX_DEPTH = 5
JSON_MAX_BYTES = 65_536  # metadata/configuration as JSON; with the inline body cap (config) an item stays under 400 KB

Id = Annotated[str, StringConstraints(min_length=1, max_length=ID_MAX, pattern=ID_PATTERN)]


def is_id(value: object) -> bool:
    """Whether `value` is an id as `Id` takes one (1–ID_MAX characters of ID_PATTERN), checked outside a model."""
    return isinstance(value, str) and 1 <= len(value) <= ID_MAX and re.fullmatch(ID_PATTERN, value) is not None


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
    if (
        value is not None
        and len(json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")) > JSON_MAX_BYTES
    ):
        raise ValueError(f"configuration: at most {JSON_MAX_BYTES} bytes as JSON")
    return value


Metadata = Annotated[dict[str, Any], AfterValidator(_check_metadata)]
Configuration = Annotated[dict[str, Any], AfterValidator(_check_configuration)]


class Body(BaseModel):
    # Built on first use, not at import: the context function's cold start pays only for the bodies it validates.
    model_config = ConfigDict(extra="forbid", defer_build=True)


class ListBody(Body):
    filters: dict[str, Any] | None = None


# ---------------------------------------------------------------- derived memory (docs/design.md, "Derived memory")


class ConclusionQuery(Body):
    query: Annotated[str, StringConstraints(min_length=1, max_length=10_000)]
    top_k: int = Field(10, ge=1, le=100)
    distance: float | None = Field(None, ge=0, le=1)
    filters: dict[str, Any] | None = None


class RepresentationFilters(Body):
    session_id: Id | list[Id] | dict[str, list[Id]] | None = None


class RepresentationQuery(Body):
    """POST /peers/{p}/representation: Honcho's defaults are 25 conclusions, no most-frequent share (docs/design.md,
    "What the SDK sees")."""

    session_id: Id | None = None
    target: Id | None = None
    search_query: Annotated[str, StringConstraints(min_length=1, max_length=10_000)] | None = None
    search_top_k: int | None = Field(None, ge=1, le=100)
    search_max_distance: float | None = Field(None, ge=0, le=1)
    include_most_frequent: bool = False
    max_conclusions: int = Field(25, ge=1, le=100)
    filters: RepresentationFilters | None = None
    scope: ScopeId | None = None


class SearchQuery(Body):
    """POST …/search: the query, the message list's filters, 1-100 results (docs/design.md, "Derived memory")."""

    query: Annotated[str, StringConstraints(min_length=1, max_length=10_000)]
    filters: dict[str, Any] | None = None
    limit: int = Field(10, ge=1, le=100)
