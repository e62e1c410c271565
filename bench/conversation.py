"""Every model call a conversation costs, by role: a chat between a person and an assistant as a new user would try
it (240 messages in 12 bursts, 15 s apart, then the conversation ends), through every stream function and wake-up
as deployed (bench.front: the table's stream mappings, the DeriveWakeQueue's mapping on moto's clock), its model an
OpenAI-compatible endpoint (local/models/llm_server.py through the real openai client): derivation, cards, dreams
and summaries, each with the service's default settings.

Today's design and the one before issue 48 (BASELINE) run the same conversation in the same run: this module is
copied into a checkout of BASELINE and run there in a subprocess, so each design is driven and counted by the same
code and answered by its own bench's offline model (bench/derive.py's `_answer` reads its own prompts; summaries get
the local server's default answer). Tokens are counted with tiktoken as `precis.tokens` counts a prompt.
"""

from __future__ import annotations

import os
import random

from bench.common import moto, print_table, write_json
from bench.front import Queue, Stream, call

BASELINE = "f4cd7eb"
BURSTS, PER_BURST, PAUSE_S = 12, 20, 15.0
ROLES = ("derive", "card", "dream", "summarize")
TOPICS = ("Lisbon", "the studio", "my sister Ana", "the budget", "running", "the river walk", "the launch")


def _person(rng: random.Random) -> str:
    topic = rng.choice(TOPICS)
    fact = rng.choice(
        (
            f"I moved closer to {topic} last spring.",
            f"I have been thinking about {topic} all week.",
            f"I usually talk to my sister about {topic} on Sundays.",
            f"I prefer short answers when we discuss {topic}.",
        )
    )
    return f"{fact} Can you help me plan the next steps for {topic} before Friday?"


def _assistant(rng: random.Random) -> str:
    topic = rng.choice(TOPICS)
    steps = ", ".join(rng.sample(("list the costs", "set a date", "ask Ana", "book the room", "draft a note"), 3))
    return f"Happy to help with {topic}. A simple plan: {steps}. Shall I turn this into a checklist for the week?"


def _role(body: dict) -> str:
    name = ((body.get("response_format") or {}).get("json_schema") or {}).get("name", "")
    return {"explicit_conclusions": "derive", "peer_card": "card", "deductive_conclusions": "dream"}.get(
        name, "summarize"
    )


def _answer(body: dict) -> str:
    from bench import derive
    from local.models.llm_server import summary_text

    return derive._answer(body) if _role(body) in ("derive", "card") else summary_text(body)


def measure() -> dict:
    """The conversation through this checkout's service; requests, input and output tokens by role."""
    from local.models.llm_server import LLMServer
    from precis.settings import get_settings
    from precis.tokens import count_messages, count_text

    rng = random.Random(48)
    with LLMServer() as server, moto() as clients, Queue.clock() as later:
        server.answer = _answer
        queue = Queue("DeriveFunction", clients["sqs"])
        env = {"PRECIS_DERIVE_WAKE_QUEUE_URL": queue.url, "OPENAI_API_KEY": "bench", "OPENAI_BASE_URL": server.url}
        os.environ.update(env)
        get_settings.cache_clear()
        try:
            assert call("POST", "/v3/workspaces", {"id": "bench"}).status == 201
            assert call("POST", "/v3/workspaces/bench/sessions", {"id": "s"}).status == 201
            stream = Stream()
            history: list = []
            for _burst in range(BURSTS):
                batch = [
                    {"peer_id": "person", "content": _person(rng)}
                    if i % 2 == 0
                    else {"peer_id": "assistant", "content": _assistant(rng)}
                    for i in range(PER_BURST)
                ]
                for message in batch:  # a chat posts a turn at a time
                    reply = call("POST", "/v3/workspaces/bench/sessions/s/messages", {"messages": [message]})
                    assert reply.status == 201, reply.body
                    history += reply.body
                stream.drain()
                later(PAUSE_S)
                queue.deliver()
            for _ in range(3):  # the conversation is over: its quiet and cards wake-ups come
                later(900)
                queue.deliver()
                stream.drain()
        finally:
            for var in env:
                os.environ.pop(var, None)
            get_settings.cache_clear()
    sent = [r.body for r in server.requests if r.mode == "ok" and r.path.endswith("/chat/completions")]
    out: dict = {"messages": len(history), "message_tokens": sum(m["token_count"] for m in history)}
    for role in ROLES:
        mine = [b for b in sent if _role(b) == role]
        out[f"{role}_requests"] = len(mine)
        out[f"{role}_input"] = sum(count_messages(b["messages"]) for b in mine)
        out[f"{role}_output"] = sum(count_text(_answer(b)) for b in mine)
    return out


def _baseline() -> dict:
    """`measure` in a checkout of BASELINE (this module copied in), in a subprocess."""
    from bench.baseline import run_at

    script = "from bench.conversation import measure\nprint('@@' + json.dumps(measure()))\n"
    found = run_at(BASELINE, script, modules=("conversation.py",))
    assert isinstance(found, dict)
    return found


def run() -> None:
    from bench.pricing import PRICES, bill

    runs = {f"before ({BASELINE})": _baseline(), "today": measure()}
    rows = []
    for name, r in runs.items():
        tokens = r["message_tokens"]
        requests = sum(r[f"{role}_requests"] for role in ROLES)
        sent = sum(r[f"{role}_input"] for role in ROLES)
        output = sum(r[f"{role}_output"] for role in ROLES)
        bills = [
            bill(p, messages=r["messages"], requests=requests, input_tokens=sent, output_tokens=output) for p in PRICES
        ]
        rows.append(
            (
                name,
                r["messages"],
                tokens,
                *(f"{r[f'{role}_requests']} / {r[f'{role}_input'] / tokens:.2f}" for role in ROLES),
                requests * 1000 / r["messages"],
                sent / tokens,
                output / tokens,
                *(b.dollars for b in bills),
            )
        )
    print_table(
        f"Every model call of a {BURSTS * PER_BURST}-message chat ({BURSTS} bursts, {PAUSE_S:.0f} s apart), by role: "
        "requests / input tokens per message token",
        [
            "design",
            "messages",
            "message tokens",
            *(f"{role} req / in x" for role in ROLES),
            "req / 1k msg",
            "input x",
            "output x",
            *(f"$ {p.provider} / 1k msg" for p in PRICES),
        ],
        rows,
    )
    write_json("conversation", runs)
