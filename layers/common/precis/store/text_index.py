"""Exact lexical search over a workspace's messages: an inverted index in the table, written by the request that
stores the messages, read with strongly consistent Queries, so a message is found as soon as its post answers.

Items (keys in `precis.store.keys`):

- a **posting** per (term, message), in the term's partition, sorted by count group, then length, then text
  (`text_posting_sk`): each group is read shortest text first, which `precis.lexical.top_k` turns into the exact top
  k with early termination. It carries the count and the speaker (peer search filters on it); the length is in its
  sort key.
- a **counter** per term, in the workspace's counters partition (`n` messages say it, `g` the groups its postings
  are in) and one in each peer's (`n` of that peer's messages say it), with a **statistics** item in each (`n`
  messages, `len` their total length). Exact: a peer search's idf is the peer's, a workspace search's the workspace's;
  items of their own, so no item grows with the number of peers.
- a **text** per message (`text_doc`): its term counts, length, speaker and the unit that indexed it. A session search
  ranks the session's texts from these alone; a workspace search reads a few of them to settle its winners.

A batch of messages is indexed as one **unit** (its session, incarnation and first seq): postings first (a rewrite
is the same item), then each counter and the statistics with one conditional update that adds the unit's counts and
marks the unit on the item (`u:{unit}`), refused if the mark is there (a retried unit never counts twice, and no
transaction: concurrent writers of a common word never conflict), then the texts, last, so a text present means its
unit is counted. The deriver removes the marks once the texts are there (`settle`), and indexes, after a grace period
longer than the ingest function can run, a unit whose request died before its texts (`repair`). A session's purge
takes its counts back the same way, in units of aligned seq blocks, then marks its texts taken back, deletes its
postings, the marks its counters hold (read first, so it removes only those that are there) and its texts, under a
deadline, resumably. A post indexes only what it can write in its time (`index_cost`, in postings); the deriver
indexes a larger batch.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from precis.lexical import Document, Key, Page, Posting, Query, Stats, group_of, idf, rank_all, terms, top_k
from precis.store import keys
from precis.store.db import Db, batch_get, each, error_code, query_all, to_item
from precis.store.records import delete_keys, write_batch

if TYPE_CHECKING:
    from types_boto3_dynamodb.type_defs import WriteRequestTypeDef

MAX_QUERY_TERMS = 99  # distinct words of a query that count (one BatchGetItem reads their counters and the stats)
PURGE_BLOCK = 100  # seqs per unit of a purge: aligned, so a resumed purge takes back the same counts
PURGE_CHUNK = 100  # counters a purge reads (one BatchGetItem) and takes back between two looks at its deadline
MARK_CHUNK = 800  # marks a purge removes between two looks at its deadline (~0.1 s, 8 at a time)
# Marks past which a settle reads which are there before removing them: one attempt may then not finish (a unit of
# 100 long messages holds up to 204,802), and the next removes only what is left, not every mark again. Below it,
# the common case (a post of chat messages), the removals are sent blind: cheaper than reading first.
SETTLE_READ_FIRST = 1_000
_DOC_FIELDS = ("PK", "SK", "seq", "peer", "tsig", "tlen", "u")


@dataclass(frozen=True)
class Text:
    """One message to index: its seq, speaker and text."""

    seq: int
    peer: str
    content: str


@cache
def _pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=8, thread_name_prefix="precis-text-index")


def legacy_unit(session_id: str, seq: int) -> str:
    """The unit of a message stored without one (before this index, or by a writer that does not index): the aligned
    block of 100 seqs it is in, so every indexer (the deriver's repair, the upgrade's backfill) names it the same."""
    first = (seq - 1) // PURGE_BLOCK * PURGE_BLOCK + 1
    return f"{session_id}:{first}:-"


def unit_of(session_id: str, message: Mapping[str, Any]) -> str:
    """The index unit a stored message belongs to (`ib`, else its legacy block)."""
    return message.get("ib") or legacy_unit(session_id, int(message["seq"]))


def _mark(unit: str) -> str:
    return f"u:{unit}"


# ---------------------------------------------------------------- writing


# What a counter update costs against a posting, measured (moto in-process, 8 threads: 0.12 ms a put in a
# BatchWriteItem of 25, 1.0 ms an UpdateItem, a request of its own): a unit's cost is counted in postings.
UPDATE_COST = 8
# The cost a post's index may have before it answers (messages.ingest): the ingest function has 15 s, of which the
# index may take a third (5 s, ~40,000 postings at 0.12 ms), halved for Lambda's 512 MB (a third of a vCPU, and
# botocore's serializing is CPU). A unit costing more is stored, answered, and indexed by the deriver, which need not
# wait for its request (message_search).
INLINE_MAX_COST = 20_000


class OutOfTime(Exception):
    """An indexer given a deadline stopped before it: what it counted is marked, its texts are not written."""


class TooMuchToIndex(Exception):
    """A unit makes more writes than its indexer may make in the time it has: nothing was written."""


def index_cost(documents: Sequence[tuple[str, Document]]) -> int:
    """The writes indexing these (speaker, document)s as one unit makes, in postings: a posting per (term, text), a
    text each, and UPDATE_COST per counter it adds to (each term's, the workspace's and the speaker's, and the
    statistics)."""
    return sum(len(d.counts) + 1 for _, d in documents) + UPDATE_COST * len(_tally("", documents)[0])


def index_texts(
    db: Db,
    ws: str,
    session_id: str,
    unit: str,
    texts: Sequence[Text],
    *,
    max_cost: int | None = None,
    resume: bool = False,
    time_left: Callable[[], float] | None = None,
) -> int:
    """Index a unit's messages (postings, counts, texts), exactly once however often it is asked; how many texts were
    written. A unit whose texts exist already is counted: only its missing texts are written again. With
    `max_cost`, a unit whose `index_cost` is higher raises TooMuchToIndex before writing anything. With `resume`
    (an indexer that may have stopped midway before: the deriver's repair, a clone's copy), the counters are read
    first, PURGE_CHUNK at a time, and only those without the unit's mark updated: each attempt goes on from where the
    last one stopped instead of sending every update again; with `time_left` too, it raises OutOfTime between two
    chunks once that is under zero (no text written: the next attempt goes on from the marks)."""
    if not texts:
        return 0
    documents = {t.seq: Document.of(t.content, speaker=t.peer) for t in texts}
    if max_cost is not None:
        cost = index_cost([(t.peer, documents[t.seq]) for t in texts])
        if cost > max_cost:
            raise TooMuchToIndex(f"unit {unit}: {cost} writes (in postings), more than {max_cost}")
    found = batch_get(db, [keys.text_doc(ws, session_id, t.seq) for t in texts], ("seq", "u"))
    # A text another unit wrote (a clone's copy of the same seq) is counted there: not this unit's to count or write.
    texts = [t for t in texts if t.seq not in {int(i["seq"]) for i in found if i.get("u") != unit}]
    have = {int(i["seq"]) for i in found if i.get("u") == unit}
    if texts and not have:
        _put_postings(db, ws, session_id, texts, documents)
        _count(db, ws, unit, [(t.peer, documents[t.seq]) for t in texts], sign=1, resume=resume, time_left=time_left)
    missing = [t for t in texts if t.seq not in have]
    _write(db, [{"PutRequest": {"Item": _doc_item(ws, session_id, t, documents[t.seq], unit)}} for t in missing])
    return len(missing)


def _doc_item(ws: str, session_id: str, text: Text, document: Document, unit: str) -> dict[str, Any]:
    return to_item(
        {
            **keys.text_doc(ws, session_id, text.seq),
            "kind": "xdoc",
            "seq": text.seq,
            "peer": text.peer,
            "tsig": document.signature(),
            "tlen": document.length,
            "u": unit,
        }
    )


def _put_postings(db: Db, ws: str, session_id: str, texts: Sequence[Text], documents: Mapping[int, Document]) -> None:
    _write(
        db,
        [
            {
                "PutRequest": {
                    "Item": to_item(
                        {
                            "PK": keys.text_postings_pk(ws, term),
                            "SK": keys.text_posting_sk(group_of(count), documents[t.seq].length, session_id, t.seq),
                            "n": count,
                            "p": t.peer,
                        }
                    )
                }
            }
            for t in texts
            for term, count in documents[t.seq].counts.items()
        ],
    )


def _posting_keys(ws: str, session_id: str, seq: int, document: Document) -> list[dict[str, str]]:
    return [
        {
            "PK": keys.text_postings_pk(ws, term),
            "SK": keys.text_posting_sk(group_of(count), document.length, session_id, seq),
        }
        for term, count in document.counts.items()
    ]


def _write(db: Db, requests: list[WriteRequestTypeDef]) -> None:
    """BatchWriteItems of 25, in parallel; unprocessed items retried."""
    chunks = [requests[i : i + 25] for i in range(0, len(requests), 25)]
    each(_pool(), lambda chunk: write_batch(db, chunk), chunks)


def _counter_keys(ws: str, peer: str, document: Document) -> list[tuple[str, str]]:
    """Every counter (partition, sort key) a text adds to: its terms' and the statistics, the workspace's and its
    peer's (the statistics last)."""
    scopes = (keys.text_peer_counters_pk(ws, peer), keys.text_counters_pk(ws))
    return [(pk, term) for pk in scopes for term in sorted(document.counts)] + [(pk, keys.TEXT_STATS) for pk in scopes]


