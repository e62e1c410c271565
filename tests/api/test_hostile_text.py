"""Hostile text through the whole service: a 1,000-letter word, a 10,000-character one, control characters, any
Unicode, a 355,000-character message and a query of 5,000 distinct words are stored once, derived without a failed
stream record, found by search, and every read that takes them answers 200; nothing the search index writes for
them passes DynamoDB's 400 KB item limit."""

from __future__ import annotations

import itertools
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from precis.lexical import terms
from precis.settings import get_settings
from precis.store import keys, text_index
from precis.store.db import Db, get_db
from tests.handlers import call, invoke
from tests.stream import message_records

ITEM_MAX_BYTES = 400 * 1024
QUERY_MAX_CHARS = 10_000  # a search's and a conclusion query's longest query
_WORKSPACES = itertools.count()


@pytest.fixture
def db(aws, monkeypatch) -> Db:
    monkeypatch.setenv("PRECIS_MAX_MESSAGE_CHARS", "400000")
    get_settings.cache_clear()
    get_db.cache_clear()
    yield get_db()
    get_db.cache_clear()


def workspace() -> str:
    """A fresh workspace, with peer alice (a hypothesis example each: the `aws` fixture is the test's)."""
    ws = f"h{next(_WORKSPACES)}"
    assert call("POST", "/v3/workspaces", {"id": ws}).status == 201
    assert call("POST", f"/v3/workspaces/{ws}/peers", {"id": "alice"}).status == 201
    return ws


def stored(db: Db, ws: str, session: str = "s1") -> list[dict]:
    out = db.client.query(
        TableName=db.table,
        KeyConditionExpression="PK = :p AND begins_with(SK, :m)",
        ConsistentRead=True,
        ExpressionAttributeValues={":p": {"S": keys.session_pk(ws, session)}, ":m": {"S": "MSG#"}},
    )
    return out["Items"]


def post_once(db: Db, ws: str, text: str) -> dict:
    """`text` posted as one message: 201, stored once, and the deriver takes its insert without a failure."""
    reply = call(
        "POST", f"/v3/workspaces/{ws}/sessions/s1/messages", {"messages": [{"peer_id": "alice", "content": text}]}
    )
    assert reply.status == 201, reply.body
    [view] = reply.body
    assert len(stored(db, ws)) == 1
    listed = call("POST", f"/v3/workspaces/{ws}/sessions/s1/messages/list")
    assert listed.status == 200 and [(m["id"], m["content"]) for m in listed.body["items"]] == [(view["id"], text)]
    records = message_records(db.client, ws=ws, session_id="s1")
    assert len(records) == 1
    assert invoke("DeriveFunction", {"Records": records}) == {"batchItemFailures": []}
    return view


def every_read(ws: str, query: str) -> dict[str, list[str]]:
    """Ids each read that takes `query` answers (each must answer 200): the three message searches, the
    conclusions' query, and a context with `search_query` (and the peer's representation searched by it)."""
    found = {}
    for name, path in (
        ("workspace", f"/v3/workspaces/{ws}/search"),
        ("session", f"/v3/workspaces/{ws}/sessions/s1/search"),
        ("peer", f"/v3/workspaces/{ws}/peers/alice/search"),
    ):
        reply = call("POST", path, {"query": query[:QUERY_MAX_CHARS]})
        assert reply.status == 200, (name, reply.body)
        found[name] = [m["id"] for m in reply.body]
    reply = call(
        "POST",
        f"/v3/workspaces/{ws}/conclusions/query",
        {"query": query[:QUERY_MAX_CHARS], "filters": {"observer_id": "alice", "observed_id": "alice"}},
    )
    assert reply.status == 200, reply.body
    found["conclusions"] = [c["id"] for c in reply.body]
    reply = call("GET", f"/v3/workspaces/{ws}/sessions/s1/context", search_query=query, peer_target="alice")
    assert reply.status == 200, reply.body
    found["context"] = [m["id"] for m in reply.body["messages"]]
    return found


def survives(db: Db, text: str) -> None:
    ws = workspace()
    view = post_once(db, ws, text)
    made = call(
        "POST",
        f"/v3/workspaces/{ws}/conclusions",
        {"conclusions": [{"content": text[:65_535], "observer_id": "alice", "observed_id": "alice"}]},
    )
    assert made.status == 201, made.body
    found = every_read(ws, text)
    assert found["context"] == [view["id"]]
    if terms(text[:QUERY_MAX_CHARS]):  # a query that says any of its words finds it
        assert found["workspace"] == found["session"] == found["peer"] == [view["id"]], found
        assert made.body[0]["id"] in found["conclusions"]


CONTROL = "".join(map(chr, range(0x20))) + "\x7f" + "".join(map(chr, range(0x80, 0xA0)))


@pytest.mark.parametrize(
    "text",
    [
        "y" * 1000,
        "ab" * 5000,
        "the word " + "y" * 1000 + " and " + "Y" * 1000 + " again",
        CONTROL,
        f"coffee{CONTROL}tomorrow\u200b\u200e\u202e\ufeffgreyhound\u0301\u0000",
        "\u0130stanbul STRASSE straße ﬁne ǅ \U0001d400\U0001d401 \U00020000\U00020001 ٣٤٥ 𝟘𝟙",
        "e\u0301" * 3000,  # one grapheme repeated: a 6,000-code-point word
        "\u00df" * 1000,  # casefolds to 2,000 letters
        " \t\n\r" * 100,  # nothing but whitespace
    ],
    ids=[
        "y*1000",
        "ab*5000",
        "long words among short",
        "control characters",
        "words in controls",
        "case and scripts",
        "combining marks",
        "sharp s",
        "whitespace",
    ],
)
def test_hostile_text_is_stored_derived_and_searched(db, text):
    survives(db, text)


