"""Read template.yaml the way the local stack needs it, so local runs cannot drift from what deploys.

Functions (code, handler, environment, HTTP routes, stream source), the table and the bucket all come
from the template; intrinsic functions are resolved against local values.
"""

from __future__ import annotations

import copy
import json
import os
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from deploy.template import LAYER_DIR, TEMPLATE, Tag, parse
from deploy.template import ROOT as ROOT  # the checkout, for the local stack's users

ENCODINGS_DIR = LAYER_DIR / "precis" / "encodings"


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    function: str


@dataclass(frozen=True)
class Schedule:
    """An EventBridge Scheduler schedule that invokes a function: every `every_s` seconds with `input`."""

    name: str
    every_s: float
    input: dict[str, Any]


_RATE = re.compile(r"^rate\((\d+) (minute|minutes|hour|hours|second|seconds)\)$")
_UNIT_S = {"second": 1, "minute": 60, "hour": 3600}


def rate_seconds(expression: str) -> float:
    """Seconds between runs of a `rate(...)` schedule expression (the only kind the template uses)."""
    m = _RATE.match(expression.strip())
    if not m:
        raise ValueError(f"unsupported schedule expression {expression!r}: the local stack runs rate(...) only")
    return int(m.group(1)) * _UNIT_S[m.group(2).rstrip("s")]


@dataclass
class Function:
    logical_id: str
    code_dir: Path
    handler: str  # "module.function"
    environment: dict[str, str]
    timeout: int
    routes: list[Route] = field(default_factory=list)
    stream: dict[str, Any] | None = None  # the DynamoDB event's Properties
    schedules: list[Schedule] = field(default_factory=list)


@dataclass
class Template:
    raw: dict[str, Any]
    functions: dict[str, Function]
    table_name: str
    bucket_name: str
    queue_names: dict[str, str]  # logical id -> queue name

    @property
    def routes(self) -> list[Route]:
        return [route for fn in self.functions.values() for route in fn.routes]

    def resource(self, logical_id: str) -> dict[str, Any]:
        return self.raw["Resources"][logical_id]

    def stream_functions(self) -> list[Function]:
        """Every consumer of the table's stream (each has a mapping of its own, as on AWS)."""
        return [f for f in self.functions.values() if f.stream is not None]

    def stream_function(self, logical_id: str = "SummarizeFunction") -> Function:
        fn = self.functions[logical_id]
        assert fn.stream is not None, f"{logical_id} has no stream trigger"
        return fn


@dataclass
class LocalNames:
    """What the template's resources are called on the local stack."""

    stage: str = "local"
    table: str = "precis-local"
    bucket: str = "precis-local"
    region: str = "us-east-1"
    account: str = "123456789012"


