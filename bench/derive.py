"""Derived memory's cost: LLM input tokens per 1,000 messages, and what a conclusion query reads.

1. Derivation: 1,000 messages (a user and an agent taking turns, in bursts of one to three exchanges with pauses
   between them) posted through the API, each burst delivered by the table's stream to the deriver's handler as one
   batch (bench.front.Stream: the DeriveStream mapping's filter and batch size), with the llm engine's batching (512
   tokens), twice in one run: without the quiet flush (PRECIS_DERIVE_QUIET_S=0, as a deployment turns it off), and
   with it (10 s, the default): the handler sends each waiting session's wake-up to the DeriveWakeQueue, delayed; the
   queue's clock moves on by each pause (bench.front.Queue), and what is due by the next burst reaches the handler
   through the DeriveWakeups mapping, as Lambda's SQS records. The deriver runs the real `llm` engine through the
   openai client against the local OpenAI-compatible server (local/models/llm_server.py), whose model answers as the
   extractive deriver would (`_answer`), so the run derives what an offline one does; every request the server
   received is counted with tiktoken (its chat messages, as `precis.tokens.count_messages` counts a prompt). The
   baseline, in the same run, prices re-deriving the sender's whole history at every extraction the server saw.
2. Query: `POST /conclusions/query` through its handler on collections of 100, 1,000 and 10,000 conclusions (loaded
   through `POST /conclusions`, 100 a request; 10,000 by bench/seed.py's `write_conclusions`, which stores what the
   route stores: the route's near-duplicate search made 1,000 take 183 s and 2,000 417 s in moto): DynamoDB requests
   and response bytes per query, counted at the AWS door, against reading the whole collection (what a store without
   a vector index would do). moto answers SearchVectors with the local stack's exact emulation. Then the context
   route with `peer_target` (and `search_query`).
"""

from __future__ import annotations

import json
import os
import random
import re
import time

from bench.common import Requests, moto, print_table, write_json
from bench.front import AWS, Queue, Stream, call
from bench.seed import write_conclusions

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
_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d ([^:]+): (.*)$")


def _user_text(rng: random.Random) -> str:
    filler = " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 30))).capitalize() + "."
    return f"{rng.choice(FACTS).format(w=rng.choice(WORDS))} {filler}"


def _block(text: str, tag: str) -> list[str]:
    """The lines of a prompt's <tag> block, unescaped as the engine's prompt escaped them."""
    inner = text.split(f"<{tag}>\n", 1)[1].split(f"\n</{tag}>", 1)[0]
    return [line.replace(f"<\\/{tag}>", f"</{tag}>") for line in inner.splitlines()]


def _kind(body: dict) -> str:
    """What a request asks: `explicit_conclusions` (an extraction) or `peer_card` (the card update after one)."""
    return ((body.get("response_format") or {}).get("json_schema") or {}).get("name", "")


def _transcript(body: dict) -> tuple[str, list[tuple[str, str]]]:
    """An extraction prompt's observed peer and its (peer, content) lines, context first."""
    user = body["messages"][-1]["content"]
    observed = user.split("Target peer: ", 1)[1].split("\n", 1)[0]
    lines = [_LINE.match(line) for line in _block(user, "messages")]
    return observed, [(m.group(1), m.group(2)) for m in lines if m]


def _answer(body: dict) -> str:
    """The offline model: an extraction is answered with the observed sender's first-person statements in the third
    person (the extractive deriver's own rule), a card update as the extractive card is updated (from the card the
    prompt shows, without counts: the llm engine keeps none), so the conclusions match an extractive run's."""
    from precis.memory.cards import norm
    from precis.memory.engines.extractive import extract, update_card

    if _kind(body) == "peer_card":
        user = body["messages"][-1]["content"]
        observed = re.search(r"peer card of '([^']*)'", body["messages"][0]["content"]).group(1)
        card = [line for line in _block(user, "card") if line != "(empty)"]
        updated = update_card(observed, card, {}, _block(user, "conclusions"))
        return json.dumps({"peer_card": updated[0] if updated else card})
    observed, lines = _transcript(body)
    found: dict[str, str] = {}
    for peer, content in lines:
        if peer == observed:
            for conclusion in extract(observed, content):
                found.setdefault(norm(conclusion), conclusion)
    return json.dumps({"explicit": [{"content": c} for c in found.values()]})


