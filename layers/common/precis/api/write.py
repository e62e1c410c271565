"""Write routes of the v3 API (served by the ingest function): workspaces, peers, sessions, messages, keys."""

import time
from datetime import UTC, datetime
from typing import Annotated

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body, Header, Query

from precis.api.answers import json_response
from precis.api.params import (
    ConclusionId,
    EndpointId,
    MessageId,
    OptionalId,
    OptionalMessageId,
    PeerId,
    ScopeIdPath,
    SessionId,
    WorkspaceId,
)
from precis.auth import mint_key
from precis.messages import upload
from precis.messages.ingest import create_messages
from precis.schemas import Id
from precis.schemas.bodies import (
    ConclusionBatch,
    DreamRequest,
    ImportCreate,
    MessageBatch,
    MessageUpdate,
    PeerCard,
    PeerCreate,
    PeerFlags,
    ResourceUpdate,
    ScopeCreate,
    ScopeSessions,
    SessionCreate,
    WebhookCreate,
    WorkspaceCreate,
)
from precis.secrets import jwt_secret
from precis.settings import get_settings
from precis.store import messages, resources
from precis.store.db import get_db

router = Router()


def _remaining_s() -> float:
    """Seconds left of this invocation (a claim on an Idempotency-Key lasts no longer, should the function die)."""
    context = getattr(router, "lambda_context", None)
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    return remaining() / 1000 + 1 if remaining else 30.0


def _created(view_and_flag):
    view, created = view_and_flag
    return json_response(201 if created else 200, view)


@router.post("/v3/workspaces")
def create_workspace(body: WorkspaceCreate):
    return _created(resources.get_or_create_workspace(get_db(), body.id, body.metadata, body.configuration))


@router.put("/v3/workspaces/<workspace_id>")
def update_workspace(workspace_id: WorkspaceId, body: ResourceUpdate):
    return resources.update_workspace(get_db(), workspace_id, body.metadata, body.configuration)


@router.delete("/v3/workspaces/<workspace_id>")
def delete_workspace(workspace_id: WorkspaceId):
    from precis.store import purge  # deletes set the purge in motion: loaded by the delete routes alone

    purge.delete_workspace(get_db(), workspace_id)
    return json_response(202, {"detail": f"workspace '{workspace_id}' deleted"})


@router.post("/v3/workspaces/<workspace_id>/peers")
def create_peer(workspace_id: WorkspaceId, body: PeerCreate):
    return _created(resources.get_or_create_peer(get_db(), workspace_id, body.id, body.metadata, body.configuration))


@router.put("/v3/workspaces/<workspace_id>/peers/<peer_id>")
def update_peer(workspace_id: WorkspaceId, peer_id: PeerId, body: ResourceUpdate):
    return resources.update_peer(get_db(), workspace_id, peer_id, body.metadata, body.configuration)


@router.post("/v3/workspaces/<workspace_id>/sessions")
def create_session(workspace_id: WorkspaceId, body: SessionCreate):
    peers = {p: flags.model_dump() for p, flags in (body.peers or {}).items()}
    db = get_db()
    if body.scopes:
        from precis.store import scopes

        for scope_id in dict.fromkeys(body.scopes):
            scopes.require(db, workspace_id, scope_id)  # before the session exists: nothing half-made
    answer = resources.get_or_create_session(db, workspace_id, body.id, body.metadata, body.configuration, peers)
    for scope_id in dict.fromkeys(body.scopes or ()):
        scopes.add_sessions(db, workspace_id, scope_id, [body.id])
    return _created(answer)


@router.put("/v3/workspaces/<workspace_id>/sessions/<session_id>")
def update_session(workspace_id: WorkspaceId, session_id: SessionId, body: ResourceUpdate):
    return resources.update_session(get_db(), workspace_id, session_id, body.metadata, body.configuration)


