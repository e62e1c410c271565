"""Each function runs under its execution role locally: IAM's evaluation, what a call is authorized as, the roles SAM
generates from template.yaml, and a refused call failing as on AWS, in-process and in a worker."""

from __future__ import annotations

import json
import os

import pytest
from botocore.exceptions import ClientError

from local import iam
from local.iam import Request, Role, Statement
from local.template import TEMPLATE, load_template, template
from local.worker import FunctionPool, function_environment, function_role
from tests.handlers import call, handler_module, http_event

TABLE = "arn:aws:dynamodb:us-east-1:123456789012:table/precis-local"
BUCKET = "arn:aws:s3:::precis-local"


def role(*statements: dict) -> Role:
    return Role("r", tuple(Statement.of(s) for s in statements), "fn")


# ---------------------------------------------------------------- IAM's evaluation


def test_an_action_is_allowed_only_on_the_resources_a_statement_names():
    r = role({"Effect": "Allow", "Action": ["dynamodb:Query"], "Resource": [TABLE, f"{TABLE}/index/*"]})
    assert r.decide(Request("dynamodb:Query", TABLE)) == "Allow"
    assert r.decide(Request("dynamodb:Query", f"{TABLE}/index/ByVector")) == "Allow"
    assert r.decide(Request("dynamodb:Query", f"{TABLE}-other")) == "ImplicitDeny"
    assert r.decide(Request("dynamodb:Query", f"{TABLE}/stream/2026")) == "ImplicitDeny"
    assert r.decide(Request("dynamodb:PutItem", TABLE)) == "ImplicitDeny"


def test_actions_match_without_case_and_with_wildcards():
    r = role({"Effect": "Allow", "Action": "DynamoDB:Get*", "Resource": "*"})
    assert r.decide(Request("dynamodb:GetItem", TABLE)) == "Allow"
    assert r.decide(Request("dynamodb:Query", TABLE)) == "ImplicitDeny"


def test_an_explicit_deny_wins_over_any_allow():
    r = role(
        {"Effect": "Allow", "Action": "s3:*", "Resource": "*"},
        {"Effect": "Deny", "Action": "s3:DeleteObject", "Resource": f"{BUCKET}/audit/*"},
    )
    assert r.decide(Request("s3:DeleteObject", f"{BUCKET}/bodies/x")) == "Allow"
    assert r.decide(Request("s3:DeleteObject", f"{BUCKET}/audit/x")) == "Deny"


def test_a_wildcard_stays_inside_its_arn_segment_but_spans_the_resource_path():
    r = role({"Effect": "Allow", "Action": "bedrock:InvokeModel", "Resource": "arn:aws:bedrock:*::foundation-model/*"})
    assert r.decide(Request("bedrock:InvokeModel", "arn:aws:bedrock:eu-west-1::foundation-model/a.b:0")) == "Allow"
    # The region's `*` cannot swallow the account segment.
    assert (
        r.decide(Request("bedrock:InvokeModel", "arn:aws:bedrock:eu-west-1:123456789012:inference-profile/x"))
        == "ImplicitDeny"
    )


def test_conditions_read_the_request_keys_and_an_absent_key_matches_nothing():
    r = role(
        {
            "Effect": "Allow",
            "Action": "s3:ListBucketVersions",
            "Resource": BUCKET,
            "Condition": {"StringLike": {"s3:prefix": ["bodies/*", "audit/*"]}},
        }
    )
    assert r.decide(Request("s3:ListBucketVersions", BUCKET, {"s3:prefix": "bodies/ws/s"})) == "Allow"
    assert r.decide(Request("s3:ListBucketVersions", BUCKET, {"s3:prefix": "other/"})) == "ImplicitDeny"
    assert r.decide(Request("s3:ListBucketVersions", BUCKET)) == "ImplicitDeny"  # no prefix: the whole bucket
    negated = role(
        {
            "Effect": "Deny",
            "Action": "*",
            "Resource": "*",
            "Condition": {"StringNotEquals": {"aws:RequestedRegion": "us-east-1"}},
        }
    )
    assert negated.decide(Request("s3:GetObject", BUCKET)) == "Deny"  # a negated operator holds for an absent key
    if_exists = role(
        {"Effect": "Allow", "Action": "*", "Resource": "*", "Condition": {"StringEqualsIfExists": {"s3:prefix": "a"}}}
    )
    assert if_exists.decide(Request("s3:GetObject", BUCKET)) == "Allow"
    assert if_exists.decide(Request("s3:ListBucket", BUCKET, {"s3:prefix": "b"})) == "ImplicitDeny"