def _tally(
    ws: str, documents: Sequence[tuple[str, Document]]
) -> tuple[dict[tuple[str, str], Counter[str]], dict[tuple[str, str], set[int]]]:
    """What the documents add to each counter (partition, sort key) they touch, and the groups of its postings."""
    counts: dict[tuple[str, str], Counter[str]] = {}
    groups: dict[tuple[str, str], set[int]] = {}
    for peer, document in documents:
        for pk in (keys.text_counters_pk(ws), keys.text_peer_counters_pk(ws, peer)):
            stats = counts.setdefault((pk, keys.TEXT_STATS), Counter())
            stats["n"] += 1
            stats["len"] += document.length
            for term, count in document.counts.items():
                counts.setdefault((pk, term), Counter())["n"] += 1
                groups.setdefault((pk, term), set()).add(group_of(count))
    return counts, groups


def _count(
    db: Db,
    ws: str,
    unit: str,
    documents: Sequence[tuple[str, Document]],
    sign: int,
    *,
    resume: bool = False,
    time_left: Callable[[], float] | None = None,
) -> None:
    """Add (sign 1) or take back (-1) the documents' counts, each counter and the statistics once for `unit`: the
    workspace's and each peer's, each an item of its own (a workspace of thousands of peers grows none of them).
    Counts are taken back only from counters that exist: a workspace deleted before its sessions' purges ran has
    none. With `resume`, the counters already marked are read and left alone."""
    counts, groups = _tally(ws, documents)
    if not resume:
        _update_counters(db, unit, counts, groups, sign, list(counts))
        return
    touched = sorted(counts)
    for start in range(0, len(touched), PURGE_CHUNK):
        if start and time_left is not None and time_left() < 0:
            raise OutOfTime(f"unit {unit}: {start} of {len(touched)} counters counted")
        chunk = touched[start : start + PURGE_CHUNK]
        marked = {key for key, units in _marks_held(db, chunk, [unit]).items() if units}
        _update_counters(db, unit, counts, groups, sign, [key for key in chunk if key not in marked])


