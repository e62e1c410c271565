"""IAM locally: each function's calls checked against its execution role, as template.yaml declares it.

The roles are the ones SAM generates (`sam_roles`: SAM's own transform, offline, in .venv-sam, so a SAM policy
template expands as SAM expands it), their intrinsics resolved for the local deployment (its parameters, so an
`!If [BedrockLlm, ...]` grant exists only when the local stack runs Bedrock; the local table's, bucket's and queues'
ARNs), with the statements of the template's own managed policies each role lists (`!Ref P`, or under `!If`). A
worker enforces its role at its botocore clients (`enforce`): before a request leaves, its IAM requests
(`requests_for`: the action and resource each call is authorized as, item by item for a transaction) are evaluated as
IAM does (`Role.decide`: an explicit Deny wins, else an Allow, else the implicit deny), and a refused call fails with
the service's AccessDenied error, as on AWS, without reaching moto. The event-source mappings' own permissions
(reading the stream, receiving from the queue, sending to the on-failure destination) are checked with the function's
role by the pollers (`check_mapping`), and the schedules' with the role SAM makes for them.

Not modelled: resource-based policies (the template has none that grant), permission boundaries, SCPs, session
policies; condition keys other than those a request here sets (`requests_for`), which read as absent, as IAM reads
a key the request does not carry.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ACCOUNT = "123456789012"  # moto's, and LocalNames'
# The documents of the AWS managed policies SAM attaches to a function's role (AWS publishes them; nothing here
# calls their services locally, but a role is what it is).
MANAGED_POLICIES: dict[str, list[dict[str, Any]]] = {
    "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole": [
        {
            "Effect": "Allow",
            "Action": ["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents"],
            "Resource": "*",
        }
    ],
    "arn:aws:iam::aws:policy/AWSXrayWriteOnlyAccess": [
        {
            "Effect": "Allow",
            "Action": [
                "xray:PutTraceSegments",
                "xray:PutTelemetryRecords",
                "xray:GetSamplingRules",
                "xray:GetSamplingTargets",
                "xray:GetSamplingStatisticSummaries",
            ],
            "Resource": "*",
        }
    ],
}


class AccessDenied(Exception):
    """A request the role does not allow; the message is IAM's."""


# ---------------------------------------------------------------- evaluation


def _arn_like(pattern: str, value: str) -> bool:
    """IAM's ARN matching: `*` and `?` within a segment (colon-separated); the resource part (the sixth segment and
    what follows) may hold colons and slashes, and `*` there spans them."""
    pattern_parts, value_parts = pattern.split(":", 5), value.split(":", 5)
    if len(pattern_parts) != len(value_parts):
        return pattern == "*" or (
            len(pattern_parts) < 6 and pattern.endswith("*") and fnmatch.fnmatchcase(value, pattern)
        )
    return all(fnmatch.fnmatchcase(v, p) for p, v in zip(pattern_parts, value_parts))


def _string_like(pattern: str, value: str) -> bool:
    # fnmatch also reads [...] as a class; IAM has only * and ?, so brackets are matched literally.
    return fnmatch.fnmatchcase(value, pattern.replace("[", "[[]"))


def _resource_matches(pattern: str, resource: str) -> bool:
    if pattern == "*":
        return True
    return _arn_like(pattern.replace("[", "[[]"), resource) if pattern.startswith("arn:") else pattern == resource


def _action_matches(pattern: str, action: str) -> bool:
    return fnmatch.fnmatchcase(action.lower(), pattern.lower().replace("[", "[[]"))


_OPERATORS = {
    "StringEquals": lambda want, got: want == got,
    "StringNotEquals": lambda want, got: want != got,
    "StringEqualsIgnoreCase": lambda want, got: want.lower() == got.lower(),
    "StringNotEqualsIgnoreCase": lambda want, got: want.lower() != got.lower(),
    "StringLike": lambda want, got: _string_like(want, got),
    "StringNotLike": lambda want, got: not _string_like(want, got),
    "ArnEquals": lambda want, got: want == got,
    "ArnLike": lambda want, got: _arn_like(want, got),
    "ArnNotEquals": lambda want, got: want != got,
    "ArnNotLike": lambda want, got: not _arn_like(want, got),
    "Bool": lambda want, got: want.lower() == got.lower(),
}
_NEGATED = {"StringNotEquals", "StringNotEqualsIgnoreCase", "StringNotLike", "ArnNotEquals", "ArnNotLike"}


