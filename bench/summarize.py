"""Summarization cost: LLM input tokens spent per 1,000 messages, incremental strategies vs from scratch.

Each strategy runs through the real summarizer (`summarize_session`) on in-process moto, one batch of 10
messages at a time, as the stream would drive it. The engine is the extractive one (offline), but every
request is priced as the prompt the `llm` engine would send (`build_messages`, counted with tiktoken). The
baseline, in the same run, prices re-summarizing the whole history (no previous summary) at every
summary the strategy wrote.
"""

from __future__ import annotations

import random

from bench.common import moto, print_table, write_json

MESSAGES = 1_000
BATCH = 10
WORDS = ("budget invoice Lisbon studio design river deadline client proposal meeting contract schedule "
         "review draft figures launch supplier quote travel team agreed decided asked confirmed moved "
         "next week because the and with for about after before").split()


def _content(rng: random.Random) -> str:
    sentences = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 18))).capitalize() + "."
                 for _ in range(rng.randint(1, 6))]
    return " ".join(sentences)


class _PricedEngine:
    """The extractive engine, with each request priced as the llm engine's prompt."""

    name = "priced"

    def __init__(self):
        from precis.summaries.engines.extractive import ExtractiveEngine

        self.inner, self.input_tokens = ExtractiveEngine(), {}

    def summarize(self, request):
        from precis.summaries.engines.llm import build_messages
        from precis.tokens import count_messages

        price = count_messages(build_messages(request))
        self.input_tokens[request.summary_type] = self.input_tokens.get(request.summary_type, 0) + price
        return self.inner.summarize(request)


def _run_strategy(strategy: str, settings: dict) -> dict:
    from precis.settings import get_settings
    from precis.summaries.engines import SummaryRequest
    from precis.summaries.engines.llm import build_messages
    from precis.store.db import Db
    from precis.store.messages import NewMessage, append_messages
    from precis.store.resources import get_or_create_session, get_or_create_workspace
    from precis.summaries.runner import summarize_session
    from precis.tokens import count_messages, count_text

    rng = random.Random(7)
    with moto(stream=False) as clients:
        db = Db(client=clients["dynamodb"], s3=clients["s3"], table="precis-local", bucket="precis-local")
        get_or_create_workspace(db, "bench", configuration={"summarizer": {"strategy": strategy, **settings}})
        get_or_create_session(db, "bench", "s")
        engine, history, written = _PricedEngine(), [], []
        for start in range(0, MESSAGES, BATCH):
            batch = []
            for i in range(start, start + BATCH):
                text = _content(rng)
                run_id = f"run-{i // 3}"  # agent runs of three messages: user turn, tool call, answer
                batch.append(NewMessage(text, "alice" if i % 3 == 0 else "agent", count_text(text), run_id=run_id))
            append_messages(db, "bench", "s", batch, inline_max_bytes=16_384)
            history += [("alice" if i % 3 == 0 else "agent", m.content) for i, m in enumerate(batch, start)]
            written += [w for w in summarize_session(db, get_settings(), "bench", "s",
                                                     engine_for=lambda _: engine).written if w.stored]
        message_tokens = sum(count_text(c) for _, c in history)
        from_scratch = sum(count_messages(build_messages(SummaryRequest(summary_type=w.summary_type, previous=None,
                                                                        messages=history[:w.covers_seq])))
                           for w in written)
    return {"strategy": strategy, "messages": MESSAGES, "message_tokens": message_tokens,
            "summaries": len(written), "incremental": sum(engine.input_tokens.values()),
            "by_type": engine.input_tokens, "from_scratch": from_scratch}


def run() -> None:
    results = [_run_strategy("cadence", {}),
               _run_strategy("rolling", {"token_threshold": 4000, "keep_recent_runs": 5})]
    rows = [(r["strategy"], r["messages"], r["message_tokens"], r["summaries"], r["incremental"],
             r["incremental"] / r["message_tokens"], r["from_scratch"], r["from_scratch"] / r["message_tokens"])
            for r in results]
    print_table("LLM input tokens per 1,000 messages (target: incremental <= 2x the messages' own tokens)",
                ["strategy", "messages", "message tokens", "summaries", "incremental input", "x messages",
                 "from-scratch input", "x messages"], rows)
    chains = [(r["strategy"], kind.removeprefix("honcho_chat_summary_"), tokens, tokens / r["message_tokens"])
              for r in results for kind, tokens in r["by_type"].items()]
    print_table("... per summary chain (cadence keeps two independent chains, short and long, by design)",
                ["strategy", "chain", "input tokens", "x messages"], chains)
    write_json("summarize", results)
