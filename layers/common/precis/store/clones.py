"""Session clones: copy-on-write over the parent's messages, complete for every read the moment the clone exists.

A clone of session P at message N is a new session (new id, P's peers and their session configs, metadata and
configuration) whose messages 1..N are P's: seqs, ids and start_tokens agree, so every read routes by seq. The request
writes a handful of items, whatever N: the clone's session item naming its base (`base_session` = P, `base_through`
= N, `base_incarnation`), P's summaries that cover only messages up to N, a copy of message N (the clone's tail, so
appends continue from it), its members, and a reference in P's partition (`CLONE#{id}`). Reads take the clone's own
item of a seq when it has one and P's otherwise (`messages.Base`).

The stream then copies 1..N into the clone's partition in the background (`copy_base`, run by the summarizer's
consumer: pages of conditional puts bound to the clone's incarnation, resumable, never overwriting a copy a metadata
edit made), with the message vectors and large bodies, and drops the base when done. P's purge waits while a clone
still reads from it; the copy's end restarts that purge. So deleting P never breaks a clone, and a clone's reads cost
what an ordinary session's cost once its copy is done. The clone derives from N+1 on (`derive_from`): what it
inherited was derived in P.
"""

from __future__ import annotations

import json
import math
import secrets
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from botocore.exceptions import ClientError

from precis.errors import Conflict, NotFound
from precis.store import keys, retention, search
from precis.store.db import Db, cancellation_codes, error_code, from_item, query_all, to_item, transact
from precis.store.messages import as_message, base_of, copy_item, locate_message, read_tail, seq_of, with_bodies
from precis.store.records import json_object, utcnow
from precis.store.resources import (
    SessionItem,
    add_members,
    as_session,
    members,
    read_session_item,
    request_purge,
    require_session,
    session_values,
    session_view,
    workspace_open,
)

PAGE = 200  # messages per copy step
_TRANSACTION_ITEMS = 24  # conditional puts per transaction, with the clone's liveness check
_TRANSACTION_BYTES = 3_500_000
MARGIN_S = 10.0
_MEMBER_META = {"PK", "SK", "kind", "peer_id", "joined_at"}


def _new_id(parent: str) -> str:
    return f"{parent[:70]}-clone-{secrets.token_hex(6)}"


def clone_session(db: Db, ws: str, session_id: str, message_id: str | None = None) -> dict[str, Any]:
    """Clone `session_id` up to and including `message_id` (all of it when None); the new session's view."""
    parent = require_session(db, ws, session_id)
    if base_of(parent) is not None:
        raise Conflict(
            f"session '{session_id}' is a clone still being copied from '{parent['base_session']}'; "
            "clone it once that finishes (seconds for most sessions)"
        )
    if message_id is not None:
        through = seq_of(message_id) or 0
        locate_message(db, ws, session_id, message_id)  # 404 when the session has no such message
    else:
        through = read_tail(db, ws, session_id).seq
    new_id = _new_id(session_id)
    values = session_values(ws, new_id, json_object(parent.get("metadata")), json_object(parent.get("configuration")))
    values |= {"cloned_from": session_id, "derive_from": through + 1}
    actions: list[dict[str, Any]] = [
        workspace_open(db, ws),
        {
            "ConditionCheck": {
                "TableName": db.table,
                "Key": to_item(keys.session(ws, session_id)),
                "ConditionExpression": "incarnation = :inc AND attribute_not_exists(deleted_at)",
                "ExpressionAttributeValues": {":inc": {"S": parent["incarnation"]}},
            }
        },
    ]
    if through:
        values |= {"base_session": session_id, "base_through": through, "base_incarnation": parent["incarnation"]}
        last = from_item(
            db.client.get_item(
                TableName=db.table, Key=to_item(keys.message(ws, session_id, through)), ConsistentRead=True
            ).get("Item")
        )
        if last is None:
            raise NotFound(f"session '{session_id}' not found in workspace '{ws}'")  # deleted and purged meanwhile
        tail = copy_item(db, ws, new_id, values["incarnation"], as_message(last))
        summaries = [i for i in _summaries(db, ws, session_id) if int(i["covers_seq"]) <= through]
        puts = [
            tail,
            *({**s, **keys.summary(ws, new_id, s["summary_type"])} for s in summaries),
            {
                "PK": keys.session_pk(ws, session_id),
                "SK": f"CLONE#{new_id}",
                "kind": "clone_ref",
                "session_id": new_id,
                "created_at": utcnow(),
            },
        ]
        actions += [{"Put": {"TableName": db.table, "Item": to_item(p)}} for p in puts]
        if parent.get("expiry_day"):
            # Retention (store.retention): the copies keep their expiry; one marker at the parent's last expiry day
            # covers them all in the clone's own partition, and the clone's new messages mark their own days.
            values |= {"expiry_day": int(parent["expiry_day"]), "expiry_from": int(parent.get("expiry_from") or 1)}
            marker = retention.marker_item(ws, new_id, int(parent["expiry_day"]))
            actions.append({"Put": {"TableName": db.table, "Item": to_item(marker)}})
    session = {**keys.session(ws, new_id), **values}
    actions.append(
        {"Put": {"TableName": db.table, "Item": to_item(session), "ConditionExpression": "attribute_not_exists(PK)"}}
    )
    try:
        transact(db, actions)
    except ClientError as exc:
        codes = cancellation_codes(exc)
        if not codes:
            raise
        if codes[0] == "ConditionalCheckFailed":
            raise Conflict(f"workspace '{ws}' is being deleted") from None
        raise NotFound(f"session '{session_id}' not found in workspace '{ws}'") from None
    peers = {p: {k: v for k, v in m.items() if k not in _MEMBER_META} for p, m in members(db, ws, session_id).items()}
    if peers:
        add_members(db, ws, new_id, peers, known_peers=set(peers), incarnation=values["incarnation"])
    return session_view(as_session(session))