def _condition_holds(operator: str, key: str, wanted: list[str], context: Mapping[str, str]) -> bool:
    qualifier, _, operator = operator.rpartition(":")  # ForAllValues: / ForAnyValue: over a key's values
    if qualifier == "ForAllValues" and key not in context:
        return True  # IAM: every value of no values matches (why a statement pairs it with a key always sent)
    if operator == "Null":  # "true": the key must be absent; "false": present
        return (key not in context) == (str(wanted[0]).lower() == "true")
    if_exists = operator.endswith("IfExists")
    base = operator[: -len("IfExists")] if if_exists else operator
    got = context.get(key)
    if got is None:  # IAM: an absent key matches only ...IfExists and the negated operators
        return if_exists or base in _NEGATED
    test = _OPERATORS[base]
    if base in _NEGATED:  # a negated operator holds when no value matches its positive form
        return all(test(str(w), got) for w in wanted)
    return any(test(str(w), got) for w in wanted)


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


@dataclass(frozen=True)
class Statement:
    effect: str
    actions: tuple[str, ...] = ()
    not_actions: tuple[str, ...] = ()
    resources: tuple[str, ...] = ()
    not_resources: tuple[str, ...] = ()
    conditions: tuple[tuple[str, str, tuple[str, ...]], ...] = ()  # (operator, key, values)
    sid: str = ""

    @classmethod
    def of(cls, doc: Mapping[str, Any]) -> Statement:
        """A statement from its policy-document form; ValueError for what this evaluator cannot honour."""
        unknown = set(doc) - {"Sid", "Effect", "Action", "NotAction", "Resource", "NotResource", "Condition"}
        if unknown or doc.get("Effect") not in ("Allow", "Deny"):
            raise ValueError(f"an IAM statement the local stack cannot evaluate: {doc!r}")
        conditions = []
        for operator, keys in (doc.get("Condition") or {}).items():
            qualifier, _, base = operator.rpartition(":")
            base = base.removesuffix("IfExists")
            if (base not in _OPERATORS and base != "Null") or qualifier not in ("", "ForAllValues", "ForAnyValue"):
                raise ValueError(f"IAM condition operator {operator!r} is not modelled locally (statement {doc!r})")
            for key, values in keys.items():
                conditions.append((operator, key, tuple(str(v) for v in _listed(values))))
        return cls(
            doc["Effect"],
            tuple(_listed(doc.get("Action", []))),
            tuple(_listed(doc.get("NotAction", []))),
            tuple(_listed(doc.get("Resource", []))),
            tuple(_listed(doc.get("NotResource", []))),
            tuple(conditions),
            str(doc.get("Sid", "")),
        )

    def applies(self, action: str, resource: str, context: Mapping[str, str]) -> bool:
        if self.actions and not any(_action_matches(p, action) for p in self.actions):
            return False
        if self.not_actions and any(_action_matches(p, action) for p in self.not_actions):
            return False
        if self.resources and not any(_resource_matches(p, resource) for p in self.resources):
            return False
        if self.not_resources and any(_resource_matches(p, resource) for p in self.not_resources):
            return False
        return all(_condition_holds(op, key, list(values), context) for op, key, values in self.conditions)

    def document(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"Effect": self.effect}
        for name, value in (
            ("Sid", self.sid),
            ("Action", self.actions),
            ("NotAction", self.not_actions),
            ("Resource", self.resources),
            ("NotResource", self.not_resources),
        ):
            if value:
                doc[name] = list(value) if isinstance(value, tuple) else value
        if self.conditions:
            block: dict[str, dict[str, list[str]]] = {}
            for operator, key, values in self.conditions:
                block.setdefault(operator, {})[key] = list(values)
            doc["Condition"] = block
        return doc


