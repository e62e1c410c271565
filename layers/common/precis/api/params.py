"""Typed path and query parameters shared by the API functions (validated by the resolver)."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.openapi.params import Path, Query

from precis.context.rules import MAX_CONTEXT_TOKENS
from precis.schemas import ID_MAX, ID_PATTERN, MESSAGE_ID_PATTERN

WorkspaceId = Annotated[str, Path(min_length=1, max_length=ID_MAX, pattern=ID_PATTERN)]
PeerId = Annotated[str, Path(min_length=1, max_length=ID_MAX, pattern=ID_PATTERN)]
SessionId = Annotated[str, Path(min_length=1, max_length=ID_MAX, pattern=ID_PATTERN)]
MessageId = Annotated[str, Path(pattern=MESSAGE_ID_PATTERN)]
ScopeIdPath = Annotated[str, Path(min_length=1, max_length=506, pattern=ID_PATTERN)]
OptionalScope = Annotated[str | None, Query(min_length=1, max_length=506, pattern=ID_PATTERN)]
ConclusionId = Annotated[str, Path(pattern=r"^[A-Za-z0-9_-]{21}$", description="a conclusion id (21 characters)")]
EndpointId = Annotated[str, Path(pattern=r"^[A-Za-z0-9_-]{21}$", description="a webhook endpoint id (21 characters)")]
JobId = Annotated[str, Path(pattern=r"^[0-9a-f]{16}$", description="an export's or import's id (16 hex digits)")]
PageNo = Annotated[int, Query(ge=1, le=10**9, description="page number, from 1")]
PageSize = Annotated[int, Query(ge=1, le=100, description="items per page, 1-100")]
Reverse = Annotated[bool, Query(description="newest first")]

Tokens = Annotated[
    int | None,
    Query(ge=1, le=MAX_CONTEXT_TOKENS, description=f"token limit of the whole context, 1-{MAX_CONTEXT_TOKENS}"),
]
OptionalId = Annotated[str | None, Query(min_length=1, max_length=ID_MAX, pattern=ID_PATTERN)]
SessionIds = Annotated[list[str] | None, Query(max_length=1000)]
TopK = Annotated[int | None, Query(ge=1, le=100)]
Distance = Annotated[float | None, Query(ge=0, le=1)]
MaxConclusions = Annotated[int | None, Query(ge=1, le=100)]
# Absent: the session's configuration.summarizer.whole_runs (over the workspace's and the deployment's default).
WholeRuns = Annotated[
    bool | None,
    Query(description="never return part of a run (ext); absent: the session's configuration.summarizer.whole_runs"),
]
OptionalMessageId = Annotated[str | None, Query(pattern=MESSAGE_ID_PATTERN)]
_DAY = r"^\d{4}-\d{2}-\d{2}$"
FromDay = Annotated[
    str | None, Query(alias="from", pattern=_DAY, description="the first day, YYYY-MM-DD (UTC); default: the month's")
]
ToDay = Annotated[str | None, Query(pattern=_DAY, description="the last day, YYYY-MM-DD (UTC); default: today")]