def _summaries(db: Db, ws: str, session_id: str) -> list[dict[str, Any]]:
    items = query_all(
        db,
        KeyConditionExpression="PK = :pk AND begins_with(SK, :s)",
        ConsistentRead=True,
        ExpressionAttributeValues=to_item({":pk": keys.session_pk(ws, session_id), ":s": "SUMMARY#"}),
    )
    # A finished summary only: a step of a job in progress belongs to the parent's summarizer.
    return [{k: v for k, v in i.items() if not k.startswith("job_")} for i in items if i.get("kind") == "summary"]


# ---------------------------------------------------------------- the background copy


def copy_base(db: Db, ws: str, session_id: str, *, time_left: Callable[[], float] = lambda: math.inf) -> bool:
    """Copy the clone's inherited messages (with vectors and bodies) into its partition, from where the last step
    stopped; drop its base when done and restart its parent's purge if one waits. Whether it is done."""
    session = read_session_item(db, ws, session_id)
    base = base_of(session)  # None for a missing session too
    if session is None or base is None or "deleted_at" in session:
        return True  # done already, or deleted (its purge removes what was copied)
    copied = int(session.get("copied_through", 0))

    while copied < base.through:
        if time_left() < MARGIN_S:
            _progress(db, ws, session_id, session, copied)  # a MODIFY: the next invocation goes on from here
            return False
        last = min(copied + PAGE, base.through)
        _copy_page(db, ws, session_id, session["incarnation"], base.session, copied + 1, last)
        copied = last
    _finish(db, ws, session_id, session)
    return True


def _copy_page(db: Db, ws: str, clone: str, incarnation: str, parent: str, first: int, last: int) -> None:
    def range_query(pk: str, prefix: str, fields: str | None = None) -> list[dict[str, Any]]:
        request: dict[str, Any] = {
            "KeyConditionExpression": "PK = :pk AND SK BETWEEN :a AND :b",
            "ConsistentRead": True,
            "ExpressionAttributeValues": to_item(
                {":pk": pk, ":a": f"{prefix}{first:0{keys.SEQ_DIGITS}d}", ":b": f"{prefix}{last:0{keys.SEQ_DIGITS}d}"}
            ),
        }
        if fields:
            request["ProjectionExpression"] = fields
        return query_all(db, **request)

    have = {i["SK"] for i in range_query(keys.session_pk(ws, clone), "MSG#", "PK, SK")}
    messages = [
        as_message(i)
        for i in range_query(keys.session_pk(ws, parent), "MSG#")
        if i.get("kind") == "message" and i["SK"] not in have
    ]
    copies = [copy_item(db, ws, clone, incarnation, m) for m in messages]
    # A deleted message's tombstone keeps its seq and tokens in the clone too (its cascade is the parent's).
    place = ("seq", "token_count", "start_tokens", "run_start_seq", "run_index", "run_id")
    gaps: list[Mapping[str, Any]] = [
        {
            **{k: v for k, v in i.items() if k in place},
            **keys.message(ws, clone, int(i["seq"])),
            "kind": "forgotten",
            "forgot_done": utcnow(),
            "copy_of": parent,
        }
        for i in range_query(keys.session_pk(ws, parent), "MSG#")
        if i.get("kind") == "forgotten" and i["SK"] not in have
    ]
    vectors: list[Mapping[str, Any]] = [
        {**v, "PK": keys.message_vectors_pk(ws, clone), "msession": clone}
        for v in range_query(keys.message_vectors_pk(ws, parent), "MV#")
    ]
    _put_all(db, ws, clone, incarnation, [*copies, *gaps, *vectors])
    # The copies join the workspace's search as the clone's messages: the page is one index unit, named by its range
    # (all of it, copied now or before: a resumed copy indexes the same unit, exactly once).
    page = [as_message(i) for i in range_query(keys.session_pk(ws, parent), "MSG#") if i.get("kind") == "message"]
    texts = [
        search.Text(int(v["seq"]), v["peer_id"], v.get("content") or "") for v in with_bodies(db, page, ws, parent)
    ]
    search.index_batch(db, ws, clone, f"{clone}:{first}:copy{incarnation}", texts, incarnation=incarnation)


