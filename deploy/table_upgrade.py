"""Whether template.yaml's table can be deployed over the last released one in one update, and the steps when it cannot.

A deployed stack is updated, never re-created, so what the table may become in one `sam deploy` is AWS's to say
(the pages each rule is read from):

- CloudFormation adds or deletes one global secondary index per update: "You can delete or add one global secondary
  index without interruption. If you do both in the same update ... the update fails" (GlobalSecondaryIndexes,
  https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-resource-dynamodb-table.html). DynamoDB's
  UpdateTable "can only perform one of the following operations at once" and creates or deletes "only one global
  secondary index per UpdateTable operation"
  (https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_UpdateTable.html). Vector indexes are added and
  removed by the same UpdateTable (VectorIndexUpdates,
  https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_VectorIndexUpdate.html): one index operation of
  either kind per deploy.
- A vector index's Dimensions, DistanceFunction, SearchSchema, Projection and VectorAttribute: "Update requires:
  Updates are not supported"
  (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-properties-dynamodb-table-vectorindex.html); so a
  global secondary index's KeySchema and Projection
  (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-properties-dynamodb-gsi.html). Such an index is
  deleted in one deploy and created in the next. "If multiple vector indexes reference the same attribute, they must
  all use the same number of dimensions"
  (https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_CreateVectorIndexAction.html): the old ones go
  before the new ones come.
- TableName, KeySchema and LocalSecondaryIndexes: "Update requires: Replacement" (aws-resource-dynamodb-table.html
  above), a new, empty table. Never by an upgrade.
- A stream's view type is the stream's: "You receive a ValidationException if you try to enable a stream on a table
  that already has a stream" (UpdateTable's StreamSpecification, API_UpdateTable.html above): disable it in one
  deploy, enable it with the new type in the next.
- "Vector indexes are not supported on provisioned capacity tables"
  (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/VectorSearchWorkingWith.html).
- While a new vector index backfills, "SearchVectors returns a ValidationException until backfilling finishes"; wait
  until DescribeTable shows it ACTIVE and not Backfilling
  (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/VectorSearchDataSync.html).

The released definition is data (deploy/released-table.json), recorded from template.yaml and samconfig.toml at a
release by `python -m deploy.table_upgrade record`; `python -m deploy.table_upgrade check [--from <commit>]` prints what
an upgrade takes. Parameters the table refers to (`!Ref EmbedDimensions`) are compared as each environment deploys
them: the template's defaults and each samconfig.toml environment's parameter_overrides.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from typing import Any

from deploy.template import ROOT, Tag, parse

RELEASED = ROOT / "deploy" / "released-table.json"
SAMCONFIG = ROOT / "samconfig.toml"
DEFAULTS = "template.yaml defaults"

# The table's properties an upgrade must respect; the rest (SSE, PITR, TTL, tags) change in place.
_TABLE_PROPERTIES = (
    "TableName",
    "BillingMode",
    "AttributeDefinitions",
    "KeySchema",
    "LocalSecondaryIndexes",
    "GlobalSecondaryIndexes",
    "VectorIndexes",
    "StreamSpecification",
)


# ---------------------------------------------------------------- reading a definition


def _json_form(value: Any) -> Any:
    """The template's short intrinsics (`!Ref X`) as CloudFormation's JSON form ({"Ref": "X"}), so they compare."""
    if isinstance(value, Tag):
        return {"Ref" if value.name == "Ref" else f"Fn::{value.name}": _json_form(value.value)}
    if isinstance(value, dict):
        return {k: _json_form(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_form(v) for v in value]
    return value


def _refs(value: Any) -> set[str]:
    if isinstance(value, dict):
        if set(value) == {"Ref"}:
            return {value["Ref"]}
        if set(value) == {"Fn::Sub"} and isinstance(value["Fn::Sub"], str):
            text = value["Fn::Sub"]
            return {part.split("}", 1)[0] for part in text.split("${")[1:]}
        return set().union(*(_refs(v) for v in value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*(_refs(v) for v in value)) if value else set()
    return set()


def environments(samconfig_text: str | None) -> dict[str, dict[str, str]]:
    """Each samconfig.toml environment's parameter_overrides (name -> value); none when there is no samconfig."""
    if not samconfig_text:
        return {}
    config = tomllib.loads(samconfig_text)
    envs = {}
    for env, commands in config.items():
        overrides = (commands.get("deploy", {}).get("parameters", {}) if isinstance(commands, dict) else {}).get(
            "parameter_overrides"
        )
        if overrides is None:
            continue
        tokens = shlex.split(overrides) if isinstance(overrides, str) else list(overrides)
        envs[f"samconfig {env}"] = dict(token.split("=", 1) for token in tokens if "=" in token)
    return envs


