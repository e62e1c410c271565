"""Session members on the table, and Honcho's get-or-create of a session with its peers (the session item, then its
members)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set
from typing import Any

from botocore.exceptions import ClientError

from precis.configuration import check_configuration, merge_configuration
from precis.errors import Conflict, NotFound
from precis.store import keys
from precis.store.db import (
    Db,
    batch_get,
    cancellation_codes,
    query_all,
    to_item,
    transact,
)
from precis.store.records import delete_keys, json_object, page, utcnow, write_batch
from precis.store.resources.items import (
    MemberItem,
    SessionItem,
    as_member,
    as_peer,
    as_session,
    changed_texts,
    peer_view,
    read_item,
    session_view,
    update_item,
)
from precis.store.resources.peers import ensure_peers, peer_session_ids
from precis.store.resources.sessions import create_session_item, require_session


def get_or_create_session(
    db: Db,
    ws: str,
    session_id: str,
    metadata: dict[str, Any] | None = None,
    configuration: dict[str, Any] | None = None,
    peers: dict[str, dict[str, Any]] | None = None,
) -> tuple[dict[str, Any], bool]:
    # One read for the workspace and the peers that exist already (an importer names the same two in every session):
    # only the others are created, instead of a create per peer that fails and a read after it.
    found = {i["SK"]: i for i in batch_get(db, [keys.workspace(ws), *(keys.peer(ws, p) for p in peers or {})])}
    if "WS" not in found:
        raise NotFound(f"workspace '{ws}' not found")
    workspace_configuration = json_object(found["WS"].get("configuration"))
    check_configuration(workspace_configuration, configuration)
    item, created = create_session_item(db, ws, session_id, metadata, configuration)
    if not created and (metadata is not None or configuration is not None):
        item = _update_existing_session(db, ws, item, metadata, configuration, workspace_configuration)
    if peers:
        add_members(
            db,
            ws,
            session_id,
            peers,
            {p for p in peers if keys.peer(ws, p)["SK"] in found},
            incarnation=item.get("incarnation"),
        )
    return session_view(item), created


def _update_existing_session(
    db: Db,
    ws: str,
    item: SessionItem,
    metadata: dict[str, Any] | None,
    configuration: dict[str, Any] | None,
    workspace_configuration: dict[str, Any],
) -> SessionItem:
    """Honcho's get-or-create of an existing session: `metadata` replaces the stored one, `configuration`'s keys are
    merged into the stored configuration. The merge is a read-modify-write, so it is conditioned on the configuration
    it read: a concurrent change is read again and merged into, never lost."""
    session_id = item["id"]
    for _ in range(5):
        stored = json_object(item.get("configuration"))
        merged = stored if configuration is None else merge_configuration(stored, configuration)
        if merged != stored:
            check_configuration(workspace_configuration, merged)
        changes = changed_texts(item, metadata, merged)
        if not changes:
            return item
        condition, values = ["attribute_not_exists(deleted_at)"], {}
        read: Mapping[str, Any] = item
        for name in ("incarnation", "configuration"):  # the same incarnation, still holding what was read
            if name in read:
                condition.append(f"{name} = :{name}")
                values[f":{name}"] = read[name]
            else:
                condition.append(f"attribute_not_exists({name})")
        updated = update_item(
            db, keys.session(ws, session_id), changes, condition=" AND ".join(condition), values=values
        )
        if updated is not None:
            return as_session(updated)
        fresh = read_item(db, keys.session(ws, session_id))
        if fresh is None or "deleted_at" in fresh:
            raise Conflict(f"session '{session_id}' was deleted while being updated; retry the request")
        item = as_session(fresh)
    raise Conflict(f"session '{session_id}': its configuration kept changing while being merged; retry the request")


def _member_flags(item: MemberItem) -> dict[str, bool]:
    return {"observe_me": item.get("observe_me", True), "observe_others": item.get("observe_others", False)}


def members(db: Db, ws: str, session_id: str) -> dict[str, MemberItem]:
    """The session's member items by peer id (strongly consistent: the deriver decides who observes from them)."""
    return {
        i["SK"].removeprefix("PEER#"): as_member(i)
        for i in query_all(
            db,
            KeyConditionExpression="PK = :pk AND begins_with(SK, :p)",
            ConsistentRead=True,
            ExpressionAttributeValues={":pk": {"S": keys.session_pk(ws, session_id)}, ":p": {"S": "PEER#"}},
        )
    }