def _put_all(db: Db, ws: str, clone: str, incarnation: str, items: Sequence[Mapping[str, Any]]) -> None:
    """Conditional puts (a copy never replaces an item the clone already has) bound to the clone's incarnation, in
    transactions under DynamoDB's limits; a transaction refused for an item copied meanwhile goes item by item."""
    live = {
        "ConditionCheck": {
            "TableName": db.table,
            "Key": to_item(keys.session(ws, clone)),
            "ConditionExpression": "incarnation = :inc AND attribute_not_exists(deleted_at)",
            "ExpressionAttributeValues": {":inc": {"S": incarnation}},
        }
    }
    chunk: list[Mapping[str, Any]] = []
    size = 0
    for item in [*items, None]:
        weight = len(json.dumps(item, default=str)) if item is not None else 0
        if chunk and (item is None or len(chunk) == _TRANSACTION_ITEMS or size + weight > _TRANSACTION_BYTES):
            _put_chunk(db, chunk, live)
            chunk, size = [], 0
        if item is not None:
            chunk.append(item)
            size += weight


def _put_chunk(db: Db, chunk: list[Mapping[str, Any]], live: dict[str, Any]) -> None:
    def put(items: list[Mapping[str, Any]]) -> bool:
        """Whether the puts were written; False when one of the items exists (NotFound for a deleted clone)."""
        try:
            transact(
                db,
                [
                    *(
                        {
                            "Put": {
                                "TableName": db.table,
                                "Item": to_item(i),
                                "ConditionExpression": "attribute_not_exists(PK)",
                            }
                        }
                        for i in items
                    ),
                    live,
                ],
            )
            return True
        except ClientError as exc:
            codes = cancellation_codes(exc)
            if not codes:
                raise
            if codes[-1] == "ConditionalCheckFailed":
                raise NotFound("the clone was deleted while it was being copied") from None
            return False

    if not put(chunk):
        for item in chunk:  # one of them exists already (a metadata edit copied it, or a concurrent step)
            put([item])


def _progress(db: Db, ws: str, session_id: str, session: SessionItem, copied: int) -> None:
    # The round changes the item even when `copied` does not (a page whose index ran out of time): an update that
    # changes nothing writes no stream record, and the record is what continues the copy.
    try:
        db.client.update_item(
            TableName=db.table,
            Key=to_item(keys.session(ws, session_id)),
            UpdateExpression="SET copied_through = :c ADD copy_rounds :one",
            ConditionExpression="incarnation = :inc",
            ExpressionAttributeValues=to_item({":c": copied, ":inc": session["incarnation"], ":one": 1}),
        )
    except ClientError as exc:
        if error_code(exc) != "ConditionalCheckFailedException":
            raise


def _finish(db: Db, ws: str, session_id: str, session: SessionItem) -> None:
    try:
        db.client.update_item(
            TableName=db.table,
            Key=to_item(keys.session(ws, session_id)),
            UpdateExpression="SET copied_at = :now REMOVE base_session, base_through, base_incarnation, copied_through",
            ConditionExpression="incarnation = :inc",
            ExpressionAttributeValues=to_item({":now": utcnow(), ":inc": session["incarnation"]}),
        )
    except ClientError as exc:
        if error_code(exc) != "ConditionalCheckFailedException":
            raise
        return
    parent = read_session_item(db, ws, session["base_session"])
    if (
        parent
        and parent.get("incarnation") == session["base_incarnation"]
        and "deleted_at" in parent
        and not parent.get("purged_at")
    ):
        request_purge(db, ws, session["base_session"], parent["incarnation"])  # it waited for this copy
