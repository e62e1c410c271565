"""The context and summaries routes against moto: a brute-force reference, the read's cost, the parameter rules."""

from __future__ import annotations

import json
import random
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from local.template import table_definition, template
from precis.store import keys
from precis.store.db import from_item, get_db, to_item
from precis.store.messages import NewMessage, append_messages, make_message_id
from precis.store.resources import require_session
from precis.store.summaries import put_summary
from precis.tokens import count_text
from tests.handlers import call

WS = "ws1"
W = f"/v3/workspaces/{WS}"
SHORT, LONG, ROLLING = "honcho_chat_summary_short", "honcho_chat_summary_long", "rolling"
CONTEXT_KEYS = {
    "id",
    "messages",
    "summary",
    "peer_representation",
    "peer_card",
    "messages_skipped",
    "token_count",
    "representation_skipped",
    "card_token_count",
}
SUMMARY_KEYS = {"content", "message_id", "summary_type", "created_at", "token_count"}
INLINE_MAX_BYTES = 16_384  # the default; the largest generated messages go to S3

# A vocabulary with multi-byte text, so token counts and byte sizes are not proportional.
WORDS = (
    "the agent called the weather tool for Lisbon and got 21°C with light wind; then it answered "
    'résumé naïve 東京 データ 🙂 ok fine JSON {"k": [1, 2]} stacktrace at line 42 Δ≈0.5'
).split()


def text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def context_url(session: str) -> str:
    return f"{W}/sessions/{session}/context"


@pytest.fixture
def ws(aws):
    assert call("POST", "/v3/workspaces", {"id": WS}).status == 201
    return aws


def new_session(session: str) -> None:
    assert call("POST", f"{W}/sessions", {"id": session}).status == 201


def stored_messages(client, session: str) -> list[dict]:
    items, kwargs = [], {}
    while True:
        out = client.query(
            TableName=template().table_name,
            KeyConditionExpression="PK = :p AND begins_with(SK, :m)",
            ExpressionAttributeValues={":p": {"S": keys.session_pk(WS, session)}, ":m": {"S": "MSG#"}},
            ConsistentRead=True,
            **kwargs,
        )
        items += [from_item(i) for i in out["Items"]]
        if "LastEvaluatedKey" not in out:
            return items
        kwargs = {"ExclusiveStartKey": out["LastEvaluatedKey"]}


def seed_messages(client, session: str, messages: list[tuple[str, str | None]]) -> list[dict]:
    """Write (content, run_id) messages with BatchWriteItem, items shaped exactly as ingestion shapes them.

    Large seeded sessions cannot go through `append_messages`: moto's in-process TransactWriteItems copies
    every table, so its cost grows with the table.
    """
    items, start, run_id, run_start, run_index = [], 0, None, 0, 0
    for seq, (content, message_run) in enumerate(messages, start=1):
        if message_run is None or message_run != run_id:
            run_start, run_index = seq, run_index + 1
        run_id = message_run
        tokens = count_text(content)
        items.append(
            {
                **keys.message(WS, session, seq),
                "kind": "message",
                "id": make_message_id(seq),
                "seq": seq,
                "peer_id": "alice",
                "token_count": tokens,
                "start_tokens": start,
                "run_id": run_id,
                "run_start_seq": run_start,
                "run_index": run_index,
                "metadata": "{}",
                "created_at": "2024-05-01T10:00:00+00:00",
                "content": content,
            }
        )
        start += tokens
    for first in range(0, len(items), 25):
        pending = {template().table_name: [{"PutRequest": {"Item": to_item(i)}} for i in items[first : first + 25]]}
        while pending:
            pending = client.batch_write_item(RequestItems=pending).get("UnprocessedItems") or {}
    return items


