"""The conclusions store against moto: writes deduplicated under races, reads by every filter, deletes and purges
that leave nothing behind, and peer cards."""

from __future__ import annotations

import hashlib
import itertools
import math
import threading
from datetime import UTC, datetime, timedelta

import boto3
import pytest
from botocore.config import Config
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from local import moto_vectors
from local.template import table_definition, template
from precis.errors import Invalid, NotFound
from precis.settings import get_settings
from precis.store import conclusions, keys, purge, resources, vectors
from precis.store.conclusions import Derived, ExtraConditionFailed, SessionGone
from precis.store.conclusions.dedupe import LOCAL_TWINS
from precis.store.db import Db, from_item, query_all, to_item
from precis.store.purge import purge_session

TABLE = "precis-local"
_examples = itertools.count()  # a collection of its own for each hypothesis example
T0 = datetime(2025, 6, 26, 14, 3, 12, tzinfo=UTC)


class Embedder:
    """Unrelated texts get near-orthogonal unit vectors (a hash); `near` pins texts to a neighbour of another text's
    vector at a chosen cosine distance, so dedupe decisions are the test's."""

    def __init__(self, near: dict[str, tuple[str, float]] | None = None):
        self.dimensions = get_settings().embed_dimensions
        self.near = near or {}
        self.calls = 0

    def _hashed(self, text: str) -> list[float]:
        raw = [hashlib.blake2b(f"{text}|{i}".encode(), digest_size=8).digest() for i in range(self.dimensions)]
        values = [int.from_bytes(b, "big") / 2**63 - 1 for b in raw]
        norm = math.sqrt(sum(v * v for v in values))
        return [v / norm for v in values]

    def vector(self, text: str) -> list[float]:
        if text not in self.near:
            return self._hashed(text)
        base, distance = self.near[text]
        a, b = self.vector(base), self._hashed(text)
        b_dot = sum(x * y for x, y in zip(a, b))
        ortho = [y - b_dot * x for x, y in zip(a, b)]
        o_norm = math.sqrt(sum(v * v for v in ortho))
        cos = 1 - distance
        return [cos * x + math.sqrt(1 - cos * cos) * o / o_norm for x, o in zip(a, ortho)]

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        return [self.vector(t) for t in texts]


def with_vector_index(dynamodb) -> None:
    """Make the table again with the vector index when template.yaml does not declare it yet."""
    definition = table_definition(template())
    if definition.get("VectorIndexes"):
        return
    dynamodb.delete_table(TableName=TABLE)
    definition["AttributeDefinitions"] += [
        {"AttributeName": a, "AttributeType": "S"} for a in ("vcoll", "level", "vsession")
    ]
    definition["VectorIndexes"] = [
        {
            "IndexName": "ByVector",
            "VectorAttribute": {"AttributeName": "vec"},
            "Dimensions": get_settings().embed_dimensions,
            "DistanceFunction": "COSINE",
            "Projection": {"ProjectionType": "INCLUDE", "NonKeyAttributes": ["id"]},
            "SearchSchema": [
                {"AttributeName": "vcoll", "SearchSchemaElementType": "HASH"},
                {"AttributeName": "level", "SearchSchemaElementType": "INLINE_FILTER"},
                {"AttributeName": "vsession", "SearchSchemaElementType": "INLINE_FILTER"},
            ],
        }
    ]
    dynamodb.create_table(**definition)


@pytest.fixture
def db(aws, monkeypatch):
    monkeypatch.setenv("PRECIS_PURGE_GRACE_S", "0")
    with_vector_index(aws["dynamodb"])
    db = Db(client=aws["dynamodb"], s3=aws["s3"], table=TABLE, bucket=TABLE)
    resources.get_or_create_workspace(db, "ws1")
    for peer in ("alice", "bob", "carol"):
        resources.get_or_create_peer(db, "ws1", peer)
    for session in ("s1", "s2"):
        resources.get_or_create_session(db, "ws1", session)
    return db


def partition(db: Db, pk: str) -> list[dict]:
    return query_all(db, KeyConditionExpression="PK = :p", ExpressionAttributeValues={":p": {"S": pk}})


def item(db: Db, key: dict) -> dict | None:
    return from_item(db.client.get_item(TableName=TABLE, Key=to_item(key), ConsistentRead=True).get("Item"))


def head(db: Db, observer="alice", observed="bob") -> dict | None:
    return item(db, keys.collection_head("ws1", observer, observed))


