"""A deployed stack can take template.yaml's table in one update: at most one index created or deleted (global and
vector indexes together) since the released definition (deploy/released-table.json), and nothing AWS changes only by
replacing the table or re-creating an index. The checker's rules against hand-made tables, then the template against
the record, then the repository's own history: the two changes that no deployed stack could take."""

from __future__ import annotations

import copy
import subprocess

import pytest

from deploy.table_upgrade import (
    DEFAULTS,
    RELEASED,
    ROOT,
    at_commit,
    check,
    definition,
    explain,
    plan,
    record,
    released,
    working_tree,
)


def _gsi(name: str, hash_key: str, range_key: str | None = None, **extra) -> dict:
    keys = [{"AttributeName": hash_key, "KeyType": "HASH"}]
    if range_key:
        keys.append({"AttributeName": range_key, "KeyType": "RANGE"})
    return {"IndexName": name, "KeySchema": keys, "Projection": {"ProjectionType": "ALL"}, **extra}


def _vector(name: str, attribute: str = "vec", dimensions: int = 256, **extra) -> dict:
    return {
        "IndexName": name,
        "VectorAttribute": {"AttributeName": attribute},
        "Dimensions": dimensions,
        "DistanceFunction": "COSINE",
        "SearchSchema": [{"AttributeName": "coll", "SearchSchemaElementType": "HASH"}],
        "Projection": {"ProjectionType": "INCLUDE", "NonKeyAttributes": ["id"]},
        **extra,
    }


def _table(**changes) -> dict:
    table = {
        "TableName": "precis-dev",
        "BillingMode": "PAY_PER_REQUEST",
        "AttributeDefinitions": [
            {"AttributeName": n, "AttributeType": t}
            for n, t in (("PK", "S"), ("SK", "S"), ("a", "S"), ("b", "S"), ("n", "N"), ("coll", "S"))
        ],
        "KeySchema": [{"AttributeName": "PK", "KeyType": "HASH"}, {"AttributeName": "SK", "KeyType": "RANGE"}],
        "LocalSecondaryIndexes": [_gsi("ByN", "PK", "n")],
        "GlobalSecondaryIndexes": [_gsi("ByA", "a", "PK")],
        "VectorIndexes": [_vector("ByVector")],
        "StreamSpecification": {"StreamViewType": "NEW_IMAGE"},
    }
    table.update(changes)
    return table


RELEASED_TABLE = _table()


# ---------------------------------------------------------------- the rules, on hand-made tables


def test_the_same_table_deploys_with_nothing_to_do():
    up = plan(RELEASED_TABLE, copy.deepcopy(RELEASED_TABLE))
    assert up.deployable and up.steps == []


@pytest.mark.parametrize(
    "current",
    [
        _table(GlobalSecondaryIndexes=[_gsi("ByA", "a", "PK"), _gsi("ByB", "b")]),
        _table(VectorIndexes=[_vector("ByVector"), _vector("ByOther", "ovec")]),
        _table(GlobalSecondaryIndexes=[]),
        _table(VectorIndexes=[]),
    ],
    ids=["gsi-created", "vector-index-created", "gsi-deleted", "vector-index-deleted"],
)
def test_one_index_created_or_deleted_alone_deploys(current):
    up = plan(RELEASED_TABLE, current)
    assert up.deployable, explain({DEFAULTS: up})
    assert len(up.steps) == 1


def test_two_index_creations_take_two_releases_whatever_their_kinds():
    current = _table(
        GlobalSecondaryIndexes=[_gsi("ByA", "a", "PK"), _gsi("ByB", "b")],
        VectorIndexes=[_vector("ByVector"), _vector("ByOther", "ovec")],
    )
    up = plan(RELEASED_TABLE, current)
    assert not up.deployable
    assert [str(s) for s in up.steps] == ["create global secondary index ByB", "create vector index ByOther"]


def test_a_deletion_and_a_creation_are_two_releases_new_index_first():
    up = plan(RELEASED_TABLE, _table(GlobalSecondaryIndexes=[_gsi("ByB", "b")]))
    assert not up.deployable
    assert [(s.op, s.name) for s in up.steps] == [("create", "ByB"), ("delete", "ByA")]


def test_a_vector_index_dimension_change_is_a_deletion_then_a_creation_and_a_reembedding():
    up = plan(RELEASED_TABLE, _table(VectorIndexes=[_vector("ByVector", dimensions=512)]))
    assert not up.deployable
    assert [(s.op, s.name) for s in up.steps] == [("delete", "ByVector"), ("create", "ByVector")]
    assert "Dimensions 256 -> 512" in up.steps[0].why
    assert up.reembed == ["ByVector (vec: 256 -> 512 dimensions)"]