@dataclass(frozen=True)
class Request:
    """One IAM authorization a call needs: an action on a resource, with the request's condition keys."""

    action: str
    resource: str
    context: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Role:
    name: str  # the role's name (its ARN's last part), for IAM's message
    statements: tuple[Statement, ...]
    session: str = ""  # the assumed-role session: Lambda names it after the function

    def decide(self, request: Request) -> str:
        """ "Allow", "Deny" (an explicit deny) or "ImplicitDeny", as IAM evaluates identity-based policies."""
        applying = [s for s in self.statements if s.applies(request.action, request.resource, request.context)]
        if any(s.effect == "Deny" for s in applying):
            return "Deny"
        return "Allow" if applying else "ImplicitDeny"

    def check(self, requests: Iterable[Request]) -> None:
        """AccessDenied naming the first request the role does not allow."""
        for request in requests:
            decision = self.decide(request)
            if decision != "Allow":
                why = (
                    "with an explicit deny in an identity-based policy"
                    if decision == "Deny"
                    else f"because no identity-based policy allows the {request.action} action"
                )
                raise AccessDenied(
                    f"User: arn:aws:sts::{ACCOUNT}:assumed-role/{self.name}/{self.session or self.name}"
                    f" is not authorized to perform: {request.action} on resource: {request.resource} "
                    f"{why}"
                )

    def to_json(self) -> str:
        return json.dumps(
            {"name": self.name, "session": self.session, "statements": [s.document() for s in self.statements]}
        )

    @classmethod
    def from_json(cls, text: str) -> Role:
        data = json.loads(text)
        return cls(data["name"], tuple(Statement.of(s) for s in data["statements"]), data.get("session", ""))


# ---------------------------------------------------------------- what a call is authorized as


def _table_arn(name: str, region: str) -> str:
    return name if name.startswith("arn:") else f"arn:aws:dynamodb:{region}:{ACCOUNT}:table/{name}"


_TRANSACT_ACTIONS = {
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "ConditionCheck": "ConditionCheckItem",
    "Get": "GetItem",
}


def _dynamodb(operation: str, params: Mapping[str, Any], region: str) -> list[Request]:
    if operation in ("TransactWriteItems", "TransactGetItems"):  # authorized item by item, as its own action
        out = []
        for entry in params.get("TransactItems") or []:
            for kind, item in entry.items():
                out.append(Request(f"dynamodb:{_TRANSACT_ACTIONS[kind]}", _table_arn(item["TableName"], region)))
        return out
    if operation in ("BatchGetItem", "BatchWriteItem"):
        return [Request(f"dynamodb:{operation}", _table_arn(t, region)) for t in params.get("RequestItems") or {}]
    table = params.get("TableName") or params.get("TableArn") or params.get("ResourceArn")
    if table is None:
        return [Request(f"dynamodb:{operation}", "*")]
    arn = _table_arn(table, region)
    if params.get("IndexName"):
        arn = f"{arn}/index/{params['IndexName']}"
    # One item's partition key (the table's hash key is PK): dynamodb:LeadingKeys, so a grant may name the partitions
    # it allows. Requests over several items (batches, queries) do not carry it here, and under ForAllValues an absent
    # key matches: such a grant must list single-item actions alone (the template's UsageWrite: UpdateItem).
    item = params.get("Key") or params.get("Item") or {}
    leading = next(iter(item["PK"].values()), None) if isinstance(item.get("PK"), dict) else None
    context = {"dynamodb:LeadingKeys": str(leading)} if leading is not None else {}
    return [Request(f"dynamodb:{operation}", arn, context)]


def _streams(operation: str, params: Mapping[str, Any], region: str) -> list[Request]:
    if operation == "GetRecords":  # the iterator names its stream; moto's iterators carry the ARN
        arn = _stream_of_iterator(params.get("ShardIterator", ""))
    elif operation == "ListStreams":
        arn = f"{_table_arn(params['TableName'], region)}/stream/*" if params.get("TableName") else "*"
    else:
        arn = params.get("StreamArn", "*")
    return [Request(f"dynamodb:{operation}", arn)]