def summarize(session: str, messages: list[dict], summary_type: str, covers_seq: int, content: str) -> dict:
    """Store a summary of messages 1..covers_seq (as the summarizer would) and return what was stored."""
    tokens = count_text(content)
    incarnation = require_session(get_db(), WS, session)["incarnation"]
    written = put_summary(
        get_db(),
        WS,
        session,
        incarnation=incarnation,
        summary_type=summary_type,
        content=content,
        token_count=tokens,
        covers_seq=covers_seq,
        end_tokens=sum(m["token_count"] for m in messages[:covers_seq]),
        message_id=messages[covers_seq - 1]["id"],
    )
    assert written
    return {
        "summary_type": summary_type,
        "content": content,
        "token_count": tokens,
        "covers_seq": covers_seq,
        "message_id": messages[covers_seq - 1]["id"],
    }


def context(session: str, **query):
    reply = call("GET", context_url(session), **{k: v for k, v in query.items() if v is not None})
    assert reply.status == 200, reply.body
    return reply.body


# --- the reference ------------------------------------------------------------------------------------------------


def runs_of(messages: list[dict]) -> list[int]:
    """A run label per message: consecutive messages with the same run_id share one; no run_id is a run alone."""
    labels, label, previous = [], 0, None
    for message in messages:
        run_id = message.get("run_id")
        if run_id is None or run_id != previous:
            label += 1
        labels.append(label)
        previous = run_id
    return labels


def reference(
    messages: list[dict], summaries: list[dict], limit: int, use_summary: bool, whole_runs: bool
) -> list[dict]:
    """Every answer the contract allows (one per summary tied for largest), from all stored messages."""
    newest = messages[-1]["token_count"] if messages else None
    # A summary must leave the newest message verbatim, unless that message cannot show at all.
    fitting = [
        s
        for s in summaries
        if use_summary
        and s["token_count"] <= limit * 2 // 5  # floor(40%)
        and (
            newest is None or newest > limit or (s["covers_seq"] < len(messages) and s["token_count"] + newest <= limit)
        )
    ]
    largest = max((s["token_count"] for s in fitting), default=None)
    choices = [s for s in fitting if s["token_count"] == largest] or [None]
    runs = runs_of(messages)
    answers = []
    for summary in choices:
        after = summary["covers_seq"] if summary else 0
        budget = limit - (summary["token_count"] if summary else 0)
        first, used = len(messages), 0
        while first > after and used + messages[first - 1]["token_count"] <= budget:
            first -= 1
            used += messages[first]["token_count"]
        if whole_runs and after < first < len(messages) and runs[first - 1] == runs[first]:
            partial = runs[first]
            while first < len(messages) and runs[first] == partial:
                used -= messages[first]["token_count"]
                first += 1
        answers.append(
            {
                "summary": summary,
                "messages": messages[first:],
                "messages_skipped": first - after,
                "token_count": (summary["token_count"] if summary else 0) + used,
            }
        )
    return answers


def assert_well_formed(body: dict, session: str, limit: int) -> None:
    assert set(body) == CONTEXT_KEYS and body["id"] == session
    assert body["peer_representation"] is None and body["peer_card"] is None
    seqs = [m["seq"] for m in body["messages"]]
    if seqs:
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "ascending and contiguous"
    assert all(m["token_count"] == count_text(m["content"]) for m in body["messages"])
    summary_tokens = 0
    if body["summary"] is not None:
        assert set(body["summary"]) == SUMMARY_KEYS
        summary_tokens = body["summary"]["token_count"]
        assert body["summary"]["message_id"] not in [m["id"] for m in body["messages"]], "boundary repeated"
    assert body["token_count"] == summary_tokens + sum(m["token_count"] for m in body["messages"]) <= limit
    assert body["messages_skipped"] >= 0


def comparable(answer: dict) -> dict:
    summary = answer["summary"]
    return {
        "summary": summary and {k: summary[k] for k in ("summary_type", "content", "token_count", "message_id")},
        "messages": [(m["id"], m["content"]) for m in answer["messages"]],
        "messages_skipped": answer["messages_skipped"],
        "token_count": answer["token_count"],
    }


def assert_matches_reference(body: dict, answers: list[dict]) -> None:
    got, allowed = comparable(body), [comparable(a) for a in answers]
    assert got in allowed, f"got {got}\nallowed {allowed}"


