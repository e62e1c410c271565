"""The local stack reads routes, stream settings and the table from template.yaml, and routes like API Gateway."""

from __future__ import annotations

import json

from local.gateway import match_route
from local.poller import StreamSettings
from local.template import ENCODINGS_DIR, LAYER_DIR, Route, table_definition, template
from local.worker import function_environment

# Honcho's GETs that act: the test event is sent (the webhook queue), which the read functions may not do.
SENDING_GETS = {("GET", "/v3/workspaces/{workspace_id}/webhooks/test")}
LISTING_POSTS = {
    "/v3/workspaces/list",
    "/v3/workspaces/{workspace_id}/peers/list",
    "/v3/workspaces/{workspace_id}/peers/{peer_id}/sessions",
    "/v3/workspaces/{workspace_id}/sessions/list",
    "/v3/workspaces/{workspace_id}/sessions/{session_id}/messages/list",
    "/v3/workspaces/{workspace_id}/conclusions/list",
    "/v3/workspaces/{workspace_id}/conclusions/query",
    "/v3/workspaces/{workspace_id}/peers/{peer_id}/representation",
    "/v3/workspaces/{workspace_id}/scopes/list",
    "/v3/workspaces/{workspace_id}/search",
    "/v3/workspaces/{workspace_id}/sessions/{session_id}/search",
    "/v3/workspaces/{workspace_id}/peers/{peer_id}/search",
    "/v3/workspaces/{workspace_id}/scopes/{scope_id}/sessions/list",
}


def _template_routes() -> set[Route]:
    """Every HttpApi event of template.yaml, read straight from the raw document."""
    routes = set()
    for logical_id, res in template().raw["Resources"].items():
        for event in res.get("Properties", {}).get("Events", {}).values():
            if event["Type"] == "HttpApi":
                props = event["Properties"]
                routes.add(Route(props["Method"].upper(), props["Path"], logical_id))
    return routes


def test_every_http_route_is_read_with_its_function():
    expected = _template_routes()
    assert expected
    assert set(template().routes) == expected
    assert len(template().routes) == len(expected)


def test_writes_go_to_ingest_reads_to_context_and_chat_and_mcp_to_their_own_functions():
    for route in template().routes:
        if route.path.endswith("/chat"):
            assert route.function == "ChatFunction", route
            continue
        if route.path == "/mcp":
            assert route.function == "McpFunction", route
            continue
        is_write = route.method in {"POST", "PUT", "DELETE"} and route.path not in LISTING_POSTS
        is_write |= (route.method, route.path) in SENDING_GETS
        assert route.function == ("IngestFunction" if is_write else "ContextFunction"), route


def test_health_is_a_get_on_the_context_function():
    assert Route("GET", "/health", "ContextFunction") in template().routes


def test_the_mcp_endpoint_takes_every_method_a_client_may_send_to_it():
    """POST carries the messages; GET (a legacy client's stream) and DELETE (its session's end) reach the function,
    which answers them 405, instead of the gateway's 404 for an unknown route."""
    for method in ("POST", "GET", "DELETE"):
        route, params = match_route(template().routes, method, "/mcp")
        assert (route.function, params) == ("McpFunction", {})


def test_stream_settings_come_from_the_template():
    fn = template().stream_function()
    assert fn.logical_id == "SummarizeFunction"
    settings = StreamSettings.from_properties(fn.stream)
    raw = template().resource("SummarizeStream")["Properties"]
    assert settings.batch_size == int(raw["BatchSize"])  # tuned by `make bench`; whatever it is, it is read
    assert settings.starting_position == "TRIM_HORIZON"
    assert settings.window_s == 0.25  # the template's 1 s, capped locally
    assert settings.max_retries == 3
    assert settings.bisect is True
    assert settings.report_item_failures is True
    assert settings.max_age_s == 3600
    assert settings.filters == [json.loads(f["Pattern"]) for f in raw["FilterCriteria"]["Filters"]]
    new_message = {"kind": {"S": ["message"]}, "copy_of": {"S": [{"exists": False}]}}
    assert {"eventName": ["INSERT"], "dynamodb": {"NewImage": new_message}} in settings.filters
    assert settings.on_failure_arn.endswith(":" + template().queue_names["SummarizeDLQ"])


def test_table_definition_has_the_start_tokens_index_and_a_stream():
    definition = table_definition(template())
    indexes = {
        i["IndexName"]: i
        for kind in ("LocalSecondaryIndexes", "GlobalSecondaryIndexes")
        for i in definition.get(kind, [])
    }
    assert indexes["ByStartTokens"]["KeySchema"] == [
        {"AttributeName": "PK", "KeyType": "HASH"},
        {"AttributeName": "start_tokens", "KeyType": "RANGE"},
    ]
    assert definition["StreamSpecification"] == {"StreamEnabled": True, "StreamViewType": "NEW_IMAGE"}


