"""The context read against a naive baseline, on sessions of 100 to 100,000 messages.

Precis: `GET /v3/workspaces/{ws}/sessions/{id}/context` through the context handler as API Gateway invokes it
(bench/front.py), its DynamoDB requests counted at the in-process AWS's door: two rounds (session + summaries and the
last message's cost, then the messages whose `start_tokens` lie in the budget's window on the ByStartTokens index).
Baseline, written here (with its own keys and decoding: a reference shares no code with what it checks): the same
first request for the session and summaries, then every message after the
chosen summary with a paginated Query on the base table, trimmed newest-first to the budget (Honcho's way).
Both must return the same answer; the benchmark checks that.

Sessions are seeded in bulk by bench/seed.py (BatchWriteItem, items as the message route stores them: checked by
tests/deploy/test_bench_seed.py): 20-400 tokens per message,
skewed small, a third of them in agent runs of 2-6 messages, a short summary (~600 tokens) covering up to
~10 messages before the end and a long one (~2,500 tokens) up to ~30 before, as a summarizer that keeps up
leaves them. Each budget is read with `summary=true` (the baseline then reads only the messages after the
chosen summary) and `summary=false` (it reads the whole session).

Latency is in-process moto with its Query narrowed to the key range it reads (local/moto_storage.py; without it
moto walks the whole table per request and per page, whatever DynamoDB would read). Absolute times are
moto's; requests and bytes are what DynamoDB would serve. PRECIS_BENCH_CONTEXT_SIZES (default 100,1000,10000,100000)
chooses the session lengths.
"""

from __future__ import annotations

import json
import os
import random
import time
from dataclasses import dataclass
from typing import Any

from bench.common import OUT, ROOT, Requests, median, moto, print_table, write_json
from bench.front import AWS, call
from bench.seed import Said, Stored, put_summary, timed, write_messages
from local.moto_storage import moto_reference

SESSION_LENGTHS = tuple(
    int(n) for n in os.environ.get("PRECIS_BENCH_CONTEXT_SIZES", "100,1000,10000,100000").split(",")
)
BUDGETS = (2_000, 8_000, 100_000)
MODES = (True, False)  # summary=true / summary=false
WS = "bench"
POOL_SIZE = 512
MAX_REPEATS = 5
CELL_SECONDS = 10.0  # stop repeating a measurement after this long (at least one run, three for Precis)
WORDS = (
    "the user asked about the refund policy and the assistant called the orders tool which returned a JSON "
    "list of items with prices dates and shipping status then it summarised the options in plain words "
    "noting that the warranty covers parts but not labour and offered to open a ticket"
).split()


# --- seeding ---------------------------------------------------------------------------------------------------


def text_pool(rng: random.Random) -> list[tuple[str, int]]:
    """Message texts of 20-400 tokens (70% under 120), with their token counts."""
    from precis.tokens import count_text

    pool = []
    for _ in range(POOL_SIZE):
        target = rng.randint(20, 120) if rng.random() < 0.7 else rng.randint(120, 400)
        content = " ".join(rng.choice(WORDS) for _ in range(target))
        pool.append((content, count_text(content)))
    return pool


def seed_session(client, table: str, session: str, length: int, pool, rng: random.Random) -> list[Stored]:
    """`length` messages in runs (a third of them in agent runs of 2-6), loaded in bulk by bench/seed.py as the
    message route stores them; what each one costs (seq, tokens, start, run start, id)."""
    said, seq = [], 0
    while seq < length:
        run_length = 1 if rng.random() < 0.6 else rng.randint(2, 6)
        run_id = f"run-{seq + 1}" if run_length > 1 else None
        for _ in range(min(run_length, length - seq)):
            seq += 1
            content, tokens = pool[rng.randrange(len(pool))]
            said.append(Said("alice" if seq % 2 else "assistant", content, tokens, run_id))
    return write_messages(client, table, WS, session, said, progress=timed(session, 20_000, length))


