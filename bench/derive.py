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
_LINE = re.compile(r"^\d\d:\d\d ([^:]+): (.*)$")
BASELINE = "f4cd7eb"  # today's design: one request per (session, sender) at every 10 s pause, a card update per job


def _user_text(rng: random.Random) -> str:
    filler = " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 30))).capitalize() + "."
    return f"{rng.choice(FACTS).format(w=rng.choice(WORDS))} {filler}"


def _block(text: str, tag: str) -> list[str]:
    """The lines of a prompt's <tag> block, unescaped as the engine's prompt escaped them."""
    inner = text.split(f"<{tag}>\n", 1)[1].split(f"\n</{tag}>", 1)[0]
    return [line.replace(f"<\\/{tag}>", f"</{tag}>") for line in inner.splitlines()]


def _kind(body: dict) -> str:
    """What a request asks: `explicit_conclusions` (an extraction) or `peer_card` (a card update)."""
    return ((body.get("response_format") or {}).get("json_schema") or {}).get("name", "")


def _transcript(body: dict) -> tuple[list[str], list[tuple[str, str]]]:
    """An extraction prompt's target peers and its (peer, content) lines, context first."""
    user = body["messages"][-1]["content"]
    peers = user.split("Target peers: ", 1)[1].split("\n", 1)[0].split(", ")
    lines = [_LINE.match(line) for line in _block(user, "messages")]
    return peers, [(m.group(1), m.group(2)) for m in lines if m]


