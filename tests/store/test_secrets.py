"""A secret that is not there (the local stack has none) is said once per cold start and not looked up per call."""

from __future__ import annotations

import json
import uuid

from precis import secrets
from precis.settings import get_settings


def _use_secret(monkeypatch, name: str) -> None:
    monkeypatch.setenv("PRECIS_SECRET_NAME", name)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    get_settings.cache_clear()


def test_a_missing_secret_is_said_once_and_not_asked_for_again(aws, monkeypatch, caplog):
    name = f"precis/missing-{uuid.uuid4().hex[:8]}"
    _use_secret(monkeypatch, name)
    assert [secrets.llm_api_key() for _ in range(50)] == [None] * 50
    said = [r for r in caplog.records if r.getMessage() == "secret unavailable"]
    assert len(said) == 1 and said[0].secret == name

    # Created now, it is still taken as missing: the miss is remembered, so no call asked Secrets Manager again.
    boto3 = __import__("boto3")
    boto3.client("secretsmanager").create_secret(Name=name, SecretString=json.dumps({"llm_api_key": "sk-x"}))
    assert secrets.llm_api_key() is None
    assert len([r for r in caplog.records if r.getMessage() == "secret unavailable"]) == 1


def test_threads_of_a_cold_start_look_a_missing_secret_up_once(aws, monkeypatch, caplog):
    """A derive batch's targets run on threads: all asking at once, one of them looks it up and says it is missing."""
    import threading

    name = f"precis/missing-{uuid.uuid4().hex[:8]}"
    _use_secret(monkeypatch, name)
    start = threading.Barrier(8)
    answers: list = []

    def ask() -> None:
        start.wait()
        answers.append(secrets.llm_api_key())

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert answers == [None] * 8
    assert len([r for r in caplog.records if r.getMessage() == "secret unavailable"]) == 1


def test_a_secret_that_exists_is_read(aws, monkeypatch):
    name = f"precis/present-{uuid.uuid4().hex[:8]}"
    __import__("boto3").client("secretsmanager").create_secret(
        Name=name, SecretString=json.dumps({"llm_api_key": "sk-present"})
    )
    _use_secret(monkeypatch, name)
    assert secrets.llm_api_key() == "sk-present"


def test_a_deployment_on_bedrock_alone_never_reads_the_llm_key(aws, monkeypatch):
    name = f"precis/bedrock-{uuid.uuid4().hex[:8]}"
    __import__("boto3").client("secretsmanager").create_secret(
        Name=name, SecretString=json.dumps({"llm_api_key": "sk-present"})
    )
    _use_secret(monkeypatch, name)
    bedrock = get_settings().model_copy(update={"llm_provider": "bedrock", "llm_model": "amazon.nova-lite-v1:0"})
    assert secrets.with_llm_key(bedrock) is bedrock  # IAM signs its calls: no key, no Secrets Manager call
    # One role on openai (or the openai embedder) still needs it.
    assert secrets.with_llm_key(bedrock.model_copy(update={"chat_provider": "openai"})).llm_api_key == "sk-present"
    assert secrets.with_llm_key(bedrock.model_copy(update={"embedder": "openai"})).llm_api_key == "sk-present"
