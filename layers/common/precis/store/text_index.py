"""Exact lexical search over a workspace's messages: an inverted index in the table, packed, so that indexing a message
costs a few of its own bytes rather than an item per word, and no item is written by every message of a workspace.

Items (keys in `precis.store.keys`):

- a **text** per message (`text_doc`), beside its session's partition: its term counts, length, speaker and the unit
  that indexed it. A session search ranks the session's texts alone. A text present means its unit is in the index
  (fresh or merged): the repair and the backfill index only what has none.
- a **fresh** item per unit (a post's batch; `text_fresh_pk`, one of FRESH_SHARDS partitions chosen by session): the
  unit's texts packed, written by the request that stores the messages before it writes their texts, and read by
  every workspace search with consistent Queries, so a message is found as soon as its post answers.
- **segments** (`text_segment_pk`, a partition each), immutable: a header (`H`: its speakers, their messages and
  lengths, the first session of each session list part), its sessions' ids sorted in parts (`S…`: a purge looks for
  its session in the one part that could hold it), doc tables (`D…`: session, seq and incarnation by doc number) and
  term buckets (`T…`: each term's whole postings list in the segment, as doc number, count, length and speaker; a
  term too long for one item is chunked in `W…` items, best postings first).
- the **manifest** (`text_manifest`): the live segments with their sizes. It changes once a merge, never a message.
  It also names the segments being written and those a compaction replaced, so that a writer that dies leaves no
  items nothing knows of: the next compaction deletes them (`_sweep`), a workspace delete too.

The deriver merges a shard's fresh units into a segment once MERGE_MIN_DOCS are there (a unit whose texts are not
all written yet stays fresh until its request or the deriver's repair writes them): the segment's items first,
then one transaction adds it to the manifest and deletes the fresh items (both or neither, so nothing is counted
twice or lost), then FAN_IN segments of a level are merged into one of the next (size-tiered, up to
MAX_SEGMENT_DOCS). A merge leaves out the messages of deleted sessions and of earlier incarnations; until it runs, a
search leaves them out when it resolves its winners. A search reads the manifest before and after its other reads
and reads again when a merge came between (a merge removes what it merged only after its manifest changed).

Statistics are exact sums, read with the postings: N and the total length from the manifest (a speaker's from the
headers), a term's document frequency the length of its postings lists. A search reads at most a `Budget`
(requests, bytes, seconds); when it ends first, the ranking is of what was read (the rarest terms' postings come
first, a long list's best postings first) and the budget says so.
"""

from __future__ import annotations

import bisect
import json
import math
import os
import secrets
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from precis.lexical import Document, Key, Query, idf, query_terms, saturation
from precis.store import keys
from precis.store.db import Db, batch_get, each, error_code, from_item, is_throttling, query_all, query_first, to_item
from precis.store.records import delete_keys, write_batch

if TYPE_CHECKING:
    from types_boto3_dynamodb.type_defs import WriteRequestTypeDef

FRESH_SHARDS = 8  # partitions a workspace's fresh units spread over (by session): 1,000 WCU/s each
MERGE_MIN_DOCS = 100  # fresh messages in a shard before the deriver merges them into a segment
FAN_IN = 4  # segments of one level merged into one of the next
MAX_SEGMENT_DOCS = 100_000  # a segment this large is not merged further
TRANSACT_MAX = 100  # actions in one TransactWriteItems
MERGE_UNITS = TRANSACT_MAX - 1  # fresh items one merge takes: each is deleted in the manifest's transaction
PART_RAW = 24_000  # raw (JSON) bytes a segment's term bucket aims at: ~8 KB stored
ITEM_RAW = 300_000  # raw bytes past which an item is split (DynamoDB's item limit is 400 KB; zlib only shrinks it)
DOC_PART = 500  # docs a segment's doc table item holds
SESSION_PART = 32_000  # raw bytes of session ids a segment's session list item holds (its header names the first)
PURGE_PAGE = 1_000  # texts a purge deletes between two looks at its deadline
LEGACY_BLOCK = 100  # seqs of a legacy unit (a message stored without one)
STALE_BUILD_S = 3_600  # a segment written for longer than this has no writer left (an invocation runs 15 min at most)


@dataclass(frozen=True)
class Text:
    """One message to index: its seq, speaker and text."""

    seq: int
    peer: str
    content: str


@dataclass(frozen=True)
class Doc:
    """One indexed message: where it is, the incarnation of its session it belongs to, its speaker and its terms."""

    session: str
    seq: int
    incarnation: str
    peer: str
    document: Document

    @property
    def key(self) -> Key:
        return (self.session, self.seq)


@cache
def _pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=8, thread_name_prefix="precis-text-index")


def shard_of(session_id: str) -> int:
    """The fresh shard of a session's units."""
    return zlib.crc32(session_id.encode("utf-8", "surrogatepass")) % FRESH_SHARDS