@pytest.mark.parametrize(
    "change",
    [
        {"DistanceFunction": "DOT_PRODUCT"},
        {"SearchSchema": [{"AttributeName": "a", "SearchSchemaElementType": "HASH"}]},
        {"Projection": {"ProjectionType": "ALL"}},
        {"VectorAttribute": {"AttributeName": "other"}},
    ],
    ids=["metric", "search-schema", "projection", "attribute"],
)
def test_nothing_of_a_vector_index_changes_in_place(change):
    up = plan(RELEASED_TABLE, _table(VectorIndexes=[_vector("ByVector", **change)]))
    assert not up.deployable
    assert [(s.op, s.name) for s in up.steps] == [("delete", "ByVector"), ("create", "ByVector")]
    assert up.reembed == []


@pytest.mark.parametrize(
    "index",
    [
        _gsi("ByA", "b", "PK"),
        {**_gsi("ByA", "a", "PK"), "Projection": {"ProjectionType": "KEYS_ONLY"}},
    ],
    ids=["key-schema", "projection"],
)
def test_a_global_index_key_schema_or_projection_change_is_a_deletion_then_a_creation(index):
    up = plan(RELEASED_TABLE, _table(GlobalSecondaryIndexes=[index]))
    assert [(s.op, s.name) for s in up.steps] == [("delete", "ByA"), ("create", "ByA")]


def test_an_attribute_type_change_under_an_index_key_is_a_key_change():
    types = [
        {"AttributeName": n, "AttributeType": "N" if n == "a" else t["AttributeType"]}
        for n, t in ((d["AttributeName"], d) for d in RELEASED_TABLE["AttributeDefinitions"])
    ]
    up = plan(RELEASED_TABLE, _table(AttributeDefinitions=types))
    assert [(s.op, s.name) for s in up.steps] == [("delete", "ByA"), ("create", "ByA")]


@pytest.mark.parametrize(
    "change, says",
    [
        ({"KeySchema": [{"AttributeName": "PK", "KeyType": "HASH"}]}, "KeySchema"),
        ({"TableName": "precis-other"}, "TableName"),
        ({"LocalSecondaryIndexes": []}, "LocalSecondaryIndexes: ByN removed"),
        (
            {"LocalSecondaryIndexes": [{**_gsi("ByN", "PK", "n"), "Projection": {"ProjectionType": "KEYS_ONLY"}}]},
            "LocalSecondaryIndexes: ByN changed",
        ),
    ],
    ids=["key-schema", "table-name", "lsi-removed", "lsi-changed"],
)
def test_what_replaces_the_table_is_never_deployable(change, says):
    up = plan(RELEASED_TABLE, _table(**change))
    assert not up.deployable
    assert any(says in reason for reason in up.replaces)
    assert "replaces the table" in explain({DEFAULTS: up})


def test_a_stream_view_type_change_needs_the_stream_disabled_first():
    up = plan(RELEASED_TABLE, _table(StreamSpecification={"StreamViewType": "NEW_AND_OLD_IMAGES"}))
    assert not up.deployable
    assert "without StreamSpecification" in up.blockers[0]
    assert plan(RELEASED_TABLE, _table(StreamSpecification=None)).deployable


def test_vector_indexes_need_on_demand_billing():
    up = plan(RELEASED_TABLE, _table(BillingMode="PROVISIONED"))
    assert not up.deployable and "PAY_PER_REQUEST" in up.blockers[0]


def test_indexes_sharing_a_vector_attribute_change_dimension_deletions_first():
    old = _table(VectorIndexes=[_vector("ByOne", "tvec", 512), _vector("ByTwo", "tvec", 512)])
    new = _table(
        VectorIndexes=[_vector("ByOne", "tvec", 256), _vector("ByTwo", "tvec", 256), _vector("ByThree", "tvec", 256)]
    )
    up = plan(old, new)
    assert [(s.op, s.name) for s in up.steps] == [
        ("delete", "ByOne"),
        ("delete", "ByTwo"),
        ("create", "ByOne"),
        ("create", "ByTwo"),
        ("create", "ByThree"),
    ]
    mixed = plan(old, _table(VectorIndexes=[_vector("ByOne", "tvec", 512), _vector("ByTwo", "tvec", 256)]))
    assert any("must share its dimension" in b for b in mixed.blockers)


