"""The extractive engine compresses (docs/design.md, "Summaries"): at most a quarter of what a summary covers, the most
informative sentences (names, numbers, dates; nothing said twice), in time order, bounded when folded again and
again, and the same summary for the same input."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from hypothesis import example, given, settings
from hypothesis import strategies as st

from precis.summaries.engines import SummaryRequest
from precis.summaries.engines.extractive import ExtractiveEngine, count_words, covered_tokens
from precis.tokens import count_text

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Talk without names or numbers: chat and the running topics of a long conversation.
FILLER = [
    "Haha, that sounds great!",
    "Oh nice, I know what you mean.",
    "How was the rest of your day?",
    "Yeah, it has been a long week.",
    "I spent the morning fixing the report before the deadline.",
    "We are still packing boxes for the move to the new flat.",
    "I ran along the river this morning.",
    "The bread came out too dense again, maybe the dough needs more time.",
    "My knee hurt a bit after the long run, so I will rest tomorrow.",
    "We are planning a trip to the mountains once the weather gets better.",
    "The landlord finally fixed the heating in the new flat.",
    "I tried a new curry recipe last night.",
    "That is a nice way to spend the weekend.",
    "Let me know how it goes, I am curious.",
]
FACT = "My sister Priya lands in Nairobi on 14 March at 9 o'clock."
PEERS = ["maya", "assistant", "bob"]

filler_messages = st.lists(
    st.tuples(st.sampled_from(PEERS), st.lists(st.sampled_from(FILLER), min_size=1, max_size=3).map(" ".join)),
    min_size=1,
    max_size=60,
)
# Any text, with sentences, names and numbers in it.
prose = st.lists(st.one_of(st.sampled_from(FILLER + [FACT]), st.text(max_size=80)), max_size=4).map(" ".join)
any_messages = st.lists(st.tuples(st.sampled_from(PEERS), prose), max_size=60)


def request(messages, previous=None, *, max_output_tokens=512, word_limit=None, dates=None) -> SummaryRequest:
    return SummaryRequest(
        "honcho_chat_summary_short",
        previous,
        list(messages),
        word_limit=word_limit or max(1, max_output_tokens * 3 // 4),
        max_output_tokens=max_output_tokens,
        dates=dates,
    )


def summarize(*args, **kwargs) -> str:
    return ExtractiveEngine().summarize(request(*args, **kwargs)).text


def test_32_short_messages_fit_in_a_quarter():
    # Once, 32 messages of about 15 tokens came back as a 471-token summary.
    messages = [(PEERS[i % 2], f"{FILLER[i % len(FILLER)]} {FILLER[(i * 5 + 3) % len(FILLER)]}") for i in range(32)]
    covered = sum(count_text(c) for _, c in messages)
    text = summarize(messages)
    assert text and count_text(text) <= covered // 4


@settings(max_examples=120, deadline=None)
@given(
    st.one_of(filler_messages, any_messages), st.one_of(st.none(), prose), st.integers(64, 4096), st.integers(1, 3000)
)
def test_a_summary_holds_at_most_a_quarter_of_what_it_covers_and_its_caps(messages, previous, cap, words):
    asked = request(messages, previous, max_output_tokens=cap, word_limit=words)
    text = ExtractiveEngine().summarize(asked).text
    assert count_text(text) <= min(cap, covered_tokens(asked) // 4)
    assert count_words(text) <= words


@settings(max_examples=60, deadline=None)
@given(filler_messages.filter(lambda m: len(m) >= 12), st.integers(0, 60), st.sampled_from(PEERS))
def test_a_fact_said_once_survives_the_filler(messages, at, peer):
    # 12 messages or more: a quarter of them has room for the fact (~20 tokens with its speaker).
    messages.insert(min(at, len(messages)), (peer, FACT))
    text = summarize(messages)
    assert f"{peer}: {FACT}" in text.splitlines()


def test_a_fact_the_previous_summary_holds_is_not_said_again():
    previous = f"maya: {FACT}\nassistant: Let me know how it goes, I am curious."
    messages = [
        ("maya", "As I said, my sister Priya lands in Nairobi on 14 March at 9 o'clock!"),
        *[(PEERS[i % 2], FILLER[i % len(FILLER)]) for i in range(20)],
    ]
    text = summarize(messages, previous)
    assert text.count("Nairobi") == 1


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(PEERS), st.sampled_from(FILLER + [FACT])), max_size=60), st.integers(64, 1024)
)
@example(
    [("maya", FACT), *((PEERS[i % 2], FILLER[i]) for i in range(len(FILLER))), ("bob", FACT), ("maya", FACT)], 1024
)
def test_no_sentence_is_kept_twice_and_the_order_is_kept(messages, cap):
    # Messages repeat each other word for word; what is kept is each sentence once, on its message's line, in order.
    text = summarize(messages, max_output_tokens=cap)
    sentences = [s for line in text.splitlines() for s in re.split(r"(?<=[.!?])\s+", line.split(": ", 1)[1])]
    assert len(sentences) == len(set(sentences))
    at = 0
    for line in text.splitlines():
        peer, body = line.split(": ", 1)
        # the first message at or after the previous line's whose text holds this line's sentences, in order
        at = next(i for i in range(at, len(messages)) if messages[i][0] == peer and _in_order(body, messages[i][1]))
        at += 1


def _in_order(body: str, content: str) -> bool:
    position = 0
    for sentence in re.split(r"(?<=[.!?])\s+", body):
        found = content.find(sentence.removesuffix("…"), position)  # a sentence too long for any room: its start
        if found < 0:
            return False
        position = found + len(sentence)
    return True


def test_folded_again_and_again_a_summary_stays_bounded_and_keeps_its_salient_old_fact():
    # Cadence: each summary folds the previous one and 20 new messages, 40 times over. S <= (S + M) / 4 keeps
    # every summary under a third of the largest step; the fact said once, in the first step, is still there.
    summary, largest = None, 0
    for step in range(40):
        messages = [
            (PEERS[i % 2], f"{FILLER[(step * 7 + i) % len(FILLER)]} {FILLER[(step + i * 3) % len(FILLER)]}")
            for i in range(20)
        ]
        if step == 0:
            messages[5] = ("maya", FACT)
        largest = max(largest, sum(count_text(c) for _, c in messages))
        covered = count_text(summary or "") + sum(count_text(c) for _, c in messages)
        summary = summarize(messages, summary)
        assert count_text(summary) <= covered // 4
        assert count_text(summary) <= largest // 3
    assert f"maya: {FACT}" in summary.splitlines()


def test_lines_carry_their_day_once_and_keep_it_through_a_fold():
    chat = [(PEERS[i % 2], f"{FILLER[i]} {FILLER[-i - 1]}") for i in range(len(FILLER))]
    messages = [("maya", FACT), *chat[:7], ("maya", "Tomas starts at Globex on 3 June."), *chat[7:]]
    dates = ["2025-03-01T09:00:00+00:00"] * 8 + ["2025-03-04T10:00:00.123456+00:00"] * (len(messages) - 8)
    first = summarize(messages, dates=dates)
    kept = first.splitlines()
    assert kept[0] == f"2025-03-01 maya: {FACT}"
    assert "2025-03-04 maya: Tomas starts at Globex on 3 June." in kept
    assert sum(line.startswith("2025-03-04 ") for line in kept) == 1  # the day once, on its first kept line
    # Folded: a line whose day was on a dropped line above it gets the day back; a later day starts its lines.
    previous = f"2025-03-01 bob: Haha, that sounds great!\nmaya: {FACT}"
    later = [("maya", "Freya moved to Oslo in May."), *chat]
    text = summarize(later, previous, dates=["2025-03-09T08:00:00Z"] * len(later))
    kept = text.splitlines()
    assert kept[:2] == [f"2025-03-01 maya: {FACT}", "2025-03-09 maya: Freya moved to Oslo in May."]
    assert sum(line.startswith("2025-03-09 ") for line in kept) == 1


def test_the_same_input_gives_the_same_summary_whatever_the_hash_seed():
    # Set order changes with PYTHONHASHSEED; the chosen sentences (ties, float sums) must not.
    code = (
        "from tests.summaries.test_extractive_compression import summarize, FILLER, FACT, PEERS; "
        "m = [(PEERS[i % 3], FILLER[(i * 7) % len(FILLER)] + ' ' + FILLER[i % len(FILLER)]) for i in range(50)]; "
        "m[17] = ('bob', FACT); print(summarize(m, max_output_tokens=60))"
    )
    texts = {
        subprocess.run(
            [sys.executable, "-c", code],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": f"layers/common{os.pathsep}."},
        ).stdout
        for seed in ("1", "2", "3", "4")
    }
    assert len(texts) == 1 and FACT in texts.pop()
