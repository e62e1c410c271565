"""What a cold start imports: no handler imports `openai` (≈0.7 s) at import, and the read path (the context and chat
functions, and /health) imports neither `openai` nor `tiktoken`, nor the write bodies or the summary planner. Making
the clients imports botocore, never boto3 (and s3transfer). Each function is imported in a fresh interpreter with the
environment Lambda gives it (bench.coldstart.lambda_environment)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bench.coldstart import lambda_environment
from local.template import ROOT

WATCHED = (
    "openai",
    "tiktoken",
    "boto3",
    "s3transfer",
    "precis.schemas.bodies",
    "precis.summaries.strategies",
    "precis.store.representation",
    "mcp",
    "aws_lambda_powertools.event_handler",
)
PROBE = r"""
import json, sys
watched = sys.argv[2].split(",")
import app
imported = {name: name in sys.modules for name in watched}
from precis.store.db import get_db
get_db()
clients = {name: name in sys.modules for name in watched}
event = {"version": "2.0", "routeKey": "GET /health", "rawPath": "/health", "rawQueryString": "", "headers": {},
         "requestContext": {"http": {"method": "GET", "path": "/health", "protocol": "HTTP/1.1",
                                     "sourceIp": "127.0.0.1", "userAgent": "probe"},
                            "requestId": "probe", "routeKey": "GET /health", "stage": "$default"},
         "isBase64Encoded": False}
from local.lambda_context import LambdaContext
context = LambdaContext(function_name="precis-context", timeout_s=15)
health = app.lambda_handler(event, context)["statusCode"] if sys.argv[1] == "health" else None
print(json.dumps({"import": imported, "clients": clients, "health": health,
                  "after": {name: name in sys.modules for name in ("openai", "tiktoken")}}))
"""


def cold(logical_id: str, health: bool = False, parameters: dict[str, str] | None = None) -> dict:
    env, cwd = lambda_environment(logical_id)
    env.update(parameters or {})  # what other template parameters put in the function's environment
    env["PYTHONPATH"] += f":{ROOT}"  # the probe's Lambda context comes from the local stack's package
    argv = [sys.executable, "-c", PROBE, "health" if health else "import", ",".join(WATCHED)]
    out = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


ALL = ["ContextFunction", "ChatFunction", "IngestFunction", "SummarizeFunction", "DeriveFunction", "McpFunction"]


@pytest.mark.parametrize("logical_id", ALL)
def test_no_function_imports_openai_when_it_starts(logical_id):
    assert cold(logical_id)["import"]["openai"] is False


@pytest.mark.parametrize("logical_id", ["ContextFunction", "ChatFunction"])
def test_the_read_path_imports_no_llm_client_tokenizer_write_bodies_or_planner(logical_id):
    imported = cold(logical_id)["import"]
    lazy = ("openai", "tiktoken", "precis.schemas.bodies", "precis.summaries.strategies")
    assert not any(imported[name] for name in lazy)


@pytest.mark.parametrize("logical_id", ALL)
def test_the_clients_come_from_botocore_without_boto3(logical_id):
    clients = cold(logical_id)["clients"]
    assert clients["boto3"] is False and clients["s3transfer"] is False


def test_the_mcp_function_starts_without_the_mcp_package_a_resolver_or_what_only_some_tools_run():
    """It serves the protocol itself (the `mcp` package's import alone outlasts its cold start), parses its one event
    without Powertools' resolver, and loads the write bodies, the representation and the LLM clients with the tools
    that use them."""
    imported = cold("McpFunction")["import"]
    assert not any(
        imported[name]
        for name in (
            "mcp",
            "aws_lambda_powertools.event_handler",
            "openai",
            "tiktoken",
            "precis.schemas.bodies",
            "precis.store.representation",
        )
    ), imported


def test_the_context_function_starts_without_the_representation():  # it loads with the first peer_target
    assert cold("ContextFunction")["import"]["precis.store.representation"] is False


def test_health_answers_without_openai_or_tiktoken():
    probe = cold("ContextFunction", health=True)
    assert probe["health"] == 200 and probe["after"] == {"openai": False, "tiktoken": False}


@pytest.mark.parametrize("logical_id", ALL)
def test_every_function_starts_on_bedrock_with_no_model_named(logical_id):
    """`LlmProvider=bedrock` (and `Embedder=bedrock`) with LlmModel and EmbedModel left empty: the settings give each
    role its Bedrock default, so every cold start succeeds (it failed on gpt-4o-mini) and /health answers."""
    probe = cold(
        logical_id,
        health=logical_id == "ContextFunction",
        parameters={"PRECIS_LLM_PROVIDER": "bedrock", "PRECIS_EMBEDDER": "bedrock"},
    )
    assert probe["import"]["openai"] is False
    if logical_id == "ContextFunction":
        assert probe["health"] == 200
