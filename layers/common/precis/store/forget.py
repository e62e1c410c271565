"""Deleting one message with everything drawn from it (docs/design.md, "Deleting a message").

The request does a bounded amount of work, whatever the session's size: one transaction replaces the message by a
tombstone at its seq, adds its id to the session's `forgetting` set (every read of conclusions leaves out those drawn
from it from then on), deletes the summaries that cover it, its vector and its text, marks the cards about its
sender (each reads as none) and the derive cursors not past it (a derivation that read it stores nothing). The stream
carries the tombstone to the summarizer, whose cascade removes the rest, idempotently and resumably: the conclusions
drawn from it, its place in the search index, its body in S3, the audit records of the summaries it removed; it
rebuilds the cards, then clears the mark under the summarizer's lease, and the session is summarized again.
"""

from __future__ import annotations

import math
import random
import secrets
import time
from collections.abc import Callable, Sequence
from typing import Any

from botocore.exceptions import ClientError

from precis.errors import Conflict, NotFound, Throttled
from precis.schemas.summary_settings import LONG, ROLLING, SHORT
from precis.store import conclusions, derive_cursors, keys, search
from precis.store.db import Db, batch_get, cancellation_codes, error_code, read_item, to_item, transact
from precis.store.messages import MessageItem, as_message, base_of, locate_message, seq_of
from precis.store.records import delete_keys, delete_versions, utcnow
from precis.store.resources import SessionItem, members, read_session_item, require_session
from precis.store.summaries import drop_summary_lease, read_summary_items, take_summary_lease

FORGETTING_MAX = 100  # deletes of one session whose cascade may run at once (the session item holds their ids)
# Messages one delete takes together (an erasure's or an expiry's): one transaction writes their tombstones, and one
# cascade removes what was drawn from them all (a transaction's action each, the tombstone; the rest shared; and no more
# than a session's deletes in progress leave room for, FORGETTING_MAX).
BATCH_MAX = 90
_ATTEMPTS = 8
_MAX_ACTIONS = 100  # DynamoDB's TransactWriteItems limit
_LEASE_S = 60.0
# What the tombstone keeps of the message: its place (seq, tokens, run), nothing the user wrote.
_PLACE = ("seq", "token_count", "start_tokens", "run_start_seq", "run_index", "run_id")

# The cascade's steps, in order; the tombstone's `forgot_step` says how many are done.
CONCLUSIONS, SEARCH, BODY, CARDS, SUMMARIES = 1, 2, 3, 4, 5


def forget_message(db: Db, ws: str, session_id: str, message_id: str) -> None:
    """Delete a message (NotFound when no live message has the id): from the moment this returns no read returns it or
    anything drawn from it; the stream's cascade removes the rest."""
    for attempt in range(_ATTEMPTS):
        session = require_session(db, ws, session_id)
        seq = seq_of(message_id)
        base = base_of(session)
        if base is not None and seq is not None and seq <= base.through:
            raise Conflict(
                f"session '{session_id}' is a clone still copying what it inherited; retry the delete in a few seconds"
            )
        item = locate_message(db, ws, session_id, message_id)
        if item.get("kind") != "message":
            raise NotFound(f"message '{message_id}' not found in session '{session_id}'")
        if len(session.get("forgetting") or ()) >= FORGETTING_MAX:
            raise Throttled(
                f"session '{session_id}' has {FORGETTING_MAX} message deletes still being carried out; retry shortly"
            )
        if _write(db, ws, session, [item]):
            return
        time.sleep(random.uniform(0, min(0.2, 0.01 * 2**attempt)))  # changed meanwhile: read again
    raise Throttled(f"session '{session_id}' is busy; retry the delete")


