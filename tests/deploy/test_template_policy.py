"""Least privilege and hardening, read from template.yaml: what each function may touch, and what deploys encrypted.

`python -m tests.deploy.test_template_policy --sam-transform` prints the template as CloudFormation deploys it (SAM's
own transform, offline, in .venv-sam), for checkov (`make security`), so the roles SAM generates are scanned too.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

import pytest

from deploy.template import ROOT, TEMPLATE, Tag, parse
from local import iam
from local.template import load_template

RAW = parse(TEMPLATE.read_text())
RESOURCES: dict[str, Any] = RAW["Resources"]
PARAMETERS: dict[str, Any] = RAW.get("Parameters", {})
GLOBAL_FUNCTION: dict[str, Any] = RAW.get("Globals", {}).get("Function", {})
FUNCTIONS = {lid: res["Properties"] for lid, res in RESOURCES.items() if res["Type"] == "AWS::Serverless::Function"}
SAM_PYTHON = ROOT / ".venv-sam" / "bin" / "python"

TABLE = {"${Table.Arn}", "${Table.Arn}/index/*"}
# Every table action each function may be granted: what its code calls, nothing more. DynamoDB authorizes the items
# of a TransactWriteItems one by one (PutItem, ConditionCheckItem...), so transactions need no action of their own.
TABLE_ACTIONS = {
    "IngestFunction": {
        "dynamodb:GetItem",
        "dynamodb:Query",
        "dynamodb:BatchGetItem",
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:DeleteItem",
        "dynamodb:BatchWriteItem",
        "dynamodb:ConditionCheckItem",
        "dynamodb:SearchVectors",
    },
    # The read functions read; their one write is their model calls' usage (test_the_read_functions_cannot_write).
    "ContextFunction": {
        "dynamodb:GetItem",
        "dynamodb:Query",
        "dynamodb:BatchGetItem",
        "dynamodb:SearchVectors",
        "dynamodb:UpdateItem",
    },
    "ChatFunction": {
        "dynamodb:GetItem",
        "dynamodb:Query",
        "dynamodb:BatchGetItem",
        "dynamodb:SearchVectors",
        "dynamodb:UpdateItem",
    },
    "SummarizeFunction": {
        "dynamodb:GetItem",
        "dynamodb:Query",
        "dynamodb:BatchGetItem",
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:DeleteItem",
        "dynamodb:BatchWriteItem",
        "dynamodb:ConditionCheckItem",
    },
    # The deriver reads messages and members, writes conclusions in transactions, looks for near duplicates, and
    # writes and deletes message search items in batches (store/message_search/, store/records.py).
    "DeriveFunction": {
        "dynamodb:GetItem",
        "dynamodb:Query",
        "dynamodb:BatchGetItem",
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:DeleteItem",
        "dynamodb:BatchWriteItem",
        "dynamodb:ConditionCheckItem",
        "dynamodb:SearchVectors",
    },
    # The webhook sender finds an endpoint by id (a Query of the workspace's at most 10) and writes its delivery log.
    "WebhookFunction": {"dynamodb:Query", "dynamodb:UpdateItem"},
    # The MCP tools write what the ingest routes write and read what the read and chat routes read: ingest's actions.
    "McpFunction": {
        "dynamodb:GetItem",
        "dynamodb:Query",
        "dynamodb:BatchGetItem",
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:DeleteItem",
        "dynamodb:BatchWriteItem",
        "dynamodb:ConditionCheckItem",
        "dynamodb:SearchVectors",
    },
}
TABLE_WRITES = {
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
    "dynamodb:BatchWriteItem",
    "dynamodb:TransactWriteItems",
    "dynamodb:PartiQLInsert",
    "dynamodb:PartiQLUpdate",
    "dynamodb:PartiQLDelete",
    "dynamodb:RestoreTableFromBackup",
    "dynamodb:ImportTable",
}
# Every bucket action each function may be granted, by key prefix: message bodies and audit records.
BUCKET_ACCESS = {
    # The ingest function deletes the bodies of a batch DynamoDB refused.
    "IngestFunction": {
        ("s3:PutObject", "bodies/"),
        ("s3:GetObject", "bodies/"),
        ("s3:DeleteObject", "bodies/"),
        ("s3:DeleteObjectVersion", "bodies/"),
        # An import's upload (its presigned PUT is signed with this role) and the check that it is there.
        ("s3:PutObject", "imports/"),
        ("s3:GetObject", "imports/"),
        # A workspace's delete removes its exports' parts, every version.
        ("s3:DeleteObject", "exports/"),
        ("s3:DeleteObjectVersion", "exports/"),
    },
    # A finished export's presigned URLs are signed with the read function's role.
    "ContextFunction": {("s3:GetObject", "bodies/"), ("s3:GetObject", "exports/")},
    "ChatFunction": {("s3:GetObject", "bodies/")},
    # The summarizer writes audit records; its purge deletes every version of a deleted incarnation's objects.
    "SummarizeFunction": {
        ("s3:GetObject", "bodies/"),
        ("s3:PutObject", "bodies/"),
        ("s3:DeleteObject", "bodies/"),
        ("s3:DeleteObjectVersion", "bodies/"),
        ("s3:PutObject", "audit/"),
        ("s3:DeleteObject", "audit/"),
        ("s3:DeleteObjectVersion", "audit/"),
        # An export's steps write its parts; an import's read the upload, or an export's parts.
        ("s3:PutObject", "exports/"),
        ("s3:GetObject", "exports/"),
        ("s3:DeleteObject", "exports/"),
        ("s3:DeleteObjectVersion", "exports/"),
        ("s3:GetObject", "imports/"),
    },
    "DeriveFunction": {("s3:GetObject", "bodies/")},
    "WebhookFunction": set(),
    "McpFunction": {
        ("s3:PutObject", "bodies/"),
        ("s3:GetObject", "bodies/"),
        ("s3:DeleteObject", "bodies/"),
        ("s3:DeleteObjectVersion", "bodies/"),
    },
}
# Listing is a bucket action: allowed only to the purge, and only under the prefixes it purges.
BUCKET_LISTING = {
    "SummarizeFunction": ("s3:ListBucketVersions", {"bodies/*", "audit/*", "exports/*"}),
    "IngestFunction": ("s3:ListBucketVersions", {"exports/*"}),  # a workspace's delete, its exports' parts
}
SECRET_ARN = "arn:${AWS::Partition}:secretsmanager:${AWS::Region}:${AWS::AccountId}:secret:${SecretName}-*"
# Every queue action each function may be granted: the stream consumers dead-letter what they gave up on; the
# deriver alone sends its quiet wake-ups, and alone receives them (its SQS trigger).
WAKE = "${DeriveWakeQueue.Arn}"
# The functions that publish events (precis.events) send their webhook deliveries to the webhook queue.
PUBLISH = ("sqs:SendMessage", "${WebhookQueue.Arn}")
QUEUE_ACCESS = {
    "IngestFunction": {PUBLISH},
    "McpFunction": {PUBLISH},
    "SummarizeFunction": {("sqs:SendMessage", "${SummarizeDLQ.Arn}"), PUBLISH},
    "DeriveFunction": {
        PUBLISH,
        ("sqs:SendMessage", "${DeriveDLQ.Arn}"),
        ("sqs:SendMessage", WAKE),
        ("sqs:ReceiveMessage", WAKE),
        ("sqs:DeleteMessage", WAKE),
        ("sqs:GetQueueAttributes", WAKE),
    },
    # The webhook sender is its queue's one consumer, and delays a failed delivery's retry on it.
    "WebhookFunction": {
        (action, "${WebhookQueue.Arn}")
        for action in (
            "sqs:ReceiveMessage",
            "sqs:DeleteMessage",
            "sqs:GetQueueAttributes",
            "sqs:ChangeMessageVisibility",
        )
    },
}
# Bedrock: the functions that ask the chat model (LlmProvider bedrock) and the ones that embed (Embedder bedrock).
# Each grant exists only under its condition: an openai deployment's roles invoke no model.
BEDROCK_LLM = {"ChatFunction", "SummarizeFunction", "DeriveFunction", "McpFunction"}  # McpFunction: its chat tool
# SummarizeFunction: an import embeds the conclusions it writes.
BEDROCK_EMBED = {
    "IngestFunction",
    "ContextFunction",
    "ChatFunction",
    "DeriveFunction",
    "McpFunction",
    "SummarizeFunction",
}
FOUNDATION_MODEL = "arn:${AWS::Partition}:bedrock:${Region}::foundation-model/${%s}"
PROFILE = "arn:${AWS::Partition}:bedrock:${Region}:${AWS::AccountId}:inference-profile/${LlmModel}"
BEDROCK_GRANTS = {  # Sid -> (condition, resources, condition block)
    "BedrockModel": ("BedrockLlm", {FOUNDATION_MODEL % "LlmModel", PROFILE}, None),
    # A cross-region profile reaches its foundation models in other regions: only through that profile.
    "BedrockProfileRoutes": (
        "BedrockLlm",
        {"arn:${AWS::Partition}:bedrock:*::foundation-model/*"},
        {"StringEquals": {"bedrock:InferenceProfileArn": PROFILE}},
    ),
    "BedrockEmbeddings": ("BedrockEmbedder", {FOUNDATION_MODEL % "EmbedModel"}, None),
}
# Environment variable names made of these words carry secrets, unless the name says it holds the secret's name.
SENSITIVE_WORDS = {
    "SECRET",
    "SECRETS",
    "PASSWORD",
    "PASSWD",
    "TOKEN",
    "TOKENS",
    "KEY",
    "KEYS",
    "APIKEY",
    "CREDENTIAL",
    "CREDENTIALS",
    "PRIVATE",
}
SECRET_LOOKING = re.compile(r"^(sk-|eyJ|AKIA|ASIA|ghp_|xox[bap]-|-----BEGIN)")


def _text(value: Any) -> str:
    """A policy resource as text: `!GetAtt Table.Arn` is "${Table.Arn}", a `!Sub` its template."""
    if isinstance(value, Tag):
        if value.name == "GetAtt":
            return "${%s}" % (value.value if isinstance(value.value, str) else ".".join(value.value))  # noqa: UP031
        if value.name == "Ref":
            return "${%s}" % value.value  # noqa: UP031 - clearer than an f-string's ${{{...}}}
        if value.name == "Sub" and isinstance(value.value, str):
            return value.value
        if value.name == "Sub" and isinstance(value.value, list):  # [template, {Region, Model}]
            template, variables = value.value
            assert set(variables) == {"Region", "Model"} and _is_bedrock_region(variables["Region"]), value
            return template.replace("${Model}", "${%s}" % _model_or_default(variables["Model"]))  # noqa: UP031
        raise AssertionError(f"an intrinsic this test cannot read in a policy: {value!r}")
    assert isinstance(value, str), value
    return value


def _is_bedrock_region(value: Any) -> bool:
    """`!If [HasBedrockRegion, !Ref BedrockRegion, !Ref AWS::Region]`: the region the functions call."""
    if not (isinstance(value, Tag) and value.name == "If"):
        return False
    condition, chosen, otherwise = value.value
    return (
        condition == "HasBedrockRegion"
        and (chosen.name, chosen.value) == ("Ref", "BedrockRegion")
        and (otherwise.name, otherwise.value) == ("Ref", "AWS::Region")
    )


def _model_or_default(value: Any) -> str:
    """The parameter of `!If [HasXModel, !Ref XModel, !FindInMap [BedrockDefaults, Models, Key]]`: the model the
    functions ask for, the parameter's when set, else the same default the settings pick (see
    test_the_bedrock_defaults_are_the_ones_the_functions_ask_for)."""
    assert isinstance(value, Tag) and value.name == "If", value
    condition, chosen, otherwise = value.value
    assert (chosen.name, otherwise.name) == ("Ref", "FindInMap"), value
    assert condition == f"Has{chosen.value}" and RAW["Conditions"][condition].name == "Not", value
    assert otherwise.value == ["BedrockDefaults", "Models", {"LlmModel": "Llm", "EmbedModel": "Embed"}[chosen.value]]
    return chosen.value


def conditional(logical_id: str) -> dict[str, str]:
    """Sid -> condition of the function's statements that exist under a condition (`!If [C, statement, NoValue]`, or
    `!If [C, !Ref <a managed policy of the template>, NoValue]`)."""
    return {statement["Sid"]: condition for condition, statement in _policy_statements(logical_id) if condition}


def _listed(value: Any) -> list:
    return value if isinstance(value, list) else [value]


def _no_value(value: Any) -> bool:
    return isinstance(value, Tag) and (value.name, value.value) == ("Ref", "AWS::NoValue")


def shared_policy(name: str) -> dict[str, Any]:
    """A managed policy of the template: attached only by the functions that list it, so its statements are theirs."""
    resource = RESOURCES.get(name, {})
    assert resource.get("Type") == "AWS::IAM::ManagedPolicy", f"{name} is not a managed policy of the template"
    props = resource["Properties"]
    assert not {"Roles", "Users", "Groups"} & set(props), f"{name} is attached outside the functions' Policies"
    return props["PolicyDocument"]


def _policy_statements(logical_id: str) -> list[tuple[str | None, dict[str, Any]]]:
    """(condition or None, statement) for each statement of the function: its inline documents, and the managed
    policies of the template it lists (`!Ref P`, or `!If [C, !Ref P, !Ref AWS::NoValue]` for a policy under
    condition C). A managed policy of AWS or a SAM policy template would grant actions this test cannot see: refused."""
    props = FUNCTIONS[logical_id]
    assert "Role" not in props, f"{logical_id}: a role of its own escapes this test; extend it first"
    out: list[tuple[str | None, dict[str, Any]]] = []
    for policy in _listed(props.get("Policies", [])):
        if isinstance(policy, Tag):  # a managed policy of the template, perhaps under a condition
            condition = None
            if policy.name == "If":
                condition, policy, otherwise = policy.value
                assert condition in RAW["Conditions"] and _no_value(otherwise), (logical_id, policy)
            assert policy.name == "Ref", f"{logical_id}: {policy!r} is not a managed policy of the template"
            # The policy exists under the same condition as the grant: on when it is listed, off otherwise.
            assert RESOURCES[policy.value].get("Condition") == condition, (logical_id, policy.value, condition)
            out += [(condition, statement) for statement in shared_policy(policy.value)["Statement"]]
            continue
        assert isinstance(policy, dict) and set(policy) == {"Statement"}, (
            f"{logical_id}: {policy!r} is neither an inline statement list nor a managed policy of the template (AWS "
            "managed policies and SAM policy templates hide their actions from this test)"
        )
        for statement in policy["Statement"]:
            condition = None
            if isinstance(statement, Tag):  # a grant under a condition: the statement, or nothing
                assert statement.name == "If", statement
                condition, statement, otherwise = statement.value
                assert condition in RAW["Conditions"] and _no_value(otherwise), statement
            out.append((condition, statement))
    return out


def statements(logical_id: str) -> list[dict[str, Any]]:
    """The function's own IAM statements, inline or in the template's managed policies it lists."""
    return [statement for _, statement in _policy_statements(logical_id)]


def granted(logical_id: str) -> list[tuple[str, str]]:
    """(action, resource) for every Allow of the function."""
    pairs = []
    for statement in statements(logical_id):
        assert statement["Effect"] == "Allow", statement
        assert "NotAction" not in statement and "NotResource" not in statement, statement
        for action in _listed(statement["Action"]):
            for resource in _listed(statement["Resource"]):
                pairs.append((action, _text(resource)))
    return pairs


def environment(logical_id: str | None = None) -> dict[str, Any]:
    """The Globals environment, or a function's own."""
    props = GLOBAL_FUNCTION if logical_id is None else FUNCTIONS[logical_id]
    return props.get("Environment", {}).get("Variables", {})


