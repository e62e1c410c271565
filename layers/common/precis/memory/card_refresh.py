"""Peer cards kept by a model, refreshed in one request per burst of conclusions rather than one per derivation.

A collection's dream state (`store.dream_state`) counts the conclusions written since its card was last refreshed
(`card_fresh`) and since when (`card_since`). The card is refreshed, from the old card and those conclusions (the
newest, at most MAX_NEW), when the deriver writes conclusions and they number `derive_card_every` or have waited
`derive_card_max_s`, and when the session has been quiet `derive_card_quiet_s` (a wake-up of its own): so a card is
current soon after a conversation pauses, and a long one refreshes it as it goes. A refresh that fails leaves the
count where it was: the next one takes those conclusions too. The extractive engine, which costs nothing, keeps its
cards at every derivation instead (`deriver._update_card`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from precis.errors import Invalid
from precis.settings import Settings
from precis.store import conclusions, dream_state
from precis.store.db import Db

log = logging.getLogger("precis.memory.card_refresh")
MAX_NEW = 100  # conclusions one refresh reads (the newest): a card holds 40 entries


def due(state: dict[str, Any], now: datetime, settings: Settings) -> bool:
    """Whether the conclusions counted in `state` call for a refresh now (many, or waiting long)."""
    fresh = int(state.get("card_fresh", 0))
    if fresh <= 0:
        return False
    since = datetime.fromisoformat(str(state.get("card_since") or now.isoformat()))
    return fresh >= settings.derive_card_every or (now - since).total_seconds() >= settings.derive_card_max_s


def refresh(db: Db, target: Any, engine: Any, now: datetime) -> bool:
    """Refresh the card of `target` (a collection: workspace, observer, observed) from the conclusions counted
    since its last refresh; whether there were any. A card a client replaced meanwhile is kept."""
    state = dream_state.read(db, target) or {}
    fresh = int(state.get("card_fresh", 0))
    if fresh <= 0:
        return False
    ws, observer, observed = target.workspace, target.observer, target.observed
    new = conclusions.newest_contents(db, ws, observer, observed, min(fresh, MAX_NEW))
    entries, counts, _source = conclusions.card_state(db, ws, observer, observed)
    try:
        proposed = engine.update_card(observed, entries, counts or {}, new) if new else None
    except Exception as exc:  # noqa: BLE001 - a card is a convenience: its failure never blocks the conclusions
        log.warning("card refresh failed for %s/%s: %s", observer, observed, exc)
        return True  # counted still: the next refresh takes these conclusions too
    if proposed is not None:
        conclusions.write_card(db, ws, observer, observed, *proposed, previous=entries)
    dream_state.card_refreshed(db, target, fresh, now.astimezone(UTC).isoformat())
    return True


def card_rebuilder(
    db: Db, ws: str, session_id: str, settings: Settings
) -> Callable[[str, list[str]], tuple[list[str], dict[str, int]] | None]:
    """How a message delete's cascade rebuilds a card that lost conclusions: with the extractive engine (the session's,
    which costs nothing), from the collection's conclusions alone; with a model, not at once (None: the card goes, and
    the collection's next refresh makes it from its newest conclusions)."""
    from precis.configuration import derive_config
    from precis.memory.engines.extractive import update_card
    from precis.store.records import json_object
    from precis.store.resources import session_and_workspace

    session, workspace = session_and_workspace(db, ws, session_id)
    try:
        config = derive_config(
            json_object(workspace["configuration"] if workspace else None),
            json_object(session["configuration"] if session else None),
            settings,
        )
    except Invalid:
        config = derive_config(None, None, settings)
    if config.engine != "extractive":
        return lambda observed, contents: None
    return lambda observed, contents: update_card(observed, None, {}, contents) if contents else None
