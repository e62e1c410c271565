"""Prompt caching as the providers report it, through the real clients against the local model servers: OpenAI's
automatic caching (`usage.prompt_tokens_details.cached_tokens`: prompts of 1,024 tokens or more, a prefix seen before,
in steps of 128) and Bedrock's `cachePoint` (`cacheReadInputTokens` / `cacheWriteInputTokens`, counted apart from
`inputTokens`), carried into `Reply` as the prompt's whole input and the part read from the cache."""

from __future__ import annotations

import pytest

from local.models.llm_server import CACHE_MIN_TOKENS, CACHE_STEP_TOKENS
from precis.llm import model_of

# A stable prefix past the caching minimum (this server counts about four characters a token), then what changes.
PREFIX = "Rules of the house. " * 400  # 8,000 characters: ~2,000 tokens


def openai_reply(server, question: str):
    llm = model_of("openai", base_url=server.url, model="gpt-test", timeout=5.0, max_attempts=1)
    messages = [{"role": "system", "content": PREFIX}, {"role": "user", "content": question}]
    return llm.complete(messages, max_tokens=32, timeout=5.0)


def test_openai_reports_a_long_prefix_seen_before_as_cached_in_steps(llm_server):
    first = openai_reply(llm_server, "where does alice live?")
    second = openai_reply(llm_server, "and bob?")
    assert first.cached_input_tokens == 0  # (said, and none: the first time this prefix is seen)
    assert CACHE_MIN_TOKENS <= second.cached_input_tokens < second.input_tokens
    assert (second.cached_input_tokens - CACHE_MIN_TOKENS) % CACHE_STEP_TOKENS == 0


def test_openai_caches_nothing_under_its_minimum(llm_server):
    llm = model_of("openai", base_url=llm_server.url, model="gpt-test", timeout=5.0, max_attempts=1)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "where does alice live?"}]
    replies = [llm.complete(messages, max_tokens=32, timeout=5.0) for _ in range(2)]
    assert [r.cached_input_tokens for r in replies] == [0, 0] and replies[1].input_tokens < CACHE_MIN_TOKENS


def converse(system: list[dict], question: str) -> dict:
    import boto3

    client = boto3.client("bedrock-runtime")
    return client.converse(
        modelId="us.anthropic.claude-3-7-sonnet-20250219-v1:0",
        system=system,
        messages=[{"role": "user", "content": [{"text": question}]}],
        inferenceConfig={"maxTokens": 32},
    )["usage"]


def test_bedrock_writes_a_checkpointed_prefix_then_reads_it_and_counts_both_apart(endpoint):
    system = [{"text": PREFIX}, {"cachePoint": {"type": "default"}}]
    first, second = converse(system, "where does alice live?"), converse(system, "and bob?")
    assert (first["cacheReadInputTokens"], second["cacheWriteInputTokens"]) == (0, 0)
    assert first["cacheWriteInputTokens"] == second["cacheReadInputTokens"] >= CACHE_MIN_TOKENS
    assert second["inputTokens"] < 100  # what follows the checkpoint only


def test_bedrock_caches_nothing_without_a_checkpoint_or_under_its_minimum(endpoint):
    assert "cacheReadInputTokens" not in converse([{"text": PREFIX}], "where?")
    short = converse([{"text": "Be brief."}, {"cachePoint": {"type": "default"}}], "where?")
    assert (short["cacheReadInputTokens"], short["cacheWriteInputTokens"]) == (0, 0)


def test_a_bedrock_reply_counts_the_cache_in_its_input_and_says_what_it_read(endpoint):
    from precis.llm.bedrock import _reply  # noqa: PLC2701 - the answer's parsing, on what the server sent

    system = [{"text": PREFIX}, {"cachePoint": {"type": "default"}}]
    converse(system, "first")
    usage = converse(system, "second")
    reply = _reply({"output": {"message": {"content": [{"text": "ok"}]}}, "usage": usage}, "m", None)
    assert reply.input_tokens == usage["inputTokens"] + usage["cacheReadInputTokens"]
    assert reply.cached_input_tokens == usage["cacheReadInputTokens"] > 0


# ---------------------------------------------------------------- what Precis sends


def test_a_cache_key_is_sent_with_every_chat_request_when_set(llm_server):
    llm = model_of("openai", base_url=llm_server.url, model="gpt-test", cache_key="precis:t", max_attempts=1)
    llm.complete([{"role": "user", "content": "hi"}], max_tokens=8, timeout=5.0)
    plain = model_of("openai", base_url=llm_server.url, model="gpt-test", max_attempts=1)
    plain.complete([{"role": "user", "content": "hi"}], max_tokens=8, timeout=5.0)
    assert [r.body.get("prompt_cache_key") for r in llm_server.requests] == ["precis:t", None]


def test_the_deployments_cache_key_goes_to_openai_and_to_no_other_server():
    from precis.llm import model_from
    from precis.settings import Settings

    openai_model = model_from(Settings(llm_api_key="sk-test", table_name="precis-prod"))
    local = model_from(Settings(llm_base_url="http://127.0.0.1:9/v1", table_name="precis-prod"))
    assert (openai_model.cache_key, local.cache_key) == ("precis:precis-prod", None)  # type: ignore[attr-defined]


SONNET = "us.anthropic.claude-3-7-sonnet-20250219-v1:0"


def bedrock_reply(model_id: str, system: str, question: str):
    llm = model_of("bedrock", model=model_id, timeout=5.0, max_attempts=1)
    return llm.complete(
        [{"role": "system", "content": system}, {"role": "user", "content": question}], max_tokens=32, timeout=5.0
    )


def test_a_long_system_prompt_gets_a_cache_point_on_a_model_that_caches_and_is_read_the_second_time(endpoint):
    first, second = bedrock_reply(SONNET, PREFIX, "where?"), bedrock_reply(SONNET, PREFIX, "and bob?")
    assert [r.body["system"][-1] for r in endpoint.requests] == [{"cachePoint": {"type": "default"}}] * 2
    assert (
        first.cached_input_tokens == 0 and second.input_tokens > second.cached_input_tokens > 0
    )  # (read, and counted)
    assert second.input_tokens == first.input_tokens  # the same prompt, read from the cache or written to it


@pytest.mark.parametrize(
    ("model_id", "system"),
    [(SONNET, "Be brief."), ("meta.llama3-70b-instruct-v1:0", PREFIX)],
    ids=["short prompt", "model without caching"],
)
def test_no_cache_point_where_it_would_cache_nothing(endpoint, model_id, system):
    bedrock_reply(model_id, system, "where?")
    (request,) = endpoint.requests
    assert not [b for b in request.body["system"] if "cachePoint" in b]