def test_leading_keys_name_the_partitions_an_item_action_may_touch():
    """dynamodb:LeadingKeys is an item's partition key (what the read functions' usage grant names); under
    ForAllValues a request that carries no key matches, as on AWS, which is why that grant lists UpdateItem alone."""
    r = role(
        {
            "Effect": "Allow",
            "Action": "dynamodb:UpdateItem",
            "Resource": TABLE,
            "Condition": {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["USAGE#*"]}},
        }
    )
    (usage,) = iam.requests_for(
        "dynamodb", "UpdateItem", {"TableName": "precis-local", "Key": {"PK": {"S": "USAGE#ws#2026-01"}}}, "us-east-1"
    )
    (workspace,) = iam.requests_for(
        "dynamodb", "UpdateItem", {"TableName": "precis-local", "Key": {"PK": {"S": "WS#ws"}}}, "us-east-1"
    )
    assert usage.context == {"dynamodb:LeadingKeys": "USAGE#ws#2026-01"}
    assert r.decide(usage) == "Allow"
    assert r.decide(workspace) == "ImplicitDeny"
    assert r.decide(Request("dynamodb:UpdateItem", TABLE)) == "Allow"  # ForAllValues over no values
    any_value = role(
        {**r.statements[0].document(), "Condition": {"ForAnyValue:StringLike": {"dynamodb:LeadingKeys": "U*"}}}
    )
    assert any_value.decide(Request("dynamodb:UpdateItem", TABLE)) == "ImplicitDeny"
    with pytest.raises(ValueError, match="ForEachValue"):
        Statement.of(
            {"Effect": "Allow", "Action": "*", "Resource": "*", "Condition": {"ForEachValue:StringLike": {"k": "v"}}}
        )


def test_a_statement_it_cannot_evaluate_is_refused_when_the_role_is_read():
    with pytest.raises(ValueError, match="NumericLessThan"):
        Statement.of(
            {"Effect": "Allow", "Action": "*", "Resource": "*", "Condition": {"NumericLessThan": {"s3:max-keys": "10"}}}
        )
    with pytest.raises(ValueError, match="cannot evaluate"):
        Statement.of({"Effect": "Allow", "Action": "*", "Resource": "*", "Principal": "*"})


def test_a_role_survives_its_json():
    r = template_roles()["SummarizeFunction"]
    assert Role.from_json(r.to_json()) == r


# ---------------------------------------------------------------- what a call is authorized as


def test_a_transaction_is_authorized_item_by_item_as_each_items_own_action():
    params = {
        "TransactItems": [
            {"Put": {"TableName": "precis-local"}},
            {"Update": {"TableName": "precis-local"}},
            {"ConditionCheck": {"TableName": "other"}},
            {"Delete": {"TableName": "precis-local"}},
        ]
    }
    assert [
        (r.action, r.resource.rsplit("/", 1)[1])
        for r in iam.requests_for("dynamodb", "TransactWriteItems", params, "us-east-1")
    ] == [
        ("dynamodb:PutItem", "precis-local"),
        ("dynamodb:UpdateItem", "precis-local"),
        ("dynamodb:ConditionCheckItem", "other"),
        ("dynamodb:DeleteItem", "precis-local"),
    ]


def test_an_index_read_is_authorized_on_the_index():
    (query,) = iam.requests_for(
        "dynamodb", "SearchVectors", {"TableName": "precis-local", "IndexName": "ByVector"}, "us-east-1"
    )
    assert query == Request("dynamodb:SearchVectors", f"{TABLE}/index/ByVector")


def test_s3_versions_and_batches_need_their_own_actions():
    def actions(operation, **params):
        return [
            (r.action, r.resource)
            for r in iam.requests_for("s3", operation, {"Bucket": "precis-local", **params}, "us-east-1")
        ]

    assert actions("GetObject", Key="bodies/a") == [("s3:GetObject", f"{BUCKET}/bodies/a")]
    assert actions("GetObject", Key="bodies/a", VersionId="v") == [("s3:GetObjectVersion", f"{BUCKET}/bodies/a")]
    assert actions("DeleteObjects", Delete={"Objects": [{"Key": "a"}, {"Key": "b", "VersionId": "v"}]}) == [
        ("s3:DeleteObject", f"{BUCKET}/a"),
        ("s3:DeleteObjectVersion", f"{BUCKET}/b"),
    ]
    assert actions("CopyObject", Key="bodies/new", CopySource={"Bucket": "precis-local", "Key": "bodies/old"}) == [
        ("s3:GetObject", f"{BUCKET}/bodies/old"),
        ("s3:PutObject", f"{BUCKET}/bodies/new"),
    ]
    (listing,) = iam.requests_for(
        "s3", "ListObjectVersions", {"Bucket": "precis-local", "Prefix": "audit/x"}, "us-east-1"
    )
    assert listing == Request("s3:ListBucketVersions", BUCKET, {"s3:prefix": "audit/x"})


