"""Message search (MEMORY.md, "Search, chat, queue"): BM25 over the messages' words and, with a semantic embedder, a
semantic ranking, fused by weighted reciprocal rank.

Each message has an item of its own in a partition beside the session's (`keys.message_vectors_pk`): the context read
never touches it and a metadata edit never rewrites it. Its lexical part (`precis.lexical`: the BM25 vector `tvec` of
the message's words and its speaker's name,
searched through the DOT_PRODUCT index `ByMessageTerms`, and the term signature `tsig`/`tlen` projected beside it) is
written by the request that stores the message, so an answered write is searchable at once; the deriver adds its
words to the workspace's term statistics (idf) as its insert comes down the stream. The semantic vector `svec` (`ByMessageMeaning`) is the deriver's, as
its insert comes down the stream, when the deployment's embedder is semantic; the deriver also writes the lexical part
of any message whose request died before writing it. Both indexes are HASHed on the workspace and filter on session
and peer inline; a search reads the statistics, asks each index for a few candidates per result, ranks the lexical
ones again exactly from their signatures and reads the best messages by key: its cost grows with `limit`, not with
the workspace.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from precis.lexical import Document, Query, Stats
from precis.store import filters as filtering
from precis.store import keys, term_stats
from precis.store.db import Db, batch_get, to_item
from precis.store.messages import Base, message_view, with_bodies
from precis.store.vectors import MAX_TOP_K, fuse, lexical_attribute, search_index, vector_attribute

if TYPE_CHECKING:
    from precis.memory.embeddings import Embedder

TERMS_INDEX, MEANING_INDEX = "ByMessageTerms", "ByMessageMeaning"
CANDIDATES = 4  # candidates asked of the BM25 index per result wanted, ranked again exactly
_MESSAGE_FIELDS = ("PK", "SK", "id", "seq", "peer_id", "content", "body_key", "metadata", "created_at",
                   "token_count", "run_id", "kind")
_CANDIDATE_FIELDS = ("msession", "seq", "tsig", "tlen")


def _vector_key(ws: str, session_id: str, seq: int) -> dict[str, str]:
    return {"PK": keys.message_vectors_pk(ws, session_id), "SK": f"MV#{seq:0{keys.SEQ_DIGITS}d}"}


def vector_item(ws: str, session_id: str, seq: int, peer_id: str, text: str,
          meaning: list[float] | None = None) -> dict[str, Any]:
    document = Document.of(text, speaker=peer_id)
    item = {**to_item({**_vector_key(ws, session_id, seq), "kind": "mvector", "seq": seq, "mcoll": ws,
                       "msession": session_id, "mpeer": peer_id, "tsig": document.signature(),
                       "tlen": document.length}), "tvec": lexical_attribute(document.vector())}
    if meaning is not None:
        item["svec"] = vector_attribute(meaning)
    return item


def index_stored(db: Db, ws: str, session_id: str, messages: Sequence[tuple[int, str, str]]) -> int:
    """The lexical items of a batch just stored ((seq, peer_id, text) each): searchable when the request answers. How
    many were written (0 if the session was deleted meanwhile)."""
    if not messages:
        return 0
    return _put(db, ws, session_id, None, [vector_item(ws, session_id, seq, peer, text) for seq, peer, text in messages])


def index_messages(db: Db, images: Iterable[dict[str, Any]], *, semantic: Embedder | None = None) -> int:
    """The deriver's part, as inserted messages come down the stream (their images): their words counted in the
    workspace's term statistics (off the request's path: idf may lag a write by a moment), the semantic vector when
    there is a semantic embedder, and the lexical item of a message whose request died before writing it. Bound to the
    session's incarnation (nothing lands in a deleted session); how many items were written."""
    by_session: dict[tuple[str, str], dict[int, dict[str, Any]]] = {}
    for image in images:
        ws, session_id = keys.parse_session_pk(image["PK"])
        by_session.setdefault((ws, session_id), {})[int(image["seq"])] = image
    written = 0
    for (ws, session_id), messages in by_session.items():
        session = next(iter(batch_get(db, [keys.session(ws, session_id)])), None)
        if session is None or "deleted_at" in session:
            continue
        ordered = [messages[seq] for seq in sorted(messages)]
        texts_of = {int(m["seq"]): view.get("content") or ""
                    for m, view in zip(ordered, with_bodies(db, ordered, ws, session_id))}
        # Each delivery counts (a redelivered batch counts twice: idf is an estimate, and moves very little).
        term_stats.count(db, keys.message_terms(ws), (Document.of(texts_of[int(m["seq"])], m["peer_id"])
                                                      for m in ordered))
        stored = {int(i["SK"].removeprefix("MV#")): i for i in batch_get(
            db, [_vector_key(ws, session_id, seq) for seq in messages], ("PK", "SK", "semantic"))}
        todo = [m for m in ordered
                if int(m["seq"]) not in stored or (semantic is not None and "semantic" not in stored[int(m["seq"])])]
        for start in range(0, len(todo), 99):
            chunk = todo[start:start + 99]
            texts = [texts_of[int(m["seq"])] for m in chunk]
            meanings = semantic.embed(texts) if semantic is not None else [None] * len(texts)
            puts = []
            for image, text, meaning in zip(chunk, texts, meanings):
                item = vector_item(ws, session_id, int(image["seq"]), image["peer_id"], text, meaning)
                if meaning is not None:
                    item["semantic"] = {"BOOL": True}
                puts.append(item)
            written += _put(db, ws, session_id, session["incarnation"], puts)
    return written