def sub_text(value: Any) -> str:
    assert isinstance(value, Tag) and value.name == "Sub" and isinstance(value.value, str), value
    return value.value


def resources_of(kind: str) -> dict[str, dict[str, Any]]:
    return {lid: res.get("Properties", {}) for lid, res in RESOURCES.items() if res["Type"] == kind}


# ---------------------------------------------------------------- least privilege


def test_every_function_is_covered_by_the_allow_lists():
    assert set(FUNCTIONS) == set(TABLE_ACTIONS) == set(BUCKET_ACCESS)


def test_no_iam_resources_outside_the_functions_policies():
    """Roles and policies of their own would escape the per-function checks below. A managed policy of the template
    is read as part of each function that lists it, and is attached nowhere else."""
    kinds = {res["Type"] for res in RESOURCES.values()}
    assert not kinds & {"AWS::IAM::Role", "AWS::IAM::Policy", "AWS::IAM::User", "AWS::IAM::Group"}
    listed = {
        p.value
        for props in FUNCTIONS.values()
        for p in _listed(props.get("Policies", []))
        if isinstance(p, Tag) and p.name == "Ref"
    }
    listed |= {
        p.value[1].value
        for props in FUNCTIONS.values()
        for p in _listed(props.get("Policies", []))
        if isinstance(p, Tag) and p.name == "If"
    }
    shared = {lid for lid, res in RESOURCES.items() if res["Type"] == "AWS::IAM::ManagedPolicy"}
    assert shared == listed, f"managed policies no function lists: {sorted(shared - listed)}"
    for name in shared:
        shared_policy(name)


