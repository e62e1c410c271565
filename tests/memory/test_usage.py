"""Usage metered (docs/design.md, "Usage"): each model call's tokens, as the server reported them, written once an
invocation per (workspace, day, role, model) and read through GET …/usage; a workspace's monthly token budget pauses
its derivation (not its ingestion, nor its context reads) and the queue status says so.

The model is the local OpenAI-compatible server through the real `openai` client; the handlers run under their
template roles (tests.handlers), so the functions' grants to write usage are exercised too."""

from __future__ import annotations

import json
import re
from datetime import UTC, date, datetime

import pytest

from tests.handlers import call, dynamodb_requests, invoke
from tests.stream import message_records

W = "/v3/workspaces/ws1"
# Long enough that every extraction prompt passes the server's caching minimum (1,024 of its tokens) with a shared
# prefix: the second job's prompt is partly read from its cache.
INSTRUCTIONS = "Record only durable facts about where people live and work. " * 140
CITY = re.compile(r"Reykjavik|Ulaanbaatar")


def answer(body: dict) -> str:
    """Conclusions naming the city the prompt mentions last; a card of them for a card update."""
    text = json.dumps(body["messages"])
    city = CITY.findall(text)[-1] if CITY.search(text) else "nowhere"
    if "peer_card" in json.dumps(body.get("response_format") or {}):
        return json.dumps({"peer_card": [f"LOCATION: lives in {city}"]})
    return json.dumps({"explicit": [{"content": f"alice lives in {city}"}]})


def configuration(budget: int | None = None) -> dict:
    return {
        "deriver": {"batch_tokens": 0},
        "reasoning": {"custom_instructions": INSTRUCTIONS},
        **({"usage": {"monthly_token_budget": budget}} if budget is not None else {}),
    }


