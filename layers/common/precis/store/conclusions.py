"""Conclusions (what an observer has concluded about an observed peer), their vectors, and peer cards.

A collection (ws, observer, observed) is one partition: conclusions `C#{id}` (ids sort by time, so the partition
reads newest first), vectors `V#{id}`, dedupe keys `D#…`, the card and the head. Every write to a collection's
conclusions is one transaction that moves the head's version on, conditioned on the version its dedupe reads saw:
two writers of the same text cannot both miss each other (the loser re-reads and counts the text as derived again).
Outside the partition: an id pointer per conclusion (GET/DELETE name only the workspace), a provenance item in the
session's partition (the session's purge deletes the conclusion), and the collection's registry item in the
workspace's partition (the workspace delete finds it).
"""

from __future__ import annotations

import hashlib
import math
import random
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NotRequired, Protocol, TypedDict, cast

from botocore.exceptions import ClientError

from precis.errors import Invalid, NotFound, Throttled
from precis.lexical import Document
from precis.sizes import fit_page
from precis.store import filters as filtering
from precis.store import keys, vectors
from precis.store.db import (
    Db,
    batch_get,
    cancellation_codes,
    each,
    error_code,
    from_item,
    projection,
    query_all,
    raise_if_throttled,
    to_item,
    transact,
)
from precis.store.messages import check_text
from precis.store.records import delete_keys, page
from precis.store.resources import gone_sessions, require_peers, require_workspace

if TYPE_CHECKING:
    from types_boto3_dynamodb.type_defs import TransactWriteItemTypeDef

ID_LEN = 21
_TIME_CHARS = keys.TIME_CHARS  # ids begin with their time (keys.ID_ALPHABET, ASCII order): ids sort by time
LEVELS = ("explicit", "deductive")
MAX_CONTENT = 65_535
MAX_CREATE = 100
NEAR_DISTANCE = 0.05  # cosine distance within which two conclusions say the same thing (docs/design.md, Dedupe)
CHUNK = 16  # conclusions per transaction: 5 actions each, leaving room for the head, the checks and `extra`
_MAX_ACTIONS = 100  # DynamoDB's TransactWriteItems limit
_searches = ThreadPoolExecutor(max_workers=CHUNK, thread_name_prefix="near-duplicates")  # a chunk's at once
_LOCAL_TWINS = 32  # a session's explicit conclusions in a collection compared here, not by the index, up to this many
_PROVENANCE_PAGE = 200  # DERIVED# items read to find them (a session's, every collection's); more: the index
_CHUNK_BYTES = 3_500_000  # under DynamoDB's 4 MB per transaction, with room for what the estimate misses
_ATTEMPTS = 25  # lost races (the head moved) before a write gives up with Throttled
_KEEP_SOURCES = 100  # source message ids kept per conclusion (the newest): a conclusion derived often stays small
_REMOVE_CHUNK = 16  # conclusions per delete transaction: 6 deletes each + the head
_WORD = re.compile(r"\w+")
_FILTER_KEYS = {"observer_id", "observed_id", "session_id", "id", "source_ids", "level", "created_at"}
# What a list reads of every candidate (not the content): enough to filter, order and fetch the page.
_LIST_FIELDS = ("PK", "SK", "id", "observer_id", "observed_id", "session_id", "level", "created_at", "source_ids")
_CCF = "ConditionalCheckFailed"
_ANY: Any = object()


class ConclusionItem(TypedDict):
    """A conclusion's item (`C#{id}` in its collection's partition) as the store reads it (decoded: plain values).
    Its vector, term counts, dedupe key, pointer and provenance are items of their own."""

    PK: str
    SK: str
    kind: str
    id: str
    content: str
    observer_id: str
    observed_id: str
    level: str
    created_at: str
    times_derived: int
    source_message_ids: list[str]
    source_at: str  # the newest source message's created_at (the write's time when none was given)
    norm: str  # the digest its dedupe key names
    cws: str  # the workspace and id again: the ByConclusion index's keys
    cid: str
    session_id: NotRequired[str]  # what it was derived from, when a session
    source_ids: NotRequired[list[str]]  # a deduction's premises


def as_conclusion(item: dict[str, Any]) -> ConclusionItem:
    """A decoded conclusion item (`db.from_item`'s dict) as a ConclusionItem: the one place it is taken to be one. A
    projected read holds only the fields it asked for."""
    return cast(ConclusionItem, item)


class EmbedsTexts(Protocol):
    """What the writes and the query ask of an embedder (`llm.Embedder` is one): a vector per text, in order."""

    def embed(self, texts: list[str]) -> list[list[float]]: ...


class ExtraConditionFailed(Exception):
    """A condition of the caller's `extra` actions failed, so nothing of that chunk was written: for the deriver, the
    chunk was applied already. `written` holds the views of the earlier chunks of the call, which were."""

    def __init__(self, written: list[dict[str, Any]]):
        super().__init__("a condition of the caller's extra actions failed; the chunk was not written")
        self.written = written


class SessionGone(NotFound):
    """The session conclusions were being written for was deleted, or created again, meanwhile."""


