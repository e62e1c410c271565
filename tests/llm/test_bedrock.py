"""The `bedrock` provider: the real botocore bedrock-runtime client against the local Bedrock-compatible server
(local/models/bedrock_server.py), reached through AWS_ENDPOINT_URL_BEDROCK_RUNTIME: Converse with tools and structured
output, InvokeModel for Titan and Cohere embeddings, each error class, and the settings that choose it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from local.models.bedrock_server import prompt_tokens
from precis.llm import BadAnswer, EngineError, PromptTooLong, model_from, model_of
from precis.llm.embeddings import BedrockEmbedder, get_embedder
from precis.settings import Settings, SettingsError, get_settings

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROFILE = "us.anthropic.claude-3-5-haiku-20241022-v1:0"
TOOL = {
    "type": "function",
    "function": {
        "name": "search_messages",
        "description": "Search the messages.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
    },
}
SCHEMA = {
    "type": "json_schema",
    "json_schema": {
        "name": "answer",
        "schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@pytest.fixture
def sleeps() -> list[float]:
    return []


def model(sleeps, name: str = PROFILE, **options):
    return model_of("bedrock", model=name, timeout=5.0, max_attempts=4, sleep=sleeps.append, rng=lambda: 0.5, **options)


def ask(llm, messages, **options):
    """One answer through the seam's retries, with the attempts it took."""
    return llm.retrying(lambda timeout: llm.complete(messages, max_tokens=64, timeout=timeout, **options), 30.0)


def test_converse_carries_system_messages_max_tokens_and_temperature_and_reports_usage(endpoint, sleeps):
    reply, attempts = ask(
        model(sleeps),
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "intro\nalice lives in Lisbon"}],
        temperature=0.2,
    )
    assert (reply.text, attempts, reply.model) == ("Summary: alice lives in Lisbon", 1, PROFILE)
    assert reply.input_tokens > 0 and reply.output_tokens > 0
    (request,) = endpoint.requests
    assert (request.operation, request.model) == ("converse", PROFILE)  # the profile id, as the URL carried it
    assert request.body["system"] == [{"text": "Be brief."}]
    assert request.body["messages"] == [{"role": "user", "content": [{"text": "intro\nalice lives in Lisbon"}]}]
    assert request.body["inferenceConfig"] == {"maxTokens": 64, "temperature": 0.2}
    assert request.headers["authorization"].startswith("AWS4-HMAC-SHA256")  # signed by the role's credentials


