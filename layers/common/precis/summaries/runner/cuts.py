"""Cutting a text to a number of tokens: a summary to its cap, and a message too long for any request."""

from __future__ import annotations

from precis.tokens import count_text, encoding


def cut_to_tokens(text: str, tokens: int) -> str:
    """`text` cut to at most `tokens` tokens (at least 1), ending in an ellipsis that marks the cut."""
    enc = encoding()
    ids = enc.encode_ordinary(text)
    if len(ids) <= tokens:
        return text
    keep = max(0, tokens - 1)
    while True:
        # A cut can fall inside a multi-byte character: drop the replacement characters decoding leaves there.
        cut = enc.decode(ids[:keep]).rstrip("\ufffd").rstrip() + "…"
        if count_text(cut) <= tokens or keep == 0:
            return cut
        keep -= 1  # tokens can merge differently once decoded and encoded again


def cut_middle(text: str, tokens: int) -> str:
    """`text` in about `tokens` tokens: its start and its end around a marker saying how much was left out.

    A message too long for any request keeps its head (what it is: the question, the command, the file) and its
    tail (how it ended: the answer, the error); its middle is what a summary would drop first. Splitting it over
    several requests instead would cost an unbounded number of calls for one paste.
    """
    enc = encoding()
    ids = enc.encode_ordinary(text)
    if len(ids) <= tokens:
        return text
    marker = f" [… {len(ids)} tokens omitted …] "
    keep = max(0, tokens - count_text(marker))
    head, tail = keep - keep // 3, keep // 3
    marker = f" [… {len(ids) - keep} tokens omitted …] "
    # A cut can fall inside a multi-byte character: drop the replacement characters decoding leaves there.
    start = enc.decode(ids[:head]).rstrip("\ufffd") if head else ""
    end = enc.decode(ids[len(ids) - tail :]).lstrip("\ufffd") if tail else ""
    return (start + marker + end).strip()