def test_put_events_is_authorized_on_each_bus_its_entries_name():
    entries = [{"EventBusName": "precis-dev"}, {"EventBusName": "precis-dev"}, {"Source": "x"}]
    bus = "arn:aws:events:us-east-1:123456789012:event-bus/"
    assert iam.requests_for("events", "PutEvents", {"Entries": entries}, "us-east-1") == [
        Request("events:PutEvents", bus + "default"),
        Request("events:PutEvents", bus + "precis-dev"),
    ]
    r = role({"Effect": "Allow", "Action": "events:PutEvents", "Resource": bus + "precis-dev"})
    assert r.decide(Request("events:PutEvents", bus + "precis-dev")) == "Allow"
    assert r.decide(Request("events:PutEvents", bus + "default")) == "ImplicitDeny"


def test_a_model_reached_through_an_inference_profile_is_authorized_as_the_profile_and_its_route():
    profile, route = iam.requests_for(
        "bedrock-runtime", "Converse", {"modelId": "us.anthropic.claude-3-haiku"}, "us-west-2"
    )
    assert profile.resource == "arn:aws:bedrock:us-west-2:123456789012:inference-profile/us.anthropic.claude-3-haiku"
    assert route.resource == "arn:aws:bedrock:us-west-2::foundation-model/anthropic.claude-3-haiku"
    assert route.context == {"bedrock:InferenceProfileArn": profile.resource}
    (direct,) = iam.requests_for(
        "bedrock-runtime", "InvokeModel", {"modelId": "amazon.titan-embed-text-v2:0"}, "eu-west-1"
    )
    assert direct == Request(
        "bedrock:InvokeModel", "arn:aws:bedrock:eu-west-1::foundation-model/amazon.titan-embed-text-v2:0"
    )


# ---------------------------------------------------------------- the roles of template.yaml


def template_roles(environment: dict | None = None, text: str | None = None) -> dict[str, Role]:
    tpl = template() if text is None else _template_from(text)
    return iam.local_roles(tpl, environment or {}, text)


def _template_from(text: str):
    from deploy.template import parse

    tpl = load_template()
    tpl.raw = parse(text)
    return tpl


def test_each_function_may_do_what_its_policy_says_and_nothing_else():
    roles = template_roles()
    context, ingest, derive = roles["ContextFunction"], roles["IngestFunction"], roles["DeriveFunction"]
    assert context.decide(Request("dynamodb:Query", f"{TABLE}/index/ByStartTokens")) == "Allow"
    assert context.decide(Request("dynamodb:PutItem", TABLE)) == "ImplicitDeny"  # read-only by construction
    assert context.decide(Request("s3:PutObject", f"{BUCKET}/bodies/x")) == "ImplicitDeny"
    assert ingest.decide(Request("s3:PutObject", f"{BUCKET}/bodies/x")) == "Allow"
    assert ingest.decide(Request("s3:PutObject", f"{BUCKET}/audit/x")) == "ImplicitDeny"
    assert derive.decide(Request("dynamodb:BatchWriteItem", TABLE)) == "Allow"  # message search items
    wake = "arn:aws:sqs:us-east-1:123456789012:precis-derive-wake-local"
    assert derive.decide(Request("sqs:SendMessage", wake)) == "Allow"  # its quiet wake-ups
    assert context.decide(Request("sqs:SendMessage", wake)) == "ImplicitDeny"
    # SAM's own statements are there too: the managed policies it attaches.
    assert context.decide(Request("logs:PutLogEvents", "arn:aws:logs:us-east-1:123456789012:log-group:x")) == "Allow"


def test_bedrock_grants_follow_the_deployments_parameters():
    model = "arn:aws:bedrock:us-east-1::foundation-model/anthropic.claude-3-haiku-20240307-v1:0"
    openai = template_roles()["ChatFunction"]
    assert openai.decide(Request("bedrock:InvokeModel", model)) == "ImplicitDeny"
    bedrock = template_roles(
        {"PRECIS_LLM_PROVIDER": "bedrock", "PRECIS_LLM_MODEL": "anthropic.claude-3-haiku-20240307-v1:0"}
    )["ChatFunction"]
    assert bedrock.decide(Request("bedrock:InvokeModel", model)) == "Allow"
    assert bedrock.decide(Request("bedrock:InvokeModel", model.replace("haiku", "opus"))) == "ImplicitDeny"
    elsewhere = template_roles(
        {
            "PRECIS_LLM_PROVIDER": "bedrock",
            "PRECIS_BEDROCK_REGION": "eu-west-1",
            "PRECIS_LLM_MODEL": "anthropic.claude-3-haiku-20240307-v1:0",
        }
    )["ChatFunction"]
    assert elsewhere.decide(Request("bedrock:InvokeModel", model.replace("us-east-1", "eu-west-1"))) == "Allow"
    assert elsewhere.decide(Request("bedrock:InvokeModel", model)) == "ImplicitDeny"


