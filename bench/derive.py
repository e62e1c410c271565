"""Derived memory's cost: LLM input tokens per 1,000 messages, and what a conclusion query reads.

1. Derivation: 1,000 messages (a user and an agent taking turns, in bursts of one to three exchanges with pauses
   between them, each burst delivered by the stream as one batch) run through the real deriver (`derive_target`) on
   in-process moto, with the llm engine's batching (512 tokens), twice in one run: without the quiet flush, and
   with it (a pause of QUIET_S or more fires the session's wake-up: `quiet_targets`, then `flush=True`). The engine
   answers extractively (offline) but every request is priced as the prompt the `llm` engine would send
   (`precis.memory.engines.prompt.build_messages`, counted with tiktoken). The baseline, in the same run, prices
   re-deriving the sender's whole history at every derivation the deriver made.
2. Query: `POST /conclusions/query` through its handler on collections of 100, 1,000 and 10,000 conclusions (loaded
   in bulk as the store writes them): DynamoDB requests and response bytes per query, counted at the AWS door,
   against reading the whole collection (what a store without a vector index would do). moto answers SearchVectors
   with the local stack's exact emulation. Then the context route with `peer_target` (and `search_query`).
"""

from __future__ import annotations

import json
import random
import time

from bench.common import Requests, moto, print_table, write_json
from bench.front import AWS, call

MESSAGES = 1_000
QUIET_S = 10.0  # the default PRECIS_DERIVE_QUIET_S
# The conversation's rhythm: bursts of 1-3 exchanges, seconds apart inside a burst; between bursts a pause of 3 to
# 90 s (the user reads, thinks, types), so some pauses are shorter than QUIET_S and most are longer.
BURST_EXCHANGES = (1, 3)
PAUSE_S = (3.0, 90.0)
SIZES = (100, 1_000, 10_000)
WORDS = (
    "budget invoice Lisbon studio design river deadline client proposal meeting contract schedule "
    "review draft figures launch supplier quote travel team agreed decided asked confirmed moved "
    "next week because the and with for about after before"
).split()
FACTS = (
    "I moved to {w} last spring.",
    "My sister works on the {w} team.",
    "I like {w} in the morning.",
    "I have a {w} meeting every week.",
    "I prefer short answers about the {w}.",
)


def _user_text(rng: random.Random) -> str:
    filler = " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 30))).capitalize() + "."
    return f"{rng.choice(FACTS).format(w=rng.choice(WORDS))} {filler}"


class _PricedDeriver:
    """The extractive deriver, with each request priced as the llm engine's prompt."""

    name = "priced"

    def __init__(self):
        from precis.memory.engines.extractive import ExtractiveDeriver

        self.inner, self.input_tokens, self.requests = ExtractiveDeriver(), 0, []

    def derive(self, request):
        from precis.memory.engines.prompt import build_messages
        from precis.tokens import count_messages

        self.input_tokens += count_messages(build_messages(request))
        self.requests.append(request)
        return self.inner.derive(request)

    def update_card(self, observed, card, counts, new):
        return self.inner.update_card(observed, card, counts, new)


