"""Summarization: what the extractive summaries hold against what they cover, and the LLM input tokens the
incremental strategies spend per 1,000 messages against summarizing from scratch.

The conversation (`conversation`): two peers over months, hundreds of turns a session a day, mostly talk around a
few running topics (work, a move, a trip, running, cooking), chit-chat, and facts stated once each (a name, a date
or a number: "My sister Priya lands in Nairobi on 14 March."), each fact kept with the word that proves it survived.

1. Compression: each strategy runs through the summarizer's handler on in-process moto: 10 messages posted at a
   time through the API, their records delivered by the table's stream as the SummarizeStream mapping delivers them
   (bench.front.Stream). The summarizer's engine is chosen as a deployment chooses it: with an OpenAI-compatible
   endpoint configured, the `llm` engine, whose requests go through the openai client to the local server
   (local/models/llm_server.py); its model (`_Model`) reads each request back from the prompt and answers with the
   extractive engine as it is (after) or, in the same run, the previous engine's selection copied here
   (`_BaselineExtractive`, before), so the summaries are the extractive engine's (what the summaries route shows is
   checked to be the model's answer). Ratio: a summary's tokens over the tokens it covers (previous summary + the
   step's messages). Facts kept: of the facts stated in a step's messages, the share its summary holds; facts in the
   newest summary: of every fact stated, the share the newest summary of the chain still holds (older facts
   surviving the folds).
2. Cost: every request the server received, counted with tiktoken (`precis.tokens.count_messages`); the baseline
   prices re-summarizing the whole history (no previous summary) at every summary stored (each chain's newest, read
   through the summaries route after each batch, with the message it ends at).
"""

from __future__ import annotations

import math
import os
import random
import re
import statistics
from collections import Counter
from datetime import UTC, datetime, timedelta

from bench.common import moto, print_table, write_json
from bench.front import Stream, call

MESSAGES = 1_000
BATCH = 10
PEERS = ("maya", "assistant")
TARGET = 0.25  # the extractive summary holds at most a quarter of what it covers

_TOPICS = {
    "work": [
        "The {thing} review for the {client} account moved to next week.",
        "I spent the morning fixing the {thing} report before the deadline.",
        "My manager wants the {thing} numbers for the quarterly meeting.",
        "The {client} team asked for another revision of the {thing} proposal.",
    ],
    "move": [
        "We are still packing boxes for the move to the new flat.",
        "The landlord finally fixed the heating in the new flat.",
        "I found a good removal company for the move, they were cheaper than expected.",
        "The new neighbourhood has a nice bakery and a quiet park.",
    ],
    "running": [
        "I ran along the river this morning, my legs are still sore.",
        "The training plan says an easy run today and intervals on Thursday.",
        "My knee hurt a bit after the long run, so I will rest tomorrow.",
        "I bought new running shoes because the old ones were worn out.",
    ],
    "cooking": [
        "I tried a new curry recipe with chickpeas and spinach last night.",
        "The bread came out too dense again, maybe the dough needs more time.",
        "We made fresh pasta at home and it was surprisingly easy.",
        "I want to learn how to cook a proper risotto this winter.",
    ],
    "trip": [
        "We are planning a trip to the mountains once the weather gets better.",
        "The train tickets for the trip are cheaper if we book early.",
        "I still need to renew my passport before we travel.",
        "The hotel near the old town had good reviews, so we booked it.",
    ],
}
_THINGS = ["budget", "design", "pricing", "onboarding", "analytics", "security", "hiring"]
_CLIENTS = ["Northwind", "Globex", "Initech", "Umbrella", "Hooli"]
_CHAT = [
    "Haha, that sounds great!",
    "Oh nice, I know what you mean.",
    "How was the rest of your day?",
    "Thanks, that really helps.",
    "Yeah, it has been a long week.",
    "I think so too, honestly.",
    "Good morning! Did you sleep well?",
    "That makes sense.",
    "Sure, let me think about it.",
    "Sounds like a plan.",
    "Oh no, I hope it gets better soon.",
    "Same here, nothing much new today.",
]
_ASSISTANT = [
    "That sounds like a good plan; breaking it into smaller steps usually helps.",
    "It might help to write down what is left and tackle the hardest part first.",
    "Good idea. Resting when something hurts is usually the right call.",
    "That is a nice way to spend the weekend.",
    "Would you like me to remind you about it later this week?",
    "Let me know how it goes, I am curious.",
]
_NAMES = [
    "Priya",
    "Tomas",
    "Ingrid",
    "Kwame",
    "Lucia",
    "Haruto",
    "Amara",
    "Mateo",
    "Freya",
    "Oskar",
    "Leila",
    "Dmitri",
    "Soren",
    "Nadia",
    "Rafael",
    "Yusuf",
]
_PLACES = [
    "Nairobi",
    "Lisbon",
    "Kyoto",
    "Reykjavik",
    "Montreal",
    "Tbilisi",
    "Cartagena",
    "Vilnius",
    "Hobart",
    "Marrakesh",
    "Bergen",
    "Valparaiso",
]
_MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]
_FACTS = [
    ("My sister {name} lands in {place} on {day} {month}.", "place"),
    ("{name} from the climbing gym is getting married in {place} in {month}.", "place"),
    ("The deposit for the new flat was {amount} euros, due on {day} {month}.", "amount"),
    ("My dentist appointment moved to {day} {month} at {hour} o'clock.", "hour_day"),
    ("I signed up for the {place} half marathon on {day} {month}.", "place"),
    ("My new colleague {name} starts on {day} {month}.", "name"),
    ("The car insurance renewal costs {amount} euros this year.", "amount"),
    ("My cousin {name} just moved to {place} for a research job.", "place"),
    ("Our anniversary dinner is booked at a place called {name}'s for {day} {month}.", "name"),
    ("I finally paid back the {amount} euros I owed {name}.", "amount"),
]