def _put(db: Db, ws: str, session_id: str, incarnation: str | None, items: list[dict[str, Any]]) -> int:
    # A batch write, not a transaction: these items are derived data, rewritten identically by a replay. A session
    # deleted meanwhile is checked after the write: what landed after its purge is deleted here.
    puts = [{"PutRequest": {"Item": item}} for item in items]
    for start in range(0, len(puts), 25):
        pending = {db.table: puts[start:start + 25]}
        while pending:
            pending = db.client.batch_write_item(RequestItems=pending).get("UnprocessedItems") or None
    session = next(iter(batch_get(db, [keys.session(ws, session_id)])), None)
    if (session is None or "deleted_at" in session
            or (incarnation is not None and session.get("incarnation") != incarnation)):
        from precis.store.records import delete_keys

        delete_keys(db, [{"PK": i["PK"]["S"], "SK": i["SK"]["S"]} for i in items])
        return 0
    return len(items)


def search(db: Db, ws: str, query: str, limit: int, filters: dict[str, Any] | None, *,
           semantic: Callable[[str], list[float]] | None = None, session_id: str | None = None,
           peer_id: str | None = None, base: Base | None = None) -> list[dict[str, Any]]:
    """The messages that best match `query`, best first, `limit` at most, within the session or from the peer
    when given and matching `filters` (the message list's grammar). A clone's `base`: its parent's messages it holds
    no copy of yet are searched too, as the clone's."""
    filters = filters or {}
    filtering.matches(filters, {})  # a malformed filter is 422 before any read
    # Filters apply after the read: ask for more so that `limit` usually survive.
    order = rank(db, ws, query, min(MAX_TOP_K, limit * 4 if filters else limit), semantic=semantic,
                 session_id=session_id, peer_id=peer_id, base=base)
    return [view for view in read_views(db, ws, order, base=base, session_id=session_id)
            if filtering.matches(filters, view)][:limit]


def rank(db: Db, ws: str, query: str, wanted: int, *, semantic: Callable[[str], list[float]] | None = None,
         session_id: str | None = None, peer_id: str | None = None, base: Base | None = None,
         stats: Stats | None = None) -> list[tuple[str, int]]:
    """(session id, seq) of the messages nearest `query`, best first, at most `wanted`: BM25, fused with the semantic
    ranking when `semantic` embeds the query. A message with none of the query's words is found only semantically."""
    stats = stats if stats is not None else term_stats.read(db, keys.message_terms(ws))
    lexical_query = Query.of(query, stats)
    equal = {"mcoll": ws, "msession": session_id, "mpeer": peer_id}

    def candidates(index: str, vector: list[float], count: int) -> list[tuple[dict[str, Any], float]]:
        found = search_index(db, index, equal, vector, count, _CANDIDATE_FIELDS)
        if base is None or session_id is None:
            return found
        # One ranking of the clone's messages: its own and its base's (its own copy wins).
        inherited = [(item, score) for item, score in search_index(
            db, index, {**equal, "msession": base.session}, vector, count, _CANDIDATE_FIELDS)
            if int(item["seq"]["N"]) <= base.through]
        best: dict[int, tuple[dict[str, Any], float]] = {}
        for item, score in inherited + found:
            best[int(item["seq"]["N"])] = ({**item, "msession": {"S": session_id}}, score)
        return list(best.values())

    lexical: list[tuple[str, int]] = []
    if lexical_query:
        scored = []
        average = stats.average_length
        for item, _dot in candidates(TERMS_INDEX, lexical_query.vector(), wanted * CANDIDATES):
            document = Document.parse(item.get("tsig", {}).get("S", ""), int(item.get("tlen", {}).get("N", 0)))
            score = lexical_query.score(document, average)
            if score > 0:  # shares a word: the vector's slots can bring in a text that shares none
                scored.append((-score, -int(item["seq"]["N"]), item["msession"]["S"], int(item["seq"]["N"])))
        lexical = [(session, seq) for _, _, session, seq in sorted(scored)][:wanted]
    meaning = None
    if semantic is not None:
        hits = sorted(candidates(MEANING_INDEX, semantic(query), wanted), key=lambda hit: hit[1])
        meaning = [(item["msession"]["S"], int(item["seq"]["N"])) for item, _ in hits][:wanted]
    return fuse(lexical, meaning)[:wanted]


def read_views(db: Db, ws: str, order: Sequence[tuple[str, int]], *, base: Base | None = None,
               session_id: str | None = None) -> list[dict[str, Any]]:
    """The messages at `order`'s keys, in that order, as the API shows them (one BatchGetItem, and the large bodies);
    those deleted since they were indexed are left out."""
    found = {(keys.parse_session_pk(i["PK"])[1], i["seq"]): i for i in batch_get(
        db, [keys.message(ws, s, seq) for s, seq in order], _MESSAGE_FIELDS) if i.get("kind") == "message"}
    if base is not None and session_id is not None:  # a clone's messages not copied yet: read from its parent
        missing = [seq for s, seq in order if (s, seq) not in found and seq <= base.through]
        found |= {(session_id, i["seq"]): i for i in batch_get(
            db, [keys.message(ws, base.session, seq) for seq in missing], _MESSAGE_FIELDS)
            if i.get("kind") == "message"} if missing else {}
    views = []
    for session, seq in order:
        item = found.get((session, seq))
        if item is not None:
            body = with_bodies(db, [item], ws, session)[0].get("content") or ""
            views.append(message_view(item, ws, session, body))
    return views


def purge_vectors(db: Db, ws: str, session_id: str) -> int:
    """Delete every message vector of the session (its purge)."""
    from precis.store.db import query_all
    from precis.store.records import delete_keys

    found = query_all(db, KeyConditionExpression="PK = :pk", ProjectionExpression="PK, SK", ConsistentRead=True,
                      ExpressionAttributeValues=to_item({":pk": keys.message_vectors_pk(ws, session_id)}))
    return delete_keys(db, found)
