"""Chat's cost: LLM input tokens per answer by reasoning level, and the DynamoDB reads of its first retrieval.

A peer with 500 conclusions and a card, asked in a session of 1,000 messages, answered by the real `llm` engine
through the openai client against the local OpenAI-compatible server. The server's model calls a search tool every
round it may (the worst case: every follow-up round is used), so each level shows its ceiling; `minimal` is the
floor, one request and no tools. Tokens are counted with the model's tokenizer over every request the chat sent.
"""

from __future__ import annotations

import json
import os
import random

from bench.common import Requests, moto, print_table, write_json
from bench.front import AWS, call

LEVELS = ("minimal", "low", "medium", "high", "max")
CONCLUSIONS = 500
MESSAGES = 1_000
FACTS = (
    "lives in Lisbon",
    "works as a nurse",
    "has a sister called Ana",
    "likes green tea",
    "runs on Sundays",
    "is learning Portuguese",
    "has a dog called Miso",
    "prefers short answers",
    "plays the cello",
    "moved flats in spring",
    "bakes bread",
    "travels to Porto monthly",
)


def _request_tokens(body: dict) -> int:
    """Tokens of one chat-completions request: every message's text and tool calls, and the tool definitions."""
    from precis.tokens import count_text

    total = 3
    for message in body["messages"]:
        total += 4 + count_text(message.get("content") or "")
        if message.get("tool_calls"):
            total += count_text(json.dumps(message["tool_calls"]))
    return total + (count_text(json.dumps(body["tools"])) if body.get("tools") else 0)


def _load(rng: random.Random) -> None:
    """The workspace through the API: peer, sessions and their messages (posts of 100, as a client sends them: texts
    of 12 words drawn as bench/search.py draws them, sent by alice), conclusions, card."""
    from bench.search import PER_SESSION, WORDS

    _ok(call("POST", "/v3/workspaces", {"id": "bench"}))
    _ok(call("POST", "/v3/workspaces/bench/peers", {"id": "alice"}))
    for start in range(0, MESSAGES, PER_SESSION):  # sessions s0..s9
        session = f"s{start // PER_SESSION}"
        _ok(call("POST", "/v3/workspaces/bench/sessions", {"id": session}))
        texts = [" ".join(rng.choice(WORDS) for _ in range(12)) for _ in range(PER_SESSION)]
        for at in range(0, len(texts), 100):
            batch = [{"peer_id": "alice", "content": text} for text in texts[at : at + 100]]
            _ok(call("POST", f"/v3/workspaces/bench/sessions/{session}/messages", {"messages": batch}))
    items = [
        {
            "content": f"alice {rng.choice(FACTS)} (note {n})",
            "observer_id": "alice",
            "observed_id": "alice",
            "session_id": f"s{n % 10}",
        }
        for n in range(CONCLUSIONS)
    ]
    for start in range(0, len(items), 100):
        _ok(call("POST", "/v3/workspaces/bench/conclusions", {"conclusions": items[start : start + 100]}))
    _ok(
        call(
            "PUT",
            "/v3/workspaces/bench/peers/alice/card",
            {"peer_card": [f"ATTRIBUTE: alice {fact}" for fact in FACTS]},
        )
    )


def _ok(reply) -> object:
    assert reply.status in (200, 201), (reply.status, reply.body)
    return reply.body


def run() -> None:
    from local.models.llm_server import LLMServer
    from precis.settings import get_settings

    rows = []
    with LLMServer() as server, moto(stream=False):
        server.answer = lambda body: (
            {"tool_calls": [{"name": "search_conclusions", "arguments": {"query": "Lisbon"}}]}
            if body.get("tools")
            else "alice lives in Lisbon."
        )
        os.environ.update(OPENAI_BASE_URL=server.url, OPENAI_API_KEY="bench")
        get_settings.cache_clear()
        try:
            _load(random.Random(5))
            for level in LEVELS:
                server.requests.clear()
                body = {"query": "where does alice live?", "session_id": "s0", "reasoning_level": level}
                with Requests(AWS) as counted:
                    _ok(call("POST", "/v3/workspaces/bench/peers/alice/chat", body))
                sent = [r.body for r in server.requests]
                tokens = [_request_tokens(b) for b in sent]
                rows.append(
                    {
                        "level": level,
                        "model_requests": len(sent),
                        "tool_rounds": len(sent) - 1,
                        "first_prompt_tokens": tokens[0],
                        "input_tokens": sum(tokens),
                        "answer_max_tokens": sent[0]["max_tokens"],
                        "dynamodb_requests": len(counted.ops),
                        "dynamodb_bytes": counted.bytes,
                    }
                )
        finally:
            for var in ("OPENAI_BASE_URL", "OPENAI_API_KEY"):
                os.environ.pop(var, None)
            get_settings.cache_clear()
    print_table(
        f"Chat: LLM input tokens per answer by reasoning level ({CONCLUSIONS} conclusions, a card, a session "
        f"of {MESSAGES // 10} messages; the model uses every tool round it may)",
        [
            "level",
            "model requests",
            "tool rounds",
            "first prompt tokens",
            "input tokens",
            "answer max tokens",
            "DynamoDB requests",
            "DynamoDB bytes",
        ],
        [
            (
                r["level"],
                r["model_requests"],
                r["tool_rounds"],
                r["first_prompt_tokens"],
                r["input_tokens"],
                r["answer_max_tokens"],
                r["dynamodb_requests"],
                r["dynamodb_bytes"],
            )
            for r in rows
        ],
    )
    write_json("chat", rows)
