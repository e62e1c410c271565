"""Metrics through the handlers: one EMF line per invocation when enabled, none ever when disabled.

Powertools keeps the values when POWERTOOLS_METRICS_DISABLED=true and prints them anyway once a metric holds 100;
`precis.telemetry.log_metrics` drops them after each invocation instead."""

from __future__ import annotations

import json

import pytest
from aws_lambda_powertools import Metrics

from tests.handlers import call

S = "/v3/workspaces/ws1/sessions/s1/messages"


@pytest.fixture(autouse=True)
def _empty_metric_set():
    Metrics().clear_metrics()  # the set is shared by every Metrics instance in the process
    yield
    Metrics().clear_metrics()


@pytest.fixture
def ws(aws):
    assert call("POST", "/v3/workspaces", {"id": "ws1"}).status == 201
    return aws


def emf_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith('{"_aws"')]


def post(n: int) -> None:
    reply = call("POST", S, {"messages": [{"content": f"message {n}", "peer_id": "alice"}]})
    assert reply.status == 201, reply.body


def test_a_disabled_function_prints_no_metrics_however_many_invocations(ws, monkeypatch, capsys):
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    capsys.readouterr()
    for n in range(120):  # past the 100 values at which Powertools prints a metric set by itself
        post(n)
    assert emf_lines(capsys.readouterr().out) == []


def test_an_enabled_function_prints_one_metric_set_per_invocation(ws, monkeypatch, capsys):
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "false")
    capsys.readouterr()
    for n in range(3):
        post(n)
    lines = emf_lines(capsys.readouterr().out)
    assert [line["MessagesIngested"] for line in lines] == [[1.0]] * 3  # one batch of one message each
