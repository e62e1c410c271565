"""Retrieval quality: does Precis find what was said, and does the context hold it?

Data: bench/retrieval_data.py (long two-peer conversations with questions whose answering turns are known).
Each conversation is loaded into a workspace of its own through the public HTTP surface, with the real handlers
in-process on moto (bench/front.py): the ingest route posts each session's messages with their dates, and the
table's stream is read from moto and delivered to the stream functions (summarize, derive) as Lambda's
event-source mapping would (the template's filters and batch sizes), so the deriver's default offline engine
writes conclusions and message vectors. Then, for every question:

- the BM25 reference (bench/retrieval_bm25.py), computed here over the same turns;
- Precis's message search, `POST /v3/workspaces/{ws}/search` {"query", "limit": 10};
- Precis's conclusion query, `POST /v3/workspaces/{ws}/conclusions/query` (top 10, the peer the question is about
  observing itself). A conclusion is a hit when its source messages include an answering turn. The Conclusion JSON
  does not carry its source messages, so the bench reads them from the table with a client of its own (`_sources`);
- recall@1/5/10: found at k when any answering turn is in the top k ("all@10": every answering turn is, for the
  multi-turn questions);
- the session context of the conversation's last session at 1,000, 2,000 and 4,000 tokens: `summary=false` (the
  newest messages), the default, and `peer_target` + `search_query=<question>`. Score: the share of the answer's content
  words (stemmed; stopwords, the question's own words and the year removed) found in the text the context returns
  (summary, messages with their dates, representation, card, and a `recalled` list when the answer has one).

`evaluate(rank_fn)` scores any ranking (rank_fn(query, conversation) -> turn ids) on the whole data set (8
conversations, every question), offline, for sweeps. PRECIS_BENCH_RETRIEVAL_SCALE (default 1) scales the sample sent
through the handlers (4 conversations x 24 questions at 1: moto's vector search emulation costs about a second a call).
PRECIS_BENCH_SEMANTIC=1 adds a run with PRECIS_EMBEDDER=openai against local/models/llm_server.py's OpenAI-compatible
server, when it serves embeddings (today it does not: the run says so and is skipped).

Then the workspace-scale lexical bench (bench/retrieval_scale.py, also `make bench retrieval_scale` alone): message
search against a BM25 reference over 100,000 generated messages, its cost per search at 1,000 and 100,000 messages,
and the previous design beside it.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import datetime
from typing import Any

from bench.common import Requests, moto, print_table, write_json
from bench.front import AWS, call, invoke, own
from bench.retrieval_bm25 import BM25, words
from bench.retrieval_data import KINDS, Conversation, Question, generate

CONVERSATIONS = 8  # the data set evaluate() scores
SEED = 23
# What goes through the handlers at PRECIS_BENCH_RETRIEVAL_SCALE=1: moto's vector search emulation makes each
# question cost about a second of wall time, so the run asks a sample (the generator's shuffled order).
HTTP_CONVERSATIONS, HTTP_QUESTIONS = 4, 24
KS = (1, 5, 10)
BUDGETS = (1_000, 2_000, 4_000)
CONTEXTS = ("window", "default", "search")  # summary=false; the default; peer_target + search_query
# The shares of a context's tokens recall may take (PRECIS_CONTEXT_RECALL_SHARE), swept with search_query; and the
# references: the session-only recall of earlier releases (limit_to_session), the best BM25 turns of the whole
# conversation packed into the same budget, and the whole conversation.
SHARES = (0.0, 0.25, 0.5, 0.75, 1.0)
REFERENCES = ("session_only", "bm25_pack", "whole")
WS_CONFIG = {"deriver": {"max_wait_s": 0}}  # derive what is pending at the end (the flush), not 30 min later
SEARCH_TARGET, CONTEXT_TARGET = 1.1, 2.0


def scale() -> float:
    return float(os.environ.get("PRECIS_BENCH_RETRIEVAL_SCALE", "1"))


def conversations(count: int = CONVERSATIONS) -> list[Conversation]:
    """The benchmark's conversations, every question (the same every run)."""
    return generate(count, SEED)