class Resolver:
    """The template's intrinsics resolved against the local stack's names and the deployment's parameters."""

    def __init__(self, raw: dict[str, Any], names: LocalNames, parameters: dict[str, str] | None = None):
        self.params = {k: str(v.get("Default", "")) for k, v in raw.get("Parameters", {}).items()}
        self.params.update(parameters or {})
        self.params["Stage"] = names.stage
        self.refs = {
            "AWS::Region": names.region,
            "AWS::AccountId": names.account,
            "AWS::Partition": "aws",
            "AWS::URLSuffix": "amazonaws.com",
        }
        self.resources = raw.get("Resources", {})
        self.names = names
        self.conditions = raw.get("Conditions", {})
        self.mappings = raw.get("Mappings", {})

    def ref(self, name: str) -> str | None:
        if name == "AWS::NoValue":
            return None
        if name in self.params:
            return self.params[name]
        if name in self.refs:
            return self.refs[name]
        kind = self.resources.get(name, {}).get("Type")
        if kind == "AWS::DynamoDB::Table":
            return self.names.table
        if kind == "AWS::S3::Bucket":
            return self.names.bucket
        if kind == "AWS::SQS::Queue":
            return f"http://localhost/{self.names.account}/{self.queue_name(name)}"
        return name

    def queue_name(self, logical_id: str) -> str:
        props = self.resources[logical_id].get("Properties", {})
        return self.resolve(props.get("QueueName")) or f"precis-{logical_id.lower()}"

    def get_att(self, target: str) -> str:
        logical_id, attr = target.split(".", 1)
        kind = self.resources.get(logical_id, {}).get("Type")
        if kind == "AWS::DynamoDB::Table":
            arn = f"arn:aws:dynamodb:{self.names.region}:{self.names.account}:table/{self.names.table}"
            return arn if attr == "Arn" else f"{arn}/stream/latest"
        if kind == "AWS::SQS::Queue":
            name = self.queue_name(logical_id)
            return name if attr == "QueueName" else f"arn:aws:sqs:{self.names.region}:{self.names.account}:{name}"
        if kind == "AWS::S3::Bucket":
            return f"arn:aws:s3:::{self.names.bucket}"
        if kind == "AWS::Events::EventBus" and attr == "Arn":
            name = self.resolve(self.resources[logical_id]["Properties"]["Name"])
            return f"arn:aws:events:{self.names.region}:{self.names.account}:event-bus/{name}"
        if kind in ("AWS::Serverless::Function", "AWS::Lambda::Function") and attr == "Arn":
            name = self.resolve(self.resources[logical_id]["Properties"].get("FunctionName")) or logical_id
            return f"arn:aws:lambda:{self.names.region}:{self.names.account}:function:{name}"
        return f"{logical_id}.{attr}"

    def condition(self, name: str) -> bool:
        return bool(self.resolve(self.conditions[name]))

    def resolve(self, value: Any) -> Any:
        if isinstance(value, Tag):
            name, arg = value.name, value.value
            if name == "Ref":
                return self.ref(arg)
            if name == "GetAtt":
                return self.get_att(arg if isinstance(arg, str) else ".".join(arg))
            if name == "Sub":
                text, extra = (arg, {}) if isinstance(arg, str) else (arg[0], arg[1])
                import re

                def sub(m: re.Match) -> str:
                    key = m.group(1)
                    if key in extra:
                        return str(self.resolve(extra[key]))
                    return str(self.get_att(key) if "." in key else self.ref(key))

                return re.sub(r"\$\{([^}!]+)\}", sub, text)
            if name == "If":
                cond, yes, no = arg
                return self.resolve(yes if self.condition(cond) else no)
            if name == "Equals":
                a, b = (self.resolve(x) for x in arg)
                return a == b
            if name == "Not":
                return not self.resolve(arg[0])
            if name == "And":
                return all(self.resolve(x) for x in arg)
            if name == "Or":
                return any(self.resolve(x) for x in arg)
            if name == "Condition":
                return self.condition(arg)
            if name == "FindInMap":
                mapping, top, second = (self.resolve(x) for x in arg)
                return self.mappings[mapping][top][second]
            if name == "Join":
                separator, values = arg
                return separator.join(str(v) for v in self.resolve(values) if v is not None)
            raise ValueError(f"unsupported intrinsic !{name}")
        if isinstance(value, dict):
            out = {k: self.resolve(v) for k, v in value.items()}
            return {k: v for k, v in out.items() if v is not None}
        if isinstance(value, list):
            return [self.resolve(v) for v in value]
        return value


def load_template(path: Path = TEMPLATE, names: LocalNames | None = None) -> Template:
    """Parse template.yaml and resolve what the local stack needs against `names`."""
    names = names or LocalNames()
    raw = parse(path.read_text())
    resolve = Resolver(raw, names).resolve
    globals_fn = raw.get("Globals", {}).get("Function", {})
    global_env = resolve(globals_fn.get("Environment", {}).get("Variables", {}))
    functions: dict[str, Function] = {}
    for logical_id, res in raw["Resources"].items():
        if res.get("Type") != "AWS::Serverless::Function":
            continue
        props = res["Properties"]
        env = {**global_env, **resolve(props.get("Environment", {}).get("Variables", {}))}
        fn = Function(
            logical_id=logical_id,
            code_dir=(path.parent / props["CodeUri"]).resolve(),
            handler=props.get("Handler", globals_fn.get("Handler")),
            environment={k: str(v) for k, v in env.items()},
            timeout=int(props.get("Timeout", globals_fn.get("Timeout", 3))),
        )
        for event in props.get("Events", {}).values():
            if event["Type"] == "HttpApi":
                p = event["Properties"]
                fn.routes.append(Route(p["Method"].upper(), p["Path"], logical_id))
            elif event["Type"] == "DynamoDB":
                fn.stream = resolve(event["Properties"])
            elif event["Type"] in ("ScheduleV2", "Schedule"):
                p = resolve(event["Properties"])
                fn.schedules.append(
                    Schedule(
                        p.get("Name") or logical_id,
                        rate_seconds(p["ScheduleExpression"]),
                        json.loads(p.get("Input") or "{}"),
                    )
                )
        functions[logical_id] = fn
    # A stream trigger may also be an event-source mapping of its own (so no managed policy comes with it).
    for res in raw["Resources"].values():
        if res.get("Type") == "AWS::Lambda::EventSourceMapping":
            target, source = res["Properties"]["FunctionName"], res["Properties"].get("EventSourceArn")
            if is_queue_source(raw, source):
                continue  # a queue's mapping: local/sqs_poller.py delivers it
            if isinstance(target, Tag) and target.name == "Ref" and target.value in functions:
                functions[target.value].stream = resolve(
                    {k: v for k, v in res["Properties"].items() if k not in ("FunctionName", "EventSourceArn")}
                )
    resolver = Resolver(raw, names)
    queues = {lid: resolver.queue_name(lid) for lid, r in raw["Resources"].items() if r["Type"] == "AWS::SQS::Queue"}
    return Template(raw=raw, functions=functions, table_name=names.table, bucket_name=names.bucket, queue_names=queues)


