"""Hostile JSON for the property tests over the API's routes (tests/api/test_any_json.py) and the MCP tools' arguments
(tests/mcp/test_any_arguments.py): what is drawn, a workspace to send it at, and what a refusal must leave as it was."""

from __future__ import annotations

import itertools
import json
import math
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from precis.auth import mint_key
from precis.settings import get_settings
from tests.handlers import call

_WORKSPACES = itertools.count()
# The property tests' settings: each example seeds its own workspace through the handlers on the one function-scoped
# `aws` (so Hypothesis's fixture warning does not apply), and is slower than Hypothesis expects.
SEEDED = settings(
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
SECRET = "hostile-json-test-secret-0123456789abcdef"

# Tokens json.dumps cannot write (or writes as Python reads them only): put in a body as a placeholder string, then
# swapped into its text. Past Python's 4,300 digits; past a float's range (inf when read); past DynamoDB's 38 digits.
RAW_NUMBERS = ["1" * 5000, "-" + "9" * 4301, "1e400", "-1e400", "1e-400", "9" * 39, "1" + "0" * 125, "-0", "NaN"]
_RAW = "\x00raw{}\x00"

SURROGATES = st.characters(categories=["Cs"])  # each one a lone surrogate (json.dumps writes it as \udxxx)
ODD_TEXT = [
    "",
    "\x00",
    "\x00\x01\x1f\x7f",
    "\ufffe\uffff\U0010ffff\U0001fffe",  # non-characters
    "\u202eevil\u202c\u200f",  # RTL override
    "e\u0301\u0301\u0301",  # combining marks
    "\U0001f600\U00020000",  # astral
    "\ufeff",
    " ",
    "id",
    "metadata",
    "__proto__",
    "a.b",
    "#",
    "$",
    "x" * 1000,
]
HOSTILE_TEXT = st.one_of(
    st.sampled_from(ODD_TEXT),
    st.text(max_size=12),
    st.text(st.one_of(SURROGATES, st.characters()), min_size=1, max_size=12),
    SURROGATES,
)
HOSTILE_NUMBER = st.one_of(
    st.integers(-(10**45), 10**45),
    st.floats(),  # NaN and ±Infinity too: json.dumps writes them, Python reads them back
    st.sampled_from(range(len(RAW_NUMBERS))).map(_RAW.format),
)
HOSTILE_VALUE = st.one_of(
    HOSTILE_TEXT,
    HOSTILE_NUMBER,
    st.none(),
    st.booleans(),
    st.lists(HOSTILE_TEXT, max_size=3),
    st.dictionaries(HOSTILE_TEXT, HOSTILE_TEXT | HOSTILE_NUMBER, max_size=3),
)
ANY_JSON = st.recursive(
    st.none() | st.booleans() | HOSTILE_NUMBER | HOSTILE_TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(HOSTILE_TEXT, inner, max_size=4),
    max_leaves=16,
)


def hostile(template: Any) -> st.SearchStrategy[Any]:
    """`template` with about one node in eight replaced by a hostile value, and a hostile key added or put in place
    of one now and then: a body close enough to the route's own to reach past its validation."""
    if isinstance(template, dict):
        fields = st.fixed_dictionaries({k: hostile(v) for k, v in template.items()})
        extra = _now_and_then(st.dictionaries(HOSTILE_TEXT, HOSTILE_VALUE, min_size=1, max_size=1), {})
        renamed = st.sampled_from(sorted(template) or [""]).flatmap(lambda key: st.tuples(st.just(key), HOSTILE_TEXT))
        changed = st.tuples(fields, extra, _now_and_then(renamed, None)).map(_renamed)
    elif isinstance(template, list):
        changed = st.tuples(*map(hostile, template)).map(list) if template else st.lists(HOSTILE_VALUE, max_size=2)
    else:
        changed = st.just(template)
    return st.integers(0, 7).flatmap(lambda n: HOSTILE_VALUE if n == 0 else changed)


def _now_and_then(strategy: st.SearchStrategy[Any], otherwise: Any) -> st.SearchStrategy[Any]:
    """`strategy` one time in six, else `otherwise`: an unknown key is refused before anything else is looked at."""
    return st.integers(0, 5).flatmap(lambda n: strategy if n == 0 else st.just(otherwise))


def _renamed(parts: tuple[dict, dict, tuple[str, str] | None]) -> dict:
    fields, extra, rename = parts
    out = {**fields, **extra}
    if rename is not None and rename[0] in out:
        out[rename[1]] = out.pop(rename[0])
    return out


def to_text(body: Any) -> str:
    """The body as JSON text, the raw number tokens swapped in (json.dumps writes a lone surrogate as its escape)."""
    text = json.dumps(body)
    for i, token in enumerate(RAW_NUMBERS):
        text = text.replace(json.dumps(_RAW.format(i)), token)
    return text


MESSAGE = {"content": "I moved to Lisbon", "peer_id": "alice", "metadata": {"mood": "happy", "n": [1, 2.5]}}
CONCLUSION = {"content": "alice likes tea", "observer_id": "alice", "observed_id": "alice", "session_id": "s1"}


def seed(headers: dict[str, str]) -> dict[str, str]:
    """A fresh workspace: session s1 with alice and bob and one message, a conclusion, scope therapy holding s1."""
    ws = f"any{next(_WORKSPACES)}"

    def post(path: str, body: Any) -> Any:
        reply = call("POST", path, body, headers=headers)
        assert reply.status in (200, 201, 204), (path, reply.status, reply.body)
        return reply.body

    post("/v3/workspaces", {"id": ws})
    post(f"/v3/workspaces/{ws}/sessions", {"id": "s1", "peers": {"alice": {}, "bob": {}}})
    [message] = post(f"/v3/workspaces/{ws}/sessions/s1/messages", {"messages": [MESSAGE]})
    [conclusion] = post(f"/v3/workspaces/{ws}/conclusions", {"conclusions": [CONCLUSION]})
    post(f"/v3/workspaces/{ws}/scopes", {"id": "therapy"})
    post(f"/v3/workspaces/{ws}/scopes/therapy/sessions", {"session_ids": ["s1"]})
    endpoint = post(f"/v3/workspaces/{ws}/webhooks", {"url": "https://example.com/hook"})
    return {
        "workspace_id": ws,
        "peer_id": "alice",
        "session_id": "s1",
        "message_id": message["id"],
        "conclusion_id": conclusion["id"],
        "scope_id": "therapy",
        "endpoint_id": endpoint["id"],
        "name": "index.html",
        # (no export or import runs here: their status routes answer their 404)
        "export_id": "0123456789abcdef",
        "import_id": "0123456789abcdef",
    }


def stored(aws) -> list[dict]:
    """Every item of the table and every object of the bucket: what a 4xx must leave as it was."""
    from local.template import template

    items, request = [], {"TableName": template().table_name, "ConsistentRead": True}
    while True:
        page = aws["dynamodb"].scan(**request)
        items += page["Items"]
        if "LastEvaluatedKey" not in page:
            break
        request["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    objects = aws["s3"].list_objects_v2(Bucket=template().bucket_name).get("Contents", [])
    # (binary attributes, the search index's packed items, as hex)
    return sorted(json.dumps(i, sort_keys=True, default=bytes.hex) for i in items) + sorted(o["Key"] for o in objects)


def admin_key(monkeypatch) -> dict[str, str]:
    """Keys checked, as deployed; the headers of an admin's key."""
    monkeypatch.setenv("PRECIS_AUTH", "true")
    monkeypatch.setenv("PRECIS_JWT_SECRET", SECRET)
    get_settings.cache_clear()
    return {"Authorization": f"Bearer {mint_key(SECRET, admin=True)}"}


def strict(value: Any) -> bool:
    """Whether an answer is JSON every client reads: no NaN or Infinity, which Python writes and browsers refuse."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, float) and not math.isfinite(node):
            return False
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return True
