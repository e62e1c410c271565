"""Reading the index under a `Budget`: BM25 over a workspace's (or a peer's) messages, and a session's texts."""

from __future__ import annotations

import math
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from precis.lexical import Document, Key, Query, idf, query_terms, saturation
from precis.store import keys
from precis.store.db import Db, batch_get, each, from_item, to_item
from precis.store.text_index.items import DOC_PART, FRESH_SHARDS, Doc, bucket, pool, unpack
from precis.store.text_index.manifest import Manifest, fresh_shard, read_manifest
from precis.store.text_index.texts import session_states


def _setting(name: str, default: float) -> float:
    value = os.environ.get(name)
    return float(value) if value else default


@dataclass
class Budget:
    """What one search may read: requests, bytes (as stored) and seconds, defaults from PRECIS_SEARCH_MAX_REQUESTS
    (64), PRECIS_SEARCH_MAX_BYTES (8 MB) and PRECIS_SEARCH_MAX_SECONDS (5). `exhausted` once something was left
    unread for it."""

    requests: int = field(default_factory=lambda: int(_setting("PRECIS_SEARCH_MAX_REQUESTS", 64)))
    bytes: int = field(default_factory=lambda: int(_setting("PRECIS_SEARCH_MAX_BYTES", 8_000_000)))
    seconds: float = field(default_factory=lambda: _setting("PRECIS_SEARCH_MAX_SECONDS", 5.0))
    resolve: int = 10_000  # candidates resolved to (session, seq) at most, however many tie at the k-th score
    used_requests: int = 0
    used_bytes: int = 0
    exhausted: bool = False
    started: float = field(default_factory=time.monotonic)

    def spend(self, requests: int, nbytes: int) -> None:
        self.used_requests += requests
        self.used_bytes += nbytes

    def allows(self, requests: int = 1) -> bool:
        """Whether `requests` more may be made; marks the budget exhausted when not."""
        ok = (
            self.used_requests + requests <= self.requests
            and self.used_bytes < self.bytes
            and time.monotonic() - self.started < self.seconds
        )
        if not ok:
            self.exhausted = True
        return ok


def _size(item: Mapping[str, Any]) -> int:
    return sum(len(k) + (len(v) if isinstance(v, (str, bytes)) else 8) for k, v in item.items())


def _get(db: Db, key_list: list[dict[str, str]], budget: Budget, *, bounded: bool = True) -> list[dict[str, Any]]:
    """BatchGetItems of `key_list`, each while the budget allows one more request (every one, not `bounded`: what
    resolves a ranking's winners, k at a time, is read whatever is left)."""
    found: list[dict[str, Any]] = []
    for start in range(0, len(key_list), 100):
        if bounded and not budget.allows():
            break
        got = batch_get(db, key_list[start : start + 100])
        budget.spend(1, sum(map(_size, got)))
        found += got
    return found


@dataclass
class _Read:
    """What one search read of the index: the manifest, fresh docs, and each segment's postings of the query's terms
    (and speakers' statistics)."""

    manifest: Manifest
    fresh: list[Doc]
    postings: dict[tuple[str, str], list[int]]  # (segment, term) -> flat postings (number, count, length, speaker)
    df: dict[tuple[str, str], tuple[int, list[int]]]  # (segment, term) -> (its df, by speaker) when chunked
    headers: dict[str, dict[str, Any]]  # segment -> header


