"""The previous design of message search (bench/retrieval_scale.py's PREVIOUS: hashed BM25 vectors in a vector index
and a count-min sketch of document frequencies), measured by its own code: `Previous` runs `main` in a subprocess
whose `precis`, `local` and `bench` are that commit's, from a temporary worktree. It loads that design's items as its
ingest wrote them and searches with its `message_search.search`, as the bench did then: that commit has no front
door to go through (no bench/front.py), and its store is not the one the benches measure today. Today's Precis is
measured through its routes by bench/retrieval_scale.py."""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path
from typing import Any


def _now():
    """This checkout's bench/retrieval_scale.py, by path (the corpus's and queries' types, the scopes): the worktree's
    own is the previous design's."""
    name = "retrieval_scale_now"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("retrieval_scale.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def message_item(ws: str, message: Any) -> dict[str, Any]:
    """The stored message `search` reads back by key, as that design's bench wrote it."""
    from precis.store import keys
    from precis.store.db import to_item
    from precis.store.messages import make_message_id

    tokens = len(message.text.split())
    return to_item(
        {
            **keys.message(ws, message.session, message.seq),
            "kind": "message",
            "id": make_message_id(message.seq),
            "seq": message.seq,
            "peer_id": message.peer,
            "content": message.text,
            "token_count": tokens,
            "start_tokens": 20 * (message.seq - 1),
            "run_start_seq": message.seq,
            "run_index": message.seq,
            "metadata": "{}",
            "created_at": "2026-11-30T00:00:00+00:00",
        }
    )


def _searches(now, clients: dict[str, Any], asked) -> list[dict[str, Any]]:
    """Every query in every scope through that design's `message_search.search` (limit K), with its DynamoDB requests
    and response bytes."""
    import boto3

    from bench.common import Requests, template
    from precis.store import message_search
    from precis.store.db import Db

    metered = boto3.client("dynamodb")
    db = Db(client=metered, s3=clients["s3"], table=template().table_name, bucket=template().bucket_name)
    rows = []
    for number, query in enumerate(asked):
        for scope in now.SCOPES:
            within = (
                {"session_id": query.session}
                if scope == "session"
                else {"peer_id": now.PEER}
                if scope == "peer"
                else {}
            )
            with Requests(metered) as counted:
                views = message_search.search(db, now.WS, query.text, now.K, None, **within)
            rows.append(
                {
                    "query": number,
                    "kind": query.kind,
                    "scope": scope,
                    "got": [[v["session_id"], int(v["seq"])] for v in views],
                    "requests": len(counted.ops),
                    "bytes": counted.bytes,
                    "ops": counted.by_op(),
                    "rru": None,
                    "rru_capacity": None,
                }
            )
    return rows


def main(argv: list[str]) -> None:
    """In the previous design's worktree: load its search items (`message_search.vector_item`, as its ingest wrote
    them) and its term statistics (`term_stats.count` per unit, as its deriver did) with the messages, metered by its
    bench/cost.py `Capacity`; then ask every query in every scope at each size. Writes the rows as JSON."""
    request, answer = argv
    spec = json.loads(Path(request).read_text())
    from bench.common import moto, template, use_fake_aws

    now = _now()
    Message, Query, UNIT, WS = now.Message, now.Query, now.UNIT, now.WS  # noqa: N806 - the bench's own names

    use_fake_aws()
    import boto3

    from bench.cost import Capacity
    from local.template import table_definition
    from precis.lexical import Document
    from precis.store import keys, term_stats
    from precis.store.db import Db
    from precis.store.message_search import vector_item

    def write_batch(db, requests):  # (its records module had no public one)
        pending = {db.table: requests}
        while pending:
            pending = db.client.batch_write_item(RequestItems=pending).get("UnprocessedItems") or None

    messages = [Message(*m) for m in spec["messages"]]
    asked = [Query(**q) for q in spec["queries"]]
    out: dict[str, Any] = {"sizes": {}}
    name, bucket = template().table_name, template().bucket_name
    with moto(stream=False) as clients:
        metered = boto3.client("dynamodb")
        capacity = Capacity(metered, clients["dynamodb"], table_definition(template()))
        db = Db(client=metered, s3=clients["s3"], table=name, bucket=bucket)
        loaded, load_s = 0, 0.0
        for size in spec["sizes"]:
            started = time.perf_counter()
            chunk_of: dict[tuple[str, int], list[Message]] = {}
            for message in messages[loaded:size]:
                chunk_of.setdefault((message.session, (message.seq - 1) // UNIT), []).append(message)
            for (sid, _), chunk in chunk_of.items():
                for label, items in (
                    ("messages", [message_item(WS, m) for m in chunk]),
                    ("search items", [vector_item(WS, sid, m.seq, m.peer, m.text) for m in chunk]),
                ):
                    capacity.label = label
                    for at in range(0, len(items), 25):
                        write_batch(db, [{"PutRequest": {"Item": item}} for item in items[at : at + 25]])
                capacity.label = "term statistics"
                term_stats.count(db, keys.message_terms(WS), (Document.of(m.text, m.peer) for m in chunk))
            capacity.label = "setup"
            load_s += time.perf_counter() - started
            loaded = size
            print(f"previous: {size:,} messages loaded in {load_s:.0f} s", flush=True)
            wru = {label: dict(capacity.totals[label]) for label in ("messages", "search items", "term statistics")}
            started = time.perf_counter()
            rows = _searches(now, clients, asked)
            print(f"previous: {len(rows)} searches at {size:,} in {time.perf_counter() - started:.0f} s", flush=True)
            out["sizes"][str(size)] = {
                "rows": rows,
                "wru": wru,
                "load_s": load_s,
                "search_s": time.perf_counter() - started,
            }
    Path(answer).write_text(json.dumps(out))
