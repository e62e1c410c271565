"""A long text as consecutive pieces of at most `limit` characters, cut where a reader would (pure, no I/O).

Cuts fall between paragraphs; a paragraph longer than the limit is cut between sentences, a sentence between lines,
a line between words, and only a word longer than the limit is cut anywhere. Pieces are packed greedily (as many
whole units as fit), keep the text's own order, and start and end with a non-space: the whitespace a cut falls on is
all that is lost.
"""

from __future__ import annotations

import re

_CLOSERS = "\"'”’)]»」』"
# Each level's gaps, tried in order: the whitespace between two units (zero-width after an ideographic full stop).
LEVELS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("paragraph", re.compile(r"\n[^\S\n]*\n\s*")),  # a blank line (with what whitespace surrounds it)
    ("sentence", re.compile(rf"(?:(?<=[.!?…])|(?<=[.!?…][{_CLOSERS}]))\s+|(?<=[。！？])\s*")),
    ("line", re.compile(r"\s*\n\s*")),
    ("word", re.compile(r"\s+")),
)


def split_text(text: str, limit: int) -> list[str]:
    """`text` as pieces of 1 to `limit` characters, in order; an empty or all-whitespace text has none."""
    if limit < 1:
        raise ValueError(f"limit: at least 1, got {limit}")
    return [text[start:end] for start, end in _pieces(text, 0, len(text), limit, 0)]


def _trim(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def _pieces(text: str, start: int, end: int, limit: int, level: int) -> list[tuple[int, int]]:
    start, end = _trim(text, start, end)
    if start == end:
        return []
    if end - start <= limit:
        return [(start, end)]
    if level == len(LEVELS):  # a single word longer than the limit (the word level left no whitespace in it)
        return [(at, min(at + limit, end)) for at in range(start, end, limit)]
    units, at = [], start
    for gap in LEVELS[level][1].finditer(text, start, end):
        units.append((at, gap.start()))
        at = gap.end()
    units.append((at, end))

    pieces: list[tuple[int, int]] = []
    current: tuple[int, int] | None = None
    for unit in units:
        unit = _trim(text, *unit)
        if unit[0] == unit[1]:
            continue
        if unit[1] - unit[0] > limit:  # cut at the next level down; its pieces do not join neighbouring units
            if current:
                pieces.append(current)
            current = None
            pieces += _pieces(text, *unit, limit, level + 1)
        elif current and unit[1] - current[0] <= limit:
            current = (current[0], unit[1])
        else:
            if current:
                pieces.append(current)
            current = unit
    if current:
        pieces.append(current)
    return pieces