def _derivation(quiet: bool) -> dict:
    from precis.memory.deriver import DeriveTarget, derive_target, quiet_targets
    from precis.memory.embeddings import HashedEmbedder
    from precis.memory.engines import DeriveMessage, DeriveRequest
    from precis.memory.engines.prompt import build_messages
    from precis.memory.wakeups import QuietWake
    from precis.settings import get_settings
    from precis.store.db import Db
    from precis.tokens import count_messages

    rng = random.Random(11)
    with moto(stream=False) as clients:
        # The deriver's own step runs in-process on a Db of the bench's clients (its engine priced); the messages
        # arrive through the API.
        db = Db(client=clients["dynamodb"], s3=clients["s3"], table="precis-local", bucket="precis-local")
        _ok(
            call(
                "POST",
                "/v3/workspaces",
                {"id": "bench", "configuration": {"deriver": {"engine": "llm", "batch_tokens": 512}}},
            )
        )
        _ok(call("POST", "/v3/workspaces/bench/sessions", {"id": "s"}))
        engine, embedder = _PricedDeriver(), HashedEmbedder(get_settings().embed_dimensions)
        history: list = []
        conclusions = flushes = 0
        while len(history) < MESSAGES:
            batch = []
            for i in range(len(history), min(MESSAGES, len(history) + 2 * rng.randint(*BURST_EXCHANGES))):
                peer = "alice" if i % 2 == 0 else "agent"
                text = _user_text(rng) if peer == "alice" else " ".join(rng.choice(WORDS) for _ in range(40))
                batch.append({"content": text, "peer_id": peer})
            stored = _ok(call("POST", "/v3/workspaces/bench/sessions/s/messages", {"messages": batch}))
            history += stored
            for sender in ("alice", "agent"):
                outcome = derive_target(
                    db,
                    get_settings(),
                    DeriveTarget("bench", "s", sender),
                    engine_for=lambda _config: engine,
                    embedder=embedder,
                )
                conclusions += outcome.conclusions
            pause = rng.uniform(*PAUSE_S)  # drawn in both runs, so both see the same messages
            if quiet and pause >= QUIET_S:  # the burst's wake-up fires and finds no newer message
                for target in quiet_targets(db, QuietWake("bench", "s", stored[-1]["seq"])):
                    flushes += 1
                    conclusions += derive_target(
                        db, get_settings(), target, engine_for=lambda _config: engine, embedder=embedder, flush=True
                    ).conclusions
        message_tokens = sum(m["token_count"] for m in history)
        # The baseline: every derivation re-sends all of the sender's messages so far.
        from_scratch = 0
        for request in engine.requests:
            last = request.messages[-1].seq
            everything = [
                DeriveMessage(m["id"], m["seq"], m["peer_id"], m["content"], m["created_at"])
                for m in history
                if m["peer_id"] == request.observed and m["seq"] <= last
            ]
            from_scratch += count_messages(build_messages(DeriveRequest(request.observed, everything)))
    return {
        "quiet_s": QUIET_S if quiet else None,
        "messages": MESSAGES,
        "message_tokens": message_tokens,
        "requests": len(engine.requests),
        "quiet_flushes": flushes,
        "incremental": engine.input_tokens,
        "from_scratch": from_scratch,
        "conclusions": conclusions,
    }


def _load(db, ws: str, observer: str, observed: str, texts: list[str], embedder) -> None:
    """Store a collection as the store writes it (conclusion, vector, dedupe key, pointer), by BatchWriteItem: the
    write path's near-duplicate search would make loading 10,000 quadratic in moto's brute-force emulation."""
    from precis.store import conclusions, keys
    from precis.store.db import to_item
    from precis.store.vectors import vector_attribute

    now = "2026-11-30T00:00:00.000000+00:00"
    requests = []
    for text, vector in zip(texts, embedder.embed(texts)):
        cid = conclusions.new_conclusion_id()
        digest = conclusions._digest(text)
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
        vector_item = {**conclusions._vector_item(ws, observer, observed, cid, "explicit", None)}
        for put in (
            item,
            {**to_item(vector_item), "vec": vector_attribute(vector)},
            {**keys.conclusion_dedupe(ws, observer, observed, "explicit", None, digest), "kind": "cdedupe", "id": cid},
            {**keys.conclusion_pointer(ws, cid), "kind": "cpointer", "observer_id": observer, "observed_id": observed},
        ):
            requests.append({"PutRequest": {"Item": put if "vec" in put else to_item(put)}})
    for start in range(0, len(requests), 25):
        db.client.batch_write_item(RequestItems={db.table: requests[start : start + 25]})


def _ok(reply) -> object:
    assert reply.status in (200, 201), (reply.status, reply.body)
    return reply.body


def _query_costs() -> list[dict]:
    from precis.memory.embeddings import HashedEmbedder
    from precis.settings import get_settings
    from precis.store import keys
    from precis.store.db import Db, query_all, to_item

    rng = random.Random(5)
    rows = []
    for size in SIZES:
        with moto(stream=False) as clients:
            db = Db(client=clients["dynamodb"], s3=clients["s3"], table="precis-local", bucket="precis-local")
            _ok(call("POST", "/v3/workspaces", {"id": "bench"}))
            _ok(call("POST", "/v3/workspaces/bench/peers", {"id": "alice"}))
            embedder = HashedEmbedder(get_settings().embed_dimensions)  # the deployment's default embedder
            texts = [f"alice {rng.choice(WORDS)} {rng.choice(WORDS)} {rng.choice(WORDS)} {i}" for i in range(size)]
            started = time.perf_counter()
            _load(db, "bench", "alice", "alice", texts, embedder)
            load_s = time.perf_counter() - started
            filters = {"observer_id": "alice", "observed_id": "alice"}
            with Requests(AWS) as counted:
                found = _ok(
                    call(
                        "POST",
                        "/v3/workspaces/bench/conclusions/query",
                        {"query": "where did alice move", "top_k": 10, "filters": filters},
                    )
                )
                query_ops, query_requests, query_bytes = counted.by_op(), len(counted.ops), counted.bytes
            with Requests(db.client) as counted:
                everything = query_all(
                    db,
                    KeyConditionExpression="PK = :pk",
                    ExpressionAttributeValues=to_item({":pk": keys.collection_pk("bench", "alice", "alice")}),
                )
                scan_requests, scan_bytes = len(counted.ops), counted.bytes
            rows.append(
                {
                    "conclusions": size,
                    "returned": len(found),
                    "query_ops": query_ops,
                    "query_requests": query_requests,
                    "query_bytes": query_bytes,
                    "collection_items": len(everything),
                    "read_all_requests": scan_requests,
                    "read_all_bytes": scan_bytes,
                    "load_s": load_s,
                    "context": _context_cost(size),
                }
            )
    return rows


