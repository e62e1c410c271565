"""Runs from `metadata.run_id` (what the SDK can send), `whole_runs` from configuration, and the deployment's summary
defaults (template parameters): built-in < deployment < workspace < session (docs/design.md, "Summaries")."""

from __future__ import annotations

import subprocess
import sys

import pytest

from deploy.template import TEMPLATE, Tag, parse
from local.template import template
from local.worker import PASS_THROUGH, function_environment
from precis.configuration import summary_config
from precis.settings import SUMMARY_ENV, Settings, SettingsError, get_settings
from precis.summaries.strategies import SummaryConfig
from tests.context.test_context import assert_two_rounds, measured_context
from tests.handlers import call, invoke
from tests.stream import message_records

WS = "ws1"
W = f"/v3/workspaces/{WS}"
SHORT = "honcho_chat_summary_short"
# Runs a: 1-3, a message alone: 4, b: 5-7, c: 8-9.
LAYOUT = [("a", 3), (None, 1), ("b", 3), ("c", 2)]


@pytest.fixture
def ws(aws):
    assert call("POST", "/v3/workspaces", {"id": WS}).status == 201
    return aws


def post(session: str, messages: list[dict], status: int = 201):
    reply = call("POST", f"{W}/sessions/{session}/messages", {"messages": messages})
    assert reply.status == status, reply.body
    return reply.body


def layout_messages(how: str) -> list[dict]:
    """The LAYOUT's messages, their runs given as `run_id` (ext) or as `metadata.run_id` (the SDK's way)."""
    out = []
    for run, size in LAYOUT:
        for _ in range(size):
            message = {"content": f"message {len(out) + 1} " + "tok " * 8, "peer_id": "alice"}
            if run is not None:
                message.update({"run_id": run} if how == "ext" else {"metadata": {"run_id": run, "step": len(out)}})
            out.append(message)
    return out


def context(session: str, **query) -> dict:
    reply = call("GET", f"{W}/sessions/{session}/context", **query)
    assert reply.status == 200, reply.body
    return reply.body


def seqs(body: dict) -> list[int]:
    return [m["seq"] for m in body["messages"]]


def partial_budget(posted: list[dict]) -> int:
    """A budget that fits messages 6..9: run b (5-7) only in part."""
    return sum(m["token_count"] for m in posted[5:])


# --- runs from metadata.run_id ------------------------------------------------------------------------------------


def test_metadata_run_id_makes_the_run_when_run_id_is_absent(ws):
    posted = post("meta", layout_messages("metadata"))
    assert [m.get("run_id") for m in posted] == ["a"] * 3 + [None] + ["b"] * 3 + ["c"] * 2
    assert posted[0]["metadata"] == {"run_id": "a", "step": 0}  # the metadata is kept as sent
    got = call("GET", f"{W}/sessions/meta/messages/{posted[5]['id']}").body
    assert got["run_id"] == "b" and got["metadata"] == {"run_id": "b", "step": 5}


def test_runs_from_metadata_and_from_run_id_give_the_same_contexts(ws):
    ext, meta = post("ext", layout_messages("ext")), post("meta", layout_messages("metadata"))
    assert [m["token_count"] for m in ext] == [m["token_count"] for m in meta]
    for tokens in range(1, sum(m["token_count"] for m in ext) + 2):
        for whole in ("true", "false"):
            assert seqs(context("ext", tokens=tokens, whole_runs=whole)) == seqs(
                context("meta", tokens=tokens, whole_runs=whole)
            ), (tokens, whole)
    assert seqs(context("meta", tokens=partial_budget(meta), whole_runs="true")) == [8, 9]


def test_run_id_wins_over_metadata_run_id(ws):
    posted = post(
        "s1",
        [
            {"content": "one", "peer_id": "alice", "run_id": "ext", "metadata": {"run_id": "meta"}},
            {"content": "two", "peer_id": "alice", "metadata": {"run_id": "meta"}},
        ],
    )
    assert [m["run_id"] for m in posted] == ["ext", "meta"]


