"""Conclusion vectors in the table's vector index: how they are stored and how the nearest are found.

A vector item carries the embedding in `vec` (a list of numbers: what a DynamoDB vector index reads), the
collection in `vcoll` (the index's HASH attribute: a search reads one collection) and the inline filters `level` and
`vsession` (the session id, or "-" for none). SearchVectors does not paginate: TopK results come in one answer.
"""

from __future__ import annotations

import math
from array import array
from typing import Any

from precis.store.db import Db

VECTOR_INDEX = "ByVector"
VECTOR_ATTRIBUTE = "vec"
HASH_ATTRIBUTE = "vcoll"
LEVEL_ATTRIBUTE = "level"
SESSION_ATTRIBUTE = "vsession"
NO_SESSION = "-"


def vector_attribute(vector: list[float]) -> dict[str, Any]:
    """The AttributeValue of a vector: a list of numbers, each rounded to the f32 the index keeps (9 digits
    name an f32 exactly, and keep the item small)."""
    if not all(math.isfinite(x) for x in vector):
        raise ValueError("vector: every component must be a finite number")
    return {"L": [{"N": format(x + 0.0, ".9g")} for x in array("f", vector)]}  # + 0.0: no "-0"


def search(db: Db, collection: str, vector: list[float], top_k: int, *, level: str | None = None,
           session_key: str | None = None, max_distance: float | None = None) -> list[tuple[str, float]]:
    """(conclusion id, cosine distance) of the `top_k` vectors of `collection` nearest to `vector`, nearest first;
    only those of `level` and of `session_key` (a session id, or NO_SESSION) when given, and within
    `max_distance` when given."""
    found = search_index(db, VECTOR_INDEX, {HASH_ATTRIBUTE: collection, LEVEL_ATTRIBUTE: level,
                                            SESSION_ATTRIBUTE: session_key}, vector, top_k, ("id",))
    hits = [(item["id"]["S"], score) for item, score in found]
    return [hit for hit in hits if max_distance is None or hit[1] <= max_distance]


def search_index(db: Db, index: str, equal: dict[str, str | None], vector: list[float], top_k: int,
                 fields: tuple[str, ...]) -> list[tuple[dict[str, Any], float]]:
    """One SearchVectors request on `index`: the `top_k` items nearest `vector` whose attributes equal `equal`'s
    (the first is the index's HASH; None values are left out), as (`fields` of the item, raw AttributeValues;
    cosine distance), nearest first."""
    names, values, terms = {}, {}, []
    for i, (attribute, value) in enumerate(equal.items()):
        if value is not None:
            names[f"#a{i}"], values[f":a{i}"] = attribute, {"S": value}
            terms.append(f"#a{i} = :a{i}")
    names.update({f"#f{i}": f for i, f in enumerate(fields)})
    answer = db.client.search_vectors(
        TableName=db.table, IndexName=index, SearchVector=vector_attribute(vector)["L"], TopK=top_k,
        SearchConditionExpression=" AND ".join(terms), ExpressionAttributeNames=names,
        ExpressionAttributeValues=values, ProjectionExpression=", ".join(f"#f{i}" for i in range(len(fields))))
    # A COSINE index's score is already the cosine distance (0 identical, 2 opposite).
    return [(result["Item"], float(result["Score"])) for result in answer.get("SearchResults", [])]