def http_sample() -> list[Conversation]:
    """What the run sends through the handlers: HTTP_CONVERSATIONS x HTTP_QUESTIONS, times the scale."""
    count = min(CONVERSATIONS, max(1, round(HTTP_CONVERSATIONS * scale())))
    per = max(3, round(HTTP_QUESTIONS * scale()))
    return [replace(c, questions=c.questions[:per]) for c in conversations(count)]


# ---------------------------------------------------------------- scoring


def recall(ranked: list[Any], question: Question, hit: Callable[[Any, set[str]], bool] | None = None) -> dict:
    """recall@k (any answering turn in the top k) and all@10 (every one) for one question. `ranked` holds turn ids,
    or, with `hit`, items that `hit(item, answering turns)` judges."""
    wanted = set(question.turns)
    hit = hit or (lambda item, turns: item in turns)
    row = {f"r@{k}": any(hit(item, wanted) for item in ranked[:k]) for k in KS}
    row["all@10"] = all(any(hit(item, {t}) for item in ranked[:10]) for t in wanted)
    return row


def summarise(rows: list[dict], keys: Iterable[str]) -> dict:
    """Per question kind and overall: how many questions, and the mean of each key."""
    out = {}
    for kind in (*KINDS, "overall"):
        chosen = [r for r in rows if kind == "overall" or r["kind"] == kind]
        out[kind] = {
            "questions": len(chosen),
            **{k: (sum(float(r[k]) for r in chosen) / len(chosen) if chosen else float("nan")) for k in keys},
        }
    return out


def evaluate(rank_fn: Callable[[str, Conversation], list[str]], data: list[Conversation] | None = None) -> dict:
    """Recall of `rank_fn` (query, conversation) -> turn ids, best first, by question kind and overall."""
    rows = []
    for conversation in data if data is not None else conversations():
        for question in conversation.questions:
            rows.append({"kind": question.kind, **recall(list(rank_fn(question.text, conversation)), question)})
    return summarise(rows, (*(f"r@{k}" for k in KS), "all@10"))


_BM25: dict[str, BM25] = {}


def bm25_rank(query: str, conversation: Conversation) -> list[str]:
    """The reference: BM25 over the conversation's turns."""
    index = _BM25.get(conversation.id)
    if index is None:
        index = _BM25[conversation.id] = BM25((t.id, t.text) for t in conversation.turns)
    return index.rank(query, 10)


def _tokens(text: str) -> int:
    """A turn's tokens as the context counts a message's (o200k_base), with tiktoken itself: the reference shares no
    code with Precis."""
    import tiktoken

    return len(tiktoken.get_encoding("o200k_base").encode(text, disallowed_special=()))


def bm25_pack(question: Question, conversation: Conversation, budget: int) -> str:
    """The reference context: the conversation's turns best first by BM25 (those with any of the question's words),
    each taken while it fits `budget`, with its date."""
    index = _BM25.get(conversation.id)
    if index is None:
        index = _BM25[conversation.id] = BM25((t.id, t.text) for t in conversation.turns)
    by_id = {t.id: t for t in conversation.turns}
    used, parts = 0, []
    for turn_id in index.rank(question.text):
        turn = by_id[turn_id]
        cost = _tokens(turn.text)
        if used + cost <= budget:
            used += cost
            parts.append(f"{_date(turn.created_at)} {turn.text}")
    return "\n".join(parts)


def whole(conversation: Conversation) -> str:
    return "\n".join(f"{_date(t.created_at)} {t.text}" for t in conversation.turns)


def answer_words(question: Question) -> set[str]:
    """The answer's content words that the question does not already say, without the year when the answer has more
    (every turn is dated in the same year, so any context's message dates would hold it)."""
    wanted = set(words(question.answer)) - set(words(question.text)) or set(words(question.answer))
    return {w for w in wanted if not _YEAR.fullmatch(w)} or wanted


_YEAR = re.compile(r"(19|20)\d\d")


def _date(iso: str | None) -> str:
    if not iso:
        return ""
    when = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    return f"{when.day} {when.strftime('%B')} {when.year}"


