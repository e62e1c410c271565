"""Dreams: deductive conclusions reasoned from a collection's explicit ones, and a refreshed card, exactly once.

A collection's dream state is one item beside its conclusions (`keys.dream`): `fresh` counts the explicit conclusions
written since its last dream and `last_at` when the newest came. A dream is *due* while the item has `due_ws`/`due_at`
(the ByDue index: the deriver's schedule runs it, the queue status counts it):

- `POST /schedule_dream` makes it due now and marks it `requested`, which wakes the deriver by the stream;
- the deriver arms it when `fresh` reaches `dream_min_conclusions`, due `dream_idle_s` after the newest conclusion
  (each new one pushes it back: a dream waits for an idle collection).

A dream runs in the deriver's three conditional steps: the engine's answer is stored as the item's `job` (on
condition no job is stored and the dream is still the one seen), each chunk of deductions and the card are written
with a marker in the item's `applied` set (each at most once), and the item is reset last. A replayed, concurrent or
retried run applies the stored job and never asks the model twice. A dream writes deductive conclusions (deduplicated
like any) and the card; it never deletes anything, least of all a stated (explicit) conclusion.
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

from precis.store import conclusions, keys
from precis.store.db import Db, error_code, from_item, mark_applied, query_all, raise_if_throttled, to_item

log = logging.getLogger("precis.memory.dreams")
CHUNK = 16
MAX_PREMISES = 200  # explicit conclusions a dream reasons over (the newest)


@dataclass(frozen=True)
class DreamTarget:
    workspace: str
    observer: str
    observed: str


def target_of(image: dict[str, Any]) -> DreamTarget | None:
    """The dream a stream image asks to run now (a scheduled one), else None."""
    if image.get("kind") != "dream" or not image.get("requested"):
        return None
    return DreamTarget(image["workspace_id"], image["observer"], image["observed"])


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat()


def _key(target: DreamTarget) -> dict[str, Any]:
    return to_item(keys.dream(target.workspace, target.observer, target.observed))


_WHO = "kind = :kind, workspace_id = :ws, observer = :observer, observed = :observed"


def _who(target: DreamTarget) -> dict[str, Any]:
    return {":kind": "dream", ":ws": target.workspace, ":observer": target.observer, ":observed": target.observed}


def _update(db: Db, target: DreamTarget, update: str, values: dict[str, Any], condition: str | None = None,
            names: dict[str, str] | None = None, returns: bool = False) -> dict[str, Any] | None:
    request: dict[str, Any] = {"TableName": db.table, "Key": _key(target), "UpdateExpression": update,
                               "ExpressionAttributeValues": to_item(values)}
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


# ---------------------------------------------------------------- scheduling

def schedule(db: Db, target: DreamTarget, session_id: str | None, now: datetime) -> None:
    """Make the collection's dream due now and wake the deriver (a dream already due or running is that dream)."""
    update = f"SET {_WHO}, due_ws = :ws, due_at = :now, requested = :now"
    values = {**_who(target), ":now": _iso(now)}
    if session_id is not None:
        update, values[":s"] = update + ", session_id = :s", session_id
    _update(db, target, update, values, condition="attribute_not_exists(job)")


def note_explicit(db: Db, target: DreamTarget, count: int, now: datetime, *, min_conclusions: int,
                  idle_s: int) -> None:
    """Count `count` new explicit conclusions; arm the dream (due once the collection has been idle `idle_s`) when
    they reach `min_conclusions`. Best effort: a replayed job may count its conclusions twice, which only brings a
    dream forward."""
    if count <= 0 or target.observer.startswith("scope."):
        return
    state = _update(db, target, f"SET {_WHO}, last_at = :now ADD fresh :n", {**_who(target), ":now": _iso(now),
                                                                              ":n": count}, returns=True)
    if state and int(state.get("fresh", 0)) >= min_conclusions and not state.get("requested"):
        _update(db, target, "SET due_ws = :ws, due_at = :due", {":ws": target.workspace,
                                                                 ":due": _iso(now + timedelta(seconds=idle_s))},
                condition="attribute_not_exists(job) AND attribute_not_exists(requested)")


# ---------------------------------------------------------------- running

def run(db: Db, target: DreamTarget, *, engine: Any, embedder: Any, now: datetime) -> int:
    """Run the dream if it is due by `now` (or a stored job of it); the deductive conclusions written."""
    item = from_item(db.client.get_item(TableName=db.table, Key=_key(target), ConsistentRead=True).get("Item"))
    if not item or "due_at" not in item:
        return 0
    if not item.get("job"):
        if item["due_at"] > _iso(now):
            return 0  # armed, not yet idle long enough
        item = _decide(db, target, item, engine)
        if item is None:
            return 0  # another run stored its job first: it (or a retry) applies it
    return _apply(db, target, item, engine, embedder, now)


