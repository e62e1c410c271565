"""The conclusion requests that embed: a query of a collection and conclusions stated by a client, each embedded by
the deployment's embedder. Both edges call them: `POST …/conclusions/query`, `POST …/conclusions` (precis.api) and
the MCP tools `query_conclusions`, `search` (a peer's own) and `create_conclusions`. Conclusions are a workspace's:
the edges admit a workspace's key (or an admin's) only, so no narrower key reaches here."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from precis.llm.embeddings import configured_embedder
from precis.store import conclusions
from precis.store.db import Db


def query(
    db: Db, ws: str, text: str, top_k: int, distance: float | None, filters: dict[str, Any] | None
) -> list[dict[str, Any]]:
    """The conclusions of the collection `filters` name (observer_id, observed_id) nearest `text`, nearest first."""
    return conclusions.query(db, ws, text, top_k, distance, filters, embedder=configured_embedder())


def state(db: Db, ws: str, payload: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Conclusions a client states (content, observer_id, observed_id, session_id), each merged into a near duplicate
    already held; the conclusions' views."""
    return conclusions.create(db, ws, payload, embedder=configured_embedder())
