"""The events and their data (ids only, never message or conclusion text), each with an id derived from what caused
it: the same cause (a stream record replayed, a producer retried, two derivers racing) makes the same id, hence the
same delivery id (`webhooks.delivery.delivery_id`) and EventBridge detail id, which a receiver drops duplicates by."""

from __future__ import annotations

import base64
import hashlib
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from precis.webhooks.event_types import EVENT_TYPES


@dataclass(frozen=True)
class Event:
    id: str
    workspace: str
    type: str
    data: Mapping[str, Any] = field(hash=False)
    created: float  # epoch seconds: the envelope's `timestamp`


def event_id(*cause: object) -> str:
    """An event's id from the parts of its cause (strings, numbers, None): `evt_` and 22 base64url characters."""
    text = "\x1f".join("" if part is None else str(part) for part in cause)
    return "evt_" + base64.urlsafe_b64encode(hashlib.sha256(text.encode("utf-8")).digest()[:16]).decode().rstrip("=")


def _event(workspace: str, kind: str, data: dict[str, Any], cause: Iterable[object], now: float) -> Event:
    assert kind in EVENT_TYPES, kind
    return Event(event_id(workspace, kind, *cause), workspace, kind, {"workspace_id": workspace, **data}, now)


def queue_empty(
    workspace: str,
    queue_type: str,
    session_id: str,
    *,
    observed: str | None,
    incarnation: str | None,
    position: int,
    now: float,
) -> Event:
    """Honcho's `queue.empty`: a work unit caught up. `representation`: the (session, sender) unit, `observed` the
    sender and `observer` null (Honcho derives a sender's messages once for every observer, as Precis does);
    `summary`: the session's summaries, neither named. `position`: the cursor's seq (or the newest summary's) it caught
    up at, so each emptying has its own id, and the same emptying seen twice the same one."""
    data = {"queue_type": queue_type, "session_id": session_id, "observer": None, "observed": observed}
    return _event(workspace, "queue.empty", data, (queue_type, session_id, incarnation, observed, position), now)


def summary_created(
    workspace: str,
    session_id: str,
    *,
    summary_type: str,
    message_id: str,
    covers_seq: int,
    incarnation: str | None,
    now: float,
) -> Event:
    """(ext) A summary stored: its type and the last message it covers (`message_id`, as Honcho's Summary names it)."""
    data = {"session_id": session_id, "summary_type": summary_type, "message_id": message_id}
    return _event(workspace, "summary.created", data, (session_id, incarnation, summary_type, covers_seq), now)


def conclusions_created(
    workspace: str,
    *,
    session_id: str | None,
    observer: str,
    observed: str,
    conclusion_ids: list[str],
    cause: Iterable[object],
    now: float,
) -> Event:
    """(ext) Conclusions written into the (observer, observed) collection; `cause`: the write's own identity (a
    derivation job's token and chunks, or a request's conclusion ids)."""
    data = {"session_id": session_id, "observer": observer, "observed": observed, "conclusion_ids": conclusion_ids}
    return _event(workspace, "conclusions.created", data, (observer, observed, *cause), now)


def conclusions_deleted(
    workspace: str,
    *,
    observer: str,
    observed: str,
    conclusion_ids: list[str],
    session_id: str | None = None,
    cause: Iterable[object] | None = None,
    now: float,
) -> Event:
    """(ext) Conclusions removed from a collection (a delete request, or a dream that replaced them); `cause`, when
    the ids removed are not the cause (a message delete's cascade: the deleted message), names it instead."""
    data = {"session_id": session_id, "observer": observer, "observed": observed, "conclusion_ids": conclusion_ids}
    parts = tuple(cause) if cause is not None else tuple(sorted(conclusion_ids))
    return _event(workspace, "conclusions.deleted", data, (observer, observed, *parts), now)


def dream_completed(
    workspace: str, *, observer: str, observed: str, counts: Mapping[str, int], cause: Iterable[object], now: float
) -> Event:
    """(ext) A collection's dream finished: what it wrote and removed (`counts`)."""
    data = {"observer": observer, "observed": observed, **counts}
    return _event(workspace, "dream.completed", data, (observer, observed, *cause), now)


def session_deleted(workspace: str, session_id: str, *, incarnation: str | None, now: float) -> Event:
    """(ext) A session's delete accepted (its purge follows in the background)."""
    return _event(workspace, "session.deleted", {"session_id": session_id}, (session_id, incarnation), now)


def peer_deleted(workspace: str, erasure_id: str, *, started: str, counts: dict[str, int], now: float) -> Event:
    """(ext) A peer's erasure done: its id (`erasure_id`, the job's) and what it removed per kind. The peer is not
    named: an event is stored where it is delivered, and the erasure leaves nothing naming the peer. `started`: when the
    erasure began (a later erasure of a peer of the same id is another event)."""
    data = {"erasure_id": erasure_id, "counts": counts}
    return _event(workspace, "peer.deleted", data, (erasure_id, started), now)


def test_event(workspace: str, *, now: float) -> Event:
    """Honcho's `test.event` (data `{workspace_id}`): each request a new event."""
    return _event(workspace, "test.event", {}, (secrets.token_hex(8),), now)
