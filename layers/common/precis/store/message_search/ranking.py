"""Ranking a search: BM25 (exact, `text_index`) fused with the semantic ranking, a deleted session's messages left
out, and the winners read as the API shows them."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any

from precis.lexical import fuse, rank_texts
from precis.store import filters as filtering
from precis.store import keys, text_index
from precis.store.db import Db, batch_get
from precis.store.message_search.semantic import MEANING_INDEX
from precis.store.messages import VIEW_FIELDS, Base, as_message, message_view, with_bodies
from precis.store.resources import gone_sessions
from precis.store.retention import expired
from precis.store.vectors import MAX_TOP_K, search_index

_MESSAGE_FIELDS = ("PK", "SK", *VIEW_FIELDS, "kind", "retain_until")
_CANDIDATE_FIELDS = ("msession", "seq")


def search(
    db: Db,
    ws: str,
    query: str,
    limit: int,
    filters: dict[str, Any] | None,
    *,
    semantic: Callable[[str], list[float]] | None = None,
    session_id: str | None = None,
    peer_id: str | None = None,
    base: Base | None = None,
    budget: text_index.Budget | None = None,
) -> list[dict[str, Any]]:
    """The messages that best match `query`, best first, `limit` at most, within the session or from the peer
    when given and matching `filters` (the message list's grammar). A clone's `base`: its parent's messages it holds
    no copy of yet are searched too, as the clone's. The lexical ranking reads at most `budget` (a default one when
    None); whether it ran out is on it."""
    filters = filters or {}
    filtering.matches(filters, {})  # a malformed filter is 422 before any read
    # Filters apply after the read: ask for more so that `limit` usually survive.
    order = rank(
        db,
        ws,
        query,
        min(MAX_TOP_K, limit * 4 if filters else limit),
        semantic=semantic,
        session_id=session_id,
        peer_id=peer_id,
        base=base,
        budget=budget,
    )
    return [
        view for view in read_views(db, ws, order, base=base, session_id=session_id) if filtering.matches(filters, view)
    ][:limit]


DEEPER = 2  # rounds a ranking reads past the candidates of deleted sessions it dropped, after its first


class _Live:
    """Which candidate sessions are deleted: `deleted_at` on the session item, written in the transaction the delete
    answers after, so a search drops a deleted session's messages from then on, not from its purge. Each session's
    item is read once per search, those a ranking brings in one consistent BatchGetItem (100 keys a request)."""

    def __init__(self, db: Db, ws: str):
        self.db, self.ws = db, ws
        self.gone: set[str] = set()
        self._known: set[str] = set()

    def check(self, sessions: Iterable[str]) -> None:
        fresh = sorted(set(sessions) - self._known)
        if not fresh:
            return
        self._known.update(fresh)
        self.gone.update(gone_sessions(self.db, self.ws, fresh))

    def kept(self, ranking: Sequence[tuple[str, int]]) -> list[tuple[str, int]]:
        self.check(s for s, _ in ranking)
        return [key for key in ranking if key[0] not in self.gone]

    def deeper(
        self,
        wanted: int,
        first: tuple[list[tuple[str, int]], bool],
        again: Callable[[int], tuple[list[tuple[str, int]], bool]],
    ) -> list[tuple[str, int]]:
        """A ranking's best `wanted` of live sessions: `first` (the ranking, and whether it could go deeper), ranked
        `again(dropped)` past the `dropped` candidates of deleted sessions while they leave fewer than `wanted`
        (DEEPER times at most)."""
        found, more = first
        kept = self.kept(found)
        for _ in range(DEEPER):
            if len(kept) >= wanted or len(kept) == len(found) or not more:
                break
            found, more = again(len(found) - len(kept))
            kept = self.kept(found)
        return kept[:wanted]


def rank(
    db: Db,
    ws: str,
    query: str,
    wanted: int,
    *,
    semantic: Callable[[str], list[float]] | None = None,
    session_id: str | None = None,
    peer_id: str | None = None,
    base: Base | None = None,
    sessions: Collection[str] | None = None,
    budget: text_index.Budget | None = None,
) -> list[tuple[str, int]]:
    """(session id, seq) of the messages nearest `query`, best first, at most `wanted`: BM25, fused with the semantic
    ranking when `semantic` embeds the query. A message with none of the query's words is found only semantically.
    Never a deleted session's (a clone's inherited messages are its own, whatever became of its parent).

    With `sessions`, the messages of those sessions (ranked with the workspace's statistics); `session_id` is then
    the one whose clone `base` lends it the messages it holds no copy of yet."""
    live = _Live(db, ws)
    budget = budget if budget is not None else text_index.Budget()
    if sessions is not None:
        return _rank_sessions(db, ws, query, wanted, frozenset(sessions), semantic, session_id, base, live, budget)

    def lexical(_dropped: int = 0) -> tuple[list[tuple[str, int]], bool]:
        found = lexical_rank(
            db,
            ws,
            query,
            wanted,
            session_id=session_id,
            peer_id=peer_id,
            base=base,
            keep=lambda key: key[0] not in live.gone,
            budget=budget,
        )
        # (a session's ranking is of that session's texts only: none deeper once it is gone)
        return [key for key, _ in found], session_id is None and len(found) >= wanted

    vector = semantic(query) if semantic is not None else []  # embedded once, however often the index is asked
    depths = [wanted]

    def meaning(dropped: int = 0) -> tuple[list[tuple[str, int]], bool]:
        # The index excludes nothing: ask again deeper, by twice what was dropped (a deleted session's vectors are
        # its messages' neighbours: more of them are likely next).
        depth = depths[-1] = min(MAX_TOP_K, depths[-1] + 2 * dropped)
        equal = {"mcoll": ws, "msession": session_id, "mpeer": peer_id}
        hits = search_index(db, MEANING_INDEX, equal, vector, depth, _CANDIDATE_FIELDS)
        more = len(hits) >= depth
        if base is not None and session_id is not None:  # one ranking of the clone's messages: its own and its base's
            parents = {**equal, "msession": base.session}
            lent = search_index(db, MEANING_INDEX, parents, vector, depth, _CANDIDATE_FIELDS)
            more = more or len(lent) >= depth
            best: dict[int, tuple[dict[str, Any], float]] = {}
            for item, score in [(item, score) for item, score in lent if int(item["seq"]["N"]) <= base.through] + hits:
                best[int(item["seq"]["N"])] = ({**item, "msession": {"S": session_id}}, score)
            hits = list(best.values())
        ranked = [(item["msession"]["S"], int(item["seq"]["N"])) for item, _ in sorted(hits, key=lambda h: h[1])]
        return ranked, more and depth < MAX_TOP_K

    first_lexical = lexical()
    first_meaning = None
    if semantic is not None:
        first_meaning = meaning()
    live.check(s for s, _ in first_lexical[0] + (first_meaning[0] if first_meaning else []))  # one read for both
    ranked = live.deeper(wanted, first_lexical, lexical)
    nearest = live.deeper(wanted, first_meaning, meaning) if first_meaning is not None else None
    return fuse(ranked, nearest)[:wanted]


def _rank_sessions(
    db: Db,
    ws: str,
    query: str,
    wanted: int,
    sessions: frozenset[str],
    semantic: Callable[[str], list[float]] | None,
    session_id: str | None,
    base: Base | None,
    live: _Live,
    budget: text_index.Budget,
) -> list[tuple[str, int]]:
    """`rank` over the messages of `sessions`: the workspace's postings and vectors, keeping theirs (and those a
    clone's base lends it, as the clone's) of sessions not deleted."""

    def own(key: tuple[str, int]) -> tuple[str, int] | None:
        """The key as the caller knows it, or None outside `sessions`."""
        session, seq = key
        if base is not None and session_id is not None and session == base.session and seq <= base.through:
            return session_id, seq
        return key if session in sessions else None

    def mapped(keys_: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
        return list(dict.fromkeys(k for k in map(own, keys_) if k is not None))

    def keep(key: tuple[str, int]) -> bool:
        mine = own(key)
        return mine is not None and mine[0] not in live.gone

    def lexical(_dropped: int = 0) -> tuple[list[tuple[str, int]], bool]:
        found = text_index.rank_workspace(db, ws, query, wanted, keep=keep, budget=budget)
        return mapped(key for key, _ in found), len(found) >= wanted

    first_lexical = lexical()
    meaning = None
    if semantic is not None:
        # The index filters by equality only: the workspace's nearest, as many as one search returns, kept here.
        hits = search_index(db, MEANING_INDEX, {"mcoll": ws}, semantic(query), MAX_TOP_K, _CANDIDATE_FIELDS)
        meaning = mapped((item["msession"]["S"], int(item["seq"]["N"])) for item, _ in sorted(hits, key=lambda h: h[1]))
    live.check(s for s, _ in first_lexical[0] + (meaning or []))
    ranked = live.deeper(wanted, first_lexical, lexical)
    if meaning is not None:
        meaning = live.kept(meaning)[:wanted]  # (as deep as one search goes already)
    return fuse(ranked, meaning)[:wanted]


def lexical_rank(
    db: Db,
    ws: str,
    query: str,
    wanted: int,
    *,
    session_id: str | None = None,
    peer_id: str | None = None,
    base: Base | None = None,
    keep: Callable[[tuple[str, int]], bool] | None = None,
    budget: text_index.Budget | None = None,
) -> list[tuple[tuple[str, int], float]]:
    """BM25's `wanted` best ((session, seq), score), exact over the scope: the session's texts (with a clone's
    inherited ones, its own copy winning), else the workspace's or the peer's postings; those `keep` keeps."""
    if session_id is None:
        return text_index.rank_workspace(db, ws, query, wanted, peer=peer_id, keep=keep, budget=budget)
    if keep is not None and not keep((session_id, 0)):
        return []
    texts = {}
    if base is not None:
        texts = {
            (session_id, seq): d
            for seq, d in text_index.session_texts(
                db, ws, base.session, through=base.through, peer=peer_id, budget=budget
            ).items()
        }
    own = text_index.session_texts(db, ws, session_id, peer=peer_id, budget=budget)
    texts |= {(session_id, seq): d for seq, d in own.items()}
    return rank_texts(texts, query, wanted)


def read_views(
    db: Db, ws: str, order: Sequence[tuple[str, int]], *, base: Base | None = None, session_id: str | None = None
) -> list[dict[str, Any]]:
    """The messages at `order`'s keys, in that order, as the API shows them (one BatchGetItem, and the large bodies);
    those deleted since they were indexed are left out."""
    found = {
        (keys.parse_session_pk(i["PK"])[1], i["seq"]): as_message(i)
        for i in batch_get(db, [keys.message(ws, s, seq) for s, seq in order], _MESSAGE_FIELDS)
        if i.get("kind") == "message" and not expired(i)
    }
    if base is not None and session_id is not None:  # a clone's messages not copied yet: read from its parent
        missing = [seq for s, seq in order if (s, seq) not in found and seq <= base.through]
        found |= (
            {
                (session_id, i["seq"]): as_message(i)
                for i in batch_get(db, [keys.message(ws, base.session, seq) for seq in missing], _MESSAGE_FIELDS)
                if i.get("kind") == "message" and not expired(i)
            }
            if missing
            else {}
        )
    views = []
    for session, seq in order:
        item = found.get((session, seq))
        if item is not None:
            body = with_bodies(db, [item], ws, session)[0].get("content") or ""
            views.append(message_view(item, ws, session, body))
    return views