def test_a_null_metadata_run_id_is_no_run(ws):
    posted = post("s1", [{"content": "one", "peer_id": "alice", "metadata": {"run_id": None}}])
    assert "run_id" not in posted[0] and posted[0]["metadata"] == {"run_id": None}


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (5, "got int 5"),
        (True, "got bool True"),
        ("", "got ''"),
        ("two words", "got 'two words'"),
        ("x" * 101, "got 101 characters"),
        ("tab\t", "got 'tab\\t'"),
        (["r1"], "got list ['r1']"),
        ({"id": "r" * 50}, "got dict {'id': '" + "r" * 31 + "…"),
        ("run\n", "got 'run\\n'"),
    ],
)
def test_a_bad_metadata_run_id_is_422_naming_it_and_nothing_is_stored(ws, value, shown):
    assert call("POST", f"{W}/sessions", {"id": "s1"}).status == 201
    reply = call(
        "POST",
        f"{W}/sessions/s1/messages",
        {
            "messages": [
                {"content": "fine", "peer_id": "alice", "metadata": {"run_id": "ok"}},
                {"content": "bad", "peer_id": "alice", "metadata": {"run_id": value}},
            ]
        },
    )
    assert reply.status == 422
    assert reply.body["detail"].startswith("messages[1].metadata.run_id: a string of 1-100 characters")
    assert shown in reply.body["detail"]
    assert call("POST", f"{W}/sessions/s1/messages/list").body["total"] == 0


def test_a_bad_metadata_run_id_is_no_error_when_run_id_is_given(ws):
    posted = post("s1", [{"content": "one", "peer_id": "alice", "run_id": "r", "metadata": {"run_id": 5}}])
    assert posted[0]["run_id"] == "r" and posted[0]["metadata"] == {"run_id": 5}


def test_summaries_end_at_the_ends_of_runs_given_in_metadata(ws):
    # Three runs of 7 (the third open): 14 messages in complete runs, no short summary due yet.
    post(
        "s1",
        [
            {
                "content": f"step {i}: the agent checked the quote.",
                "peer_id": "agent",
                "metadata": {"run_id": f"turn-{i // 7}"},
            }
            for i in range(21)
        ],
    )
    assert invoke("SummarizeFunction", {"Records": message_records(ws["dynamodb"], WS, "s1")}) == {
        "batchItemFailures": []
    }
    assert call("GET", f"{W}/sessions/s1/summaries").body["short_summary"] is None
    post("s1", [{"content": "thanks", "peer_id": "alice"}])  # closes turn-2: 22 messages in complete runs
    invoke("SummarizeFunction", {"Records": message_records(ws["dynamodb"], WS, "s1", first=22)})
    short = call("GET", f"{W}/sessions/s1/summaries").body["short_summary"]
    ids = {m["seq"]: m["id"] for m in call("POST", f"{W}/sessions/s1/messages/list", size=100).body["items"]}
    assert short["message_id"] == ids[14]  # the end of turn-1, the last run end at or before #20


# --- whole_runs from configuration ----------------------------------------------------------------------------


def test_whole_runs_comes_from_the_workspace_then_the_session_and_the_parameter_wins(ws):
    posted = post("s1", layout_messages("ext"))
    budget = partial_budget(posted)
    assert seqs(context("s1", tokens=budget)) == [6, 7, 8, 9]  # built-in default: false
    assert call("PUT", W, {"configuration": {"summarizer": {"whole_runs": True}}}).status == 200
    assert seqs(context("s1", tokens=budget)) == [8, 9]
    assert seqs(context("s1", tokens=budget, whole_runs="false")) == [6, 7, 8, 9]
    assert call("PUT", f"{W}/sessions/s1", {"configuration": {"summarizer": {"whole_runs": False}}}).status == 200
    assert seqs(context("s1", tokens=budget)) == [6, 7, 8, 9]
    assert seqs(context("s1", tokens=budget, whole_runs="true")) == [8, 9]