def _update_counters(
    db: Db,
    unit: str,
    counts: Mapping[tuple[str, str], Counter[str]],
    groups: Mapping[tuple[str, str], set[int]],
    sign: int,
    which: Sequence[tuple[str, str]],
) -> None:
    """Add (sign 1) or take back (-1) `counts` on the counters `which`, each once for `unit` (its mark)."""

    def update(key: tuple[str, str]) -> None:
        names = {"#w": _mark(unit), **{f"#a{i}": name for i, name in enumerate(counts[key])}}
        values: dict[str, Any] = {
            ":one": {"N": "1"},
            **{f":a{i}": {"N": str(sign * n)} for i, n in enumerate(counts[key].values())},
        }
        adds = [f"#a{i} :a{i}" for i in range(len(counts[key]))]
        if sign > 0 and key in groups:
            names["#g"] = "g"
            values[":g"] = {"NS": [str(g) for g in sorted(groups[key])]}
            adds.append("#g :g")
        condition = "attribute_not_exists(#w)" + (" AND attribute_exists(PK)" if sign < 0 else "")
        try:
            db.client.update_item(
                TableName=db.table,
                Key=to_item({"PK": key[0], "SK": key[1]}),
                UpdateExpression=f"ADD {', '.join(adds)} SET #w = :one",
                ConditionExpression=condition,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
            )
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise  # (refused: this unit's counts are on the item already, or there is nothing to take from)

    each(_pool(), update, which)


