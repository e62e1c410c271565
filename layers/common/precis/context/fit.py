"""A peer's working representation: which conclusions are chosen, how they are rendered, and what fits a budget.

Pure functions (docs/design.md, "What the SDK sees", for the selection and the rendering);
`precis.store.representation` does the reading.
Selection is Honcho's: `semantic` nearest the query, `frequent` most derived, the rest newest, merged without
repeats and ordered oldest first. Rendering is Honcho's markdown. Fitting is Precis's: the representation and the
card together take at most their budget, shortened by dropping whole conclusions (least relevant first: recent
before frequent before semantic, oldest first within each) and then card entries from the end.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

SEMANTIC, FREQUENT, RECENT = 2, 1, 0  # relevance of a share: the least relevant is dropped first


@dataclass(frozen=True)
class Chosen:
    """A conclusion as the representation uses it."""

    id: str
    content: str
    level: str
    at: str  # ISO time of the newest source message (or of its creation)
    share: int = RECENT
    premises: tuple[str, ...] = ()  # the contents of a deductive conclusion's sources
    # Provenance, for a chat's evidence: not part of the rendering.
    created_at: str | None = None
    session_id: str | None = None
    source_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class Shares:
    semantic: int
    frequent: int
    recent: int


@dataclass
class Fitted:
    conclusions: list[Chosen]
    card: list[str] | None
    text: str
    tokens: int  # of the rendered representation and the card together
    skipped: int  # conclusions selected but dropped for the budget
    card_skipped: int = 0
    dropped: list[Chosen] = field(default_factory=list)


def shares(total: int, *, search: bool, search_top_k: int | None, include_most_frequent: bool) -> Shares:
    """Honcho's split of `total` (max_conclusions) between the semantic, most-frequent and recent shares."""
    semantic = min(max(1, search_top_k or total // 3), total) if search else 0
    if include_most_frequent:
        frequent = min(total // 3 if search else total // 2, total - semantic)
    else:
        frequent = 0
    return Shares(semantic, frequent, total - semantic - frequent)


def merge(split: Shares, semantic: Sequence[Chosen], frequent: Sequence[Chosen], recent: Sequence[Chosen]
          ) -> list[Chosen]:
    """The three shares (each in its own order of preference) without repeats, each filled up to its size from
    its own candidates, then ordered oldest first."""
    chosen: dict[str, Chosen] = {}
    for size, candidates, share in ((split.semantic, semantic, SEMANTIC), (split.frequent, frequent, FREQUENT),
                                    (split.recent, recent, RECENT)):
        taken = 0
        for conclusion in candidates:
            if taken >= size:
                break
            if conclusion.id in chosen:
                continue
            chosen[conclusion.id] = replace(conclusion, share=share)
            taken += 1
    return sorted(chosen.values(), key=lambda c: (c.at, c.id))


def stamp(at: str) -> str:
    """`YYYY-MM-DD HH:MM:SS` in UTC."""
    moment = datetime.fromisoformat(at.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def render(conclusions: Sequence[Chosen]) -> str:
    """Honcho's rendering: an Explicit and a Deductive section, each only when non-empty; "" for none."""
    ordered = sorted(conclusions, key=lambda c: (c.at, c.id))
    sections = []
    explicit = [f"[{stamp(c.at)}] {c.content}" for c in ordered if c.level == "explicit"]
    if explicit:
        sections.append("## Explicit Observations\n\n" + "\n".join(explicit))
    deductive = []
    for c in ordered:
        if c.level == "explicit":
            continue
        line = f"[{stamp(c.at)}] {c.content}"
        if c.premises:
            line += "\n   Premises:\n" + "\n".join(f"   - {p}" for p in c.premises)
        deductive.append(line)
    if deductive:
        sections.append("## Deductive Observations\n\n" + "\n".join(deductive))
    return "\n\n".join(sections)


def card_text(card: Sequence[str] | None) -> str:
    """The card as it is counted: one entry a line."""
    return "\n".join(card or ())


def fit(conclusions: Sequence[Chosen], card: list[str] | None, budget: int, count: Callable[[str], int]) -> Fitted:
    """The most of `conclusions` and then of `card` whose rendering and card take at most `budget` tokens."""
    kept = list(conclusions)
    drop_order = sorted(kept, key=lambda c: (c.share, c.at, c.id))
    card = list(card) if card is not None else None
    card_tokens = count(card_text(card)) if card else 0
    text = render(kept)
    tokens = count(text) + card_tokens
    dropped: list[Chosen] = []
    while tokens > budget and drop_order:
        gone = drop_order.pop(0)
        kept.remove(gone)
        dropped.append(gone)
        text = render(kept)
        tokens = count(text) + card_tokens
    card_skipped = 0
    while tokens > budget and card:
        card.pop()
        card_skipped += 1
        card_tokens = count(card_text(card)) if card else 0
        tokens = count(text) + card_tokens
    return Fitted(kept, card, text, tokens, len(dropped), card_skipped, dropped)
