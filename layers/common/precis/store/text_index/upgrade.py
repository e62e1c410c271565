"""The release before segments (deploy/reindex.py): which messages the index holds, indexing texts that release
wrote, and deleting what it kept."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from precis.store import keys
from precis.store.db import Db, each, from_item, query_all, query_first, to_item
from precis.store.records import delete_keys
from precis.store.text_index.items import DOC_PART, pool, shard_of, unpack
from precis.store.text_index.manifest import read_manifest
from precis.store.text_index.texts import fresh_items, put_bound

OLD_STATS = "#"  # the sort key of the statistics item among that release's counters (every other one is a term)
OLD_PAGE = 100  # that release's counters deleted at once (their terms' postings first)
HOLDINGS_ROUNDS = 20  # manifests a `Holdings.held` reads while merges keep changing it, before it gives up
DOC_PAGE = 16  # doc table items a `Holdings` cursor reads in one Query


class Holdings:
    """Which of a workspace's messages the index holds (fresh, or in a live segment), for the upgrade that indexes the
    texts the release before segments wrote. Each live segment's doc tables are read once, forward, as sessions are
    asked in order (a session asked before the last one reads them again)."""

    def __init__(self, db: Db, ws: str):
        self.db, self.ws = db, ws
        self._cursors: dict[str, _DocCursor] = {}

    def held(self, session_id: str, incarnation: str) -> set[int]:
        """The seqs of the session's messages of `incarnation` the index holds. Asked after the texts it is about were
        read, it counts every one the index held then: a text is written after its fresh item, a merge deletes the
        fresh items in the transaction that lists their segment, and a segment compacted away while read is found
        through a manifest read after (its successor holds its docs)."""
        seqs: set[int] = set()
        read: set[str] = set()
        manifest = read_manifest(self.db, self.ws)
        for round_ in range(HOLDINGS_ROUNDS):
            for segment in manifest.segments:
                if segment["id"] in read:
                    continue
                cursor = self._cursors.get(segment["id"]) or _DocCursor(self.db, self.ws, segment)
                rows = cursor.rows_of(session_id)
                if rows is None:  # compacted away as it was read: a later manifest lists its successor
                    self._cursors.pop(segment["id"], None)
                    continue
                self._cursors[segment["id"]] = cursor
                read.add(segment["id"])
                seqs.update(seq for seq, of in rows if of == incarnation)
            if round_ == 0:  # after the first manifest: a fresh item merged since is in a segment the next one lists
                seqs.update(self._fresh(session_id, incarnation))
            manifest = read_manifest(self.db, self.ws)
            live = {s["id"] for s in manifest.segments}
            if live <= read:
                self._cursors = {k: c for k, c in self._cursors.items() if k in live}
                return seqs
        raise RuntimeError(f"workspace {self.ws}: its index kept changing while it was read; run again")

    def _fresh(self, session_id: str, incarnation: str) -> set[int]:
        items = query_all(
            self.db,
            KeyConditionExpression="PK = :pk",
            FilterExpression="#s = :s",
            ProjectionExpression="#i, #z",
            ConsistentRead=True,
            ExpressionAttributeNames={"#s": "s", "#i": "i", "#z": "z"},
            ExpressionAttributeValues=to_item(
                {":pk": keys.text_fresh_pk(self.ws, shard_of(session_id)), ":s": session_id}
            ),
        )
        return {int(e[0]) for i in items if i.get("i") in (None, incarnation) for e in unpack(i["z"])}


class _DocCursor:
    """A segment's doc tables (rows sorted by session, seq, incarnation) read forward, DOC_PAGE items a Query."""

    def __init__(self, db: Db, ws: str, segment: Mapping[str, Any]):
        self.db, self.pk = db, keys.text_segment_pk(ws, segment["id"])
        self.parts = math.ceil(int(segment["n"]) / DOC_PART)
        self._restart()

    def _restart(self) -> None:
        self.rows: list[list[Any]] = []
        self.at = self.next_part = 0
        self.session: str | None = None
        self.found: list[tuple[int, str]] = []

    def rows_of(self, session_id: str) -> list[tuple[int, str]] | None:
        """(seq, incarnation) of the session's docs; None when the segment is gone."""
        if session_id == self.session:
            return self.found
        if self.session is not None and session_id < self.session:
            self._restart()
        found: list[tuple[int, str]] = []
        while True:
            while self.at < len(self.rows):
                session, seq, incarnation = self.rows[self.at]
                if session > session_id:
                    break
                if session == session_id:
                    found.append((int(seq), incarnation or ""))
                self.at += 1
            else:
                if self.next_part < self.parts:
                    if not self._read():
                        return None
                    continue
            self.session, self.found = session_id, found
            return found

    def _read(self) -> bool:
        """The next doc table items, in place of the rows read; False when they are gone."""
        out = self.db.client.query(
            TableName=self.db.table,
            KeyConditionExpression="PK = :pk AND SK BETWEEN :a AND :b",
            ConsistentRead=True,
            Limit=DOC_PAGE,
            ExpressionAttributeValues=to_item(
                {":pk": self.pk, ":a": f"D{self.next_part:05d}", ":b": f"D{self.parts - 1:05d}"}
            ),
        )
        rows: list[list[Any]] = []
        for item in map(from_item, out["Items"]):
            if int(item["SK"][1:]) != self.next_part:
                return False
            rows += unpack(item["z"])
            self.next_part += 1
        self.rows, self.at = rows, 0
        return bool(out["Items"])