def test_whole_runs_from_configuration_costs_no_extra_request(ws):
    posted = post("s1", layout_messages("ext"))
    call("PUT", W, {"configuration": {"summarizer": {"whole_runs": True}}})
    body, calls = measured_context("s1", tokens=partial_budget(posted))
    assert seqs(body) == [8, 9]
    assert_two_rounds(calls, body)


@pytest.mark.parametrize("value", ["maybe", 2, [True]])
def test_a_bad_whole_runs_setting_is_422_naming_it(ws, value):
    reply = call("PUT", W, {"configuration": {"summarizer": {"whole_runs": value}}})
    assert reply.status == 422 and "configuration.summarizer.whole_runs" in reply.body["detail"]


def test_a_bad_whole_runs_parameter_is_422(ws):
    post("s1", layout_messages("ext"))
    assert call("GET", f"{W}/sessions/s1/context", whole_runs="sometimes").status == 422


# --- the deployment's defaults --------------------------------------------------------------------------------


def deployment(monkeypatch, **values: str) -> None:
    """Set this deployment's summary defaults as the template sets them: PRECIS_SUMMARY_* variables."""
    for field, value in values.items():
        monkeypatch.setenv(SUMMARY_ENV[field][0], value)
    get_settings.cache_clear()


def test_each_default_is_read_from_its_variable(monkeypatch):
    deployment(
        monkeypatch,
        strategy="rolling",
        engine="extractive",
        token_threshold="4000",
        keep_recent_runs="3",
        keep_runs="7",
        max_output_tokens="300",
        whole_runs="true",
    )
    assert get_settings().summary_defaults == {
        "strategy": "rolling",
        "engine": "extractive",
        "token_threshold": 4000,
        "keep_recent_runs": 3,
        "keep_runs": 7,
        "max_output_tokens": 300,
        "whole_runs": True,
    }
    assert summary_config(None) == SummaryConfig(
        strategy="rolling",
        engine="extractive",
        token_threshold=4000,
        keep_recent_runs=3,
        keep_runs=7,
        max_output_tokens=300,
        whole_runs=True,
    )


def test_auto_engine_and_zero_output_tokens_leave_the_choice_to_precis(monkeypatch):
    deployment(monkeypatch, strategy="rolling", engine="auto", token_threshold="3200", max_output_tokens="0")
    assert get_settings().summary_defaults == {"strategy": "rolling", "token_threshold": 3200}
    config = summary_config(None)
    assert config.engine is None and config.max_output_tokens == 200  # a sixteenth of the threshold


def test_precedence_is_built_in_then_deployment_then_workspace_then_session():
    deployment = {"strategy": "rolling", "token_threshold": 4000, "keep_recent_runs": 3, "whole_runs": True}
    workspace = {"summarizer": {"token_threshold": 3000, "keep_recent_runs": 4}}
    session = {"summarizer": {"keep_recent_runs": 2, "whole_runs": None}}  # None inherits
    assert summary_config(None, deployment={}) == SummaryConfig()
    config = summary_config(workspace, session, deployment=deployment)
    assert (config.strategy, config.token_threshold, config.keep_recent_runs, config.whole_runs) == (
        "rolling",
        3000,
        2,
        True,
    )
    assert config.keep_runs == 10 and config.messages_per_short_summary == 20  # built-in
    assert config.max_output_tokens == 3000 // 16  # derived from the merged settings, not the deployment's alone


def test_the_deployments_defaults_reach_the_routes_and_the_configuration_overrides_them(ws, monkeypatch):
    deployment(monkeypatch, strategy="sliding_window", keep_runs="2", whole_runs="true")
    posted = post("s1", layout_messages("ext"))
    assert seqs(context("s1")) == [5, 6, 7, 8, 9]  # the newest two runs, from the deployment
    assert seqs(context("s1", tokens=partial_budget(posted))) == [8, 9]  # whole runs, from the deployment
    call("PUT", W, {"configuration": {"summarizer": {"strategy": "cadence", "whole_runs": False}}})
    assert seqs(context("s1", tokens=partial_budget(posted))) == [6, 7, 8, 9]
    assert seqs(context("s1")) == list(range(1, 10))