def incarnation(db: Db, session="s1") -> str:
    return item(db, keys.session("ws1", session))["incarnation"]


def write(db, texts, *, observer="alice", observed="bob", embedder=None, **kwargs):
    items = [t if isinstance(t, Derived) else Derived(t, session_id="s1") for t in texts]
    return conclusions.write(db, "ws1", observer, observed, items, embedder=embedder or Embedder(), **kwargs)


def test_ids_are_21_sortable_chars_led_by_the_millisecond():
    early, late = conclusions.new_conclusion_id(1_750_000_000_000), conclusions.new_conclusion_id(1_750_000_000_001)
    assert len(early) == len(late) == 21
    assert set(early + late) <= set("-0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz")
    assert early < late
    assert conclusions.new_conclusion_id(5)[:8] == "-------4"
    assert len({conclusions.new_conclusion_id(7) for _ in range(100)}) == 100


def test_create_answers_conclusions_that_get_reads_back(db):
    made = conclusions.create(
        db,
        "ws1",
        [
            {"content": "bob has a dog named Rover", "observer_id": "alice", "observed_id": "bob", "session_id": "s1"},
            {"content": "bob lives in Lisbon", "observer_id": "bob", "observed_id": "bob"},
        ],
        embedder=Embedder(),
    )
    assert [(c["content"], c["observer_id"], c["observed_id"], c["session_id"]) for c in made] == [
        ("bob has a dog named Rover", "alice", "bob", "s1"),
        ("bob lives in Lisbon", "bob", "bob", None),
    ]
    first = made[0]
    assert set(first) == {
        "id",
        "content",
        "observer_id",
        "observed_id",
        "session_id",
        "level",
        "created_at",
        "times_derived",
        "source_ids",
    }
    assert (first["level"], first["times_derived"], first["source_ids"]) == ("explicit", 1, None)
    assert datetime.fromisoformat(first["created_at"]).utcoffset() == timedelta(0)
    assert first["created_at"].endswith("+00:00") and "." in first["created_at"]
    assert conclusions.get(db, "ws1", first["id"]) == first
    stored = item(db, keys.conclusion("ws1", "alice", "bob", first["id"]))
    assert stored["source_at"] == stored["created_at"] and stored["cws"] == "ws1" and stored["cid"] == first["id"]
    assert item(db, keys.conclusion_provenance("ws1", "s1", first["id"])) is not None
    assert item(db, keys.collection_registry("ws1", "alice", "bob")) is not None
    assert head(db) == {**keys.collection_head("ws1", "alice", "bob"), "version": 1, "count": 1}
    with pytest.raises(NotFound, match="conclusion 'nope'"):
        conclusions.get(db, "ws1", "nope")


@pytest.mark.parametrize(
    ("entry", "missing"),
    [
        ({"observer_id": "zed", "observed_id": "bob"}, "peer 'zed'"),
        ({"observer_id": "alice", "observed_id": "zed"}, "peer 'zed'"),
        ({"observer_id": "alice", "observed_id": "bob", "session_id": "nope"}, "session 'nope'"),
    ],
)
def test_create_needs_existing_peers_and_a_live_session(db, entry, missing):
    with pytest.raises(NotFound, match=missing):
        conclusions.create(db, "ws1", [{"content": "x", **entry}], embedder=Embedder())
    purge.delete_session(db, "ws1", "s1")
    with pytest.raises(NotFound, match="session 's1'"):
        conclusions.create(
            db,
            "ws1",
            [{"content": "x", "observer_id": "alice", "observed_id": "bob", "session_id": "s1"}],
            embedder=Embedder(),
        )
    assert partition(db, keys.collection_pk("ws1", "alice", "bob")) == []


def test_create_refuses_empty_oversized_and_too_many(db):
    entry = {"observer_id": "alice", "observed_id": "bob"}
    for payload, message in (
        ([], "1 to 100"),
        ([{**entry, "content": ""}], "content: 1 to 65535"),
        ([{**entry, "content": "x" * 65_536}], "content: 1 to 65535"),
        ([{**entry, "content": f"{i}"} for i in range(101)], "got 101"),
    ):
        with pytest.raises(Invalid, match=message):
            conclusions.create(db, "ws1", payload, embedder=Embedder())