def definition(template_text: str, samconfig_text: str | None = None) -> dict[str, Any]:
    """The table as template.yaml declares it (intrinsics in JSON form), with the values each environment gives the
    parameters it refers to."""
    raw = parse(template_text)
    tables = [res for res in raw["Resources"].values() if res.get("Type") == "AWS::DynamoDB::Table"]
    if len(tables) != 1:
        raise ValueError(f"template: expected one AWS::DynamoDB::Table, found {len(tables)}")
    props = _json_form(tables[0]["Properties"])
    table = {k: props[k] for k in _TABLE_PROPERTIES if k in props}
    defaults = {name: str(p["Default"]) for name, p in raw.get("Parameters", {}).items() if "Default" in p}
    envs = {DEFAULTS: {}, **environments(samconfig_text)}
    parameters = {
        name: {env: overrides.get(name, defaults.get(name)) for env, overrides in envs.items()}
        for name in sorted(_refs(table))
        if name in raw.get("Parameters", {})
    }
    return {"Table": table, "Parameters": parameters}


def resolve(table: dict[str, Any], values: dict[str, str | None]) -> dict[str, Any]:
    """The table as an environment deploys it: parameters replaced by `values`, pseudo parameters left as written."""

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            if set(value) == {"Ref"} and values.get(value["Ref"]) is not None:
                text = values[value["Ref"]]
                return int(text) if text.lstrip("-").isdigit() else text
            if set(value) == {"Fn::Sub"} and isinstance(value["Fn::Sub"], str):
                text = value["Fn::Sub"]
                for name, val in values.items():
                    text = text.replace("${" + name + "}", str(val))
                return text
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    return walk(table)