def test_what_changes_in_place_deploys():
    current = copy.deepcopy(RELEASED_TABLE)
    current["AttributeDefinitions"].append({"AttributeName": "unused", "AttributeType": "S"})
    current["GlobalSecondaryIndexes"][0]["ContributorInsightsSpecification"] = {"Enabled": True}
    current["VectorIndexes"][0]["Projection"]["NonKeyAttributes"] = ["id"]
    current["SSESpecification"] = {"SSEEnabled": True}
    up = plan(RELEASED_TABLE, current)
    assert up.deployable and up.steps == []


TEMPLATE = """
Parameters:
  EmbedDimensions: {Type: Number, Default: 256}
  Stage: {Type: String, Default: dev}
Resources:
  Table:
    Type: AWS::DynamoDB::Table
    Properties:
      TableName: !Sub precis-${Stage}
      BillingMode: PAY_PER_REQUEST
      AttributeDefinitions: [{AttributeName: PK, AttributeType: S}, {AttributeName: coll, AttributeType: S}]
      KeySchema: [{AttributeName: PK, KeyType: HASH}]
      VectorIndexes:
        - IndexName: ByVector
          VectorAttribute: {AttributeName: vec}
          Dimensions: !Ref EmbedDimensions
          DistanceFunction: COSINE
          SearchSchema: [{AttributeName: coll, SearchSchemaElementType: HASH}]
          Projection: {ProjectionType: KEYS_ONLY}
"""
SAMCONFIG = """
[default.deploy.parameters]
parameter_overrides = "Stage=dev EmbedDimensions={dev}"
[prod.deploy.parameters]
parameter_overrides = "Stage=prod EmbedDimensions={prod}"
"""


def test_a_parameter_an_environment_deploys_with_is_part_of_the_definition():
    before = definition(TEMPLATE, SAMCONFIG.format(dev=256, prod=256))
    assert before["Parameters"]["EmbedDimensions"] == {
        DEFAULTS: "256",
        "samconfig default": "256",
        "samconfig prod": "256",
    }
    after = definition(TEMPLATE, SAMCONFIG.format(dev=256, prod=1024))
    upgrades = check(before, after)
    assert [env for env, up in upgrades.items() if not up.deployable] == ["samconfig prod"]
    assert "[samconfig prod]" in explain(upgrades) and "256 -> 1024" in explain(upgrades)


# ---------------------------------------------------------------- template.yaml against the release


def test_template_table_deploys_over_the_released_one_in_one_update():
    message = explain(check(released(), working_tree()))
    assert not message, message


def _has_commit(commit: str) -> bool:
    return (
        subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=ROOT, capture_output=True).returncode == 0
    )


def test_the_record_is_what_record_writes_for_its_commit():
    recorded = released()
    if not _has_commit(recorded["commit"]):
        pytest.skip(f"{RELEASED.name}'s commit {recorded['commit'][:12]} is not in this clone")
    assert record(recorded["commit"]) == recorded, (
        f"{RELEASED.relative_to(ROOT)} was edited by hand: write it with `python -m deploy.table_upgrade record`"
    )


# ---------------------------------------------------------------- the repository's history


# Two changes a deployed stack could not take: message search by BM25 (ByMessageText deleted, ByConclusionTerms and
# ByMessageTerms created in one commit) and BM25's vector going from 512 to 256 slots (two Dimensions changed at once).
HISTORY = [
    (
        "a1177f0c5cab22ffd11185a78c3843f069169408",
        "b5c94b3432fb9c054d08428c6fc63409a0befbb1",
        [
            "create vector index ByConclusionTerms",
            "create vector index ByMessageTerms",
            "delete vector index ByMessageText (gone from template.yaml)",
        ],
        [],
    ),
    (
        "b5c94b3432fb9c054d08428c6fc63409a0befbb1",
        "dd8af0bab2bad3e4101732a5e61faf945b0e0bdb",
        [
            "delete vector index ByConclusionTerms",
            "delete vector index ByMessageTerms",
            "create vector index ByConclusionTerms",
            "create vector index ByMessageTerms",
        ],
        ["ByConclusionTerms (tvec: 512 -> 256 dimensions)", "ByMessageTerms (tvec: 512 -> 256 dimensions)"],
    ),
]


@pytest.mark.parametrize("before, after, steps, reembed", HISTORY, ids=["bm25-indexes", "bm25-dimensions"])
def test_the_checker_catches_the_historic_changes_no_stack_could_take(before, after, steps, reembed):
    if not (_has_commit(before) and _has_commit(after)):
        pytest.skip("this clone lacks the history")
    upgrades = check(at_commit(before), at_commit(after))
    for up in upgrades.values():
        assert not up.deployable
        assert [
            f"{s.op} {s.kind} {s.name}" + (f" ({s.why})" if s.why.startswith("gone") else "") for s in up.steps
        ] == steps
        assert up.reembed == reembed