@pytest.mark.parametrize("logical_id", sorted(FUNCTIONS))
def test_every_action_is_spelled_out_and_every_resource_named(logical_id):
    # No statement of ours needs Resource "*". The ones AWS requires are added by SAM, not written here: X-Ray
    # (Tracing: Active) and CloudWatch Logs; test_sam_adds_only_the_managed_policies_aws_requires pins them.
    for action, resource in granted(logical_id):
        assert "*" not in action, f"{logical_id}: wildcard action {action}"
        assert resource != "*" and not resource.startswith("arn:*"), f"{logical_id}: {action} on {resource}"


STREAM_ACTIONS = {"dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator", "dynamodb:ListStreams"}
STREAM_READERS = {"SummarizeFunction", "DeriveFunction"}


@pytest.mark.parametrize("logical_id", sorted(FUNCTIONS))
def test_only_the_stream_consumer_reads_the_stream_and_only_this_tables(logical_id):
    reads = {(a, r) for a, r in granted(logical_id) if a in STREAM_ACTIONS}
    expected = {(a, "${Table.Arn}/stream/*") for a in STREAM_ACTIONS} if logical_id in STREAM_READERS else set()
    assert reads == expected


@pytest.mark.parametrize("logical_id", sorted(FUNCTIONS))
def test_each_function_gets_only_its_table_actions_on_the_table_alone(logical_id):
    table = {(a, r) for a, r in granted(logical_id) if a.startswith("dynamodb:") and a not in STREAM_ACTIONS}
    assert {a for a, _ in table} <= TABLE_ACTIONS[logical_id]
    assert {r for _, r in table} <= TABLE


