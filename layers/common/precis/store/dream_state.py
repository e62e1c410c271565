"""A collection's dream state: one item beside its conclusions (`keys.dream`).

`fresh` counts the explicit conclusions written since the last dream and `last_at` when the newest came; while a
dream is due the item has `due_ws`/`due_at` (the ByDue index), `requested` when a client scheduled it, and during a
run the stored `job` and the `applied` set of what it wrote. Every write here is a single conditional update.
"""

from __future__ import annotations

from typing import Any, Protocol

from botocore.exceptions import ClientError

from precis.store import keys
from precis.store.db import Db, error_code, from_item, mark_applied, query_all, raise_if_throttled, to_item

_WHO = "kind = :kind, workspace_id = :ws, observer = :observer, observed = :observed"


class Target(Protocol):
    @property
    def workspace(self) -> str: ...
    @property
    def observer(self) -> str: ...
    @property
    def observed(self) -> str: ...


def _key(target: Target) -> dict[str, Any]:
    return to_item(keys.dream(target.workspace, target.observer, target.observed))


def _who(target: Target) -> dict[str, Any]:
    return {":kind": "dream", ":ws": target.workspace, ":observer": target.observer, ":observed": target.observed}


def _update(
    db: Db,
    target: Target,
    update: str,
    values: dict[str, Any],
    condition: str | None = None,
    names: dict[str, str] | None = None,
    returns: bool = False,
) -> dict[str, Any] | None:
    """The update's new item (with `returns`) or {}; None when its condition did not hold."""
    request: dict[str, Any] = {
        "TableName": db.table,
        "Key": _key(target),
        "UpdateExpression": update,
        "ExpressionAttributeValues": to_item(values),
    }
    if condition:
        request["ConditionExpression"] = condition
    if names:
        request["ExpressionAttributeNames"] = names
    if returns:
        request["ReturnValues"] = "ALL_NEW"
    try:
        out = db.client.update_item(**request)
    except ClientError as exc:
        raise_if_throttled(exc)
        if error_code(exc) == "ConditionalCheckFailedException":
            return None
        raise
    return from_item(out.get("Attributes")) if returns else {}


def request(db: Db, target: Target, session_id: str | None, now: str) -> None:
    """Due now and `requested` (the stream wakes the deriver); a dream already running stays that dream."""
    update = f"SET {_WHO}, due_ws = :ws, due_at = :now, requested = :now"
    values = {**_who(target), ":now": now}
    if session_id is not None:
        update, values[":s"] = update + ", session_id = :s", session_id
    _update(db, target, update, values, condition="attribute_not_exists(job)")


def count_fresh(db: Db, target: Target, count: int, now: str, *, card: bool = False) -> dict[str, Any] | None:
    """Add `count` fresh explicit conclusions, the newest at `now`; with `card`, count them towards the card's next
    refresh too (`card_fresh`, and `card_since`: when the first of them came); the state after."""
    update = f"SET {_WHO}, last_at = :now ADD fresh :n"
    if card:
        update = f"SET {_WHO}, last_at = :now, card_since = if_not_exists(card_since, :now) ADD fresh :n, card_fresh :n"
    return _update(db, target, update, {**_who(target), ":now": now, ":n": count}, returns=True)


def card_refreshed(db: Db, target: Target, count: int, now: str) -> None:
    """The card holds `count` more of the fresh conclusions (a refresh read them at `now`): none waits any more (no
    `card_since`, which the next one sets), or those that came meanwhile wait from `now`; a concurrent refresh that
    took them first leaves the state as it is."""
    drained = _update(
        db, target, "REMOVE card_since SET card_fresh = :zero", {":n": count, ":zero": 0}, condition="card_fresh = :n"
    )
    if drained is not None:
        return
    _update(
        db,
        target,
        "SET card_fresh = card_fresh - :n, card_since = :now",
        {":n": count, ":now": now},
        condition="card_fresh > :n",
    )


def arm(db: Db, target: Target, due_at: str) -> None:
    """Due at `due_at`, unless a run holds a job or a client requested it."""
    _update(
        db,
        target,
        "SET due_ws = :ws, due_at = :due",
        {":ws": target.workspace, ":due": due_at},
        condition="attribute_not_exists(job) AND attribute_not_exists(requested)",
    )


def read(db: Db, target: Target) -> dict[str, Any] | None:
    return from_item(db.client.get_item(TableName=db.table, Key=_key(target), ConsistentRead=True).get("Item"))


def store_job(db: Db, target: Target, job: dict[str, Any], seen_due_at: str) -> dict[str, Any] | None:
    """The engine's answer stored as the dream's job, if no job is stored and the dream is the one seen; the item
    after, or None when another run stored its job first."""
    return _update(
        db,
        target,
        "SET job = :job REMOVE requested",
        {":job": job, ":seen": seen_due_at},
        condition="attribute_not_exists(job) AND due_at = :seen",
        returns=True,
    )


def applied_mark(db: Db, target: Target, token: str, name: str) -> dict[str, Any]:
    """The transaction action that records part `name` of job `token` as written (at most once)."""
    return mark_applied(db, _key(target), token, name)


def finish(db: Db, target: Target, token: str, now: str) -> None:
    """Reset the state after job `token`: nothing fresh, not due, one dream more."""
    _update(
        db,
        target,
        "SET fresh = :zero, dreamed_at = :now, updated_at = :now ADD dreams :one "
        "REMOVE job, applied, due_ws, due_at, requested, session_id",
        {":zero": 0, ":one": 1, ":now": now, ":token": token},
        condition="job.#token = :token",
        names={"#token": "token"},
    )


def due(db: Db, ws: str, now: str) -> list[tuple[str, str]]:
    """(observer, observed) of the workspace's dreams due by `now` (the ByDue index)."""
    items = query_all(
        db,
        IndexName="ByDue",
        KeyConditionExpression="due_ws = :ws AND due_at <= :now",
        ExpressionAttributeValues=to_item({":ws": ws, ":now": now}),
    )
    return [(i["observer"], i["observed"]) for i in items if i.get("kind") == "dream"]