# --- property: the route against the reference ----------------------------------------------------------------------

# Token sizes skewed small (so budgets bite), with empty messages and a few of several thousand tokens.
message_words = st.one_of(st.just(0), st.integers(1, 12), st.integers(12, 200), st.integers(1_000, 3_000))
summary_words = st.one_of(st.just(0), st.integers(1, 50), st.integers(50, 800), st.integers(800, 3_000))
limits = st.one_of(st.none(), st.integers(1, 300), st.integers(1, 5_000), st.integers(1, 100_000))
queries = st.tuples(limits, st.sampled_from([None, True, False]), st.sampled_from([None, True, False]))


@st.composite
def sessions(draw):
    """Runs of messages (with or without run ids), one or two batches, summaries at random run ends."""
    rng = random.Random(draw(st.integers(0, 2**32)))
    run_lengths = draw(st.lists(st.integers(1, 6), max_size=10))
    messages: list[tuple[str, str | None]] = []
    for index, length in enumerate(run_lengths):
        run_id = draw(st.sampled_from([None, f"run-{index}"]))  # None: each message is a run of its own
        messages += [(text(rng, draw(message_words)), run_id) for _ in range(length)]
    split = draw(st.integers(0, len(messages)))
    labels = runs_of([{"run_id": r} for _, r in messages])
    run_ends = [seq for seq in range(1, len(messages) + 1) if seq == len(messages) or labels[seq - 1] != labels[seq]]
    summaries = {}
    for summary_type, chance in ((SHORT, 0.6), (LONG, 0.5), (ROLLING, 0.15)):
        if run_ends and draw(st.floats(0, 1)) < chance:
            summaries[summary_type] = (draw(st.sampled_from(run_ends)), text(rng, draw(summary_words)))
    return messages, split, summaries, draw(st.lists(queries, min_size=1, max_size=4))


def recreate_table(client) -> None:
    """A fresh, empty table for each example (the fixture's table outlives hypothesis's examples)."""
    name = template().table_name
    client.delete_table(TableName=name)
    client.create_table(**table_definition(template()))


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(case=sessions())
def test_context_matches_a_brute_force_reference_over_all_stored_messages(aws, case):
    messages, split, summary_specs, query_list = case
    recreate_table(aws["dynamodb"])
    db = get_db()
    call("POST", "/v3/workspaces", {"id": WS})
    new_session("s1")
    batch = [
        NewMessage(content=c, peer_id="alice" if i % 2 else "bot", token_count=count_text(c), run_id=r)
        for i, (c, r) in enumerate(messages)
    ]
    for part in (batch[:split], batch[split:]):
        if part:
            append_messages(db, WS, "s1", part, inline_max_bytes=INLINE_MAX_BYTES)

    stored = stored_messages(aws["dynamodb"], "s1")
    assert [(m["seq"], m["token_count"], m.get("run_id")) for m in stored] == [
        (seq, n.token_count, n.run_id) for seq, n in enumerate(batch, start=1)
    ]
    for m in stored:  # the reference reads the content where it lives
        if "body_key" in m:
            body = aws["s3"].get_object(Bucket=template().bucket_name, Key=m["body_key"])["Body"]
            m["content"] = body.read().decode()
    assert [m["content"] for m in stored] == [c for c, _ in messages]
    summaries = [summarize("s1", stored, t, covers, content) for t, (covers, content) in summary_specs.items()]

    for tokens, use_summary, whole_runs in query_list:
        body = context(
            "s1",
            tokens=tokens,
            summary=None if use_summary is None else str(use_summary).lower(),
            whole_runs=None if whole_runs is None else str(whole_runs).lower(),
        )
        limit = 100_000 if tokens is None else tokens
        assert_well_formed(body, "s1", limit)
        assert_matches_reference(body, reference(stored, summaries, limit, use_summary is not False, bool(whole_runs)))
        if body["summary"]:
            covered = next(s["covers_seq"] for s in summaries if s["summary_type"] == body["summary"]["summary_type"])
            assert all(m["seq"] > covered for m in body["messages"])


