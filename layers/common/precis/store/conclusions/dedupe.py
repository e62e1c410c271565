"""A write's duplicates: the call's own merged (exact, then near by embedding), and each one's stored near twin
(compared here while a session holds few, else asked of the vector index)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from precis.store import keys, vectors
from precis.store.conclusions.items import CHUNK, NEAR_DISTANCE, Derived, EmbedsTexts, content_digest
from precis.store.conclusions.provenance import provenance_request
from precis.store.db import (
    Db,
    batch_get,
    projection,
)

_searches = ThreadPoolExecutor(max_workers=CHUNK, thread_name_prefix="near-duplicates")  # a chunk's at once
LOCAL_TWINS = 32  # a session's explicit conclusions in a collection compared here, not by the index, up to this many
_PROVENANCE_PAGE = 200  # DERIVED# items read to find them (a session's, every collection's); more: the index
_WORD = re.compile(r"\w+")


@dataclass
class Candidate:
    """One distinct conclusion of a write call, with every input position it stands for."""

    content: str
    level: str
    session_id: str | None
    source_message_ids: list[str]
    source_at: str | None
    source_ids: list[str] | None
    positions: list[int]
    vector: list[float] = field(default_factory=list)
    new_id: str = ""

    def absorb(self, other: Candidate) -> None:
        """Merge a duplicate into this one, keeping the text that says more."""
        if distinct_words(other.content) > distinct_words(self.content):
            self.content, self.vector = other.content, other.vector
        self.positions += other.positions
        self.source_message_ids = union(self.source_message_ids, other.source_message_ids)
        self.source_at = max(filter(None, (self.source_at, other.source_at)), default=None)
        if other.source_ids is not None:
            self.source_ids = union(self.source_ids or [], other.source_ids)


def distinct_words(content: str) -> int:
    """How many distinct words `content` holds: of two duplicates, the text that says more is kept."""
    return len(set(_WORD.findall(content.casefold())))


def union(first: Iterable[str], second: Iterable[str]) -> list[str]:
    """`first`, then what `second` adds, each once, in order."""
    return list(dict.fromkeys([*first, *second]))


def merge_candidates(items: Sequence[Derived], embedder: EmbedsTexts) -> list[Candidate]:
    """The call's distinct conclusions: exact duplicates first, then (embedded) near duplicates, merged."""
    exact: dict[tuple[str, str | None, str], Candidate] = {}
    for position, item in enumerate(items):
        candidate = Candidate(
            item.content,
            item.level,
            item.session_id,
            list(item.source_message_ids),
            item.source_at,
            list(item.source_ids) if item.source_ids is not None else None,
            [position],
        )
        key = (item.level, item.session_id, content_digest(item.content))
        if key in exact:
            exact[key].absorb(candidate)
        else:
            exact[key] = candidate
    distinct = list(exact.values())
    for candidate, vector in zip(distinct, embedder.embed([c.content for c in distinct])):
        candidate.vector = list(vector)
    kept: list[Candidate] = []
    for candidate in distinct:
        twin = next(
            (
                k
                for k in kept
                if _same_scope(k, candidate)
                and 1 - sum(a * b for a, b in zip(k.vector, candidate.vector)) <= NEAR_DISTANCE
            ),
            None,
        )
        if twin is None:
            kept.append(candidate)
        else:
            twin.absorb(candidate)
    return kept


def _same_scope(a: Candidate, b: Candidate) -> bool:
    """Whether two conclusions may be duplicates: same level and, for explicit ones, the same session."""
    return a.level == b.level and (a.level != "explicit" or a.session_id == b.session_id)