def _stream_of_iterator(iterator: str) -> str:
    match = re.search(r"arn:aws:dynamodb:[^|\s\"]+/stream/[^|\s\"/]+", iterator)
    return match.group(0) if match else "*"


def _s3(operation: str, params: Mapping[str, Any], region: str) -> list[Request]:
    bucket = params.get("Bucket", "")
    bucket_arn = f"arn:aws:s3:::{bucket}"
    versioned = bool(params.get("VersionId"))
    if operation in ("GetObject", "HeadObject"):
        return [Request("s3:GetObjectVersion" if versioned else "s3:GetObject", f"{bucket_arn}/{params['Key']}")]
    if operation == "DeleteObject":
        return [Request("s3:DeleteObjectVersion" if versioned else "s3:DeleteObject", f"{bucket_arn}/{params['Key']}")]
    if operation == "DeleteObjects":
        return [
            Request("s3:DeleteObjectVersion" if o.get("VersionId") else "s3:DeleteObject", f"{bucket_arn}/{o['Key']}")
            for o in (params.get("Delete") or {}).get("Objects", [])
        ]
    if operation in ("PutObject", "CreateMultipartUpload", "UploadPart", "CompleteMultipartUpload"):
        return [Request("s3:PutObject", f"{bucket_arn}/{params['Key']}")]
    if operation == "CopyObject":
        source = params["CopySource"]
        if isinstance(source, str):
            path, _, query = source.lstrip("/").partition("?versionId=")
            source = {"Bucket": path.split("/", 1)[0], "Key": path.split("/", 1)[1], "VersionId": query or None}
        read = "s3:GetObjectVersion" if source.get("VersionId") else "s3:GetObject"
        return [
            Request(read, f"arn:aws:s3:::{source['Bucket']}/{source['Key']}"),
            Request("s3:PutObject", f"{bucket_arn}/{params['Key']}"),
        ]
    listing = {
        "ListObjectVersions": "s3:ListBucketVersions",
        "ListObjectsV2": "s3:ListBucket",
        "ListObjects": "s3:ListBucket",
        "HeadBucket": "s3:ListBucket",
    }
    if operation in listing:
        context = {
            name: str(params[arg])
            for name, arg in (("s3:prefix", "Prefix"), ("s3:delimiter", "Delimiter"), ("s3:max-keys", "MaxKeys"))
            if arg in params
        }
        return [Request(listing[operation], bucket_arn, context)]
    if "Key" in params:
        return [Request(f"s3:{operation}", f"{bucket_arn}/{params['Key']}")]
    return [Request(f"s3:{operation}", bucket_arn if bucket else "*")]


def _queue_arn(url: str, region: str) -> str:
    parts = url.rstrip("/").split("/")
    return f"arn:aws:sqs:{region}:{parts[-2]}:{parts[-1]}"


_SQS_BATCHES = {
    "SendMessageBatch": "SendMessage",
    "DeleteMessageBatch": "DeleteMessage",
    "ChangeMessageVisibilityBatch": "ChangeMessageVisibility",
}


def _sqs(operation: str, params: Mapping[str, Any], region: str) -> list[Request]:
    action = f"sqs:{_SQS_BATCHES.get(operation, operation)}"
    if params.get("QueueUrl"):
        return [Request(action, _queue_arn(params["QueueUrl"], region))]
    if operation == "GetQueueUrl":
        owner = params.get("QueueOwnerAWSAccountId") or ACCOUNT
        return [Request(action, f"arn:aws:sqs:{region}:{owner}:{params['QueueName']}")]
    return [Request(action, "*")]


def _secret_arn(secret_id: str, region: str) -> str:
    # A secret's ARN ends in six random characters after its name; a policy names it `<name>-*`.
    if secret_id.startswith("arn:"):
        return secret_id
    return f"arn:aws:secretsmanager:{region}:{ACCOUNT}:secret:{secret_id}-AbCdEf"