def context_text(answer: dict) -> str:
    """Everything a context answer gives the model: summary, messages (with their dates), representation, card, and
    the recalled messages when the answer has them."""
    parts = [(answer.get("summary") or {}).get("content") or ""]
    messages = list(answer.get("messages") or [])
    shown = {m["id"] for m in messages if m.get("id")}
    # `recalled` may list messages, or name (by id) messages that `messages` already holds: each counts once
    messages += [m for m in answer.get("recalled") or [] if isinstance(m, dict) and (m.get("id") or 0) not in shown]
    for message in messages:
        parts.append(f"{_date(message.get('created_at'))} {message.get('content') or ''}")
    parts.append(answer.get("peer_representation") or "")
    parts += answer.get("peer_card") or []
    return "\n".join(parts)


def held(question: Question, text: str) -> float:
    """The share of the answer's words that `text` holds."""
    wanted = answer_words(question)
    return len(wanted & set(words(text))) / len(wanted)


# ---------------------------------------------------------------- loading through the handlers


class Stream:
    """Lambda's event-source mappings on moto's table stream, in-process: each stream function reads the stream
    from its start with its own position, keeps the records its filters match and is invoked with batches of its
    batch size, until no function has anything left (handlers write records too: summaries, cursors).

    The records are read from moto's stream shard in memory, not by GetRecords: moto re-serialises every image
    through its generic serializer (vectors included), which took minutes for a hundred messages."""

    def __init__(self):
        from local.poller import StreamSettings
        from local.template import template

        self.consumers = {
            fn.logical_id: StreamSettings.from_properties(fn.stream) for fn in template().stream_functions()
        }
        self.seen = {name: -1 for name in self.consumers}  # the last sequence number each function was given
        self.invocations = 0

    @staticmethod
    def _records() -> tuple[str, list[dict]]:
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.dynamodb.models import dynamodb_backends

        table = dynamodb_backends[DEFAULT_ACCOUNT_ID]["us-east-1"].get_table(_table())
        return table.latest_stream_label, [r.record for r in table.stream_shard.items]

    def drain(self) -> int:
        """Deliver everything pending to every consumer; the number of records delivered."""
        from local.poller import matches

        delivered, busy = 0, True
        while busy:
            busy = False
            label, raw = self._records()
            arn = f"arn:aws:dynamodb:us-east-1:123456789012:table/{_table()}/stream/{label}"
            for name, settings in self.consumers.items():
                fresh = [r for r in raw if int(r["dynamodb"]["SequenceNumber"]) > self.seen[name]]
                if not fresh:
                    continue
                self.seen[name] = int(fresh[-1]["dynamodb"]["SequenceNumber"])
                records = [
                    r
                    for r in map(lambda x: _lambda_record(x, arn), fresh)
                    if not settings.filters or any(matches(p, r) for p in settings.filters)
                ]
                for start in range(0, len(records), settings.batch_size):
                    batch = records[start : start + settings.batch_size]
                    result = invoke(name, {"Records": batch})
                    self.invocations += 1
                    if (result or {}).get("batchItemFailures"):
                        raise RuntimeError(f"{name} failed records: {result['batchItemFailures']}")
                    delivered += len(batch)
                busy = True
        return delivered


def _lambda_record(record: dict, arn: str) -> dict:
    """A moto stream record as Lambda hands it to the function (local/poller.py's shape)."""
    src = record["dynamodb"]
    ddb = {
        "ApproximateCreationDateTime": int(src["ApproximateCreationDateTime"].timestamp()),
        **{k: src[k] for k in ("Keys", "NewImage", "OldImage") if k in src},
        "SequenceNumber": src["SequenceNumber"],
        "SizeBytes": src["SizeBytes"],
        "StreamViewType": src["StreamViewType"],
    }
    return {
        "eventID": record["eventID"],
        "eventName": record["eventName"],
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": "us-east-1",
        "dynamodb": ddb,
        "eventSourceARN": arn,
    }


def _table() -> str:
    from local.template import template

    return template().table_name


def _ok(reply, what: str) -> Any:
    if reply.status >= 300:
        raise RuntimeError(f"{what}: {reply.status} {reply.body}")
    return reply.body


def peer_id(name: str) -> str:
    return name.lower()