@pytest.mark.parametrize("logical_id", ["ContextFunction", "ChatFunction"])
def test_the_read_functions_cannot_write(logical_id):
    """...but their usage counters: UpdateItem alone, on the usage partitions alone (dynamodb:LeadingKeys), a
    single-item action so the condition's key is always in the request (ForAllValues matches a request without it)."""
    from precis.store import keys

    (usage,) = [s for s in statements(logical_id) if s.get("Sid") == "UsageWrite"]
    assert _listed(usage["Action"]) == ["dynamodb:UpdateItem"] and [_text(r) for r in _listed(usage["Resource"])] == [
        "${Table.Arn}"
    ]
    assert usage["Condition"] == {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["USAGE#*"]}}
    assert keys.usage("ws", "2026-01-01", "chat", "m", 0)["PK"].startswith("USAGE#")
    assert not any(keys.workspace("ws")["PK"].startswith(p.rstrip("*")) for p in ["USAGE#*"])
    others = [s for s in statements(logical_id) if s.get("Sid") != "UsageWrite"]
    actions = {a for s in others for a in _listed(s["Action"])}
    assert not actions & TABLE_WRITES
    reads = ("dynamodb:Get", "dynamodb:BatchGet", "dynamodb:Query", "dynamodb:SearchVectors")
    table_actions = {a for a in actions if a.startswith("dynamodb:")}
    assert table_actions and all(a.startswith(reads) for a in table_actions), actions  # it reads, never writes
    assert not actions & {"s3:PutObject", "s3:DeleteObject", "s3:DeleteObjectVersion", "s3:PutObjectAcl"}
    assert not {a for a in actions if a.startswith(("sqs:", "sns:", "lambda:", "iam:"))}


