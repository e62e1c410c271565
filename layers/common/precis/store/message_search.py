"""Message search (`POST /search`, a session's, a peer's): exact BM25 over the scope's messages (`text_index`, read
with strongly consistent reads: a message is found as soon as its post answers) and, with a semantic embedder, a
semantic ranking from the vector index `ByMessageMeaning` (asynchronous and approximate, as DynamoDB runs it), fused by
weighted reciprocal rank.

A workspace's or a peer's search reads the query's postings as deep as its top k needs; a session's ranks the
session's indexed texts (its own idf, read whole). The semantic vectors (`svec`) are the deriver's, in items of their
own beside the session's partition (`keys.message_vectors_pk`), written as each insert comes down the stream; the
deriver also finishes the index of a batch whose request died before it could (`ensure_indexed`).
"""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from precis.lexical import fuse, rank_texts
from precis.store import filters as filtering
from precis.store import keys, leases, text_index
from precis.store.db import Db, batch_get, to_item
from precis.store.messages import VIEW_FIELDS, Base, MessageItem, as_message, message_view, with_bodies
from precis.store.resources import SessionItem, gone_sessions, session_item
from precis.store.vectors import MAX_TOP_K, search_index, vector_attribute

if TYPE_CHECKING:
    from precis.llm import Embedder

MEANING_INDEX = "ByMessageMeaning"
_MESSAGE_FIELDS = ("PK", "SK", *VIEW_FIELDS, "kind")
_CANDIDATE_FIELDS = ("msession", "seq")
REPAIR_LEASE_S = 60  # how long one deriver holds a session's index repair
_POLL_S = 0.2  # how often the deriver looks again for texts a live request is still writing


def _vector_key(ws: str, session_id: str, seq: int) -> dict[str, str]:
    return {"PK": keys.message_vectors_pk(ws, session_id), "SK": f"MV#{seq:0{keys.SEQ_DIGITS}d}"}


def vector_item(ws: str, session_id: str, seq: int, peer_id: str, meaning: list[float]) -> dict[str, Any]:
    """A message's semantic vector item (raw AttributeValues)."""
    return {
        **to_item(
            {
                **_vector_key(ws, session_id, seq),
                "kind": "mvector",
                "seq": seq,
                "mcoll": ws,
                "msession": session_id,
                "mpeer": peer_id,
                "semantic": True,
            }
        ),
        "svec": vector_attribute(meaning),
    }