def _bucket(term: str, buckets: int) -> int:
    return zlib.crc32(term.encode("utf-8")) % buckets


def _pack(value: Any) -> bytes:
    return zlib.compress(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8"), 6)


def _unpack(data: bytes) -> Any:
    return json.loads(zlib.decompress(data))


def legacy_unit(session_id: str, seq: int) -> str:
    """The unit of a message stored without one (before this index, or by a writer that does not index): the aligned
    block of 100 seqs it is in, so every indexer (the deriver's repair, the upgrade's backfill) names it the same."""
    first = (seq - 1) // LEGACY_BLOCK * LEGACY_BLOCK + 1
    return f"{session_id}:{first}:-"


def unit_of(session_id: str, message: Mapping[str, Any]) -> str:
    """The index unit a stored message belongs to (`ib`, else its legacy block)."""
    return message.get("ib") or legacy_unit(session_id, int(message["seq"]))


# ---------------------------------------------------------------- writing: fresh units


def index_texts(
    db: Db, ws: str, session_id: str, unit: str, texts: Sequence[Text], *, incarnation: str | None = None
) -> int:
    """Index a unit's messages (a fresh item, then their texts), exactly once however often it is asked; how many
    texts were written. A unit whose texts exist already is indexed: nothing is written. A text another unit wrote
    (a clone's copy of the same seq) is that unit's. The session is read after the writes: when it was deleted (or, its
    `incarnation` named, created again) meanwhile, what was written is taken back, so nothing outlives a purge that
    could not see it."""
    if not texts:
        return 0
    documents = {t.seq: Document.of(t.content, speaker=t.peer) for t in texts}
    found = texts_at(db, ws, session_id, [t.seq for t in texts])
    others = {int(i["seq"]) for i in found if i.get("u") != unit}
    texts = [t for t in texts if t.seq not in others]
    have = {int(i["seq"]) for i in found if i.get("u") == unit}
    missing = [t for t in texts if t.seq not in have]
    if not missing:
        return 0
    entries = [[t.seq, t.peer, documents[t.seq].length, documents[t.seq].signature()] for t in texts]
    fresh = _fresh_items(ws, session_id, unit, incarnation, entries)
    _write(db, [{"PutRequest": {"Item": item}} for item in fresh])
    _write(
        db,
        [{"PutRequest": {"Item": _doc_item(ws, session_id, t.seq, t.peer, documents[t.seq], unit)}} for t in missing],
    )
    if not alive(db, ws, session_id, incarnation):
        delete_keys(db, [{"PK": i["PK"]["S"], "SK": i["SK"]["S"]} for i in fresh])
        _unwrite_texts(db, ws, session_id, unit, [t.seq for t in missing])
        return 0
    return len(missing)


def alive(db: Db, ws: str, session_id: str, incarnation: str | None) -> bool:
    """Whether the session is there, not deleted, in `incarnation` (when named)."""
    found = batch_get(db, [keys.session(ws, session_id)], ("incarnation", "deleted_at"))
    return (
        bool(found)
        and "deleted_at" not in found[0]
        and (incarnation is None or found[0].get("incarnation") == incarnation)
    )


def _unwrite_texts(db: Db, ws: str, session_id: str, unit: str, seqs: Iterable[int]) -> None:
    """Delete the texts at `seqs` that `unit` wrote (not a later incarnation's at the same seq)."""

    def delete(seq: int) -> None:
        try:
            db.client.delete_item(
                TableName=db.table,
                Key=to_item(keys.text_doc(ws, session_id, seq)),
                ConditionExpression="#u = :u",
                ExpressionAttributeNames={"#u": "u"},
                ExpressionAttributeValues={":u": {"S": unit}},
            )
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise

    each(_pool(), delete, list(seqs))


def _fresh_items(
    ws: str, session_id: str, unit: str, incarnation: str | None, entries: Sequence[list[Any]]
) -> list[dict[str, Any]]:
    """A unit's fresh items: its texts packed, ITEM_RAW raw bytes an item at most."""
    parts: list[list[list[Any]]] = [[]]
    size = 0
    for entry in entries:
        n = len(entry[3]) + len(entry[1]) + 32
        if parts[-1] and size + n > ITEM_RAW:
            parts.append([])
            size = 0
        parts[-1].append(entry)
        size += n
    pk = keys.text_fresh_pk(ws, shard_of(session_id))
    return [
        to_item(
            {
                "PK": pk,
                "SK": f"{unit}#{i:03d}",
                "kind": "xfresh",
                "s": session_id,
                "i": incarnation,
                "u": unit,
                "n": len(part),
                "z": _pack(part),
            }
        )
        for i, part in enumerate(parts)
    ]


def _doc_item(ws: str, session_id: str, seq: int, peer: str, document: Document, unit: str) -> dict[str, Any]:
    return to_item(
        {
            **keys.text_doc(ws, session_id, seq),
            "kind": "xdoc",
            "seq": seq,
            "peer": peer,
            "tsig": document.signature(),
            "tlen": document.length,
            "u": unit,
        }
    )


def _write(db: Db, requests: list[WriteRequestTypeDef]) -> None:
    """BatchWriteItems of 25, in parallel; unprocessed items retried."""
    chunks = [requests[i : i + 25] for i in range(0, len(requests), 25)]
    each(_pool(), lambda chunk: write_batch(db, chunk), chunks)


def missing_texts(db: Db, ws: str, session_id: str, seqs: Iterable[int]) -> set[int]:
    """The seqs among `seqs` whose text is not indexed yet."""
    seqs = set(seqs)
    return seqs - {int(i["seq"]) for i in texts_at(db, ws, session_id, seqs)}


RANGE_READ_MAX = 1_000  # seqs apart past which `texts_at` reads by key rather than the range


def texts_at(db: Db, ws: str, session_id: str, seqs: Iterable[int]) -> list[dict[str, Any]]:
    """The session's texts at `seqs` that exist (their `seq` and `u`): one consistent Query of the seqs' range when
    they lie close (a unit's: billed by the bytes found, ~40 a text), else a BatchGetItem (billed a unit a key,
    found or not: a new unit's are not)."""
    wanted = sorted(set(seqs))
    if not wanted:
        return []
    if wanted[-1] - wanted[0] >= RANGE_READ_MAX:
        return batch_get(db, [keys.text_doc(ws, session_id, s) for s in wanted], ("seq", "u"))
    found = query_all(
        db,
        KeyConditionExpression="PK = :pk AND SK BETWEEN :a AND :b",
        ConsistentRead=True,
        ProjectionExpression="seq, u",
        ExpressionAttributeValues=to_item(
            {
                ":pk": keys.text_docs_pk(ws, session_id),
                ":a": keys.text_doc(ws, session_id, wanted[0])["SK"],
                ":b": keys.text_doc(ws, session_id, wanted[-1])["SK"],
            }
        ),
    )
    keep = set(wanted)
    return [i for i in found if int(i["seq"]) in keep]


# ---------------------------------------------------------------- segments (pure)


@dataclass(frozen=True)
class Segment:
    """A segment built from docs: its manifest entry and its items."""

    id: str
    level: int
    docs: tuple[Doc, ...]

    @classmethod
    def of(cls, docs: Iterable[Doc], level: int) -> Segment:
        unique = {(d.session, d.seq, d.incarnation): d for d in docs}
        ordered = tuple(sorted(unique.values(), key=lambda d: (d.session, d.seq, d.incarnation)))
        return cls(f"{level}.{int(time.time() * 1000):013d}.{secrets.token_hex(4)}", level, ordered)

    def build(self, ws: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """(manifest entry, items) of the segment."""
        peers = sorted({d.peer for d in self.docs})
        peer_no = {p: i for i, p in enumerate(peers)}
        peer_stats = [[0, 0] for _ in peers]
        postings: dict[str, list[tuple[int, int, int, int]]] = {}
        for number, doc in enumerate(self.docs):
            p = peer_no[doc.peer]
            peer_stats[p][0] += 1
            peer_stats[p][1] += doc.document.length
            for term, count in doc.document.counts.items():
                postings.setdefault(term, []).append((number, count, doc.document.length, p))
        raw = sum(16 * len(plist) + len(term) for term, plist in postings.items())
        buckets = max(1, math.ceil(raw / PART_RAW))
        pk = keys.text_segment_pk(ws, self.id)
        items: list[dict[str, Any]] = []
        parts: list[dict[str, Any]] = [{"t": {}, "c": {}} for _ in range(buckets)]
        for term, plist in postings.items():
            plist.sort(key=lambda p: (-p[1], p[2], p[0]))  # best first: most said, then shortest
            part = parts[_bucket(term, buckets)]
            if 16 * len(plist) <= ITEM_RAW // 2:
                part["t"][term] = [x for posting in plist for x in posting]
                continue
            per_chunk = ITEM_RAW // 16
            chunks = [plist[i : i + per_chunk] for i in range(0, len(plist), per_chunk)]
            by_peer = Counter(p[3] for p in plist)
            part["c"][term] = [len(chunks), len(plist), [by_peer.get(i, 0) for i in range(len(peers))]]
            items += [
                to_item({"PK": pk, "SK": f"W{term}#{i:04d}", "z": _pack([x for posting in chunk for x in posting])})
                for i, chunk in enumerate(chunks)
            ]
        items += [to_item({"PK": pk, "SK": f"T{b:05d}", "z": _pack(part)}) for b, part in enumerate(parts)]
        doc_parts = math.ceil(len(self.docs) / DOC_PART)
        items += [
            to_item(
                {
                    "PK": pk,
                    "SK": f"D{j:05d}",
                    "z": _pack(
                        [[d.session, d.seq, d.incarnation] for d in self.docs[j * DOC_PART : (j + 1) * DOC_PART]]
                    ),
                }
            )
            for j in range(doc_parts)
        ]
        # The sessions' list is apart from the header, which every peer search reads: a segment of 100,000 messages
        # may hold as many sessions, megabytes of ids (past an item's 400 KB).
        session_parts: list[list[str]] = [[]]
        size = 0
        for session in sorted({d.session for d in self.docs}):
            if session_parts[-1] and size + len(session) + 3 > SESSION_PART:
                session_parts.append([])
                size = 0
            session_parts[-1].append(session)
            size += len(session) + 3
        items += [to_item({"PK": pk, "SK": f"S{j:05d}", "z": _pack(part)}) for j, part in enumerate(session_parts)]
        header = {"p": peers, "s": peer_stats, "sf": [part[0] for part in session_parts if part]}
        items.append(to_item({"PK": pk, "SK": "H", "z": _pack(header)}))
        entry = {
            "id": self.id,
            "lv": self.level,
            "n": len(self.docs),
            "len": sum(d.document.length for d in self.docs),
            "tb": buckets,
        }
        return entry, items


def _segment_docs(items: Iterable[Mapping[str, Any]]) -> list[Doc]:
    """The docs of a segment, rebuilt from all its items (its doc tables, header and postings)."""
    header: dict[str, Any] = {}
    table: dict[int, list[Any]] = {}
    counts: dict[int, dict[str, int]] = {}
    lengths: dict[int, int] = {}
    speaker: dict[int, int] = {}
    chunks: dict[str, list[int]] = {}
    for item in items:
        sk, data = item["SK"], _unpack(item["z"])
        if sk == "H":
            header = data
        elif sk.startswith("D"):
            start = int(sk[1:]) * DOC_PART
            table.update({start + i: row for i, row in enumerate(data)})
        elif sk.startswith("T"):
            for term, flat in data["t"].items():
                _add_postings(term, flat, counts, lengths, speaker)
        elif sk.startswith("W"):
            term = sk[1:].rpartition("#")[0]
            chunks.setdefault(term, []).extend(data)
    for term, flat in chunks.items():
        _add_postings(term, flat, counts, lengths, speaker)
    peers = header.get("p") or []
    out = []
    for number in sorted(table):
        session, seq, incarnation = table[number]
        peer = peers[speaker[number]] if number in speaker else ""
        out.append(Doc(session, seq, incarnation, peer, Document(counts.get(number, {}), lengths.get(number, 0))))
    return out


def _add_postings(
    term: str,
    flat: Sequence[int],
    counts: dict[int, dict[str, int]],
    lengths: dict[int, int],
    speaker: dict[int, int],
) -> None:
    for i in range(0, len(flat), 4):
        number, count, length, peer = flat[i : i + 4]
        counts.setdefault(number, {})[term] = count
        lengths[number], speaker[number] = length, peer


# ---------------------------------------------------------------- the manifest


@dataclass(frozen=True)
class Manifest:
    """The live segments (`segs`, changed by a transaction that bumps `v`), and the segments whose items may be in
    the table though not live: those being written (`tmp`, each added before its first item and removed by the
    transaction that makes it live, or by its writer once it lost) and those a compaction replaced (`old`, added by
    its transaction, removed once their items are deleted). A writer that dies leaves its ids there: `_sweep`
    deletes their items."""

    version: int = 0
    segments: tuple[dict[str, Any], ...] = ()
    building: tuple[str, ...] = ()
    replaced: tuple[str, ...] = ()

    @property
    def documents(self) -> int:
        return sum(int(s["n"]) for s in self.segments)

    @property
    def total_length(self) -> int:
        return sum(int(s["len"]) for s in self.segments)


def read_manifest(db: Db, ws: str) -> Manifest:
    found = batch_get(db, [keys.text_manifest(ws)])
    if not found:
        return Manifest()
    item = found[0]
    return Manifest(
        int(item.get("v", 0)),
        tuple(json.loads(item.get("segs") or "[]")),
        tuple(item.get("tmp") or ()),
        tuple(item.get("old") or ()),
    )


def _note(db: Db, ws: str, action: str, name: str, ids: Sequence[str]) -> None:
    """ADD `ids` to the manifest's set `name`, or DELETE them from it (no version change: no search reads again)."""
    if not ids:
        return
    for attempt in range(5):
        try:
            db.client.update_item(
                TableName=db.table,
                Key=to_item(keys.text_manifest(ws)),
                UpdateExpression=f"{action} #n :ids",
                ExpressionAttributeNames={"#n": name},
                ExpressionAttributeValues={":ids": {"SS": sorted(set(ids))}},
            )
            return
        except ClientError as exc:  # (a merge's transaction on the manifest in flight)
            if error_code(exc) != "TransactionConflictException" or attempt == 4:
                raise
            time.sleep(0.05 * 2**attempt)


def _built_at(segment: str) -> float:
    """When a segment's id was made (epoch seconds): `{level}.{milliseconds}.{random}`."""
    return int(segment.split(".")[1]) / 1000


def _sweep(db: Db, ws: str, manifest: Manifest, now: float) -> int:
    """Delete the items of the segments a compaction replaced and of those whose writer died before it made them
    live (written for longer than any invocation runs); how many segments."""
    live = {s["id"] for s in manifest.segments}
    dead = [s for s in manifest.building if s not in live and now - _built_at(s) > STALE_BUILD_S]
    old = [s for s in manifest.replaced if s not in live]
    for segment in dead + old:
        delete_keys(db, [{"PK": i["PK"], "SK": i["SK"]} for i in _segment_items(db, ws, segment, keys_only=True)])
    _note(db, ws, "DELETE", "tmp", dead)
    _note(db, ws, "DELETE", "old", old)
    return len(dead) + len(old)


def _commit(
    db: Db,
    ws: str,
    manifest: Manifest,
    add: Sequence[dict[str, Any]],
    remove: Iterable[str],
    deletes: Sequence[Mapping[str, Any]],
) -> bool:
    """Change the manifest from `manifest` (unchanged since read) and delete `deletes` (each still there), in one
    transaction; False when another merge came first or something to delete is gone."""
    gone = set(remove)
    segments = [s for s in manifest.segments if s["id"] not in gone] + list(add)
    values: dict[str, Any] = to_item({":v": manifest.version + 1, ":s": json.dumps(segments, separators=(",", ":"))})
    names = {"#v": "v", "#s": "segs"}
    update = "SET #v = :v, #s = :s"
    if add:  # live now: no longer being written
        update += " DELETE #t :new"
        names["#t"], values[":new"] = "tmp", {"SS": sorted(s["id"] for s in add)}
    if gone:  # their items to delete
        update += " ADD #o :gone"
        names["#o"], values[":gone"] = "old", {"SS": sorted(gone)}
    if manifest.version:
        values[":old"] = {"N": str(manifest.version)}
    actions: list[dict[str, Any]] = [
        {
            "Update": {
                "TableName": db.table,
                "Key": to_item(keys.text_manifest(ws)),
                "UpdateExpression": update,
                "ConditionExpression": "#v = :old" if manifest.version else "attribute_not_exists(#v)",
                "ExpressionAttributeNames": names,
                "ExpressionAttributeValues": values,
            }
        }
    ]
    actions += [
        {
            "Delete": {
                "TableName": db.table,
                "Key": to_item({"PK": k["PK"], "SK": k["SK"]}),
                "ConditionExpression": "attribute_exists(PK)",
            }
        }
        for k in deletes
    ]
    try:
        db.client.transact_write_items(TransactItems=actions)  # type: ignore[arg-type]
        return True
    except ClientError as exc:
        if is_throttling(exc) or error_code(exc) not in (
            "TransactionCanceledException",
            "TransactionConflictException",
        ):
            raise
        return False


# ---------------------------------------------------------------- merging (the deriver)


def merge(db: Db, ws: str, session_ids: Iterable[str], *, min_docs: int = MERGE_MIN_DOCS) -> int:
    """Merge the fresh shards of `session_ids` that hold `min_docs` messages or more into segments, then compact;
    how many messages were merged."""
    return sum(merge_shard(db, ws, shard, min_docs=min_docs) for shard in sorted({shard_of(s) for s in session_ids}))


def merge_shard(
    db: Db,
    ws: str,
    shard: int,
    *,
    min_docs: int = MERGE_MIN_DOCS,
    attempts: int = 3,
    now: Callable[[], float] = time.time,
) -> int:
    """Merge a fresh shard's units (MERGE_UNITS at most) into a new segment, when they hold `min_docs` messages or
    more: its items, then the manifest and the fresh items' deletes in one transaction; compacts after. How many
    messages were merged (0: too few, or another merge kept winning)."""
    for _ in range(attempts):
        manifest = read_manifest(db, ws)
        fresh = query_first(
            db,
            MERGE_UNITS,
            KeyConditionExpression="PK = :pk",
            ConsistentRead=True,
            ExpressionAttributeValues=to_item({":pk": keys.text_fresh_pk(ws, shard)}),
        )
        if not fresh or sum(int(i["n"]) for i in fresh) < min_docs:
            return 0
        docs, taken = _fresh_docs(db, ws, fresh)
        if not taken:
            return 0
        entry, items = Segment.of(docs, 0).build(ws) if docs else ({}, [])
        _write_segment(db, ws, entry, items)
        if _commit(db, ws, manifest, [entry] if docs else [], (), taken):
            compact(db, ws, now=now)
            return len(docs)
        _take_back(db, ws, entry, items)
    return 0


def _write_segment(db: Db, ws: str, entry: Mapping[str, Any], items: Sequence[dict[str, Any]]) -> None:
    """A new segment's items, its id noted in the manifest first (a writer that dies leaves no unknown items)."""
    if items:
        _note(db, ws, "ADD", "tmp", [entry["id"]])
        _write(db, [{"PutRequest": {"Item": item}} for item in items])


def _take_back(db: Db, ws: str, entry: Mapping[str, Any], items: Sequence[dict[str, Any]]) -> None:
    """Delete the items of a segment that lost its transaction, then its note."""
    if items:
        delete_keys(db, [{"PK": i["PK"]["S"], "SK": i["SK"]["S"]} for i in items])
        _note(db, ws, "DELETE", "tmp", [entry["id"]])


def _fresh_docs(db: Db, ws: str, fresh: Sequence[Mapping[str, Any]]) -> tuple[list[Doc], list[Mapping[str, Any]]]:
    """(the docs to merge, the fresh items to take): the docs of the units whose session is live in their incarnation
    and whose texts are all written; the units of deleted sessions and earlier incarnations are taken with no doc.
    A unit whose texts are not all written is left fresh: its request is still writing them, or died and the
    deriver's repair writes them after writing the unit's fresh item again; taken, it would be counted twice (in the
    segment, and fresh again), and a text written here could land after its session's purge."""
    sessions = _sessions(db, ws, {i["s"] for i in fresh})
    taken: list[Mapping[str, Any]] = []
    live: list[tuple[Mapping[str, Any], list[Doc]]] = []
    for item in fresh:
        session = sessions.get(item["s"])
        incarnation = (session or {}).get("incarnation") or ""
        if session is None or "deleted_at" in session or item.get("i") not in (None, incarnation):
            taken.append(item)
            continue
        live.append(
            (
                item,
                [
                    Doc(item["s"], int(seq), incarnation, peer, Document.parse(signature, int(length)))
                    for seq, peer, length, signature in _unpack(item["z"])
                ],
            )
        )
    by_session: dict[str, list[int]] = {}
    for _, docs in live:
        for d in docs:
            by_session.setdefault(d.session, []).append(d.seq)
    present = {
        (session, int(i["seq"])) for session, seqs in by_session.items() for i in texts_at(db, ws, session, seqs)
    }
    merged: list[Doc] = []
    for item, docs in live:
        if all(d.key in present for d in docs):
            taken.append(item)
            merged += docs
    return merged, taken


def _sessions(db: Db, ws: str, session_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
    wanted = sorted(set(session_ids))
    found = batch_get(db, [keys.session(ws, s) for s in wanted], ("id", "incarnation", "deleted_at")) if wanted else []
    return {i["id"]: i for i in found}


def compact(db: Db, ws: str, *, rounds: int = 2, now: Callable[[], float] = time.time) -> int:
    """Merge FAN_IN segments of the lowest level that has as many into one of the next (their messages of deleted
    sessions and earlier incarnations left out), `rounds` times at most, after deleting what dead writers left
    (`_sweep`); how many segments were merged."""
    merged = 0
    for round_ in range(rounds):
        manifest = read_manifest(db, ws)
        if round_ == 0 and _sweep(db, ws, manifest, now()):
            manifest = read_manifest(db, ws)
        by_level: dict[int, list[dict[str, Any]]] = {}
        for segment in manifest.segments:
            by_level.setdefault(int(segment["lv"]), []).append(segment)
        chosen = next(
            (
                sorted(group, key=lambda s: s["id"])[:FAN_IN]
                for level, group in sorted(by_level.items())
                if len(group) >= FAN_IN
                and sum(int(s["n"]) for s in sorted(group, key=lambda s: s["id"])[:FAN_IN]) <= MAX_SEGMENT_DOCS
            ),
            None,
        )
        if chosen is None:
            return merged
        if _replace(db, ws, manifest, chosen, max(int(s["lv"]) for s in chosen) + 1):
            merged += len(chosen)
    return merged


def _replace(db: Db, ws: str, manifest: Manifest, chosen: Sequence[Mapping[str, Any]], level: int) -> bool:
    """Replace the segments `chosen` by one of `level` holding their live messages (none: by nothing): its items,
    then the manifest, then their items; False when another merge changed the manifest first, or one of them is no
    longer live in `manifest`."""
    live_ids = {s["id"] for s in manifest.segments}
    if any(s["id"] not in live_ids for s in chosen):
        # Another compaction replaced it (a vacuum's later segments are from an earlier manifest): its items may
        # still be there, and its live messages are in the segment that replaced it already.
        return False
    read = [_segment_items(db, ws, s["id"]) for s in chosen]
    docs = [d for items in read for d in _segment_docs(items)]
    sessions = _sessions(db, ws, {d.session for d in docs})
    live = [
        d
        for d in docs
        if d.session in sessions
        and "deleted_at" not in sessions[d.session]
        and (sessions[d.session].get("incarnation") or "") == d.incarnation
    ]
    entry, items = Segment.of(live, level).build(ws) if live else ({}, [])
    _write_segment(db, ws, entry, items)
    if not _commit(db, ws, manifest, [entry] if live else [], [s["id"] for s in chosen], ()):
        _take_back(db, ws, entry, items)
        return False
    delete_keys(db, [{"PK": i["PK"], "SK": i["SK"]} for items_ in read for i in items_])
    _note(db, ws, "DELETE", "old", [s["id"] for s in chosen])
    return True


def vacuum(
    db: Db, ws: str, session_id: str, *, time_left: Callable[[], float] = lambda: math.inf, attempts: int = 3
) -> bool:
    """Rewrite each segment holding messages of `session_id` (deleted) without them, so the statistics are again
    exactly the live messages'; whether every one was (out of time, or outrun by merges: ask again)."""
    for _ in range(attempts):
        manifest = read_manifest(db, ws)
        holding = _holding(db, ws, manifest, session_id)
        left = [s for s in manifest.segments if s["id"] in holding]
        if not left:
            return True
        for segment in left:
            if time_left() < 0:
                return False
            if not _replace(db, ws, manifest, [segment], int(segment["lv"])):
                break  # (another merge changed the manifest, or replaced this segment: read it again)
            manifest = read_manifest(db, ws)
    return False


def _holding(db: Db, ws: str, manifest: Manifest, session_id: str) -> set[str]:
    """The manifest's segments whose session lists name `session_id`: their headers, then in each the one part of the
    list whose range could hold it (two BatchGetItems a hundred segments, a few KB a segment)."""
    headers = batch_get(db, [{"PK": keys.text_segment_pk(ws, s["id"]), "SK": "H"} for s in manifest.segments])
    parts = []
    for header in headers:
        part = bisect.bisect_right(_unpack(header["z"]).get("sf") or [], session_id) - 1
        if part >= 0:
            parts.append({"PK": header["PK"], "SK": f"S{part:05d}"})
    return {i["PK"].rpartition("#XG#")[2] for i in batch_get(db, parts) if session_id in _unpack(i["z"])}


def _segment_items(db: Db, ws: str, segment: str, *, keys_only: bool = False) -> list[dict[str, Any]]:
    return _partition(db, keys.text_segment_pk(ws, segment), keys_only=keys_only)


def _fresh_shard(db: Db, ws: str, shard: int) -> list[dict[str, Any]]:
    return _partition(db, keys.text_fresh_pk(ws, shard))


def _partition(db: Db, pk: str, *, keys_only: bool = False) -> list[dict[str, Any]]:
    """Every item of a partition (consistent; only their keys, `keys_only`)."""
    return query_all(
        db,
        KeyConditionExpression="PK = :pk",
        ConsistentRead=True,
        **({"ProjectionExpression": "PK, SK"} if keys_only else {}),
        ExpressionAttributeValues=to_item({":pk": pk}),
    )


# ---------------------------------------------------------------- purging


def purge_session(
    db: Db, ws: str, session_id: str, incarnation: str | None, *, time_left: Callable[[], float] = lambda: math.inf
) -> tuple[int, bool]:
    """Take a session's messages out of the index: its fresh units (of `incarnation`, or of none named), the segments
    holding its messages rewritten without them (`vacuum`), its texts PURGE_PAGE at a time: (how many texts, done?).
    Stops once `time_left()` is under zero between steps; a new call goes on. From its delete until then, every
    search leaves its messages out (its statistics still count them)."""
    fresh = query_all(
        db,
        KeyConditionExpression="PK = :pk",
        FilterExpression="#s = :s",
        ProjectionExpression="PK, SK, i",
        ConsistentRead=True,
        ExpressionAttributeNames={"#s": "s"},
        ExpressionAttributeValues=to_item({":pk": keys.text_fresh_pk(ws, shard_of(session_id)), ":s": session_id}),
    )
    delete_keys(
        db,
        [{"PK": i["PK"], "SK": i["SK"]} for i in fresh if incarnation is None or i.get("i") in (None, incarnation)],
    )
    if not vacuum(db, ws, session_id, time_left=time_left):
        return 0, False
    deleted = 0
    while True:
        page = query_first(
            db,
            PURGE_PAGE,
            KeyConditionExpression="PK = :pk",
            ProjectionExpression="PK, SK",
            ConsistentRead=True,
            ExpressionAttributeValues=to_item({":pk": keys.text_docs_pk(ws, session_id)}),
        )
        if not page:
            return deleted, True
        deleted += delete_keys(db, page)
        if time_left() < 0:
            return deleted, False


def delete_index(db: Db, ws: str, peers: Iterable[str]) -> int:
    """Delete a workspace's index (its delete, its sessions purged): its manifest, segments and fresh shards, and
    what the release before segments kept (`delete_old_index`: its sessions' purges under this release left it)."""
    manifest = read_manifest(db, ws)
    segments = [s["id"] for s in manifest.segments] + list(manifest.building) + list(manifest.replaced)
    pks = [keys.text_segment_pk(ws, s) for s in dict.fromkeys(segments)]
    pks += [keys.text_fresh_pk(ws, shard) for shard in range(FRESH_SHARDS)]
    found = [keys.text_manifest(ws)]
    for pk in pks:
        found += query_all(
            db,
            KeyConditionExpression="PK = :pk",
            ProjectionExpression="PK, SK",
            ConsistentRead=True,
            ExpressionAttributeValues=to_item({":pk": pk}),
        )
    return delete_keys(db, found) + sum(delete_old_index(db, ws, peers))


# ---------------------------------------------------------------- reading


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
        fresh_items = each(_pool(), lambda shard: _fresh_shard(db, ws, shard), range(FRESH_SHARDS))
        budget.spend(FRESH_SHARDS, sum(_size(i) for items in fresh_items for i in items))
        fresh = [
            Doc(i["s"], int(seq), i.get("i") or "", peer, Document.parse(signature, int(length)))
            for items in fresh_items
            for i in items
            for seq, peer, length, signature in _unpack(i["z"])
        ]
        wanted = [
            {"PK": keys.text_segment_pk(ws, s["id"]), "SK": f"T{b:05d}"}
            for s in manifest.segments
            for b in sorted({_bucket(t, int(s["tb"])) for t in asked})
        ]
        if with_headers:
            wanted += [{"PK": keys.text_segment_pk(ws, s["id"]), "SK": "H"} for s in manifest.segments]
        postings: dict[tuple[str, str], list[int]] = {}
        df: dict[tuple[str, str], tuple[int, list[int]]] = {}
        headers: dict[str, dict[str, Any]] = {}
        chunked: list[tuple[str, str, int]] = []
        for item in _get(db, wanted, budget):
            segment = item["PK"].rpartition("#XG#")[2]
            data = _unpack(item["z"])
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
                postings.setdefault((segment, term), []).extend(_unpack(item["z"]))
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
            tables[(item["PK"].rpartition("#XG#")[2], int(item["SK"][1:]))] = _unpack(item["z"])
        resolved = []
        for (seg, ref), score in batch:
            if not seg:
                resolved.append((ref, score))
            elif (seg, ref // DOC_PART) in tables:
                session, seq, incarnation = tables[(seg, ref // DOC_PART)][ref % DOC_PART]
                resolved.append(((session, seq, incarnation), score))
        fresh_ids = sorted({session for (session, _, _), _ in resolved} - set(sessions))
        if fresh_ids:
            found = _sessions(db, ws, fresh_ids)
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


# ---------------------------------------------------------------- the units of stored messages (repair, upgrade)


def unit_range(unit: str) -> tuple[int, int]:
    """The first and last seq the messages of a unit `unit_of` names can be at: a batch is 100 messages at most from
    its first seq, a legacy block 100 seqs from its first (`session:first:nonce`; ids hold no colon)."""
    first = int(unit.split(":")[1])
    return first, first + LEGACY_BLOCK - 1


def unit_members[M: Mapping[str, Any]](session_id: str, unit: str, messages: Iterable[M]) -> list[M]:
    """The messages of `unit` among `messages` (stored items of the session), by seq. Given every stored message of
    `unit_range(unit)`, the whole unit: what each indexer of stored messages passes `index_texts`, so none indexes a
    unit twice or in part."""
    first, last = unit_range(unit)
    return sorted(
        (m for m in messages if first <= int(m["seq"]) <= last and unit_of(session_id, m) == unit),
        key=lambda m: int(m["seq"]),
    )


# ---------------------------------------------------------------- the release before segments (deploy/reindex.py)

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
        return {int(e[0]) for i in items if i.get("i") in (None, incarnation) for e in _unpack(i["z"])}


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
            rows += _unpack(item["z"])
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
        if put_bound(db, ws, session_id, incarnation, _fresh_items(ws, session_id, unit, incarnation, entries))
        else 0
    )


def put_bound(db: Db, ws: str, session_id: str, incarnation: str | None, items: Sequence[dict[str, Any]]) -> bool:
    """Put derived `items` (raw AttributeValues: rewritten identically by a replay, so no transaction), then read the
    session: when it was deleted (or, `incarnation` named, created again) meanwhile, delete them, so nothing lands
    after a purge that could not see it. Whether they stayed."""
    _write(db, [{"PutRequest": {"Item": dict(item)}} for item in items])
    if alive(db, ws, session_id, incarnation):
        return True
    delete_keys(db, [{"PK": i["PK"]["S"], "SK": i["SK"]["S"]} for i in items])
    return False


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
            postings += sum(each(_pool(), lambda t: _delete_partition(db, keys.old_text_postings_pk(ws, t)), terms_))
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