def test_seeded_messages_are_shaped_as_ingestion_shapes_them(ws):
    # The cost tests seed with BatchWriteItem; this keeps their items identical to what append_messages writes.
    messages = [("hello", None), ("call the tool", "run-1"), ("tool result", "run-1"), ("", None)]
    new_session("ingested")
    new_session("seeded")
    append_messages(
        get_db(),
        WS,
        "ingested",
        [NewMessage(content=c, peer_id="alice", token_count=count_text(c), run_id=r) for c, r in messages],
        inline_max_bytes=1_000,
    )
    seed_messages(ws["dynamodb"], "seeded", messages)
    ingested, seeded = (stored_messages(ws["dynamodb"], s) for s in ("ingested", "seeded"))
    ignored = {"PK", "id", "created_at"}
    assert [{k: v for k, v in i.items() if k not in ignored} for i in ingested] == [
        {k: v for k, v in i.items() if k not in ignored} for i in seeded
    ]
    assert [i["id"][:7] for i in ingested] == [i["id"][:7] for i in seeded]


# --- the pinned details ---------------------------------------------------------------------------------------------


def test_context_never_repeats_summary_boundary(ws):
    new_session("s1")
    stored = seed_messages(ws["dynamodb"], "s1", [(f"message number {i}", None) for i in range(1, 11)])
    summary = summarize("s1", stored, SHORT, 6, "what happened in the first six messages")
    body = context("s1", tokens=2_000)
    assert body["summary"]["message_id"] == stored[5]["id"]
    assert [m["seq"] for m in body["messages"]] == [7, 8, 9, 10]
    assert body["messages_skipped"] == 0
    assert body["token_count"] == summary["token_count"] + sum(m["token_count"] for m in stored[6:])


def test_boundary_at_a_zero_token_message_is_not_repeated(ws):
    # The summary's last message costs 0 tokens, so it starts where the summary ends: the index query meets it.
    new_session("s1")
    stored = seed_messages(ws["dynamodb"], "s1", [("first", None), ("", None), ("third", None), ("", None)])
    summarize("s1", stored, SHORT, 2, "one")
    body = context("s1", tokens=100)
    assert [m["seq"] for m in body["messages"]] == [3, 4]
    assert body["messages_skipped"] == 0


def test_a_summary_too_large_for_40_percent_is_skipped_and_messages_come_from_the_whole_history(ws):
    new_session("s1")
    stored = seed_messages(ws["dynamodb"], "s1", [(f"m{i} " + "word " * 9, None) for i in range(1, 21)])
    big = summarize("s1", stored, LONG, 18, "summary " * 200)
    limit = big["token_count"] * 2  # 40% of it is less than the summary
    body = context("s1", tokens=limit)
    assert body["summary"] is None
    expected = reference(stored, [big], limit, True, False)[0]
    assert [m["seq"] for m in body["messages"]] == [m["seq"] for m in expected["messages"]]
    assert body["messages"][0]["seq"] <= 18, "messages reach back past the summary's boundary"
    assert body["messages_skipped"] == body["messages"][0]["seq"] - 1


def test_the_largest_summary_that_fits_wins(ws):
    new_session("s1")
    stored = seed_messages(ws["dynamodb"], "s1", [(f"m{i}", None) for i in range(1, 62)])
    short = summarize("s1", stored, SHORT, 60, "short " * 10)
    long = summarize("s1", stored, LONG, 40, "long " * 100)
    assert context("s1", tokens=long["token_count"] * 3)["summary"]["summary_type"] == LONG
    assert context("s1", tokens=long["token_count"] * 2)["summary"]["summary_type"] == SHORT
    assert context("s1", tokens=short["token_count"])["summary"] is None


