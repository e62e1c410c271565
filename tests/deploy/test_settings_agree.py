"""Every deployment setting agrees wherever it is written: template.yaml's parameters and environment (Globals, or the
function that reads it), the settings' table (`precis.settings.ENVIRONMENT`: field -> variable -> parameter), the
knobs `make dev` takes from the shell (`local.worker.PASS_THROUGH`) and the README. Each failure names the setting and
the place where it is missing or named differently.

What is deliberately not in one of those places is listed here, with the reason.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from deploy.template import ROOT, TEMPLATE, Tag, parse
from local.template import load_template
from local.worker import PASS_THROUGH
from precis.schemas.summary_settings import SummaryConfig
from precis.settings import ENVIRONMENT, SUMMARY_ENV, Settings, get_settings

RAW = parse(TEMPLATE.read_text())
PARAMETERS: dict[str, Any] = RAW["Parameters"]
README = (ROOT / "README.md").read_text()
VARIABLE = {field: variable for field, (variable, _) in ENVIRONMENT.items()}
PARAMETER = {variable: parameter for variable, parameter in ENVIRONMENT.values()}

# Variables of the template's environment that configure the runtime and its libraries, not Precis.
RUNTIME = {
    "POWERTOOLS_SERVICE_NAME",
    "POWERTOOLS_METRICS_NAMESPACE",
    "POWERTOOLS_LOG_LEVEL",
    "POWERTOOLS_LOGGER_LOG_EVENT",
    "TIKTOKEN_CACHE_DIR",
    "PYDANTIC_DISABLE_PLUGINS",
}
# Parameters that size or name resources and reach no function's environment.
RESOURCE_PARAMETERS = {
    "SummarizerReservedConcurrency",
    "DeriverReservedConcurrency",
    "LogRetentionDays",
    "ApiRateLimit",
    "ApiBurstLimit",
}
# Settings the template fixes, or takes from its own resources: nothing for a deployer to choose, so no parameter.
FIXED = {
    "TABLE_NAME": "the stack's table",
    "BUCKET_NAME": "the stack's bucket",
    "PRECIS_DERIVE_WAKE_QUEUE_URL": "the stack's wake-up queue (the deriver's environment alone)",
    "PRECIS_WEBHOOK_QUEUE_URL": "the stack's webhook queue",
    "PRECIS_AUTH": "deployed stacks always check keys (test_template_policy.test_auth_is_always_on_where_it_deploys)",
    "PRECIS_DREAM_MIN_CONCLUSIONS": "Honcho's 50",
    "PRECIS_DREAM_IDLE_S": "Honcho's hour",
    "PRECIS_DERIVE_CARD_EVERY": "chosen on make bench derive (docs/design.md, cards once per burst)",
    "PRECIS_DERIVE_CARD_MAX_S": "chosen on make bench derive (docs/design.md, cards once per burst)",
    "PRECIS_DERIVE_CARD_QUIET_S": "chosen on make bench derive (docs/design.md, cards once per burst)",
}
# Settings deliberately absent from the template: a deployed function runs the built-in default (the two secrets:
# Secrets Manager), and `make dev` takes them from the shell.
LOCAL_ONLY = {
    "PRECIS_JWT_SECRET": "deployed, the signing key is read from the secret (SecretName), never the environment",
    "OPENAI_API_KEY": "deployed, the key is read from the secret (llm_api_key)",
    "PRECIS_SUMMARIES_PROVIDER": "a provider per role is a local experiment: deployed, LlmProvider serves every role "
    "and the Bedrock grants follow it",
    "PRECIS_DERIVE_PROVIDER": "as PRECIS_SUMMARIES_PROVIDER",
    "PRECIS_CHAT_PROVIDER": "as PRECIS_SUMMARIES_PROVIDER",
    "PRECIS_DERIVE_MODEL": "deployed, the deriver asks LlmModel, the model the roles may invoke (a workspace's "
    "configuration.deriver.model may name another)",
    "PRECIS_INLINE_BODY_MAX_BYTES": "a built-in limit (docs/design.md, Limits)",
    "PRECIS_MAX_MESSAGE_CHARS": "Honcho's limit, built in",
    "PRECIS_CONTEXT_RECALL_SHARE": "chosen by `make bench retrieval`, built in",
    "PRECIS_LLM_TIMEOUT_S": "the model client's own defaults",
    "PRECIS_LLM_MAX_ATTEMPTS": "the model client's own defaults",
    "PRECIS_PURGE_GRACE_S": "longer than any request begun before a delete can run, built in",
    "PRECIS_SUMMARIZE_CONCURRENCY": "chosen by `make bench` (scale), built in",
    "PRECIS_WEBHOOKS_ALLOW_HTTP_LOCAL": "a deployment never delivers to http or loopback addresses; `make dev` turns "
    "it on for receivers on the developer's machine",
}
# Settings `make dev` does not take from the shell: the local stack names its own resources and stage, and has no
# Secrets Manager (PRECIS_JWT_SECRET and OPENAI_API_KEY stand in).
NOT_PASSED_THROUGH = {
    "TABLE_NAME",
    "BUCKET_NAME",
    "STAGE",
    "PRECIS_SECRET_NAME",
    "PRECIS_DERIVE_WAKE_QUEUE_URL",
    "PRECIS_WEBHOOK_QUEUE_URL",
}
# Passed through but not Precis's settings: botocore's endpoint override and Powertools' switches.
PASSED_NOT_SETTINGS = {"AWS_ENDPOINT_URL_BEDROCK_RUNTIME", "POWERTOOLS_LOG_LEVEL", "POWERTOOLS_METRICS_DISABLED"}


# Set in each function that publishes events (precis.events), the same value in each: the others have no grant to use.
PUBLISHERS_ONLY = {"PRECIS_WEBHOOK_QUEUE_URL", "PRECIS_EVENT_BUS_NAME"}


def template_environment() -> dict[str, tuple[str, Any]]:
    """Variable -> (where it is set: "Globals" or the function's logical id, its value as written)."""
    found = {k: ("Globals", v) for k, v in RAW["Globals"]["Function"]["Environment"]["Variables"].items()}
    for logical_id, resource in RAW["Resources"].items():
        if resource["Type"] == "AWS::Serverless::Function":
            for name, value in resource["Properties"].get("Environment", {}).get("Variables", {}).items():
                if name in PUBLISHERS_ONLY and name in found:
                    assert repr(found[name][1]) == repr(value), f"{name} differs in {found[name][0]} and {logical_id}"
                assert name not in found or name in RUNTIME | PUBLISHERS_ONLY, (
                    f"{name} is set both in {found[name][0]} and {logical_id}"
                )
                found.setdefault(name, (logical_id, value))
    return found


def parameter_of(value: Any) -> str | None:
    """The template parameter a variable's value comes from: `!Ref P`, or `!If [HasP, !Ref P, !Ref AWS::NoValue]`."""
    if isinstance(value, Tag) and value.name == "If":
        _, chosen, otherwise = value.value
        assert (otherwise.name, otherwise.value) == ("Ref", "AWS::NoValue"), value
        value = chosen
    if isinstance(value, Tag) and value.name == "Ref" and value.value in PARAMETERS:
        return value.value
    return None


ENV = template_environment()


def test_the_settings_table_declares_every_field_once():
    assert set(ENVIRONMENT) == set(Settings.model_fields), "precis.settings.ENVIRONMENT and Settings' fields differ"
    variables = [variable for variable, _ in ENVIRONMENT.values()]
    assert len(variables) == len(set(variables)), "a variable named for two fields"
    parameters = [parameter for _, parameter in ENVIRONMENT.values() if parameter]
    assert len(parameters) == len(set(parameters)), "a template parameter named for two fields"
    from_table = {f: ENVIRONMENT[f"summary_{f}"] for f in SummaryConfig.model_fields if f"summary_{f}" in ENVIRONMENT}
    assert from_table == SUMMARY_ENV


@pytest.mark.parametrize("field", sorted(f for f, (_, p) in ENVIRONMENT.items() if p))
def test_each_parameter_of_the_settings_reaches_its_variable(field):
    variable, parameter = ENVIRONMENT[field]
    assert parameter in PARAMETERS, f"{variable}: settings name template parameter {parameter}, template.yaml has none"
    assert variable in ENV, f"{variable} (parameter {parameter}) is in no environment of template.yaml"
    where, value = ENV[variable]
    assert parameter_of(value) == parameter, (
        f"{variable}: settings say template parameter {parameter}; template.yaml ({where}) sets it to {value!r}"
    )


@pytest.mark.parametrize("variable", sorted(ENV))
def test_every_variable_of_the_template_is_a_setting(variable):
    if variable in RUNTIME:
        return
    where, value = ENV[variable]
    assert variable in PARAMETER, f"template.yaml ({where}) sets {variable}, which precis.settings.ENVIRONMENT lacks"
    from_parameter = parameter_of(value)
    if from_parameter is None:
        assert variable in FIXED, f"{variable}: template.yaml ({where}) fixes it to {value!r}; a parameter, or FIXED"
        assert PARAMETER[variable] is None, f"{variable}: settings name parameter {PARAMETER[variable]}, none sets it"
    else:
        assert PARAMETER[variable] == from_parameter, (
            f"{variable}: template.yaml ({where}) sets it from parameter {from_parameter}, settings name "
            f"{PARAMETER[variable]}"
        )


def test_every_parameter_reaches_a_setting_or_a_resource():
    from_settings = {p for _, p in ENVIRONMENT.values() if p}
    assert set(PARAMETERS) - from_settings == RESOURCE_PARAMETERS, (
        "template parameters neither in precis.settings.ENVIRONMENT nor sizing a resource: "
        f"{sorted(set(PARAMETERS) - from_settings - RESOURCE_PARAMETERS)}"
    )


def test_what_the_template_leaves_out_is_deliberate():
    absent = set(PARAMETER) - set(ENV)
    assert absent == set(LOCAL_ONLY), (
        f"settings template.yaml does not set: {sorted(absent - set(LOCAL_ONLY))} (add "
        f"them, or say why not in LOCAL_ONLY); listed but set: "
        f"{sorted(set(LOCAL_ONLY) - absent)}"
    )


def test_make_dev_takes_every_setting_a_developer_may_choose():
    expected = (set(PARAMETER) - NOT_PASSED_THROUGH) | PASSED_NOT_SETTINGS
    assert len(PASS_THROUGH) == len(set(PASS_THROUGH))
    assert set(PASS_THROUGH) == expected, (
        f"local.worker.PASS_THROUGH lacks {sorted(expected - set(PASS_THROUGH))}, "
        f"has unknown {sorted(set(PASS_THROUGH) - expected)}"
    )


def _named(name: str) -> bool:
    return f"`{name}`" in README or re.search(rf"`[^`\n]*\b{re.escape(name)}=", README) is not None


def test_the_readme_names_every_parameter_and_every_knob():
    missing = [p for p in PARAMETERS if not _named(p)]
    assert not missing, f"README.md does not name the template parameters {missing}"
    knobs = [v for v in PASS_THROUGH if v in PARAMETER]
    missing = [v for v in knobs if not _named(v)]
    assert not missing, f"README.md does not name the variables {missing}"


def readme_defaults() -> dict[str, str]:
    """Variable -> the default the README's variables table states for it (`| `A`, `B` | `1`, `2` | meaning |`),
    where the default is a literal."""
    stated = {}
    for line in README.splitlines():
        cells = [c.strip() for c in line.split("|")[1:-1]]
        if len(cells) < 3 or not cells[0].startswith("`"):
            continue
        variables = re.findall(r"`([A-Z0-9_]+)`", cells[0])
        defaults = cells[1].split(", ")
        if len(variables) == len(defaults):
            stated.update({v: d.strip("`") for v, d in zip(variables, defaults) if re.fullmatch(r"`[^`]+`", d)})
    return stated


def test_the_readme_states_the_built_in_defaults():
    rows = {variable: default for variable, default in readme_defaults().items() if variable in PARAMETER}
    assert len(rows) >= 10, "the README's variables table was not found"
    built_in = Settings()
    fields = {variable: field for field, variable in VARIABLE.items()}
    for variable, stated in rows.items():
        value = getattr(built_in, fields[variable])
        if isinstance(value, bool):
            assert stated == str(value).lower(), f"README.md: {variable} defaults to {stated}, Settings to {value}"
        elif isinstance(value, (int, float)):
            assert float(stated) == value, f"README.md: {variable} defaults to {stated}, Settings to {value}"
        elif isinstance(value, str):
            assert stated == value, f"README.md: {variable} defaults to {stated}, Settings to {value}"


def test_the_templates_defaults_are_the_built_in_ones(monkeypatch):
    """A stack deployed with every parameter at its default runs as Settings() does: the template restates the
    built-in defaults, it does not change them."""
    resolved = {}
    for fn in load_template().functions.values():
        resolved.update(fn.environment)
    for variable in list(PARAMETER):
        monkeypatch.delenv(variable, raising=False)
    for variable, value in resolved.items():
        monkeypatch.setenv(variable, value)
    get_settings.cache_clear()
    try:
        deployed = get_settings()
    finally:
        get_settings.cache_clear()
    built_in = Settings()
    resources = {
        "table_name",
        "bucket_name",
        "stage",
        "secret_name",
        "auth",
        "derive_wake_queue_url",
        "webhook_queue_url",
    }
    for field in Settings.model_fields:
        if field in resources or field.startswith("summary_"):
            continue
        assert getattr(deployed, field) == getattr(built_in, field), (
            f"{VARIABLE[field]}: template.yaml's default {getattr(deployed, field)!r}, Settings' "
            f"{getattr(built_in, field)!r}"
        )
    assert SummaryConfig.model_validate(deployed.summary_defaults) == SummaryConfig(), (
        "the Summary* parameters' defaults are not SummaryConfig's"
    )
