"""The conclusion requests that embed: a query of a collection and conclusions stated by a client, each embedded by
the deployment's embedder. Both edges call them: `POST …/conclusions/query`, `POST …/conclusions` (precis.api) and
the MCP tools `query_conclusions`, `search` (a peer's own) and `create_conclusions`. Conclusions are a workspace's:
the edges admit a workspace's key (or an admin's) only, so no narrower key reaches here. A conclusion stated or
deleted is announced (`conclusions.created`, `conclusions.deleted`: precis.events) once it is stored."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from precis.events import conclusions_created, conclusions_deleted, publish_configured
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
    views = conclusions.create(db, ws, payload, embedder=configured_embedder())
    now, groups = time.time(), dict[tuple[str, str, str | None], list[str]]()
    for view in views:
        ids = groups.setdefault((view["observer_id"], view["observed_id"], view.get("session_id")), [])
        if view["id"] not in ids:
            ids.append(view["id"])
    publish_configured(
        db,
        [
            # A near duplicate merged into a conclusion already held names that one; the same request made again
            # (its conclusions merged into the first's) announces the same ids under the same event id.
            conclusions_created(
                ws, session_id=s, observer=o, observed=d, conclusion_ids=ids, cause=sorted(ids), now=now
            )
            for (o, d, s), ids in groups.items()
        ],
    )
    return views


def delete(db: Db, ws: str, conclusion_id: str) -> None:
    """DELETE …/conclusions/{id} and the MCP tool `delete_conclusion`: NotFound when there is none."""
    item = conclusions.delete(db, ws, conclusion_id)
    event = conclusions_deleted(
        ws,
        observer=item["observer_id"],
        observed=item["observed_id"],
        conclusion_ids=[conclusion_id],
        session_id=item.get("session_id"),
        now=time.time(),
    )
    publish_configured(db, [event])