def forget_messages(
    db: Db, ws: str, session_id: str, items: Sequence[MessageItem], *, erasing: str | None = None
) -> int:
    """Delete live messages of one sender together (whole items as read, ascending seq): as `forget_message` deletes
    one, in one transaction with one cascade for them all (as many as it holds, at most BATCH_MAX, and no more than
    the session's `forgetting` set has room for); how many were taken from the front of `items` (each deleted now, or
    found deleted already). Raises Conflict (a clone still copying) and Throttled (the session's deletes in progress
    at their cap, or busy).

    `erasing`: the sender is being erased (`store.erase`), which deletes whole what it observes or is observed in: its
    cards are not marked (it reads as absent), and the cascade leaves those collections to the erasure."""
    front = list(items[:BATCH_MAX])
    batch = front  # as the caller read them (whole items): the transaction's conditions check each is still so
    for attempt in range(_ATTEMPTS):
        session = require_session(db, ws, session_id)
        base = base_of(session)
        if base is not None and any(int(i["seq"]) <= base.through for i in front):
            raise Conflict(f"session '{session_id}' is a clone still copying what it inherited")
        room = FORGETTING_MAX - len(session.get("forgetting") or ())
        if room <= 0:
            raise Throttled(f"session '{session_id}' has {FORGETTING_MAX} message deletes still being carried out")
        if attempt:  # something changed meanwhile: the ones still live, read again
            live = {
                int(i["seq"]): as_message(i)
                for i in batch_get(db, [keys.message(ws, session_id, int(i["seq"])) for i in front])
                if i.get("kind") == "message"
            }
            batch = [live[s] for s, i in ((int(i["seq"]), i) for i in front) if s in live and live[s]["id"] == i["id"]]
        if not batch:
            return len(front)  # every one deleted already
        written = _write(db, ws, session, batch[:room], erasing=erasing)
        if written:
            last = int(batch[written - 1]["seq"])
            return sum(1 for i in front if int(i["seq"]) <= last)
        time.sleep(random.uniform(0, min(0.2, 0.01 * 2**attempt)))
    raise Throttled(f"session '{session_id}' is busy; retry the delete")


def _write(db: Db, ws: str, session: SessionItem, items: Sequence[MessageItem], *, erasing: str | None = None) -> int:
    """One transaction deleting the front of `items` (live messages of one sender, ascending seq), as many as it
    holds; how many (0: something changed meanwhile, read again)."""
    session_id, sender, incarnation = session["id"], items[0]["peer_id"], session.get("incarnation")
    cards: list[tuple[str, dict[str, Any]]] = []
    if erasing is None:
        observers = sorted(set(members(db, ws, session_id)) | {sender})
        cards = conclusions.forget_card_actions(db, ws, observers, sender, items[0]["id"])
    summaries = _summary_deletes(db, ws, session_id, int(items[0]["seq"]))
    cursors = derive_cursors.forget_actions(db, ws, session_id, int(items[-1]["seq"]), sender)
    # An action a message (its tombstone), the session's mark and the shared ones; then the cards (a session of more
    # observers than the transaction holds: the rest are marked after it).
    fits = min(len(items), _MAX_ACTIONS - 1 - len(summaries) - len(cursors))
    if fits <= 0:  # (one cursor per sender not derived past it: only a session of very many senders behind)
        raise Throttled(f"session '{session_id}' has too many senders waiting for derivation; retry the delete")
    batch = items[:fits]
    if fits < len(items):  # (fewer cursors may be behind the batch's last: no more than were)
        cursors = derive_cursors.forget_actions(db, ws, session_id, int(batch[-1]["seq"]), sender)
    marked = sorted(observer for observer, _ in cards)
    units = search.message_units(db, ws, session_id, batch)
    actions = [
        *(
            _tombstone(db, ws, session_id, item, units[int(item["seq"])], incarnation, marked, batch, erasing)
            for item in batch
        ),
        _mark_session(db, ws, session_id, [i["id"] for i in batch], incarnation),
        *summaries,
        *cursors,
    ]
    room = _MAX_ACTIONS - len(actions)
    try:
        transact(db, actions + [action for _, action in cards[:room]])
    except ClientError as exc:
        if not cancellation_codes(exc):
            raise
        return 0
    for _, action in cards[room:]:  # a session with more observers than one transaction holds
        _update_quietly(db, action["Update"])
    # Their vectors and texts, after the tombstones (every search resolves a hit through its message item, which is a
    # tombstone from now on): outside the transaction, each costs its size once, not twice, and a batch takes 90
    # messages, not 30; the cascade deletes them again (a request cut short here leaves them to it).
    delete_keys(
        db,
        [
            k
            for i in batch
            for k in (keys.message_vector(ws, session_id, i["seq"]), keys.text_doc(ws, session_id, i["seq"]))
        ],
    )
    return len(batch)


