"""A session's expiry (docs/design.md, "Retention"): its expired messages deleted as a message delete does.

Woken by the deriver's stream consumer when the TTL service removes one of the session's expiry markers
(store.retention); a round that does not finish stores the session's running expiry item again, whose record goes on.
"""

from __future__ import annotations

from collections.abc import Callable

from botocore.exceptions import ClientError

from precis.errors import Conflict, Throttled
from precis.store import keys
from precis.store.db import Db, error_code, to_item
from precis.store.forget import forget_messages
from precis.store.messages import MessageItem, as_message
from precis.store.records import utcnow
from precis.store.resources import read_session_item
from precis.store.retention import RUN_SK, ExpiryTarget, expired, now, page


def expire_session(db: Db, ws: str, session_id: str, *, time_left: Callable[[], float] = lambda: float("inf")) -> bool:
    """Delete the session's expired messages (store.forget: each with everything drawn from it), from the session's
    `expiry_from` seq on, up to the first message not expired yet; whether done (False: out of time, or the session's
    deletes in progress at their cap: the running expiry item's next record goes on)."""
    session = read_session_item(db, ws, session_id)
    if session is None or "deleted_at" in session:
        return True  # its purge removes everything
    first = int(session.get("expiry_from") or 1)
    at = now()
    while True:
        items = page(db, ws, session_id, first, whole=True)  # (whole: each delete takes them as read)
        if not items:
            return True
        due: list[MessageItem] = []
        kept = None  # the first message not expired yet: the expiry stops there
        for item in items:
            if item.get("kind") == "message" and item.get("retain_until") is not None:
                if not expired(item, at):
                    kept = int(item["seq"])
                    break
                due.append(as_message(item))
        left = _forget(db, ws, session_id, due, time_left)
        if left is not None:
            _advance(db, ws, session_id, left)
            return False
        if kept is not None:
            _advance(db, ws, session_id, kept)
            return True
        first = int(items[-1]["seq"]) + 1
        _advance(db, ws, session_id, first)


def _forget(db: Db, ws: str, session_id: str, due: list[MessageItem], time_left: Callable[[], float]) -> int | None:
    """Delete the expired messages `due` (ascending seq), a batch per sender at a time (store.forget); None when all
    are deleted, else the seq of the first left (out of time, or the session's deletes in progress at their cap, or a
    clone still copying)."""
    by_sender: dict[str, list[MessageItem]] = {}
    for item in due:
        by_sender.setdefault(item["peer_id"], []).append(item)
    left = sorted(by_sender.items())
    while left:
        sender, items = left[0]
        if time_left() < 0:
            return min(int(i["seq"]) for _, rest in left for i in rest)
        try:
            taken = forget_messages(db, ws, session_id, items)
        except (Throttled, Conflict):
            return min(int(i["seq"]) for _, rest in left for i in rest)
        left = [(sender, items[taken:])] + left[1:] if taken < len(items) else left[1:]
    return None


def _advance(db: Db, ws: str, session_id: str, seq: int) -> None:
    try:
        db.client.update_item(
            TableName=db.table,
            Key=to_item(keys.session(ws, session_id)),
            UpdateExpression="SET expiry_from = :s",
            ConditionExpression="attribute_exists(PK) AND (attribute_not_exists(expiry_from) OR expiry_from < :s)",
            ExpressionAttributeValues=to_item({":s": seq}),
        )
    except ClientError as exc:
        if error_code(exc) != "ConditionalCheckFailedException":
            raise


def run_on(db: Db, ws: str, session_id: str, done: bool) -> None:
    """Keep the session's expiry going after a run that did not finish: its running item written again (kind
    `expiry`, `requested`: the deriver's stream filter lets it through), or removed once done."""
    key = {"PK": keys.session_pk(ws, session_id), "SK": RUN_SK}
    if done:
        db.client.delete_item(TableName=db.table, Key=to_item(key))
        return
    db.client.update_item(
        TableName=db.table,
        Key=to_item(key),
        UpdateExpression="SET kind = :k, requested = :now ADD rounds :one",
        ExpressionAttributeValues=to_item({":k": "expiry", ":now": utcnow(), ":one": 1}),
    )


def run(db: Db, found: ExpiryTarget, time_left: Callable[[], float] = lambda: float("inf")) -> bool:
    """One round of a session's expiry, its running item kept or removed; whether done."""
    done = expire_session(db, found.workspace, found.session, time_left=time_left)
    run_on(db, found.workspace, found.session, done)
    return done