def _context_cost(size: int) -> dict:
    """The session context route with peer_target (and with a search query) on the loaded collection: DynamoDB
    requests and bytes per call, against the same call without peer_target."""
    _ok(
        call(
            "POST",
            "/v3/workspaces/bench/sessions/s/messages",
            {"messages": [{"content": f"message {i} about the budget review", "peer_id": "alice"} for i in range(100)]},
        )
    )
    url = "/v3/workspaces/bench/sessions/s/context"
    row: dict = {"conclusions": size}
    target = {"peer_target": "alice", "max_conclusions": 100, "include_most_frequent": "true"}
    searched = {**target, "search_query": "budget review"}
    for name, extra in (("plain", {}), ("peer_target", target), ("search", searched)):
        with Requests(AWS) as counted:
            answer = _ok(call("GET", url, tokens=8_000, **extra))
            row[f"{name}_requests"], row[f"{name}_bytes"] = len(counted.ops), counted.bytes
            row[f"{name}_returned"] = len(json.dumps(answer).encode())
    return row


def run() -> None:
    derived = [_derivation(quiet=False), _derivation(quiet=True)]
    print_table(
        "LLM input tokens per 1,000 messages (llm batching: 512 tokens per sender and session; bursts of "
        f"1-3 exchanges, pauses of {PAUSE_S[0]:.0f}-{PAUSE_S[1]:.0f} s)",
        [
            "batch ends at",
            "messages",
            "message tokens",
            "derive requests",
            "quiet flushes",
            "incremental input",
            "x messages",
            "tokens per message",
            "re-derive-all input",
            "x messages",
            "conclusions",
        ],
        [
            (
                "512 tokens" if d["quiet_s"] is None else f"512 tokens or {d['quiet_s']:.0f} s quiet",
                d["messages"],
                d["message_tokens"],
                d["requests"],
                d["quiet_flushes"],
                d["incremental"],
                d["incremental"] / d["message_tokens"],
                d["incremental"] / d["messages"],
                d["from_scratch"],
                d["from_scratch"] / d["message_tokens"],
                d["conclusions"],
            )
            for d in derived
        ],
    )
    queries = _query_costs()
    print_table(
        "Conclusion query (top 10): DynamoDB requests and response bytes per query, against reading the collection",
        [
            "conclusions",
            "returned",
            "query requests",
            "query bytes",
            "read-all requests",
            "read-all bytes",
            "bytes saved x",
        ],
        [
            (
                q["conclusions"],
                q["returned"],
                q["query_requests"],
                q["query_bytes"],
                q["read_all_requests"],
                q["read_all_bytes"],
                q["read_all_bytes"] / max(1, q["query_bytes"]),
            )
            for q in queries
        ],
    )
    contexts = [{**q["context"], "read_all_bytes": q["read_all_bytes"]} for q in queries]
    print_table(
        "Session context (8,000 tokens, 100 messages) with peer_target: DynamoDB requests and bytes per call",
        [
            "conclusions",
            "plain req",
            "plain bytes",
            "peer_target req",
            "peer_target bytes",
            "search req",
            "search bytes",
            "answer bytes",
            "read-collection bytes",
        ],
        [
            (
                r["conclusions"],
                r["plain_requests"],
                r["plain_bytes"],
                r["peer_target_requests"],
                r["peer_target_bytes"],
                r["search_requests"],
                r["search_bytes"],
                r["search_returned"],
                r["read_all_bytes"],
            )
            for r in contexts
        ],
    )
    write_json(
        "derive", {"derivation": derived[0], "derivation_quiet": derived[1], "queries": queries, "context": contexts}
    )