def settle(db: Db, ws: str, session_id: str, seqs: Iterable[int]) -> int:
    """Remove the marks of the units whose texts at `seqs` are written (the deriver, as their inserts come down the
    stream); how many marks were removed. A text not written yet is left to the deriver's repair."""
    found = batch_get(db, [keys.text_doc(ws, session_id, s) for s in sorted(set(seqs))], ("tsig", "u", "peer"))
    marks = {(i["u"], key) for i in found for key in _counter_keys(ws, i["peer"], Document.parse(i["tsig"], 0))}
    if len(marks) > SETTLE_READ_FIRST:
        marks = _held(db, marks)
    return sum(each(_pool(), lambda mark: _unmark(db, mark[1], mark[0]), sorted(marks)))


def _held(db: Db, marks: Iterable[tuple[str, tuple[str, str]]]) -> set[tuple[str, tuple[str, str]]]:
    """Those of the (unit, counter) `marks` that are there, read PURGE_CHUNK counters a BatchGetItem."""
    by_key: dict[tuple[str, str], set[str]] = {}
    for unit, key in marks:
        by_key.setdefault(key, set()).add(unit)
    units, touched, held = sorted({u for us in by_key.values() for u in us}), sorted(by_key), set()
    for start in range(0, len(touched), PURGE_CHUNK):
        for key, marked in _marks_held(db, touched[start : start + PURGE_CHUNK], units).items():
            held |= {(unit, key) for unit in marked & by_key[key]}
    return held


def missing_texts(db: Db, ws: str, session_id: str, seqs: Iterable[int]) -> set[int]:
    """The seqs among `seqs` whose text is not indexed yet."""
    seqs = set(seqs)
    return seqs - {int(i["seq"]) for i in batch_get(db, [keys.text_doc(ws, session_id, s) for s in seqs], ("seq",))}


def purge_session(
    db: Db, ws: str, session_id: str, incarnation: str | None, *, time_left: Callable[[], float] = lambda: math.inf
) -> tuple[int, bool]:
    """Take a session's messages out of the index, an aligned block of seqs at a time (`_purge_block`): (how many
    texts, done?). Stops once `time_left()` is under zero, between blocks or between chunks of one, after some
    progress; a new call resumes where it stopped, taking back no count twice."""
    deleted, started = 0, False
    while items := _first_block(db, ws, session_id):
        if started and time_left() < 0:
            return deleted, False
        if not _purge_block(db, ws, session_id, incarnation, items, time_left):
            return deleted, False
        deleted, started = deleted + len(items), True
    return deleted, True


def _first_block(db: Db, ws: str, session_id: str) -> list[dict[str, Any]]:
    """The texts of the session's first aligned block of seqs still indexed (at most PURGE_BLOCK, one page)."""
    pk = keys.text_docs_pk(ws, session_id)
    first = db.client.query(
        TableName=db.table,
        KeyConditionExpression="PK = :pk",
        ConsistentRead=True,
        Limit=1,
        ProjectionExpression="seq",
        ExpressionAttributeValues=to_item({":pk": pk}),
    )["Items"]
    if not first:
        return []
    start = (int(first[0]["seq"]["N"]) - 1) // PURGE_BLOCK * PURGE_BLOCK + 1
    return query_all(
        db,
        KeyConditionExpression="PK = :pk AND SK BETWEEN :a AND :b",
        ConsistentRead=True,
        ExpressionAttributeValues=to_item(
            {
                ":pk": pk,
                ":a": keys.text_doc(ws, session_id, start)["SK"],
                ":b": keys.text_doc(ws, session_id, start + PURGE_BLOCK - 1)["SK"],
            }
        ),
    )