def load(conversation: Conversation) -> dict[str, str]:
    """Post the conversation session by session through the handlers, delivering the stream after each; returns
    message id -> turn id."""
    ws = conversation.id
    _ok(call("POST", "/v3/workspaces", {"id": ws, "configuration": WS_CONFIG}), "workspace")
    for name in conversation.peers:
        _ok(call("POST", f"/v3/workspaces/{ws}/peers", {"id": peer_id(name)}), "peer")
    stream = Stream()
    ids: dict[str, str] = {}
    for session_id, _ in conversation.sessions:
        _ok(
            call(
                "POST",
                f"/v3/workspaces/{ws}/sessions",
                {"id": session_id, "peers": {peer_id(n): {} for n in conversation.peers}},
            ),
            "session",
        )
        turns = [t for t in conversation.turns if t.session == session_id]
        for start in range(0, len(turns), 100):
            chunk = turns[start : start + 100]
            body = {
                "messages": [
                    {"peer_id": peer_id(t.speaker), "content": t.text, "created_at": t.created_at} for t in chunk
                ]
            }
            stored = _ok(call("POST", f"/v3/workspaces/{ws}/sessions/{session_id}/messages", body), "messages")
            ids.update({m["id"]: t.id for m, t in zip(stored, chunk)})
        stream.drain()
    _ok_flush(invoke("DeriveFunction", {"precis": "flush"}))
    stream.drain()
    return ids


def _ok_flush(result: dict) -> None:
    if result.get("failed"):
        raise RuntimeError(f"derive flush failed: {result}")


def _sources(client: Any) -> dict[str, list[str]]:
    """Each stored conclusion's source message ids (the Conclusion JSON does not carry them), by conclusion id: a
    read-only scan of the bench's table (one workspace) with the bench's own client."""
    found: dict[str, list[str]] = {}
    for page in client.get_paginator("scan").paginate(
        TableName=_table(),
        FilterExpression="attribute_exists(#sources)",
        ProjectionExpression="#id, #sources",
        ExpressionAttributeNames={"#id": "id", "#sources": "source_message_ids"},
    ):
        for item in page["Items"]:
            found[item["id"]["S"]] = [v["S"] for v in item["source_message_ids"].get("L", ())] or list(
                item["source_message_ids"].get("SS", ())
            )
    return found


# ---------------------------------------------------------------- one conversation