@pytest.mark.parametrize("logical_id", sorted(FUNCTIONS))
def test_each_function_reaches_only_its_own_key_prefixes_in_the_bucket(logical_id):
    access = set()
    for statement in statements(logical_id):
        if [_text(r) for r in _listed(statement["Resource"])] == ["${Bucket.Arn}"]:
            action, prefixes = BUCKET_LISTING[logical_id]
            assert _listed(statement["Action"]) == [action], statement
            assert set(statement["Condition"]["StringLike"]["s3:prefix"]) == prefixes, statement
    for action, resource in granted(logical_id):
        if action.startswith("s3:") and resource != "${Bucket.Arn}":
            match = re.fullmatch(r"\$\{Bucket\.Arn\}/([a-z]+/)\*", resource)
            assert match, f"{logical_id}: {action} on {resource}, not on a key prefix of the bucket"
            access.add((action, match.group(1)))
    assert access <= BUCKET_ACCESS[logical_id]


@pytest.mark.parametrize("logical_id", sorted(FUNCTIONS))
def test_secrets_and_queues_are_reached_by_name(logical_id):
    for action, resource in granted(logical_id):
        service = action.split(":", 1)[0]
        assert service in {"dynamodb", "s3", "secretsmanager", "sqs", "bedrock", "events"}, (
            f"{logical_id}: unexpected {action}"
        )
        if service == "secretsmanager":
            assert (action, resource) == ("secretsmanager:GetSecretValue", SECRET_ARN)
    queues = {(action, resource) for action, resource in granted(logical_id) if action.startswith("sqs:")}
    assert queues == QUEUE_ACCESS.get(logical_id, set())


def test_each_queue_trigger_reports_its_failures_and_dead_letters_what_keeps_failing():
    mappings = [
        r["Properties"]
        for r in RESOURCES.values()
        if r["Type"] == "AWS::Lambda::EventSourceMapping"
        and r["Properties"]["EventSourceArn"].value.split(".")[0] in resources_of("AWS::SQS::Queue")
    ]
    assert [m["FunctionName"].value for m in mappings] == ["DeriveFunction", "WebhookFunction"]
    alarmed = {
        a["Dimensions"][0]["Value"].value.split(".")[0]
        for a in resources_of("AWS::CloudWatch::Alarm").values()
        if a.get("Namespace") == "AWS/SQS"
    }
    for mapping in mappings:
        assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
        queue = resources_of("AWS::SQS::Queue")[mapping["EventSourceArn"].value.split(".")[0]]
        # Longer than the function may run, so a wake-up in flight is not handed to a second invocation.
        assert queue["VisibilityTimeout"] >= FUNCTIONS[mapping["FunctionName"].value]["Timeout"]
        dead = queue["RedrivePolicy"]["deadLetterTargetArn"].value.split(".")[0]
        # (12 for webhooks: their retries span about a day, precis.webhooks.delivery.)
        assert 1 < queue["RedrivePolicy"]["maxReceiveCount"] <= 12 and dead in alarmed
        assert resources_of("AWS::SQS::Queue")[dead]["MessageRetentionPeriod"] >= queue["MessageRetentionPeriod"]
    quiet = PARAMETERS["DeriveQuietSeconds"]
    assert quiet["MaxValue"] <= 900 and quiet["MinValue"] == 0  # SQS delays a message 900 s at most


@pytest.mark.parametrize("logical_id", sorted(FUNCTIONS))
def test_events_are_put_on_the_stacks_own_bus_alone_by_the_publishers_and_only_when_it_has_one(logical_id):
    """EventBusName set: the functions that publish events (those that send to the webhook queue) may put them on the
    stack's bus (created under the same condition), and on no other; and are told its name."""
    puts = {(action, resource) for action, resource in granted(logical_id) if action.startswith("events:")}
    publisher = PUBLISH in QUEUE_ACCESS.get(logical_id, set())
    assert puts == ({("events:PutEvents", "${EventsBus.Arn}")} if publisher else set())
    assert {s: c for s, c in conditional(logical_id).items() if s == "EventBusPublish"} == (
        {"EventBusPublish": "HasEventBus"} if publisher else {}
    )
    assert RESOURCES["EventsBus"]["Condition"] == "HasEventBus"
    assert repr(RAW["Conditions"]["HasEventBus"]) == repr(Tag("Not", [Tag("Equals", [Tag("Ref", "EventBusName"), ""])]))
    named = environment(logical_id).get("PRECIS_EVENT_BUS_NAME")
    told = Tag("If", ["HasEventBus", Tag("Ref", "EventBusName"), Tag("Ref", "AWS::NoValue")])
    assert repr(named) == (repr(told) if publisher else "None")


@pytest.mark.parametrize("logical_id", sorted(FUNCTIONS))
def test_bedrock_is_granted_on_the_configured_models_alone_and_only_when_chosen(logical_id):
    expected = ({"BedrockModel", "BedrockProfileRoutes"} if logical_id in BEDROCK_LLM else set()) | (
        {"BedrockEmbeddings"} if logical_id in BEDROCK_EMBED else set()
    )
    bedrock = [s for s in statements(logical_id) if any(a.startswith("bedrock:") for a in _listed(s["Action"]))]
    assert {s["Sid"] for s in bedrock} == expected and len(bedrock) == len(expected)
    conditions = conditional(logical_id)
    for statement in bedrock:
        condition, resources, block = BEDROCK_GRANTS[statement["Sid"]]
        assert conditions.get(statement["Sid"]) == condition, statement["Sid"]
        # InvokeModel alone: nothing streams, so no InvokeModelWithResponseStream.
        assert _listed(statement["Action"]) == ["bedrock:InvokeModel"], statement
        assert {_text(r) for r in _listed(statement["Resource"])} == resources, statement
        if block is None:
            assert "Condition" not in statement
        else:
            ((operator, keys),) = statement["Condition"].items()
            assert {operator: {k: _text(v) for k, v in keys.items()}} == block
    assert conditions.keys() - {"EventBusPublish"} <= expected  # no other grant hangs on a condition (but the bus's)