def stored_twins(db: Db, ws: str, observer: str, observed: str, candidates: list[Candidate]) -> list[str | None]:
    """The id of each candidate's stored near duplicate (or None), in order.

    An explicit conclusion's twin can only be an explicit conclusion of the same session in this collection, and the
    session's DERIVED# items name those: while they are few, their vectors are read (one Query and one BatchGetItem
    for the chunk, nothing more when the session has none yet, as for its first conclusions) and compared here.
    Otherwise each candidate asks the vector index, all at once: one SearchVectors each; the index may not hold the
    newest conclusions yet, so those written in the last vectors.INDEX_LAG_S are read from the table (one Query) and
    compared here too."""
    sessions = {c.session_id for c in candidates if c.level == "explicit" and c.session_id}
    local = {s: _session_vectors(db, ws, observer, observed, s) for s in sessions}
    collection = keys.collection_name(ws, observer, observed)

    def search(candidate: Candidate) -> list[tuple[float, str]]:
        hits = vectors.search(
            db,
            collection,
            candidate.vector,
            1,
            level=candidate.level,
            session_key=(candidate.session_id or "-") if candidate.level == "explicit" else None,
            max_distance=NEAR_DISTANCE,
        )
        return [(distance, cid) for cid, distance in hits]

    found: dict[int, str | None] = {}
    asked: list[int] = []
    for index, candidate in enumerate(candidates):
        # (`local` holds only sessions that are named: one without a session has no local twins)
        stored = local.get(candidate.session_id) if candidate.level == "explicit" and candidate.session_id else None
        if stored is None:
            asked.append(index)
        else:
            found[index] = _nearest_within(candidate.vector, stored, NEAR_DISTANCE)
    if asked:
        recent = vectors.recent(db, ws, observer, observed)
        for index, hit in zip(asked, _searches.map(lambda i: search(candidates[i]), asked)):
            candidate = candidates[index]
            mine = [
                (cid, vector)
                for cid, level, session, vector in recent
                if level == candidate.level
                and (level != "explicit" or session == (candidate.session_id or vectors.NO_SESSION))
            ]
            nearest = min(_distances(candidate.vector, mine) + hit, default=None)
            found[index] = nearest[1] if nearest is not None and nearest[0] <= NEAR_DISTANCE else None
    return [found[i] for i in range(len(candidates))]


def _session_vectors(
    db: Db,
    ws: str,
    observer: str,
    observed: str,
    session_id: str,
) -> list[tuple[str, list[float]]] | None:
    """(id, vector) of the explicit conclusions `session_id` holds in the collection, or None when there are more than
    LOCAL_TWINS (or the session's DERIVED# items, all collections', fill more than a page of _PROVENANCE_PAGE)."""
    out = db.client.query(
        TableName=db.table,
        **provenance_request(ws, session_id),
        Limit=_PROVENANCE_PAGE,
        **projection(("SK", "observer_id", "observed_id")),
    )
    if "LastEvaluatedKey" in out:
        return None
    ids = [
        i["SK"]["S"].removeprefix("DERIVED#")
        for i in out["Items"]
        if i["observer_id"]["S"] == observer and i["observed_id"]["S"] == observed
    ]
    if len(ids) > LOCAL_TWINS:
        return None
    found = batch_get(
        db,
        [keys.conclusion_vector(ws, observer, observed, cid) for cid in ids],
        ("id", "level", vectors.SESSION_ATTRIBUTE, vectors.VECTOR_ATTRIBUTE),
    )
    return [
        (i["id"], i[vectors.VECTOR_ATTRIBUTE])
        for i in found
        if i.get("level") == "explicit" and i.get(vectors.SESSION_ATTRIBUTE) == session_id
    ]


def _nearest_within(vector: list[float], stored: list[tuple[str, list[float]]], distance: float) -> str | None:
    """The id of the stored vector nearest `vector` by cosine distance (as the index measures it), if within
    `distance`."""
    nearest = min(_distances(vector, stored), default=None)
    return nearest[1] if nearest is not None and nearest[0] <= distance else None


def _distances(vector: list[float], stored: list[tuple[str, list[float]]]) -> list[tuple[float, str]]:
    """(cosine distance from `vector`, as the index measures it; id) of each stored vector."""
    return [(vectors.cosine_distance(vector, other), stored_id) for stored_id, other in stored]
