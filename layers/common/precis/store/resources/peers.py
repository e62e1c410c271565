"""Peers on the table: their items and lists, and the sessions each has joined."""

from __future__ import annotations

from collections.abc import Iterable, Set
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from botocore.exceptions import ClientError

from precis.errors import Conflict, NotFound
from precis.store import filters as filtering
from precis.store import keys
from precis.store.db import (
    Db,
    batch_get,
    cancellation_codes,
    to_item,
    transact,
)
from precis.store.records import json_text, page, utcnow
from precis.store.resources.items import as_peer, changed_texts, page_of_ids, partition_items, peer_view, update_item
from precis.store.resources.workspaces import create_in_workspace, require_workspace, workspace_open


def require_peers(db: Db, ws: str, *peer_ids: str | None) -> None:
    """NotFound (404) naming the workspace or the first of `peer_ids` (None skipped) that does not exist: one read."""
    wanted = list(dict.fromkeys(p for p in peer_ids if p))
    # A peer being erased (`erasing`, docs/design.md "Erasing a peer") reads as absent from the moment it is marked.
    found = {
        i["SK"] for i in batch_get(db, [keys.workspace(ws), *(keys.peer(ws, p) for p in wanted)]) if "erasing" not in i
    }
    if "WS" not in found:
        raise NotFound(f"workspace '{ws}' not found")
    for peer_id in wanted:
        if f"PEER#{peer_id}" not in found:
            raise NotFound(f"peer '{peer_id}' not found in workspace '{ws}'")


def peer_exists(db: Db, ws: str, peer_id: str) -> bool:
    """Whether the peer exists: one batch read."""
    return any("erasing" not in i for i in batch_get(db, [keys.peer(ws, peer_id)]))


def peer_values(
    ws: str, peer_id: str, metadata: dict[str, Any] | None = None, configuration: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "kind": "peer",
        "id": peer_id,
        "workspace_id": ws,
        "metadata": json_text(metadata or {}),
        "configuration": json_text(configuration or {}),
        "created_at": utcnow(),
    }


def get_or_create_peer(
    db: Db, ws: str, peer_id: str, metadata: dict[str, Any] | None = None, configuration: dict[str, Any] | None = None
) -> tuple[dict[str, Any], bool]:
    """Get or create the peer; an existing one takes the `metadata` and `configuration` sent in place of its own
    (Honcho's get-or-create), written only when they differ."""
    key = keys.peer(ws, peer_id)
    item, created = create_in_workspace(db, ws, key, peer_values(ws, peer_id, metadata, configuration))
    refuse_erasing(item)
    changes = {} if created else changed_texts(item, metadata, configuration)
    if changes:
        updated = update_item(db, key, changes)
        if updated is None:  # only a workspace delete removes a peer
            raise Conflict(f"peer '{peer_id}' was deleted while being updated; retry the request")
        item = updated
    return peer_view(as_peer(item)), created


def refuse_erasing(item: dict[str, Any]) -> None:
    """Conflict (409) for a peer being erased: it is not made again, nor written, until its erasure is done."""
    if "erasing" in item:
        raise Conflict(f"peer '{item['id']}' is being erased; it can be created again once its erasure is done")


def ensure_peers(db: Db, ws: str, peer_ids: Iterable[str], known: Set[str] = frozenset()) -> None:
    """Create the peers of `peer_ids` that are not in `known` (already read) and do not exist.

    One transaction of conditional puts per 99 peers (plus the workspace check); if one was created meanwhile,
    peer by peer.
    """
    missing = [p for p in dict.fromkeys(peer_ids) if p not in known]
    for start in range(0, len(missing), 99):
        chunk = missing[start : start + 99]
        try:
            transact(
                db,
                [
                    *(
                        {
                            "Put": {
                                "TableName": db.table,
                                "Item": to_item({**keys.peer(ws, p), **peer_values(ws, p)}),
                                "ConditionExpression": "attribute_not_exists(PK)",
                            }
                        }
                        for p in chunk
                    ),
                    workspace_open(db, ws),
                ],
            )
        except ClientError as exc:
            codes = cancellation_codes(exc)
            if not codes:
                raise
            for peer_id in chunk:
                refuse_erasing(create_in_workspace(db, ws, keys.peer(ws, peer_id), peer_values(ws, peer_id))[0])


def update_peer(
    db: Db, ws: str, peer_id: str, metadata: dict[str, Any] | None = None, configuration: dict[str, Any] | None = None
) -> dict[str, Any]:
    if not peer_exists(db, ws, peer_id):
        raise NotFound(f"peer '{peer_id}' not found in workspace '{ws}'")
    item = update_item(
        db, keys.peer(ws, peer_id), {"metadata": json_text(metadata), "configuration": json_text(configuration)}
    )
    if item is None:
        raise NotFound(f"peer '{peer_id}' not found in workspace '{ws}'")
    return peer_view(as_peer(item))


def list_peers(
    db: Db, ws: str, filters: dict[str, Any] | None, page_no: int, size: int, reverse: bool
) -> dict[str, Any]:
    require_workspace(db, ws)
    if not filters:
        ids = [i["id"] for i in partition_items(db, f"WS#{ws}", "PEER#", ("id", "erasing")) if "erasing" not in i]
        return page_of_ids(db, ids, page_no, size, reverse, lambda p: keys.peer(ws, p), lambda i: peer_view(as_peer(i)))
    peers = (peer_view(as_peer(i)) for i in partition_items(db, f"WS#{ws}", "PEER#") if "erasing" not in i)
    views = [v for v in peers if filtering.matches(filters, v)]
    return page(views, page_no, size, reverse)


def peer_session_ids(db: Db, ws: str, peer_id: str) -> list[str]:
    """The ids of the sessions the peer has joined (a deleted session's id lingers until its purge)."""
    items = partition_items(db, keys.peer_sessions_pk(ws, peer_id), "SESSION#")
    return [i["SK"].removeprefix("SESSION#") for i in items]


_pool = ThreadPoolExecutor(max_workers=4)  # the membership reads of one request, side by side


def sessions_by_peer(db: Db, ws: str, peer_ids: Iterable[str]) -> dict[str, set[str]]:
    """The ids of the sessions each peer has joined (one Query a peer, side by side; deleted sessions' ids linger
    until their purge)."""
    peer_ids = list(dict.fromkeys(peer_ids))
    read = (map if len(peer_ids) <= 1 else _pool.map)(lambda p: peer_session_ids(db, ws, p), peer_ids)
    return {p: set(ids) for p, ids in zip(peer_ids, read, strict=True)}