def _answer(body: dict) -> str:
    """The offline model: an extraction is answered with each target peer's first-person statements in the third
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
    peers, lines = _transcript(body)
    found: dict[tuple[str, str], dict] = {}
    for peer, content in lines:
        if peer in peers:
            for conclusion in extract(peer, content):
                found.setdefault((peer, norm(conclusion)), {"peer": peer, "content": conclusion})
    return json.dumps({"explicit": list(found.values())})


def _tokens(calls: list[tuple[dict, str]]) -> dict:
    """Requests, input and output tokens (tiktoken, as `precis.tokens` counts a prompt) of (body, answer) pairs, by
    what they asked: extractions and card updates."""
    from precis.tokens import count_messages, count_text

    out: dict = {}
    for kind, name in (("explicit_conclusions", "derive"), ("peer_card", "card")):
        mine = [(b, a) for b, a in calls if _kind(b) == kind]
        out[f"{name}_requests"] = len(mine)
        out[f"{name}_input"] = sum(count_messages(b["messages"]) for b, _a in mine)
        out[f"{name}_output"] = sum(count_text(a) for _b, a in mine)
    return out


def _derivation() -> dict:
    """The bench conversation through today's deriver, with its default batching, quiet periods and card refreshes."""
    from local.models.llm_server import LLMServer
    from precis.settings import get_settings

    rng = random.Random(11)
    with LLMServer() as server, moto() as clients, Queue.clock() as later:
        server.answer = _answer
        queue = Queue("DeriveFunction", clients["sqs"])
        settings = get_settings()
        deriver = {  # the deriver's template environment, its model the local server's
            "PRECIS_DERIVE_WAKE_QUEUE_URL": queue.url,
            "OPENAI_API_KEY": "bench",
            "OPENAI_BASE_URL": server.url,
        }
        os.environ.update(deriver)
        get_settings.cache_clear()
        try:
            _ok(call("POST", "/v3/workspaces", {"id": "bench", "configuration": {"deriver": {"engine": "llm"}}}))
            _ok(call("POST", "/v3/workspaces/bench/sessions", {"id": "s"}))
            stream = Stream(("DeriveFunction",))
            history: list = []
            lags: list = []  # per pause long enough to flush: seconds from its start to its conclusions
            while len(history) < MESSAGES:
                batch = []
                for i in range(len(history), min(MESSAGES, len(history) + 2 * rng.randint(*BURST_EXCHANGES))):
                    peer = "alice" if i % 2 == 0 else "agent"
                    text = _user_text(rng) if peer == "alice" else " ".join(rng.choice(WORDS) for _ in range(40))
                    batch.append({"content": text, "peer_id": peer})
                history += _ok(call("POST", "/v3/workspaces/bench/sessions/s/messages", {"messages": batch}))
                stream.drain()  # the burst, one batch to the deriver
                pause = rng.uniform(*PAUSE_S)  # drawn in both designs' runs, so both see the same messages
                waited = 0.0
                for step in (settings.derive_quiet_s, settings.derive_card_quiet_s):
                    if waited + step > pause:
                        break
                    later(step - waited + 1)  # the wake-up is due: it comes in with the next poll
                    waited = step + 1
                    before = len(server.requests)
                    queue.deliver()
                    if step == settings.derive_quiet_s and len(server.requests) > before:
                        lags.append(waited)
                later(pause - waited)
                queue.deliver()
            later(settings.derive_card_quiet_s + 1)  # the conversation is over: its cards' wake-up comes
            queue.deliver()
            stored = sum(
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
            card = _ok(call("GET", "/v3/workspaces/bench/peers/alice/card"))
        finally:
            for var in deriver:
                os.environ.pop(var, None)
            get_settings.cache_clear()
    sent = [r.body for r in server.requests if r.mode == "ok"]
    return {
        "design": "session",
        "quiet_s": settings.derive_quiet_s,
        "batch_tokens": settings.derive_batch_tokens,
        "messages": MESSAGES,
        "message_tokens": sum(m["token_count"] for m in history),
        **_tokens([(b, _answer(b)) for b in sent]),
        "cached_input": sum(r.usage["prompt_tokens_details"]["cached_tokens"] for r in server.reported),
        "stored": stored,
        "card_entries": len(card.get("peer_card") or []),
        "lag_p50": sorted(lags)[len(lags) // 2] if lags else None,
        "lag_max": max(lags) if lags else None,
    }


def _baseline() -> dict:
    """Today's design before issue 48, measured by its own bench (bench/derive.py at BASELINE, its deriver and
    model server) in a subprocess, on the same conversation; every (request, answer) it made, counted here."""
    from bench.baseline import run_at

    script = (
        "import bench.derive as d\n"
        "calls = []\n"
        "answer = d._answer\n"
        "def recording(body):\n"
        "    text = answer(body)\n"
        "    calls.append((body, text))\n"
        "    return text\n"
        "d._answer = recording\n"
        "result = d._derivation(quiet=True)\n"
        "print('@@' + json.dumps({'result': result, 'calls': calls}))\n"
    )
    found = run_at(BASELINE, script)
    assert isinstance(found, dict)
    old = found["result"]
    return {
        "design": f"per sender ({BASELINE})",
        "quiet_s": old["quiet_s"],
        "batch_tokens": 512,
        "messages": old["messages"],
        "message_tokens": old["message_tokens"],
        # (its bench asked its model again for each extraction's conclusions after the run: those are not requests)
        **_tokens([(b, a) for b, a in found["calls"][: old["model_requests"]]]),
        "cached_input": 0,  # every prompt of that design is under the providers' 1,024-token minimum
        "stored": old["stored"],
        "card_entries": None,
        "lag_p50": old["quiet_s"],
        "lag_max": old["quiet_s"],
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
    derived = [_baseline(), _derivation()]
    print_table(
        "Deriver model calls per 1,000 messages, cards included (bursts of 1-3 exchanges, pauses of "
        f"{PAUSE_S[0]:.0f}-{PAUSE_S[1]:.0f} s): input and output tokens per message token",
        [
            "design",
            "quiet s",
            "batch tokens",
            "message tokens",
            "derive req",
            "card req",
            "req / 1k msg",
            "derive in x",
            "card in x",
            "input x",
            "cached in",
            "output x",
            "conclusions",
            "ready after s (p50/max)",
        ],
        [
            (
                d["design"],
                d["quiet_s"],
                d["batch_tokens"],
                d["message_tokens"],
                d["derive_requests"],
                d["card_requests"],
                (d["derive_requests"] + d["card_requests"]) * 1000 / d["messages"],
                d["derive_input"] / d["message_tokens"],
                d["card_input"] / d["message_tokens"],
                (d["derive_input"] + d["card_input"]) / d["message_tokens"],
                d["cached_input"],
                (d["derive_output"] + d["card_output"]) / d["message_tokens"],
                d["stored"],
                f"{d['lag_p50']:.0f}/{d['lag_max']:.0f}" if d["lag_p50"] is not None else "-",
            )
            for d in derived
        ],
    )
    from bench.pricing import PRICES, bill, check_defaults

    check_defaults()
    print_table(
        "What those calls cost at list prices (bench/pricing.py), per 1,000 messages: billed input per message token "
        "(cache hits at each provider's discount) and dollars",
        ["design", *(f"{p.provider} {col}" for p in PRICES for col in ("billed in x", "$ / 1k msg"))],
        [
            (
                d["design"],
                *(
                    value
                    for price in PRICES
                    for b in [
                        bill(
                            price,
                            messages=d["messages"],
                            requests=d["derive_requests"] + d["card_requests"],
                            input_tokens=d["derive_input"] + d["card_input"],
                            cached_input_tokens=d["cached_input"],
                            output_tokens=d["derive_output"] + d["card_output"],
                        )
                    ]
                    for value in (b.billed_input_tokens / (d["message_tokens"] * 1000 / d["messages"]), b.dollars)
                ),
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
    write_json("derive", {"baseline": derived[0], "derivation": derived[1], "queries": queries, "context": contexts})