def test_exact_duplicates_count_as_derived_again(db):
    first = write(db, ["bob likes tea", "  Bob likes TEA ", "bob likes tea"])
    assert first[0] == first[1] == first[2] and first[0]["times_derived"] == 3
    again = write(db, ["BOB LIKES TEA"])[0]
    assert (again["id"], again["times_derived"], again["content"]) == (first[0]["id"], 4, "bob likes tea")
    # another session, another level: another conclusion
    other = write(db, [Derived("bob likes tea", session_id="s2"), Derived("bob likes tea", level="deductive")])
    assert len({first[0]["id"], other[0]["id"], other[1]["id"]}) == 3
    assert head(db)["count"] == 3


def test_exact_duplicates_merge_provenance(db):
    write(
        db,
        [Derived("bob likes tea", session_id="s1", source_message_ids=["m1"], source_at="2025-01-01T00:00:00+00:00")],
    )
    view = write(
        db,
        [
            Derived(
                "bob likes tea", session_id="s1", source_message_ids=["m2", "m1"], source_at="2025-02-01T00:00:00+00:00"
            )
        ],
    )[0]
    stored = item(db, keys.conclusion("ws1", "alice", "bob", view["id"]))
    assert stored["source_message_ids"] == ["m1", "m2"] and stored["source_at"] == "2025-02-01T00:00:00+00:00"


def test_near_duplicate_keeps_the_text_that_says_more_and_its_vector(db):
    embedder = Embedder(
        near={
            "bob owns a small dog named Rover": ("bob owns a dog", 0.03),
            "bob owns dog": ("bob owns a small dog named Rover", 0.02),
            "bob has a cat": ("bob owns a dog", 0.2),
        }
    )
    first = write(db, ["bob owns a dog"], embedder=embedder)[0]
    longer = write(db, ["bob owns a small dog named Rover"], embedder=embedder)[0]
    assert (longer["id"], longer["content"], longer["times_derived"]) == (
        first["id"],
        "bob owns a small dog named Rover",
        2,
    )
    pk = keys.collection_pk("ws1", "alice", "bob")
    dedupe = [i for i in partition(db, pk) if i["SK"].startswith("D#")]
    assert [d["SK"].rsplit("#", 1)[1] for d in dedupe] == [
        hashlib.sha1(b"bob owns a small dog named rover").hexdigest()
    ]
    stored_vector = item(db, keys.conclusion_vector("ws1", "alice", "bob", first["id"]))["vec"]
    assert max(abs(a - b) for a, b in zip(stored_vector, embedder.vector("bob owns a small dog named Rover"))) < 1e-6
    shorter = write(db, ["bob owns dog"], embedder=embedder)[0]  # says less: the stored text stays
    assert (shorter["id"], shorter["content"], shorter["times_derived"]) == (
        first["id"],
        "bob owns a small dog named Rover",
        3,
    )
    assert write(db, ["bob has a cat"], embedder=embedder)[0]["id"] != first["id"]  # 0.2 away: not a duplicate
    assert head(db)["count"] == 2


def test_near_duplicates_inside_one_call_merge(db):
    embedder = Embedder(near={"bob owns a big dog": ("bob owns a dog", 0.01)})
    views = write(db, ["bob owns a dog", "bob owns a big dog"], embedder=embedder)
    assert views[0] == views[1] and views[0]["content"] == "bob owns a big dog" and views[0]["times_derived"] == 2


def test_near_duplicate_needs_the_same_session_and_level_for_explicit(db):
    embedder = Embedder(near={"bob owns a big dog": ("bob owns a dog", 0.01)})
    first = write(db, ["bob owns a dog"], embedder=embedder)[0]
    other_session = write(db, [Derived("bob owns a big dog", session_id="s2")], embedder=embedder)[0]
    deductive = write(db, [Derived("bob owns a big dog", level="deductive")], embedder=embedder)[0]
    assert len({first["id"], other_session["id"], deductive["id"]}) == 3
    # deductive conclusions dedupe whatever their session
    again = write(db, [Derived("bob owns a dog", level="deductive", session_id="s1")], embedder=embedder)[0]
    assert again["id"] == deductive["id"] and again["times_derived"] == 2


class Recording:
    """A DynamoDB client that remembers each request it sends: (operation, request)."""

    def __init__(self, client):
        self.client, self.calls = client, []

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def transactions(self) -> list[list[dict]]:
        return [request["TransactItems"] for name, request in self.calls if name == "transact_write_items"]

    def __getattr__(self, name):
        method = getattr(self.client, name)
        if not callable(method) or name.startswith("_") or name in ("meta", "exceptions"):
            return method

        def call(**request):
            self.calls.append((name, request))
            return method(**request)

        return call