@pytest.fixture
def ws(aws, llm_server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", llm_server.url)
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("PRECIS_LLM_MAX_ATTEMPTS", "2")
    monkeypatch.setenv("PRECIS_DERIVE_ENGINE", "llm")
    monkeypatch.setenv("PRECIS_DERIVE_CARD_EVERY", "1")  # a card refresh at every derivation: both roles each time
    llm_server.answer = answer
    for name in ("ws1", "ws2"):
        assert call("POST", "/v3/workspaces", {"id": name, "configuration": configuration()}).status == 201
    return aws


def post(text: str, ws: str = "ws1", session: str = "s1") -> None:
    reply = call(
        "POST",
        f"/v3/workspaces/{ws}/sessions/{session}/messages",
        {"messages": [{"peer_id": "alice", "content": text}]},
    )
    assert reply.status == 201, reply.body


def derive(aws) -> None:
    assert invoke("DeriveFunction", {"Records": message_records(aws["dynamodb"])}) == {"batchItemFailures": []}


def usage(ws: str = "ws1", **query) -> dict:
    reply = call("GET", f"/v3/workspaces/{ws}/usage" + ("?" + "&".join(f"{k}={v}" for k, v in query.items())))
    assert reply.status == 200, reply.body
    return reply.body


def reported(server, role: str | None = None, mentions: str | None = None) -> dict:
    """The server's own usage blocks of its chat answers, summed (of `role`: card or derive; mentioning a city)."""
    totals = {"calls": 0, "input_tokens": 0, "cached_input_tokens": 0, "output_tokens": 0}
    for r in server.reported:
        is_card = "peer_card" in json.dumps(r.body.get("response_format") or {})
        if r.kind != "chat" or (role is not None and (role == "card") != is_card):
            continue
        if mentions is not None and mentions not in json.dumps(r.body["messages"]):
            continue
        totals["calls"] += 1
        totals["input_tokens"] += r.usage["prompt_tokens"]
        totals["cached_input_tokens"] += r.usage["prompt_tokens_details"]["cached_tokens"]
        totals["output_tokens"] += r.usage["completion_tokens"]
    return totals


def counts(row: dict) -> dict:
    return {k: row[k] for k in ("calls", "input_tokens", "cached_input_tokens", "output_tokens")}


def test_a_derive_runs_tokens_reach_the_route_as_the_server_reported_them(ws, llm_server):
    post("I moved to Reykjavik last spring.")
    derive(ws)
    post("I still live in Reykjavik, by the river.")
    derive(ws)
    body = usage()
    today = datetime.now(UTC).date().isoformat()
    (model,) = {r.model for r in llm_server.reported}
    assert [(r["day"], r["role"], r["model"]) for r in body["usage"]] == [
        (today, "card", model),
        (today, "derive", model),
    ]
    by_role = {r["role"]: counts(r) for r in body["usage"]}
    assert by_role == {"card": reported(llm_server, "card"), "derive": reported(llm_server, "derive")}
    assert by_role["derive"]["calls"] == 2 and by_role["derive"]["cached_input_tokens"] >= 1024  # the second hit
    assert body["totals"] == {k: sum(r[k] for r in by_role.values()) for k in by_role["derive"]}
    assert body["budget"] == {
        "monthly_token_budget": None,
        "month": today[:7],
        "spent": body["totals"]["input_tokens"] + body["totals"]["output_tokens"],
        "paused": None,
    }
    assert usage("ws2")["usage"] == []


def test_two_workspaces_derived_in_one_invocation_never_mix(ws, llm_server):
    post("I moved to Reykjavik last spring.", "ws1")
    post("I moved to Ulaanbaatar last spring.", "ws2")
    records = message_records(ws["dynamodb"], "ws1") + message_records(ws["dynamodb"], "ws2")
    with dynamodb_requests() as requests:
        # one stream batch: both workspaces' jobs run side by side in one invocation
        assert invoke("DeriveFunction", {"Records": records}) == {"batchItemFailures": []}
    for name, city in (("ws1", "Reykjavik"), ("ws2", "Ulaanbaatar")):
        rows = usage(name)["usage"]
        assert {r["role"]: counts(r) for r in rows} == {
            role: reported(llm_server, role, mentions=city) for role in ("card", "derive")
        }
    # written once, as the invocation ended: one UpdateItem per (workspace, day, role, model)
    writes = [p for op, p in requests if op == "UpdateItem" and p["Key"]["PK"]["S"].startswith("USAGE#")]
    assert len(writes) == 4


def test_each_flush_adds_to_one_shard_and_the_reader_sums_them(aws):
    from precis.llm.meter import Key, Spend
    from precis.store import keys, usage
    from precis.store.db import get_db, query_all, to_item

    db, day = get_db(), "2026-03-31"
    one = Key("ws1", day, "derive", "m")
    for shard, spend in enumerate([Spend(1, 100, 10, 5), Spend(2, 200, 0, 7), Spend(1, 50, 50, 1)]):
        assert usage.write(db, {one: spend}, shard=lambda _n, s=shard: s) == 0
    usage.write(db, {Key("ws1", day, "card", "m"): Spend(1, 9, 0, 1)}, shard=lambda _n: 3)
    usage.write(db, {Key("ws1", "2026-04-01", "derive", "m"): Spend(1, 1000, 0, 1)}, shard=lambda _n: 0)
    items = query_all(
        db,
        KeyConditionExpression="PK = :pk",
        ExpressionAttributeValues=to_item({":pk": keys.usage_pk("ws1", "2026-03")}),
    )
    assert len(items) == 4  # three shards of one key, one of another
    rows, capped = usage.read(db, "ws1", date(2026, 3, 1), date(2026, 3, 31))
    assert not capped and rows == [
        {"day": day, "role": "card", "model": "m", "calls": 1, "input_tokens": 9, "cached_input_tokens": 0,
         "output_tokens": 1},
        {"day": day, "role": "derive", "model": "m", "calls": 4, "input_tokens": 350, "cached_input_tokens": 60,
         "output_tokens": 13},
    ]  # fmt: skip
    # a month's spend: its own partition only, so the month turning starts from nothing
    assert usage.month_tokens(db, "ws1", date(2026, 3, 31)) == 350 + 13 + 9 + 1
    assert usage.month_tokens(db, "ws1", date(2026, 4, 1)) == 1001
    assert usage.month_tokens(db, "ws1", date(2026, 5, 1)) == 0


def test_a_spent_budget_pauses_derivation_not_ingestion_nor_context_and_resumes_when_raised(ws, llm_server):
    post("I moved to Reykjavik last spring.")
    derive(ws)
    spent = usage()["budget"]["spent"]
    assert spent > 0
    assert call("PUT", W, {"configuration": configuration(budget=spent)}).status == 200
    asked = len(llm_server.requests)
    post("I moved to Ulaanbaatar this winter.")  # ingestion goes on
    derive(ws)
    assert len(llm_server.requests) == asked  # no model call: derivation paused
    status = call("GET", f"{W}/queue/status").body
    assert status["paused"] == "token_budget" and status["pending_work_units"] >= 1
    assert call("GET", f"{W}/queue/status?session_id=s1").body["paused"] == "token_budget"
    context = call("GET", f"{W}/sessions/s1/context").body  # context reads go on
    assert "I moved to Ulaanbaatar this winter." in json.dumps(context)
    assert usage()["budget"] == {**usage()["budget"], "paused": "token_budget", "monthly_token_budget": spent}
    # the flush finds the held cursor due, and holds it again while the budget is spent: nothing skipped
    assert invoke("DeriveFunction", {"precis": "flush"}) == {"flushed": 0, "failed": 0, "paused": 1}
    assert len(llm_server.requests) == asked
    assert call("PUT", W, {"configuration": configuration(budget=spent * 100)}).status == 200
    assert invoke("DeriveFunction", {"precis": "flush"}) == {"flushed": 1, "failed": 0}
    found = call("POST", f"{W}/conclusions/list", {"filters": {"observer_id": "alice", "observed_id": "alice"}})
    assert {c["content"] for c in found.body["items"]} == {"alice lives in Reykjavik", "alice lives in Ulaanbaatar"}
    assert "paused" not in call("GET", f"{W}/queue/status").body


def test_the_month_turning_lifts_a_spent_budget(aws):
    from precis.llm.meter import Key, Spend
    from precis.memory.token_budget import budget_of
    from precis.store import usage
    from precis.store.db import get_db
    from precis.store.resources import require_workspace

    assert call("POST", "/v3/workspaces", {"id": "ws1", "configuration": {"usage": {"monthly_token_budget": 100}}})
    db = get_db()
    usage.write(db, {Key("ws1", "2026-01-31", "derive", "m"): Spend(1, 90, 0, 10)})
    workspace = require_workspace(db, "ws1")
    assert budget_of(db, workspace, date(2026, 1, 31)).paused
    assert not budget_of(db, workspace, date(2026, 2, 1)).paused


@pytest.mark.parametrize(
    "section, problem",
    [
        ({"monthly_token_budget": -1}, "monthly_token_budget"),
        ({"monthly_token_budget": "lots"}, "monthly_token_budget"),
        ({"monthly_token_budget": True}, "monthly_token_budget"),
        ({"budget": 5}, "unknown setting"),
        ("1000", "must be an object"),
    ],
)
def test_a_bad_budget_is_422_and_other_keys_round_trip(aws, section, problem):
    reply = call("POST", "/v3/workspaces", {"id": "ws1", "configuration": {"usage": section}})
    assert reply.status == 422 and problem in json.dumps(reply.body)
    kept = {"usage": {"monthly_token_budget": 5}, "someone_elses": {"any": ["thing"]}}
    assert call("POST", "/v3/workspaces", {"id": "ws1", "configuration": kept}).body["configuration"] == kept


@pytest.mark.parametrize(
    "query, status",
    [({"from": "2026-01-02", "to": "2026-01-01"}, 422), ({"from": "2026-01-01", "to": "2026-06-01"}, 422),
     ({"from": "yesterday"}, 422), ({"from": "2026-02-30"}, 422), ({"from": "2026-01-01", "to": "2026-03-31"}, 200)],
)  # fmt: skip
def test_the_routes_range_is_days_at_most_92(aws, query, status):
    assert call("POST", "/v3/workspaces", {"id": "ws1"}).status == 201
    reply = call("GET", f"{W}/usage?" + "&".join(f"{k}={v}" for k, v in query.items()))
    assert reply.status == status, reply.body
    assert call("GET", "/v3/workspaces/nope/usage").status == 404


def test_the_metrics_are_tokens_by_role_and_model(capsys, monkeypatch):
    from precis.llm.meter import Key, Spend
    from precis.store import usage

    monkeypatch.delenv("POWERTOOLS_METRICS_DISABLED", raising=False)
    usage.publish(
        {
            Key("ws1", "2026-01-01", "derive", "m"): Spend(1, 100, 20, 5),
            Key("ws2", "2026-01-01", "derive", "m"): Spend(2, 50, 0, 5),
            Key("ws1", "2026-01-01", "embed", "e"): Spend(1, 7, 0, 0),
        }
    )
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    metrics = ("ModelCalls", "InputTokens", "CachedInputTokens", "OutputTokens")
    assert [(x["role"], x["model"], *(x[m] for m in metrics)) for x in lines] == [
        ("derive", "m", [3.0], [150.0], [20.0], [10.0]),  # both workspaces' calls: no workspace dimension
        ("embed", "e", [1.0], [7.0], [0.0], [0.0]),
    ]
    # a few dimensions: no workspace (a metric per tenant); the function's service, as every metric of Precis's has
    dimensions = {tuple(d) for x in lines for d in x["_aws"]["CloudWatchMetrics"][0]["Dimensions"]}
    assert dimensions == {("role", "model", "service")}


def test_summaries_chat_and_embeddings_are_metered_under_their_roles(ws, llm_server, monkeypatch):
    """The summarizer's stream batch, the chat function (under its read-only role: the usage grant alone lets it
    write) and the context function's query embedding (an OpenAI-compatible embedder) each write their workspace's
    usage under their role."""
    monkeypatch.setenv("PRECIS_EMBEDDER", "openai")
    from precis.settings import get_settings

    get_settings.cache_clear()
    assert call("PUT", W, {"configuration": {"summarizer": {"engine": "llm"}}}).status == 200
    for n in range(20):  # a short summary falls due at the 20th message
        post(f"Message {n}: I walked along the harbour in Reykjavik.")
    llm_server.answer = lambda body: "Summary: alice walked in Reykjavik."
    records = message_records(ws["dynamodb"])
    assert invoke("SummarizeFunction", {"Records": records}) == {"batchItemFailures": []}
    (summarized,) = [r for r in usage()["usage"] if r["role"] == "summarize"]
    assert counts(summarized) == reported(llm_server)  # the summarizer's calls are the only ones so far
    before = len(llm_server.reported)
    llm_server.answer = lambda body: "alice lives in Reykjavik."
    assert call("POST", f"{W}/chat", {"query": "where does alice live?"}).status == 200
    chat = [r for r in llm_server.reported[before:] if r.kind == "chat"]
    assert chat, "the chat asked the model"
    rows = {r["role"]: r for r in usage()["usage"]}
    assert rows["chat"]["calls"] == len(chat)
    assert rows["chat"]["input_tokens"] == sum(r.usage["prompt_tokens"] for r in chat)
    assert rows["embed"]["input_tokens"] == sum(
        r.usage["prompt_tokens"] for r in llm_server.reported if r.kind == "embeddings"
    )
    searched = call("POST", f"{W}/search", {"query": "harbour walks"})
    assert searched.status == 200
    embeds = [r for r in llm_server.reported if r.kind == "embeddings"]
    (embedded,) = [r for r in usage()["usage"] if r["role"] == "embed"]
    assert embedded["calls"] == len(embeds)
    assert embedded["input_tokens"] == sum(r.usage["prompt_tokens"] for r in embeds)
    assert usage("ws2")["usage"] == []