def _without(text: str, grant: str, after: str) -> str:
    """template.yaml's text with `grant` taken out of the first statement list after `after`."""
    start = text.index(after)
    at = text.index(grant, start)
    return text[:at] + text[at:].replace(grant, "", 1)


def test_an_event_source_mapping_needs_its_functions_role_to_read_the_stream():
    text = TEMPLATE.read_text()
    broken = _without(text, "dynamodb:GetRecords, ", "  DeriveFunction:")
    assert broken != text
    with pytest.raises(ValueError, match=r"DeriveStream \(event-source mapping\).*dynamodb:GetRecords"):
        template_roles(text=broken)
    # The summarizer's dead-letter grant pointed at another queue: its mapping's on-failure destination is refused.
    wrong_queue = text.replace("Resource: !GetAtt SummarizeDLQ.Arn", "Resource: !GetAtt DeriveDLQ.Arn", 1)
    assert wrong_queue != text
    with pytest.raises(ValueError, match=r"SummarizeStream \(event-source mapping\).*sqs:SendMessage"):
        template_roles(text=wrong_queue)


# ---------------------------------------------------------------- a refused call, as on AWS


def test_a_context_read_fails_with_access_denied_when_the_role_lacks_query(aws, caplog):
    text = TEMPLATE.read_text()
    broken = _without(text, "dynamodb:Query, ", "  ContextFunction:")
    assert broken != text
    roles = template_roles(text=broken)
    assert call("POST", "/v3/workspaces", {"id": "w"}).status in (200, 201)
    assert call("POST", "/v3/workspaces/w/sessions", {"id": "s"}).status in (200, 201)
    assert call("GET", "/v3/workspaces/w/sessions/s/context").status == 200
    fn = handler_module("ContextFunction")
    _, event = http_event("GET", "/v3/workspaces/w/sessions/s/context")
    iam.enforce(roles["ContextFunction"])
    try:
        answer = fn.lambda_handler(event, _context())
    finally:
        iam.enforce(None)
    assert answer["statusCode"] == 500  # an AccessDenied is a bug in the deployment, not the caller's
    assert "AccessDeniedException" in caplog.text and "dynamodb:Query" in caplog.text


def _context():
    from local.lambda_context import LambdaContext

    return LambdaContext(function_name="precis-context-local", timeout_s=15)


DENIED_APP = """
import os
import boto3
from botocore.exceptions import ClientError

def handler(event, context):
    client = boto3.client("dynamodb")
    try:
        getattr(client, event["call"])(**event["params"])
    except ClientError as error:
        return error.response["Error"]["Code"]
    return "ok"
"""


@pytest.mark.parametrize("zygote", ["1", "0"])
def test_a_worker_runs_under_its_functions_role(tmp_path, moto_server, monkeypatch, zygote):
    """Whatever the function's code does, its calls are checked before they reach moto (forked or not)."""
    monkeypatch.setenv("PRECIS_LOCAL_ZYGOTE", zygote)
    (tmp_path / "app.py").write_text(DENIED_APP)
    real = template().functions["ContextFunction"]
    endpoint, _ = moto_server
    env = function_environment(template(), real, endpoint)
    from local.template import Function

    fn = Function("Fake", tmp_path, "app.handler", {}, timeout=10)
    env.update(
        PYTHONPATH=os.pathsep.join([str(tmp_path), env["PYTHONPATH"]]),
        _HANDLER="app.handler",
        LAMBDA_TASK_ROOT=str(tmp_path),
    )
    assert json.loads(env[iam.ROLE_VARIABLE]) == json.loads(function_role(template(), real).to_json())
    pool = FunctionPool(fn, env, size=1)
    try:
        put = pool.invoke(
            {"call": "put_item", "params": {"TableName": "precis-local", "Item": {"PK": {"S": "a"}, "SK": {"S": "b"}}}}
        )
        get = pool.invoke(
            {"call": "get_item", "params": {"TableName": "precis-local", "Key": {"PK": {"S": "a"}, "SK": {"S": "b"}}}}
        )
    finally:
        pool.close()
    assert put.payload == "AccessDeniedException"
    assert get.payload in ("ok", "ResourceNotFoundException")  # allowed: moto answers, whatever it holds


def test_the_tests_own_clients_are_an_administrators(aws):
    iam.enforce(role({"Effect": "Allow", "Action": "dynamodb:GetItem", "Resource": "*"}))
    try:
        aws["dynamodb"].describe_table(TableName="precis-local")  # exempt
        import boto3

        with pytest.raises(ClientError) as denied:
            boto3.client("dynamodb").describe_table(TableName="precis-local")
        assert denied.value.response["Error"]["Code"] == "AccessDeniedException"
    finally:
        iam.enforce(None)