@pytest.mark.parametrize("before", [0, 3, LOCAL_TWINS + 4])
def test_a_near_duplicate_is_found_however_many_conclusions_its_session_holds(db, before):
    embedder = Embedder(
        near={"bob owns a big dog": ("bob owns a dog", 0.01), "bob owns a dog and a cat": ("bob owns a dog", 0.2)}
    )
    first = write(db, [f"bob fact number {i}" for i in range(before)] + ["bob owns a dog"], embedder=embedder)[-1]
    # Another observer's collection holds the same text in the same session: never a twin here.
    other = write(db, ["bob owns a big dog"], observer="carol", embedder=embedder)[0]
    recording = Recording(db.client)
    spied = Db(client=recording, s3=db.s3, table=db.table, bucket=db.bucket)
    again, apart = write(spied, ["bob owns a big dog", "bob owns a dog and a cat"], embedder=embedder)
    assert (again["id"], again["content"], again["times_derived"]) == (first["id"], "bob owns a big dog", 2)
    assert apart["id"] not in (first["id"], other["id"])  # 0.2 away: a conclusion of its own
    # A session's few conclusions are compared without the index; past LOCAL_TWINS each candidate asks it.
    assert recording.names().count("search_vectors") == (2 if before + 1 > LOCAL_TWINS else 0)
    assert head(db)["count"] == before + 2


def test_a_chunk_of_both_levels_finds_each_twin(db):
    embedder = Embedder(
        near={"bob owns a big dog": ("bob owns a dog", 0.01), "bob drinks green tea": ("bob drinks tea", 0.02)}
    )
    explicit = write(db, ["bob owns a dog"], embedder=embedder)[0]
    deductive = write(db, [Derived("bob drinks tea", level="deductive", session_id="s1")], embedder=embedder)[0]
    views = write(
        db,
        [
            Derived("bob drinks green tea", level="deductive", session_id="s2"),
            "bob owns a big dog",
            Derived("bob owns a big dog", session_id="s2"),
            "bob drinks green tea",
        ],
        embedder=embedder,
    )
    assert [v["id"] for v in views[:2]] == [deductive["id"], explicit["id"]]
    # Another session's explicit conclusion, and an explicit one near a deductive one: not twins.
    assert len({views[2]["id"], views[3]["id"], explicit["id"], deductive["id"]}) == 4


def test_more_than_16_conclusions_go_in_chunks_of_at_most_16(db):
    recording = Recording(db.client)
    spied = Db(client=recording, s3=db.s3, table=db.table, bucket=db.bucket)
    extra = [
        {
            "ConditionCheck": {
                "TableName": TABLE,
                "Key": to_item(keys.workspace("ws1")),
                "ConditionExpression": "attribute_exists(PK)",
            }
        }
    ]
    views = write(spied, [f"bob fact number {i}" for i in range(40)], extra=extra, incarnation=incarnation(db))
    assert len({v["id"] for v in views}) == 40
    sizes = [
        sum(1 for a in t if "Put" in a and a["Put"]["Item"]["SK"]["S"].startswith("C#"))
        for t in recording.transactions()
    ]
    assert sizes == [16, 16, 8]
    assert all(len(t) <= 100 and extra[0] in t for t in recording.transactions())
    assert head(db)["count"] == 40 and head(db)["version"] == 3


def test_an_extra_condition_that_fails_surfaces_and_writes_nothing(db):
    cursor = keys.derive_cursor("ws1", "s1", "bob")
    extra = [
        {
            "Put": {
                "TableName": TABLE,
                "Item": to_item({**cursor, "through": 5}),
                "ConditionExpression": "attribute_not_exists(through) OR through < :t",
                "ExpressionAttributeValues": {":t": {"N": "5"}},
            }
        }
    ]
    write(db, ["bob likes tea"], extra=extra)
    with pytest.raises(ExtraConditionFailed) as failed:
        write(db, ["bob likes tea", "bob likes jazz"], extra=extra)
    assert failed.value.written == []
    stored = [i for i in partition(db, keys.collection_pk("ws1", "alice", "bob")) if i["SK"].startswith("C#")]
    assert [(i["content"], i["times_derived"]) for i in stored] == [("bob likes tea", 1)]
    assert head(db)["version"] == 1


