"""Message search (MEMORY.md, "Search, chat, queue"): a lexical ranking and, with a semantic embedder, a semantic
one, fused by reciprocal rank (k = 60).

Each message is embedded once, by the deriver as its insert comes down the stream, into an item of its own in a
partition beside the session's (`keys.message_vectors_pk`): the context read never touches it, a message's
metadata edit never re-embeds it, and a session's purge deletes the partition. The lexical vector is the offline
`hashed` embedding (feature-hashed stemmed words and n-grams: a lexical ranking, searched through the
`ByMessageText` vector index); the semantic one exists when the deployment's embedder is `openai`
(`ByMessageMeaning`). Both indexes are HASHed on the workspace and filter on session and peer inline; a search
reads the top candidates' messages by key, so its cost grows with `limit`, not with the workspace.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from precis.store import filters as filtering
from precis.memory.embeddings import Embedder, HashedEmbedder, terms
from precis.store import keys
from precis.store.db import Db, batch_get, to_item
from precis.store.messages import Base, message_view, with_bodies
from precis.store.vectors import search_index, vector_attribute

TEXT_INDEX, MEANING_INDEX = "ByMessageText", "ByMessageMeaning"
RRF_K = 60
_MESSAGE_FIELDS = ("PK", "SK", "id", "seq", "peer_id", "content", "body_key", "metadata", "created_at",
                   "token_count", "run_id", "kind")


def _vector_key(ws: str, session_id: str, seq: int) -> dict[str, str]:
    return {"PK": keys.message_vectors_pk(ws, session_id), "SK": f"MV#{seq:0{keys.SEQ_DIGITS}d}"}


def index_messages(db: Db, images: Iterable[dict[str, Any]], *, dimensions: int,
                   semantic: Embedder | None = None) -> int:
    """Embed the inserted messages (stream images) not embedded yet, bound to their session's incarnation (nothing
    lands in a deleted session); how many were written."""
    by_session: dict[tuple[str, str], dict[int, dict[str, Any]]] = {}
    for image in images:
        ws, session_id = keys.parse_session_pk(image["PK"])
        by_session.setdefault((ws, session_id), {})[int(image["seq"])] = image
    lexical, written = HashedEmbedder(dimensions), 0
    for (ws, session_id), messages in by_session.items():
        session = next(iter(batch_get(db, [keys.session(ws, session_id)])), None)
        if session is None or "deleted_at" in session:
            continue
        done = {int(i["SK"].removeprefix("MV#")) for i in batch_get(
            db, [_vector_key(ws, session_id, seq) for seq in messages], ("PK", "SK"))}
        todo = [messages[seq] for seq in sorted(messages) if seq not in done]
        for start in range(0, len(todo), 99):
            written += _write(db, ws, session_id, session["incarnation"], todo[start:start + 99], lexical, semantic)
    return written


def _write(db: Db, ws: str, session_id: str, incarnation: str, images: list[dict[str, Any]], lexical: Embedder,
           semantic: Embedder | None) -> int:
    texts = [m.get("content") or "" for m in with_bodies(db, images, ws, session_id)]
    lexical_vectors = lexical.embed(texts)
    semantic_vectors = semantic.embed(texts) if semantic is not None else [None] * len(texts)
    puts = []
    for image, text_vector, meaning_vector in zip(images, lexical_vectors, semantic_vectors):
        item = {**to_item({**_vector_key(ws, session_id, int(image["seq"])), "kind": "mvector",
                           "seq": int(image["seq"]), "mcoll": ws, "msession": session_id,
                           "mpeer": image["peer_id"]}), "lvec": vector_attribute(text_vector)}
        if meaning_vector is not None:
            item["svec"] = vector_attribute(meaning_vector)
        puts.append({"PutRequest": {"Item": item}})
    # A batch write, not a transaction: vectors are derived data, rewritten identically by a replay. A session
    # deleted meanwhile is checked after the write: what landed after its purge is deleted here.
    for start in range(0, len(puts), 25):
        pending = {db.table: puts[start:start + 25]}
        while pending:
            pending = db.client.batch_write_item(RequestItems=pending).get("UnprocessedItems") or None
    session = next(iter(batch_get(db, [keys.session(ws, session_id)])), None)
    if session is None or session.get("incarnation") != incarnation or "deleted_at" in session:
        from precis.store.records import delete_keys

        delete_keys(db, [_vector_key(ws, session_id, int(i["seq"])) for i in images])
        return 0
    return len(puts)


def search(db: Db, ws: str, query: str, limit: int, filters: dict[str, Any] | None, *, dimensions: int,
           semantic: Callable[[str], list[float]] | None = None, session_id: str | None = None,
           peer_id: str | None = None, base: Base | None = None) -> list[dict[str, Any]]:
    """The messages that best match `query`, best first, `limit` at most, within the session or from the peer
    when given and matching `filters` (the message list's grammar). A clone's `base`: its parent's messages it holds
    no copy of yet are searched too, as the clone's."""
    filters = filters or {}
    filtering.matches(filters, {})  # a malformed filter is 422 before any read
    wanted = min(100, limit * 4 if filters else limit * 2)
    equal = {"mcoll": ws, "msession": session_id, "mpeer": peer_id}

    def ranking(index: str, vector: list[float]) -> list[tuple[dict[str, Any], float]]:
        found = search_index(db, index, equal, vector, wanted, ("msession", "seq"))
        if base is None or session_id is None:
            return found
        # One ranking of the clone's messages: its own and its base's (nearest first; its own copy wins).
        inherited = [(item, score) for item, score in search_index(
            db, index, {**equal, "msession": base.session}, vector, wanted, ("msession", "seq"))
            if int(item["seq"]["N"]) <= base.through]
        best: dict[int, tuple[dict[str, Any], float]] = {}
        for item, score in inherited + found:
            best[int(item["seq"]["N"])] = ({**item, "msession": {"S": session_id}}, score)
        return sorted(best.values(), key=lambda hit: hit[1])[:wanted]

    rankings = [ranking(TEXT_INDEX, HashedEmbedder(dimensions).embed([query])[0])]
    if semantic is not None:
        rankings.append(ranking(MEANING_INDEX, semantic(query)))
    fused: dict[tuple[str, int], float] = {}
    semantic_hits = {(i["msession"]["S"], int(i["seq"]["N"])) for i, _ in rankings[1]} if semantic else set()
    for ranking in rankings:
        for rank, (item, _score) in enumerate(ranking, start=1):
            key = (item["msession"]["S"], int(item["seq"]["N"]))
            fused[key] = fused.get(key, 0.0) + 1.0 / (RRF_K + rank)
    order = sorted(fused, key=lambda k: (-fused[k], k))
    found = {(keys.parse_session_pk(i["PK"])[1], i["seq"]): i for i in batch_get(
        db, [keys.message(ws, s, seq) for s, seq in order], _MESSAGE_FIELDS) if i.get("kind") == "message"}
    if base is not None and session_id is not None:  # a clone's messages not copied yet: read from its parent
        missing = [seq for s, seq in order if (s, seq) not in found and seq <= base.through]
        found |= {(session_id, i["seq"]): i for i in batch_get(
            db, [keys.message(ws, base.session, seq) for seq in missing], _MESSAGE_FIELDS)
            if i.get("kind") == "message"} if missing else {}
    answer = []
    wanted_terms = terms(query)
    bodies = {k: with_bodies(db, [found[k]], ws, k[0])[0].get("content") or "" for k in order if k in found}
    for session, seq in order:
        item = found.get((session, seq))
        if item is None:
            continue  # deleted since it was embedded
        if (session, seq) not in semantic_hits and not wanted_terms & terms(bodies[(session, seq)]):
            continue  # the lexical side matches words: a hashed vector near by n-grams alone is no match
        view = message_view(item, ws, session, bodies[(session, seq)])
        if filtering.matches(filters, view):
            answer.append((session, item))
        if len(answer) == limit:
            break
    return [message_view(i, ws, s, bodies[(s, i["seq"])]) for s, i in answer]


def purge_vectors(db: Db, ws: str, session_id: str) -> int:
    """Delete every message vector of the session (its purge)."""
    from precis.store.db import query_all
    from precis.store.records import delete_keys

    found = query_all(db, KeyConditionExpression="PK = :pk", ProjectionExpression="PK, SK", ConsistentRead=True,
                      ExpressionAttributeValues=to_item({":pk": keys.message_vectors_pk(ws, session_id)}))
    return delete_keys(db, found)
