"""The `extractive` engine: no LLM, a deterministic choice of the most informative sentences, to at most a quarter
of the tokens of what the summary covers.

A summary covers the previous summary and the new messages; it holds at most a quarter of their tokens (tiktoken
o200k, as the context counts them), and no more than the request's caps (`max_output_tokens`, `word_limit`).
Sentences are kept whole, in time order, on their message's line with its speaker ("alice: ..."), and the first
line of each day starts with the message's date when the request gives dates ("2025-06-01 alice: ...").

The choice is a greedy budgeted maximum coverage of weighted terms:
- salience: a term weighs its inverse sentence frequency times the square root of 1 + log of its count in the
  covered text (topics recur, but a fact is often said once), doubled for names and numbers (a word capitalised
  inside sentences, a word with a digit: who, when, how much); function words weigh nothing: short words and,
  in texts of 8 sentences or more, words in most sentences, whatever the language, and a short list of English
  function words and chat filler;
- novelty: a sentence gains only the weights of the terms no picked sentence holds yet (so a new message that
  repeats a kept fact of the previous summary gains nothing), and a sentence that adds nothing is never picked;
- cost: candidates rank by gain over the square root of their tokens.
The previous summary's sentences are offered half the budget first, among themselves, so its most salient facts
survive each fold however much new talk there is; then every sentence left competes for the rest. Folding a
summary into the next one at a quarter of (summary + new messages) keeps it under a third of the largest step.
"""

from __future__ import annotations

import heapq
import json
import math
import re
import statistics
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from precis.summaries.engines import SummaryRequest, SummaryResult
from precis.tokens import count_text, encoding

# Scripts written without spaces: each character counts as a word.
_UNSPACED = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_WORD = re.compile(rf"[{_UNSPACED}]|[^\W{_UNSPACED}]+")
_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+|(?<=[。！？])")
_ELLIPSIS = "…"
# A line of an extractive summary: an optional date, then the speaker ("2025-06-01 alice: ..." or "alice: ...").
_LINE = re.compile(r"^(?:(\d{4}-\d{2}-\d{2}) )?(?:(\S+?): )?(.*)$", re.DOTALL)
_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}")

SHARE = 4  # a summary holds at most 1/SHARE of the tokens it covers
# English function words and chat filler of four letters or more (shorter words never score): in English, the
# commonest language here, they would otherwise outweigh the facts; other languages rely on the rules below.
_FILLER = frozenset(
    """
about above after again against almost also although always another anyone anything around away back been
before being below between both cannot come could did didn does doesn doing done down during each either else
even ever every everyone everything from further getting give going gonna good great have having here hers
herself himself into itself just know like lets long look made make many maybe might mine more most much must
myself near need never nice okay once only other ours ourselves over own pretty quite rather really right said
same says should since some something soon still such sure take tell than thank thanks that their theirs them
themselves then there these they thing things think this those though through thus together very want wanted
wants was well went were what whatever when where whether which while whom whose will with within without
would wouldn yeah your yours yourself yourselves haha lol cool awesome sounds sound glad hope totally
definitely actually probably absolutely exactly anyway kind lot lots feel feels felt seems seem yes makes
sense helps
""".split()
)
NAME_BOOST = 2.0  # names and numbers: the facts a later question asks about
TF_EXP = 0.5  # how much recurrence counts: topics matter, but less than a fact stated once


def count_words(text: str) -> int:
    """Words as the word limit counts them: letter/digit runs, and each CJK character."""
    return len(_WORD.findall(text))