def index_messages(
    db: Db,
    images: Iterable[dict[str, Any]],
    *,
    semantic: Embedder | None = None,
    now: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """The deriver's part for one target, as inserted messages come down the stream (their images): with a semantic
    embedder each message is embedded once. Bound to the session's incarnation (nothing lands in a deleted session);
    how many vectors."""
    by_session: dict[tuple[str, str], dict[int, MessageItem]] = {}
    for image in images:
        ws, session_id = keys.parse_session_pk(image["PK"])
        by_session.setdefault((ws, session_id), {})[int(image["seq"])] = as_message(image)
    written = 0
    for (ws, session_id), messages in by_session.items():
        session = session_item(db, ws, session_id)
        if session is None or "deleted_at" in session:
            continue  # (its purge takes back what was indexed)
        if semantic is None:
            continue
        stored = {
            int(i["SK"].removeprefix("MV#"))
            for i in batch_get(db, [_vector_key(ws, session_id, seq) for seq in messages], ("PK", "SK"))
        }
        todo = [messages[seq] for seq in sorted(messages) if seq not in stored]
        for start in range(0, len(todo), 99):
            chunk = todo[start : start + 99]
            texts = [view.get("content") or "" for view in with_bodies(db, chunk, ws, session_id)]
            puts = [
                vector_item(ws, session_id, int(image["seq"]), image["peer_id"], meaning)
                for image, meaning in zip(chunk, semantic.embed(texts))
            ]
            written += _put(db, ws, session_id, session["incarnation"], puts)
    return written


MERGE_CHECK_EVERY = 10  # a shard is looked at when a batch brings this many of its messages, or a seq that divides


def merge_fresh(db: Db, images: Iterable[dict[str, Any]]) -> int:
    """Once per stream batch (its inserted messages' images): merge their sessions' fresh index shards into
    segments once they hold enough (`text_index.merge`); how many messages were merged. A shard is looked at (a
    consistent Query of what it holds) about once per MERGE_CHECK_EVERY of its messages, not once per post: when the
    batch brings that many, or one whose seq MERGE_CHECK_EVERY divides (each session's tenth, twentieth, ...)."""
    by_shard: dict[tuple[str, int], list[tuple[str, int]]] = {}
    for image in images:
        ws, session_id = keys.parse_session_pk(image["PK"])
        by_shard.setdefault((ws, text_index.shard_of(session_id)), []).append((session_id, int(image["seq"])))
    return sum(
        text_index.merge_shard(db, ws, shard)
        for (ws, shard), brought in sorted(by_shard.items())
        if len(brought) >= MERGE_CHECK_EVERY or any(seq % MERGE_CHECK_EVERY == 0 for _, seq in brought)
    )


def ensure_indexed(
    db: Db,
    ws: str,
    session_id: str,
    messages: Sequence[MessageItem],
    *,
    now: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Before the deriver derives `messages` (stored items of one session): index those whose request died before
    its index was written, whole units at a time; a request still running (its `ibu` deadline not passed) is waited
    for. How many texts were written. A failure raises: the derivation fails with it and is retried."""
    found_missing = text_index.missing_texts(db, ws, session_id, (int(m["seq"]) for m in messages))
    if not found_missing:
        return 0
    missing = _wait_for_texts(db, ws, session_id, messages, now, sleep, missing=found_missing)
    # Another deriver (another sender's, or the upgrade's backfill) may hold the session's repair: wait while it
    # does, then index what is still missing (it may have done it); past its lease, fail to be retried.
    give_up = now() + REPAIR_LEASE_S
    while missing and not _lease(db, ws, session_id, now()):
        if now() >= give_up:
            raise RepairBusy(f"session '{session_id}' of workspace '{ws}' is being indexed by another deriver; retry")
        sleep(_POLL_S)
        missing = text_index.missing_texts(db, ws, session_id, missing)
    if not missing:
        return 0
    from precis.store.messages import read_range

    written = 0
    try:
        units = dict.fromkeys(text_index.unit_of(session_id, m) for m in messages if int(m["seq"]) in missing)
        for unit in units:
            stored = read_range(db, ws, session_id, *text_index.unit_range(unit))
            members = text_index.unit_members(session_id, unit, stored)
            written += index_unit(db, ws, session_id, unit, members)
    finally:
        _release(db, ws, session_id)
    return written


def index_unit(db: Db, ws: str, session_id: str, unit: str, members: Sequence[MessageItem]) -> int:
    """Index a unit of stored messages, given all its members (`text_index.unit_members`): the deriver's repair and
    the upgrade's backfill both index through here, so they pass `index_texts` the same texts for the same unit.
    A member whose text a clone's copy wrote under its own unit is left out (its words are counted there already;
    found among the unit's texts it would make `index_texts` take the unit for counted). How many texts were written."""
    found = text_index.texts_at(db, ws, session_id, (int(m["seq"]) for m in members))
    elsewhere = {int(i["seq"]) for i in found if i.get("u") not in (None, unit)}
    batch = [m for m in members if int(m["seq"]) not in elsewhere]
    texts = [
        text_index.Text(int(v["seq"]), v["peer_id"], v.get("content") or "")
        for v in with_bodies(db, batch, ws, session_id)
    ]
    session = session_item(db, ws, session_id)
    if session is None or "deleted_at" in session:
        return 0
    return text_index.index_texts(db, ws, session_id, unit, texts, incarnation=session["incarnation"])


def _release(db: Db, ws: str, session_id: str) -> None:
    leases.release(db, keys.text_repair_lease(ws, session_id))


# ---------------------------------------------------------------- the upgrade's backfill (deploy/reindex.py)

REINDEX_WINDOW = 1000  # seqs of a session the backfill reads at once: a multiple of 100, so a legacy block is whole
REBUILD_UNIT = 100  # texts of the release before segments indexed as one unit
_TEXT_FIELDS = ("seq", "peer", "tsig", "tlen", "u")


@dataclass
class Reindexed:
    """What `reindex_session` did to a session (or, dry, would do)."""

    messages: int = 0  # stored messages read
    indexed: int = 0  # messages indexed: texts written, or `rebuilt` (a unit's members with a text go in uncounted)
    units: int = 0  # units indexed
    rebuilt: int = 0  # of `indexed`, those whose text the release before segments wrote, indexed from it
    in_flight: int = 0  # messages of a batch whose request may still be indexing it: left to it (or the deriver)
    copying: int = 0  # a clone's messages while its copy runs (the copy indexes what it copies): left to a later run
    stopped: str | None = None  # why the walk stopped before the session's end


def reindex_session(
    db: Db,
    ws: str,
    session_id: str,
    *,
    dry_run: bool = False,
    on_unit: Callable[[str, int], None] | None = None,
    progress: Reindexed | None = None,
    holdings: text_index.Holdings | None = None,
    now: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    window: int = REINDEX_WINDOW,
) -> Reindexed:
    """Put every stored message of the session into the index. One without a text (stored before the exact index):
    whole units at a time exactly as the deriver's repair does (`index_unit`, under its lease). One whose text the
    release before segments wrote and the index does not hold (`holdings`, the workspace's, its sessions asked in
    order): from its text, REBUILD_UNIT a unit, under the same lease. The workspace's fresh shards are merged as they
    fill (no stream record of an old message comes again to do it).

    What the index holds is the progress: an interrupted walk is run again from the start and indexes each message
    once. `on_unit(unit, written)` after each unit indexed (raising there stops the walk between two units); counted
    into `progress` as it goes, when given."""
    from precis.store.messages import base_of, read_range, tail_seq

    done, seen = progress if progress is not None else Reindexed(), set()
    holdings = holdings if holdings is not None else text_index.Holdings(db, ws)
    claimed: set[int] = set()  # members of units with a message without a text: indexed (or left) whole, by unit
    last = tail_seq(db, ws, session_id)
    for start in range(1, last + 1, window):
        session = session_item(db, ws, session_id)
        if session is None or "deleted_at" in session:
            done.stopped = "deleted"  # (its purge takes back whatever was indexed)
            return done
        base, end = base_of(session), start + window - 1
        stored = read_range(db, ws, session_id, start, end)
        done.messages += len(stored)
        texts = {
            int(i["seq"]): i
            for i in batch_get(db, [keys.text_doc(ws, session_id, int(m["seq"])) for m in stored], _TEXT_FIELDS)
        }
        for unit in dict.fromkeys(text_index.unit_of(session_id, m) for m in stored):
            if unit in seen:
                continue  # (a batch across two windows: done, or left, in the first)
            seen.add(unit)
            first, through = text_index.unit_range(unit)
            whole = stored if start <= first and through <= end else read_range(db, ws, session_id, first, through)
            members = text_index.unit_members(session_id, unit, whole)
            seqs = [int(m["seq"]) for m in members]
            outside = [keys.text_doc(ws, session_id, s) for s in seqs if not start <= s <= end]
            around = {int(i["seq"]): i for i in batch_get(db, outside, _TEXT_FIELDS)} if outside else {}
            found = {s: t for s in seqs if (t := texts.get(s, around.get(s))) is not None}
            lacking = [s for s in seqs if s not in found]
            if not lacking:
                continue  # every member has its text: the index holds them, or they are rebuilt below
            # Indexing the unit indexes the texts it wrote before too (not another unit's: a clone's copy's): those
            # are not rebuilt.
            claimed.update(s for s in seqs if found.get(s, {}).get("u") in (None, unit))
            if max((float(m.get("ibu") or 0) for m in members), default=0.0) >= now():
                done.in_flight += len(lacking)
            elif base is not None and first <= base.through:
                done.copying += len(lacking)
            elif dry_run:
                done.units, done.indexed = done.units + 1, done.indexed + len(lacking)
            else:
                written = _backfill_unit(db, ws, session_id, unit, members, now, sleep)
                done.units, done.indexed = done.units + 1, done.indexed + written
                if on_unit is not None:
                    on_unit(unit, written)
        candidates = [texts[s] for s in sorted(texts) if s not in claimed]
        if candidates:
            _rebuild(db, ws, session_id, session, holdings, candidates, done, dry_run, on_unit, now, sleep)
    return done


def _rebuild(
    db: Db,
    ws: str,
    session_id: str,
    session: SessionItem,
    holdings: text_index.Holdings,
    texts: Sequence[Mapping[str, Any]],
    done: Reindexed,
    dry_run: bool,
    on_unit: Callable[[str, int], None] | None,
    now: Callable[[], float],
    sleep: Callable[[float], None],
) -> None:
    """Index those of a window's `texts` (read before this is called) the index does not hold, REBUILD_UNIT a unit:
    looked up first, then again under the session's repair lease (a run that finds all of them held writes nothing).
    While a clone's copy runs, its texts of what it copies are left (the copy indexes its pages whole, theirs too)."""
    from precis.store.messages import base_of

    incarnation, base = session.get("incarnation") or "", base_of(session)

    def todo() -> tuple[list[Mapping[str, Any]], int]:
        """The texts to index, and how many more are a clone's copy's."""
        held = holdings.held(session_id, incarnation)
        left = [t for t in texts if int(t["seq"]) not in held]
        through = base.through if base is not None else 0
        return [t for t in left if int(t["seq"]) > through], sum(int(t["seq"]) <= through for t in left)

    wanted, lent = todo()
    if wanted and dry_run:
        done.units += math.ceil(len(wanted) / REBUILD_UNIT)
        done.indexed, done.rebuilt = done.indexed + len(wanted), done.rebuilt + len(wanted)
    elif wanted:
        with _repair_lease(db, ws, session_id, now, sleep):
            wanted, lent = todo()
            for start in range(0, len(wanted), REBUILD_UNIT):
                chunk = wanted[start : start + REBUILD_UNIT]
                unit = f"{session_id}:{int(chunk[0]['seq'])}:r{secrets.token_hex(4)}"
                written = text_index.index_stored(db, ws, session_id, unit, chunk, incarnation=incarnation)
                done.units, done.indexed, done.rebuilt = done.units + 1, done.indexed + written, done.rebuilt + written
                if on_unit is not None:
                    on_unit(unit, written)
        text_index.merge(db, ws, [session_id])
    done.copying += lent


@contextmanager
def _repair_lease(
    db: Db, ws: str, session_id: str, now: Callable[[], float], sleep: Callable[[float], None]
) -> Iterator[None]:
    """The session's repair lease, held while the block runs (a deriver repairing the session meanwhile waits)."""
    deadline = now() + 2 * REPAIR_LEASE_S
    while not _lease(db, ws, session_id, now()):
        if now() > deadline:
            raise TimeoutError(
                f"session {ws}/{session_id}: its index repair lease stayed taken for "
                f"{2 * REPAIR_LEASE_S} s (a deriver repairing it?); run the backfill again"
            )
        sleep(1.0)
    try:
        yield
    finally:
        _release(db, ws, session_id)


def _backfill_unit(
    db: Db,
    ws: str,
    session_id: str,
    unit: str,
    members: Sequence[MessageItem],
    now: Callable[[], float],
    sleep: Callable[[float], None],
) -> int:
    """One unit under the repair's lease (a deriver repairing the session meanwhile waits, and finds it done); the
    session's fresh shard is merged once it holds enough."""
    with _repair_lease(db, ws, session_id, now, sleep):
        written = index_unit(db, ws, session_id, unit, members)
        text_index.merge(db, ws, [session_id])
    return written


class RepairBusy(RuntimeError):
    """A session's index repair is held by another deriver."""


def _wait_for_texts(
    db: Db,
    ws: str,
    session_id: str,
    messages: Sequence[MessageItem],
    now: Callable[[], float],
    sleep: Callable[[float], None],
    *,
    missing: set[int] | None = None,
) -> set[int]:
    """The seqs of `messages` whose text is still missing once every request that may still write one (its `ibu`
    deadline not passed) has written it or died (`missing`: those known missing already, not read again)."""
    if missing is None:
        missing = text_index.missing_texts(db, ws, session_id, (int(m["seq"]) for m in messages))
    deadline = max((float(m.get("ibu") or 0) for m in messages if int(m["seq"]) in missing), default=0.0)
    while missing and now() < deadline:
        sleep(_POLL_S)
        missing = text_index.missing_texts(db, ws, session_id, missing)
    return missing


def _lease(db: Db, ws: str, session_id: str, now: float) -> bool:
    return leases.take(db, keys.text_repair_lease(ws, session_id), now + REPAIR_LEASE_S, now)


def _put(db: Db, ws: str, session_id: str, incarnation: str | None, items: list[dict[str, Any]]) -> int:
    """The vectors put, bound to the session's incarnation (`text_index.put_bound`); how many stayed."""
    return len(items) if text_index.put_bound(db, ws, session_id, incarnation, items) else 0


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
        if i.get("kind") == "message"
    }
    if base is not None and session_id is not None:  # a clone's messages not copied yet: read from its parent
        missing = [seq for s, seq in order if (s, seq) not in found and seq <= base.through]
        found |= (
            {
                (session_id, i["seq"]): as_message(i)
                for i in batch_get(db, [keys.message(ws, base.session, seq) for seq in missing], _MESSAGE_FIELDS)
                if i.get("kind") == "message"
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


def purge_vectors(
    db: Db, ws: str, session_id: str, *, time_left: Callable[[], float] = lambda: float("inf")
) -> tuple[int, bool]:
    """Delete the session's message vectors (its purge), a page of 1,000 keys at a time: (how many, done?). Stops
    once `time_left()` is under zero between pages; a new call goes on (what was deleted is gone from the Query)."""
    from precis.store.records import delete_keys

    request: dict[str, Any] = {
        "TableName": db.table,
        "KeyConditionExpression": "PK = :pk",
        "ProjectionExpression": "PK, SK",
        "ConsistentRead": True,
        "Limit": 1000,
        "ExpressionAttributeValues": to_item({":pk": keys.message_vectors_pk(ws, session_id)}),
    }
    deleted = 0
    while True:
        out = db.client.query(**request)
        deleted += delete_keys(db, [{"PK": i["PK"]["S"], "SK": i["SK"]["S"]} for i in out["Items"]])
        if "LastEvaluatedKey" not in out:
            return deleted, True
        if time_left() < 0:
            return deleted, False
        request["ExclusiveStartKey"] = out["LastEvaluatedKey"]