def test_summary_false_ignores_summaries(ws):
    new_session("s1")
    stored = seed_messages(ws["dynamodb"], "s1", [(f"message {i}", None) for i in range(1, 9)])
    summarize("s1", stored, SHORT, 4, "the first four")
    body = context("s1", summary="false")
    assert body["summary"] is None
    assert [m["seq"] for m in body["messages"]] == list(range(1, 9))
    assert body["messages_skipped"] == 0
    assert body["token_count"] == sum(m["token_count"] for m in stored)


def test_empty_session_has_empty_context(ws):
    new_session("s1")
    body = context("s1", tokens=10)
    assert body == {
        "id": "s1",
        "messages": [],
        "summary": None,
        "peer_representation": None,
        "peer_card": None,
        "messages_skipped": 0,
        "token_count": 0,
        "representation_skipped": 0,
        "card_token_count": 0,
    }


def test_zero_token_messages_cost_nothing_and_are_returned(ws):
    new_session("s1")
    stored = seed_messages(
        ws["dynamodb"], "s1", [("older words here", None), ("", None), ("", None), ("new", None), ("", None)]
    )
    assert [m["token_count"] for m in stored][1:] == [0, 0, stored[3]["token_count"], 0]
    body = context("s1", tokens=stored[3]["token_count"])
    assert [m["seq"] for m in body["messages"]] == [2, 3, 4, 5]
    assert body["messages_skipped"] == 1
    assert body["token_count"] == stored[3]["token_count"]


def test_whole_runs_drops_only_the_oldest_partial_run(ws):
    new_session("s1")
    # run a: 1-3, solo 4, run b: 5-7, run c: 8-9; ten tokens each (or so)
    layout = [("a", 3), (None, 1), ("b", 3), ("c", 2)]
    stored = seed_messages(
        ws["dynamodb"],
        "s1",
        [
            (f"message {n} " + "tok " * 8, run)
            for n, (run, size) in enumerate((r, s) for r, s in layout for _ in range(s))
        ],
    )
    tokens = [m["token_count"] for m in stored]
    limit = sum(tokens[5:])  # fits 6..9: run b only partly (6, 7 of 5-7)
    assert [m["seq"] for m in context("s1", tokens=limit)["messages"]] == [6, 7, 8, 9]
    body = context("s1", tokens=limit, whole_runs="true")
    assert [m["seq"] for m in body["messages"]] == [8, 9]
    assert body["messages_skipped"] == 7
    assert body["token_count"] == sum(tokens[7:])
    # a budget that starts exactly at a run start keeps everything it fits
    assert [m["seq"] for m in context("s1", tokens=sum(tokens[4:]), whole_runs="true")["messages"]] == [5, 6, 7, 8, 9]


def test_a_message_posted_between_the_rounds_is_not_in_the_answer(ws):
    # The answer is the snapshot round 1 saw: a message written meanwhile starts exactly where the window ends.
    new_session("s1")
    stored = seed_messages(ws["dynamodb"], "s1", [(f"message {i}", None) for i in range(1, 6)])
    late = {
        **stored[-1],
        **keys.message(WS, "s1", 6),
        "id": make_message_id(6),
        "seq": 6,
        "run_start_seq": 6,
        "start_tokens": stored[-1]["start_tokens"] + stored[-1]["token_count"],
        "content": "late",
    }

    def write_late_message(params, **_):
        if json.loads(params.get("body") or b"{}").get("IndexName") == "ByStartTokens":
            ws["dynamodb"].put_item(TableName=template().table_name, Item=to_item(late))

    events = get_db().client.meta.events
    events.register("before-call.dynamodb.Query", write_late_message)
    try:
        body = context("s1", tokens=1_000)
    finally:
        events.unregister("before-call.dynamodb.Query", write_late_message)
    assert len(stored_messages(ws["dynamodb"], "s1")) == 6
    assert [m["seq"] for m in body["messages"]] == [1, 2, 3, 4, 5]
    assert body["token_count"] == sum(m["token_count"] for m in stored)
    assert [m["seq"] for m in context("s1", tokens=1_000)["messages"]] == [1, 2, 3, 4, 5, 6]


