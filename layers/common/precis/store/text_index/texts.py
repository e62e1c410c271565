"""Writing the index: a unit's fresh items and its messages' texts, exactly once, bound to the session's
incarnation; and the texts a session has."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from botocore.exceptions import ClientError

from precis.lexical import Document
from precis.store import keys
from precis.store.db import Db, batch_get, each, error_code, query_all, to_item
from precis.store.records import delete_keys
from precis.store.text_index.items import ITEM_RAW, Text, pack, pool, shard_of, write


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
    fresh = fresh_items(ws, session_id, unit, incarnation, entries)
    write(db, [{"PutRequest": {"Item": item}} for item in fresh])
    write(
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

    each(pool(), delete, list(seqs))


def fresh_items(
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
                "z": pack(part),
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


def session_states(db: Db, ws: str, session_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
    wanted = sorted(set(session_ids))
    found = batch_get(db, [keys.session(ws, s) for s in wanted], ("id", "incarnation", "deleted_at")) if wanted else []
    return {i["id"]: i for i in found}


def put_bound(db: Db, ws: str, session_id: str, incarnation: str | None, items: Sequence[dict[str, Any]]) -> bool:
    """Put derived `items` (raw AttributeValues: rewritten identically by a replay, so no transaction), then read the
    session: when it was deleted (or, `incarnation` named, created again) meanwhile, delete them, so nothing lands
    after a purge that could not see it. Whether they stayed."""
    write(db, [{"PutRequest": {"Item": dict(item)}} for item in items])
    if alive(db, ws, session_id, incarnation):
        return True
    delete_keys(db, [{"PK": i["PK"]["S"], "SK": i["SK"]["S"]} for i in items])
    return False