@router.delete("/v3/workspaces/<workspace_id>/sessions/<session_id>")
def delete_session(workspace_id: WorkspaceId, session_id: SessionId):
    from precis.events import publish_configured, session_deleted
    from precis.store import purge

    db = get_db()
    incarnation = purge.delete_session(db, workspace_id, session_id)
    # (ext) announced when the delete is accepted: the session answers 404 from now on; its purge follows
    publish_configured(db, [session_deleted(workspace_id, session_id, incarnation=incarnation, now=time.time())])
    return json_response(202, {"detail": f"session '{session_id}' deleted; its data is removed in the background"})


def _members_changed(workspace_id: str, session_id: str, change):
    """`change(db, incarnation)` on a live session (its writes bound to the incarnation read here), then the session."""
    db = get_db()
    change(db, resources.require_session(db, workspace_id, session_id)["incarnation"])
    return resources.session_view(resources.require_session(db, workspace_id, session_id))


@router.post("/v3/workspaces/<workspace_id>/sessions/<session_id>/peers")
def add_session_peers(workspace_id: WorkspaceId, session_id: SessionId, body: dict[Id, PeerFlags]):
    flags = {p: f.model_dump() for p, f in body.items()}
    return _members_changed(
        workspace_id,
        session_id,
        lambda db, incarnation: resources.add_members(db, workspace_id, session_id, flags, incarnation=incarnation),
    )


@router.put("/v3/workspaces/<workspace_id>/sessions/<session_id>/peers")
def set_session_peers(workspace_id: WorkspaceId, session_id: SessionId, body: dict[Id, PeerFlags]):
    flags = {p: f.model_dump() for p, f in body.items()}
    return _members_changed(
        workspace_id,
        session_id,
        lambda db, incarnation: resources.set_members(db, workspace_id, session_id, flags, incarnation=incarnation),
    )


@router.delete("/v3/workspaces/<workspace_id>/sessions/<session_id>/peers")
def remove_session_peers(
    workspace_id: WorkspaceId, session_id: SessionId, body: Annotated[list[Id], Body(max_length=100)]
):
    return _members_changed(
        workspace_id, session_id, lambda db, _: resources.remove_members(db, workspace_id, session_id, body)
    )


@router.put("/v3/workspaces/<workspace_id>/sessions/<session_id>/peers/<peer_id>/config")
def set_peer_config(workspace_id: WorkspaceId, session_id: SessionId, peer_id: PeerId, body: PeerFlags):
    flags = {k: v for k, v in body.model_dump().items() if v is not None}
    resources.set_member_config(get_db(), workspace_id, session_id, peer_id, flags)
    return json_response(204, None)


@router.post("/v3/workspaces/<workspace_id>/sessions/<session_id>/messages")
def create_session_messages(
    workspace_id: WorkspaceId,
    session_id: SessionId,
    body: MessageBatch,
    idempotency_key: Annotated[str | None, Header()] = None,
):
    status, views = create_messages(
        get_db(), get_settings(), workspace_id, session_id, body, idempotency_key, lease_s=_remaining_s()
    )
    return json_response(status, views)


@router.put("/v3/workspaces/<workspace_id>/sessions/<session_id>/messages/<message_id>")
def update_message(workspace_id: WorkspaceId, session_id: SessionId, message_id: MessageId, body: MessageUpdate):
    return messages.update_message_metadata(get_db(), workspace_id, session_id, message_id, body.metadata)


@router.delete("/v3/workspaces/<workspace_id>/sessions/<session_id>/messages/<message_id>")
def delete_message(workspace_id: WorkspaceId, session_id: SessionId, message_id: MessageId):
    """(ext) Delete a message and everything drawn from it (docs/design.md, "Deleting a message")."""
    from precis.store.forget import forget_message

    forget_message(get_db(), workspace_id, session_id, message_id)
    return json_response(204, None)


@router.delete("/v3/workspaces/<workspace_id>/peers/<peer_id>")
def erase_peer(workspace_id: WorkspaceId, peer_id: PeerId):
    """(ext) Erase a peer: everything it said, everything concluded about or by it, its membership and the peer
    (docs/design.md, "Erasing a peer"). 202 while the erasure runs, 200 with its receipt once done."""
    from precis.transfer import erase

    status, view = erase.start(get_db(), workspace_id, peer_id)
    return json_response(status, view)


