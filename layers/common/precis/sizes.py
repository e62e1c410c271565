"""What fits one Lambda answer: the arithmetic the pages (store) and the edges (api, mcp) share (docs/design.md,
"Limits").

Lambda refuses a function's answer past 6,291,556 bytes as its runtime serializes it: the API Gateway response
(`statusCode`, `headers`, `body`) as JSON, with the body a JSON string, so every `"` and `\\` of the API's JSON is
escaped again (python3.12 marshals without ASCII escapes: other characters cost their UTF-8 bytes). An answer whose
body would grow by more than a third that way goes out base64-encoded instead (`isBase64Encoded`, which API Gateway
decodes): a body of B bytes then costs at most 4/3 B, whatever it holds.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from precis.errors import TooLarge

LAMBDA_PAYLOAD_MAX = 6_291_556  # Lambda's "Response payload size exceeded maximum allowed payload size (6291556 bytes)"
ENVELOPE_BYTES = 4_096  # statusCode, headers and a page's own fields (total, page, size, pages, flags)
ANSWER_BUDGET = LAMBDA_PAYLOAD_MAX - ENVELOPE_BYTES  # what a page's items may cost in the payload
BASE64_ABOVE = 1_000_000  # a smaller answer always fits as text: it stays readable in logs and tests


def escaped_bytes(text: str) -> int:
    """What `text` (a JSON document without raw control characters, as the API writes them) costs as a JSON string
    inside the payload, quotes excluded: its UTF-8 bytes plus one for each `"` and `\\`."""
    return len(text.encode("utf-8", "surrogatepass")) + text.count('"') + text.count("\\")


def base64_bytes(size: int) -> int:
    return 4 * -(-size // 3)


def framed_bytes(raw: int, escaped: int) -> int:
    """What a body of `raw` UTF-8 bytes (`escaped` as a JSON string) costs framed as `frame` frames it."""
    return escaped if escaped <= BASE64_ABOVE else min(escaped, base64_bytes(raw))


def json_text(value: Any) -> str:
    """`value` as the API writes it: compact JSON, UTF-8 unescaped (a lone surrogate escaped, as `answers.to_json`)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(value, separators=(",", ":"), default=str)
    return text


def item_cost(value: Any) -> tuple[int, int]:
    """(UTF-8 bytes, bytes as a JSON string) of one item of an answer, with the comma that follows it."""
    text = json_text(value)
    return len(text.encode("utf-8")) + 1, escaped_bytes(text) + 1


def answer_bytes(value: Any) -> int:
    """What `value`, written as the API writes it, costs in Lambda's payload as `frame` frames it."""
    text = json_text(value)
    return framed_bytes(len(text.encode("utf-8")), escaped_bytes(text))


def fitting(items: Sequence[Any], budget: int = ANSWER_BUDGET) -> tuple[int, int]:
    """(how many of `items`, from the first, fit an answer of `budget` bytes; what all of them cost framed)."""
    raw = escaped = 0
    fit = None
    for count, item in enumerate(items):
        r, e = item_cost(item)
        raw, escaped = raw + r, escaped + e
        if fit is None and framed_bytes(raw, escaped) > budget:
            fit = count
    return (len(items) if fit is None else fit), framed_bytes(raw, escaped)


def fit_items(items: list[Any], name: str) -> list[Any]:
    """`items` unchanged when they fit one Lambda answer, else TooLarge (413) naming the `name` (`size`, `limit`,
    `top_k`) that would: an answer never silently holds fewer items than asked for (Honcho's SDKs ask for page + 1
    with the same size, so a shortened page would skip what it left out)."""
    fit, cost = fitting(items)
    if fit < len(items):
        raise TooLarge(
            f"{name}: these {len(items)} items come to {cost:,} bytes, past the {ANSWER_BUDGET:,} an answer holds; "
            f"ask for {name} at most {max(fit, 1)}"
        )
    return items


def fit_page(answer: dict[str, Any], *, name: str = "size", key: str = "items") -> dict[str, Any]:
    """A page whose `key` items fit one Lambda answer, unchanged; else TooLarge (413) naming the size that would."""
    fit_items(answer[key], name)
    return answer


def fit_answer(answer: Any, name: str, asked: int) -> Any:
    """`answer` unchanged when it fits one Lambda answer, else TooLarge (413) naming a smaller `name` (asked:
    `asked`) in proportion (the context's `tokens`, a representation's `max_conclusions`)."""
    cost = answer_bytes(answer)
    if cost > ANSWER_BUDGET:
        raise TooLarge(
            f"{name}: this answer comes to {cost:,} bytes, past the {ANSWER_BUDGET:,} an answer holds; "
            f"ask for {name} at most {max(1, asked * ANSWER_BUDGET // cost)}"
        )
    return answer


def frame(response: dict[str, Any]) -> dict[str, Any]:
    """A Lambda proxy response (payload format 2.0) with its text body base64-encoded when that makes it smaller and
    it is large (API Gateway hands the client the decoded bytes, the same JSON)."""
    body = response.get("body")
    # (a character of a JSON body costs at most 4 bytes as a string: JSON bodies hold no raw control characters)
    if response.get("isBase64Encoded") or not isinstance(body, str) or len(body) * 4 <= BASE64_ABOVE:
        return response
    data = body.encode("utf-8", "surrogatepass")
    escaped = escaped_bytes(body)
    if escaped <= BASE64_ABOVE or base64_bytes(len(data)) >= escaped:
        return response
    import base64

    return {**response, "body": base64.b64encode(data).decode("ascii"), "isBase64Encoded": True}


def payload_bytes(response: dict[str, Any]) -> int:
    """What Lambda counts of `response`: the runtime's JSON of it (python3.12: not ASCII-escaped)."""
    return len(json.dumps(response, ensure_ascii=False).encode("utf-8", "surrogatepass"))


def too_large(response: dict[str, Any]) -> int | None:
    """`response`'s payload size when it would pass Lambda's limit, else None (cheap for small answers)."""
    body = response.get("body")
    if isinstance(body, str) and len(body) * 6 + ENVELOPE_BYTES <= LAMBDA_PAYLOAD_MAX:
        return None  # a character costs at most 6 bytes in the payload (a control character's \\u escape)
    size = payload_bytes(response)
    return size if size > LAMBDA_PAYLOAD_MAX else None