@dataclass(frozen=True)
class Derived:
    """A conclusion to write: `source_at` is the newest source message's created_at (None: the write's time)."""

    content: str
    level: str = "explicit"
    session_id: str | None = None
    source_message_ids: Sequence[str] = ()
    source_at: str | None = None
    source_ids: Sequence[str] | None = None


@dataclass
class _Candidate:
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

    def absorb(self, other: _Candidate) -> None:
        """Merge a duplicate into this one, keeping the text that says more."""
        if _tokens(other.content) > _tokens(self.content):
            self.content, self.vector = other.content, other.vector
        self.positions += other.positions
        self.source_message_ids = _union(self.source_message_ids, other.source_message_ids)
        self.source_at = max(filter(None, (self.source_at, other.source_at)), default=None)
        if other.source_ids is not None:
            self.source_ids = _union(self.source_ids or [], other.source_ids)


# ---------------------------------------------------------------- ids, views

_RANDOM_BITS = 6 * (ID_LEN - _TIME_CHARS)
_last = [0, 0]  # the newest (ms, random part) this process made
_last_lock = threading.Lock()


_chars = keys.id_chars


def new_conclusion_id(now_ms: int | None = None) -> str:
    """A 21-char id: 8 chars of the millisecond time, then 13 random ones, so ids sort by creation time. Ids made
    by one process within one millisecond (a batch) are monotonic, as ULIDs are: they sort in the order made."""
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    with _last_lock:
        if ms == _last[0] and _last[1] + 1 < 2**_RANDOM_BITS:
            random_part = _last[1] + 1
        else:
            random_part = secrets.randbits(_RANDOM_BITS - 1)  # headroom to count up within the millisecond
        _last[:] = [ms, random_part]
    return _chars(ms, _TIME_CHARS) + _chars(random_part, ID_LEN - _TIME_CHARS)


def view(item: ConclusionItem) -> dict[str, Any]:
    """A conclusion as the API answers it (docs/design.md, "What the SDK sees")."""
    return {
        "id": item["id"],
        "content": item["content"],
        "observer_id": item["observer_id"],
        "observed_id": item["observed_id"],
        "session_id": item.get("session_id"),
        "level": item["level"],
        "created_at": item["created_at"],
        "times_derived": item.get("times_derived", 1),
        "source_ids": item.get("source_ids"),
    }


def content_digest(content: str) -> str:
    """What two conclusions equal but for case and surrounding space share (a collection's dedupe key holds it)."""
    return hashlib.sha1(content.strip().casefold().encode("utf-8")).hexdigest()


def _tokens(content: str) -> int:
    return len(set(_WORD.findall(content.casefold())))


def _union(first: Iterable[str], second: Iterable[str]) -> list[str]:
    return list(dict.fromkeys([*first, *second]))


