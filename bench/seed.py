"""The benches' one bulk loader: sessions of up to 100,000 messages written with BatchWriteItem, with the store's own
item encoding, because the message route cannot seed them in a bench run (each post of 100 is a transaction and
its search index, ~165 DynamoDB requests: ~90 messages a second in-process).

This is the only bench module that writes the table behind Precis's back. What it writes is what the front door
writes, checked by tests/deploy/test_bench_seed.py: a conversation posted through `POST .../messages` and the same
conversation loaded here read back the same through the messages, context and search routes, item kind by item
kind with the same attributes. Everything else the benches do goes through bench/front.py.

- `write_messages`: a session's messages as the route stores them (a post of `post` messages at a time: seqs,
  `start_tokens`, runs, each post's search-index unit `ib` and its index-by second `ibu`), optionally with their
  search index as the ingest function writes it (`search.index_batch` per post: a fresh item and the texts) and
  merged as the deriver merges it when the stream brings the post's inserts (`search.merge_fresh` of the
  post's messages). The session must exist (created through the route): the index takes back what it wrote
  for a session that is not there.
- `put_summary`: a summary, as the summarizer stores it (no route writes one).
- `write_conclusions`: a collection of explicit conclusions as `POST .../conclusions` stores them (the conclusion,
  its vector, dedupe key, pointer, BM25 text item, the collection's head and its registry entry), embedded with the
  deployment's default (hashed) embedder, because the route's near-duplicate search makes 10,000 take most of an
  hour in moto; checked by tests/deploy/test_bench_seed_conclusions.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

POST = 100  # messages a post of the route takes at most: a unit of the search index each
CREATED_AT = "2024-05-01T10:00:00+00:00"
# The epoch second by which the post that stored a batch has indexed it (the route: its start + the function's
# remaining time). A loaded batch is indexed by the loader itself, or never: any past second says "not in flight".
INDEX_BY = 1_714_557_600


@dataclass(frozen=True)
class Said:
    """One message to load, as a post's body gives it: `tokens` None is counted as the route counts it."""

    peer: str
    content: str
    tokens: int | None = None
    run_id: str | None = None
    metadata: dict[str, Any] | None = None
    created_at: str = CREATED_AT


@dataclass(frozen=True)
class Stored:
    """What the loader stored of a message: its seq, tokens, `start_tokens`, run start and id."""

    seq: int
    tokens: int
    start: int
    run_start: int
    id: str


def _db(client, table: str, s3=None, bucket: str = ""):
    from precis.store.db import Db

    return Db(client=client, s3=s3, table=table, bucket=bucket)


def nonce(first_seq: int) -> str:
    """A post's index-unit nonce: the route draws 8 random hex digits; the loader's are the post's first seq (the same
    length, so the same bytes)."""
    return f"{first_seq:08x}"


def message_items(
    ws: str, session: str, said: Sequence[Said], *, post: int = POST, first_seq: int = 1, start_tokens: int = 0
) -> tuple[list[dict[str, Any]], list[Stored]]:
    """The message items the route stores for `said` posted `post` at a time into an empty session
    (store.messages.append_messages): plain values, and what each message's cost is."""
    from precis.store import keys
    from precis.store.messages import index_unit, make_message_id
    from precis.store.records import json_text
    from precis.tokens import count_text

    items, stored = [], []
    seq, start, run_id, run_start, run_index = first_seq - 1, start_tokens, None, 0, 0
    unit = ""
    for index, message in enumerate(said):
        seq += 1
        if index % post == 0:
            unit = index_unit(session, seq, nonce(seq))
        if message.run_id is None or message.run_id != run_id:
            run_start, run_index = seq, run_index + 1
        run_id = message.run_id
        tokens = count_text(message.content) if message.tokens is None else message.tokens
        item = {
            **keys.message(ws, session, seq),
            "kind": "message",
            "id": make_message_id(seq),
            "seq": seq,
            "peer_id": message.peer,
            "token_count": tokens,
            "start_tokens": start,
            "run_id": message.run_id,
            "run_start_seq": run_start,
            "run_index": run_index,
            "metadata": json_text(message.metadata or {}),
            "created_at": message.created_at,
            "ib": unit,
            "ibu": INDEX_BY,
            "content": message.content,
        }
        items.append(item)
        stored.append(Stored(seq, tokens, start, run_start, item["id"]))
        start += tokens
    return items, stored