def conversation(rng: random.Random, turns: int, start: datetime = datetime(2025, 1, 6, 18, tzinfo=UTC)) -> list[dict]:
    """`turns` messages between maya and an assistant over months, a session of 20-40 turns every day or two.
    Each: peer, content, created_at, and `fact` (the word that proves a fact stated once survived) or None."""
    names, places = rng.sample(_NAMES, len(_NAMES)), rng.sample(_PLACES, len(_PLACES))
    out: list[dict] = []
    when, left_in_session = start, rng.randint(20, 40)
    for i in range(turns):
        peer = PEERS[i % 2]
        fact = None
        if peer == "assistant":
            parts = [rng.choice(_ASSISTANT)] if rng.random() < 0.6 else [rng.choice(_CHAT)]
            if rng.random() < 0.5:
                parts.append(_topic_sentence(rng))
        else:
            parts = [rng.choice(_CHAT)] if rng.random() < 0.5 else []
            parts.append(_topic_sentence(rng))
            if rng.random() < 0.15:
                template, proof = rng.choice(_FACTS)
                values = {
                    "name": names[len(out) % len(names)],
                    "place": places[len(out) % len(places)],
                    "day": rng.randint(1, 28),
                    "month": rng.choice(_MONTHS),
                    "hour": rng.randint(8, 17),
                    "amount": rng.randrange(120, 4_000, 10),
                }
                parts.insert(rng.randint(0, len(parts)), template.format(**values))
                fact = str(values[proof] if proof != "hour_day" else values["hour"])
            if rng.random() < 0.3:
                parts.append(_topic_sentence(rng))
        out.append({"peer": peer, "content": " ".join(parts), "created_at": when.isoformat(), "fact": fact})
        when += timedelta(minutes=rng.randint(1, 6))
        left_in_session -= 1
        if left_in_session == 0:
            when = (when + timedelta(days=rng.randint(1, 2))).replace(hour=rng.randint(7, 20))
            left_in_session = rng.randint(20, 40)
    return out


def _topic_sentence(rng: random.Random) -> str:
    return rng.choice(_TOPICS[rng.choice(list(_TOPICS))]).format(thing=rng.choice(_THINGS), client=rng.choice(_CLIENTS))


# --- the previous engine, as the baseline ------------------------------------------------------------------------