def _purge_block(
    db: Db,
    ws: str,
    session_id: str,
    incarnation: str | None,
    items: Sequence[Mapping[str, Any]],
    time_left: Callable[[], float],
) -> bool:
    """Take one block's texts out; whether it finished. In order, each step resumable: its counts, once (the block
    is a unit, `{session}:{incarnation}:purge:{block}`: a count is taken back only from a counter that exists
    without that mark); then its texts say so (`tb`); then its postings go; then the marks its counters hold, of
    the purge and of the units that indexed its texts (those that are there, read first); then its texts. The
    counters are read PURGE_CHUNK at a time with the marks they hold, and the marks removed MARK_CHUNK at a time;
    out of time between two chunks it stops, and the next call finds the same block: with `tb` on its texts it
    takes nothing back again, only removes the marks still there."""
    block = (int(items[0]["seq"]) - 1) // PURGE_BLOCK
    unit = f"{session_id}:{incarnation}:purge:{block}"
    documents = [(i["peer"], Document.parse(i["tsig"], int(i["tlen"]))) for i in items]
    counts, groups = _tally(ws, documents)
    touched = sorted(counts)
    units = sorted({unit, *(i["u"] for i in items if i.get("u"))})
    taken = all(i.get("tb") for i in items)  # counted back already: only marks and deletes are left
    steps = 0

    def out_of_time() -> bool:
        nonlocal steps
        steps += 1
        return steps > 1 and time_left() < 0  # (the first step always runs: each call makes progress)

    held: dict[tuple[str, str], set[str]] = {}  # the touched counters that exist -> the block's units marked there
    for start in range(0, len(touched), PURGE_CHUNK):
        if out_of_time():
            return False
        found = _marks_held(db, touched[start : start + PURGE_CHUNK], units)
        if not taken:
            _update_counters(db, unit, counts, groups, -1, [k for k, marked in found.items() if unit not in marked])
            found = {key: marked | {unit} for key, marked in found.items()}
        held |= {key: marked for key, marked in found.items() if marked}
    if not taken:
        _write(db, [{"PutRequest": {"Item": to_item({**i, "tb": 1})}} for i in items])
    postings = [k for i, (_, d) in zip(items, documents) for k in _posting_keys(ws, session_id, int(i["seq"]), d)]
    _write(db, [{"DeleteRequest": {"Key": to_item(key)}} for key in postings])
    # The block's counts are back and its texts say so: nothing can ask for its units again (the purge's, and those
    # that indexed the texts, should the deriver not have settled them), so their marks go.
    marks = sorted((u, key) for key, marked in held.items() for u in marked)
    for start in range(0, len(marks), MARK_CHUNK):
        if out_of_time():
            return False
        each(_pool(), lambda mark: _unmark(db, mark[1], mark[0]), marks[start : start + MARK_CHUNK])
    _write(db, [{"DeleteRequest": {"Key": to_item({"PK": i["PK"], "SK": i["SK"]})}} for i in items])
    return True


def _marks_held(db: Db, counters: Sequence[tuple[str, str]], units: Sequence[str]) -> dict[tuple[str, str], set[str]]:
    """The counters among `counters` that exist, each with those of `units` whose mark it holds (one BatchGetItem)."""
    found = batch_get(db, [{"PK": pk, "SK": sk} for pk, sk in counters], ("PK", "SK", *map(_mark, units)))
    return {(i["PK"], i["SK"]): {u for u in units if _mark(u) in i} for i in found}


def _unmark(db: Db, key: tuple[str, str], unit: str) -> int:
    """Remove `unit`'s mark from the counter at `key`; 1 if it was there."""
    try:
        db.client.update_item(
            TableName=db.table,
            Key=to_item({"PK": key[0], "SK": key[1]}),
            UpdateExpression="REMOVE #w",
            ConditionExpression="attribute_exists(#w)",
            ExpressionAttributeNames={"#w": _mark(unit)},
        )
        return 1
    except ClientError as exc:
        if error_code(exc) != "ConditionalCheckFailedException":
            raise
        return 0