@given(
    text=st.one_of(
        st.text(min_size=1, max_size=400),
        st.builds(lambda c, n: c * n, st.characters(exclude_categories=["Cs"]), st.integers(1, 3000)),
        st.lists(st.text(min_size=1, max_size=70), min_size=1, max_size=40).map(" ".join),
    )
)
@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
def test_any_unicode_is_stored_derived_and_searched(db, text):
    survives(db, text)


# ---------------------------------------------------------------- the largest message


def item_bytes(item: dict) -> int:
    """An item's size as DynamoDB counts it: each attribute's name and value (UTF-8 strings, numbers ~ their
    digits, sets and maps their members)."""

    def size(value: dict) -> int:
        ((kind, v),) = value.items()
        if kind == "S":
            return len(v.encode("utf-8"))
        if kind == "N":
            return len(str(Decimal(v)).lstrip("-").replace(".", "")) // 2 + 2
        if kind == "B":
            return len(v)
        if kind in ("SS", "NS"):
            return sum(size({kind[0]: member}) for member in v)
        if kind == "M":
            return 3 + sum(len(k.encode()) + size(x) + 1 for k, x in v.items())
        if kind == "L":
            return 3 + sum(size(x) + 1 for x in v)
        return 1

    return sum(len(name.encode("utf-8")) + size(value) for name, value in item.items())


def index_items(db: Db, ws: str) -> dict[str, list[dict]]:
    """Every item the search index holds for the workspace: texts, fresh units, segments' items, the manifest."""
    found: dict[str, list[dict]] = {"text": [], "fresh": [], "segment": [], "manifest": []}
    request = {"TableName": db.table}
    while True:
        out = db.client.scan(**request)
        for item in out["Items"]:
            pk = item["PK"]["S"]
            if pk == keys.text_docs_pk(ws, "s1"):
                found["text"].append(item)
            elif pk.startswith(keys.text_fresh_pk(ws, 0)[:-2]):
                found["fresh"].append(item)
            elif pk.startswith(keys.text_segment_pk(ws, "")):
                found["segment"].append(item)
            elif pk == keys.text_manifest(ws)["PK"]:
                found["manifest"].append(item)
        if "LastEvaluatedKey" not in out:
            return found
        request["ExclusiveStartKey"] = out["LastEvaluatedKey"]


def astral_words(count: int) -> list[str]:
    """`count` distinct 70-letter words of 4-byte letters (CJK Extension B): each cut to 64, each 256 bytes so."""
    return [chr(0x20000 + i) + "".join(chr(0x20000 + (i * 7 + j) % 42_000) for j in range(1, 70)) for i in range(count)]


LARGEST = 355_000


@pytest.mark.parametrize("shape", ["astral words", "prose"])
def test_a_355000_character_message_is_found_and_its_index_items_fit(db, shape):
    ws = workspace()
    # More distinct words than a text keeps (its 1,024 most frequent): "needle" is among them, said six times.
    words = astral_words(5_000) if shape == "astral words" else [f"w{i}ord{i % 7}x" for i in range(40_000)]
    probe = words[0]
    text = "needle haystack needle " * 3 + " ".join(words)
    text = (text + " " + "filler " * LARGEST)[:LARGEST]
    assert len(text) == LARGEST
    view = post_once(db, ws, text)
    fresh = index_items(db, ws)["fresh"]
    assert text_index.merge(db, ws, ["s1"], min_docs=1) == 1  # its fresh unit becomes a segment
    for query in ("needle", probe, f"haystack {probe}"):
        found = every_read(ws, query)
        assert found["workspace"][:1] == found["session"][:1] == found["peer"][:1] == [view["id"]], query
    items = index_items(db, ws)
    assert len(items["text"]) == 1 and len(fresh) == 1 and items["fresh"] == [] and items["segment"]
    items["fresh"] = fresh
    sizes = {kind: max(map(item_bytes, found)) for kind, found in items.items()}
    assert all(size < ITEM_MAX_BYTES for size in sizes.values()), sizes


# ---------------------------------------------------------------- the widest query


def test_a_query_of_5000_distinct_words_answers_200(db):
    ws = workspace()
    wide = " ".join(chr(0x4E00 + i) for i in range(5_000))  # 5,000 one-letter words: 9,999 characters
    assert len(set(wide.split())) == 5_000 and len(wide) <= QUERY_MAX_CHARS
    view = post_once(db, ws, "the first word of the query: " + chr(0x4E00) + ", and coffee")
    found = every_read(ws, wide)
    assert found["workspace"] == found["session"] == found["peer"] == [view["id"]]
    ascii_wide = " ".join(f"word{i}" for i in range(5_000))  # no length limit on a context's search_query
    reply = call("GET", f"/v3/workspaces/{ws}/sessions/s1/context", search_query=ascii_wide, peer_target="alice")
    assert reply.status == 200, reply.body