def _explicit(db: Db, target: DreamTarget) -> tuple[list[dict[str, Any]], list[str]]:
    """(the newest explicit conclusions, oldest first: id and content) and the deductive contents already held."""
    items = query_all(db, KeyConditionExpression="PK = :pk AND begins_with(SK, :c)", ConsistentRead=True,
                      ProjectionExpression="id, content, #l", ExpressionAttributeNames={"#l": "level"},
                      ExpressionAttributeValues=to_item({":pk": keys.collection_pk(target.workspace, target.observer,
                                                                                    target.observed), ":c": "C#"}))
    explicit = [{"id": i["id"], "content": i["content"]} for i in items if i.get("level", "explicit") == "explicit"]
    deductive = [i["content"] for i in items if i.get("level") == "deductive"]
    return explicit[-MAX_PREMISES:], deductive


def _decide(db: Db, target: DreamTarget, item: dict[str, Any], engine: Any) -> dict[str, Any] | None:
    premises, known = _explicit(db, target)
    deductions = engine.dream(target.observed, premises, known) if premises else []
    ids = {p["id"] for p in premises}
    job = {"token": secrets.token_hex(8), "session_id": item.get("session_id"),
           "deductions": [{"content": d["content"], "source_ids": [s for s in d["source_ids"] if s in ids]}
                          for d in deductions if any(s in ids for s in d["source_ids"])],
           "card_from": [p["content"] for p in premises]}
    stored = _update(db, target, "SET job = :job REMOVE requested", {":job": job, ":seen": item["due_at"]},
                     condition="attribute_not_exists(job) AND due_at = :seen", returns=True)
    return stored


def _mark(db: Db, target: DreamTarget, token: str, name: str) -> dict[str, Any]:
    return mark_applied(db, _key(target), token, name)


def _apply(db: Db, target: DreamTarget, item: dict[str, Any], engine: Any, embedder: Any, now: datetime) -> int:
    job = item["job"]
    applied = set(item.get("applied") or ())
    ws, observer, observed = target.workspace, target.observer, target.observed
    items = [conclusions.Derived(d["content"], level="deductive", source_ids=tuple(d["source_ids"]))
             for d in job["deductions"]]
    written = 0
    for start in range(0, len(items), CHUNK):
        name = f"deductive#{start}"
        if name in applied:
            continue
        try:
            conclusions.write(db, ws, observer, observed, items[start:start + CHUNK], embedder=embedder,
                              extra=[_mark(db, target, job["token"], name)], now=now)
            written += len(items[start:start + CHUNK])
        except conclusions.ExtraConditionFailed:
            pass  # written already, by this dream before a crash or by a concurrent run
    if "card" not in applied:
        _refresh_card(db, target, job, engine, [i.content for i in items])
    _update(db, target, "SET fresh = :zero, dreamed_at = :now, updated_at = :now ADD dreams :one "
                        "REMOVE job, applied, due_ws, due_at, requested, session_id",
            {":zero": 0, ":one": 1, ":now": _iso(now), ":token": job["token"]}, condition="job.#token = :token",
            names={"#token": "token"})
    return written


def _refresh_card(db: Db, target: DreamTarget, job: dict[str, Any], engine: Any, deductions: list[str]) -> None:
    """The card the engine proposes from the collection's explicit conclusions and the new deductions, written with
    the dream's marker; a client's PUT since the read is kept. Nothing valid: unchanged."""
    ws, observer, observed = target.workspace, target.observer, target.observed
    entries, counts, _source = conclusions.card_state(db, ws, observer, observed)
    try:
        proposed = engine.refresh_card(observed, entries, counts or {}, job["card_from"] + deductions)
    except Exception as exc:  # noqa: BLE001 - a card is a convenience: its failure never blocks the dream
        log.warning("card refresh failed for %s/%s: %s", observer, observed, exc)
        proposed = None
    conclusions.write_card_step(db, ws, observer, observed, proposed, entries, _mark(db, target, job["token"], "card"))


def dreams_due(db: Db, ws: str, now: datetime) -> list[DreamTarget]:
    """The workspace's dreams due by `now` (the ByDue index)."""
    items = query_all(db, IndexName="ByDue", KeyConditionExpression="due_ws = :ws AND due_at <= :now",
                      ExpressionAttributeValues=to_item({":ws": ws, ":now": _iso(now)}))
    return [DreamTarget(ws, i["observer"], i["observed"]) for i in items if i.get("kind") == "dream"]