def add_summaries(client, table: str, session: str, costs: list[Stored], rng: random.Random) -> None:
    """A short and a long summary ending at run ends ~10 and ~30 messages before the session's end (bench/seed.py
    stores them as the summarizer does: no route writes one)."""
    run_ends = [c.seq for c, nxt in zip(costs, costs[1:]) if nxt.run_start == nxt.seq]
    for summary_type, behind, words in (("honcho_chat_summary_short", 10, 450), ("honcho_chat_summary_long", 30, 1900)):
        covers = max([s for s in run_ends if s <= len(costs) - behind], default=None)
        if covers is None:
            continue
        content = " ".join(rng.choice(WORDS) for _ in range(words))
        put_summary(client, table, WS, session, summary_type, content, costs[covers - 1])


# --- the baseline ----------------------------------------------------------------------------------------------


# The table's documented layout (docs/design.md; precis/store/keys.py is Precis's code and the baseline does not share
# it): a session's item is ("WS#{ws}", "SESSION#{id}"); its messages and summaries live in its own partition
# "WS#{ws}#S#{id}", a message at "MSG#" + its seq in 12 digits, a summary at "SUMMARY#{type}".
SEQ_DIGITS = 12
SUMMARY_TYPES = ("honcho_chat_summary_short", "honcho_chat_summary_long", "rolling")


@dataclass(frozen=True)
class Table:
    """The bench's own clients and the template's table and bucket: the baseline's handle."""

    client: Any
    s3: Any
    table: str
    bucket: str


def _plain(value: dict[str, Any]) -> Any:
    """A DynamoDB typed value as a plain one (the types the table's items hold; integers as int)."""
    ((kind, v),) = value.items()
    if kind == "N":
        return int(v) if v.lstrip("-").isdigit() else float(v)
    if kind == "M":
        return {k: _plain(x) for k, x in v.items()}
    if kind == "L":
        return [_plain(x) for x in v]
    if kind == "NULL":
        return None
    return v  # S, BOOL


def _decode(item: dict[str, Any]) -> dict[str, Any]:
    return {name: _plain(value) for name, value in item.items()}


def _message_view(db: Table, item: dict[str, Any], ws: str, session_id: str) -> dict[str, Any]:
    """A message as the API answers it; a large body is read from S3, where the item's `body_key` names it."""
    content = item.get("content", "")
    if item.get("body_key"):
        content = db.s3.get_object(Bucket=db.bucket, Key=item["body_key"])["Body"].read().decode("utf-8")
    view = {
        "id": item["id"],
        "content": content,
        "peer_id": item["peer_id"],
        "session_id": session_id,
        "workspace_id": ws,
        "metadata": json.loads(item["metadata"]) if item.get("metadata") else {},
        "created_at": item["created_at"],
        "token_count": item["token_count"],
        "seq": item["seq"],
    }
    if item.get("run_id"):
        view["run_id"] = item["run_id"]
    return view