def index_stored(
    db: Db, ws: str, session_id: str, unit: str, texts: Sequence[Mapping[str, Any]], *, incarnation: str
) -> int:
    """Index texts written already (text items, as the release before segments left them) as a fresh unit; how many.
    The caller knows the index holds none of them (`Holdings`) and holds the session's repair lease. Taken back when
    the session was deleted (or created again) meanwhile."""
    entries = [[int(t["seq"]), t.get("peer") or "", int(t["tlen"]), t["tsig"]] for t in texts]
    if not entries:
        return 0
    return (
        len(entries)
        if put_bound(db, ws, session_id, incarnation, fresh_items(ws, session_id, unit, incarnation, entries))
        else 0
    )


def delete_old_index(
    db: Db,
    ws: str,
    peers: Iterable[str],
    *,
    dry_run: bool = False,
    on_page: Callable[[int, int], None] | None = None,
) -> tuple[int, int]:
    """Delete what the release before segments kept of a workspace's index: its counters, whose sort keys name the
    terms, and each term's postings. The workspace's counters name every term (a text was counted there and under
    its speaker): a page of them goes after its terms' postings, so a delete stopped anywhere goes on from what is
    left. Each of `peers`' counters go then, with the postings of any term the workspace's did not name in this call
    (a count that died between the two; after a stop, the rest of them). (counters, postings) deleted, `on_page` told
    after each page; dry, (counters, 0) found."""
    counters = postings = 0
    named: set[str] = set()
    for pk in [keys.text_counters_pk(ws), *(keys.text_peer_counters_pk(ws, p) for p in sorted(set(peers)))]:
        if dry_run:
            counters += len(_keys_in(db, pk))
            continue
        while page := _keys_in(db, pk, OLD_PAGE):
            terms_ = [i["SK"] for i in page if i["SK"] != OLD_STATS and i["SK"] not in named]
            postings += sum(each(pool(), lambda t: _delete_partition(db, keys.old_text_postings_pk(ws, t)), terms_))
            named.update(terms_)
            counters += delete_keys(db, page)
            if on_page is not None:
                on_page(counters, postings)
    return counters, postings


def _keys_in(db: Db, pk: str, count: int | None = None) -> list[dict[str, Any]]:
    """The keys of a partition's items (its first `count`, when given)."""
    request: dict[str, Any] = {
        "KeyConditionExpression": "PK = :pk",
        "ProjectionExpression": "PK, SK",
        "ConsistentRead": True,
        "ExpressionAttributeValues": to_item({":pk": pk}),
    }
    return query_all(db, **request) if count is None else query_first(db, count, **request)


def _delete_partition(db: Db, pk: str) -> int:
    """Delete every item of a partition, 1,000 keys a Query; how many."""
    deleted = 0
    while page := _keys_in(db, pk, 1_000):
        deleted += delete_keys(db, page)
    return deleted