def test_a_setting_that_clashes_with_a_deployment_default_is_422_naming_the_variable(ws, monkeypatch):
    deployment(monkeypatch, max_output_tokens="1000")
    reply = call("PUT", W, {"configuration": {"summarizer": {"strategy": "rolling", "token_threshold": 2000}}})
    assert reply.status == 422
    detail = reply.body["detail"]
    assert detail.startswith(
        "configuration.summarizer.max_output_tokens: at most a quarter of token_threshold 2000 "
        "(500) for the rolling strategy, got 1000"
    )
    assert "PRECIS_SUMMARY_MAX_OUTPUT_TOKENS" in detail and "SummaryMaxOutputTokens" in detail
    ok = {"summarizer": {"strategy": "rolling", "token_threshold": 2000, "max_output_tokens": 400}}
    assert call("PUT", W, {"configuration": ok}).status == 200


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"strategy": "weekly"}, "PRECIS_SUMMARY_STRATEGY='weekly'"),
        ({"engine": "gpt"}, "PRECIS_SUMMARY_ENGINE='gpt'"),
        ({"token_threshold": "lots"}, "PRECIS_SUMMARY_TOKEN_THRESHOLD='lots'"),
        ({"keep_recent_runs": "0"}, "PRECIS_SUMMARY_KEEP_RECENT_RUNS=0 (template parameter SummaryKeepRecentRuns)"),
        ({"keep_runs": "-1"}, "PRECIS_SUMMARY_KEEP_RUNS=-1 (template parameter SummaryKeepRuns)"),
        (
            {"max_output_tokens": "32"},
            "PRECIS_SUMMARY_MAX_OUTPUT_TOKENS=32 (template parameter SummaryMaxOutputTokens)",
        ),
        ({"max_output_tokens": "5000"}, "PRECIS_SUMMARY_MAX_OUTPUT_TOKENS=5000"),
        ({"whole_runs": "ture"}, "PRECIS_SUMMARY_WHOLE_RUNS='ture'"),
        (
            {"strategy": "rolling", "token_threshold": "200"},
            "PRECIS_SUMMARY_TOKEN_THRESHOLD=200 (template parameter SummaryTokenThreshold): "
            "at least 256 for the rolling",
        ),
        (
            {"strategy": "rolling", "token_threshold": "4000", "max_output_tokens": "1001"},
            "PRECIS_SUMMARY_MAX_OUTPUT_TOKENS=1001 (template parameter SummaryMaxOutputTokens): at most a quarter of "
            "token_threshold 4000 (1000)",
        ),
    ],
)
def test_a_bad_deployment_value_fails_loudly_naming_the_variable(monkeypatch, values, named):
    deployment(monkeypatch, **values)
    with pytest.raises(SettingsError) as caught:
        get_settings()
    assert named in str(caught.value)


def test_settings_made_in_code_are_checked_too():
    with pytest.raises(ValueError, match="PRECIS_SUMMARY_MAX_OUTPUT_TOKENS=2048"):
        Settings(summary_strategy="rolling", summary_max_output_tokens=2048)  # the default threshold 8000: 2000


# --- the template and the local stack -------------------------------------------------------------------------