def _read(db: Db, ws: str, asked: Iterable[str], budget: Budget, with_headers: bool) -> _Read:
    asked = sorted(asked)
    for _attempt in range(3):
        manifest = read_manifest(db, ws)
        budget.spend(1, 0)
        fresh_items = each(pool(), lambda shard: fresh_shard(db, ws, shard), range(FRESH_SHARDS))
        budget.spend(FRESH_SHARDS, sum(_size(i) for items in fresh_items for i in items))
        fresh = [
            Doc(i["s"], int(seq), i.get("i") or "", peer, Document.parse(signature, int(length)))
            for items in fresh_items
            for i in items
            for seq, peer, length, signature in unpack(i["z"])
        ]
        wanted = [
            {"PK": keys.text_segment_pk(ws, s["id"]), "SK": f"T{b:05d}"}
            for s in manifest.segments
            for b in sorted({bucket(t, int(s["tb"])) for t in asked})
        ]
        if with_headers:
            wanted += [{"PK": keys.text_segment_pk(ws, s["id"]), "SK": "H"} for s in manifest.segments]
        postings: dict[tuple[str, str], list[int]] = {}
        df: dict[tuple[str, str], tuple[int, list[int]]] = {}
        headers: dict[str, dict[str, Any]] = {}
        chunked: list[tuple[str, str, int]] = []
        for item in _get(db, wanted, budget):
            segment = item["PK"].rpartition("#XG#")[2]
            data = unpack(item["z"])
            if item["SK"] == "H":
                headers[segment] = data
                continue
            for term in asked:
                if term in data["t"]:
                    postings[(segment, term)] = data["t"][term]
                elif term in data["c"]:
                    chunks, count, by_peer = data["c"][term]
                    df[(segment, term)] = (count, by_peer)
                    chunked.append((segment, term, chunks))
        # A long list's chunks, best postings first: the first chunk of each, then the second, while the budget lasts
        # (`_get` reads nothing once it is spent, and says so only then: a budget spent on the last chunk is not cut).
        depth = 0
        while wanted_chunks := [
            {"PK": keys.text_segment_pk(ws, seg), "SK": f"W{term}#{depth:04d}"}
            for seg, term, chunks in chunked
            if depth < chunks
        ]:
            for item in _get(db, wanted_chunks, budget):
                segment = item["PK"].rpartition("#XG#")[2]
                term = item["SK"][1:].rpartition("#")[0]
                postings.setdefault((segment, term), []).extend(unpack(item["z"]))
            depth += 1
        again = read_manifest(db, ws)
        budget.spend(1, 0)
        if again.version == manifest.version:
            return _Read(manifest, fresh, postings, df, headers)
    return _Read(manifest, fresh, postings, df, headers)


def rank_workspace(
    db: Db,
    ws: str,
    text: str,
    k: int,
    *,
    peer: str | None = None,
    keep: Callable[[Key], bool] | None = None,
    budget: Budget | None = None,
) -> list[tuple[Key, float]]:
    """The k messages of the workspace (of `peer` only, when given, with that peer's statistics; those `keep` keeps,
    when given, with the workspace's) that BM25 ranks best for `text`, best first, as ((session, seq), score): exact
    over every message in scope the budget let it read, the messages of deleted sessions and of earlier incarnations
    left out."""
    asked = query_terms(text)
    if not asked or k <= 0:
        return []
    budget = budget if budget is not None else Budget()
    read = _read(db, ws, asked, budget, peer is not None)
    segments = {s["id"]: s for s in read.manifest.segments}
    fresh = {(d.session, d.seq, d.incarnation): d for d in read.fresh if peer is None or d.peer == peer}

    def speaker_of(segment: str) -> int | None:
        """The number of `peer` among the segment's speakers (None: not one of them)."""
        names = (read.headers.get(segment) or {}).get("p") or []
        return names.index(peer) if peer in names else None

    # The scope's statistics.
    documents, total = len(fresh), sum(d.document.length for d in fresh.values())
    if peer is None:
        documents, total = documents + read.manifest.documents, total + read.manifest.total_length
    else:
        for segment in segments:
            number = speaker_of(segment)
            if number is not None:
                n, length = read.headers[segment]["s"][number]
                documents, total = documents + n, total + length
    if documents <= 0:
        return []
    average = total / documents
    df: Counter[str] = Counter()
    for d in fresh.values():
        df.update(t for t in asked if t in d.document.counts)
    mine = {segment: speaker_of(segment) if peer is not None else None for segment in segments}
    for (segment, term), (count, by_peer) in read.df.items():
        number = mine[segment]
        df[term] += count if peer is None else (by_peer[number] if number is not None else 0)
    for (segment, term), flat in read.postings.items():
        if (segment, term) in read.df:
            continue
        number = mine[segment]
        df[term] += len(flat) // 4 if peer is None else sum(1 for i in range(3, len(flat), 4) if flat[i] == number)
    weights = {t: idf(df[t], documents) * n for t, n in asked.items() if df[t] > 0}
    if not weights:
        return []

    # Every message with a term: its exact score, its terms summed in the query's order as a fresh one's are
    # (`Query.score`), not in the order the buckets were read: equal scores are then equal to the last bit, and a
    # tie goes to the smaller key wherever the two messages are indexed.
    parts: dict[tuple[str, Any], dict[str, float]] = {}
    for (segment, term), flat in read.postings.items():
        if term not in weights or segment not in segments:
            continue
        number, weight = mine[segment], weights[term]
        for i in range(0, len(flat), 4):
            if peer is not None and flat[i + 3] != number:
                continue
            parts.setdefault((segment, flat[i]), {})[term] = weight * saturation(flat[i + 1], flat[i + 2], average)
    scores = {key: sum(said[t] for t in weights if t in said) for key, said in parts.items()}
    query = Query(weights)
    for fresh_key, d in fresh.items():
        score = query.score(d.document, average)
        if score > 0:
            scores[("", fresh_key)] = score
    return _resolve(db, ws, scores, k, keep, budget)


