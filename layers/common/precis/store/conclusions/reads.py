"""Conclusions read: lists (the filter's cheapest read), nearest to a text, one by id; none of a deleted session."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from precis.errors import Invalid, NotFound
from precis.sizes import fit_page
from precis.store import filters as filtering
from precis.store import keys, vectors
from precis.store.conclusions.items import ConclusionItem, EmbedsTexts, as_conclusion, view
from precis.store.db import (
    Db,
    batch_get,
    projection,
    query_all,
    read_item,
    to_item,
)
from precis.store.records import page
from precis.store.resources import hidden_sources, require_workspace

_FILTER_KEYS = {"observer_id", "observed_id", "session_id", "id", "source_ids", "level", "created_at"}
# What a list reads of every candidate (not the content): enough to filter, order and fetch the page.
_LIST_FIELDS = ("PK", "SK", "id", "observer_id", "observed_id", "session_id", "level", "created_at", "source_ids")


def _check_filters(filters: dict[str, Any] | None) -> dict[str, Any]:
    if filters is None:
        return {}
    if not isinstance(filters, dict):
        raise Invalid("filters: must be an object")
    unknown = sorted(set(filters) - _FILTER_KEYS)
    if unknown:
        raise Invalid(
            f"filters: unknown key(s) {', '.join(unknown)}; conclusions filter on {', '.join(sorted(_FILTER_KEYS))}"
        )
    return filters


def _filter_view(item: ConclusionItem) -> dict[str, Any]:
    fields: Mapping[str, Any] = item
    return {k: fields.get(k) for k in _LIST_FIELDS[2:]}


def list_conclusions(
    db: Db, ws: str, filters: dict[str, Any] | None, page_no: int, size: int, reverse: bool
) -> dict[str, Any]:
    """A page of conclusions, newest first (ties by id: pages are stable), oldest first with `reverse`.

    The filter's cheapest read: ids through their pointers, one collection's partition when both peers are named,
    else the workspace's ByConclusion index. Candidates are read without their content; only the page's are fetched.
    """
    filters = _check_filters(filters)
    # Conclusions by or about a peer being erased: its erasure deletes them (every route naming it answers 404).
    erasing = set(require_workspace(db, ws).get("erasing") or ())
    records = [
        r
        for r in _candidates(db, ws, filters)
        if filtering.matches(filters, _filter_view(r))
        and not erasing.intersection((r["observer_id"], r["observed_id"]))
    ]
    answer = page(records, page_no, size, reverse, fit=False)
    found = {
        i["id"]: as_conclusion(i) for i in batch_get(db, [{"PK": r["PK"], "SK": r["SK"]} for r in answer["items"]])
    }
    shown = live(db, ws, [found[r["id"]] for r in answer["items"] if r["id"] in found])
    answer["items"] = [view(i) for i in shown]
    return fit_page(answer)


def live[C: Mapping[str, Any]](db: Db, ws: str, conclusions: Sequence[C]) -> list[C]:
    """`conclusions` but those drawn in a deleted session, or from a message being deleted, or deduced from such a
    premise, which are invisible from the moment the delete answers (its purge or cascade removes them later): one
    BatchGetItem of their distinct sessions (and their premises' first: one more, only when one is deductive), none
    when no conclusion names one. Until then `total` and `pages` still count them."""
    premises = _premises(db, ws, conclusions)
    sessions = {c["session_id"] for c in conclusions if c.get("session_id")}
    sessions |= {p["session_id"] for p in premises.values() if p.get("session_id")}
    gone, forgetting = hidden_sources(db, ws, sessions)
    if not gone and not forgetting:
        return list(conclusions)

    def hidden(c: Mapping[str, Any]) -> bool:
        session = c.get("session_id")
        return session in gone or bool(
            forgetting.get(session or "", set()).intersection(c.get("source_message_ids") or ())
        )

    return [
        c
        for c in conclusions
        if not hidden(c) and not any(s in premises and hidden(premises[s]) for s in c.get("source_ids") or ())
    ]


def _premises(db: Db, ws: str, conclusions: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The premises of the deductive ones among `conclusions` (their session and sources), by id."""
    wanted = {
        (c["observer_id"], c["observed_id"], s)
        for c in conclusions
        for s in c.get("source_ids") or ()
        if "observer_id" in c
    }
    if not wanted:
        return {}
    found = batch_get(
        db, [keys.conclusion(ws, o, d, s) for o, d, s in sorted(wanted)], ("id", "session_id", "source_message_ids")
    )
    return {i["id"]: i for i in found}


def _candidates(db: Db, ws: str, filters: dict[str, Any]) -> list[ConclusionItem]:
    """Conclusions that may match `filters` (projected to _LIST_FIELDS), newest first."""
    wanted = filters.get("id")
    if isinstance(wanted, dict) and set(wanted) == {"in"}:
        wanted = wanted["in"]
        if not isinstance(wanted, list) or not all(isinstance(i, str) for i in wanted):
            raise Invalid("filters.id.in: a list of conclusion ids")
    if isinstance(wanted, str):
        wanted = [wanted]
    if isinstance(wanted, list):
        pointers = batch_get(db, [keys.conclusion_pointer(ws, i) for i in dict.fromkeys(wanted)])
        items = batch_get(
            db,
            [keys.conclusion(ws, p["observer_id"], p["observed_id"], p["PK"].rsplit("#CID#", 1)[1]) for p in pointers],
            _LIST_FIELDS,
        )
        return sorted(map(as_conclusion, items), key=lambda i: i["id"], reverse=True)
    observer, observed = filters.get("observer_id"), filters.get("observed_id")
    if isinstance(observer, str) and isinstance(observed, str):
        found = query_all(
            db,
            KeyConditionExpression="PK = :pk AND begins_with(SK, :c)",
            ScanIndexForward=False,
            ConsistentRead=True,
            **_projected({":pk": keys.collection_pk(ws, observer, observed), ":c": "C#"}),
        )
    else:
        found = query_all(
            db,
            IndexName="ByConclusion",
            KeyConditionExpression="cws = :ws",
            ScanIndexForward=False,
            **_projected({":ws": ws}),
        )
    return [as_conclusion(i) for i in found]


def _projected(values: dict[str, str]) -> dict[str, Any]:
    return {**projection(_LIST_FIELDS), "ExpressionAttributeValues": to_item(values)}


def query(
    db: Db,
    ws: str,
    text: str,
    top_k: int,
    distance: float | None,
    filters: dict[str, Any] | None,
    *,
    embedder: EmbedsTexts,
) -> list[dict[str, Any]]:
    """The collection's conclusions nearest to `text`, nearest first (within cosine `distance` when given)."""
    filters = _check_filters(filters)
    observer, observed = filters.get("observer_id"), filters.get("observed_id")
    if not isinstance(observer, str) or not isinstance(observed, str):
        raise Invalid("filters: a query must name observer_id and observed_id (strings)")
    require_workspace(db, ws)
    level = filters.get("level") if isinstance(filters.get("level"), str) else None
    session_id = filters.get("session_id") if isinstance(filters.get("session_id"), str) else None
    rest = {
        k: v
        for k, v in filters.items()
        if k not in ("observer_id", "observed_id")
        and not (k == "level" and level)
        and not (k == "session_id" and session_id)
    }
    # Filters the index cannot apply are applied after it: ask it for more so that top_k usually survive.
    hits = vectors.nearest(
        db,
        ws,
        observer,
        observed,
        text,
        embedder.embed([text])[0],
        min(100, top_k * 4) if rest else top_k,
        level=level,
        session_key=session_id,
        max_distance=distance,
    )
    found = {
        i["id"]: as_conclusion(i) for i in batch_get(db, [keys.conclusion(ws, observer, observed, c) for c in hits])
    }
    nearest = live(db, ws, [found[cid] for cid in hits if cid in found])
    return [view(i) for i in nearest if filtering.matches(rest, _filter_view(i))][:top_k]


def locate(db: Db, ws: str, conclusion_id: str) -> ConclusionItem:
    pointer = read_item(db, keys.conclusion_pointer(ws, conclusion_id))
    item = pointer and read_item(db, keys.conclusion(ws, pointer["observer_id"], pointer["observed_id"], conclusion_id))
    if not item or not live(db, ws, [item]):
        raise NotFound(f"conclusion '{conclusion_id}' not found in workspace '{ws}'")
    return as_conclusion(item)


def get(db: Db, ws: str, conclusion_id: str) -> dict[str, Any]:
    return view(locate(db, ws, conclusion_id))