def measure(conversation: Conversation) -> dict:
    """Load one conversation on a fresh moto and ask all its questions; per-question rows and request counts."""
    from precis.settings import get_settings

    get_settings.cache_clear()
    ws = conversation.id
    last = conversation.sessions[-1][0]
    rows, search_requests, context_requests, conclusion_count = [], [], [], 0
    plain_requests, target_requests = [], []
    with moto() as clients:
        started = time.perf_counter()
        ids = load(conversation)
        load_s = time.perf_counter() - started
        stored_sources = _sources(own(clients["dynamodb"]))
        db = AWS  # the handlers' requests
        for name in conversation.peers:
            listed = _ok(
                call(
                    "POST",
                    f"/v3/workspaces/{ws}/conclusions/list",
                    {"filters": {"observer_id": peer_id(name), "observed_id": peer_id(name)}},
                    size=1,
                ),
                "conclusions",
            )
            conclusion_count += listed.get("total") or 0
        base, window = {}, {}
        for budget in BUDGETS:
            window = _ok(
                call("GET", f"/v3/workspaces/{ws}/sessions/{last}/context", tokens=budget, summary="false"), "context"
            )
            base["window", budget] = context_text(window)
            with Requests(db) as counted:
                base["default", budget] = context_text(
                    _ok(call("GET", f"/v3/workspaces/{ws}/sessions/{last}/context", tokens=budget), "context")
                )
            plain_requests.append(len(counted.ops))
        sources: dict[str, set[str]] = {}
        for question in conversation.questions:
            observed = peer_id(question.about)
            row: dict[str, Any] = {"conversation": ws, "question": question.id, "kind": question.kind}
            row["bm25"] = recall(bm25_rank(question.text, conversation), question)
            with Requests(db) as counted:
                found = _ok(
                    call("POST", f"/v3/workspaces/{ws}/search", {"query": question.text, "limit": 10}), "search"
                )
            search_requests.append(len(counted.ops))
            row["search"] = recall([ids.get(m["id"]) for m in found], question)
            hits = _ok(
                call(
                    "POST",
                    f"/v3/workspaces/{ws}/conclusions/query",
                    {
                        "query": question.text,
                        "top_k": 10,
                        "filters": {"observer_id": observed, "observed_id": observed},
                    },
                ),
                "conclusions/query",
            )
            for c in hits:
                if c["id"] not in sources:
                    sources[c["id"]] = {ids.get(m) for m in stored_sources.get(c["id"], ())}
            row["conclusions"] = recall(
                [sources[c["id"]] for c in hits], question, hit=lambda turns, wanted: bool(turns & wanted)
            )
            row["context"] = {}
            with Requests(db) as counted:
                _ok(
                    call(
                        "GET", f"/v3/workspaces/{ws}/sessions/{last}/context", tokens=BUDGETS[1], peer_target=observed
                    ),
                    "context",
                )
            target_requests.append(len(counted.ops))
            for budget in BUDGETS:
                for share in SHARES:
                    answer = _context_at(
                        share,
                        ws,
                        last,
                        budget,
                        observed,
                        question.text,
                        context_requests if share == _default_share() else None,
                        db,
                    )
                    row["context"][f"share {share}@{budget}"] = held(question, context_text(answer))
                    if share == _default_share():
                        row["context"][f"search@{budget}"] = row["context"][f"share {share}@{budget}"]
                        row["context"][f"recalled@{budget}"] = len(answer.get("recalled") or [])
                        shown = [m["id"] for m in answer["messages"]]
                        assert len(shown) == len(set(shown)) and answer["token_count"] <= budget, (ws, question.id)
                only = _context_at(
                    _default_share(), ws, last, budget, observed, question.text, None, db, limit_to_session="true"
                )
                row["context"][f"session_only@{budget}"] = held(question, context_text(only))
                row["context"][f"bm25_pack@{budget}"] = held(question, bm25_pack(question, conversation, budget))
                row["context"][f"whole@{budget}"] = held(question, whole(conversation))
                for name in ("window", "default"):
                    row["context"][f"{name}@{budget}"] = held(question, base[name, budget])
            rows.append(row)
    return {
        "conversation": ws,
        "turns": len(conversation.turns),
        "sessions": len(conversation.sessions),
        "questions": len(conversation.questions),
        "conclusions": conclusion_count,
        "load_s": load_s,
        "last_session": {
            "messages": len(window["messages"]),
            "skipped": window.get("messages_skipped"),
            "tokens": window.get("token_count"),
        },
        "rows": rows,
        "search_requests": search_requests,
        "context_requests": context_requests,
        "plain_requests": plain_requests,
        "target_requests": target_requests,
    }


def _default_share() -> float:
    from precis.settings import Settings

    return Settings.model_fields["context_recall_share"].default


def _context_at(
    share: float,
    ws: str,
    session: str,
    budget: int,
    observed: str,
    query: str,
    counts: list[int] | None,
    db: Any,
    **extra: str,
) -> dict:
    """The context with `search_query` and `peer_target` under the deployment setting PRECIS_CONTEXT_RECALL_SHARE
    = `share` (each call a fresh read of the settings, as a cold start would); its DynamoDB requests go to `counts`."""
    from precis.settings import get_settings

    os.environ["PRECIS_CONTEXT_RECALL_SHARE"] = str(share)
    get_settings.cache_clear()
    try:
        with Requests(db) as counted:
            answer = _ok(
                call(
                    "GET",
                    f"/v3/workspaces/{ws}/sessions/{session}/context",
                    tokens=budget,
                    peer_target=observed,
                    search_query=query,
                    **extra,
                ),
                "context",
            )
    finally:
        del os.environ["PRECIS_CONTEXT_RECALL_SHARE"]
        get_settings.cache_clear()
    if counts is not None:
        counts.append(len(counted.ops))
    return answer


# ---------------------------------------------------------------- the semantic embedder


def _serves_embeddings(url: str) -> tuple[bool, str]:
    """Whether the local OpenAI-compatible server answers /embeddings (local/models/llm_server.py serves chat only)."""
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        f"{url}/embeddings",
        method="POST",
        headers={"content-type": "application/json"},
        data=json.dumps({"model": "text-embedding-3-small", "input": ["probe"], "dimensions": 8}).encode(),
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return True, f"{answer.status}"
    except urllib.error.HTTPError as error:
        return False, f"HTTP {error.code} {error.read()[:120]!r}"