def _tombstone(
    db: Db,
    ws: str,
    session_id: str,
    item: MessageItem,
    unit: str,
    incarnation: str | None,
    cards: list[str],
    batch: Sequence[MessageItem],
    erasing: str | None,
) -> dict[str, Any]:
    """The tombstone of `item`, one of `batch` deleted together: the first of them (the lead) runs the cascade for
    all and carries what it needs; each other names the lead."""
    lead = int(batch[0]["seq"])
    tombstone = {
        **keys.message(ws, session_id, item["seq"]),
        **{k: v for k, v in item.items() if k in _PLACE},
        "kind": "forgotten",
        "forgot": item["id"],
        "forgot_peer": item["peer_id"],
        "forgot_unit": unit,  # (the unit holding its text, which the cascade takes it out of)
        "forgot_body": item.get("body_key"),
        "forgot_at": utcnow(),
        "incarnation": incarnation,
    }
    if int(item["seq"]) == lead:
        tombstone |= {
            "running": utcnow(),  # while the cascade runs: its records reach the summarizer (precis.stream)
            "forgot_step": 0,
            "forgot_cards": cards,  # the observers whose cards about the sender were marked (the cascade clears each)
        }
        if len(batch) > 1:
            tombstone["forgot_batch"] = [int(i["seq"]) for i in batch[1:]]
        if erasing is not None:
            tombstone["forgot_erasing"] = erasing
    else:
        tombstone["forgot_lead"] = lead
    return {
        "Put": {
            "TableName": db.table,
            "Item": to_item(tombstone),
            "ConditionExpression": "id = :id AND kind = :message",
            "ExpressionAttributeValues": to_item({":id": item["id"], ":message": "message"}),
        }
    }


def _mark_session(db: Db, ws: str, session_id: str, message_ids: list[str], incarnation: str | None) -> dict[str, Any]:
    live = "incarnation = :inc" if incarnation else "attribute_not_exists(incarnation)"
    values: dict[str, Any] = {
        ":m": {"SS": message_ids},
        ":n": {"N": str(len(message_ids))},
        ":room": {"N": str(FORGETTING_MAX - len(message_ids))},
    }
    if incarnation:
        values[":inc"] = {"S": incarnation}
    return {
        "Update": {
            "TableName": db.table,
            "Key": to_item(keys.session(ws, session_id)),
            "UpdateExpression": "ADD forgetting :m, forgotten :n",
            "ConditionExpression": f"{live} AND attribute_not_exists(deleted_at) "
            "AND (attribute_not_exists(forgetting) OR size(forgetting) <= :room)",
            "ExpressionAttributeValues": values,
        }
    }


def _summary_deletes(db: Db, ws: str, session_id: str, seq: int) -> list[dict[str, Any]]:
    """Deletes of the summaries covering `seq` (each on the condition it still covers what was read) and of the short
    summaries' parts when one of them covers it (the long job then reads the messages, as it does without parts)."""
    state = read_summary_items(db, ws, session_id)
    actions = [
        {
            "Delete": {
                "TableName": db.table,
                "Key": to_item(keys.summary(ws, session_id, kind)),
                "ConditionExpression": "covers_seq = :c",
                "ExpressionAttributeValues": {":c": {"N": str(summary["covers_seq"])}},
            }
        }
        for kind, summary in sorted(state.summaries.items())
        if int(summary["covers_seq"]) >= seq
    ]
    actions += [
        {"Delete": {"TableName": db.table, "Key": to_item(keys.summary_parts(ws, session_id, kind))}}
        for kind, parts in sorted(state.parts.items())
        if any(int(p["covers_seq"]) >= seq for p in parts)
    ]
    return actions


def _update_quietly(db: Db, update: dict[str, Any]) -> None:
    """An UpdateItem whose failed condition means there is nothing to do."""
    try:
        db.client.update_item(**update)
    except ClientError as exc:
        if error_code(exc) != "ConditionalCheckFailedException":
            raise


# ---------------------------------------------------------------- the cascade (the summarizer's stream consumer)