def test_a_deleted_or_recreated_session_gets_nothing(db):
    old = incarnation(db)
    purge.delete_session(db, "ws1", "s1")
    with pytest.raises(SessionGone, match="session 's1'"):
        write(db, ["bob likes tea"], incarnation=old)
    with pytest.raises(SessionGone):
        write(
            db,
            [Derived("bob likes tea", level="deductive")],
            incarnation=incarnation(db, "s2"),
            session_id_for_check="s1",
        )
    assert partition(db, keys.collection_pk("ws1", "alice", "bob")) == []
    assert [i for i in partition(db, keys.session_pk("ws1", "s1")) if i["SK"].startswith("DERIVED#")] == []


def test_delete_removes_the_conclusion_and_all_it_owns(db):
    kept, doomed = write(db, ["bob likes tea", "bob likes jazz"])
    conclusions.delete(db, "ws1", doomed["id"])
    with pytest.raises(NotFound):
        conclusions.get(db, "ws1", doomed["id"])
    with pytest.raises(NotFound):
        conclusions.delete(db, "ws1", doomed["id"])
    rows = partition(db, keys.collection_pk("ws1", "alice", "bob"))
    assert any(kept["id"] in str(i) for i in rows) and all(doomed["id"] not in str(i) for i in rows)
    assert item(db, keys.conclusion_pointer("ws1", doomed["id"])) is None
    assert item(db, keys.conclusion_provenance("ws1", "s1", doomed["id"])) is None
    assert (head(db)["count"], head(db)["version"]) == (1, 2)
    assert conclusions.get(db, "ws1", kept["id"]) == kept
    assert write(db, ["bob likes jazz"])[0]["id"] != doomed["id"]  # its dedupe key went with it


def test_list_orders_newest_first_with_stable_pages_and_reverse(db):
    views = []
    for step in range(5):  # three conclusions per millisecond: ties fall back to the id
        views += write(db, [f"bob fact {step}-{i}" for i in range(3)], now=T0 + timedelta(seconds=step))
    newest_first = sorted(views, key=lambda v: (v["created_at"], v["id"]), reverse=True)
    pages = [conclusions.list_conclusions(db, "ws1", None, n, 4, False) for n in (1, 2, 3, 4, 5)]
    assert [c for p in pages for c in p["items"]] == newest_first
    assert (pages[0]["total"], pages[0]["pages"], pages[0]["size"], len(pages[3]["items"]), pages[4]["items"]) == (
        15,
        4,
        4,
        3,
        [],
    )
    oldest = conclusions.list_conclusions(db, "ws1", {"observer_id": "alice", "observed_id": "bob"}, 1, 100, True)
    assert oldest["items"] == newest_first[::-1]
    assert [v["id"] for v in newest_first] == sorted((v["id"] for v in views), reverse=True)


def test_list_filters_by_every_field(db):
    e = Embedder()
    a = conclusions.write(db, "ws1", "alice", "bob", [Derived("bob likes tea", session_id="s1")], embedder=e, now=T0)[0]
    b = conclusions.write(
        db,
        "ws1",
        "alice",
        "bob",
        [Derived("bob is kind", level="deductive", source_ids=[a["id"]])],
        embedder=e,
        now=T0 + timedelta(hours=1),
    )[0]
    c = conclusions.write(
        db, "ws1", "bob", "bob", [Derived("bob runs", session_id="s2")], embedder=e, now=T0 + timedelta(hours=2)
    )[0]
    d = conclusions.write(
        db, "ws1", "carol", "alice", [Derived("alice sings")], embedder=e, now=T0 + timedelta(hours=3)
    )[0]

    def ids(filters):
        return [v["id"] for v in conclusions.list_conclusions(db, "ws1", filters, 1, 50, False)["items"]]

    assert ids(None) == ids({}) == [d["id"], c["id"], b["id"], a["id"]]
    assert ids({"observer_id": "alice"}) == [b["id"], a["id"]]
    assert ids({"observed_id": "bob"}) == [c["id"], b["id"], a["id"]]
    assert ids({"observer_id": "alice", "observed_id": "bob"}) == [b["id"], a["id"]]
    assert ids({"observer_id": "alice", "observed_id": "bob", "level": "explicit"}) == [a["id"]]
    assert ids({"session_id": "s2"}) == [c["id"]]
    assert ids({"session_id": None}) == [d["id"], b["id"]]
    assert ids({"id": a["id"]}) == [a["id"]]
    assert ids({"id": {"in": [a["id"], d["id"], "nope", a["id"]]}}) == [d["id"], a["id"]]
    assert ids({"id": {"in": [a["id"], d["id"]]}, "observer_id": "carol"}) == [d["id"]]
    assert ids({"source_ids": {"contains": a["id"]}}) == [b["id"]]
    assert ids({"level": "deductive"}) == [b["id"]]
    assert ids({"created_at": {"gte": b["created_at"], "lt": d["created_at"]}}) == [c["id"], b["id"]]
    assert ids({"created_at": {"gt": c["created_at"]}}) == [d["id"]]
    with pytest.raises(Invalid, match="unknown key.*content.*metadata"):
        ids({"content": "x", "metadata": {}, "level": "explicit"})
    with pytest.raises(NotFound, match="workspace 'nope'"):
        conclusions.list_conclusions(db, "nope", None, 1, 10, False)