@router.post("/v3/keys")
def create_key(
    workspace_id: OptionalId = None,
    peer_id: OptionalId = None,
    session_id: OptionalId = None,
    expires_at: Annotated[datetime | None, Query(description="ISO 8601; becomes the numeric exp")] = None,
):
    expires = None
    if expires_at is not None:
        expires = int((expires_at if expires_at.tzinfo else expires_at.replace(tzinfo=UTC)).timestamp())
    key = mint_key(
        jwt_secret(),
        workspace=workspace_id,
        peer=peer_id,
        session=session_id,
        expires=expires,
        admin=not (workspace_id or peer_id or session_id),
    )
    return {"key": key}


# ---------------------------------------------------------------- derived memory (docs/design.md, "Derived memory")


@router.post("/v3/workspaces/<workspace_id>/conclusions")
def create_conclusions(workspace_id: WorkspaceId, body: ConclusionBatch):
    from precis.memory import conclusions

    made = conclusions.state(get_db(), workspace_id, [c.model_dump() for c in body.conclusions])
    return json_response(201, made)


@router.delete("/v3/workspaces/<workspace_id>/conclusions/<conclusion_id>")
def delete_conclusion(workspace_id: WorkspaceId, conclusion_id: ConclusionId):
    from precis.memory import conclusions

    conclusions.delete(get_db(), workspace_id, conclusion_id)
    return json_response(204, None)


@router.put("/v3/workspaces/<workspace_id>/peers/<peer_id>/card")
def set_peer_card(workspace_id: WorkspaceId, peer_id: PeerId, body: PeerCard, target: OptionalId = None):
    from precis.memory.cards import check_client_card
    from precis.store import conclusions

    entries = check_client_card(body.peer_card)
    db = get_db()
    resources.require_peers(db, workspace_id, peer_id)  # the target need not exist yet (Honcho stores its card too)
    conclusions.put_card(db, workspace_id, peer_id, target or peer_id, entries, source="client")
    return {"peer_card": entries}


# ---------------------------------------------------------------- scopes (docs/design.md, "Derived memory", Scopes)


@router.post("/v3/workspaces/<workspace_id>/scopes")
def create_scope(workspace_id: WorkspaceId, body: ScopeCreate):
    from precis.store import scopes

    return _created(scopes.get_or_create(get_db(), workspace_id, body.id, body.metadata))


@router.post("/v3/workspaces/<workspace_id>/scopes/<scope_id>/sessions")
def add_scope_sessions(workspace_id: WorkspaceId, scope_id: ScopeIdPath, body: ScopeSessions):
    from precis.store import scopes

    scopes.add_sessions(get_db(), workspace_id, scope_id, body.session_ids)
    return json_response(204, None)


@router.delete("/v3/workspaces/<workspace_id>/scopes/<scope_id>/sessions/<session_id>")
def remove_scope_session(workspace_id: WorkspaceId, scope_id: ScopeIdPath, session_id: SessionId):
    from precis.store import scopes

    scopes.remove_session(get_db(), workspace_id, scope_id, session_id)
    return json_response(204, None)


# ---------------------------------------------------------------- dreams (docs/design.md, "Derived memory", Dreams)


@router.post("/v3/workspaces/<workspace_id>/schedule_dream")
def schedule_dream(workspace_id: WorkspaceId, body: DreamRequest):
    from precis.memory.dreams import DreamTarget, schedule

    db = get_db()
    resources.require_peers(db, workspace_id, body.observer, body.observed)
    if body.session_id is not None:
        resources.require_session(db, workspace_id, body.session_id)
    schedule(
        db, DreamTarget(workspace_id, body.observer, body.observed or body.observer), body.session_id, datetime.now(UTC)
    )
    return json_response(204, None)


@router.post("/v3/workspaces/<workspace_id>/sessions/<session_id>/clone")
def clone_session(workspace_id: WorkspaceId, session_id: SessionId, message_id: OptionalMessageId = None):
    from precis.store.clones import clone_session

    return json_response(201, clone_session(get_db(), workspace_id, session_id, message_id))


