"""A workspace's webhook endpoints as Honcho's routes manage them (get-or-create by URL, list, delete), plus a secret
per endpoint (Standard Webhooks' `whsec_…`, shown once) and its rotation with an overlap: callable without HTTP."""

from __future__ import annotations

import secrets
import time
from datetime import UTC, datetime
from typing import Any

from precis.errors import Invalid
from precis.store import webhook_deliveries, webhooks
from precis.store.db import Db
from precis.store.records import page
from precis.store.resources import require_workspace
from precis.store.webhooks import SecretEntry, WebhookItem
from precis.webhooks.event_types import EVENT_TYPES
from precis.webhooks.signing import new_secret

LOG_WINDOW = 500  # the delivery log's pages reach back this many deliveries: one Query, ~40 RRU at most
MAX_ENDPOINTS = 10  # Honcho's WEBHOOK.MAX_WORKSPACE_LIMIT: the 11th is a 409
ROTATION_OVERLAP_S = 24 * 3600  # the old secret still signs (beside the new) this long after a rotation
_NANOID = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_-"


def check_url(url: str) -> str:
    """`url` when it can be a webhook target (`targets.check_url`: https, or http to this machine under `make dev`'s
    setting; a host that is no private, loopback, link-local, metadata or reserved address literal); else Invalid
    (422) naming what is wrong. Hostnames are resolved at delivery, and refused there the same way."""
    from precis.settings import get_settings
    from precis.webhooks.targets import RefusedTarget
    from precis.webhooks.targets import check_url as check_target

    try:
        check_target(url, allow_http_local=get_settings().webhooks_allow_http_local)
    except RefusedTarget as exc:
        raise Invalid(f"url: {exc}") from None
    return url


def view(item: WebhookItem) -> dict[str, Any]:
    """Honcho's WebhookEndpoint: id, workspace_id, url, created_at (never a secret); then (ext) the event types it
    receives (None: every one) and whether it is disabled, since when and why."""
    return {
        "id": item["id"],
        "workspace_id": item["PK"].removeprefix("WS#"),
        "url": item["url"],
        "created_at": item["created_at"],
        "event_types": item.get("event_types"),
        "disabled": "disabled_at" in item,
        "disabled_at": item.get("disabled_at"),
        "disabled_reason": item.get("disabled_reason"),
    }


def check_event_types(event_types: list[str] | None) -> list[str] | None:
    """The event types an endpoint subscribes to, in EVENT_TYPES's order without repeats (None: every one); Invalid
    (422) naming one that Precis does not send."""
    if event_types is None:
        return None
    unknown = [t for t in event_types if t not in EVENT_TYPES]
    if unknown:
        raise Invalid(f"event_types: unknown event type {unknown[0]!r} (known: {', '.join(EVENT_TYPES)})")
    return [t for t in EVENT_TYPES if t in event_types]


def get_or_create(
    db: Db, workspace: str, url: str, event_types: list[str] | None = None
) -> tuple[dict[str, Any], bool]:
    """The endpoint of `url` (False) or a new one (True), whose answer alone carries its `secret` (ext). Registering
    a URL again re-enables its endpoint and, when `event_types` is given, replaces its subscription (empty: every
    type); absent, the subscription is kept."""
    wanted = check_event_types(event_types)
    secret = new_secret()
    endpoint_id = "".join(secrets.choice(_NANOID) for _ in range(21))
    item, created = webhooks.get_or_create(
        db, workspace, check_url(url), endpoint_id, secret, limit=MAX_ENDPOINTS, event_types=wanted or None
    )
    if created:
        return {**view(item), "secret": secret}, True
    types = item.get("event_types") if wanted is None else (wanted or None)
    if "disabled_at" in item or types != item.get("event_types"):  # else nothing to write: one GetItem
        item = webhooks.reregister(db, item, types)
    return view(item), False


def listed(db: Db, workspace: str, page_no: int = 1, size: int = 50) -> dict[str, Any]:
    """A Honcho page of the workspace's endpoints, oldest first (NotFound for a workspace that does not exist)."""
    require_workspace(db, workspace)
    return page([view(item) for item in webhooks.endpoints(db, workspace)], page_no, size)


def delivery_view(item: dict[str, Any]) -> dict[str, Any]:
    """One delivery of the log as the route answers it (ext)."""
    return {
        "id": item["id"],
        "event_type": item["event_type"],
        "status": item["status"],
        "attempts": int(item["attempts"]),
        "last_http_status": int(item["http_status"]) if item.get("http_status") is not None else None,
        "last_error": item.get("last_error"),
        "created_at": item["created_at"],
        "last_attempt_at": datetime.fromtimestamp(int(item["updated_at"]), UTC).isoformat().replace("+00:00", "Z"),
    }


def deliveries(db: Db, workspace: str, endpoint_id: str, page_no: int = 1, size: int = 50) -> dict[str, Any]:
    """A Honcho page of the endpoint's delivery log, newest first, over its latest LOG_WINDOW deliveries (the log keeps
    3 days); NotFound for an endpoint the workspace does not have."""
    webhooks.endpoint(db, workspace, endpoint_id)
    found = webhook_deliveries.deliveries(db, workspace, endpoint_id, limit=LOG_WINDOW)
    return page([delivery_view(item) for item in found], page_no, size)


def delete(db: Db, workspace: str, endpoint_id: str) -> None:
    webhooks.delete(db, workspace, endpoint_id)


def live_secrets(item: WebhookItem, now: int) -> list[str]:
    """The secrets a delivery at `now` is signed with: the current one, and the previous one until its overlap ends."""
    return [e["secret"] for e in item["secrets"] if e.get("expires_at", now + 1) > now]


def rotate(db: Db, workspace: str, endpoint_id: str, *, now: int | None = None) -> dict[str, Any]:
    """A new secret for the endpoint (returned once); the current one keeps signing beside it for
    ROTATION_OVERLAP_S. A rotation within an overlap ends the older secret's at once: two live secrets at most."""
    now = int(time.time()) if now is None else now
    item = webhooks.endpoint(db, workspace, endpoint_id)
    secret = new_secret()
    expires = now + ROTATION_OVERLAP_S
    current = [e for e in item["secrets"] if "expires_at" not in e]
    kept: list[SecretEntry] = [{"secret": secret}]
    kept += [{"secret": e["secret"], "expires_at": expires} for e in current]
    webhooks.replace_secrets(db, item, kept)
    return {**view(item), "secret": secret, "previous_secret_expires_at": expires}