def test_tool_rounds_become_tool_config_tool_use_and_tool_results(endpoint, sleeps):
    llm = model(sleeps)
    endpoint.answer = lambda body: (
        {"tool_calls": [{"name": "search_messages", "arguments": {"query": "Lisbon"}}]}
        if len(body["messages"]) == 1
        else "alice lives in Lisbon"
    )
    question = [{"role": "system", "content": "sys"}, {"role": "user", "content": "where does alice live?"}]
    first, _ = ask(llm, question, tools=[TOOL])
    assert first.text is None and [(c.name, json.loads(c.arguments)) for c in first.tool_calls] == [
        ("search_messages", {"query": "Lisbon"})
    ]
    assert endpoint.requests[0].body["toolConfig"] == {
        "tools": [
            {
                "toolSpec": {
                    "name": "search_messages",
                    "description": "Search the messages.",
                    "inputSchema": {"json": TOOL["function"]["parameters"]},
                }
            }
        ]
    }
    call = first.tool_calls[0]
    asked = {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
    history = question + [
        {"role": "assistant", "content": "", "tool_calls": [asked]},
        {"role": "tool", "tool_call_id": call.id, "content": "[m1] alice: I moved to Lisbon."},
    ]
    second, _ = ask(llm, history, tools=[TOOL])
    assert second.text == "alice lives in Lisbon" and second.tool_calls == ()
    assert endpoint.requests[1].body["messages"][1:] == [
        {
            "role": "assistant",
            "content": [{"toolUse": {"toolUseId": call.id, "name": "search_messages", "input": {"query": "Lisbon"}}}],
        },
        {
            "role": "user",
            "content": [
                {"toolResult": {"toolUseId": call.id, "content": [{"text": "[m1] alice: I moved to Lisbon."}]}}
            ],
        },
    ]
    # The last round offers no tools: the service refuses tool blocks without a toolConfig, so they become text.
    last, _ = ask(llm, history)
    assert last.text == "alice lives in Lisbon"
    body = endpoint.requests[2].body
    assert "toolConfig" not in body
    assert "I moved to Lisbon" in json.dumps(body["messages"]) and "toolResult" not in json.dumps(body["messages"])


def test_response_format_is_a_forced_tool_whose_input_is_the_answer(endpoint, sleeps):
    endpoint.answer = lambda body: json.dumps({"city": "Lisbon"})
    reply, _ = ask(
        model(sleeps), [{"role": "user", "content": "where?"}], response_format=SCHEMA, schema_prompt="answer as JSON"
    )
    assert json.loads(reply.text) == {"city": "Lisbon"} and reply.tool_calls == ()
    config = endpoint.requests[0].body["toolConfig"]
    assert config["toolChoice"] == {"tool": {"name": "answer"}}
    assert config["tools"][0]["toolSpec"]["inputSchema"] == {"json": SCHEMA["json_schema"]["schema"]}
    assert "system" not in endpoint.requests[0].body  # the schema is the tool's, not the prompt's
    # With search tools offered too, the model must call one of them or answer through the answer tool.
    reply, _ = ask(model(sleeps), [{"role": "user", "content": "where?"}], tools=[TOOL], response_format=SCHEMA)
    assert json.loads(reply.text) == {"city": "Lisbon"}
    config = endpoint.requests[1].body["toolConfig"]
    assert config["toolChoice"] == {"any": {}} and [t["toolSpec"]["name"] for t in config["tools"]] == [
        "search_messages",
        "answer",
    ]


def test_a_model_without_forced_tools_gets_the_schema_in_the_prompt_once_and_for_all(endpoint, sleeps):
    endpoint.structured_output = False
    endpoint.answer = lambda body: json.dumps({"city": "Lisbon"})
    llm = model(sleeps, name="meta.llama3-1-70b-instruct-v1:0")
    for _ in range(2):
        reply, _ = ask(
            llm, [{"role": "user", "content": "where?"}], response_format=SCHEMA, schema_prompt="Answer with JSON only."
        )
        assert json.loads(reply.text) == {"city": "Lisbon"}
    assert [r.mode for r in endpoint.requests] == ["no_tool_choice", "ok", "ok"]  # refused once, never asked again
    assert endpoint.requests[-1].body["system"] == [{"text": "Answer with JSON only."}]
    assert "toolConfig" not in endpoint.requests[-1].body and sleeps == []


def test_throttling_5xx_and_garbage_are_retried_with_backoff(endpoint, sleeps):
    endpoint.script(["throttle", "500", "503", "ok"])
    reply, attempts = ask(model(sleeps), [{"role": "user", "content": "alice lives in Lisbon"}])
    assert (reply.text, attempts) == ("Summary: alice lives in Lisbon", 4)
    assert sleeps == [0.375, 0.75, 1.5]  # equal jitter at rng 0.5: base 0.5, doubling
    endpoint.script(["garbage", "empty", "ok"])
    llm = model(sleeps)
    reply, attempts = llm.retrying(
        lambda t: llm.complete([{"role": "user", "content": "x y"}], max_tokens=8, timeout=t).require_text(), 30.0
    )
    assert (reply, attempts) == ("Summary: x y", 3)


def test_throttling_that_never_ends_gives_up_retryable(endpoint, sleeps):
    endpoint.mode = "throttle"
    with pytest.raises(EngineError, match="gave up after 4 attempts: ThrottlingException") as caught:
        ask(model(sleeps), [{"role": "user", "content": "hi"}])
    assert caught.value.retryable is True and len(endpoint.requests) == 4


def test_input_too_long_is_prompt_too_long_and_not_retried(endpoint, sleeps):
    endpoint.max_context_tokens = 50
    with pytest.raises(PromptTooLong, match="Input is too long"):
        ask(model(sleeps), [{"role": "user", "content": "word " * 400}])
    assert [r.mode for r in endpoint.requests] == ["too_long"] and sleeps == []


@pytest.mark.parametrize(
    "mode, words",
    [("denied", "access denied to model"), ("unknown", "no such model"), ("invalid", "ValidationException from model")],
)
def test_refusals_are_final_and_name_the_model(endpoint, sleeps, mode, words):
    endpoint.mode = mode
    with pytest.raises(EngineError) as caught:
        ask(model(sleeps), [{"role": "user", "content": "hi"}], model="anthropic.claude-v9:0")
    assert not isinstance(caught.value, PromptTooLong) and caught.value.retryable is False
    assert words in str(caught.value) and "'anthropic.claude-v9:0'" in str(caught.value)  # the id asked for
    assert len(endpoint.requests) == 1 and sleeps == []


def test_connection_refused_is_retryable(monkeypatch, sleeps):
    for name, value in {
        "AWS_ENDPOINT_URL_BEDROCK_RUNTIME": "http://127.0.0.1:9",
        "AWS_ACCESS_KEY_ID": "t",
        "AWS_SECRET_ACCESS_KEY": "t",
        "AWS_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(EngineError, match="gave up after 4 attempts: EndpointConnectionError") as caught:
        ask(model(sleeps), [{"role": "user", "content": "hi"}])
    assert caught.value.retryable is True and len(sleeps) == 3


def test_titan_embeds_one_text_a_request_at_the_asked_dimensions_normalised(endpoint, sleeps):
    embedder = BedrockEmbedder(model="amazon.titan-embed-text-v2:0", dimensions=256, sleep=sleeps.append)
    vectors = embedder.embed(["alice moved to Lisbon", "", "bob plays chess"])
    assert [len(v) for v in vectors] == [256, 256, 256]
    assert all(abs(sum(x * x for x in v) - 1) < 1e-9 for v in vectors)
    assert [(r.operation, r.model, r.body) for r in endpoint.requests] == [  # the empty text asks nothing
        (
            "invoke",
            "amazon.titan-embed-text-v2:0",
            {"inputText": "alice moved to Lisbon", "dimensions": 256, "normalize": True},
        ),
        (
            "invoke",
            "amazon.titan-embed-text-v2:0",
            {"inputText": "bob plays chess", "dimensions": 256, "normalize": True},
        ),
    ]
    near = embedder.embed(["where did alice move? Lisbon"])[0]
    assert sum(a * b for a, b in zip(near, vectors[0])) > sum(a * b for a, b in zip(near, vectors[2]))


def test_cohere_embeds_up_to_96_texts_a_request_and_retries_throttling(endpoint, sleeps):
    endpoint.script(["throttle"])
    embedder = BedrockEmbedder(model="cohere.embed-english-v3", dimensions=1024, sleep=sleeps.append, rng=lambda: 0.5)
    texts = [f"fact number {i}" for i in range(200)]
    vectors = embedder.embed(texts)
    assert len(vectors) == 200 and {len(v) for v in vectors} == {1024}
    assert [len(r.body["texts"]) for r in endpoint.requests] == [96, 96, 96, 8]  # the first one throttled
    assert [r.mode for r in endpoint.requests] == ["throttle", "ok", "ok", "ok"] and sleeps == [0.375]
    assert endpoint.requests[1].body["input_type"] == "search_document"
    assert vectors[5] != vectors[6]


def test_an_embedding_of_the_wrong_dimension_is_final(endpoint, sleeps):
    embedder = BedrockEmbedder(model="amazon.titan-embed-text-v1", dimensions=256, sleep=sleeps.append)
    with pytest.raises(EngineError, match="answered 1536 dimensions, not 256") as caught:
        embedder.embed(["alice"])
    assert caught.value.retryable is False and len(endpoint.requests) == 1
    assert isinstance(caught.value.__cause__, BadAnswer)


# ---------------------------------------------------------------- settings


def test_each_role_chooses_its_provider(endpoint):
    settings = Settings(
        llm_provider="bedrock",
        llm_model=PROFILE,
        chat_provider="openai",
        llm_base_url="http://127.0.0.1:1/v1",
        bedrock_region="eu-west-1",
    )
    summaries, chat = model_from(settings, "summaries"), model_from(settings, "chat")
    assert (summaries.provider, summaries.model, summaries.region) == ("bedrock", PROFILE, "eu-west-1")
    assert chat.provider == "openai"
    derive = model_from(
        Settings(derive_provider="bedrock", derive_model="amazon.nova-lite-v1:0"),
        "derive",
        model="amazon.nova-lite-v1:0",
    )
    assert (derive.provider, derive.model) == ("bedrock", "amazon.nova-lite-v1:0")


def test_engines_are_llm_with_bedrock_and_no_key(endpoint):
    from precis.chat import chat_engine_name
    from precis.memory.engines import default_deriver_engine
    from precis.summaries.engines import SummaryRequest, default_engine, get_engine

    settings = Settings(llm_provider="bedrock", llm_model=PROFILE)
    assert (default_engine(settings), default_deriver_engine(settings), chat_engine_name(settings)) == (
        "llm",
        "llm",
        "llm",
    )
    assert (default_engine(Settings()), chat_engine_name(Settings())) == ("extractive", "offline")
    result = get_engine("llm", settings).summarize(
        SummaryRequest("honcho_chat_summary_short", None, [("alice", "I moved to Lisbon.")])
    )
    assert result.text.startswith("Summary:") and result.model == PROFILE
    assert result.input_tokens == prompt_tokens(endpoint.requests[0].body)  # the server's count, for the audit record


@pytest.mark.parametrize(
    "env, named",
    [
        ({"PRECIS_LLM_PROVIDER": "azure"}, "PRECIS_LLM_PROVIDER='azure' (template parameter LlmProvider)"),
        (
            {"PRECIS_LLM_PROVIDER": "bedrock", "PRECIS_LLM_MODEL": "gpt-4o-mini"},
            "PRECIS_LLM_MODEL='gpt-4o-mini' (template parameter LlmModel): not a Bedrock model id",
        ),
        ({"PRECIS_CHAT_PROVIDER": "bedrock", "PRECIS_LLM_MODEL": "gpt-4.1"}, "PRECIS_LLM_MODEL='gpt-4.1'"),
        ({"PRECIS_DERIVE_PROVIDER": "bedrock", "PRECIS_DERIVE_MODEL": "o3"}, "PRECIS_DERIVE_MODEL='o3'"),
        ({"PRECIS_BEDROCK_REGION": "Virginia"}, "PRECIS_BEDROCK_REGION='Virginia' (template parameter BedrockRegion)"),
        (
            {"PRECIS_EMBEDDER": "bedrock", "PRECIS_EMBED_MODEL": "text-embedding-3-small"},
            "PRECIS_EMBED_MODEL='text-embedding-3-small' (template parameter EmbedModel)",
        ),
        (
            {
                "PRECIS_EMBEDDER": "bedrock",
                "PRECIS_EMBED_MODEL": "amazon.titan-embed-text-v2:0",
                "PRECIS_EMBED_DIMENSIONS": "300",
            },
            "PRECIS_EMBED_DIMENSIONS=300 (template parameter EmbedDimensions)",
        ),
    ],
)
def test_a_bad_provider_setting_fails_the_cold_start_naming_it(monkeypatch, env, named):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as caught:
        get_settings()
    assert named in str(caught.value)


def test_good_bedrock_settings_pass(monkeypatch):
    for name, value in {
        "PRECIS_LLM_PROVIDER": "bedrock",
        "PRECIS_LLM_MODEL": PROFILE,
        "PRECIS_EMBEDDER": "bedrock",
        "PRECIS_EMBED_MODEL": "amazon.titan-embed-text-v2:0",
        "PRECIS_EMBED_DIMENSIONS": "512",
        "PRECIS_BEDROCK_REGION": "us-west-2",
    }.items():
        monkeypatch.setenv(name, value)
    settings = get_settings()
    assert (settings.llm_provider, settings.bedrock_region, settings.embedder) == ("bedrock", "us-west-2", "bedrock")
    embedder = get_embedder(settings)
    assert isinstance(embedder, BedrockEmbedder) and embedder.dimensions == 512


@pytest.mark.parametrize(
    "env",
    [
        {"PRECIS_LLM_PROVIDER": "bedrock"},
        {"PRECIS_LLM_PROVIDER": "bedrock", "PRECIS_LLM_MODEL": "", "PRECIS_EMBED_MODEL": ""},
    ],
)
def test_bedrock_without_model_ids_gives_each_role_its_documented_default(monkeypatch, env):
    """A provider alone is a working setup: Amazon Nova 2 Lite (its US inference profile) for summaries, derivation
    and chat, Titan Text Embeddings V2 for a Bedrock embedder; an empty variable (the template's empty parameter)
    is no model named."""
    for name, value in {**env, "PRECIS_EMBEDDER": "bedrock"}.items():
        monkeypatch.setenv(name, value)
    settings = get_settings()
    assert [settings.model_for(role) for role in ("summaries", "derive", "chat", "embed")] == [
        "us.amazon.nova-2-lite-v1:0",
        "us.amazon.nova-2-lite-v1:0",
        "us.amazon.nova-2-lite-v1:0",
        "amazon.titan-embed-text-v2:0",
    ]
    assert [(m.provider, m.model) for m in (model_from(settings, r) for r in ("summaries", "derive", "chat"))] == [
        ("bedrock", "us.amazon.nova-2-lite-v1:0")
    ] * 3
    assert get_embedder(settings).model == "amazon.titan-embed-text-v2:0"


def test_each_role_defaults_to_its_own_providers_model():
    """Mixed providers, no model named: each role asks its provider's default; a model named wins everywhere."""
    mixed = Settings(llm_provider="bedrock", chat_provider="openai", derive_model="amazon.nova-lite-v1:0")
    assert [mixed.model_for(r) for r in ("summaries", "derive", "chat", "embed")] == [
        "us.amazon.nova-2-lite-v1:0",
        "amazon.nova-lite-v1:0",
        "gpt-4o-mini",
        "text-embedding-3-small",
    ]
    assert Settings().model_for("summaries") == "gpt-4o-mini"
    assert Settings(llm_provider="bedrock", llm_model=PROFILE).model_for("derive") == PROFILE


def test_bedrock_without_model_ids_summarizes_through_the_local_server(endpoint):
    """The summarizer's engine, from settings naming no model, asks the local Bedrock server for Nova 2 Lite."""
    from precis.summaries.engines import SummaryRequest, get_engine

    result = get_engine("llm", Settings(llm_provider="bedrock")).summarize(
        SummaryRequest("honcho_chat_summary_short", None, [("alice", "I moved to Lisbon.")])
    )
    assert result.text.startswith("Summary:") and result.model == "us.amazon.nova-2-lite-v1:0"
    (request,) = endpoint.requests
    assert (request.operation, request.model) == ("converse", "us.amazon.nova-2-lite-v1:0")
    assert request.body["inferenceConfig"]["maxTokens"] > 0


def test_botocore_is_imported_only_by_the_first_call():
    code = (
        "import sys; from precis.llm import model_of; m = model_of('bedrock', model='amazon.nova-lite-v1:0'); "
        "assert 'botocore' not in sys.modules, 'botocore imported'; "
        "m.client(5); assert 'botocore.client' in sys.modules"
    )
    subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        check=True,
        env={**os.environ, "PYTHONPATH": f"layers/common{os.pathsep}.", "AWS_REGION": "us-east-1"},
    )