def _run_all(data: list[Conversation]) -> list[dict]:
    results = []
    for conversation in data:
        result = measure(conversation)
        print(
            f"  {conversation.id}: {result['sessions']} sessions, {result['turns']} turns, "
            f"{result['questions']} questions, {result['conclusions']} conclusions "
            f"(loaded in {result['load_s']:.0f} s); the last session's newest window at "
            f"{BUDGETS[-1]:,} tokens: {result['last_session']['messages']} messages, "
            f"{result['last_session']['tokens']} tokens, {result['last_session']['skipped']} left out",
            flush=True,
        )
        results.append(result)
    return results


def _semantic(data: list[Conversation]) -> dict:
    from local.models.llm_server import LLMServer
    from precis.settings import get_settings

    with LLMServer() as server:
        ok, detail = _serves_embeddings(server.url)
        if not ok:
            print(
                f"\nsemantic run skipped: local/models/llm_server.py answers POST /embeddings with {detail}: "
                "it serves chat completions only, so PRECIS_EMBEDDER=openai has no embeddings to use",
                flush=True,
            )
            return {"skipped": detail}
        saved = {k: os.environ.get(k) for k in ("PRECIS_EMBEDDER", "OPENAI_BASE_URL", "OPENAI_API_KEY")}
        os.environ.update(PRECIS_EMBEDDER="openai", OPENAI_BASE_URL=server.url, OPENAI_API_KEY="bench")
        try:
            return {"results": _run_all(data)}
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            get_settings.cache_clear()


# ---------------------------------------------------------------- report


def _flat(results: list[dict]) -> list[dict]:
    out = []
    for result in results:
        for row in result["rows"]:
            flat = {"kind": row["kind"]}
            for method in ("bm25", "search", "conclusions"):
                flat.update({f"{method} {k}": v for k, v in row[method].items()})
            flat.update(row["context"])
            out.append(flat)
    return out


