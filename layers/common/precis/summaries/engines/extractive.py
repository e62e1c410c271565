"""The `extractive` engine: no LLM, a deterministic choice of salient sentences under the word limit.

Sentences score by how often their words occur in the previous summary and the new messages together;
short words and words found in most sentences count as function words whatever the language, so no stopword
list is needed.
The previous summary always keeps at least one sentence, so summaries stay incremental.
"""

from __future__ import annotations

import json
import math
import re
import statistics
import time
from collections import Counter
from dataclasses import dataclass

from precis.summaries.engines import SummaryRequest, SummaryResult
from precis.tokens import count_text

# Scripts written without spaces: each character counts as a word.
_UNSPACED = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_WORD = re.compile(rf"[{_UNSPACED}]|[^\W{_UNSPACED}]+")
_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+|(?<=[。！？])")
_ELLIPSIS = "…"


def count_words(text: str) -> int:
    """Words as the word limit counts them: letter/digit runs, and each CJK character."""
    return len(_WORD.findall(text))


@dataclass(frozen=True, slots=True)
class _Sentence:
    line: int  # sentences of one line are joined again in the output
    text: str
    terms: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class _Source:
    sentences: list[_Sentence]
    prefixes: list[str]  # per line: "peer: " for messages, "" for the previous summary's lines


class ExtractiveEngine:
    """Salient sentences of the previous summary and the new messages, in their original order."""

    name = "extractive"
    model = "extractive-v1"

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        started = time.perf_counter()
        summary_lines = (request.previous or "").splitlines()
        previous = _Source(_sentences(summary_lines), [""] * len(summary_lines))
        new = _Source(_sentences([content for _, content in request.messages]),
                      [f"{peer}: " for peer, _ in request.messages])
        limit = request.word_limit
        while True:
            text = _summary(previous, new, limit)
            tokens = count_text(text)
            # The word limit is a proxy for tokens; shrink it when a script needs more tokens per word.
            if tokens <= request.max_output_tokens or limit <= 1:
                break
            limit = max(1, min(limit - 1, limit * request.max_output_tokens // tokens))
        return SummaryResult(
            text=text,
            prompt=json.dumps({"engine": self.name, "previous": request.previous, "messages": request.messages,
                               "word_limit": request.word_limit}, ensure_ascii=False),
            model=self.model,
            input_tokens=count_text(request.previous or "") + sum(count_text(c) for _, c in request.messages),
            output_tokens=tokens,
            latency_ms=(time.perf_counter() - started) * 1000,
        )


def _sentences(lines: list[str]) -> list[_Sentence]:
    found: list[_Sentence] = []
    for number, line in enumerate(lines):
        for part in line.splitlines():
            for text in _SENTENCE_END.split(part):
                text = text.strip()
                terms = tuple(word.casefold() for word in _WORD.findall(text))
                if terms:
                    found.append(_Sentence(number, text, terms))
    return found


def _scores(sentences: list[_Sentence]) -> list[float]:
    """Per sentence: the frequencies of its content words, over the square root of its length."""
    frequency = Counter(term for s in sentences for term in s.terms)
    spread = Counter(term for s in sentences for term in set(s.terms))
    # Function words are short and everywhere, in any language: words shorter than the text's typical word
    # (capped at 4 characters; each CJK character is a word of 1) and words in most sentences don't score.
    short = min(4, statistics.median_high(len(t) for s in sentences for t in s.terms)) if sentences else 1
    crowd = len(sentences) // 2 if len(sentences) >= 4 else len(sentences)
    scored = {t: n for t, n in frequency.items()
              if (len(t) >= short or not t.isalpha()) and spread[t] <= crowd}
    return [sum(scored.get(t, 0) for t in set(s.terms)) / math.sqrt(len(s.terms)) for s in sentences]


def _summary(previous: _Source, new: _Source, limit: int) -> str:
    scores = _scores(previous.sentences + new.sentences)
    previous_scores, new_scores = scores[: len(previous.sentences)], scores[len(previous.sentences):]
    new_words = sum(len(s.terms) for s in new.sentences) + sum(count_words(p) for p in new.prefixes)
    # The previous summary keeps at least half the budget when there is more new text than room.
    previous_budget = max(1, limit // 2, limit - new_words) if previous.sentences else 0
    kept_previous, used = _pick(previous, previous_scores, previous_budget)
    kept_new, _ = _pick(new, new_scores, limit - used)
    return "\n".join(_lines(previous, kept_previous) + _lines(new, kept_new))


def _pick(source: _Source, scores: list[float], budget: int) -> tuple[dict[int, str], int]:
    """The best sentences (index: text) that fit `budget` words, counting each line's prefix once."""
    sentences, prefixes = source.sentences, source.prefixes
    kept: dict[int, str] = {}
    seen: set[str] = set()
    lines: set[int] = set()
    used = 0
    for i in sorted(range(len(sentences)), key=lambda i: (-scores[i], i)):
        sentence = sentences[i]
        key = " ".join(sentence.terms)
        cost = len(sentence.terms) + (0 if sentence.line in lines else count_words(prefixes[sentence.line]))
        if key in seen or used + cost > budget:
            continue
        kept[i], used = sentence.text, used + cost
        seen.add(key)
        lines.add(sentence.line)
    if not kept and sentences and budget > 0:
        # Nothing fits whole: keep the start of the best sentence rather than nothing.
        best = min(range(len(sentences)), key=lambda i: (-scores[i], i))
        room = budget - count_words(prefixes[sentences[best].line])
        if room > 0:
            kept[best] = _truncate(sentences[best].text, room)
            used = budget
    return kept, used


def _truncate(text: str, words: int) -> str:
    ends = [match.end() for match in _WORD.finditer(text)]
    return text[: ends[words - 1]] + _ELLIPSIS if words < len(ends) else text


def _lines(source: _Source, kept: dict[int, str]) -> list[str]:
    """The kept sentences joined per source line, in the original order, each line with its prefix."""
    by_line: dict[int, list[str]] = {}
    for i in sorted(kept):  # sentences are numbered in line order
        by_line.setdefault(source.sentences[i].line, []).append(kept[i])
    return [source.prefixes[line] + " ".join(texts) for line, texts in by_line.items()]