def naive_context(
    db: Table, ws: str, session_id: str, limit: int, *, use_summary: bool = True, items: list[dict] | None = None
) -> dict[str, Any]:
    """Every message after the summary (paginated Query on the table), trimmed newest-first to the budget.

    `items` skips the Query with messages read before (the benchmark reuses one read for budgets that choose the
    same summary: their reads are identical, only the trim differs). The messages read come back in "_items".
    """
    partition = f"WS#{ws}#S#{session_id}"
    wanted = [
        {"PK": f"WS#{ws}", "SK": f"SESSION#{session_id}"},
        *({"PK": partition, "SK": f"SUMMARY#{t}"} for t in SUMMARY_TYPES),
    ]
    out = db.client.batch_get_item(
        RequestItems={
            db.table: {
                "Keys": [{name: {"S": value} for name, value in key.items()} for key in wanted],
                "ConsistentRead": True,
            }
        }
    )
    found = [_decode(i) for i in out["Responses"][db.table]]
    session = next((i for i in found if i["SK"].startswith("SESSION#")), None)
    if session is None or "deleted_at" in session:
        raise LookupError(f"session '{session_id}' not found")
    summaries = [i for i in found if i["SK"].startswith("SUMMARY#")]
    fitting = [s for s in summaries if use_summary and s["token_count"] <= limit * 2 // 5]
    chosen = max(fitting, key=lambda s: (s["token_count"], s["covers_seq"], s["summary_type"]), default=None)
    after = chosen["covers_seq"] if chosen else 0
    budget = limit - (chosen["token_count"] if chosen else 0)

    read, kwargs = items is None, {}
    items = [] if items is None else items
    while read:
        page = db.client.query(
            TableName=db.table,
            KeyConditionExpression="PK = :pk AND SK BETWEEN :a AND :b",
            ConsistentRead=True,
            ExpressionAttributeValues={
                ":pk": {"S": partition},
                ":a": {"S": f"MSG#{after + 1:0{SEQ_DIGITS}d}"},
                ":b": {"S": f"MSG#{10**SEQ_DIGITS - 1}"},
            },
            **kwargs,
        )
        items += [_decode(i) for i in page["Items"]]
        if "LastEvaluatedKey" not in page:
            break
        kwargs = {"ExclusiveStartKey": page["LastEvaluatedKey"]}
    first, used = len(items), 0
    while first > 0 and used + items[first - 1]["token_count"] <= budget:
        first -= 1
        used += items[first]["token_count"]
    return {
        "id": session_id,
        "messages": [_message_view(db, item, ws, session_id) for item in items[first:]],
        "summary": (
            {k: chosen[k] for k in ("content", "message_id", "summary_type", "created_at", "token_count")}
            if chosen
            else None
        ),
        "peer_representation": None,
        "peer_card": None,
        "messages_skipped": first,
        "token_count": (chosen["token_count"] if chosen else 0) + used,
        "_items": items,
    }


# --- measuring -------------------------------------------------------------------------------------------------


def read_context(db, ws: str, session: str, limit: int, *, use_summary: bool = True) -> dict[str, Any]:
    """Precis's answer: the context route through its handler (`db` unused: the handler has its own clients)."""
    reply = call(
        "GET", f"/v3/workspaces/{ws}/sessions/{session}/context", tokens=limit, summary=str(use_summary).lower()
    )
    assert reply.status == 200, reply.body
    return reply.body


def measure(read, db, session: str, limit: int, use_summary: bool, repeats: int, min_runs: int) -> dict[str, Any]:
    """`read`'s requests, bytes and median time: Precis's (read_context) counted at the handlers' door, the baseline's
    on the bench's own client."""
    seconds, answer, started = [], None, time.perf_counter()
    with Requests(AWS if read is read_context else db.client) as requests:
        for run in range(repeats):
            requests.reset()
            began = time.perf_counter()
            answer = read(db, WS, session, limit, use_summary=use_summary)
            seconds.append(time.perf_counter() - began)
            items = answer.pop("_items", None)
            if run + 1 >= min_runs and time.perf_counter() - started > CELL_SECONDS:
                break
        ops, read_bytes = len(requests.ops), requests.bytes
    return {
        "requests": ops,
        "bytes_read": read_bytes,
        "bytes_returned": size_of(answer),
        "ms": median(seconds) * 1000,
        "runs": len(seconds),
        "answer": answer,
        "items": items,
    }


def size_of(answer: dict) -> int:
    """Bytes of the answer as JSON."""
    return len(json.dumps(answer, ensure_ascii=False, separators=(",", ":")).encode())


def boundary(answer: dict, length: int) -> int:
    """The seq the answer's summary covers (0 without one), from what the answer says."""
    first = answer["messages"][0]["seq"] if answer["messages"] else length + 1
    return first - 1 - answer["messages_skipped"]


def same_answer(a: dict, b: dict) -> bool:
    def key(answer):
        return (
            [m["id"] for m in answer["messages"]],
            answer["summary"] and answer["summary"]["summary_type"],
            answer["messages_skipped"],
            answer["token_count"],
        )

    return key(a) == key(b)


def check_narrowing(db, session: str) -> None:
    """The narrowed moto answers exactly what plain moto answers, with the same bytes."""
    plain = {}
    with moto_reference():
        for limit in BUDGETS:
            for use_summary in MODES:
                for read in (read_context, naive_context):
                    plain[read.__name__, limit, use_summary] = measure(read, db, session, limit, use_summary, 1, 1)
    for (name, limit, use_summary), expected in plain.items():
        read = read_context if name == "read_context" else naive_context
        got = measure(read, db, session, limit, use_summary, 1, 1)
        if (got["answer"], got["bytes_read"], got["requests"]) != (
            expected["answer"],
            expected["bytes_read"],
            expected["requests"],
        ):
            raise RuntimeError(
                f"narrowed moto differs from moto: {name} tokens={limit} summary={use_summary}: "
                f"{got['bytes_read']} vs {expected['bytes_read']} bytes, {got['requests']} vs "
                f"{expected['requests']} requests, same answer: {got['answer'] == expected['answer']}"
            )
    print(f"  narrowed moto checked against plain moto on {session}: same answers, requests and bytes", flush=True)


def plot(results: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8), sharey=True)
    colors = dict(zip(BUDGETS, ("tab:blue", "tab:orange", "tab:green")))
    for ax, use_summary in zip(axes, MODES):
        for budget in BUDGETS:
            for impl, style in (("precis", "-o"), ("baseline", "--x")):
                points = sorted(
                    (r["messages"], r[impl]["ms"])
                    for r in results
                    if r["budget"] == budget and r["summary"] == use_summary
                )
                ax.plot(
                    [p[0] for p in points],
                    [p[1] for p in points],
                    style,
                    color=colors[budget],
                    label=f"{'Precis' if impl == 'precis' else 'baseline'}, {budget:,} tokens",
                )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("messages in the session")
        ax.set_title(f"summary={'true' if use_summary else 'false'}")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("median latency per context read (ms, in-process moto)")
    axes[1].legend(fontsize=8)
    fig.suptitle("Context read: Precis (index window) vs baseline (read everything after the summary)")
    fig.tight_layout()
    OUT.mkdir(parents=True, exist_ok=True)
    fig.savefig(OUT / "context_latency.png", dpi=120)
    plt.close(fig)