def delete_counters(db: Db, ws: str, peers: Iterable[str]) -> int:
    """Delete a workspace's counters and statistics, and each of its `peers`' (its delete, its sessions purged)."""
    found = []
    for pk in [keys.text_counters_pk(ws), *(keys.text_peer_counters_pk(ws, p) for p in peers)]:
        found += query_all(
            db,
            KeyConditionExpression="PK = :pk",
            ProjectionExpression="PK, SK",
            ConsistentRead=True,
            ExpressionAttributeValues=to_item({":pk": pk}),
        )
    return delete_keys(db, found)


# ---------------------------------------------------------------- reading


class _Postings:
    """One (term, group)'s postings, read a page at a time with a consistent Query (a peer's only, with `peer`; only
    the texts `keep` keeps, with `keep`: a session can only be told from the sort key, which no filter reads)."""

    def __init__(
        self, db: Db, ws: str, term: str, group: int, peer: str | None, keep: Callable[[Key], bool] | None = None
    ):
        self.db, self.term, self.group, self.peer, self.keep = db, term, group, peer, keep
        self.pk = keys.text_postings_pk(ws, term)
        self.start: dict[str, Any] | None = None

    def read(self, size: int) -> Page:
        request: dict[str, Any] = {
            "TableName": self.db.table,
            "KeyConditionExpression": "PK = :pk AND begins_with(SK, :g)",
            "ConsistentRead": True,
            "Limit": size,
            "ProjectionExpression": "SK, n",
            "ExpressionAttributeValues": {":pk": {"S": self.pk}, ":g": {"S": f"{self.group}#"}},
        }
        if self.peer is not None:
            request["FilterExpression"] = "p = :p"
            request["ExpressionAttributeValues"][":p"] = {"S": self.peer}
        if self.start:
            request["ExclusiveStartKey"] = self.start
        out = self.db.client.query(**request)
        postings = []
        for item in out.get("Items", []):
            _group, length, session_id, seq = keys.parse_text_posting_sk(item["SK"]["S"])
            if self.keep is None or self.keep((session_id, seq)):
                postings.append(Posting((session_id, seq), int(item["n"]["N"]), length))
        self.start = out.get("LastEvaluatedKey")
        last = None
        if self.start:
            _group, length, session_id, seq = keys.parse_text_posting_sk(self.start["SK"]["S"])
            last = (length, (session_id, seq))
        elif out.get("Items"):
            _group, length, session_id, seq = keys.parse_text_posting_sk(out["Items"][-1]["SK"]["S"])
            last = (length, (session_id, seq))
        return Page(postings, last, self.start is None)


def query_terms(text: str) -> Counter[str]:
    """A query's distinct terms and how often it says each (its first MAX_QUERY_TERMS)."""
    counts = Counter(terms(text))
    return Counter(dict(list(counts.items())[:MAX_QUERY_TERMS]))


def rank_workspace(
    db: Db, ws: str, text: str, k: int, *, peer: str | None = None, keep: Callable[[Key], bool] | None = None
) -> list[tuple[Key, float]]:
    """The k messages of the workspace (of `peer` only, when given; those `keep` keeps, when given, scored with the
    workspace's statistics) that BM25 ranks best for `text`, best first, as ((session, seq), score): exact over every
    message in scope, reading postings only as deep as the k-th needs."""
    asked = query_terms(text)
    if not asked or k <= 0:
        return []
    pk = keys.text_peer_counters_pk(ws, peer) if peer else keys.text_counters_pk(ws)
    found = {i["SK"]: i for i in batch_get(db, [{"PK": pk, "SK": sk} for sk in [keys.TEXT_STATS, *asked]])}
    stats = found.get(keys.TEXT_STATS) or {}
    documents, total = int(stats.get("n", 0)), int(stats.get("len", 0))
    if documents <= 0:
        return []
    scope = Stats(documents, total)
    weights, readers = {}, []
    for term, said in asked.items():
        counter = found.get(term) or {}
        df = int(counter.get("n", 0))
        if df <= 0:
            continue  # no text in scope says it: it adds nothing to any score
        weights[term] = idf(df, documents) * said
        readers += [_Postings(db, ws, term, int(g), peer, keep) for g in sorted(counter.get("g") or ())]
    return top_k(weights, readers, k, scope.average_length, lambda keys_: _documents(db, ws, keys_))


