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

from precis.events import Event, dream_completed
from precis.store import conclusions, dream_state
from precis.store.db import Db

log = logging.getLogger("precis.memory.dreams")
CHUNK = 16
MAX_PREMISES = 200  # explicit conclusions a dream reasons over (the newest)
MAX_KNOWN = 100  # deductive ones it is told are known (the newest): each dream adds some, and the prompt must fit


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


# ---------------------------------------------------------------- scheduling


def schedule(db: Db, target: DreamTarget, session_id: str | None, now: datetime) -> None:
    """Make the collection's dream due now and wake the deriver (a dream already due or running is that dream)."""
    dream_state.request(db, target, session_id, _iso(now))


def note_explicit(
    db: Db, target: DreamTarget, count: int, now: datetime, *, min_conclusions: int, idle_s: int, card: bool = False
) -> dict[str, Any] | None:
    """Count `count` new explicit conclusions (with `card`, towards the card's next refresh too); arm the dream (due
    once the collection has been idle `idle_s`) when they reach `min_conclusions`; the state after. Best effort: a
    replayed job may count its conclusions twice, which only brings a dream or a card refresh forward."""
    if count <= 0 or target.observer.startswith("scope."):
        return None
    state = dream_state.count_fresh(db, target, count, _iso(now), card=card)
    if state and int(state.get("fresh", 0)) >= min_conclusions and not state.get("requested"):
        dream_state.arm(db, target, _iso(now + timedelta(seconds=idle_s)))
    return state


# ---------------------------------------------------------------- running


def run(
    db: Db, target: DreamTarget, *, engine: Any, embedder: Any, now: datetime, events: list[Event] | None = None
) -> int:
    """Run the dream if it is due by `now` (or a stored job of it); the deductive conclusions written. A dream that
    finishes adds its `dream.completed` to `events` (published by the caller once it is stored)."""
    item = dream_state.read(db, target)
    if not item or "due_at" not in item:
        return 0
    if not item.get("job"):
        if item["due_at"] > _iso(now):
            return 0  # armed, not yet idle long enough
        item = _decide(db, target, item, engine)
        if item is None:
            return 0  # another run stored its job first: it (or a retry) applies it
    return _apply(db, target, item, engine, embedder, now, events)


def _explicit(db: Db, target: DreamTarget) -> tuple[list[dict[str, Any]], list[str]]:
    """(the newest explicit conclusions, oldest first: id and content) and the deductive contents already held."""
    items = conclusions.collection_contents(db, target.workspace, target.observer, target.observed)
    explicit = [{"id": i["id"], "content": i["content"]} for i in items if i.get("level", "explicit") == "explicit"]
    deductive = [i["content"] for i in items if i.get("level") == "deductive"]
    return explicit[-MAX_PREMISES:], deductive[-MAX_KNOWN:]


def _decide(db: Db, target: DreamTarget, item: dict[str, Any], engine: Any) -> dict[str, Any] | None:
    premises, known = _explicit(db, target)
    deductions = engine.dream(target.observed, premises, known) if premises else []
    ids = {p["id"] for p in premises}
    job = {
        "token": secrets.token_hex(8),
        "session_id": item.get("session_id"),
        "deductions": [
            {"content": d["content"], "source_ids": [s for s in d["source_ids"] if s in ids]}
            for d in deductions
            if any(s in ids for s in d["source_ids"])
        ],
        "card_from": [p["content"] for p in premises],
    }
    return dream_state.store_job(db, target, job, item["due_at"])


def _apply(
    db: Db,
    target: DreamTarget,
    item: dict[str, Any],
    engine: Any,
    embedder: Any,
    now: datetime,
    events: list[Event] | None = None,
) -> int:
    job = item["job"]
    applied = set(item.get("applied") or ())
    ws, observer, observed = target.workspace, target.observer, target.observed
    items = [
        conclusions.Derived(d["content"], level="deductive", source_ids=tuple(d["source_ids"]))
        for d in job["deductions"]
    ]
    written = 0
    for start in range(0, len(items), CHUNK):
        name = f"deductive#{start}"
        if name in applied:
            continue
        try:
            conclusions.write(
                db,
                ws,
                observer,
                observed,
                items[start : start + CHUNK],
                embedder=embedder,
                extra=[dream_state.applied_mark(db, target, job["token"], name)],
                now=now,
            )
            written += len(items[start : start + CHUNK])
        except conclusions.ExtraConditionFailed:
            pass  # written already, by this dream before a crash or by a concurrent run
    if "card" not in applied:
        _refresh_card(db, target, job, engine, [i.content for i in items])
    dream_state.finish(db, target, job["token"], _iso(now))
    if events is not None:
        # Its id is the job's: a run that applied part of the job before a crash and the one that finished it
        # announce the same dream. (`deductive`: those this run wrote; a dream removes nothing, so no
        # conclusions.deleted comes of it.)
        counts = {"deductive": written}
        cause = (job["token"],)
        stamp = now.timestamp()
        events.append(dream_completed(ws, observer=observer, observed=observed, counts=counts, cause=cause, now=stamp))
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
    conclusions.write_card_step(
        db, ws, observer, observed, proposed, entries, dream_state.applied_mark(db, target, job["token"], "card")
    )


def dreams_due(db: Db, ws: str, now: datetime) -> list[DreamTarget]:
    """The workspace's dreams due by `now` (the ByDue index)."""
    return [DreamTarget(ws, observer, observed) for observer, observed in dream_state.due(db, ws, _iso(now))]