def test_every_default_is_a_template_parameter_passed_to_every_function():
    raw = parse(TEMPLATE.read_text())
    variables = raw["Globals"]["Function"]["Environment"]["Variables"]
    for field, (variable, parameter) in SUMMARY_ENV.items():
        value = variables[variable]
        assert isinstance(value, Tag) and value.name == "Ref" and value.value == parameter, field
        assert parameter in raw["Parameters"], parameter
        assert variable in PASS_THROUGH, f"{variable}: `make dev` could not override it"
    numbers = {"token_threshold", "keep_recent_runs", "keep_runs", "max_output_tokens"}
    assert {f for f, (_, p) in SUMMARY_ENV.items() if raw["Parameters"][p]["Type"] == "Number"} == numbers
    for fn in template().functions.values():
        assert {v for v, _ in SUMMARY_ENV.values()} <= set(fn.environment), fn.logical_id


def test_the_templates_defaults_are_the_built_in_defaults():
    """Deploying with the parameters' defaults changes nothing: the built-ins, and max_output_tokens derived."""
    for fn in template().functions.values():
        env = fn.environment
        settings = Settings(**{f"summary_{field}": env[variable] for field, (variable, _) in SUMMARY_ENV.items()})
        assert summary_config(None, deployment=settings.summary_defaults) == SummaryConfig()
        rolling = summary_config(
            {"summarizer": {"strategy": "rolling", "token_threshold": 400}}, deployment=settings.summary_defaults
        )
        assert rolling.max_output_tokens == 64


def test_make_dev_overrides_the_templates_defaults_with_precis_variables(monkeypatch):
    monkeypatch.setenv("PRECIS_SUMMARY_STRATEGY", "rolling")
    monkeypatch.setenv("PRECIS_SUMMARY_WHOLE_RUNS", "true")
    tpl = template()
    for fn in tpl.functions.values():
        env = function_environment(tpl, fn, "http://127.0.0.1:9")
        assert (env["PRECIS_SUMMARY_STRATEGY"], env["PRECIS_SUMMARY_WHOLE_RUNS"]) == ("rolling", "true")
        assert env["PRECIS_SUMMARY_TOKEN_THRESHOLD"] == "8000"  # the rest as the template says


@pytest.mark.parametrize("logical_id", sorted(template().functions))
def test_a_bad_value_fails_the_functions_cold_start(logical_id, monkeypatch):
    """Each function starts as Lambda starts it (importing its handler module); a bad default stops it there."""
    tpl = template()
    fn = tpl.functions[logical_id]
    module = fn.handler.rsplit(".", 1)[0]

    def start(**values: str) -> subprocess.CompletedProcess:
        env = {**function_environment(tpl, fn, "http://127.0.0.1:9"), **values}
        return subprocess.run(
            [sys.executable, "-c", f"import {module}"],
            cwd=fn.code_dir,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    assert start().returncode == 0
    failed = start(
        PRECIS_SUMMARY_STRATEGY="rolling", PRECIS_SUMMARY_TOKEN_THRESHOLD="1000", PRECIS_SUMMARY_MAX_OUTPUT_TOKENS="400"
    )
    assert failed.returncode != 0
    assert (
        "SettingsError: invalid settings in the environment: PRECIS_SUMMARY_MAX_OUTPUT_TOKENS=400 (template "
        "parameter SummaryMaxOutputTokens): at most a quarter of token_threshold 1000 (250)"
    ) in failed.stderr


def test_settings_stored_before_a_clashing_deployment_never_stop_the_context(ws, monkeypatch):
    # A workspace configuration valid when written can clash with defaults deployed later: the context still
    # answers (as if the workspace set nothing), and the next write of the configuration says what is wrong.
    post("s1", layout_messages("ext"))
    rolling = {"summarizer": {"strategy": "rolling", "token_threshold": 2000}}
    assert call("PUT", W, {"configuration": rolling}).status == 200
    deployment(monkeypatch, max_output_tokens="1000", whole_runs="true")
    assert seqs(context("s1", tokens=partial_budget(call("POST", f"{W}/sessions/s1/messages/list").body["items"]))) == [
        8,
        9,
    ]
    reply = call("PUT", W, {"configuration": rolling})
    assert reply.status == 422 and "PRECIS_SUMMARY_MAX_OUTPUT_TOKENS" in reply.body["detail"]