def token_budget(request: SummaryRequest) -> int:
    """The most tokens the summary of `request` may hold: a quarter of what it covers, within max_output_tokens."""
    return min(request.max_output_tokens, covered_tokens(request) // SHARE)


def covered_tokens(request: SummaryRequest) -> int:
    """Tokens of the text a summary of `request` covers: the previous summary and the new messages (with summaries
    of them instead, the history they stand for: `covers_tokens`)."""
    if request.covers_tokens is not None:
        return request.covers_tokens
    return input_tokens(request)


def input_tokens(request: SummaryRequest) -> int:
    """Tokens of the text the engine reads: the previous summary and the new messages or short summaries."""
    return (
        count_text(request.previous or "")
        + sum(count_text(content) for _, content in request.messages)
        + sum(count_text(text) for text in request.summaries)
    )


@dataclass(frozen=True, slots=True)
class _Line:
    day: str | None  # the calendar day (YYYY-MM-DD) of its message, when known
    prefix: str  # "peer: ", or "" for a previous summary's line without a speaker
    previous: bool  # a line of the previous summary


@dataclass(frozen=True, slots=True)
class _Sentence:
    line: int  # sentences of one line are joined again in the output
    text: str
    words: tuple[str, ...]  # as written, for names
    tokens: int


class ExtractiveEngine:
    """The most informative sentences of the previous summary and the new messages, in their original order."""

    name = "extractive"
    model = "extractive-v2"

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        started = time.perf_counter()
        lines, sentences = _parse(request)
        text = _Summary(lines, sentences, token_budget(request), request.word_limit).text()
        prompt: dict[str, Any] = {
            "engine": self.name,
            "previous": request.previous,
            "messages": request.messages,
            "word_limit": request.word_limit,
            "max_output_tokens": request.max_output_tokens,
        }
        if request.dates is not None:
            prompt["dates"] = list(request.dates)
        if request.summaries:
            prompt["summaries"] = list(request.summaries)
            prompt["covers_tokens"] = request.covers_tokens
        return SummaryResult(
            text=text,
            prompt=json.dumps(prompt, ensure_ascii=False),
            model=self.model,
            input_tokens=input_tokens(request),
            output_tokens=count_text(text),
            latency_ms=(time.perf_counter() - started) * 1000,
        )


def _parse(request: SummaryRequest) -> tuple[list[_Line], list[_Sentence]]:
    """Lines (the previous summary's, then one per message) and their sentences, in time order."""
    lines: list[_Line] = []
    sentences: list[_Sentence] = []

    def add(line: _Line, body: str) -> None:
        lines.append(line)
        for part in body.splitlines():
            for text in _SENTENCE_END.split(part):
                text = text.strip()
                words = tuple(_WORD.findall(text))
                if words:
                    sentences.append(_Sentence(len(lines) - 1, text, words, count_text(text)))

    def add_summary(text: str, previous: bool) -> None:
        day = None  # a summary dates only the first line of each day: later lines inherit it
        for raw in text.splitlines():
            line = _LINE.match(raw)
            assert line is not None  # every group of _LINE is optional and its last takes any text: it matches any
            dated, speaker, body = line.groups()
            day = dated or day
            add(_Line(day, f"{speaker}: " if speaker else "", previous), body)

    add_summary(request.previous or "", True)
    # Short summaries stand for the messages: new material, their lines kept as written (the same sentence in two
    # overlapping summaries counts once: picking one covers the other's terms).
    for text in request.summaries:
        add_summary(text, False)
    dates = request.dates or [None] * len(request.messages)
    for (peer, content), date in zip(request.messages, dates):
        add(_Line(date[:10] if date and _DAY.match(date) else None, f"{peer}: ", False), content)
    return lines, sentences


def _weights(sentences: Sequence[_Sentence]) -> list[dict[str, float]]:
    """Per sentence: the weight of each of its content terms (see the module docstring)."""
    terms = [[w.casefold() for w in s.words] for s in sentences]
    count = Counter(t for ts in terms for t in ts)
    spread = Counter(t for ts in terms for t in set(ts))
    # Function words are short and everywhere, in any language: words shorter than the text's typical word
    # (capped at 4 characters; each CJK character is a word of 1) and words in most sentences don't score.
    short = min(4, statistics.median_high(len(t) for ts in terms for t in ts)) if sentences else 1
    # In a short exchange a word in most sentences is its topic; in a longer text, a function word.
    crowd = len(sentences) // 2 if len(sentences) >= 8 else len(sentences)
    names = _names(sentences)
    n = len(sentences)
    weight: dict[str, float] = {}
    for term, k in count.items():
        digit = any(c.isdigit() for c in term)
        if (
            spread[term] > crowd
            or term in _FILLER
            or not (len(term) >= short or digit or term in names or not term.isalpha())
        ):
            continue
        boost = NAME_BOOST if digit or term in names else 1.0
        weight[term] = math.log(1 + n / spread[term]) * (1 + math.log(k)) ** TF_EXP * boost
    # Sorted: float sums must not depend on set order (PYTHONHASHSEED).
    return [{t: weight[t] for t in sorted(set(ts)) if t in weight} for ts in terms]


def _names(sentences: Sequence[_Sentence]) -> set[str]:
    """Words written capitalised inside sentences at least as often as not: names, places, months, in scripts
    with case (a sentence's first word says nothing either way)."""
    upper: Counter[str] = Counter()
    lower: Counter[str] = Counter()
    for s in sentences:
        for word in s.words[1:]:
            if len(word) < 2 or not word[0].isalpha() or word[0].upper() == word[0].lower():
                continue
            (upper if word[0].isupper() else lower)[word.casefold()] += 1
    return {t for t, k in upper.items() if k >= lower[t]}


class _Summary:
    """The greedy choice under the token and word budgets, and its text."""

    def __init__(self, lines: list[_Line], sentences: list[_Sentence], tokens: int, words: int):
        self.lines, self.sentences = lines, sentences
        self.budget, self.word_budget = tokens, words
        self.weights = _weights(sentences)
        self.picked: list[int] = []  # in the order chosen
        self.covered: set[str] = set()
        self.used = self.used_words = 0
        self.open_lines: set[int] = set()
        self.open_days: set[str] = set()
        self._line_tokens = [count_text(line.prefix) + 1 for line in lines]  # its prefix and the newline before it
        self._day_tokens = {line.day: count_text(f"{line.day} ") for line in lines if line.day}

    def text(self) -> str:
        if self.budget <= 0 or self.word_budget <= 0 or not self.sentences:
            return ""
        previous = [i for i, s in enumerate(self.sentences) if self.lines[s.line].previous]
        if previous:
            self._greedy(previous, max(1, self.budget // 2))
            if not self.picked:  # the previous summary always keeps something: the start of its best sentence
                self._truncated(previous, max(1, self.budget // 2))
        taken = set(self.picked)
        self._greedy([i for i in range(len(self.sentences)) if i not in taken], self.budget)
        if not self.picked:  # nothing fits whole: the start of the best sentence rather than nothing
            self._truncated(range(len(self.sentences)), self.budget)
        text = self._render()
        # Costs are estimated piece by piece (tokens can merge across pieces): drop the last picks until it fits.
        while self.picked and (count_text(text) > self.budget or count_words(text) > self.word_budget):
            self.picked.pop()
            text = self._render()
        return text

    def _gain(self, i: int) -> float:
        return sum(w for t, w in self.weights[i].items() if t not in self.covered)

    def _rank(self, i: int) -> float:
        return self._gain(i) / math.sqrt(max(1, self.sentences[i].tokens))

    def _cost(self, i: int) -> tuple[int, int]:
        """(tokens, words) that picking sentence `i` adds: the sentence, and its line's prefix and date if new."""
        sentence = self.sentences[i]
        line = self.lines[sentence.line]
        tokens, words = sentence.tokens, len(sentence.words)
        if sentence.line not in self.open_lines:
            tokens += self._line_tokens[sentence.line] - (0 if self.open_lines else 1)  # no newline before a first line
            words += count_words(line.prefix)
            if line.day and line.day not in self.open_days:
                tokens += self._day_tokens[line.day]
                words += count_words(line.day)
        return tokens, words

    def _greedy(self, candidates: Sequence[int], limit: int) -> None:
        """Lazy greedy: gains only fall as terms get covered, so a candidate whose fresh rank still tops the heap
        is the best one."""
        heap = [(-self._rank(i), i) for i in candidates]
        heapq.heapify(heap)
        while heap:
            _, i = heapq.heappop(heap)
            rank = self._rank(i)
            if rank <= 0:
                continue  # adds nothing not already said
            if heap and -rank > heap[0][0]:
                heapq.heappush(heap, (-rank, i))
                continue
            tokens, words = self._cost(i)
            if self.used + tokens > limit or self.used_words + words > self.word_budget:
                continue
            self._take(i, tokens, words)

    def _take(self, i: int, tokens: int, words: int) -> None:
        sentence = self.sentences[i]
        self.picked.append(i)
        self.covered.update(self.weights[i])
        self.used += tokens
        self.used_words += words
        self.open_lines.add(sentence.line)
        day = self.lines[sentence.line].day
        if day:
            self.open_days.add(day)

    def _truncated(self, candidates: Sequence[int], limit: int) -> None:
        """The start of the best sentence that says anything, cut to what is left of `limit`."""
        ranked = sorted((i for i in candidates if self._gain(i) > 0), key=lambda i: (-self._rank(i), i))
        if not ranked:
            return
        i = ranked[0]
        sentence = self.sentences[i]
        overhead_tokens, overhead_words = self._cost(i)
        overhead_tokens -= sentence.tokens
        overhead_words -= len(sentence.words)
        room, room_words = limit - self.used - overhead_tokens, self.word_budget - self.used_words - overhead_words
        text = _cut(sentence.text, room - 1, room_words)  # a token for the ellipsis
        if text:
            self.sentences[i] = _Sentence(sentence.line, text, tuple(_WORD.findall(text)), count_text(text))
            self._take(i, overhead_tokens + self.sentences[i].tokens, overhead_words + count_words(text))

    def _render(self) -> str:
        """The picked sentences joined per line, lines in time order, each with its prefix and, first of its day,
        the date."""
        by_line: dict[int, list[str]] = {}
        for i in sorted(self.picked):  # sentences are numbered in time order
            by_line.setdefault(self.sentences[i].line, []).append(self.sentences[i].text)
        out, shown_day = [], None
        for number, texts in by_line.items():
            line = self.lines[number]
            date = ""
            if line.day and line.day != shown_day:
                date, shown_day = f"{line.day} ", line.day
            out.append(date + line.prefix + " ".join(texts))
        return "\n".join(out)


def _cut(text: str, tokens: int, words: int) -> str:
    """The start of `text` in at most `tokens` tokens and `words` words, ending in an ellipsis ("" if none fit)."""
    if tokens <= 0 or words <= 0:
        return ""
    ends = [match.end() for match in _WORD.finditer(text)][:words]
    while ends and count_text(text[: ends[-1]]) > tokens:
        ends.pop()
    if ends:
        return text[: ends[-1]] + (_ELLIPSIS if ends[-1] < len(text.rstrip()) else "")
    # Not even its first word fits (a pasted blob): its first tokens.
    enc = encoding()
    ids = enc.encode_ordinary(text)[:tokens]
    while ids:
        cut = enc.decode(ids).rstrip("\ufffd").rstrip()
        if cut and count_text(cut) <= tokens and count_words(cut) <= words:
            return cut + _ELLIPSIS
        ids = ids[:-1]
    return ""