def run() -> dict:
    from local.template import template

    rng = random.Random(7)
    results: list[dict] = []
    with moto(stream=False) as clients:
        # The bench's own clients: seeding and the baseline's reads (the handler's are counted apart).
        db = Table(clients["dynamodb"], clients["s3"], template().table_name, template().bucket_name)
        assert call("POST", "/v3/workspaces", {"id": WS}).status in (200, 201)
        pool = text_pool(rng)
        sessions = {}
        started = time.perf_counter()
        for length in SESSION_LENGTHS:
            session = f"s{length}"
            assert call("POST", f"/v3/workspaces/{WS}/sessions", {"id": session}).status in (200, 201)
            print(f"  seeding {session} ({length:,} messages) ...", flush=True)
            costs = seed_session(clients["dynamodb"], db.table, session, length, pool, rng)
            add_summaries(clients["dynamodb"], db.table, session, costs, rng)
            sessions[length] = session
        seed_seconds = time.perf_counter() - started
        print(f"  seeded {sum(SESSION_LENGTHS):,} messages in {seed_seconds:.0f} s", flush=True)

        check_narrowing(db, sessions[min(SESSION_LENGTHS, key=lambda n: abs(n - 1_000))])
        for length, session in sessions.items():
            baseline_reads: dict[tuple[str, int], dict] = {}
            for use_summary in MODES:
                for budget in BUDGETS:
                    read_context(db, WS, session, budget, use_summary=use_summary)  # warm caches
                    precis = measure(read_context, db, session, budget, use_summary, MAX_REPEATS, 3)
                    after = boundary(precis["answer"], length)
                    if (session, after) in baseline_reads:  # the same read as an earlier budget's
                        naive = dict(baseline_reads[session, after], reused=True)
                        naive["answer"] = naive_context(
                            db, WS, session, budget, use_summary=use_summary, items=naive["items"]
                        )
                        naive["answer"].pop("_items")
                        naive["bytes_returned"] = size_of(naive["answer"])
                    else:
                        naive = measure(naive_context, db, session, budget, use_summary, MAX_REPEATS, 1)
                        baseline_reads[session, after] = naive
                    if not same_answer(precis["answer"], naive["answer"]):
                        raise RuntimeError(
                            f"baseline and Precis disagree on {session}, tokens={budget}, summary={use_summary}"
                        )
                    row = {
                        "messages": length,
                        "budget": budget,
                        "summary": use_summary,
                        "returned_messages": len(precis["answer"]["messages"]),
                        "summary_type": (precis["answer"]["summary"] or {}).get("summary_type"),
                        "precis": {k: v for k, v in precis.items() if k not in ("answer", "items")},
                        "baseline": {k: v for k, v in naive.items() if k not in ("answer", "items")},
                    }
                    results.append(row)
            print(f"  measured {session}", flush=True)

    for use_summary in MODES:
        rows = []
        for r in results:
            if r["summary"] != use_summary:
                continue
            p, b = r["precis"], r["baseline"]
            rows.append(
                [
                    r["messages"],
                    r["budget"],
                    r["returned_messages"],
                    {"honcho_chat_summary_short": "short", "honcho_chat_summary_long": "long"}.get(
                        r["summary_type"], "-"
                    ),
                    p["requests"],
                    b["requests"],
                    p["bytes_read"],
                    b["bytes_read"],
                    p["bytes_read"] / p["bytes_returned"],
                    b["bytes_read"] / b["bytes_returned"],
                    b["bytes_read"] / p["bytes_read"],
                    p["ms"],
                    b["ms"],
                ]
            )
        print_table(
            f"Context read, summary={'true' if use_summary else 'false'}: Precis vs baseline "
            "(requests and bytes per call; median ms in-process moto)",
            [
                "messages",
                "tokens",
                "returned",
                "summary",
                "req P",
                "req B",
                "bytes read P",
                "bytes read B",
                "read/ret P",
                "read/ret B",
                "B/P bytes",
                "ms P",
                "ms B",
            ],
            rows,
        )

    print(
        "\nPrecis requests per call, every session length, budget and mode: "
        f"{sorted({r['precis']['requests'] for r in results})}"
    )
    for use_summary in MODES:
        for budget in BUDGETS:
            reads = [
                r["precis"]["bytes_read"]
                for r in results
                if r["budget"] == budget and r["summary"] == use_summary and r["messages"] >= 1_000
            ]
            print(
                f"  summary={str(use_summary).lower():5} tokens={budget:>7,}: Precis bytes read from 1,000 to "
                f"{max(SESSION_LENGTHS):,} messages: {min(reads):,}-{max(reads):,}"
            )
    longest = max(SESSION_LENGTHS)
    ratio = {
        r["summary"]: r["baseline"]["bytes_read"] / r["precis"]["bytes_read"]
        for r in results
        if r["messages"] == longest and r["budget"] == 8_000
    }
    print(
        f"{longest:,} messages, 8,000 tokens: the baseline reads {ratio[False]:,.0f}x the bytes Precis reads with "
        f"summary=false (target: at least 50x) and {ratio[True]:,.1f}x with summary=true, where it reads only the "
        "messages after a current summary"
    )
    plot(results)
    path = write_json("context", {"seed_seconds": seed_seconds, "results": results})
    print(f"wrote {path.relative_to(ROOT)} and {(OUT / 'context_latency.png').relative_to(ROOT)}")
    return {"results": results}