def _resolve(
    db: Db,
    ws: str,
    scores: Mapping[tuple[str, Any], float],
    k: int,
    keep: Callable[[Key], bool] | None,
    budget: Budget,
) -> list[tuple[Key, float]]:
    """The k best of `scores` as ((session, seq), score), ties to the smaller key: each candidate's doc read from its
    segment's doc table, those of deleted sessions and earlier incarnations, those `keep` refuses, and repeats left
    out. Read in rounds, best first, until the k-th's score is above every unread one's; each round twice the last,
    so that many candidates tied at the k-th score (a speaker's name alone) take a few rounds, not one per session."""
    order = sorted(scores.items(), key=lambda kv: -kv[1])
    tables: dict[tuple[str, int], list[Any]] = {}
    sessions: dict[str, dict[str, Any] | None] = {}
    kept: dict[Key, float] = {}
    at, size = 0, max(2 * k, 20)
    while at < len(order):
        if len(kept) >= k and order[at][1] < sorted(kept.values(), reverse=True)[k - 1]:
            break
        if at >= budget.resolve:  # ties past it (or deleted sessions' messages) go unread: the answer says so
            budget.exhausted = True
            break
        batch = order[at : at + size]
        at, size = at + len(batch), 2 * size
        wanted = sorted({(seg, number // DOC_PART) for (seg, number), _ in batch if seg} - set(tables))
        doc_tables = [{"PK": keys.text_segment_pk(ws, s), "SK": f"D{j:05d}"} for s, j in wanted]
        for item in _get(db, doc_tables, budget, bounded=False):
            tables[(item["PK"].rpartition("#XG#")[2], int(item["SK"][1:]))] = unpack(item["z"])
        resolved = []
        for (seg, ref), score in batch:
            if not seg:
                resolved.append((ref, score))
            elif (seg, ref // DOC_PART) in tables:
                session, seq, incarnation = tables[(seg, ref // DOC_PART)][ref % DOC_PART]
                resolved.append(((session, seq, incarnation), score))
        fresh_ids = sorted({session for (session, _, _), _ in resolved} - set(sessions))
        if fresh_ids:
            found = session_states(db, ws, fresh_ids)
            budget.spend(math.ceil(len(fresh_ids) / 100), 0)
            sessions.update({s: found.get(s) for s in fresh_ids})
        for (session, seq, incarnation), score in resolved:
            held = sessions.get(session)
            if held is None or "deleted_at" in held or incarnation not in ("", held.get("incarnation") or ""):
                continue  # (a fresh unit its writer did not name an incarnation for is the session's)
            key = (session, int(seq))
            if keep is not None and not keep(key):
                continue
            kept[key] = max(kept.get(key, 0.0), score)
    return sorted(kept.items(), key=lambda hit: (-hit[1], hit[0]))[:k]


def session_texts(
    db: Db,
    ws: str,
    session_id: str,
    *,
    through: int | None = None,
    peer: str | None = None,
    budget: Budget | None = None,
) -> dict[int, Document]:
    """A session's indexed texts by seq (those up to `through`, those of `peer`, when given), read with consistent
    Queries, newest first: whole, or as many pages (1 MB each) as `budget` allows."""
    condition = "PK = :pk" + (" AND SK <= :last" if through is not None else "")
    values: dict[str, Any] = {":pk": keys.text_docs_pk(ws, session_id)}
    if through is not None:
        values[":last"] = keys.text_doc(ws, session_id, through)["SK"]
    request: dict[str, Any] = {
        "TableName": db.table,
        "KeyConditionExpression": condition,
        "ConsistentRead": True,
        "ScanIndexForward": False,
        "ProjectionExpression": "seq, peer, tsig, tlen",
        "ExpressionAttributeValues": to_item(values),
    }
    items: list[dict[str, Any]] = []
    while True:
        if budget is not None and items and not budget.allows():
            break
        out = db.client.query(**request)
        page = [from_item(i) for i in out["Items"]]
        if budget is not None:
            budget.spend(1, sum(map(_size, page)))
        items += page
        if "LastEvaluatedKey" not in out:
            break
        request["ExclusiveStartKey"] = out["LastEvaluatedKey"]
    return {
        int(i["seq"]): Document.parse(i["tsig"], int(i["tlen"])) for i in items if peer is None or i.get("peer") == peer
    }