def is_queue_source(raw: dict[str, Any], source: Any) -> bool:
    """Whether an event-source mapping's EventSourceArn is `!GetAtt <an SQS queue of the template>.Arn`."""
    if not (isinstance(source, Tag) and source.name == "GetAtt"):
        return False
    logical_id = (source.value if isinstance(source.value, str) else ".".join(source.value)).split(".", 1)[0]
    return raw["Resources"].get(logical_id, {}).get("Type") == "AWS::SQS::Queue"


@lru_cache(maxsize=1)
def template() -> Template:
    return load_template()


def table_definition(tpl: Template) -> dict[str, Any]:
    """CreateTable arguments from the template's table resource (same keys, indexes and stream)."""
    props = copy.deepcopy(tpl.resource("Table")["Properties"])
    args: dict[str, Any] = {
        "TableName": tpl.table_name,
        "AttributeDefinitions": props["AttributeDefinitions"],
        "KeySchema": props["KeySchema"],
        "BillingMode": props.get("BillingMode", "PAY_PER_REQUEST"),
    }
    for index_kind in ("LocalSecondaryIndexes", "GlobalSecondaryIndexes", "VectorIndexes"):
        if props.get(index_kind):
            args[index_kind] = props[index_kind]
    for index in args.get("VectorIndexes", ()):
        # The embedder's indexes: the parameter's default, or the dimension the local stack's functions are told
        # (PRECIS_EMBED_DIMENSIONS); a fixed number (the BM25 index) stays as written.
        if isinstance(index["Dimensions"], int):
            continue
        dimensions = os.environ.get("PRECIS_EMBED_DIMENSIONS") or Resolver(tpl.raw, LocalNames()).resolve(
            index["Dimensions"]
        )
        index["Dimensions"] = int(dimensions)
    if props.get("StreamSpecification"):
        args["StreamSpecification"] = {"StreamEnabled": True, **props["StreamSpecification"]}
    return args


# The AWS::SQS::Queue properties that are SQS queue attributes of the same name, given to the local queues.
QUEUE_ATTRIBUTES = ("VisibilityTimeout", "MessageRetentionPeriod", "DelaySeconds")


def create_resources(tpl: Template, dynamodb, s3, sqs=None, events=None, parameters=None) -> None:
    """Create the table (with TTL), the bucket and the queues of the template with the given boto3 clients, and the
    EventBridge bus when the deployment (its `parameters`: EventBusName) has one."""
    dynamodb.create_table(**table_definition(tpl))
    ttl = tpl.resource("Table")["Properties"].get("TimeToLiveSpecification")
    if ttl:
        dynamodb.update_time_to_live(TableName=tpl.table_name, TimeToLiveSpecification=ttl)
    s3.create_bucket(Bucket=tpl.bucket_name)
    if sqs is not None:
        resolver = Resolver(tpl.raw, LocalNames())
        redrives = {}
        for logical_id, name in tpl.queue_names.items():
            props = resolver.resolve(tpl.resource(logical_id).get("Properties") or {})
            # The template's timing, so a queue hides, keeps and delays messages as on AWS; its redrive once every
            # queue exists (SQS refuses a dead-letter queue it does not have yet).
            attributes = {k: str(props[k]) for k in QUEUE_ATTRIBUTES if k in props}
            sqs.create_queue(QueueName=name, Attributes=attributes)
            if props.get("RedrivePolicy"):
                redrives[name] = json.dumps(props["RedrivePolicy"])
        for name, policy in redrives.items():
            url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
            sqs.set_queue_attributes(QueueUrl=url, Attributes={"RedrivePolicy": policy})
    if events is not None:
        resolver = Resolver(tpl.raw, LocalNames(), parameters)
        for res in tpl.raw["Resources"].values():
            on = not res.get("Condition") or resolver.condition(res["Condition"])
            if res["Type"] == "AWS::Events::EventBus" and on:
                events.create_event_bus(Name=resolver.resolve(res["Properties"]["Name"]))