def _derivation(quiet: bool) -> dict:
    from local.models.llm_server import LLMServer
    from precis.memory.engines import DeriveMessage, DeriveRequest
    from precis.memory.engines.prompt import build_messages
    from precis.settings import get_settings
    from precis.tokens import count_messages

    rng = random.Random(11)
    deriver = {  # the deriver's template environment, its model the local server's, the quiet period on or off
        "PRECIS_DERIVE_WAKE_QUEUE_URL": "",
        "PRECIS_DERIVE_QUIET_S": str(int(QUIET_S)) if quiet else "0",
        "OPENAI_API_KEY": "bench",
    }
    with LLMServer() as server, moto() as clients, Queue.clock() as later:
        server.answer = _answer
        queue = Queue("DeriveFunction", clients["sqs"])
        os.environ.update(deriver, PRECIS_DERIVE_WAKE_QUEUE_URL=queue.url, OPENAI_BASE_URL=server.url)
        get_settings.cache_clear()
        try:
            _ok(
                call(
                    "POST",
                    "/v3/workspaces",
                    {"id": "bench", "configuration": {"deriver": {"engine": "llm", "batch_tokens": 512}}},
                )
            )
            _ok(call("POST", "/v3/workspaces/bench/sessions", {"id": "s"}))
            stream = Stream(("DeriveFunction",))
            history: list = []
            quiet_requests = woken = 0
            while len(history) < MESSAGES:
                batch = []
                for i in range(len(history), min(MESSAGES, len(history) + 2 * rng.randint(*BURST_EXCHANGES))):
                    peer = "alice" if i % 2 == 0 else "agent"
                    text = _user_text(rng) if peer == "alice" else " ".join(rng.choice(WORDS) for _ in range(40))
                    batch.append({"content": text, "peer_id": peer})
                history += _ok(call("POST", "/v3/workspaces/bench/sessions/s/messages", {"messages": batch}))
                stream.drain()  # the burst, one batch to the deriver
                later(rng.uniform(*PAUSE_S))  # drawn in both runs, so both see the same messages
                before = len(server.requests)
                woken += queue.deliver()  # the wake-ups due before the next burst (a newer message: they pass)
                quiet_requests += sum(_kind(r.body) == "explicit_conclusions" for r in server.requests[before:])
            conclusions = sum(
                _ok(
                    call(
                        "POST",
                        "/v3/workspaces/bench/conclusions/list",
                        {"filters": {"observer_id": peer, "observed_id": peer}},
                        size=1,
                    )
                )["total"]
                for peer in ("alice", "agent")
            )
        finally:
            for var in (*deriver, "OPENAI_BASE_URL"):
                os.environ.pop(var, None)
            get_settings.cache_clear()
    sent = [r.body for r in server.requests if r.mode == "ok"]
    extractions = [b for b in sent if _kind(b) == "explicit_conclusions"]
    cards = [b for b in sent if _kind(b) == "peer_card"]
    message_tokens = sum(m["token_count"] for m in history)
    # The baseline: every extraction re-sends all of the sender's messages up to its newest.
    seq_of = {(m["peer_id"], m["content"]): m["seq"] for m in history}
    from_scratch = 0
    for body in extractions:
        observed, lines = _transcript(body)
        last = seq_of[lines[-1]]
        everything = [
            DeriveMessage(m["id"], m["seq"], m["peer_id"], m["content"], m["created_at"])
            for m in history
            if m["peer_id"] == observed and m["seq"] <= last
        ]
        from_scratch += count_messages(build_messages(DeriveRequest(observed, everything)))
    return {
        "quiet_s": QUIET_S if quiet else None,
        "messages": MESSAGES,
        "message_tokens": message_tokens,
        "requests": len(extractions),
        "quiet_flushes": quiet_requests,
        "wakeups": woken,
        "incremental": sum(count_messages(b["messages"]) for b in extractions),
        "card_requests": len(cards),
        "card_input": sum(count_messages(b["messages"]) for b in cards),
        "from_scratch": from_scratch,
        # As the deriver counts what it writes: every conclusion of every answer (a repeat merges into the one stored).
        "conclusions": sum(len(json.loads(_answer(b))["explicit"]) for b in extractions),
        "stored": conclusions,
        "model_requests": len(server.requests),
    }


BULK_FROM = 10_000  # collections this large are written in bulk (bench/seed.py's `write_conclusions`)


def _load(clients: dict, ws: str, observer: str, observed: str, texts: list[str]) -> None:
    """A collection through the route the callers use, 100 conclusions a request (its near-duplicate search and
    writes as they run for a client); from BULK_FROM conclusions, in bulk (`bench.seed.write_conclusions`)."""
    if len(texts) >= BULK_FROM:
        write_conclusions(clients["dynamodb"], "precis-local", ws, observer, observed, texts)
        return
    for start in range(0, len(texts), 100):
        items = [{"content": t, "observer_id": observer, "observed_id": observed} for t in texts[start : start + 100]]
        _ok(call("POST", f"/v3/workspaces/{ws}/conclusions", {"conclusions": items}))


def _ok(reply) -> object:
    assert reply.status in (200, 201), (reply.status, reply.body)
    return reply.body


def _query_costs() -> list[dict]:
    # The collection's partition (the table's documented layout: WS#<ws>#C#<observer>#<observed>), read whole as a
    # store without a vector index would: the baseline's read, by the bench's own client.
    rng = random.Random(5)
    rows = []
    for size in SIZES:
        with moto(stream=False) as clients:
            _ok(call("POST", "/v3/workspaces", {"id": "bench"}))
            _ok(call("POST", "/v3/workspaces/bench/peers", {"id": "alice"}))
            texts = [f"alice {rng.choice(WORDS)} {rng.choice(WORDS)} {rng.choice(WORDS)} {i}" for i in range(size)]
            started = time.perf_counter()
            _load(clients, "bench", "alice", "alice", texts)
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
            own = clients["dynamodb"]
            everything: list = []
            with Requests(own) as counted:
                for page in own.get_paginator("query").paginate(
                    TableName="precis-local",
                    KeyConditionExpression="PK = :pk",
                    ExpressionAttributeValues={":pk": {"S": "WS#bench#C#alice#alice"}},
                ):
                    everything += page["Items"]
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
            "card requests",
            "card input",
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
                d["card_requests"],
                d["card_input"],
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