def test_the_bedrock_conditions_follow_the_provider_parameters():
    conditions = RAW["Conditions"]
    for name, parameter in (("BedrockLlm", "LlmProvider"), ("BedrockEmbedder", "Embedder")):
        (ref, value) = conditions[name].value
        assert conditions[name].name == "Equals" and (ref.name, ref.value, value) == ("Ref", parameter, "bedrock")
        assert "bedrock" in PARAMETERS[parameter]["AllowedValues"] and PARAMETERS[parameter]["Default"] != "bedrock"


def test_the_bedrock_defaults_are_the_ones_the_functions_ask_for():
    """With LlmModel and EmbedModel empty (their defaults), the functions ask for settings.DEFAULT_MODELS' Bedrock
    models, and the template grants those."""
    from precis.settings import DEFAULT_MODELS, Settings

    assert PARAMETERS["LlmModel"]["Default"] == PARAMETERS["EmbedModel"]["Default"] == ""
    assert RAW["Mappings"]["BedrockDefaults"]["Models"] == {
        "Llm": DEFAULT_MODELS["bedrock"]["llm"],
        "Embed": DEFAULT_MODELS["bedrock"]["embed"],
    }
    on_bedrock = Settings(llm_provider="bedrock", embedder="bedrock")
    assert [on_bedrock.model_for(r) for r in ("summaries", "derive", "chat", "embed")] == [
        "us.amazon.nova-2-lite-v1:0"
    ] * 3 + ["amazon.titan-embed-text-v2:0"]


@pytest.mark.parametrize("logical_id", sorted(BEDROCK_LLM | BEDROCK_EMBED))
def test_a_bedrock_deployment_without_model_ids_may_invoke_the_default_models_alone(logical_id):
    """`LlmProvider=bedrock Embedder=bedrock` and no model: each role may make the requests Bedrock authorizes for
    the default models (the profile, then the foundation model it routes to), and no other model."""
    from precis.settings import DEFAULT_MODELS

    if not SAM_PYTHON.exists():
        pytest.skip("needs .venv-sam (make lint) for SAM's transform")
    role = iam.local_roles(
        load_template(),
        {
            "PRECIS_LLM_PROVIDER": "bedrock",
            "PRECIS_EMBEDDER": "bedrock",
            "PRECIS_LLM_MODEL": "",
            "PRECIS_EMBED_MODEL": "",
        },
    )[logical_id]
    calls = ([("Converse", DEFAULT_MODELS["bedrock"]["llm"])] if logical_id in BEDROCK_LLM else []) + (
        [("InvokeModel", DEFAULT_MODELS["bedrock"]["embed"])] if logical_id in BEDROCK_EMBED else []
    )
    for operation, model in calls:
        requests = iam.requests_for("bedrock-runtime", operation, {"modelId": model}, "us-east-1")
        assert [role.decide(r) for r in requests] == ["Allow"] * len(requests), (operation, model)
    for other in ("us.amazon.nova-pro-v1:0", "amazon.titan-embed-text-v1", "anthropic.claude-3-haiku-20240307-v1:0"):
        requests = iam.requests_for("bedrock-runtime", "Converse", {"modelId": other}, "us-east-1")
        assert "ImplicitDeny" in [role.decide(r) for r in requests], other


def sam_transform() -> dict[str, Any]:
    """template.yaml as CloudFormation deploys it: SAM's transform, offline, in .venv-sam (whose pins differ)."""
    return iam.sam_transform(TEMPLATE.read_text())


# The managed policies SAM attaches to the roles it generates: the only grants on Resource "*", none written by us.
# Every SAM role: logs:CreateLogStream and PutLogEvents (and CreateLogGroup) on "*"; the template creates the log
# groups themselves, with retention.
_BASIC = "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole"
# From Tracing: Active. X-Ray's write actions (PutTraceSegments, PutTelemetryRecords, GetSamplingRules...) support no
# resource-level permissions: AWS requires "*".
_XRAY = "arn:aws:iam::aws:policy/AWSXrayWriteOnlyAccess"
# No AWSLambdaDynamoDBExecutionRole (stream reads on "*", any stream in the account): the stream trigger is an
# event-source mapping of its own, and the summarizer's policy names this table's stream alone.
MANAGED_POLICIES = {
    "IngestFunctionRole": {_BASIC, _XRAY},
    "ContextFunctionRole": {_BASIC, _XRAY},
    "ChatFunctionRole": {_BASIC, _XRAY},
    "SummarizeFunctionRole": {_BASIC, _XRAY},
    "DeriveFunctionRole": {_BASIC, _XRAY},
    "McpFunctionRole": {_BASIC, _XRAY},
    "WebhookFunctionRole": {_BASIC, _XRAY},
    "DeriveFunctionFlushRole": set(),  # EventBridge Scheduler's: lambda:InvokeFunction on the deriver alone
}
# The roles SAM makes for services other than Lambda, and the one thing each may do.
SERVICE_ROLES = {
    "DeriveFunctionFlushRole": (
        "scheduler.amazonaws.com",
        "lambda:InvokeFunction",
        {"Fn::GetAtt": ["DeriveFunction", "Arn"]},
    )
}