def write_messages(
    client,
    table: str,
    ws: str,
    session: str,
    said: Iterable[Said],
    *,
    post: int = POST,
    index: bool = False,
    merge: bool = False,
    progress: Callable[[int], None] | None = None,
) -> list[Stored]:
    """Store `said` in the (empty, existing) session as the route would, `post` messages a post, with BatchWriteItem
    (25 a request); with `index`, each post's search index as the ingest function writes it, and with `merge` the
    session's fresh shard merged after each post as the deriver merges it. `progress(seqs written)` after each post."""
    from precis.store import search
    from precis.store.db import to_item
    from precis.store.records import write_batch

    said = list(said)
    items, stored = message_items(ws, session, said, post=post)
    db = _db(client, table)
    for first in range(0, len(items), post):
        batch = items[first : first + post]
        for at in range(0, len(batch), 25):
            write_batch(db, [{"PutRequest": {"Item": to_item(item)}} for item in batch[at : at + 25]])
        if index:
            texts = [search.Text(i["seq"], i["peer_id"], i["content"]) for i in batch]
            if search.index_batch(db, ws, session, batch[0]["ib"], texts) != len(texts):
                # (taken back: the session is not there, so nothing would find these messages)
                raise LookupError(f"{ws}/{session}: not indexed; create the session through the route first")
            if merge:  # (what the deriver does with the post's inserts: `merge_fresh` of their images)
                search.merge_fresh(db, batch)
        if progress is not None:
            progress(first + len(batch))
    return stored


def put_summary(
    client, table: str, ws: str, session: str, summary_type: str, content: str, covers: Stored, *, s3=None
) -> None:
    """A summary of messages 1..covers.seq, stored as the summarizer stores it (tokens counted as it counts them)."""
    from precis.store.resources import require_session
    from precis.store.summaries import put_summary as put
    from precis.tokens import count_text

    db = _db(client, table, s3)
    put(
        db,
        ws,
        session,
        incarnation=require_session(db, ws, session)["incarnation"],
        summary_type=summary_type,
        content=content,
        token_count=count_text(content),
        covers_seq=covers.seq,
        end_tokens=covers.start + covers.tokens,
        message_id=covers.id,
    )


def write_conclusions(client, table: str, ws: str, observer: str, observed: str, texts: Sequence[str]) -> list[str]:
    """Store `texts` as `observer`'s explicit conclusions about `observed` (no session), as the conclusions route
    stores them, with BatchWriteItem and then the store's own text-index backfill; their ids, in order. The texts
    must be distinct and not near-duplicates of each other (the route would merge those)."""
    from precis.llm.embeddings import HashedEmbedder
    from precis.settings import get_settings
    from precis.store import conclusions, keys
    from precis.store.db import to_item
    from precis.store.vectors import vector_attribute

    now = "2026-11-30T00:00:00.000000+00:00"
    ids, requests = [], []
    registry = {
        **keys.collection_registry(ws, observer, observed),
        "kind": "collection",
        "observer_id": observer,
        "observed_id": observed,
    }
    # the collection's head: its version (one per write the route makes; the loader's is one write) and count
    head = {**keys.collection_head(ws, observer, observed), "version": 1, "count": len(texts)}
    requests += [{"PutRequest": {"Item": to_item(registry)}}, {"PutRequest": {"Item": to_item(head)}}]
    embedder = HashedEmbedder(get_settings().embed_dimensions)  # the deployment's default embedder
    for text, vector in zip(texts, embedder.embed(list(texts))):
        cid = conclusions.new_conclusion_id()
        ids.append(cid)
        digest = conclusions.content_digest(text)
        item = {
            **keys.conclusion(ws, observer, observed, cid),
            "kind": "conclusion",
            "id": cid,
            "content": text,
            "observer_id": observer,
            "observed_id": observed,
            "level": "explicit",
            "created_at": now,
            "times_derived": 1,
            "source_message_ids": [],
            "source_at": now,
            "norm": digest,
            "cws": ws,
            "cid": cid,
        }
        vector_item = conclusions.vector_item(ws, observer, observed, cid, "explicit", None)
        for put in (
            to_item(item),
            {**to_item(vector_item), "vec": vector_attribute(vector)},
            to_item(
                {
                    **keys.conclusion_dedupe(ws, observer, observed, "explicit", None, digest),
                    "kind": "cdedupe",
                    "id": cid,
                }
            ),
            to_item(
                {
                    **keys.conclusion_pointer(ws, cid),
                    "kind": "cpointer",
                    "observer_id": observer,
                    "observed_id": observed,
                }
            ),
        ):
            requests.append({"PutRequest": {"Item": put}})
    for start in range(0, len(requests), 25):
        pending = {table: requests[start : start + 25]}
        while pending:
            pending = client.batch_write_item(RequestItems=pending).get("UnprocessedItems") or {}
    # Each conclusion's BM25 text item, as the store writes it for a collection stored before text items existed.
    conclusions.write_missing_texts(_db(client, table), ws, observer, observed)
    return ids


def timed(label: str, every: int, total: int) -> Callable[[int], None]:
    """A `progress` that prints `label: n / total messages (s)` each time another `every` messages are written."""
    started, shown = time.perf_counter(), [0]

    def progress(done: int) -> None:
        if done // every > shown[0]:
            shown[0] = done // every
            print(f"    {label}: {done:,} / {total:,} messages ({time.perf_counter() - started:.0f} s)", flush=True)

    return progress