def _secretsmanager(operation: str, params: Mapping[str, Any], region: str) -> list[Request]:
    secret = params.get("SecretId")
    return [Request(f"secretsmanager:{operation}", _secret_arn(secret, region) if secret else "*")]


# A cross-region inference profile's id starts with its geography; its ARN is the account's, in the caller's region.
_PROFILE = re.compile(r"^(us|eu|apac|us-gov|ca|jp|au|global)\.")
_BEDROCK_ACTIONS = {
    "InvokeModel": "bedrock:InvokeModel",
    "Converse": "bedrock:InvokeModel",
    "InvokeModelWithResponseStream": "bedrock:InvokeModelWithResponseStream",
    "ConverseStream": "bedrock:InvokeModelWithResponseStream",
}


def _bedrock(operation: str, params: Mapping[str, Any], region: str) -> list[Request]:
    action = _BEDROCK_ACTIONS.get(operation, f"bedrock:{operation}")
    model = str(params.get("modelId", ""))
    if model.startswith("arn:"):
        return [Request(action, model)]
    if _PROFILE.match(model):
        # Through a profile, Bedrock authorizes the profile, then the foundation model in the region it routes to,
        # with the profile's ARN as bedrock:InferenceProfileArn.
        profile = f"arn:aws:bedrock:{region}:{ACCOUNT}:inference-profile/{model}"
        foundation = f"arn:aws:bedrock:{region}::foundation-model/{_PROFILE.sub('', model)}"
        return [Request(action, profile), Request(action, foundation, {"bedrock:InferenceProfileArn": profile})]
    return [Request(action, f"arn:aws:bedrock:{region}::foundation-model/{model}")]


def _events(operation: str, params: Mapping[str, Any], region: str) -> list[Request]:
    """PutEvents is authorized on each bus its entries name (the default bus when none is named)."""
    if operation != "PutEvents":
        return [Request(f"events:{operation}", "*")]
    buses = sorted({str(e.get("EventBusName") or "default") for e in params.get("Entries", ())})
    return [
        Request("events:PutEvents", b if b.startswith("arn:") else f"arn:aws:events:{region}:{ACCOUNT}:event-bus/{b}")
        for b in buses
    ]


_SERVICES = {
    "events": _events,
    "dynamodb": _dynamodb,
    "dynamodbstreams": _streams,
    "s3": _s3,
    "sqs": _sqs,
    "secretsmanager": _secretsmanager,
    "bedrock-runtime": _bedrock,
}


def requests_for(service: str, operation: str, params: Mapping[str, Any], region: str) -> list[Request]:
    """The IAM requests one call needs (`service` as botocore names its client, `params` the call's arguments)."""
    build = _SERVICES.get(service)
    if build is None:
        prefix = service.split("-")[0]
        return [Request(f"{prefix}:{operation}", "*")]
    return build(operation, params, region)


# ---------------------------------------------------------------- enforcement at a worker's clients

# Each service's AccessDenied, as it answers it.
_DENIED = {"s3": ("AccessDenied", 403), "sqs": ("AccessDenied", 403), "bedrock-runtime": ("AccessDeniedException", 403)}
_CONTEXT_KEY = "precis_local_denied"
_role: Role | None = None


class _Denied:
    def __init__(self, status: int):
        self.status_code, self.headers, self.content, self.text = status, {}, b"", ""