@pytest.fixture(scope="module")
def deployed() -> dict[str, Any]:
    if not SAM_PYTHON.exists():
        pytest.skip("needs .venv-sam (make lint) for SAM's transform")
    return sam_transform()


def _as_json(value: Any) -> Any:
    """A policy list entry as SAM's transform writes it (`!Ref P` is {"Ref": "P"})."""
    if isinstance(value, Tag):
        return {"Ref" if value.name == "Ref" else f"Fn::{value.name}": _as_json(value.value)}
    return [_as_json(v) for v in value] if isinstance(value, list) else value


def test_sam_adds_only_the_managed_policies_aws_requires(deployed):
    roles = {lid: r["Properties"] for lid, r in deployed["Resources"].items() if r["Type"] == "AWS::IAM::Role"}
    aws = {lid: {a for a in p.get("ManagedPolicyArns", []) if isinstance(a, str)} for lid, p in roles.items()}
    assert aws == MANAGED_POLICIES
    # The rest are the template's own managed policies, exactly as each function lists them.
    for lid, props in roles.items():
        ours = [a for a in props.get("ManagedPolicyArns", []) if not isinstance(a, str)]
        function = FUNCTIONS.get(lid.removesuffix("Role"), {})
        assert ours == [_as_json(p) for p in _listed(function.get("Policies", [])) if isinstance(p, Tag)], lid
    for lid, resource in deployed["Resources"].items():
        if resource["Type"] == "AWS::IAM::ManagedPolicy":
            assert not {"Roles", "Users", "Groups"} & set(resource["Properties"]), lid
            for statement in resource["Properties"]["PolicyDocument"]["Statement"]:
                assert statement["Effect"] == "Allow" and "NotAction" not in statement, (lid, statement)
                assert all("*" not in a for a in _listed(statement["Action"])), (lid, statement)
                assert "*" not in _listed(statement["Resource"]), (lid, statement)
    for lid, props in roles.items():
        (assume,) = props["AssumeRolePolicyDocument"]["Statement"]
        if lid in SERVICE_ROLES:
            service, action, resource = SERVICE_ROLES[lid]
            assert assume["Principal"] == {"Service": [service]}, lid
            (policy,) = props["Policies"]
            assert policy["PolicyDocument"]["Statement"] == [
                {"Action": action, "Effect": "Allow", "Resource": resource}
            ], lid
            continue
        assert assume["Principal"] == {"Service": ["lambda.amazonaws.com"]}, lid
        for policy in props.get("Policies", []):  # ours, and the ones SAM writes (the DLQ destination's)
            for statement in policy["PolicyDocument"]["Statement"]:
                if set(statement) == {"Fn::If"}:  # a Bedrock grant, under its condition
                    condition, statement, otherwise = statement["Fn::If"]
                    assert condition in ("BedrockLlm", "BedrockEmbedder") and otherwise == {"Ref": "AWS::NoValue"}
                assert statement["Effect"] == "Allow" and "NotAction" not in statement, (lid, statement)
                assert all("*" not in a for a in _listed(statement["Action"])), (lid, statement)
                assert "*" not in _listed(statement["Resource"]), (lid, statement)


# ---------------------------------------------------------------- encryption and transport


def test_data_at_rest_is_encrypted_everywhere():
    for lid, props in resources_of("AWS::DynamoDB::Table").items():
        assert props["SSESpecification"]["SSEEnabled"] is True, lid
        assert props["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"] is True, lid
    for lid, props in resources_of("AWS::S3::Bucket").items():
        (rule,) = props["BucketEncryption"]["ServerSideEncryptionConfiguration"]
        assert rule["ServerSideEncryptionByDefault"]["SSEAlgorithm"] in {"AES256", "aws:kms", "aws:kms:dsse"}, lid
    queues = resources_of("AWS::SQS::Queue")
    assert queues
    for lid, props in queues.items():
        assert props.get("SqsManagedSseEnabled") is True or props.get("KmsMasterKeyId"), lid


def test_buckets_are_private_and_tls_only():
    policies = {p["Bucket"].value: p["PolicyDocument"] for p in resources_of("AWS::S3::BucketPolicy").values()}
    for lid, props in resources_of("AWS::S3::Bucket").items():
        assert props["PublicAccessBlockConfiguration"] == {
            "BlockPublicAcls": True,
            "BlockPublicPolicy": True,
            "IgnorePublicAcls": True,
            "RestrictPublicBuckets": True,
        }
        assert props["OwnershipControls"]["Rules"] == [{"ObjectOwnership": "BucketOwnerEnforced"}]  # no ACLs
        denials = [
            s
            for s in policies[lid]["Statement"]
            if s["Effect"] == "Deny"
            and s.get("Condition")
            in ({"Bool": {"aws:SecureTransport": "false"}}, {"Bool": {"aws:SecureTransport": False}})
        ]
        assert denials, f"{lid}: no statement denies requests without TLS"
        (deny,) = denials
        assert deny["Principal"] == "*" and deny["Action"] == "s3:*"
        assert {_text(r) for r in deny["Resource"]} == {f"${{{lid}.Arn}}", f"${{{lid}.Arn}}/*"}