# ---------------------------------------------------------------- file upload (docs/design.md, "File upload")

_STORE_RESERVE_S = 5.0  # of the invocation's time, kept for storing the batch after reading the file


@router.post(
    "/v3/workspaces/<workspace_id>/sessions/<session_id>/messages/upload",
    # the body is a multipart form that precis.messages.upload reads (not Powertools): OpenAPI is told its
    # shape here
    openapi_extensions={"requestBody": upload.OPENAPI_BODY},
)
def upload_session_file(
    workspace_id: WorkspaceId, session_id: SessionId, idempotency_key: Annotated[str | None, Header()] = None
):
    event, db, settings = router.current_event, get_db(), get_settings()
    form = upload.read_form(event.body, event.is_base64_encoded, event.headers.get("content-type"))
    resources.require_session(db, workspace_id, session_id)
    batch = upload.to_batch(
        form, settings.max_message_chars, deadline=time.monotonic() + _remaining_s() - 1 - _STORE_RESERVE_S
    )
    status, views = create_messages(
        db, settings, workspace_id, session_id, batch, idempotency_key, lease_s=_remaining_s()
    )
    return json_response(status, views)


# Webhook endpoints (precis.webhooks.endpoints): Honcho's create and delete (its list is a read route), and the
# rotation of a secret (ext).
@router.post("/v3/workspaces/<workspace_id>/webhooks")
def create_webhook(workspace_id: WorkspaceId, body: WebhookCreate):
    from precis.webhooks import endpoints

    return _created(endpoints.get_or_create(get_db(), workspace_id, body.url, body.event_types))


@router.delete("/v3/workspaces/<workspace_id>/webhooks/<endpoint_id>")
def delete_webhook(workspace_id: WorkspaceId, endpoint_id: EndpointId):
    from precis.webhooks import endpoints

    endpoints.delete(get_db(), workspace_id, endpoint_id)
    return json_response(204, None)


# Honcho's test: a `test.event` to every enabled endpoint of the workspace; answers null, as Honcho does.
@router.get("/v3/workspaces/<workspace_id>/webhooks/test")
def test_webhooks(workspace_id: WorkspaceId):
    from precis.events import send_test

    send_test(get_db(), workspace_id, now=time.time())
    return json_response(200, "null")


@router.post("/v3/workspaces/<workspace_id>/webhooks/<endpoint_id>/rotate")
def rotate_webhook_secret(workspace_id: WorkspaceId, endpoint_id: EndpointId):
    from precis.webhooks import endpoints

    return endpoints.rotate(get_db(), workspace_id, endpoint_id)


# Export and import of a workspace (ext; precis.transfer): each starts a job that runs on the table's stream; its
# status is a read route (GET /exports/{id}, /imports/{id}).
@router.post("/v3/workspaces/<workspace_id>/exports")
def create_export(workspace_id: WorkspaceId):
    from precis.transfer import jobs

    return json_response(202, jobs.start_export(get_db(), workspace_id))


@router.post("/v3/workspaces/<workspace_id>/imports/uploads")
def create_import_upload(workspace_id: WorkspaceId):
    from precis.transfer import jobs

    return json_response(201, jobs.new_upload(get_db(), workspace_id))


@router.post("/v3/workspaces/<workspace_id>/imports")
def create_import(workspace_id: WorkspaceId, body: ImportCreate):
    from precis.api.caller import caller
    from precis.auth import Access, authorize
    from precis.transfer import jobs

    if body.export is None:
        return json_response(202, jobs.start_import(get_db(), workspace_id, upload_id=body.upload_id))
    source = body.export.workspace_id
    principal = caller()
    if principal is not None:  # an export is its workspace's data: the key must reach that workspace too
        authorize(principal, Access.WORKSPACE, workspace=source)
    return json_response(202, jobs.start_import(get_db(), workspace_id, export=(source, body.export.export_id)))
