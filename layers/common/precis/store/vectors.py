"""Conclusion vectors in the table's vector index, and how a collection's nearest conclusions are found.

A vector item carries the embedding in `vec` (a list of numbers: what a DynamoDB vector index reads; `ByVector`,
cosine), the collection in `vcoll` (the index's HASH attribute: a search reads one collection) and the inline filters
`level` and `vsession` (the session id, or "-" for none). A query ranks by BM25, exact over the collection's
conclusions in scope (their term counts, `keys.conclusion_text`, read with one consistent Query), fused with the
embedding's ranking. SearchVectors does not paginate: TopK (1-100) results come in one answer. The index is
DynamoDB's replica of the table, written asynchronously and searched approximately: a search may miss an item written
a moment ago (what must see it reads the table: `nearest` merges the collection's last minute, `recent`), and an
index still backfilling refuses searches (503, retry).
"""

from __future__ import annotations

import math
import time
from array import array
from typing import Any

from botocore.exceptions import ClientError

from precis.errors import Unavailable
from precis.lexical import LEXICAL_WEIGHT, Document, fuse, rank_texts
from precis.store import keys
from precis.store.db import Db, Numbers, error_code, projection, query_all, query_first, to_item

VECTOR_INDEX = "ByVector"
CANDIDATES = 4  # semantic candidates asked per result wanted when a distance bounds them
MAX_TOP_K = 100  # SearchVectors' TopK: 1-100, and no pagination
BACKFILL_RETRY_S = 30  # Retry-After while an index backfills (minutes at most, whatever the table's size)
VECTOR_ATTRIBUTE = "vec"
HASH_ATTRIBUTE = "vcoll"
LEVEL_ATTRIBUTE = "level"
SESSION_ATTRIBUTE = "vsession"
NO_SESSION = "-"
# DynamoDB fills a vector index from the table asynchronously (normally within a second): a conclusion written less
# than this long ago is looked for in the table too (consistent reads; its id begins with its time).
INDEX_LAG_S = 60
FRESH = 100  # a query merges at most this many of them, the newest (a whole create, MAX_CREATE): older are indexed


def vector_attribute(vector: list[float]) -> dict[str, Any]:
    """The AttributeValue of a vector: a list of numbers, each rounded to the f32 the index keeps (9 digits
    name an f32 exactly, and keep the item small)."""
    if not all(math.isfinite(x) for x in vector):
        raise ValueError("vector: every component must be a finite number")
    return {"L": Numbers([{"N": format(x + 0.0, ".9g")} for x in array("f", vector)])}  # + 0.0: no "-0"


def nearest(
    db: Db,
    ws: str,
    observer: str,
    observed: str,
    text: str,
    vector: list[float],
    top_k: int,
    *,
    level: str | None = None,
    session_key: str | None = None,
    max_distance: float | None = None,
) -> list[str]:
    """Ids of the collection's `top_k` conclusions nearest `text` (whose embedding is `vector`), best first: BM25 and
    the embedding's cosine ranking fused by weighted reciprocal rank. With `max_distance`, only conclusions within that
    cosine distance (BM25 reorders them; a conclusion that shares words but not meaning is left out)."""
    from precis.settings import get_settings

    # The hashed embedding is lexical too, without idf: fused with BM25 it would bring back what idf sets aside
    # ("alice" in every conclusion about alice). It only follows BM25's ranking (a word's other forms, by its
    # character n-grams) and bounds `max_distance`.
    weight = 1.0 if get_settings().embedder == "hashed" else LEXICAL_WEIGHT
    wanted = top_k if max_distance is None else top_k * CANDIDATES
    semantic = search(
        db,
        keys.collection_name(ws, observer, observed),
        vector,
        wanted,
        level=level,
        session_key=session_key,
        max_distance=max_distance,
    )
    # Read-your-writes: what the index may not hold yet is ranked here, by the distance the index measures.
    fresh = [
        (cid, cosine_distance(vector, other))
        for cid, cid_level, cid_session, other in recent(db, ws, observer, observed, newest=FRESH)
        if (level is None or cid_level == level) and (session_key is None or cid_session == session_key)
    ]
    semantic = merged(semantic, fresh, min(wanted, MAX_TOP_K), max_distance)
    lexical = [
        cid
        for (_, cid), _ in lexical_rank(
            db, ws, observer, observed, text, top_k * CANDIDATES, level=level, session_key=session_key
        )
    ]
    if max_distance is not None:
        within = {cid for cid, _ in semantic}
        lexical = [cid for cid in lexical if cid in within]
    if weight == 1.0:
        return list(dict.fromkeys(lexical + [cid for cid, _ in semantic]))[:top_k]
    return fuse(lexical, [cid for cid, _ in semantic], weight)[:top_k]


def merged(
    indexed: list[tuple[str, float]], fresh: list[tuple[str, float]], k: int, max_distance: float | None
) -> list[tuple[str, float]]:
    """The `k` nearest of the index's hits and the table's fresh ones ((id, distance), one per id, nearest first; ties
    by id), within `max_distance` when given."""
    best = dict(indexed)
    for cid, distance in fresh:  # the table's copy is the same vector: its distance, computed here, stands
        best[cid] = distance
    ranked = sorted(best.items(), key=lambda hit: (hit[1], hit[0]))
    return [hit for hit in ranked if max_distance is None or hit[1] <= max_distance][:k]