def report(results: list[dict], label: str = "") -> dict:
    rows = _flat(results)
    recall_keys = [f"{m} {k}" for m in ("bm25", "search", "conclusions") for k in (*(f"r@{k}" for k in KS), "all@10")]
    context_keys = [f"{c}@{b}" for b in BUDGETS for c in (*CONTEXTS, *REFERENCES)]
    context_keys += [f"share {share}@{b}" for b in BUDGETS for share in SHARES]
    recalled_keys = [f"recalled@{b}" for b in BUDGETS]
    summary = summarise(rows, recall_keys + context_keys + recalled_keys)
    turns = sum(r["turns"] for r in results)
    methods = (
        ("BM25 reference (bench)", "bm25"),
        ("Precis message search", "search"),
        ("Precis conclusion query", "conclusions"),
    )
    table = []
    for kind in (*KINDS, "overall"):
        for title, method in methods:
            s = summary[kind]
            table.append((kind, title, s["questions"], *(s[f"{method} r@{k}"] for k in KS), s[f"{method} all@10"]))
    print_table(
        f"Retrieval{label}: recall of the answering turns ({len(results)} conversations, {turns:,} turns; "
        "all@10: every answering turn in the top 10)",
        ["questions", "ranking", "n", "recall@1", "recall@5", "recall@10", "all@10"],
        table,
    )
    ctx = []
    for kind in (*KINDS, "overall"):
        s = summary[kind]
        for budget in BUDGETS:
            ctx.append(
                (
                    kind,
                    budget,
                    s["questions"],
                    *(s[f"{c}@{budget}"] for c in (*CONTEXTS, *REFERENCES)),
                    s[f"recalled@{budget}"],
                )
            )
    print_table(
        f"Context{label} on the last session: share of the answer's words it holds, per budget (window: "
        "summary=false; default; search: peer_target + search_query=<question>, the default recall share; "
        "session_only: the same with limit_to_session, recall and the representation kept to this session; "
        "bm25_pack: the best BM25 turns of the whole conversation that fit; whole: every turn)",
        ["questions", "tokens", "n", *CONTEXTS, *REFERENCES, "recalled"],
        ctx,
    )
    overall = summary["overall"]
    sweep, best = [], None
    for share in SHARES:
        held_at = [overall[f"share {share}@{b}"] for b in BUDGETS]
        mean = sum(held_at) / len(held_at)
        sweep.append((share, *held_at, mean))
        if best is None or mean > best[1] + 1e-9:
            best = (share, mean)
    print_table(
        f"Recall share{label}: answer words held with peer_target + search_query, by the share of the tokens "
        "recall may take (PRECIS_CONTEXT_RECALL_SHARE)",
        ["share", *(f"{b // 1000}k" for b in BUDGETS), "mean"],
        sweep,
    )
    print(
        f"  chosen share: {best[0]}, the most answer words over 1k, 2k and 4k (share 0 is the context before recall "
        f"reached other sessions: the last session is short and recalls little). Recalled turns carry the answers "
        f"that share words with the question; the representation's conclusions carry the others, and a larger share "
        f"takes from them (it gets half of what recall leaves), which costs more than the extra turns add. The "
        f"default is {_default_share()}{'' if best[0] == _default_share() else ' -- NOT the chosen one'}.",
        flush=True,
    )
    search_ratio = overall["search r@10"] / overall["bm25 r@10"] if overall["bm25 r@10"] else float("nan")
    window, searched = overall["window@2000"], overall["search@2000"]
    context_ratio = searched / window if window else float("inf")
    search_req = [n for r in results for n in r["search_requests"]]
    context_req = [n for r in results for n in r["context_requests"]]
    plain_req = [n for r in results for n in r["plain_requests"]]
    target_req = [n for r in results for n in r["target_requests"]]
    whole4k = overall["whole@4000"]
    verdicts = [
        (
            "message search recall@10 / BM25 recall@10",
            f">= {SEARCH_TARGET}",
            search_ratio,
            "met" if search_ratio >= SEARCH_TARGET else "NOT met",
        ),
        (
            "2k context with search_query / newest window (answer words)",
            f">= {CONTEXT_TARGET}",
            context_ratio,
            "met" if context_ratio >= CONTEXT_TARGET else "NOT met",
        ),
        (
            "2k context with search_query / best BM25 turns packed in 2k",
            ">= 1",
            searched / overall["bm25_pack@2000"],
            "met" if searched >= overall["bm25_pack@2000"] else "NOT met",
        ),
        (
            "4k context with search_query / the whole conversation",
            ">= 0.9",
            overall["search@4000"] / whole4k,
            "met" if overall["search@4000"] >= 0.9 * whole4k else "NOT met",
        ),
    ]
    print_table(f"Targets{label}", ["measure", "target", "value", "verdict"], verdicts)
    print_table(
        f"DynamoDB requests per call{label} ({turns:,} turns in {len(results)} workspaces)",
        ["call", "calls", "median", "max"],
        [
            ("POST /search (limit 10)", len(search_req), statistics.median(search_req), max(search_req)),
            ("GET context", len(plain_req), statistics.median(plain_req), max(plain_req)),
            ("GET context (peer_target)", len(target_req), statistics.median(target_req), max(target_req)),
            (
                "GET context (peer_target + search_query)",
                len(context_req),
                statistics.median(context_req),
                max(context_req),
            ),
        ],
    )
    return {
        "summary": summary,
        "search_ratio": search_ratio,
        "context_ratio": context_ratio,
        "chosen_share": best[0],
        "search_requests": {"median": statistics.median(search_req), "max": max(search_req)},
        "context_requests": {"median": statistics.median(context_req), "max": max(context_req)},
    }


def precis_ranking(weight: float | None = None) -> Callable[[str, Conversation], list[str]]:
    """Precis's message ranking offline (what the search computes, without DynamoDB): BM25 from `precis.lexical` over
    the conversation's turns and their speakers; with `weight`, fused with the test embedder's cosine ranking
    (local/models/llm_server.py) as the search fuses a semantic one."""
    import numpy as np

    from local.models.llm_server import test_embedding
    from precis.lexical import Document, Query, Stats, fuse

    prepared: dict[str, tuple] = {}

    def rank(query: str, conversation: Conversation) -> list[str]:
        if conversation.id not in prepared:
            docs = [Document.of(t.text, t.speaker) for t in conversation.turns]
            stats = Stats.of(docs)
            vectors = np.array([test_embedding(t.text) for t in conversation.turns]) if weight is not None else None
            prepared[conversation.id] = (docs, stats, vectors)
        docs, stats, vectors = prepared[conversation.id]
        terms = Query.of(query, stats)
        scored = sorted(
            (-terms.score(d, stats.average_length), i)
            for i, d in enumerate(docs)
            if terms.score(d, stats.average_length) > 0
        )
        lexical = [("c", i) for _, i in scored[:10]]
        semantic = None
        if weight is not None:
            nearest = np.argsort(-(vectors @ np.array(test_embedding(query))), kind="stable")[:10]
            semantic = [("c", int(i)) for i in nearest]
        return [conversation.turns[i].id for _, i in fuse(lexical, semantic, weight or 1.0)[:10]]

    return rank