def test_query_answers_the_nearest_of_the_collection_first(db):
    embedder = Embedder(
        near={"what does bob drink": ("bob likes tea", 0.1), "bob likes coffee": ("bob likes tea", 0.3)}
    )
    tea, coffee, _ = write(db, ["bob likes tea", "bob likes coffee", "bob plays chess"], embedder=embedder)
    write(db, ["bob likes tea"], observer="carol", embedder=embedder)
    moto_vectors.settle()  # DynamoDB fills the vector index asynchronously
    filters = {"observer_id": "alice", "observed_id": "bob"}
    found = conclusions.query(db, "ws1", "what does bob drink", 2, None, filters, embedder=embedder)
    assert [c["id"] for c in found] == [tea["id"], coffee["id"]]
    near = conclusions.query(db, "ws1", "what does bob drink", 10, 0.2, filters, embedder=embedder)
    assert [c["id"] for c in near] == [tea["id"]]
    assert (
        conclusions.query(
            db, "ws1", "what does bob drink", 10, None, {**filters, "session_id": "s2"}, embedder=embedder
        )
        == []
    )
    assert (
        conclusions.query(
            db, "ws1", "what does bob drink", 10, None, {**filters, "level": "deductive"}, embedder=embedder
        )
        == []
    )
    conclusions.delete(db, "ws1", tea["id"])
    moto_vectors.settle()  # until the delete reaches the index, tea keeps its place there (and is read as gone)
    nearest = conclusions.query(db, "ws1", "what does bob drink", 1, None, filters, embedder=embedder)
    assert [c["id"] for c in nearest] == [coffee["id"]]
    for bad in (
        {"observer_id": "alice"},
        {"observed_id": "bob"},
        None,
        {"observer_id": {"in": ["a"]}, "observed_id": "b"},
    ):
        with pytest.raises(Invalid, match="observer_id and observed_id"):
            conclusions.query(db, "ws1", "tea", 10, None, bad, embedder=embedder)


def test_cards_put_get_and_derived_writes_that_yield_to_a_client(db):
    assert conclusions.get_card(db, "ws1", "alice", "bob") is None
    assert conclusions.card_state(db, "ws1", "alice", "bob") == (None, {}, None)
    assert conclusions.write_card(db, "ws1", "alice", "bob", ["IDENTITY: bob"], {"IDENTITY: bob": 2}, previous=None)
    assert conclusions.card_state(db, "ws1", "alice", "bob") == (["IDENTITY: bob"], {"IDENTITY: bob": 2}, "derived")
    assert item(db, keys.collection_registry("ws1", "alice", "bob")) is not None
    assert conclusions.put_card(db, "ws1", "alice", "bob", ["ATTRIBUTE: tall"]) == ["ATTRIBUTE: tall"]
    # a derived update computed from the card before the client's PUT does not overwrite it
    assert not conclusions.write_card(
        db, "ws1", "alice", "bob", ["IDENTITY: bob", "ATTRIBUTE: kind"], {}, previous=["IDENTITY: bob"]
    )
    assert conclusions.card_state(db, "ws1", "alice", "bob") == (["ATTRIBUTE: tall"], {}, "client")
    assert conclusions.write_card(
        db,
        "ws1",
        "alice",
        "bob",
        ["ATTRIBUTE: tall", "ATTRIBUTE: kind"],
        {"ATTRIBUTE: kind": 1},
        previous=["ATTRIBUTE: tall"],
    )
    assert conclusions.get_card(db, "ws1", "alice", "bob") == ["ATTRIBUTE: tall", "ATTRIBUTE: kind"]
    assert conclusions.get_card(db, "ws1", "bob", "alice") is None


