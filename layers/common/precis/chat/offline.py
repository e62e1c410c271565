"""The `offline` chat engine: no LLM, a deterministic answer from the first retrieval.

It lists the conclusions nearest the query and the card's entries (a workspace chat: the messages the search found),
so `peer.chat(...)` works on the local stack. With a `response_format` it fills the schema from the same lines:
strings get the answer, arrays of strings its lines, other types their schema's `default`, first `enum` or
`const`, or an empty value; an answer that still does not validate is a 422 naming the schema's demand.
"""

from __future__ import annotations

import json
from typing import Any

from precis.chat import ChatRequest, Gathered, Memory, message_line, schema_problem
from precis.errors import Invalid

MAX_LINES = 10


class OfflineChat:
    name = "offline"

    def answer(self, request: ChatRequest, memory: Memory, gathered: Gathered) -> str | None:
        lines = _lines(gathered)
        if request.response_format is not None:
            return _fill(request.response_format, lines)
        if not lines:
            return None
        if request.observer is None:
            whose = "the workspace's memory"
        elif request.observer.startswith("scope."):
            whose = f"scope {request.observer.removeprefix('scope.')}'s memory of {request.observed}"
        else:
            whose = f"{request.observer}'s memory of {request.observed}"
        return f"From {whose}:\n" + "\n".join(f"- {line}" for line in lines)


def _lines(gathered: Gathered) -> list[str]:
    found = [c["content"] for c in gathered.nearest] + list(gathered.card or ())
    if not found:  # a workspace chat: the messages its search found
        found = [message_line(m).removeprefix("- ") for m in gathered.messages]
    return list(dict.fromkeys(found))[:MAX_LINES]


def _fill(schema: dict[str, Any], lines: list[str]) -> str:
    text = "\n".join(lines)
    document = _instance(schema, text, lines, depth=0, root=schema)
    answer = json.dumps(document, ensure_ascii=False)
    problem = schema_problem(answer, schema)
    if problem is not None:
        raise Invalid(
            f"response_format: the offline engine cannot answer in this schema ({problem}); configure an "
            "LLM endpoint for arbitrary schemas"
        )
    return answer


def _instance(schema: Any, text: str, lines: list[str], depth: int, root: dict[str, Any]) -> Any:
    if not isinstance(schema, dict) or depth > 8:
        return None
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):  # pydantic's nested models: {"$ref": "#/$defs/Name"}
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part) if isinstance(target, dict) else None
        return _instance(target, text, lines, depth + 1, root)
    for key in ("const", "default"):
        if key in schema:
            return schema[key]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        if schema.get(key):
            return _instance(schema[key][0], text, lines, depth + 1, root)
    kind = schema.get("type")
    kind = kind[0] if isinstance(kind, list) and kind else kind
    if kind == "object" or "properties" in schema:
        properties = schema.get("properties") or {}
        return {name: _instance(sub, text, lines, depth + 1, root) for name, sub in properties.items()}
    if kind == "array":
        items = schema.get("items") or {}
        if isinstance(items, dict) and items.get("type") == "string":
            return list(lines)
        return []
    if kind == "string":
        return text
    if kind in ("integer", "number"):
        return schema.get("minimum", 0)
    if kind == "boolean":
        return bool(lines)
    return None