def _before_parameter_build(params: Mapping[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
    role = _role
    if role is None:
        return
    service = model.service_model.service_name
    try:
        role.check(requests_for(service, model.name, params, context.get("client_region") or "us-east-1"))
    except AccessDenied as denied:
        context[_CONTEXT_KEY] = str(denied)


def _before_call(model: Any, context: dict[str, Any], **_: Any) -> tuple[Any, dict[str, Any]] | None:
    message = context.pop(_CONTEXT_KEY, None)
    if message is None:
        return None
    code, status = _DENIED.get(model.service_model.service_name, ("AccessDeniedException", 400))
    return _Denied(status), {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": status, "HTTPHeaders": {}},
    }


_installed = False


def enforce(role: Role | None) -> None:
    """Check every later call of this process's botocore clients against `role` (None: check nothing).

    The check rides on botocore's built-in handlers, so every session made after the first `enforce` has it, whoever
    makes it: the function's own code is not touched."""
    global _role, _installed
    _role = role
    if not _installed:
        from botocore import handlers

        handlers.BUILTIN_HANDLERS.append(("before-parameter-build", _before_parameter_build))
        handlers.BUILTIN_HANDLERS.append(("before-call", _before_call))
        _installed = True


def exempt(client: Any) -> Any:
    """`client` never checked: an administrator's (a test's own), whatever role the process runs under."""
    client.meta.events.unregister("before-parameter-build", _before_parameter_build)
    client.meta.events.unregister("before-call", _before_call)
    return client


def current() -> Role | None:
    return _role


ROLE_VARIABLE = "_PRECIS_LOCAL_ROLE"  # the worker's role, as Role.to_json; set by the stack, read by the worker


def enforce_from_environment() -> None:
    """In a worker: enforce the role the stack gave it."""
    role = os.environ.pop(ROLE_VARIABLE, None)  # Lambda's environment has no such variable
    if role:
        enforce(Role.from_json(role))


# ---------------------------------------------------------------- the roles, from template.yaml


SAM_PYTHON = Path(__file__).resolve().parent.parent / ".venv-sam" / "bin" / "python"
# SAM's transform runs in .venv-sam, with the aws-sam-translator `sam deploy` uses (its pins differ from the app's).
_TRANSFORM = r"""
import json, sys
from samtranslator.translator.transform import transform
from samtranslator.yaml_helper import yaml_parse
template = yaml_parse(sys.stdin.read())
for resource in template["Resources"].values():  # what `sam package` does: local code paths become S3 URIs
    props = resource.get("Properties", {})
    for key in ("CodeUri", "ContentUri"):
        if isinstance(props.get(key), str) and not props[key].startswith("s3://"):
            props[key] = "s3://artifacts/" + props[key].strip("/")
json.dump(transform(template, {}, None), sys.stdout, indent=1)
"""


def sam_transform(template_text: str) -> dict[str, Any]:
    """The template as CloudFormation deploys it: SAM's own transform, offline, in .venv-sam (`make lint` makes it)."""
    import subprocess

    if not SAM_PYTHON.exists():
        raise RuntimeError(
            f"{SAM_PYTHON} is missing: the local stack reads each function's role from SAM's own "
            f"transform; `make dev` and `make test` create .venv-sam"
        )
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", "/tmp"),
        "AWS_DEFAULT_REGION": "us-east-1",
    }  # the transform needs a region for ARNs; it calls no AWS API
    done = subprocess.run(
        [str(SAM_PYTHON), "-c", _TRANSFORM], input=template_text, capture_output=True, text=True, env=env, timeout=120
    )
    if done.returncode:
        raise RuntimeError(f"SAM transform failed:\n{done.stderr}")
    return json.loads(done.stdout)


def _transformed(template_text: str, cache_dir: Path) -> dict[str, Any]:
    """`sam_transform`, cached by the template's text and the transform's code."""
    digest = hashlib.sha256(f"{_TRANSFORM}\n{template_text}".encode()).hexdigest()[:20]
    cached = cache_dir / f"sam-{digest}.json"
    try:
        return json.loads(cached.read_text())
    except (OSError, ValueError):
        pass
    deployed = sam_transform(template_text)
    cache_dir.mkdir(parents=True, exist_ok=True)
    partial = cached.with_suffix(f".{os.getpid()}.tmp")
    partial.write_text(json.dumps(deployed))
    partial.replace(cached)  # atomic: concurrent stacks and test workers may write it at once
    return deployed


def _as_tags(value: Any) -> Any:
    """CloudFormation's JSON intrinsics (`{"Fn::Sub": ...}`) as the YAML tags local.template resolves."""
    from deploy.template import Tag

    if isinstance(value, dict):
        if len(value) == 1:
            ((key, arg),) = value.items()
            if key == "Ref":
                return Tag("Ref", arg)
            if key.startswith("Fn::"):
                return Tag(key[4:], _as_tags(arg))
            if key == "Condition":
                return Tag("Condition", arg)
        return {k: _as_tags(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_as_tags(v) for v in value]
    return value


def _without_novalue(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_novalue(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_novalue(v) for v in value if v is not None]
    return value


def deployment_parameters(raw: dict[str, Any], environment: Mapping[str, str]) -> dict[str, str]:
    """The template parameters a local deployment runs with: each one a function's environment carries
    (`VAR: !Ref Parameter`) takes that variable's value, so `PRECIS_LLM_PROVIDER=bedrock make dev` is a deployment
    with LlmProvider bedrock; the others keep their defaults."""
    from deploy.template import Tag

    params: dict[str, str] = {}
    variables = dict(raw.get("Globals", {}).get("Function", {}).get("Environment", {}).get("Variables", {}))
    for resource in raw["Resources"].values():
        if resource.get("Type") == "AWS::Serverless::Function":
            variables.update(resource["Properties"].get("Environment", {}).get("Variables", {}))
    for name, value in variables.items():
        if isinstance(value, Tag) and value.name == "If":  # `!If [HasX, !Ref X, !Ref AWS::NoValue]`
            value = value.value[1]
        if (
            isinstance(value, Tag)
            and value.name == "Ref"
            and value.value in raw.get("Parameters", {})
            and name in environment
        ):
            params[value.value] = str(environment[name])
    return params


def sam_roles(
    tpl: Any, environment: Mapping[str, str], cache_dir: Path, template_text: str | None = None
) -> dict[str, Role]:
    """Each function's execution role (by the function's logical id) and each schedule's (by the schedule's logical
    id), as SAM generates them for this local deployment (`template_text`: the template `tpl` was read from)."""
    from local.template import TEMPLATE, LocalNames, Resolver

    deployed = _transformed(TEMPLATE.read_text() if template_text is None else template_text, cache_dir)
    resolver = Resolver(tpl.raw, LocalNames(), deployment_parameters(tpl.raw, environment))
    resources = deployed["Resources"]

    def template_policy(ref: dict[str, Any], owner: str) -> list[Statement]:
        """The statements of a managed policy of the template (`!Ref P`, or `!If [C, !Ref P, !Ref AWS::NoValue]`), as
        this deployment has them."""
        if "Fn::If" in ref:
            condition, chosen, otherwise = ref["Fn::If"]
            ref = chosen if resolver.condition(condition) else otherwise
        name = ref.get("Ref") if isinstance(ref, dict) else None
        if name == "AWS::NoValue":
            return []
        policy = resources.get(str(name), {})
        if policy.get("Type") != "AWS::IAM::ManagedPolicy":
            raise ValueError(
                f"{owner}: a managed policy the local stack cannot follow: {ref!r} (an AWS managed policy "
                f"of MANAGED_POLICIES, or an AWS::IAM::ManagedPolicy of the template)"
            )
        if "Condition" in policy and not resolver.condition(policy["Condition"]):
            raise ValueError(
                f"{owner}: managed policy {name} is not created in this deployment (its condition "
                f"{policy['Condition']} is false), so the deploy would fail"
            )
        document = _without_novalue(resolver.resolve(_as_tags(policy["Properties"]["PolicyDocument"])))
        return [Statement.of(s) for s in _listed(document.get("Statement", []))]

    def role_of(arn_ref: Any, session: str) -> Role:
        if not (isinstance(arn_ref, dict) and "Fn::GetAtt" in arn_ref):
            raise ValueError(f"a role the local stack cannot follow: {arn_ref!r} (only a role of the template)")
        logical_id = arn_ref["Fn::GetAtt"][0]
        props = resources[logical_id]["Properties"]
        statements = []
        for policy in props.get("Policies", []):
            document = _without_novalue(resolver.resolve(_as_tags(policy["PolicyDocument"])))
            statements += [Statement.of(s) for s in _listed(document.get("Statement", []))]
        for arn in props.get("ManagedPolicyArns", []):
            if isinstance(arn, dict):  # a managed policy the template defines
                statements += template_policy(arn, logical_id)
                continue
            if arn not in MANAGED_POLICIES:
                raise ValueError(
                    f"{logical_id}: managed policy {arn} is unknown to the local stack (local/iam.py MANAGED_POLICIES)"
                )
            statements += [Statement.of(s) for s in MANAGED_POLICIES[arn]]
        name = props.get("RoleName") or f"{session}-{logical_id}"
        return Role(str(resolver.resolve(_as_tags(name))), tuple(statements), session)

    roles: dict[str, Role] = {}
    for logical_id, resource in resources.items():
        props = resource.get("Properties", {})
        if resource["Type"] == "AWS::Lambda::Function":
            session = str(resolver.resolve(_as_tags(props.get("FunctionName", logical_id))))
            roles[logical_id] = role_of(props["Role"], session)
        elif resource["Type"] == "AWS::Scheduler::Schedule":
            roles[logical_id] = role_of(props["Target"]["RoleArn"], logical_id)
    return roles


# What Lambda needs of a function's role to run each kind of event-source mapping (its documentation, "execution role
# permissions" of the DynamoDB Streams and SQS event sources), and of an on-failure destination.
STREAM_MAPPING_ACTIONS = ("dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator")
QUEUE_MAPPING_ACTIONS = ("sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes")


def check_event_sources(tpl: Any, roles: Mapping[str, Role]) -> None:
    """Each event-source mapping's and schedule's permissions, checked as AWS checks them when they are created: the
    function's role must read the stream or the queue and send to the on-failure destination; a schedule's role must
    invoke its function. ValueError naming the resource and the missing grant: on AWS the deploy would fail."""
    from deploy.template import Tag
    from local.template import LocalNames, Resolver

    resolver = Resolver(tpl.raw, LocalNames())
    for logical_id, resource in tpl.raw["Resources"].items():
        props = resource.get("Properties", {})
        if resource.get("Type") == "AWS::Lambda::EventSourceMapping":
            function = props["FunctionName"]
            role = roles[function.value if isinstance(function, Tag) else function]
            source = str(resolver.resolve(props["EventSourceArn"]))
            needed = [
                (a, source)
                for a in (QUEUE_MAPPING_ACTIONS if source.startswith("arn:aws:sqs:") else STREAM_MAPPING_ACTIONS)
            ]
            destination = props.get("DestinationConfig", {}).get("OnFailure", {}).get("Destination")
            if destination is not None:
                needed.append(("sqs:SendMessage", str(resolver.resolve(destination))))
        elif resource.get("Type") == "AWS::Serverless::Function":
            for event_id, event in props.get("Events", {}).items():
                if event["Type"] in ("ScheduleV2", "Schedule") and f"{logical_id}{event_id}" in roles:
                    role = roles[f"{logical_id}{event_id}"]
                    target = resolver.get_att(f"{logical_id}.Arn")
                    _check(role, [("lambda:InvokeFunction", target)], f"{logical_id}{event_id} (schedule)")
            continue
        else:
            continue
        _check(role, needed, f"{logical_id} (event-source mapping)")


def _check(role: Role, needed: list[tuple[str, str]], what: str) -> None:
    try:
        role.check(Request(action, resource) for action, resource in needed)
    except AccessDenied as denied:
        raise ValueError(f"{what}: {denied}") from None


def local_roles(tpl: Any, environment: Mapping[str, str], template_text: str | None = None) -> dict[str, Role]:
    """The local deployment's roles (`sam_roles`, cached under .precis/), its event sources checked against them."""
    from local.template import ROOT

    roles = sam_roles(tpl, environment, ROOT / ".precis", template_text)
    check_event_sources(tpl, roles)
    return roles
