"""A request's JSON read once, at its edge (the API's resolver, the MCP endpoint, a form's JSON field): whether it is
JSON, how deeply it nests, and whether every key and string is Unicode, so that nothing past the edge meets text it
cannot store or answer with. Pure."""

from __future__ import annotations

import json
import math
import sys
from typing import Any

Loc = tuple[str | int, ...]
MAX_DEPTH = 32  # the deepest legitimate body (a message's metadata, nested filters) is well under this
MAX_DIGITS = sys.get_int_max_str_digits()  # 4,300 unless the interpreter was told otherwise
# JSON has no NaN or Infinity (Python reads them, and 1e400 as infinity): stored, they would come back as tokens a
# client's JSON parser refuses.
_NOT_FINITE = "not a finite number (JSON has no NaN or Infinity, and a double ends near 1.8e308)"
_UNPAIRED = "(a \\ud800-\\udfff escape without its pair); send text that encodes as UTF-8"


class Unreadable(ValueError):
    """Why a JSON text cannot be taken: where (its path from the root, as pydantic's `loc`), what is wrong, and
    pydantic's type for it; `msg` says both."""

    def __init__(self, loc: Loc, problem: str, kind: str):
        self.loc, self.problem, self.kind = loc, problem, kind
        self.msg = f"{where(loc)}: {problem}" if loc else problem
        super().__init__(self.msg)


def where(loc: Loc) -> str:
    """A path as a person reads it: `body.messages[0].metadata.note`."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _lone_surrogate(text: str) -> int | None:
    """The index of `text`'s first lone surrogate (a `\\ud800` escape with no partner), which has no UTF-8 form and
    so can be neither stored nor sent back; None when it has none."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def check(value: Any, *, max_depth: int, root: Loc = ("body",)) -> None:
    """Unreadable when `value` (parsed JSON) nests deeper than `max_depth`, holds a key or string that is not Unicode,
    or a number that is not finite; one walk, without recursion (a body's depth is the client's to choose)."""
    deepest, stack = 0, [(value, root, 1)]
    while stack:
        node, loc, depth = stack.pop()
        if isinstance(node, str):
            at = _lone_surrogate(node)
            if at is not None:
                raise Unreadable(
                    loc, f"not valid Unicode: a lone surrogate at index {at} {_UNPAIRED}", "string_unicode"
                )
            continue
        if isinstance(node, float) and not math.isfinite(node):
            raise Unreadable(loc, _NOT_FINITE, "finite_number")
        if not isinstance(node, (dict, list)):
            continue
        if depth > deepest:
            deepest = depth
            if deepest > max_depth:
                raise _too_deep(root, max_depth)
        if isinstance(node, list):
            stack.extend((child, (*loc, i), depth + 1) for i, child in enumerate(node))
            continue
        for key in node:
            at = _lone_surrogate(key)
            if at is not None:  # the key itself cannot be named: its object is
                raise _not_unicode(loc, "a key is not valid Unicode", at)
        stack.extend((child, (*loc, key), depth + 1) for key, child in node.items())


def _not_unicode(loc: Loc, what: str, at: int) -> Unreadable:
    return Unreadable(loc, f"{what}: a lone surrogate at index {at} {_UNPAIRED}", "string_unicode")


def _too_deep(root: Loc, max_depth: int) -> Unreadable:
    return Unreadable(root, f"JSON nests deeper than the limit of {max_depth} levels", "json_too_deep")


def parse(text: str | bytes, *, max_depth: int, root: Loc = ("body",)) -> Any:
    """`text` as JSON, not yet checked; json.JSONDecodeError when it is not JSON, Unreadable for the rest of what the
    parser refuses (nesting that overflows its stack, an integer past Python's 4,300 digits)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise _too_deep(root, max_depth) from None
    except json.JSONDecodeError:
        raise
    except UnicodeDecodeError as exc:
        raise Unreadable(root, f"not UTF-8 (byte {exc.start})", "json_invalid") from None
    except ValueError:  # Python reads no integer past 4,300 digits (CVE-2020-10735), and says so as a ValueError
        raise Unreadable(
            root, f"a number has more than the {MAX_DIGITS:,} digits that can be read", "int_parsing_size"
        ) from None


def read(text: str | bytes, *, max_depth: int, root: Loc = ("body",)) -> Any:
    """`text` as JSON, parsed and checked (`parse`, `check`)."""
    value = parse(text, max_depth=max_depth, root=root)
    check(value, max_depth=max_depth, root=root)
    return value
