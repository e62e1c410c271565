"""Reading a peer's working representation (what `observer` has concluded about `observed`) and card.

The shares are read at once: the newest conclusions (the collection's partition, newest first), the most derived
(the sparse ByFrequency index), the card, and the query's nearest (the vector index) — each bounded by its share,
so the bytes read grow with what is returned, not with the collection. The nearest need one more request (their
text, by key). A session allowlist keeps explicit conclusions of those sessions only; it examines at most
ALLOWLIST_SCAN_LIMIT conclusions per share.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextvars import copy_context
from dataclasses import dataclass, replace
from typing import Any

from precis.store import keys, vectors
from precis.store.db import Db, batch_get, from_item, to_item
from precis.store.resources import hidden_sources

SEMANTIC, FREQUENT, RECENT = 2, 1, 0  # relevance of a share: the least relevant is dropped first
FREQUENCY_INDEX = "ByFrequency"
ALLOWLIST_SCAN_LIMIT = 2_000
_FIELDS = ("id", "content", "level", "source_at", "created_at", "session_id", "source_ids")
_pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="representation")


@dataclass(frozen=True)
class Chosen:
    """A conclusion as the representation uses it."""

    id: str
    content: str
    level: str
    at: str  # ISO time of the newest source message (or of its creation)
    share: int = RECENT
    premises: tuple[str, ...] = ()  # the contents of a deductive conclusion's sources
    # Provenance, for a chat's evidence: not part of the rendering.
    created_at: str | None = None
    session_id: str | None = None
    source_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class Shares:
    semantic: int
    frequent: int
    recent: int


def shares(total: int, *, search: bool, search_top_k: int | None, include_most_frequent: bool) -> Shares:
    """Honcho's split of `total` (max_conclusions) between the semantic, most-frequent and recent shares."""
    semantic = min(max(1, search_top_k or total // 3), total) if search else 0
    if include_most_frequent:
        frequent = min(total // 3 if search else total // 2, total - semantic)
    else:
        frequent = 0
    return Shares(semantic, frequent, total - semantic - frequent)


def merge(
    split: Shares, semantic: Sequence[Chosen], frequent: Sequence[Chosen], recent: Sequence[Chosen]
) -> list[Chosen]:
    """The three shares (each in its own order of preference) without repeats, each filled up to its size from
    its own candidates, then ordered oldest first."""
    chosen: dict[str, Chosen] = {}
    for size, candidates, share in (
        (split.semantic, semantic, SEMANTIC),
        (split.frequent, frequent, FREQUENT),
        (split.recent, recent, RECENT),
    ):
        taken = 0
        for conclusion in candidates:
            if taken >= size:
                break
            if conclusion.id in chosen:
                continue
            chosen[conclusion.id] = replace(conclusion, share=share)
            taken += 1
    return sorted(chosen.values(), key=lambda c: (c.at, c.id))


@dataclass(frozen=True)
class Request:
    observer: str
    observed: str
    max_conclusions: int
    include_most_frequent: bool
    search_query: str | None = None
    search_top_k: int | None = None
    search_max_distance: float | None = None
    sessions: tuple[str, ...] | None = None  # an allowlist: explicit conclusions of these sessions only


@dataclass
class Read:
    conclusions: list[Chosen]
    card: list[str] | None


def _chosen(item: dict[str, Any]) -> Chosen:
    return Chosen(
        item["id"],
        item["content"],
        item.get("level", "explicit"),
        item.get("source_at") or item["created_at"],
        created_at=item["created_at"],
        session_id=item.get("session_id"),
        source_ids=tuple(item.get("source_ids") or ()),
    )


def _allowed(request: Request, item: dict[str, Any]) -> bool:
    return request.sessions is None or (item.get("level") == "explicit" and item.get("session_id") in request.sessions)


def _query(db: Db, request: Request, limit: int, **query: Any) -> list[dict[str, Any]]:
    """Up to `limit` conclusions a query yields that the allowlist keeps, newest (or most derived) first."""
    if limit <= 0:
        return []
    names = {f"#f{i}": f for i, f in enumerate(_FIELDS)}
    params: dict[str, Any] = {
        "TableName": db.table,
        "ScanIndexForward": False,
        "ProjectionExpression": ", ".join(names),
        "ExpressionAttributeNames": names,
        **query,
    }
    found: list[dict[str, Any]] = []
    examined = 0
    while len(found) < limit:
        params["Limit"] = limit - len(found) if request.sessions is None else min(200, ALLOWLIST_SCAN_LIMIT)
        out = db.client.query(**params)
        items = [from_item(i) for i in out["Items"]]
        examined += len(items)
        found += [i for i in items if _allowed(request, i)]
        if "LastEvaluatedKey" not in out or examined >= ALLOWLIST_SCAN_LIMIT:
            break
        params["ExclusiveStartKey"] = out["LastEvaluatedKey"]
    return found[:limit]


def _recent(db: Db, ws: str, request: Request, limit: int) -> list[dict[str, Any]]:
    pk = keys.collection_pk(ws, request.observer, request.observed)
    return _query(
        db,
        request,
        limit,
        KeyConditionExpression="PK = :pk AND begins_with(SK, :c)",
        ConsistentRead=True,
        ExpressionAttributeValues=to_item({":pk": pk, ":c": "C#"}),
    )


def _frequent(db: Db, ws: str, request: Request, limit: int) -> list[dict[str, Any]]:
    pk = keys.collection_pk(ws, request.observer, request.observed)
    return _query(
        db,
        request,
        limit,
        IndexName=FREQUENCY_INDEX,
        KeyConditionExpression="PK = :pk",
        ExpressionAttributeValues=to_item({":pk": pk}),
    )


def _nearest(db: Db, ws: str, request: Request, limit: int, embed: Callable[[str], list[float]]) -> list[str]:
    if limit <= 0 or not request.search_query:
        return []
    sessions = request.sessions
    one_session = sessions[0] if sessions is not None and len(sessions) == 1 else None
    return vectors.nearest(
        db,
        ws,
        request.observer,
        request.observed,
        request.search_query,
        embed(request.search_query),
        limit if sessions is None else min(100, limit * 4),
        level="explicit" if sessions is not None else None,
        session_key=one_session,
        max_distance=request.search_max_distance,
    )


def start(db: Db, ws: str, request: Request, embed: Callable[[str], list[float]]) -> Callable[[], Read]:
    """Begin the reads (in threads) and return what finishes them: the chosen conclusions, oldest first, and the
    card (None under an allowlist: a card is not session-scoped)."""
    split = shares(
        request.max_conclusions,
        search=bool(request.search_query),
        search_top_k=request.search_top_k,
        include_most_frequent=request.include_most_frequent,
    )
    if request.sessions is not None and not request.sessions:
        return lambda: Read([], None)
    # Each share fetches as many as the whole representation may hold: repeats across shares are refilled.
    recent: Future[list[dict[str, Any]]] = _pool.submit(_recent, db, ws, request, request.max_conclusions)
    frequent: Future[list[dict[str, Any]]] | None = (
        _pool.submit(_frequent, db, ws, request, split.frequent + split.semantic) if split.frequent else None
    )
    nearest: Future[list[str]] | None = (
        # in the caller's context: the query's embedding counts into its usage meter (precis.llm.meter)
        _pool.submit(copy_context().run, _nearest, db, ws, request, split.semantic, embed) if split.semantic else None
    )
    card: Future[list[str] | None] | None = _pool.submit(_card, db, ws, request) if request.sessions is None else None

    def finish() -> Read:
        semantic = _semantic(db, ws, request, nearest.result(), split) if nearest else []
        most = [_chosen(i) for i in (frequent.result() if frequent else [])]
        newest = [_chosen(i) for i in recent.result()]
        # A deleted session's conclusions are invisible from its delete on (its purge removes them later): each share
        # fills from its other candidates. One BatchGetItem of the candidates' sessions, none when none names one.
        # So are those drawn from a message being deleted (its session's `forgetting`), whose sources are read then.
        hidden = _hidden(db, ws, request, (*semantic, *most, *newest))
        if hidden:
            semantic, most, newest = ([c for c in s if c.id not in hidden] for s in (semantic, most, newest))
        chosen = merge(split, semantic, most, newest)
        chosen = _with_premises(db, ws, request, chosen)
        return Read(chosen, card.result() if card else None)

    return finish


def _hidden(db: Db, ws: str, request: Request, candidates: Sequence[Chosen]) -> set[str]:
    """The ids of `candidates` a read leaves out: drawn in a deleted session, or from a message whose delete's cascade
    is still running (their sources read then: one BatchGetItem, only while a delete of their session runs)."""
    gone, forgetting = hidden_sources(db, ws, {c.session_id for c in candidates if c.session_id})
    hidden = {c.id for c in candidates if c.session_id in gone}
    pending = sorted({c.id for c in candidates if c.session_id in forgetting})
    if pending:
        sources = batch_get(
            db,
            [keys.conclusion(ws, request.observer, request.observed, cid) for cid in pending],
            ("id", "session_id", "source_message_ids"),
        )
        hidden |= {
            i["id"] for i in sources if forgetting[i["session_id"]].intersection(i.get("source_message_ids") or ())
        }
    return hidden


def _semantic(db: Db, ws: str, request: Request, hits: list[str], split: Shares) -> list[Chosen]:
    if not hits:
        return []
    found = {
        i["id"]: i
        for i in batch_get(
            db, [keys.conclusion(ws, request.observer, request.observed, cid) for cid in hits], _FIELDS + ("PK", "SK")
        )
    }
    return [_chosen(found[cid]) for cid in hits if cid in found and _allowed(request, found[cid])][: split.semantic]


def _with_premises(db: Db, ws: str, request: Request, chosen: list[Chosen]) -> list[Chosen]:
    """Deductive conclusions with the contents of their sources (rendered as premises); one read when any."""
    wanted = {c.id for c in chosen if c.level != "explicit"}
    if not wanted:
        return chosen
    items = {
        i["id"]: i
        for i in batch_get(
            db,
            [keys.conclusion(ws, request.observer, request.observed, cid) for cid in wanted],
            ("PK", "SK", "id", "source_ids"),
        )
    }
    sources = {s for i in items.values() for s in i.get("source_ids") or ()}
    premises = (
        {
            i["id"]: i
            for i in batch_get(
                db,
                [keys.conclusion(ws, request.observer, request.observed, s) for s in sources],
                ("PK", "SK", "id", "content", "session_id", "source_message_ids"),
            )
        }
        if sources
        else {}
    )
    contents = {i: p["content"] for i, p in premises.items()}
    # A deduction from a premise drawn from a message being deleted (or in a deleted session) is left out with it.
    gone, forgetting = hidden_sources(db, ws, {p["session_id"] for p in premises.values() if p.get("session_id")})
    hidden = {
        i
        for i, p in premises.items()
        if p.get("session_id") in gone
        or forgetting.get(p.get("session_id") or "", set()).intersection(p.get("source_message_ids") or ())
    }
    return [
        replace(
            c, premises=tuple(contents[s] for s in (items.get(c.id) or {}).get("source_ids") or () if s in contents)
        )
        if c.id in wanted
        else c
        for c in chosen
        if not hidden.intersection((items.get(c.id) or {}).get("source_ids") or ())
    ]


def _card(db: Db, ws: str, request: Request) -> list[str] | None:
    item = db.client.get_item(
        TableName=db.table,
        Key=to_item(keys.card(ws, request.observer, request.observed)),
        ConsistentRead=True,
        ProjectionExpression="entries, forget_pending",
    ).get("Item")
    card = from_item(item) or {}
    return None if card.get("forget_pending") else card.get("entries")  # (marked: a message delete's cascade runs)