def _documents(db: Db, ws: str, wanted: list[Key]) -> dict[Key, Document]:
    items = batch_get(db, [keys.text_doc(ws, s, seq) for s, seq in wanted], _DOC_FIELDS)
    return {
        (keys.parse_session_pk(i["PK"].removesuffix("#XD"))[1], int(i["seq"])): Document.parse(
            i["tsig"], int(i["tlen"])
        )
        for i in items
    }


def session_texts(
    db: Db, ws: str, session_id: str, *, through: int | None = None, peer: str | None = None
) -> dict[int, Document]:
    """A session's indexed texts by seq (those up to `through`, those of `peer`, when given), read whole with a
    consistent Query."""
    condition = "PK = :pk" + (" AND SK <= :last" if through is not None else "")
    values: dict[str, Any] = {":pk": keys.text_docs_pk(ws, session_id)}
    if through is not None:
        values[":last"] = keys.text_doc(ws, session_id, through)["SK"]
    items = query_all(
        db,
        KeyConditionExpression=condition,
        ConsistentRead=True,
        ProjectionExpression="seq, peer, tsig, tlen",
        ExpressionAttributeValues=to_item(values),
    )
    return {
        int(i["seq"]): Document.parse(i["tsig"], int(i["tlen"])) for i in items if peer is None or i.get("peer") == peer
    }


def rank_texts(documents: Mapping[Key, Document], text: str, k: int) -> list[tuple[Key, float]]:
    """The k best of `documents` for `text` by BM25 over exactly them (their own idf and average length)."""
    stats = Stats.of(documents.values())
    query = Query({t: idf(stats.df.get(t, 0), stats.documents) * n for t, n in query_terms(text).items()})
    return rank_all(query, documents, stats.average_length, k) if query else []


# ---------------------------------------------------------------- the units of stored messages (repair, upgrade)


def unit_range(unit: str) -> tuple[int, int]:
    """The first and last seq the messages of a unit `unit_of` names can be at: a batch is 100 messages at most from
    its first seq, a legacy block 100 seqs from its first (`session:first:nonce`; ids hold no colon)."""
    first = int(unit.split(":")[1])
    return first, first + PURGE_BLOCK - 1


def unit_members[M: Mapping[str, Any]](session_id: str, unit: str, messages: Iterable[M]) -> list[M]:
    """The messages of `unit` among `messages` (stored items of the session), by seq. Given every stored message of
    `unit_range(unit)`, the whole unit: what each indexer of stored messages passes `index_texts`, so none counts a
    unit twice or in part."""
    first, last = unit_range(unit)
    return sorted(
        (m for m in messages if first <= int(m["seq"]) <= last and unit_of(session_id, m) == unit),
        key=lambda m: int(m["seq"]),
    )


def marked_units(db: Db, ws: str) -> set[str]:
    """The units whose mark is still on the workspace's statistics item: counted and not settled (a batch whose
    insert the deriver has not seen yet, an indexer that stopped before settling, or one that never settles)."""
    found = batch_get(db, [{"PK": keys.text_counters_pk(ws), "SK": keys.TEXT_STATS}])
    prefix = _mark("")
    return {name.removeprefix(prefix) for item in found for name in item if name.startswith(prefix)}


def settle_unit(db: Db, ws: str, session_id: str, unit: str, seqs: Iterable[int]) -> int:
    """Remove `unit`'s marks, its texts at `seqs` being written: its terms' first, the statistics item's last, so a
    settling that stops midway leaves its unit in `marked_units`. How many of its texts were found."""
    found = [
        i
        for i in batch_get(db, [keys.text_doc(ws, session_id, s) for s in sorted(set(seqs))], ("tsig", "u", "peer"))
        if i.get("u") == unit
    ]
    if not found:
        return 0
    touched = {key for i in found for key in _counter_keys(ws, i["peer"], Document.parse(i["tsig"], 0))}
    stats = (keys.text_counters_pk(ws), keys.TEXT_STATS)
    each(_pool(), lambda key: _unmark(db, key, unit), sorted(touched - {stats}))
    _unmark(db, stats, unit)
    return len(found)
