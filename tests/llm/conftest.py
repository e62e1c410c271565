"""What the model tests share."""

from __future__ import annotations

import pytest


@pytest.fixture
def endpoint(bedrock_server, monkeypatch):
    """The server, as botocore finds it: the standard endpoint override and any credentials."""
    for name, value in {
        "AWS_ENDPOINT_URL_BEDROCK_RUNTIME": bedrock_server.url,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    return bedrock_server