def test_a_session_purge_removes_only_the_conclusions_drawn_from_it(db):
    gone = write(db, ["bob likes tea", "bob likes jazz"])
    write(db, ["bob likes tea"], observer="carol")
    kept = write(db, [Derived("bob likes tea", session_id="s2"), Derived("bob is kind", level="deductive")])
    old = incarnation(db)
    purge.delete_session(db, "ws1", "s1")
    result = purge_session(db, "ws1", "s1", old)
    assert result.done
    left = conclusions.list_conclusions(db, "ws1", None, 1, 50, False)["items"]
    assert sorted(v["id"] for v in left) == sorted(v["id"] for v in kept)
    assert all(item(db, keys.conclusion_pointer("ws1", v["id"])) is None for v in gone)
    # The head stays; each remaining conclusion keeps its item, dedupe key, text and vector.
    assert [i["SK"] for i in partition(db, keys.collection_pk("ws1", "carol", "bob"))] == ["HEAD"]
    assert head(db)["count"] == 2 and head(db, "carol")["count"] == 0
    remaining = [i["SK"][:2] for i in partition(db, keys.collection_pk("ws1", "alice", "bob"))]
    assert sorted(remaining) == ["C#", "C#", "D#", "D#", "HE", "L#", "L#", "V#", "V#"]


def test_a_session_purge_out_of_time_resumes(db):
    write(db, ["bob likes tea"])
    write(db, ["bob likes tea"], observer="carol")
    old = incarnation(db)
    purge.delete_session(db, "ws1", "s1")
    removed, done = conclusions.purge_session_conclusions(db, "ws1", "s1", time_left=iter([1, -1]).__next__)
    assert (removed, done) == (1, False)
    assert purge_session(db, "ws1", "s1", old).done
    assert conclusions.list_conclusions(db, "ws1", None, 1, 50, False)["total"] == 0


def test_a_workspace_delete_removes_its_collections(db):
    views = write(db, ["bob likes tea"]) + write(db, [Derived("alice sings")], observer="carol", observed="alice")
    conclusions.put_card(db, "ws1", "bob", "alice", ["IDENTITY: alice"])
    for session in ("s1", "s2"):
        before = incarnation(db, session)
        purge.delete_session(db, "ws1", session)
        purge_session(db, "ws1", session, before)
    purge.delete_workspace(db, "ws1")
    everything = db.client.scan(TableName=TABLE)["Items"]
    assert [
        i for i in everything if "#C#" in i["PK"]["S"] or "#CID#" in i["PK"]["S"] or i["SK"]["S"].startswith("COLL#")
    ] == []
    assert all(item(db, keys.conclusion_pointer("ws1", v["id"])) is None for v in views)


def test_concurrent_writers_of_one_text_make_one_conclusion(moto_server):
    url, clients = moto_server
    db = Db(
        client=boto3.client("dynamodb", endpoint_url=url, config=Config(max_pool_connections=16)),
        s3=clients["s3"],
        table=TABLE,
        bucket=TABLE,
    )
    with_vector_index(db.client)
    resources.get_or_create_workspace(db, "ws1")
    embedder, errors, writers = Embedder(), [], 8
    start = threading.Barrier(writers)

    def writer():
        try:
            start.wait()
            conclusions.write(
                db,
                "ws1",
                "alice",
                "bob",
                [Derived("bob likes tea"), Derived(f"bob {threading.get_ident()}")],
                embedder=embedder,
            )
        except Exception as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=writer) for _ in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    listed = conclusions.list_conclusions(db, "ws1", {"observer_id": "alice", "observed_id": "bob"}, 1, 50, False)
    tea = [c for c in listed["items"] if c["content"] == "bob likes tea"]
    assert len(tea) == 1 and tea[0]["times_derived"] == writers
    assert listed["total"] == writers + 1 == head(db)["count"]


def test_a_twin_written_moments_ago_is_found_before_the_index_holds_it(db):
    """DynamoDB fills the vector index asynchronously: a deductive conclusion (always looked for through the index)
    written a moment ago is not there yet, and is still found as the twin, from the table."""
    embedder = Embedder(near={"bob drinks green tea": ("bob drinks tea", 0.02)})
    first = write(db, [Derived("bob drinks tea", level="deductive")], embedder=embedder)[0]
    assert (
        vectors.search(db, keys.collection_name("ws1", "alice", "bob"), embedder.embed(["bob drinks tea"])[0], 5) == []
    )  # the index has not caught up
    again = write(db, [Derived("bob drinks green tea", level="deductive")], embedder=embedder)[0]
    assert (again["id"], again["times_derived"]) == (first["id"], 2)
    assert head(db)["count"] == 1