# ---------------------------------------------------------------- operations


def test_every_function_logs_to_a_log_group_with_retention():
    groups = resources_of("AWS::Logs::LogGroup")
    assert all("RetentionInDays" in props for props in groups.values())
    names = {sub_text(props["LogGroupName"]) for props in groups.values()}
    for lid, props in FUNCTIONS.items():
        # Lambda writes to /aws/lambda/<FunctionName>; without a fixed name it would make a group of its own,
        # kept forever.
        assert f"/aws/lambda/{sub_text(props['FunctionName'])}" in names, lid
    retention = PARAMETERS["LogRetentionDays"]
    assert retention["Default"] in retention["AllowedValues"] and min(retention["AllowedValues"]) >= 1


def test_the_api_is_throttled_and_its_access_logged():
    apis = resources_of("AWS::Serverless::HttpApi")
    assert apis and not resources_of("AWS::Serverless::Api")
    for lid, props in apis.items():
        settings = props["DefaultRouteSettings"]
        for limit in ("ThrottlingRateLimit", "ThrottlingBurstLimit"):
            value = settings[limit]
            if getattr(value, "name", None) == "Ref":  # a parameter: its default and its floor are positive
                value = PARAMETERS[value.value]
                assert value["MinValue"] > 0 and value["Default"] >= value["MinValue"], (lid, limit)
            else:
                assert value > 0, (lid, limit)
        target = props["AccessLogSettings"]["DestinationArn"]
        assert target.name == "GetAtt" and target.value.split(".")[0] in resources_of("AWS::Logs::LogGroup"), lid


@pytest.mark.parametrize(
    "consumer",
    sorted(
        {
            r["Properties"]["FunctionName"].value
            for r in RESOURCES.values()
            if r["Type"] == "AWS::Lambda::EventSourceMapping"
            and r["Properties"]["EventSourceArn"].value.split(".")[0] not in resources_of("AWS::SQS::Queue")
        }
    ),
)
def test_each_stream_consumer_has_reserved_concurrency(consumer):
    reserved = FUNCTIONS[consumer].get("ReservedConcurrentExecutions")
    if isinstance(reserved, Tag):  # a parameter: its default and its floor
        assert reserved.name == "Ref"
        parameter = PARAMETERS[reserved.value]
        reserved = parameter["Default"]
        assert parameter["MinValue"] >= 1
    assert isinstance(reserved, int) and reserved >= 10  # ParallelizationFactor 10: one shard's batches at least


# ---------------------------------------------------------------- auth and secrets


def test_auth_is_always_on_where_it_deploys():
    from precis.settings import _env_bool

    value = environment()["PRECIS_AUTH"]
    assert value == "true" and _env_bool(value)  # a literal: no !Ref, !If or !Sub, so no parameter can turn it off
    assert all("PRECIS_AUTH" not in environment(lid) for lid in FUNCTIONS)
    assert not [name for name in PARAMETERS if "AUTH" in name.upper()]
    assert all(fn.environment["PRECIS_AUTH"] == "true" for fn in load_template().functions.values())


def _variables() -> list[tuple[str, str, Any]]:
    return [("Globals", k, v) for k, v in environment().items()] + [
        (lid, k, v) for lid in FUNCTIONS for k, v in environment(lid).items()
    ]


def test_no_secret_is_in_an_environment_variable():
    for owner, name, value in _variables():
        counted = (
            isinstance(value, Tag) and value.name == "Ref" and PARAMETERS.get(value.value, {}).get("Type") == "Number"
        )
        if set(name.upper().split("_")) & SENSITIVE_WORDS and not counted:  # a number of tokens is no token
            # Only the secret's name may be here (PRECIS_SECRET_NAME); the value is read at run time.
            assert name.endswith(("_NAME", "_ARN")), f"{owner}: {name} looks like it carries a secret"
            assert isinstance(value, Tag) and value.name == "Ref" and value.value in PARAMETERS, (owner, name)
        if isinstance(value, str):
            assert not SECRET_LOOKING.match(value), f"{owner}: {name} holds what looks like a credential"
        refs = [value.value] if isinstance(value, Tag) and value.name == "Ref" else []
        assert not [r for r in refs if PARAMETERS.get(r, {}).get("NoEcho")], f"{owner}: {name} holds a NoEcho value"
    assert "PRECIS_JWT_SECRET" not in {name for _, name, _ in _variables()}  # deployed: Secrets Manager only


def test_events_are_never_logged():
    # A logged event carries the Authorization header and the messages' content.
    assert environment()["POWERTOOLS_LOGGER_LOG_EVENT"] == "false"
    assert all("POWERTOOLS_LOGGER_LOG_EVENT" not in environment(lid) for lid in FUNCTIONS)


if __name__ == "__main__":
    if sys.argv[1:] != ["--sam-transform"]:
        sys.exit("usage: python -m tests.deploy.test_template_policy --sam-transform > template.json")
    json.dump(sam_transform(), sys.stdout, indent=1)