def forget_cascade(
    db: Db,
    ws: str,
    session_id: str,
    seq: int,
    *,
    rebuild_card: Callable[[str, list[str]], tuple[list[str], dict[str, int]] | None],
    time_left: Callable[[], float] = lambda: math.inf,
    clock: Callable[[], float] = time.time,
    removed: Callable[[str, str, str, list[str]], None] | None = None,
) -> bool:
    """Remove what the delete of message `seq` (and of the others deleted with it, when it leads a batch) left to the
    stream, from the step its tombstone says on; whether it is done (False: out of time, or the summarizer busy; the
    caller touches the tombstone and the next record goes on). Idempotent: a replayed or reordered record finds the
    steps done, or the tombstone gone with its session. `removed(message_id, observer, observed, ids)` is told each
    collection's conclusions once they are removed (`message_id`: the lead's)."""
    tomb = _read_tombstone(db, ws, session_id, seq)
    if tomb is None or tomb.get("forgot_done") or "forgot_lead" in tomb:
        return True  # done already, the session purged or created again, or not a lead: nothing of it is left here
    session = read_session_item(db, ws, session_id)
    if session is None or "deleted_at" in session or session.get("incarnation") != tomb.get("incarnation"):
        return True  # the session's purge removes everything, this included
    batch = _batch(db, ws, session_id, tomb)
    message_id, sender, step = tomb["forgot"], tomb["forgot_peer"], int(tomb.get("forgot_step", 0))
    erasing = tomb.get("forgot_erasing")
    if step < CONCLUSIONS:
        found = {
            collection: ids
            for collection, ids in conclusions.message_conclusions(
                db, ws, session_id, [t["forgot"] for t in batch]
            ).items()
            if erasing not in collection  # (the erasure deletes those whole)
        }
        # The collections that lose conclusions, noted first: their cards are rebuilt, the others' only unmarked.
        _note_lost(db, ws, session_id, seq, sorted({observer for observer, _ in found}))
        for (observer, observed), ids in found.items():
            if time_left() < 0:
                return False
            # The deductions drawn from them first: a cascade stopped between the two finds the premises again.
            deduced: list[str] = []
            conclusions.remove_deductions(db, ws, observer, observed, set(ids), deduced)
            conclusions.remove_conclusions(db, ws, observer, observed, ids)
            if removed is not None:
                removed(message_id, observer, observed, [*ids, *deduced])
        step = _step(db, ws, session_id, seq, CONCLUSIONS)
        tomb = _read_tombstone(db, ws, session_id, seq) or tomb
    if step < SEARCH:
        units = {int(t["seq"]): t["forgot_unit"] for t in batch}
        # An erasure rewrites the segments once per page of a session it is done with (store.erase.vacuum_page),
        # not once a batch.
        if not search.forget_messages(db, ws, session_id, units, time_left=time_left, vacuum=erasing is None):
            return False
        step = _step(db, ws, session_id, seq, SEARCH)
    if step < BODY:
        for t in batch:
            if t.get("forgot_body"):
                delete_versions(db, t["forgot_body"], exact=True)
        step = _step(db, ws, session_id, seq, BODY)
    if step < CARDS:
        lost, marked = set(tomb.get("forgot_lost") or ()), set(tomb.get("forgot_cards") or ())
        for observer in sorted(marked | lost):
            rebuild = rebuild_card if observer in lost else None
            if not any(
                conclusions.rebuild_card(db, ws, observer, sender, message_id, rebuild, marked=observer in marked)
                for _ in range(_ATTEMPTS)
            ):
                raise Throttled(f"the card of '{observer}' about '{sender}' kept changing while being rebuilt")
        step = _step(db, ws, session_id, seq, CARDS)
    # Last, under the summarizer's lease: no summary job that read the messages is still running, so no summary or
    # audit record of them can come after the audit records are deleted and the mark cleared.
    owner = secrets.token_hex(8)
    if not take_summary_lease(db, ws, session_id, owner=owner, until=clock() + _LEASE_S, clock=clock):
        return False
    try:
        incarnation = session.get("incarnation") or "_"
        for kind in (SHORT, LONG, ROLLING):
            prefix = f"{keys.audit_prefix(ws, session_id, incarnation)}{kind}/"
            delete_versions(db, prefix, after=f"{prefix}{seq - 1:0{keys.SEQ_DIGITS}d}~")
        _finish(db, ws, session_id, batch)
    finally:
        # Let go even when marked: a summarizer that found it held marked it to summarize again, which the caller
        # does next (released only unmarked, the lease would be held its full term and every other cascade of the
        # session, as an expiry's several, would wait it out).
        drop_summary_lease(db, ws, session_id, owner=owner)
    return True