def _iso(now: datetime) -> str:
    """created_at at the millisecond of the id, so ordering by id and by created_at agree."""
    return now.astimezone(UTC).replace(microsecond=now.microsecond // 1000 * 1000).isoformat(timespec="microseconds")


def _get(db: Db, key: dict[str, str]) -> dict[str, Any] | None:
    return from_item(db.client.get_item(TableName=db.table, Key=to_item(key), ConsistentRead=True).get("Item"))


# ---------------------------------------------------------------- writes


def write(
    db: Db,
    ws: str,
    observer: str,
    observed: str,
    items: Sequence[Derived],
    *,
    embedder: EmbedsTexts,
    extra: Sequence[dict[str, Any]] = (),
    incarnation: str | None = None,
    session_id_for_check: str | None = None,
    now: datetime | None = None,
) -> list[dict[str, Any]]:
    """Store `items` in the collection, deduplicated, in transactions of at most CHUNK conclusions; the views of
    what each item became, in order.

    Every chunk carries the caller's `extra` actions (the deriver's cursor: a chunk is applied exactly once) and, with
    `incarnation`, a check that the session (`session_id_for_check`, else the items' one) is that live incarnation:
    SessionGone when it is not, ExtraConditionFailed when an `extra` condition fails, nothing of that chunk written.
    """
    if not items:
        return []
    for item in items:
        if item.level not in LEVELS:
            raise Invalid(f"level: one of {', '.join(LEVELS)}, got '{item.level}'")
    now = now or datetime.now(UTC)
    liveness = None
    if incarnation is not None:
        session_id = session_id_for_check or _one_session(items)
        liveness = {
            "ConditionCheck": {
                "TableName": db.table,
                "Key": to_item(keys.session(ws, session_id)),
                "ConditionExpression": "incarnation = :inc AND attribute_not_exists(deleted_at)",
                "ExpressionAttributeValues": {":inc": {"S": incarnation}},
            }
        }
    candidates = _merge(items, embedder)
    ms = int(now.timestamp() * 1000)
    for candidate in candidates:
        candidate.new_id = new_conclusion_id(ms)
    views: list[dict[str, Any]] = [{}] * len(items)
    written: list[dict[str, Any]] = []
    fixed = 2 + (liveness is not None) + len(extra)  # the head, the registry, the session check, the caller's
    for chunk in _chunks(candidates, fixed, sum(len(str(a)) for a in extra)):
        try:
            results = _write_chunk(db, ws, observer, observed, chunk, list(extra), liveness, _iso(now))
        except ExtraConditionFailed:
            raise ExtraConditionFailed(written) from None
        for candidate, result in zip(chunk, results):
            for position in candidate.positions:
                views[position] = result
            written.append(result)
    return views


def _one_session(items: Sequence[Derived]) -> str:
    sessions = {i.session_id for i in items}
    session = next(iter(sessions)) if len(sessions) == 1 else None
    if session is None:
        raise ValueError("write: an incarnation check needs session_id_for_check or items of one session")
    return session


def _merge(items: Sequence[Derived], embedder: EmbedsTexts) -> list[_Candidate]:
    """The call's distinct conclusions: exact duplicates first, then (embedded) near duplicates, merged."""
    exact: dict[tuple[str, str | None, str], _Candidate] = {}
    for position, item in enumerate(items):
        candidate = _Candidate(
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
    kept: list[_Candidate] = []
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


def _same_scope(a: _Candidate, b: _Candidate) -> bool:
    """Whether two conclusions may be duplicates: same level and, for explicit ones, the same session."""
    return a.level == b.level and (a.level != "explicit" or a.session_id == b.session_id)


def _chunks(candidates: list[_Candidate], fixed_actions: int, extra_bytes: int) -> Iterable[list[_Candidate]]:
    """Runs of at most CHUNK conclusions whose transaction stays under 100 actions and 4 MB."""
    chunk: list[_Candidate] = []
    size = extra_bytes
    for candidate in candidates:
        cost = (
            2_000
            + len(candidate.content.encode("utf-8"))
            + 24 * len(candidate.vector)
            + 30 * len(candidate.source_message_ids)
            + 30 * len(candidate.source_ids or ())
        )
        if chunk and (
            len(chunk) == CHUNK or fixed_actions + 6 * (len(chunk) + 1) > _MAX_ACTIONS or size + cost > _CHUNK_BYTES
        ):
            yield chunk
            chunk, size = [], extra_bytes
        chunk.append(candidate)
        size += cost
    if chunk:
        yield chunk


def _write_chunk(
    db: Db,
    ws: str,
    observer: str,
    observed: str,
    chunk: list[_Candidate],
    extra: list[dict[str, Any]],
    liveness: dict[str, Any] | None,
    created_at: str,
) -> list[dict[str, Any]]:
    """One transaction for `chunk`, planned against the head's version and retried (re-planned) when it moved."""
    for attempt in range(_ATTEMPTS):
        head = _get(db, keys.collection_head(ws, observer, observed))
        version = head["version"] if head else 0
        actions, results, added = _plan(db, ws, observer, observed, chunk, created_at)
        head_update = {
            "TableName": db.table,
            "Key": to_item(keys.collection_head(ws, observer, observed)),
            "UpdateExpression": "SET version = :next ADD #count :added",
            "ConditionExpression": "version = :v" if head else "attribute_not_exists(version)",
            "ExpressionAttributeNames": {"#count": "count"},
            "ExpressionAttributeValues": to_item(
                {":next": version + 1, ":added": added, **({":v": version} if head else {})}
            ),
        }
        actions.append({"Update": head_update})
        if head is None:
            actions.append({"Put": {"TableName": db.table, "Item": to_item(_registry_item(ws, observer, observed))}})
        checks_at = len(actions)
        if liveness is not None:
            actions.append(liveness)
        actions += extra
        try:
            transact(db, actions)
            return results
        except ClientError as exc:
            codes = cancellation_codes(exc)
            if not codes or set(codes) - {"None", _CCF, "TransactionConflict"}:
                raise
            if liveness is not None and codes[checks_at] == _CCF:
                session_id = liveness["ConditionCheck"]["Key"]["SK"]["S"].removeprefix("SESSION#")
                raise SessionGone(f"session '{session_id}' not found in workspace '{ws}' (it was deleted)") from None
            if _CCF in codes[checks_at + (liveness is not None) :]:
                raise ExtraConditionFailed([]) from None
        time.sleep(random.uniform(0, min(0.4, 0.01 * 2**attempt)))  # full jitter spreads concurrent writers out
    raise Throttled(f"collection '{observer}'/'{observed}' has too many concurrent writers; retry the request")


def _plan(
    db: Db,
    ws: str,
    observer: str,
    observed: str,
    chunk: list[_Candidate],
    created_at: str,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int]:
    """The transaction's actions for `chunk` against what is stored now, the view each candidate will have, and how
    many conclusions it adds."""
    dedupe = [
        keys.conclusion_dedupe(ws, observer, observed, c.level, c.session_id, content_digest(c.content)) for c in chunk
    ]
    seen = {i["SK"]: i["id"] for i in batch_get(db, dedupe)}
    twins = iter(_twins(db, ws, observer, observed, [c for c, key in zip(chunk, dedupe) if key["SK"] not in seen]))
    matched = [seen[key["SK"]] if key["SK"] in seen else next(twins) for key in dedupe]
    ids = list(dict.fromkeys(m for m in matched if m))
    stored = {
        i["id"]: as_conclusion(i) for i in batch_get(db, [keys.conclusion(ws, observer, observed, i) for i in ids])
    }
    targets = [m if m is not None and m in stored else c.new_id for c, m in zip(chunk, matched)]
    groups: dict[str, list[int]] = {}
    for index, target in enumerate(targets):
        groups.setdefault(target, []).append(index)
    actions: list[dict[str, Any]] = []
    views: dict[str, dict[str, Any]] = {}
    for target, members in groups.items():
        if target in stored:
            item, more = _merged_actions(db, ws, stored[target], [chunk[i] for i in members])
        else:
            # A dedupe key whose conclusion is gone is taken over (its id is `orphan`).
            item, more = _new_actions(
                db,
                ws,
                observer,
                observed,
                [chunk[i] for i in members],
                created_at,
                orphan=seen.get(dedupe[members[0]]["SK"]),
            )
        actions += more
        views[target] = view(item)
    return actions, [views[t] for t in targets], sum(1 for t in groups if t not in stored)


def _twins(db: Db, ws: str, observer: str, observed: str, candidates: list[_Candidate]) -> list[str | None]:
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

    def search(candidate: _Candidate) -> list[tuple[float, str]]:
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
    _LOCAL_TWINS (or the session's DERIVED# items, all collections', fill more than a page of _PROVENANCE_PAGE)."""
    out = db.client.query(
        TableName=db.table,
        **_provenance_request(ws, session_id),
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
    if len(ids) > _LOCAL_TWINS:
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


def _put(
    db: Db,
    item: Mapping[str, Any],
    condition: str | None = None,
    values: dict[str, Any] | None = None,
    vector: list[float] | None = None,
) -> dict[str, Any]:
    stored = to_item(item)
    if vector is not None:
        stored["vec"] = vectors.vector_attribute(vector)
    put: dict[str, Any] = {"TableName": db.table, "Item": stored}
    if condition:
        put["ConditionExpression"] = condition
    if values:
        put["ExpressionAttributeValues"] = to_item(values)
    return {"Put": put}


def vector_item(
    ws: str, observer: str, observed: str, conclusion_id: str, level: str, session_id: str | None
) -> dict[str, Any]:
    """A conclusion's vector item, without its vector (`vectors.vector_attribute` adds it as the table stores it)."""
    return {
        **keys.conclusion_vector(ws, observer, observed, conclusion_id),
        "kind": "cvector",
        "id": conclusion_id,
        "vcoll": keys.collection_name(ws, observer, observed),
        "level": level,
        "vsession": session_id or "-",
    }


def _text_item(
    ws: str, observer: str, observed: str, conclusion_id: str, level: str, session_id: str | None, content: str
) -> dict[str, Any]:
    """A conclusion's term counts (`precis.lexical`), small, for its collection's lexical ranking."""
    document = Document.of(content)
    return {
        **keys.conclusion_text(ws, observer, observed, conclusion_id),
        "kind": "ctext",
        "id": conclusion_id,
        "level": level,
        "vsession": session_id or "-",
        "tsig": document.signature(),
        "tlen": document.length,
    }


def _registry_item(ws: str, observer: str, observed: str) -> dict[str, Any]:
    return {
        **keys.collection_registry(ws, observer, observed),
        "kind": "collection",
        "observer_id": observer,
        "observed_id": observed,
    }


def _new_actions(
    db: Db, ws: str, observer: str, observed: str, members: list[_Candidate], created_at: str, orphan: str | None
) -> tuple[ConclusionItem, list[dict[str, Any]]]:
    """A new conclusion: its item, vector, dedupe key, pointer and (with a session) provenance."""
    first = replace(members[0], positions=list(members[0].positions))  # the chunk may be planned again: copy
    for other in members[1:]:  # several of the chunk matched one conclusion that is gone
        first.absorb(other)
    cid, digest = first.new_id, content_digest(first.content)
    key = keys.conclusion(ws, observer, observed, cid)
    item: ConclusionItem = {
        "PK": key["PK"],
        "SK": key["SK"],
        "kind": "conclusion",
        "id": cid,
        "content": first.content,
        "observer_id": observer,
        "observed_id": observed,
        "level": first.level,
        "created_at": created_at,
        "times_derived": len(first.positions),
        "source_message_ids": first.source_message_ids[-_KEEP_SOURCES:],
        "source_at": first.source_at or created_at,
        "norm": digest,
        "cws": ws,
        "cid": cid,
    }
    # (what is None is not stored)
    if first.session_id is not None:
        item["session_id"] = first.session_id
    if first.source_ids is not None:
        item["source_ids"] = first.source_ids
    # Any dedupe key but an orphan means a lost race: the transaction fails and the chunk is planned again.
    dedupe_condition = "attribute_not_exists(SK)" + (" OR id = :orphan" if orphan else "")
    actions = [
        _put(db, item, "attribute_not_exists(PK)"),
        _put(db, vector_item(ws, observer, observed, cid, first.level, first.session_id), vector=first.vector),
        _put(db, _text_item(ws, observer, observed, cid, first.level, first.session_id, first.content)),
        _put(
            db,
            {
                **keys.conclusion_dedupe(ws, observer, observed, first.level, first.session_id, digest),
                "kind": "cdedupe",
                "id": cid,
            },
            dedupe_condition,
            {":orphan": orphan} if orphan else None,
        ),
        _put(
            db,
            {**keys.conclusion_pointer(ws, cid), "kind": "cpointer", "observer_id": observer, "observed_id": observed},
        ),
    ]
    if first.session_id:
        actions.append(
            _put(
                db,
                {
                    **keys.conclusion_provenance(ws, first.session_id, cid),
                    "kind": "derived",
                    "observer_id": observer,
                    "observed_id": observed,
                },
            )
        )
    return item, actions


def _merged_actions(
    db: Db,
    ws: str,
    stored: ConclusionItem,
    members: list[_Candidate],
) -> tuple[ConclusionItem, list[dict[str, Any]]]:
    """A stored conclusion derived again: times_derived grows, provenance merges, the text that says more wins (its
    vector and dedupe key replace the old ones)."""
    observer, observed, cid = stored["observer_id"], stored["observed_id"], stored["id"]
    content, vector = stored["content"], None
    sources = list(stored.get("source_message_ids") or ())
    source_at: str | None = stored.get("source_at")
    source_ids = stored.get("source_ids")
    for member in members:
        if _tokens(member.content) > _tokens(content):
            content, vector = member.content, member.vector
        sources = _union(sources, member.source_message_ids)
        source_at = max(filter(None, (source_at, member.source_at)), default=None)
        if member.source_ids is not None:
            source_ids = _union(source_ids or [], member.source_ids)
    item: ConclusionItem = {
        **stored,
        "content": content,
        "norm": content_digest(content),
        "source_message_ids": sources[-_KEEP_SOURCES:],
        "times_derived": stored.get("times_derived", 1) + sum(len(m.positions) for m in members),
    }
    if source_at is not None:
        item["source_at"] = source_at
    if source_ids is not None:
        item["source_ids"] = source_ids
    changes: dict[str, Any] = {
        "content": item["content"],
        "norm": item["norm"],
        "source_message_ids": item["source_message_ids"],
        "source_at": source_at,
        "times_derived": item["times_derived"],
    }
    if source_ids is not None:
        changes["source_ids"] = source_ids
    names = {f"#a{i}": k for i, k in enumerate(changes)}
    actions: list[dict[str, Any]] = [
        {
            "Update": {
                "TableName": db.table,
                "Key": to_item(keys.conclusion(ws, observer, observed, cid)),
                "UpdateExpression": "SET " + ", ".join(f"{n} = :v{i}" for i, n in enumerate(names)),
                "ConditionExpression": "attribute_exists(PK)",
                "ExpressionAttributeNames": names,
                "ExpressionAttributeValues": to_item({f":v{i}": v for i, v in enumerate(changes.values())}),
            }
        }
    ]
    if vector is not None:
        level, session_id = stored["level"], stored.get("session_id")
        actions += [
            _put(db, vector_item(ws, observer, observed, cid, level, session_id), vector=vector),
            _put(db, _text_item(ws, observer, observed, cid, level, session_id, content)),
            {
                "Delete": {
                    "TableName": db.table,
                    "Key": to_item(keys.conclusion_dedupe(ws, observer, observed, level, session_id, stored["norm"])),
                }
            },
            _put(
                db,
                {
                    **keys.conclusion_dedupe(ws, observer, observed, level, session_id, item["norm"]),
                    "kind": "cdedupe",
                    "id": cid,
                },
                "attribute_not_exists(SK)",
            ),
        ]
    return item, actions


def create(db: Db, ws: str, payload: Sequence[dict[str, Any]], *, embedder: EmbedsTexts) -> list[dict[str, Any]]:
    """POST /conclusions: explicit conclusions written by a client (peers and sessions must exist: NotFound)."""
    if not 1 <= len(payload) <= MAX_CREATE:
        raise Invalid(f"conclusions: 1 to {MAX_CREATE} per request, got {len(payload)}")
    for index, entry in enumerate(payload):
        content = entry["content"]
        if not 1 <= len(content) <= MAX_CONTENT:
            raise Invalid(f"conclusions[{index}].content: 1 to {MAX_CONTENT} characters, got {len(content)}")
        check_text(content, f"conclusions[{index}].content")
    require_peers(db, ws, *(p for e in payload for p in (e["observer_id"], e["observed_id"])))
    wanted = list(dict.fromkeys(e["session_id"] for e in payload if e.get("session_id")))
    sessions = {i["id"]: i for i in batch_get(db, [keys.session(ws, s) for s in wanted]) if "deleted_at" not in i}
    for session_id in wanted:
        if session_id not in sessions:
            raise NotFound(f"session '{session_id}' not found in workspace '{ws}'")
    groups: dict[tuple[str, str, str | None], list[int]] = {}
    for index, entry in enumerate(payload):
        groups.setdefault((entry["observer_id"], entry["observed_id"], entry.get("session_id")), []).append(index)
    views: list[dict[str, Any]] = [{}] * len(payload)
    now = datetime.now(UTC)
    for (observer, observed, session_id), positions in groups.items():
        written = write(
            db,
            ws,
            observer,
            observed,
            [Derived(payload[i]["content"], session_id=session_id) for i in positions],
            embedder=embedder,
            incarnation=sessions[session_id].get("incarnation") if session_id else None,
            now=now,
        )
        for position, result in zip(positions, written):
            views[position] = result
    return views


# ---------------------------------------------------------------- reads


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
    require_workspace(db, ws)
    records = [r for r in _candidates(db, ws, filters) if filtering.matches(filters, _filter_view(r))]
    answer = page(records, page_no, size, reverse, fit=False)
    found = {
        i["id"]: as_conclusion(i) for i in batch_get(db, [{"PK": r["PK"], "SK": r["SK"]} for r in answer["items"]])
    }
    shown = live(db, ws, [found[r["id"]] for r in answer["items"] if r["id"] in found])
    answer["items"] = [view(i) for i in shown]
    return fit_page(answer)


def live[C: Mapping[str, Any]](db: Db, ws: str, conclusions: Sequence[C]) -> list[C]:
    """`conclusions` but those drawn in a deleted session, which are invisible from the moment its delete answers
    (its purge removes them later): one BatchGetItem of their distinct sessions, none when no conclusion names one.
    Until then `total` and `pages` still count them."""
    gone = gone_sessions(db, ws, {c["session_id"] for c in conclusions if c.get("session_id")})
    return [c for c in conclusions if c.get("session_id") not in gone] if gone else list(conclusions)


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


def _locate(db: Db, ws: str, conclusion_id: str) -> ConclusionItem:
    pointer = _get(db, keys.conclusion_pointer(ws, conclusion_id))
    item = pointer and _get(db, keys.conclusion(ws, pointer["observer_id"], pointer["observed_id"], conclusion_id))
    if not item or not live(db, ws, [item]):
        raise NotFound(f"conclusion '{conclusion_id}' not found in workspace '{ws}'")
    return as_conclusion(item)


def get(db: Db, ws: str, conclusion_id: str) -> dict[str, Any]:
    return view(_locate(db, ws, conclusion_id))


# ---------------------------------------------------------------- deletes


def delete(db: Db, ws: str, conclusion_id: str) -> None:
    """Delete a conclusion with its vector, dedupe key, pointer and provenance (NotFound when there is none)."""
    item = _locate(db, ws, conclusion_id)
    if not _remove(db, ws, item["observer_id"], item["observed_id"], [conclusion_id]):
        raise NotFound(f"conclusion '{conclusion_id}' not found in workspace '{ws}'")


def _remove(db: Db, ws: str, observer: str, observed: str, ids: list[str]) -> int:
    """Delete these conclusions of one collection and count them off the head; how many were there."""
    removed = 0
    for start in range(0, len(ids), _REMOVE_CHUNK):
        chunk = ids[start : start + _REMOVE_CHUNK]
        for attempt in range(_ATTEMPTS):
            items = [
                as_conclusion(i) for i in batch_get(db, [keys.conclusion(ws, observer, observed, i) for i in chunk])
            ]
            if not items:
                break
            actions = [a for item in items for a in _delete_actions(db, ws, item)]
            actions.append(
                {
                    "Update": {
                        "TableName": db.table,
                        "Key": to_item(keys.collection_head(ws, observer, observed)),
                        "UpdateExpression": "ADD version :one, #count :gone",
                        "ExpressionAttributeNames": {"#count": "count"},
                        "ExpressionAttributeValues": to_item({":one": 1, ":gone": -len(items)}),
                    }
                }
            )
            try:
                transact(db, actions)
            except ClientError as exc:
                codes = cancellation_codes(exc)
                if not codes or set(codes) - {"None", _CCF, "TransactionConflict"}:
                    raise
                time.sleep(random.uniform(0, min(0.4, 0.01 * 2**attempt)))  # changed or deleted meanwhile: re-read
                continue
            removed += len(items)
            break
        else:
            raise Throttled(f"collection '{observer}'/'{observed}' is busy; retry the delete")
    return removed


def _delete_actions(db: Db, ws: str, item: ConclusionItem) -> list[dict[str, Any]]:
    """Deletes of a conclusion and what belongs to it; conditioned on its text as read (a concurrent write that
    replaces the text also replaces the dedupe key named here)."""
    observer, observed, cid = item["observer_id"], item["observed_id"], item["id"]
    doomed = [
        keys.conclusion_vector(ws, observer, observed, cid),
        keys.conclusion_text(ws, observer, observed, cid),
        keys.conclusion_dedupe(ws, observer, observed, item["level"], item.get("session_id"), item["norm"]),
        keys.conclusion_pointer(ws, cid),
    ]
    if item.get("session_id"):
        doomed.append(keys.conclusion_provenance(ws, item["session_id"], cid))
    return [
        {
            "Delete": {
                "TableName": db.table,
                "Key": to_item(keys.conclusion(ws, observer, observed, cid)),
                "ConditionExpression": "norm = :norm",
                "ExpressionAttributeValues": {":norm": {"S": item["norm"]}},
            }
        },
        *({"Delete": {"TableName": db.table, "Key": to_item(k)}} for k in doomed),
    ]


def purge_session_conclusions(
    db: Db, ws: str, session_id: str, *, time_left: Callable[[], float] = lambda: math.inf
) -> tuple[int, bool]:
    """Delete the conclusions drawn from the session (its DERIVED# items name them): (how many, done?). Stops when
    `time_left()` runs under zero between transactions (a collection's are _REMOVE_CHUNK conclusions each); what it
    did is gone from the list, so a new call resumes."""
    provenance = _provenance(db, ws, session_id)
    by_collection: dict[tuple[str, str], list[str]] = {}
    for item in provenance:
        by_collection.setdefault((item["observer_id"], item["observed_id"]), []).append(
            item["SK"].removeprefix("DERIVED#")
        )
    removed = 0
    for (observer, observed), ids in by_collection.items():
        for start in range(0, len(ids), _REMOVE_CHUNK):
            if time_left() < 0:
                return removed, False
            removed += _remove(db, ws, observer, observed, ids[start : start + _REMOVE_CHUNK])
    return removed, True


def _provenance(db: Db, ws: str, session_id: str) -> list[dict[str, Any]]:
    return query_all(db, **_provenance_request(ws, session_id))


def _provenance_request(ws: str, session_id: str) -> dict[str, Any]:
    """A consistent Query of the session's DERIVED# items (which name the conclusions drawn from it)."""
    return {
        "KeyConditionExpression": "PK = :pk AND begins_with(SK, :d)",
        "ConsistentRead": True,
        "ExpressionAttributeValues": to_item({":pk": keys.session_pk(ws, session_id), ":d": "DERIVED#"}),
    }


def remove_session_copies(db: Db, ws: str, session_id: str, observer: str) -> int:
    """Delete the conclusions `observer` holds from the session (a scope losing a member session)."""
    by_observed: dict[str, list[str]] = {}
    for item in _provenance(db, ws, session_id):
        if item["observer_id"] == observer:
            by_observed.setdefault(item["observed_id"], []).append(item["SK"].removeprefix("DERIVED#"))
    return sum(_remove(db, ws, observer, observed, ids) for observed, ids in by_observed.items())


def session_explicit(db: Db, ws: str, session_id: str) -> dict[str, list[Derived]]:
    """The explicit conclusions derived in the session, one per fact (each observed peer's view of itself), by
    observed peer, oldest first: what a scope that gains the session copies in."""
    own = [i for i in _provenance(db, ws, session_id) if i["observer_id"] == i["observed_id"]]
    found = batch_get(
        db, [keys.conclusion(ws, i["observer_id"], i["observed_id"], i["SK"].removeprefix("DERIVED#")) for i in own]
    )
    by_observed: dict[str, list[Derived]] = {}
    for item in sorted(map(as_conclusion, found), key=lambda i: i["id"]):
        if item.get("level") == "explicit":
            by_observed.setdefault(item["observed_id"], []).append(
                Derived(
                    item["content"],
                    session_id=session_id,
                    source_message_ids=tuple(item.get("source_message_ids") or ()),
                    source_at=item.get("source_at"),
                )
            )
    return by_observed


def delete_collections(db: Db, ws: str) -> int:
    """Remove every collection registered in the workspace (all items of each, and its conclusions' pointers);
    how many items. For the workspace delete: its sessions are gone, so nothing writes to these any more."""
    deleted = 0
    registry = query_all(
        db,
        KeyConditionExpression="PK = :pk AND begins_with(SK, :c)",
        ConsistentRead=True,
        ExpressionAttributeValues=to_item({":pk": f"WS#{ws}", ":c": "COLL#"}),
    )
    for entry in registry:
        items = query_all(
            db,
            KeyConditionExpression="PK = :pk",
            ProjectionExpression="PK, SK",
            ConsistentRead=True,
            ExpressionAttributeValues=to_item(
                {":pk": keys.collection_pk(ws, entry["observer_id"], entry["observed_id"])}
            ),
        )
        pointers = [keys.conclusion_pointer(ws, i["SK"].removeprefix("C#")) for i in items if i["SK"].startswith("C#")]
        deleted += delete_keys(db, [*pointers, *items, {"PK": entry["PK"], "SK": entry["SK"]}])
    return deleted


# ---------------------------------------------------------------- cards


def collection_contents(db: Db, ws: str, observer: str, observed: str) -> list[ConclusionItem]:
    """Every conclusion of the collection, oldest first: its id, content and level (strongly consistent)."""
    items = query_all(
        db,
        KeyConditionExpression="PK = :pk AND begins_with(SK, :c)",
        ConsistentRead=True,
        ProjectionExpression="id, content, #l",
        ExpressionAttributeNames={"#l": "level"},
        ExpressionAttributeValues=to_item({":pk": keys.collection_pk(ws, observer, observed), ":c": "C#"}),
    )
    return [as_conclusion(i) for i in items]


def newest_contents(db: Db, ws: str, observer: str, observed: str, limit: int) -> list[str]:
    """The contents of the collection's `limit` newest conclusions, oldest first (one Query, strongly consistent)."""
    out = db.client.query(
        TableName=db.table,
        KeyConditionExpression="PK = :pk AND begins_with(SK, :c)",
        ConsistentRead=True,
        ScanIndexForward=False,
        Limit=limit,
        ProjectionExpression="content",
        ExpressionAttributeValues=to_item({":pk": keys.collection_pk(ws, observer, observed), ":c": "C#"}),
    )
    return [from_item(i)["content"] for i in reversed(out["Items"])]


def card_state(db: Db, ws: str, observer: str, observed: str) -> tuple[list[str] | None, dict[str, int], str | None]:
    """(entries, counts, source) of the collection's card: what the deriver updates from."""
    item = _get(db, keys.card(ws, observer, observed))
    if item is None:
        return None, {}, None
    return item.get("entries"), item.get("counts") or {}, item.get("source")


def get_card(db: Db, ws: str, observer: str, observed: str) -> list[str] | None:
    return card_state(db, ws, observer, observed)[0]


def put_card(db: Db, ws: str, observer: str, observed: str, entries: list[str], *, source: str = "client") -> list[str]:
    """Replace the card (the caller checked the entries and the peers)."""
    _write_card(db, ws, observer, observed, entries, {}, source)
    return entries


def write_card(
    db: Db,
    ws: str,
    observer: str,
    observed: str,
    entries: list[str],
    counts: dict[str, int],
    *,
    previous: list[str] | None = _ANY,
    extra: Sequence[dict[str, Any]] = (),
) -> bool:
    """Store a derived card. With `previous` (the entries card_state read, None for no card) only while the card
    still holds them, so a client's PUT meanwhile is not overwritten: False when it was not written. `extra`
    actions go into the same transaction (ExtraConditionFailed when one of them refuses)."""
    condition = None
    if previous is not _ANY:
        condition = (
            ("attribute_not_exists(entries)", {}) if previous is None else ("entries = :prev", {":prev": previous})
        )
    return _write_card(db, ws, observer, observed, entries, counts, "derived", condition, extra)


def _write_card(
    db: Db,
    ws: str,
    observer: str,
    observed: str,
    entries: list[str],
    counts: dict[str, int],
    source: str,
    condition: tuple[str, dict[str, Any]] | None = None,
    extra: Sequence[dict[str, Any]] = (),
) -> bool:
    item = {
        **keys.card(ws, observer, observed),
        "kind": "card",
        "entries": list(entries),
        "counts": counts,
        "source": source,
        "updated_at": datetime.now(UTC).isoformat(timespec="microseconds"),
    }
    try:
        transact(db, [_put(db, item, *(condition or ())), _put(db, _registry_item(ws, observer, observed)), *extra])
    except ClientError as exc:
        codes = cancellation_codes(exc)
        if _CCF in codes[2:]:
            raise ExtraConditionFailed([]) from None
        if codes[:1] == [_CCF]:
            return False
        raise
    return True


def write_card_step(
    db: Db,
    ws: str,
    observer: str,
    observed: str,
    proposed: tuple[list[str], dict[str, int]] | None,
    previous: list[str] | None,
    marker: dict[str, Any],
) -> None:
    """A stored job's card step: the proposed card (or, with none, the step's `marker` alone) in one transaction with
    the marker; a step applied already, or a card a client replaced meanwhile, leaves things as they are."""
    try:
        if proposed is None:
            # The marker is a plain-dict action, as the store builds them (see db.transact); DynamoDB checks its shape.
            db.client.transact_write_items(TransactItems=[cast("TransactWriteItemTypeDef", marker)])
        else:
            write_card(db, ws, observer, observed, *proposed, previous=previous, extra=[marker])
    except ExtraConditionFailed:
        pass
    except ClientError as exc:
        raise_if_throttled(exc)
        if error_code(exc) != "TransactionCanceledException":
            raise


# ---------------------------------------------------------------- the upgrade's backfill (deploy/reindex.py)


def write_missing_texts(db: Db, ws: str, observer: str, observed: str, *, dry_run: bool = False) -> tuple[int, int]:
    """Give every conclusion of the collection stored before text items existed its `L#` item (from its content), so
    the collection's lexical ranking finds it; (conclusions, text items written, or missing when `dry_run`). Each put
    holds only while the conclusion is there (a deleted one gets none) and no text item is (one a merge wrote
    meanwhile is newer): run again, it writes nothing."""
    pk = keys.collection_pk(ws, observer, observed)

    def read(prefix: str, fields: tuple[str, ...]) -> list[dict[str, Any]]:
        return query_all(
            db,
            KeyConditionExpression="PK = :pk AND begins_with(SK, :p)",
            ConsistentRead=True,
            ExpressionAttributeValues=to_item({":pk": pk, ":p": prefix}),
            **projection(fields),
        )

    stored = read("C#", ("id", "content", "level", "session_id"))
    have = {i["SK"].removeprefix("L#") for i in read("L#", ("SK",))}
    todo = [i for i in stored if i["id"] not in have]
    if dry_run or not todo:
        return len(stored), len(todo)
    with ThreadPoolExecutor(max_workers=8, thread_name_prefix="conclusion-texts") as pool:
        return len(stored), sum(each(pool, lambda i: _put_missing_text(db, ws, observer, observed, i), todo))


def _put_missing_text(db: Db, ws: str, observer: str, observed: str, stored: dict[str, Any]) -> int:
    cid = stored["id"]
    text = _text_item(ws, observer, observed, cid, stored["level"], stored.get("session_id"), stored["content"])
    try:
        transact(
            db,
            [
                {
                    "ConditionCheck": {
                        "TableName": db.table,
                        "Key": to_item(keys.conclusion(ws, observer, observed, cid)),
                        "ConditionExpression": "attribute_exists(PK)",
                    }
                },
                _put(db, text, "attribute_not_exists(PK)"),
            ],
        )
        return 1
    except ClientError as exc:
        if _CCF in cancellation_codes(exc):
            return 0  # deleted meanwhile, or its text written meanwhile
        raise