def test_a_session_purge_of_a_large_collection_stops_between_transactions(db):
    """The deadline is looked at between delete transactions, not only between collections: a session that drew
    40 conclusions into one collection stops after the first 16 when out of time, and the next call goes on."""
    write(db, [f"bob likes tea number {i}" for i in range(40)])
    purge.delete_session(db, "ws1", "s1")
    clock = iter([1, -1, 1, 1, 1])
    assert conclusions.purge_session_conclusions(db, "ws1", "s1", time_left=clock.__next__) == (16, False)
    assert conclusions.purge_session_conclusions(db, "ws1", "s1", time_left=clock.__next__) == (24, True)
    assert conclusions.list_conclusions(db, "ws1", None, 1, 50, False)["total"] == 0


def test_a_conclusion_is_found_by_a_query_as_soon_as_it_is_written(db):
    """Read-your-writes (issue 47): the vector index has not caught up (its clock stands still), and the conclusions
    written a moment ago are still found by meaning, ranked and filtered as the index would rank and filter them."""
    embedder = Embedder(near={"favourite beverage": ("bob likes tea", 0.1), "bob likes coffee": ("bob likes tea", 0.3)})
    tea, coffee, _ = write(db, ["bob likes tea", "bob likes coffee", "bob plays chess"], embedder=embedder)
    filters = {"observer_id": "alice", "observed_id": "bob"}
    vector = embedder.embed(["favourite beverage"])[0]
    assert vectors.search(db, keys.collection_name("ws1", "alice", "bob"), vector, 5) == []  # not in the index yet
    found = conclusions.query(db, "ws1", "favourite beverage", 2, None, filters, embedder=embedder)
    assert [c["id"] for c in found] == [tea["id"], coffee["id"]]
    near = conclusions.query(db, "ws1", "favourite beverage", 10, 0.2, filters, embedder=embedder)
    assert [c["id"] for c in near] == [tea["id"]]
    for other in ({"session_id": "s2"}, {"level": "deductive"}):
        assert (
            conclusions.query(db, "ws1", "favourite beverage", 10, None, {**filters, **other}, embedder=embedder) == []
        )
    purge.delete_session(db, "ws1", "s1")  # its conclusions are invisible from the delete on
    assert conclusions.query(db, "ws1", "favourite beverage", 10, None, filters, embedder=embedder) == []


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    replicated=st.integers(0, 8),
    fresh=st.integers(0, 8),
    weights=st.lists(st.floats(0.0, 1.0), min_size=3, max_size=3),
    top_k=st.integers(1, 12),
    max_distance=st.sampled_from([None, 0.6, 0.9, 1.0]),
    level=st.sampled_from([None, "explicit", "deductive"]),
)
def test_the_semantic_ranking_is_the_brute_forces_over_the_collection_however_far_the_index_is_behind(
    db, replicated, fresh, weights, top_k, max_distance, level
):
    """Some conclusions are in the index, the newest are not yet: the semantic ranking is the exact one over them all
    (cosine on the stored vectors, ties by id), filtered and cut at top_k and max_distance as the index would."""
    observed = f"p{next(_examples)}"
    resources.get_or_create_peer(db, "ws1", observed)
    embedder = Embedder()
    texts = [f"{observed} fact {i}" for i in range(replicated + fresh)]
    derived = [Derived(t, session_id="s1") if i % 2 else Derived(t, level="deductive") for i, t in enumerate(texts)]
    if replicated:
        write(db, derived[:replicated], observed=observed, embedder=embedder)
    moto_vectors.settle()
    if fresh:
        write(db, derived[replicated:], observed=observed, embedder=embedder)
    # A query near a few of them, sharing no word with any (the lexical ranking adds nothing).
    anchors = [embedder.vector(t) for t in (texts[:3] or ["nothing"])]
    query = [sum(w * a[d] for w, a in zip(weights, anchors)) + 0.01 for d in range(len(anchors[0]))]
    stored = [
        i
        for i in partition(db, keys.collection_pk("ws1", "alice", observed))
        if i["SK"].startswith("V#") and (level is None or i["level"] == level)
    ]
    brute = sorted((vectors.cosine_distance(query, i["vec"]), i["id"]) for i in stored)
    wanted = [cid for distance, cid in brute if max_distance is None or distance <= max_distance][:top_k]
    found = vectors.nearest(db, "ws1", "alice", observed, "zzyzx", query, top_k, level=level, max_distance=max_distance)
    assert found == wanted