class _BaselineExtractive:
    """The extractive engine before this change (a copy of its selection): sentences ranked by the frequencies of
    their content words, up to the request's word limit, half of it kept for the previous summary."""

    name = "extractive-before"
    _UNSPACED = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
    _WORD = re.compile(rf"[{_UNSPACED}]|[^\W{_UNSPACED}]+")
    _SENTENCE_END = re.compile(r"(?<=[.!?…])\s+|(?<=[。！？])")

    def summarize(self, request):
        from precis.summaries.engines import SummaryResult
        from precis.tokens import count_text

        limit = request.word_limit
        while True:
            text = self._summary(request, limit)
            tokens = count_text(text)
            if tokens <= request.max_output_tokens or limit <= 1:
                break
            limit = max(1, min(limit - 1, limit * request.max_output_tokens // tokens))
        return SummaryResult(
            text=text, prompt="{}", model=self.name, input_tokens=0, output_tokens=tokens, latency_ms=0.0
        )

    def _sentences(self, lines):
        found = []
        for number, line in enumerate(lines):
            for part in line.splitlines():
                for text in self._SENTENCE_END.split(part):
                    text = text.strip()
                    terms = tuple(w.casefold() for w in self._WORD.findall(text))
                    if terms:
                        found.append((number, text, terms))
        return found

    def _summary(self, request, limit):
        previous_lines = (request.previous or "").splitlines()
        previous = (self._sentences(previous_lines), [""] * len(previous_lines))
        new = (self._sentences([c for _, c in request.messages]), [f"{p}: " for p, _ in request.messages])
        sentences = previous[0] + new[0]
        frequency = Counter(t for s in sentences for t in s[2])
        spread = Counter(t for s in sentences for t in set(s[2]))
        short = min(4, statistics.median_high(len(t) for s in sentences for t in s[2])) if sentences else 1
        crowd = len(sentences) // 2 if len(sentences) >= 4 else len(sentences)
        scored = {t: n for t, n in frequency.items() if (len(t) >= short or not t.isalpha()) and spread[t] <= crowd}
        scores = [sum(scored.get(t, 0) for t in set(s[2])) / math.sqrt(len(s[2])) for s in sentences]
        new_words = sum(len(s[2]) for s in new[0]) + sum(len(self._WORD.findall(p)) for p in new[1])
        previous_budget = max(1, limit // 2, limit - new_words) if previous[0] else 0
        kept_previous, used = self._pick(previous, scores[: len(previous[0])], previous_budget)
        kept_new, _ = self._pick(new, scores[len(previous[0]) :], limit - used)
        return "\n".join(self._lines(previous, kept_previous) + self._lines(new, kept_new))

    def _pick(self, source, scores, budget):
        sentences, prefixes = source
        kept, seen, lines, used = {}, set(), set(), 0
        for i in sorted(range(len(sentences)), key=lambda i: (-scores[i], i)):
            line, text, terms = sentences[i]
            cost = len(terms) + (0 if line in lines else len(self._WORD.findall(prefixes[line])))
            if " ".join(terms) in seen or used + cost > budget:
                continue
            kept[i], used = text, used + cost
            seen.add(" ".join(terms))
            lines.add(line)
        if not kept and sentences and budget > 0:
            best = min(range(len(sentences)), key=lambda i: (-scores[i], i))
            room = budget - len(self._WORD.findall(prefixes[sentences[best][0]]))
            if room > 0:
                ends = [m.end() for m in self._WORD.finditer(sentences[best][1])]
                text = sentences[best][1]
                kept[best] = text[: ends[room - 1]] + "…" if room < len(ends) else text
                used = budget
        return kept, used

    @staticmethod
    def _lines(source, kept):
        by_line: dict[int, list[str]] = {}
        for i in sorted(kept):
            by_line.setdefault(source[0][i][0], []).append(kept[i])
        return [source[1][line] + " ".join(texts) for line, texts in by_line.items()]


# --- the run -----------------------------------------------------------------------------------------------------


_BLOCK = re.compile(r"<(previous_summary|messages)>\n(.*?)\n</\1>", re.DOTALL)


class _Model:
    """The model behind the local OpenAI-compatible server: it reads each summary request back from the prompt the
    `llm` engine sent (the previous summary, the messages, the word limit, and max_tokens as the output cap) and answers
    with `inner`'s summary of it, recording what each step covered and wrote; `chains` names a prompt's chain by its
    style (a rolling summary is written in the long one's). The prompt holds no dates: each message's is the one the
    bench posted it with (`talk`, found where the chain's last step ended), as the extractive engine is given them."""

    def __init__(self, inner, chains: dict[str, str], talk: list[dict]):
        self.inner, self.chains, self.talk = inner, chains, talk
        self.steps: list[dict] = []
        self.cursor: dict[str, int] = {}  # chain -> the index in `talk` after its last step's messages

    def _dates(self, chain: str, messages: list[tuple[str, str]]) -> list[str]:
        wanted = [c for _, c in messages]
        start = self.cursor.get(chain, 0)
        while [m["content"] for m in self.talk[start : start + len(wanted)]] != wanted:
            start += 1
            assert start < len(self.talk), f"a {chain} step's messages are not the conversation's"
        self.cursor[chain] = start + len(wanted)
        return [m["created_at"] for m in self.talk[start : start + len(wanted)]]

    def __call__(self, body: dict) -> str:
        from precis.summaries.engines import SummaryRequest
        from precis.tokens import count_messages, count_text

        system, user = body["messages"][0]["content"], body["messages"][-1]["content"]
        blocks = {
            tag: [line.replace(f"<\\/{tag}>", f"</{tag}>") for line in text.splitlines()]
            for tag, text in _BLOCK.findall(user)
        }
        chain = self.chains["short" if "Write a short summary" in system else "long"]
        messages = [(peer, content) for peer, content in (line.split(": ", 1) for line in blocks["messages"])]
        request = SummaryRequest(
            summary_type=chain,
            previous="\n".join(blocks["previous_summary"]) if "previous_summary" in blocks else None,
            messages=messages,
            word_limit=int(re.search(r"Use at most (\d+) words\.", system).group(1)),  # type: ignore[union-attr]
            max_output_tokens=int(body["max_tokens"]),
            dates=self._dates(chain, messages),
        )
        text = self.inner.summarize(request).text
        self.steps.append(
            {
                "type": request.summary_type,
                "price": count_messages(body["messages"]),  # the prompt as the server received it
                "covered": count_text(request.previous or "") + sum(count_text(c) for _, c in request.messages),
                "tokens": count_text(text),
                "cap": request.max_output_tokens,
                "contents": [c for _, c in request.messages],
                "text": text,
            }
        )
        return text


def _run_strategy(strategy: str, settings: dict, inner) -> dict:
    from local.models.llm_server import LLMServer
    from precis.settings import get_settings
    from precis.summaries.engines import SummaryRequest
    from precis.summaries.engines.prompt import build_messages
    from precis.tokens import count_messages, count_text

    talk = conversation(random.Random(7), MESSAGES)
    facts = {m["content"]: m["fact"] for m in talk if m["fact"]}
    long = "rolling" if strategy == "rolling" else "honcho_chat_summary_long"
    model = _Model(inner, {"short": "honcho_chat_summary_short", "long": long}, talk)
    url = "/v3/workspaces/bench/sessions/s"
    # The summarizer's engine is chosen as a deployment chooses it: an OpenAI-compatible endpoint and key configured
    # (PRECIS_SUMMARY_ENGINE auto) make it the `llm` engine, here against the local server.
    with LLMServer() as server, moto():
        server.answer = model
        os.environ.update(OPENAI_BASE_URL=server.url, OPENAI_API_KEY="bench")
        get_settings.cache_clear()
        try:
            ok = (200, 201)
            assert (
                call(
                    "POST",
                    "/v3/workspaces",
                    {"id": "bench", "configuration": {"summarizer": {"strategy": strategy, **settings}}},
                ).status
                in ok
            )
            assert call("POST", "/v3/workspaces/bench/sessions", {"id": "s"}).status in ok
            stream, seq_of, newest = Stream(("SummarizeFunction",)), {}, {}
            written: list[tuple[str, int]] = []  # (chain, covers_seq) of each summary stored
            for start in range(0, MESSAGES, BATCH):
                body = {
                    "messages": [
                        {
                            "content": m["content"],
                            "peer_id": m["peer"],
                            "run_id": f"run-{i // 2}",
                            "created_at": m["created_at"],
                        }  # runs of two: a turn and its answer
                        for i, m in enumerate(talk[start : start + BATCH], start)
                    ]
                }
                reply = call("POST", f"{url}/messages", body)
                assert reply.status == 201, reply.body
                seq_of |= {m["id"]: m["seq"] for m in reply.body}
                steps = len(model.steps)
                stream.drain()  # the batch's records, as the stream delivers them to the summarizer's handler
                # What the run stored, through the front door: each chain's newest summary and the message it ends at.
                stored = _summaries(call("GET", f"{url}/summaries").body)
                fresh = {t: s for t, s in stored.items() if s != newest.get(t)}
                assert len(fresh) == len(model.steps) - steps, (fresh, model.steps[steps:])  # one step per summary
                for chain, summary in fresh.items():
                    assert summary["content"] == next(s for s in reversed(model.steps) if s["type"] == chain)["text"]
                    written.append((chain, seq_of[summary["message_id"]]))
                newest = stored
        finally:
            for var in ("OPENAI_BASE_URL", "OPENAI_API_KEY"):
                os.environ.pop(var, None)
            get_settings.cache_clear()
        history = [(m["peer"], m["content"]) for m in talk]
        message_tokens = sum(count_text(c) for _, c in history)
        from_scratch = sum(
            count_messages(build_messages(SummaryRequest(summary_type=chain, previous=None, messages=history[:covers])))
            for chain, covers in written
        )
    steps = [s for s in model.steps if s["covered"]]
    input_tokens: dict[str, int] = {}
    for step in model.steps:
        input_tokens[step["type"]] = input_tokens.get(step["type"], 0) + step["price"]
    stated = [(s, facts[c]) for s in steps for c in s["contents"] if c in facts]
    newest_step = {s["type"]: s for s in steps}  # the last summary of each chain
    seen = {t: [facts[c] for s in steps if s["type"] == t for c in s["contents"] if c in facts] for t in newest_step}
    return {
        "strategy": strategy,
        "engine": inner.name,
        "messages": MESSAGES,
        "message_tokens": message_tokens,
        "summaries": len(written),
        "model_requests": len(server.requests),
        "incremental": sum(input_tokens.values()),
        "by_type": input_tokens,
        "from_scratch": from_scratch,
        "covered": sum(s["covered"] for s in steps),
        "summary_tokens": sum(s["tokens"] for s in steps),
        "max_ratio": max(s["tokens"] / s["covered"] for s in steps),
        "over_target": sum(s["tokens"] > s["covered"] * TARGET for s in steps),
        "steps": len(steps),
        "mean_tokens": statistics.mean(s["tokens"] for s in steps),
        "facts_kept": sum(_holds(s["text"], proof) for s, proof in stated) / max(1, len(stated)),
        "facts_newest": sum(_holds(newest_step[t]["text"], p) for t in newest_step for p in seen[t])
        / max(1, sum(len(v) for v in seen.values())),
    }


def _summaries(answer: dict) -> dict[str, dict]:
    """The summaries route's answer as chain -> summary (its content and the message it ends at)."""
    return {s["summary_type"]: s for s in (answer["short_summary"], answer["long_summary"]) if s}


def _holds(text: str, proof: str) -> bool:
    return re.search(rf"\b{re.escape(proof)}\b", text) is not None


def run() -> None:
    from precis.summaries.engines.extractive import ExtractiveEngine

    strategies = [("cadence", {}), ("rolling", {"token_threshold": 4000, "keep_recent_runs": 5})]
    results = [
        _run_strategy(s, settings, engine)
        for s, settings in strategies
        for engine in (_BaselineExtractive(), ExtractiveEngine())
    ]
    rows = [
        (
            r["strategy"],
            "before" if r["engine"] != "extractive" else "after",
            r["steps"],
            r["covered"],
            r["summary_tokens"],
            r["summary_tokens"] / r["covered"],
            r["max_ratio"],
            r["over_target"],
            r["mean_tokens"],
            r["facts_kept"],
            r["facts_newest"],
        )
        for r in results
    ]
    print_table(
        f"Extractive summaries of a {MESSAGES}-turn conversation: summary tokens / covered tokens (previous "
        f"summary + the step's messages; target <= {TARGET:.2f})",
        [
            "strategy",
            "engine",
            "summaries",
            "covered",
            "summary tokens",
            "ratio",
            "max ratio",
            "over 25%",
            "mean tokens",
            "facts kept",
            "facts in newest",
        ],
        rows,
    )
    after = [r for r in results if r["engine"] == "extractive"]
    rows = [
        (
            r["strategy"],
            r["messages"],
            r["message_tokens"],
            r["summaries"],
            r["incremental"],
            r["incremental"] / r["message_tokens"],
            r["from_scratch"],
            r["from_scratch"] / r["message_tokens"],
        )
        for r in after
    ]
    print_table(
        "LLM input tokens per 1,000 messages (target: incremental <= 2x the messages' own tokens)",
        [
            "strategy",
            "messages",
            "message tokens",
            "summaries",
            "incremental input",
            "x messages",
            "from-scratch input",
            "x messages",
        ],
        rows,
    )
    chains = [
        (r["strategy"], kind.removeprefix("honcho_chat_summary_"), tokens, tokens / r["message_tokens"])
        for r in after
        for kind, tokens in r["by_type"].items()
    ]
    print_table(
        "... per summary chain (cadence keeps two independent chains, short and long, by design)",
        ["strategy", "chain", "input tokens", "x messages"],
        chains,
    )
    write_json("summarize", results)
