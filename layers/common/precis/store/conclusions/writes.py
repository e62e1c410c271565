"""Conclusions written: deduplicated, in transactions that move the collection's head on (docs/design.md, Dedupe)."""

from __future__ import annotations

import random
import time
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError

from precis.errors import Invalid, NotFound, Throttled
from precis.store import keys
from precis.store.conclusions.dedupe import Candidate, distinct_words, merge_candidates, stored_twins, union
from precis.store.conclusions.items import (
    ATTEMPTS,
    CHUNK,
    CONDITION_FAILED,
    LEVELS,
    MAX_CONTENT,
    MAX_CREATE,
    ConclusionItem,
    Derived,
    EmbedsTexts,
    ExtraConditionFailed,
    SessionGone,
    as_conclusion,
    content_digest,
    new_conclusion_id,
    put_action,
    registry_item,
    text_item,
    vector_item,
    view,
)
from precis.store.db import (
    Db,
    batch_get,
    cancellation_codes,
    read_item,
    to_item,
    transact,
)
from precis.store.messages import check_text
from precis.store.resources import require_peers

_MAX_ACTIONS = 100  # DynamoDB's TransactWriteItems limit
_CHUNK_BYTES = 3_500_000  # under DynamoDB's 4 MB per transaction, with room for what the estimate misses
_KEEP_SOURCES = 100  # source message ids kept per conclusion (the newest): a conclusion derived often stays small


def _iso(now: datetime) -> str:
    """created_at at the millisecond of the id, so ordering by id and by created_at agree."""
    return now.astimezone(UTC).replace(microsecond=now.microsecond // 1000 * 1000).isoformat(timespec="microseconds")


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
    candidates = merge_candidates(items, embedder)
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


def _chunks(candidates: list[Candidate], fixed_actions: int, extra_bytes: int) -> Iterable[list[Candidate]]:
    """Runs of at most CHUNK conclusions whose transaction stays under 100 actions and 4 MB."""
    chunk: list[Candidate] = []
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
    chunk: list[Candidate],
    extra: list[dict[str, Any]],
    liveness: dict[str, Any] | None,
    created_at: str,
) -> list[dict[str, Any]]:
    """One transaction for `chunk`, planned against the head's version and retried (re-planned) when it moved."""
    for attempt in range(ATTEMPTS):
        head = read_item(db, keys.collection_head(ws, observer, observed))
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
            actions.append({"Put": {"TableName": db.table, "Item": to_item(registry_item(ws, observer, observed))}})
        checks_at = len(actions)
        if liveness is not None:
            actions.append(liveness)
        actions += extra
        try:
            transact(db, actions)
            return results
        except ClientError as exc:
            codes = cancellation_codes(exc)
            if not codes or set(codes) - {"None", CONDITION_FAILED, "TransactionConflict"}:
                raise
            if liveness is not None and codes[checks_at] == CONDITION_FAILED:
                session_id = liveness["ConditionCheck"]["Key"]["SK"]["S"].removeprefix("SESSION#")
                raise SessionGone(f"session '{session_id}' not found in workspace '{ws}' (it was deleted)") from None
            if CONDITION_FAILED in codes[checks_at + (liveness is not None) :]:
                raise ExtraConditionFailed([]) from None
        time.sleep(random.uniform(0, min(0.4, 0.01 * 2**attempt)))  # full jitter spreads concurrent writers out
    raise Throttled(f"collection '{observer}'/'{observed}' has too many concurrent writers; retry the request")


def _plan(
    db: Db,
    ws: str,
    observer: str,
    observed: str,
    chunk: list[Candidate],
    created_at: str,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int]:
    """The transaction's actions for `chunk` against what is stored now, the view each candidate will have, and how
    many conclusions it adds."""
    dedupe = [
        keys.conclusion_dedupe(ws, observer, observed, c.level, c.session_id, content_digest(c.content)) for c in chunk
    ]
    seen = {i["SK"]: i["id"] for i in batch_get(db, dedupe)}
    twins = iter(
        stored_twins(db, ws, observer, observed, [c for c, key in zip(chunk, dedupe) if key["SK"] not in seen])
    )
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


def _new_actions(
    db: Db, ws: str, observer: str, observed: str, members: list[Candidate], created_at: str, orphan: str | None
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
        put_action(db, item, "attribute_not_exists(PK)"),
        put_action(db, vector_item(ws, observer, observed, cid, first.level, first.session_id), vector=first.vector),
        put_action(db, text_item(ws, observer, observed, cid, first.level, first.session_id, first.content)),
        put_action(
            db,
            {
                **keys.conclusion_dedupe(ws, observer, observed, first.level, first.session_id, digest),
                "kind": "cdedupe",
                "id": cid,
            },
            dedupe_condition,
            {":orphan": orphan} if orphan else None,
        ),
        put_action(
            db,
            {**keys.conclusion_pointer(ws, cid), "kind": "cpointer", "observer_id": observer, "observed_id": observed},
        ),
    ]
    if first.session_id:
        actions.append(
            put_action(
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
    members: list[Candidate],
) -> tuple[ConclusionItem, list[dict[str, Any]]]:
    """A stored conclusion derived again: times_derived grows, provenance merges, the text that says more wins (its
    vector and dedupe key replace the old ones)."""
    observer, observed, cid = stored["observer_id"], stored["observed_id"], stored["id"]
    content, vector = stored["content"], None
    sources = list(stored.get("source_message_ids") or ())
    source_at: str | None = stored.get("source_at")
    source_ids = stored.get("source_ids")
    for member in members:
        if distinct_words(member.content) > distinct_words(content):
            content, vector = member.content, member.vector
        sources = union(sources, member.source_message_ids)
        source_at = max(filter(None, (source_at, member.source_at)), default=None)
        if member.source_ids is not None:
            source_ids = union(source_ids or [], member.source_ids)
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
            put_action(db, vector_item(ws, observer, observed, cid, level, session_id), vector=vector),
            put_action(db, text_item(ws, observer, observed, cid, level, session_id, content)),
            {
                "Delete": {
                    "TableName": db.table,
                    "Key": to_item(keys.conclusion_dedupe(ws, observer, observed, level, session_id, stored["norm"])),
                }
            },
            put_action(
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