# --- cost: requests, rounds and bytes -------------------------------------------------------------------------------


class Requests:
    """DynamoDB requests made by the handlers' client: operation, index, thread, timing and response bytes."""

    def __init__(self, client):
        self.client, self.calls, self._lock = client, [], threading.Lock()

    def _before(self, model, params, **_):
        body = json.loads(params.get("body") or b"{}")
        with self._lock:
            self.calls.append(
                {
                    "op": model.name,
                    "index": body.get("IndexName"),
                    "thread": threading.get_ident(),
                    "start": time.perf_counter(),
                    "end": None,
                    "bytes": 0,
                }
            )

    def _after(self, http_response, model, **_):
        with self._lock:
            mine = [c for c in self.calls if c["thread"] == threading.get_ident() and c["end"] is None]
            mine[-1].update(end=time.perf_counter(), bytes=len(http_response.content))

    def __enter__(self):
        self.client.meta.events.register("before-call.dynamodb", self._before)
        self.client.meta.events.register("after-call.dynamodb", self._after)
        return self

    def __exit__(self, *exc):
        self.client.meta.events.unregister("before-call.dynamodb", self._before)
        self.client.meta.events.unregister("after-call.dynamodb", self._after)


def measured_context(session: str, **query) -> tuple[dict, list[dict]]:
    with Requests(get_db().client) as requests:
        body = context(session, **query)
    return body, requests.calls


