"""Peer cards: what a derived card may hold, and what a client may put."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from precis.errors import Invalid

PREFIXES = ("IDENTITY: ", "ATTRIBUTE: ", "RELATIONSHIP: ", "INSTRUCTION: ")
MAX_ENTRIES = 40
MAX_ENTRY_CHARS = 200
_PREFIX = re.compile(r"^\s*(IDENTITY|ATTRIBUTE|RELATIONSHIP|INSTRUCTION)\s*:\s*", re.I)


def norm(entry: str) -> str:
    """The dedupe key of an entry: case- and space-insensitive."""
    return " ".join(entry.split()).casefold()


def validate_entries(entries: Iterable[Any]) -> list[str]:
    """The valid entries of a derived card, in order: a known prefix (written `KIND: `), one line of at most 200
    characters with a non-empty body, no duplicates, at most 40. Invalid entries are dropped."""
    valid: list[str] = []
    seen: set[str] = set()
    for entry in entries:
        if not isinstance(entry, str) or not (match := _PREFIX.match(entry)):
            continue
        body = " ".join(entry[match.end() :].split())
        text = f"{match.group(1).upper()}: {body}"
        if not body or len(text) > MAX_ENTRY_CHARS or norm(text) in seen:
            continue
        seen.add(norm(text))
        valid.append(text)
        if len(valid) == MAX_ENTRIES:
            break
    return valid


def check_client_card(value: Any) -> list[str]:
    """A card as a client PUTs it, unchanged (clients need no prefixes); raises Invalid naming what is wrong."""
    if not isinstance(value, list):
        raise Invalid(f"peer_card: must be a list of strings, got {_kind(value)}")
    if len(value) > MAX_ENTRIES:
        raise Invalid(f"peer_card: at most {MAX_ENTRIES} entries, got {len(value)}")
    for i, entry in enumerate(value):
        if not isinstance(entry, str):
            raise Invalid(f"peer_card[{i}]: must be a string, got {_kind(entry)}")
        if not entry.strip() or len(entry) > MAX_ENTRY_CHARS:
            raise Invalid(f"peer_card[{i}]: must be 1-{MAX_ENTRY_CHARS} characters and not blank, got {len(entry)}")
    return list(value)


def _kind(value: Any) -> str:
    return {
        type(None): "null",
        bool: "boolean",
        int: "number",
        float: "number",
        str: "string",
        dict: "object",
        list: "array",
    }.get(type(value), type(value).__name__)
