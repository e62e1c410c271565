"""The bodies of the write routes (the ingest function's), kept apart from the package's face (`precis.schemas`) so
that the functions that only read (context, chat) build none of these classes on their cold start."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints, model_validator

from precis.schemas import MAX_BATCH, Body, Configuration, Id, Metadata, ScopeId, json_body


class PeerFlags(Body):
    observe_me: bool | None = None
    observe_others: bool | None = None


class WorkspaceCreate(Body):
    id: Id
    metadata: Metadata | None = None
    configuration: Configuration | None = None


class ResourceUpdate(Body):
    metadata: Metadata | None = None
    configuration: Configuration | None = None


class PeerCreate(Body):
    id: Id
    metadata: Metadata | None = None
    configuration: Configuration | None = None


class SessionCreate(Body):
    id: Id
    metadata: Metadata | None = None
    configuration: Configuration | None = None
    peers: dict[Id, PeerFlags] | None = None
    scopes: list[ScopeId] | None = Field(None, max_length=100)


class MessageIn(Body):
    content: str
    peer_id: Id
    metadata: Metadata | None = None
    configuration: dict[str, Any] | None = None  # sent by the SDK; no message-level settings yet
    created_at: datetime | None = None
    run_id: Id | None = None


class MessageBatch(Body):
    messages: list[MessageIn] = Field(min_length=1, max_length=MAX_BATCH)


class MessageUpdate(Body):
    metadata: Metadata


CONCLUSION_MAX_CHARS = 65_535


class ConclusionIn(Body):
    content: Annotated[str, StringConstraints(min_length=1, max_length=CONCLUSION_MAX_CHARS)]
    observer_id: Id
    observed_id: Id
    session_id: Id | None = None


class ConclusionBatch(BaseModel):
    """`conclusions` (Honcho's key; `observations` accepted as an alias), 1-100 items."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, defer_build=True)
    conclusions: list[ConclusionIn] = Field(min_length=1, max_length=MAX_BATCH, alias="observations")


class PeerCard(Body):
    peer_card: list[Any]


class ScopeCreate(Body):
    id: ScopeId
    metadata: Metadata | None = None


class WebhookCreate(Body):
    url: str = Field(description="where deliveries go: http(s), at most 2,048 characters")
    event_types: list[Annotated[str, StringConstraints(max_length=64)]] | None = Field(
        None,
        max_length=32,
        description="(ext) the event types this endpoint receives; absent or empty: every one. Registering the same "
        "URL again with event_types replaces them (absent: kept), and re-enables an endpoint that was disabled",
    )


class ExportSource(Body):
    workspace_id: Id
    export_id: str = Field(pattern=r"^[0-9a-f]{16}$", description="the export's id (16 hex digits)")


class ImportCreate(Body):
    """POST /imports (ext): what to import, one of an upload (from POST /imports/uploads, a file PUT to its url) or a
    finished export of a workspace the key may read."""

    upload_id: str | None = Field(default=None, pattern=r"^[0-9a-f]{16}$", description="an upload's id")
    export: ExportSource | None = None

    @model_validator(mode="after")
    def _one_source(self) -> ImportCreate:
        if (self.upload_id is None) == (self.export is None):
            raise ValueError("give one of upload_id and export")
        return self


class ScopeSessions(Body):
    session_ids: list[Id] = Field(min_length=1, max_length=MAX_BATCH)


class DreamRequest(Body):
    """POST /schedule_dream (the SDK's schedule_dream): a dream of observer's collection about observed."""

    observer: Id
    observed: Id | None = None
    session_id: Id | None = None
    dream_type: Literal["omni"] = "omni"


# ---------------------------------------------------------------- file upload (docs/design.md, "File upload")


def _json_text(value: Any) -> Any:
    """A form field holding JSON (the SDK sends metadata and configuration as `json.dumps` text), read as a JSON body
    is (json_body): JSON, not too deep, its text Unicode."""
    if not isinstance(value, str):
        return value
    try:
        return json_body.read(value, max_depth=json_body.MAX_DEPTH, root=())
    except json_body.Unreadable as exc:
        raise ValueError(exc.msg) from None
    except ValueError as exc:
        raise ValueError(f"not valid JSON ({exc})") from None


class UploadFields(Body):
    """The form fields of `POST …/messages/upload` besides `file`; every message of the upload gets them."""

    peer_id: Id
    metadata: Annotated[Metadata | None, BeforeValidator(_json_text)] = None
    configuration: Annotated[Configuration | None, BeforeValidator(_json_text)] = None
    created_at: datetime | None = None