FUSION_WEIGHTS = (0.5, 0.6, 0.7, 0.8, 0.9)


def fusion_sweep(full: list[Conversation], reference: dict) -> dict:
    """BM25's share of the fused ranking, chosen here: the weight with the best recall@10, then @5, then @1, with the
    test embedder (a weight of 1 would ignore the embedder, so it is not a candidate)."""
    from precis.lexical import LEXICAL_WEIGHT

    lexical = evaluate(precis_ranking(), full)["overall"]
    rows, best = [], None
    for weight in FUSION_WEIGHTS:
        r = evaluate(precis_ranking(weight), full)["overall"]
        rows.append((weight, r["r@1"], r["r@5"], r["r@10"], r["r@10"] / reference["overall"]["r@10"]))
        if best is None or (r["r@10"], r["r@5"], r["r@1"]) > best[1]:
            best = (weight, (r["r@10"], r["r@5"], r["r@1"]))
    print_table(
        f"Precis's ranking offline, every question ({len(full)} conversations): BM25 alone, then fused with "
        "the test embedder at each weight (BM25's share)",
        ["weight", "recall@1", "recall@5", "recall@10", "x BM25 reference"],
        [
            (
                "BM25 alone",
                lexical["r@1"],
                lexical["r@5"],
                lexical["r@10"],
                lexical["r@10"] / reference["overall"]["r@10"],
            ),
            *rows,
        ],
    )
    print(
        f"  chosen weight: {best[0]} (best recall@10, then @5, then @1); message search and the conclusion query use "
        f"{LEXICAL_WEIGHT}{'' if best[0] == LEXICAL_WEIGHT else ' -- NOT the chosen one'}",
        flush=True,
    )
    return {"lexical": lexical, "sweep": rows, "chosen": best[0], "used": LEXICAL_WEIGHT}


def run() -> dict:
    full = conversations()
    reference = evaluate(bm25_rank, full)
    print_table(
        f"BM25 reference on the whole data set, offline ({len(full)} conversations, "
        f"{sum(len(c.turns) for c in full):,} turns; what evaluate(rank_fn) scores)",
        ["questions", "n", "recall@1", "recall@5", "recall@10", "all@10"],
        [(kind, r["questions"], r["r@1"], r["r@5"], r["r@10"], r["all@10"]) for kind, r in reference.items()],
    )
    fusion = fusion_sweep(full, reference)
    data = http_sample()
    print(
        f"\n  through the handlers: {len(data)} conversations, {sum(len(c.turns) for c in data):,} turns, "
        f"{sum(len(c.questions) for c in data)} questions (PRECIS_BENCH_RETRIEVAL_SCALE={scale():g})",
        flush=True,
    )
    results = _run_all(data)
    out = {
        "reference": reference,
        "fusion": fusion,
        "lexical": report(results),
        "per_conversation": [{k: v for k, v in r.items() if k not in ("rows",)} for r in results],
        "rows": _flat(results),
    }
    if os.environ.get("PRECIS_BENCH_SEMANTIC") == "1":
        semantic = _semantic(data)
        if "skipped" in semantic:
            out["semantic"] = {"skipped": semantic["skipped"]}
        else:
            out["semantic"] = report(semantic["results"], " (openai embedder)")
            lexical = out["lexical"]["summary"]["overall"]["search r@10"]
            fused = out["semantic"]["summary"]["overall"]["search r@10"]
            print_table(
                "Target: with the embedder, message search recall@10 >= the lexical figure",
                ["lexical", "with the embedder", "verdict"],
                [(lexical, fused, "met" if fused >= lexical else "NOT met")],
            )
    from bench import retrieval_scale

    scale_out = retrieval_scale.run()
    out["scale"] = {"verdict": scale_out["verdict"], "details": "bench/out/retrieval_scale.json"}
    write_json("retrieval", out)
    return out
