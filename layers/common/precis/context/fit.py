"""A peer's working representation: which conclusions are chosen, how they are rendered, and what fits a budget.

Pure functions (docs/design.md, "What the SDK sees", for the selection and the rendering);
`precis.store.representation` does the reading and the selection (`shares`, `merge`). Selection is Honcho's:
`semantic` nearest the query, `frequent` most derived, the rest newest, merged without repeats and ordered oldest
first. Rendering is Honcho's markdown. Fitting is Precis's: the representation and the
card together take at most their budget, shortened by dropping whole conclusions (least relevant first: recent
before frequent before semantic, oldest first within each) and then card entries from the end.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from precis.store.representation import Chosen


@dataclass
class Fitted:
    conclusions: list[Chosen]
    card: list[str] | None
    text: str
    tokens: int  # of the rendered representation and the card together
    skipped: int  # conclusions selected but dropped for the budget
    card_skipped: int = 0
    dropped: list[Chosen] = field(default_factory=list)


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