def test_literal_segments_win_over_variables():
    routes = template().routes
    route, params = match_route(routes, "POST", "/v3/workspaces/list")
    assert (route.path, route.function, params) == ("/v3/workspaces/list", "ContextFunction", {})

    route, params = match_route(routes, "POST", "/v3/workspaces/w1/sessions/list")
    assert route.path == "/v3/workspaces/{workspace_id}/sessions/list"
    assert params == {"workspace_id": "w1"}

    route, params = match_route(routes, "GET", "/v3/workspaces/w1/sessions/s%201/messages/m1")
    assert route.path == "/v3/workspaces/{workspace_id}/sessions/{session_id}/messages/{message_id}"
    assert params == {"workspace_id": "w1", "session_id": "s 1", "message_id": "m1"}


def test_no_route_for_an_unknown_path_or_method():
    routes = template().routes
    assert match_route(routes, "GET", "/v3/nope") is None
    assert match_route(routes, "PATCH", "/v3/workspaces/w1") is None
    assert match_route(routes, "GET", "/v3/workspaces//sessions/s/context") is None


def test_worker_environment_is_the_templates_pointed_at_moto(monkeypatch):
    monkeypatch.setenv("PRECIS_LLM_MODEL", "local-model")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("AWS_PROFILE", "production")
    monkeypatch.delenv("PRECIS_AUTH", raising=False)
    fn = template().functions["SummarizeFunction"]
    env = function_environment(template(), fn, "http://127.0.0.1:5555")
    assert env["TABLE_NAME"] == template().table_name and env["BUCKET_NAME"] == template().bucket_name
    assert env["POWERTOOLS_SERVICE_NAME"] == "precis-summarize"
    assert env["PRECIS_LLM_MODEL"] == "local-model"  # the developer's knob wins over the template's
    assert env["OPENAI_BASE_URL"] == "http://127.0.0.1:9/v1"
    assert env["AWS_ENDPOINT_URL"] == "http://127.0.0.1:5555"
    assert env["AWS_ACCOUNT_ID_ENDPOINT_MODE"] == "disabled"
    assert env["AWS_REGION"] == env["AWS_DEFAULT_REGION"] == "us-east-1"
    assert env["TIKTOKEN_CACHE_DIR"] == str(ENCODINGS_DIR)
    assert env["POWERTOOLS_TRACE_DISABLED"] == "true"
    assert env["AWS_LAMBDA_FUNCTION_NAME"] == "precis-summarize-local"
    assert env["PYTHONPATH"].split(":") == [str(LAYER_DIR), str(fn.code_dir)]
    assert "AWS_PROFILE" not in env
    assert env["PRECIS_AUTH"] == "false"  # on in the template; locally only when the developer asks


def test_the_developer_can_turn_auth_on(monkeypatch):
    monkeypatch.setenv("PRECIS_AUTH", "true")
    monkeypatch.setenv("PRECIS_JWT_SECRET", "s3cret")
    env = function_environment(template(), template().functions["IngestFunction"], "http://127.0.0.1:5555")
    assert (env["PRECIS_AUTH"], env["PRECIS_JWT_SECRET"]) == ("true", "s3cret")


def test_the_deriver_consumes_the_stream_on_a_mapping_of_its_own_and_runs_on_a_schedule():
    tpl = template()
    assert [fn.logical_id for fn in tpl.stream_functions()] == ["SummarizeFunction", "DeriveFunction"]
    deriver = tpl.stream_function("DeriveFunction")
    assert [f["Pattern"] for f in deriver.stream["FilterCriteria"]["Filters"]] == [
        '{"eventName": ["INSERT"], "dynamodb": {"NewImage": {"kind": {"S": ["message"]}, '
        '"copy_of": {"S": [{"exists": false}]}}}}',
        '{"eventName": ["INSERT"], "dynamodb": {"NewImage": {"kind": {"S": ["scope_session"]}}}}',
        '{"eventName": ["INSERT", "MODIFY"], "dynamodb": {"NewImage": {"kind": {"S": ["dream", "expiry"]}, '
        '"requested": {"S": [{"exists": true}]}}}}',
        '{"eventName": ["REMOVE"], "dynamodb": {"Keys": {"SK": {"S": [{"prefix": "EXPIRY#"}]}}}}',
    ]
    (flush,) = deriver.schedules
    assert (flush.every_s, flush.input) == (300, {"precis": "flush"})