def by_environment(record: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The recorded table resolved for each environment it names."""
    params = record.get("Parameters", {})
    envs = sorted({env for values in params.values() for env in values} | {DEFAULTS}, key=lambda e: e != DEFAULTS)
    return {
        env: resolve(record["Table"], {name: values.get(env, values.get(DEFAULTS)) for name, values in params.items()})
        for env in envs
    }


# ---------------------------------------------------------------- comparing two definitions (pure)


@dataclass(frozen=True)
class Step:
    """One index operation: one deploy, then wait until DescribeTable shows every index ACTIVE and none Backfilling."""

    op: str  # "create" | "delete"
    kind: str  # "global secondary index" | "vector index"
    name: str
    why: str = ""

    def __str__(self) -> str:
        return f"{self.op} {self.kind} {self.name}" + (f" ({self.why})" if self.why else "")


@dataclass
class Upgrade:
    """What deploying `current` over `released` takes."""

    steps: list[Step] = field(default_factory=list)
    replaces: list[str] = field(default_factory=list)  # changes that replace the table: never by an upgrade
    blockers: list[str] = field(default_factory=list)  # other changes AWS refuses, each with its way round
    reembed: list[str] = field(default_factory=list)  # vector indexes whose stored vectors must be written again

    @property
    def deployable(self) -> bool:
        """Whether one `sam deploy` takes a stack from the released table to this one."""
        return not self.replaces and not self.blockers and len(self.steps) <= 1


def _types(table: dict[str, Any]) -> dict[str, str]:
    return {a["AttributeName"]: a["AttributeType"] for a in table.get("AttributeDefinitions", [])}


def _keys(schema: list[dict[str, Any]], types: dict[str, str]) -> list[tuple[str, str, str | None]]:
    """A key schema with each attribute's type: a type change is a key change."""
    return [
        (k["AttributeName"], k.get("KeyType") or k.get("SearchSchemaElementType"), types.get(k["AttributeName"]))
        for k in schema
    ]


def _projection(projection: dict[str, Any] | None) -> tuple[str, tuple[str, ...]]:
    projection = projection or {}
    return projection.get("ProjectionType", "KEYS_ONLY"), tuple(sorted(projection.get("NonKeyAttributes", ())))


def _gsi_shape(index: dict[str, Any], types: dict[str, str]) -> dict[str, Any]:
    # Throughput, contributor insights and warm throughput change in place; key schema and projection do not.
    return {"KeySchema": _keys(index["KeySchema"], types), "Projection": _projection(index.get("Projection"))}


def _vector_shape(index: dict[str, Any], types: dict[str, str]) -> dict[str, Any]:
    return {
        "VectorAttribute": index["VectorAttribute"]["AttributeName"],
        "Dimensions": index["Dimensions"],
        "DistanceFunction": index["DistanceFunction"],
        "SearchSchema": _keys(index.get("SearchSchema", []), types),
        "Projection": _projection(index.get("Projection")),
    }


def _differences(old: dict[str, Any], new: dict[str, Any]) -> str:
    return ", ".join(f"{k} {old[k]!r} -> {new[k]!r}" for k in old if old[k] != new[k])


def plan(released: dict[str, Any], current: dict[str, Any]) -> Upgrade:
    """What deploying table `current` over a stack at table `released` takes (both resolved, as CloudFormation
    receives them): the index operations in an order AWS accepts, one per deploy, and what no deploy can do."""
    up = Upgrade()
    old_types, new_types = _types(released), _types(current)

    if released.get("TableName") != current.get("TableName"):
        up.replaces.append(f"TableName {released.get('TableName')!r} -> {current.get('TableName')!r}")
    if _keys(released["KeySchema"], old_types) != _keys(current["KeySchema"], new_types):
        up.replaces.append(
            f"KeySchema {_keys(released['KeySchema'], old_types)} -> {_keys(current['KeySchema'], new_types)}"
        )
    old_lsi = {i["IndexName"]: _gsi_shape(i, old_types) for i in released.get("LocalSecondaryIndexes", [])}
    new_lsi = {i["IndexName"]: _gsi_shape(i, new_types) for i in current.get("LocalSecondaryIndexes", [])}
    for name in sorted(old_lsi.keys() | new_lsi.keys()):
        if old_lsi.get(name) != new_lsi.get(name):
            what = (
                "added"
                if name not in old_lsi
                else "removed"
                if name not in new_lsi
                else f"changed: {_differences(old_lsi[name], new_lsi[name])}"
            )
            up.replaces.append(f"LocalSecondaryIndexes: {name} {what}")

    old_stream = (released.get("StreamSpecification") or {}).get("StreamViewType")
    new_stream = (current.get("StreamSpecification") or {}).get("StreamViewType")
    if old_stream and new_stream and old_stream != new_stream:
        up.blockers.append(
            f"StreamSpecification.StreamViewType {old_stream} -> {new_stream}: a stream's view type is set when it is "
            "enabled. Deploy once without StreamSpecification (the stream and its event-source mappings go; records "
            "written meanwhile are never delivered), then once with the new type"
        )

    if current.get("VectorIndexes") and current.get("BillingMode", "PROVISIONED") != "PAY_PER_REQUEST":
        up.blockers.append(
            f"BillingMode {current.get('BillingMode', 'PROVISIONED')}: vector indexes need PAY_PER_REQUEST"
        )

    creates, deletes, recreates = [], [], []
    for kind, prop, shape in (
        ("global secondary index", "GlobalSecondaryIndexes", _gsi_shape),
        ("vector index", "VectorIndexes", _vector_shape),
    ):
        old = {i["IndexName"]: shape(i, old_types) for i in released.get(prop, [])}
        new = {i["IndexName"]: shape(i, new_types) for i in current.get(prop, [])}
        creates += [(kind, n, new[n]) for n in new if n not in old]
        deletes += [Step("delete", kind, n, "gone from template.yaml") for n in old if n not in new]
        for n in (n for n in new if n in old and old[n] != new[n]):
            why = f"cannot change in place: {_differences(old[n], new[n])}"
            recreates.append((Step("delete", kind, n, why), Step("create", kind, n, "again, as template.yaml says")))
            if kind == "vector index" and old[n]["Dimensions"] != new[n]["Dimensions"]:
                up.reembed.append(
                    f"{n} ({new[n]['VectorAttribute']}: {old[n]['Dimensions']} -> {new[n]['Dimensions']} dimensions)"
                )

    # A vector index on an attribute that an index still standing holds at another dimension waits for its deletion.
    standing = {
        s["VectorAttribute"]: s["Dimensions"]
        for s in (_vector_shape(i, old_types) for i in released.get("VectorIndexes", []))
    }
    early = [
        c
        for c in creates
        if c[0] != "vector index" or standing.get(c[2]["VectorAttribute"], c[2]["Dimensions"]) == c[2]["Dimensions"]
    ]
    late = [c for c in creates if c not in early]
    # Order: new indexes first (the released code ignores them), then deletions, then what comes back changed.
    up.steps = (
        [Step("create", kind, n) for kind, n, _ in early]
        + [d for d, _ in recreates]
        + deletes
        + [c for _, c in recreates]
        + [
            Step("create", kind, n, "after the deletions: shares its vector attribute at another dimension")
            for kind, n, _ in late
        ]
    )

    dims: dict[str, set[int]] = {}
    for index in current.get("VectorIndexes", []):
        dims.setdefault(index["VectorAttribute"]["AttributeName"], set()).add(index["Dimensions"])
    for attribute, found in sorted(dims.items()):
        if len(found) > 1:
            up.blockers.append(
                f"VectorIndexes on {attribute} with dimensions {sorted(found)}: indexes sharing a "
                "vector attribute must share its dimension"
            )
    return up


# ---------------------------------------------------------------- the template against the record


def check(released: dict[str, Any], current: dict[str, Any]) -> dict[str, Upgrade]:
    """The upgrade each environment takes, from a recorded definition to another (both from `definition`)."""
    old, new = by_environment(released), by_environment(current)
    return {env: plan(old.get(env, old[DEFAULTS]), new.get(env, new[DEFAULTS])) for env in new.keys() | old.keys()}


def explain(upgrades: dict[str, Upgrade], released_from: str = "deploy/released-table.json") -> str:
    """The failure message: what differs, and the deploys that get a stack there."""
    lines, seen = [], {}
    for env, up in sorted(upgrades.items(), key=lambda kv: (kv[0] != DEFAULTS, kv[0])):
        if up.deployable:
            continue
        key = (tuple(map(str, up.steps)), tuple(up.replaces), tuple(up.blockers), tuple(up.reembed))
        seen.setdefault(key, (up, []))[1].append(env)
    if not seen:
        return ""
    lines.append(f"template.yaml's table cannot be deployed over the released one ({released_from}) in one update.")
    for up, envs in seen.values():
        lines.append(f"\n[{', '.join(envs)}]")
        for reason in up.replaces:
            lines.append(
                f"- replaces the table (a new, empty table; the data stays in the old one): {reason}. "
                "Revert it; moving data to a new table is an export/import, not an upgrade."
            )
        for reason in up.blockers:
            lines.append(f"- {reason}.")
        if len(up.steps) > 1 or up.blockers:
            lines.append(
                f"- {len(up.steps)} index operations; CloudFormation and DynamoDB take one per update. "
                f"Ship them as {len(up.steps)} releases, in this order:"
            )
            for i, step in enumerate(up.steps, 1):
                lines.append(f"    {i}. {step}")
            lines.append(
                "  Each release: template.yaml with the step applied; `sam deploy` every stage; wait until "
                "`aws dynamodb describe-table` shows each index ACTIVE and no Backfilling; record it with "
                "`python -m deploy.table_upgrade record`; then the next step."
            )
        for index in up.reembed:
            lines.append(
                f"- re-embed: {index}: stored vectors of the old dimension are not indexed; write every "
                "item's vector again."
            )
    lines.append('\nSee README "Upgrading a deployed stack".')
    return "\n".join(lines)


def at_commit(commit: str) -> dict[str, Any]:
    """The definition template.yaml and samconfig.toml gave at a commit of this repository."""

    def show(path: str) -> str | None:
        done = subprocess.run(["git", "show", f"{commit}:{path}"], cwd=ROOT, capture_output=True, text=True)
        if done.returncode and path == "template.yaml":
            raise LookupError(f"git show {commit}:{path}: {done.stderr.strip()}")
        return done.stdout if not done.returncode else None

    return definition(show("template.yaml"), show("samconfig.toml"))


def working_tree() -> dict[str, Any]:
    return definition((ROOT / "template.yaml").read_text(), SAMCONFIG.read_text() if SAMCONFIG.exists() else None)


def released() -> dict[str, Any]:
    return json.loads(RELEASED.read_text())


def record(commit: str = "HEAD") -> dict[str, Any]:
    """The release record of `commit`'s template.yaml and samconfig.toml."""
    sha = subprocess.run(
        ["git", "rev-parse", commit], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    return {"commit": sha, "recorded_by": "python -m deploy.table_upgrade record", **at_commit(sha)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.table_upgrade", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="write deploy/released-table.json from a released commit")
    rec.add_argument("commit", nargs="?", default="HEAD")
    chk = sub.add_parser("check", help="what deploying template.yaml takes over the release (or over --from)")
    chk.add_argument("--from", dest="source", help="a commit whose table a stack runs, instead of the record")
    chk.add_argument("--to", dest="target", help="a commit to upgrade to, instead of the working tree")
    args = parser.parse_args(argv)
    if args.command == "record":
        RELEASED.write_text(json.dumps(record(args.commit), indent=2) + "\n")
        print(f"recorded {RELEASED.relative_to(ROOT)}")
        return 0
    old = at_commit(args.source) if args.source else released()
    new = at_commit(args.target) if args.target else working_tree()
    message = explain(check(old, new), args.source or "deploy/released-table.json")
    print(message or "deployable in one update")
    return 1 if message else 0


if __name__ == "__main__":
    sys.exit(main())