def recent(
    db: Db, ws: str, observer: str, observed: str, *, newest: int | None = None
) -> list[tuple[str, str, str, list[float]]]:
    """(id, level, session, vector) of the collection's conclusions written in the last INDEX_LAG_S (at most the
    `newest` when given), read from the table (one consistent Query): what the vector index may not hold yet."""
    since, end = keys.conclusion_vectors_since(int((time.time() - INDEX_LAG_S) * 1000))
    request = {
        "KeyConditionExpression": "PK = :pk AND SK BETWEEN :since AND :end",
        "ConsistentRead": True,
        "ExpressionAttributeValues": to_item(
            {":pk": keys.collection_pk(ws, observer, observed), ":since": since, ":end": end}
        ),
        **projection(("id", LEVEL_ATTRIBUTE, SESSION_ATTRIBUTE, VECTOR_ATTRIBUTE)),
    }
    found = query_all(db, **request) if newest is None else query_first(db, newest, ScanIndexForward=False, **request)
    return [
        (i["id"], i[LEVEL_ATTRIBUTE], i.get(SESSION_ATTRIBUTE, NO_SESSION), i[VECTOR_ATTRIBUTE])
        for i in found
        if VECTOR_ATTRIBUTE in i
    ]


def lexical_rank(
    db: Db,
    ws: str,
    observer: str,
    observed: str,
    text: str,
    k: int,
    *,
    level: str | None = None,
    session_key: str | None = None,
) -> list[tuple[tuple[str, str], float]]:
    """BM25's k best conclusions of the collection for `text` ((("", id), score), best first): exact over the
    conclusions in scope (of `level`, of `session_key`, when given), with their own idf."""
    items = query_all(
        db,
        KeyConditionExpression="PK = :pk AND begins_with(SK, :l)",
        ConsistentRead=True,
        ProjectionExpression="id, #level, vsession, tsig, tlen",
        ExpressionAttributeNames={"#level": LEVEL_ATTRIBUTE},
        ExpressionAttributeValues=to_item({":pk": keys.collection_pk(ws, observer, observed), ":l": "L#"}),
    )
    texts = {
        ("", i["id"]): Document.parse(i["tsig"], int(i["tlen"]))
        for i in items
        if (level is None or i.get(LEVEL_ATTRIBUTE) == level)
        and (session_key is None or i.get(SESSION_ATTRIBUTE) == session_key)
    }
    return rank_texts(texts, text, k)  # type: ignore[return-value]


def search(
    db: Db,
    collection: str,
    vector: list[float],
    top_k: int,
    *,
    level: str | None = None,
    session_key: str | None = None,
    max_distance: float | None = None,
) -> list[tuple[str, float]]:
    """(conclusion id, cosine distance) of the `top_k` vectors of `collection` nearest to `vector`, nearest first;
    only those of `level` and of `session_key` (a session id, or NO_SESSION) when given, and within
    `max_distance` when given."""
    found = search_index(
        db,
        VECTOR_INDEX,
        {HASH_ATTRIBUTE: collection, LEVEL_ATTRIBUTE: level, SESSION_ATTRIBUTE: session_key},
        vector,
        top_k,
        ("id",),
    )
    hits = [(item["id"]["S"], score) for item, score in found]
    return [hit for hit in hits if max_distance is None or hit[1] <= max_distance]


def search_index(
    db: Db, index: str, equal: dict[str, str | None], vector: list[float], top_k: int, fields: tuple[str, ...]
) -> list[tuple[dict[str, Any], float]]:
    """One SearchVectors request on `index`: the `top_k` items nearest `vector` (at most MAX_TOP_K: the most an index
    answers) whose attributes equal `equal`'s (the first is the index's HASH; None values are left out), as (`fields`
    of the item, raw AttributeValues; cosine distance), nearest first. Unavailable (503) while the index backfills."""
    names, values, terms = {}, {}, []
    for i, (attribute, value) in enumerate(equal.items()):
        if value is not None:
            names[f"#a{i}"], values[f":a{i}"] = attribute, {"S": value}
            terms.append(f"#a{i} = :a{i}")
    names.update({f"#f{i}": f for i, f in enumerate(fields)})
    try:
        answer = db.client.search_vectors(
            TableName=db.table,
            IndexName=index,
            SearchVector=vector_attribute(vector)["L"],
            TopK=min(top_k, MAX_TOP_K),
            SearchConditionExpression=" AND ".join(terms),
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
            ProjectionExpression=", ".join(f"#f{i}" for i in range(len(fields))),
        )
    except ClientError as exc:
        # An index added to a table that holds items refuses searches until its backfill ends ("Cannot search
        # backfilling vector index: <name>"): the caller should come back, not see a 500.
        if error_code(exc) == "ValidationException" and "backfilling" in str(exc).lower():
            raise Unavailable(
                f"the search index {index} is still being built; retry in a minute", retry_after_s=BACKFILL_RETRY_S
            ) from None
        raise
    # A COSINE index's score is already the cosine distance (0 identical, 2 opposite).
    return [(result["Item"], float(result["Score"])) for result in answer.get("SearchResults", [])]


def cosine_distance(a: list[float], b: list[float]) -> float:
    """1 - cosine similarity (0 same direction, 2 opposite); 1 when either vector is zero."""
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norms = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return 1.0 - dot / norms if norms > 0 else 1.0