def realistic_contents(count: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return [text(rng, rng.choice([rng.randint(5, 30), rng.randint(30, 120)])) for _ in range(count)]


ROUND_ONE = [("BatchGetItem", None), ("Query", None)]  # session + summaries, and the last message's cost
WINDOW = ("Query", "ByStartTokens")
SUMMARY_TEXT = ("GetItem", None)  # the chosen summary's text, when round 1 reads only the summaries' costs
MAX_REQUESTS = 3
ROUND_ONE_BYTES = 2_048  # the session item, small summaries (or their costs) and one message's cost


def assert_two_rounds(calls: list[dict], body: dict) -> None:
    """Round 1: two requests in parallel; round 2, after both: the window query (and the summary's text)."""
    round1 = [c for c in calls if (c["op"], c["index"]) in ROUND_ONE]
    round2 = [c for c in calls if c not in round1]
    assert sorted((c["op"], c["index"]) for c in round1) == ROUND_ONE, calls
    assert len({c["thread"] for c in round1}) == 2, "round 1's requests are issued in parallel"
    kinds = [(c["op"], c["index"]) for c in round2]
    assert kinds.count(WINDOW) == 1 if body["messages"] else kinds.count(WINDOW) <= 1, calls
    assert kinds.count(SUMMARY_TEXT) <= (1 if body["summary"] else 0), calls
    assert set(kinds) <= {WINDOW, SUMMARY_TEXT}, calls
    assert all(c["start"] >= max(r["end"] for r in round1) for c in round2), "round 2 follows round 1"
    assert len(calls) <= MAX_REQUESTS + kinds.count(SUMMARY_TEXT), calls


def json_bytes(value) -> int:
    return len(json.dumps(value, ensure_ascii=False).encode())


def test_context_costs_two_rounds_and_reads_what_it_returns_whatever_the_session_length(ws):
    contents = realistic_contents(2_000)
    measured = {}
    for session, count in (("long", 2_000), ("short", 200)):
        new_session(session)
        # The newest messages are the same in both sessions, so the answers are comparable.
        stored = seed_messages(ws["dynamodb"], session, [(c, None) for c in contents[-count:]])
        summarize(session, stored, SHORT, count - 150, "a short summary of the older part of the conversation")
        body, calls = measured_context(session, tokens=2_000)
        assert 0 < len(body["messages"]) < 150 and body["summary"] is not None
        measured[session] = body, calls

    for body, calls in measured.values():
        assert_two_rounds(calls, body)
        by_kind = {(c["op"], c["index"]): c["bytes"] for c in calls}
        assert sum(by_kind[k] for k in ROUND_ONE) <= ROUND_ONE_BYTES
        assert by_kind[WINDOW] <= 1.5 * json_bytes(body["messages"]), (by_kind[WINDOW], json_bytes(body["messages"]))
        assert sum(by_kind.values()) <= 1.5 * json_bytes([body["messages"], body["summary"]]) + ROUND_ONE_BYTES

    (long_body, long_calls), (short_body, short_calls) = measured["long"], measured["short"]
    assert [m["content"] for m in long_body["messages"]] == [m["content"] for m in short_body["messages"]]
    assert len(long_calls) == len(short_calls)
    long_bytes, short_bytes = (sum(c["bytes"] for c in calls) for calls in (long_calls, short_calls))
    assert long_bytes <= 1.03 * short_bytes, "bytes read do not grow with the session"


def test_whole_runs_and_summary_false_reads_cost_the_same_rounds(ws):
    new_session("s1")
    stored = seed_messages(ws["dynamodb"], "s1", [(c, f"run-{i // 4}") for i, c in enumerate(realistic_contents(400))])
    summarize("s1", stored, LONG, 200, "an overview of the first two hundred messages")
    for query in ({"whole_runs": "true", "tokens": 3_000}, {"summary": "false", "tokens": 500}):
        body, calls = measured_context("s1", **query)
        assert body["messages"]
        assert_two_rounds(calls, body)


def test_a_session_without_messages_answers_in_one_round(ws):
    new_session("s1")
    _, calls = measured_context("s1")
    assert sorted((c["op"], c["index"]) for c in calls) == ROUND_ONE


# --- parameters ------------------------------------------------------------------------------------------------------


@pytest.fixture
def seeded(ws):
    new_session("s1")
    new_session("s2")
    seed_messages(ws["dynamodb"], "s1", [("hello there", None), ("general kenobi", None)])
    return ws


@pytest.mark.parametrize("tokens", [0, -1, 100_001, 1.5, "abc", ""])
def test_tokens_outside_1_to_100000_is_422_naming_tokens(seeded, tokens):
    reply = call("GET", context_url("s1"), tokens=tokens)
    assert reply.status == 422
    assert "tokens" in json.dumps(reply.body["detail"])


@pytest.mark.parametrize(
    "query, named",
    [
        ({"peer_perspective": "alice"}, "peer_perspective"),
        ({"scope": "local"}, "scope"),
        ({"peer_target": "alice", "peer_perspective": "bob", "scope": "local"}, "scope"),
        ({"peer_target": "alice", "scope": "local", "sessions": "s1"}, "sessions"),
        ({"sessions": "s1"}, "sessions: needs peer_target"),  # Honcho refuses an allowlist without its peer
        ({"peer_target": "alice", "sessions": "s1", "limit_to_session": "true"}, "limit_to_session"),
        ({"peer_target": "alice", "sessions": "s2"}, "must include this session"),
        ({"peer_target": "alice", "sessions": ["s2", "s3"]}, "must include this session"),
        ({"peer_target": "alice", "sessions": "bad id"}, "is not a session id"),
        ({"peer_target": "bad id"}, "peer_target"),
        ({"search_top_k": 0}, "search_top_k"),
        ({"search_top_k": 101}, "search_top_k"),
        ({"search_max_distance": 1.5}, "search_max_distance"),
        ({"max_conclusions": 0}, "max_conclusions"),
        ({"summary": "maybe"}, "summary"),
        ({"whole_runs": "sometimes"}, "whole_runs"),
    ],
)
def test_honchos_parameter_rules_answer_422_naming_the_parameter(seeded, query, named):
    reply = call("GET", context_url("s1"), **query)
    assert reply.status == 422, reply.body
    assert named in json.dumps(reply.body["detail"])


@pytest.mark.parametrize(
    "query",
    [
        {},
        {"tokens": 1},
        {"tokens": 100_000},
        {"limit_to_session": "true"},
        {"summary": "true", "limit_to_session": "false", "tokens": 2_000},  # what honcho-ai sends
        {
            "search_query": "weather",
            "search_top_k": 5,
            "search_max_distance": 0.5,
            "include_most_frequent": "true",
            "max_conclusions": 10,
        },
    ],
)
def test_valid_parameter_combinations_answer_200_without_peer_representation(seeded, query):
    reply = call("GET", context_url("s1"), **query)
    assert reply.status == 200, reply.body
    assert reply.body["peer_representation"] is None and reply.body["peer_card"] is None
    contents = [m["content"] for m in reply.body["messages"]]
    assert contents == ["hello there", "general kenobi"] or query.get("tokens") == 1


@pytest.mark.parametrize("route", ["context", "summaries"])
def test_unknown_and_deleted_sessions_and_workspaces_are_404(seeded, route):
    assert call("GET", f"{W}/sessions/nope/{route}").status == 404
    assert call("GET", f"/v3/workspaces/nope/sessions/s1/{route}").status == 404
    assert call("DELETE", f"{W}/sessions/s1").status == 202
    reply = call("GET", f"{W}/sessions/s1/{route}")
    assert reply.status == 404 and "s1" in reply.body["detail"]
    # A deleted workspace: its sessions answer 404 too, whether they were deleted before it or never existed.
    assert call("DELETE", f"{W}/sessions/s2").status == 202
    assert call("DELETE", W).status == 202
    for session in ("s1", "s2", "never"):
        reply = call("GET", f"{W}/sessions/{session}/{route}")
        assert reply.status == 404 and "not found" in reply.body["detail"], (session, reply.body)
    assert call("POST", f"{W}/sessions/list").status == 404


def test_summaries_route_reports_short_and_long(seeded):
    assert call("GET", f"{W}/sessions/s1/summaries").body == {"id": "s1", "short_summary": None, "long_summary": None}
    stored = stored_messages(seeded["dynamodb"], "s1")
    short = summarize("s1", stored, SHORT, 2, "they greeted each other")
    long = summarize("s1", stored, LONG, 1, "a greeting")
    body = call("GET", f"{W}/sessions/s1/summaries").body
    assert set(body) == {"id", "short_summary", "long_summary"}
    for reported, written in ((body["short_summary"], short), (body["long_summary"], long)):
        assert set(reported) == SUMMARY_KEYS
        assert {k: reported[k] for k in ("content", "message_id", "summary_type", "token_count")} == {
            k: written[k] for k in ("content", "message_id", "summary_type", "token_count")
        }
        assert isinstance(reported["message_id"], str) and isinstance(reported["token_count"], int)


def test_a_rolling_summary_is_reported_as_the_long_summary(seeded):
    stored = stored_messages(seeded["dynamodb"], "s1")
    summarize("s1", stored, ROLLING, 2, "rolled up: they greeted each other")
    body = call("GET", f"{W}/sessions/s1/summaries").body
    assert body["short_summary"] is None
    assert body["long_summary"]["summary_type"] == "rolling"
    assert body["long_summary"]["content"] == "rolled up: they greeted each other"
    assert body["long_summary"]["message_id"] == stored[1]["id"]


@pytest.mark.parametrize(
    "query, card",
    [
        ({"peer_target": "alice"}, None),
        ({"peer_target": "alice", "peer_perspective": "bob"}, None),
        ({"peer_target": "alice", "limit_to_session": "true"}, None),
        (
            {"peer_target": "alice", "sessions": "s1,s2", "search_query": "weather", "include_most_frequent": "true"},
            None,
        ),
    ],
)
def test_a_peer_with_no_conclusions_has_an_empty_representation(seeded, query, card):
    for peer in ("alice", "bob"):
        assert call("POST", "/v3/workspaces/ws1/peers", {"id": peer}).status in (200, 201)
    reply = call("GET", context_url("s1"), **query)
    assert reply.status == 200, reply.body
    assert (reply.body["peer_representation"], reply.body["peer_card"]) == ("", card)
    assert [m["content"] for m in reply.body["messages"]] == ["hello there", "general kenobi"]