def _batch(db: Db, ws: str, session_id: str, lead: dict[str, Any]) -> list[dict[str, Any]]:
    """The tombstones a lead's cascade is for: its own and those deleted with it (one BatchGetItem), ascending seq.
    Each of the others is written in the lead's transaction and finished with it, so each is found while it runs."""
    others = [keys.message(ws, session_id, int(s)) for s in lead.get("forgot_batch") or ()]
    found = [t for t in batch_get(db, others) if t.get("kind") == "forgotten" and "forgot_done" not in t]
    return sorted([lead, *found], key=lambda t: int(t["seq"]))


def touch(db: Db, ws: str, session_id: str, seq: int) -> None:
    """Write the tombstone again (a round counted), so its next stream record goes on with the cascade."""
    _update_quietly(
        db,
        {
            "TableName": db.table,
            "Key": to_item(keys.message(ws, session_id, seq)),
            "UpdateExpression": "ADD forgot_rounds :one",
            "ConditionExpression": "kind = :k AND attribute_not_exists(forgot_done)",
            "ExpressionAttributeValues": to_item({":one": 1, ":k": "forgotten"}),
        },
    )


def _read_tombstone(db: Db, ws: str, session_id: str, seq: int) -> dict[str, Any] | None:
    item = read_item(db, keys.message(ws, session_id, seq))
    return item if item is not None and item.get("kind") == "forgotten" else None


def _step(db: Db, ws: str, session_id: str, seq: int, step: int) -> int:
    """Note on the tombstone that `step` is done (a later step never goes back); the step."""
    _update_quietly(
        db,
        {
            "TableName": db.table,
            "Key": to_item(keys.message(ws, session_id, seq)),
            "UpdateExpression": "SET forgot_step = :s",
            "ConditionExpression": "kind = :k AND forgot_step < :s",
            "ExpressionAttributeValues": to_item({":s": step, ":k": "forgotten"}),
        },
    )
    return step


def _note_lost(db: Db, ws: str, session_id: str, seq: int, observers: list[str]) -> None:
    """Add to the tombstone the observers whose collections about the sender lose conclusions."""
    if observers:
        _update_quietly(
            db,
            {
                "TableName": db.table,
                "Key": to_item(keys.message(ws, session_id, seq)),
                "UpdateExpression": "ADD forgot_lost :o",
                "ConditionExpression": "kind = :k",
                "ExpressionAttributeValues": {":o": {"SS": observers}, ":k": {"S": "forgotten"}},
            },
        )


def _finish(db: Db, ws: str, session_id: str, batch: list[dict[str, Any]]) -> None:
    """The cascade is done: each tombstone keeps only its place, and the session's mark goes (one transaction)."""
    place = ", ".join(f"#{i}" for i in range(len(_STRIP)))
    try:
        transact(
            db,
            [
                *(
                    {
                        "Update": {
                            "TableName": db.table,
                            "Key": to_item(keys.message(ws, session_id, int(t["seq"]))),
                            "UpdateExpression": f"SET forgot_done = :now REMOVE {place}",
                            "ConditionExpression": "kind = :k AND attribute_not_exists(forgot_done)",
                            "ExpressionAttributeNames": {f"#{i}": name for i, name in enumerate(_STRIP)},
                            "ExpressionAttributeValues": to_item({":now": utcnow(), ":k": "forgotten"}),
                        }
                    }
                    for t in batch
                ),
                {
                    "Update": {
                        "TableName": db.table,
                        "Key": to_item(keys.session(ws, session_id)),
                        "UpdateExpression": "DELETE forgetting :m",
                        "ConditionExpression": "attribute_exists(PK)",
                        "ExpressionAttributeValues": {":m": {"SS": [t["forgot"] for t in batch]}},
                    }
                },
            ],
        )
    except ClientError as exc:
        if not cancellation_codes(exc):
            raise  # (cancelled: finished already by a replayed record, or the session is gone)


# What the tombstone no longer needs once the cascade is done: the message's id, sender, unit and body key.
_STRIP = (
    "running",
    "forgot_batch",
    "forgot_lead",
    "forgot_erasing",
    "forgot_peer",
    "forgot_unit",
    "forgot_body",
    "forgot_step",
    "forgot_rounds",
    "forgot_cards",
    "forgot_lost",
)