def add_members(
    db: Db,
    ws: str,
    session_id: str,
    peers: dict[str, dict[str, Any]],
    known_peers: Set[str] = frozenset(),
    *,
    incarnation: str | None = None,
) -> None:
    """Make `peers` members (creating unknown peers); flags given here overwrite the stored ones.

    Each write is a transaction bound to the session's incarnation (read here unless given), so members never
    land in a session deleted meanwhile, nor in a newer one of the same id.
    """
    if incarnation is None:
        incarnation = require_session(db, ws, session_id)["incarnation"]
    ensure_peers(db, ws, peers, known_peers)
    now = utcnow()
    puts = []
    for peer_id, flags in peers.items():
        flags = {k: v for k, v in (flags or {}).items() if v is not None}
        # Only the flags given are stored: an unset observe_me falls back to the peer's configuration (deriver).
        puts.append(
            {**keys.member(ws, session_id, peer_id), "kind": "member", "peer_id": peer_id, "joined_at": now, **flags}
        )
        puts.append({**keys.peer_session(ws, peer_id, session_id), "kind": "peer_session", "session_id": session_id})
    live = {
        "ConditionCheck": {
            "TableName": db.table,
            "Key": to_item(keys.session(ws, session_id)),
            "ConditionExpression": "incarnation = :inc AND attribute_not_exists(deleted_at)",
            "ExpressionAttributeValues": {":inc": {"S": incarnation}},
        }
    }
    for start in range(0, len(puts), 98):  # 49 members (two items each) + the check: DynamoDB's 100-action limit
        try:
            transact(
                db, [*({"Put": {"TableName": db.table, "Item": to_item(i)}} for i in puts[start : start + 98]), live]
            )
        except ClientError as exc:
            if cancellation_codes(exc)[-1:] == ["ConditionalCheckFailed"]:
                raise NotFound(f"session '{session_id}' not found in workspace '{ws}'") from None
            raise


def remove_members(db: Db, ws: str, session_id: str, peer_ids: Iterable[str]) -> None:
    peer_ids = list(dict.fromkeys(peer_ids))
    # A peer that leaves keeps a note of the session (what it said there stays): erasing the peer reads it. Its
    # reverse in the session's partition lets the session's purge delete both.
    notes = [
        item
        for p in peer_ids
        for item in (
            {**keys.peer_left(ws, p, session_id), "session_id": session_id},
            {**keys.session_left(ws, session_id, p), "peer_id": p},
        )
    ]
    for start in range(0, len(notes), 24):
        write_batch(db, [{"PutRequest": {"Item": to_item(i)}} for i in notes[start : start + 24]])
    delete_keys(
        db, [k for p in peer_ids for k in (keys.member(ws, session_id, p), keys.peer_session(ws, p, session_id))]
    )


def set_members(
    db: Db, ws: str, session_id: str, peers: dict[str, dict[str, Any]], *, incarnation: str | None = None
) -> None:
    if incarnation is None:
        incarnation = require_session(db, ws, session_id)["incarnation"]
    current = members(db, ws, session_id)
    remove_members(db, ws, session_id, [p for p in current if p not in peers])
    add_members(db, ws, session_id, peers, incarnation=incarnation)


def list_members(db: Db, ws: str, session_id: str, page_no: int, size: int) -> dict[str, Any]:
    require_session(db, ws, session_id)
    ids = sorted(members(db, ws, session_id))
    peers = {p["id"]: as_peer(p) for p in batch_get(db, [keys.peer(ws, p) for p in ids])}
    return page([peer_view(peers[p]) for p in ids if p in peers], page_no, size)


def member_config(db: Db, ws: str, session_id: str, peer_id: str) -> dict[str, bool]:
    require_session(db, ws, session_id)
    item = read_item(db, keys.member(ws, session_id, peer_id))
    if item is None:
        raise NotFound(f"peer '{peer_id}' is not a member of session '{session_id}'")
    return _member_flags(as_member(item))


def set_member_config(db: Db, ws: str, session_id: str, peer_id: str, flags: dict[str, Any]) -> None:
    require_session(db, ws, session_id)
    if update_item(db, keys.member(ws, session_id, peer_id), flags) is None:
        raise NotFound(f"peer '{peer_id}' is not a member of session '{session_id}'")


def is_member(db: Db, ws: str, session_id: str, peer_id: str | None) -> bool:
    """Whether `peer_id` belongs to the live session (a deleted session's members linger until its purge)."""
    return session_id in PeerSessions(db, ws, peer_id).among([session_id])


class PeerSessions:
    """A peer's sessions as a key's reach reads them (precis.auth.Membership): nothing read until asked."""

    def __init__(self, db: Db, ws: str, peer: str | None):
        self.db, self.ws, self.peer = db, ws, peer

    def among(self, sessions: Iterable[str]) -> set[str]:
        """Those of `sessions` the peer belongs to and that are live (a deleted session's members linger until its
        purge): one BatchGetItem per 50 sessions, a member item and a session item each."""
        wanted = list(dict.fromkeys(sessions))
        if self.peer is None or not wanted:
            return set()
        asked = {s: (keys.member(self.ws, s, self.peer), keys.session(self.ws, s)) for s in wanted}
        found = {
            (i["PK"], i["SK"]): i
            for i in batch_get(self.db, [key for pair in asked.values() for key in pair], ("PK", "SK", "deleted_at"))
        }

        def live_member(member: dict[str, str], session: dict[str, str]) -> bool:
            item = found.get((session["PK"], session["SK"]))
            return (member["PK"], member["SK"]) in found and item is not None and "deleted_at" not in item

        return {s for s, (member, session) in asked.items() if live_member(member, session)}

    def joined(self) -> list[str]:
        """The sessions the peer has joined (one Query; a deleted session's id lingers until its purge)."""
        return peer_session_ids(self.db, self.ws, self.peer) if self.peer is not None else []
