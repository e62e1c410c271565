"""The HTTP edge's answers: JSON as UTF-8 text, and the JSON 500 for whatever escapes, wherever it is raised."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from honcho.api_types import MessageResponse, SessionContextResponse

from precis.api.app import INTERNAL_ERROR, create_resolver, serve, to_json
from precis.settings import get_settings
from tests.handlers import http_event, invoke

W = "/v3/workspaces/ws1"
S = f"{W}/sessions/s1"
CJK = "你好，世界。会話の記憶"


def _raw(method: str, url: str, body=None, headers=None) -> dict:
    """The function's own result: status, headers and the body text as API Gateway receives it."""
    function, event = http_event(method, url, body, headers)
    return invoke(function, event)


def test_text_goes_out_as_utf8_not_escapes(aws):
    assert _raw("POST", "/v3/workspaces", {"id": "ws1"})["statusCode"] == 201
    out = _raw(
        "POST", f"{S}/messages", {"messages": [{"content": CJK, "peer_id": "alice", "metadata": {"标签": "问候"}}]}
    )
    assert out["statusCode"] == 201 and out["headers"]["Content-Type"] == "application/json"
    assert CJK in out["body"] and '"标签":"问候"' in out["body"] and "\\u" not in out["body"]
    (message,) = json.loads(out["body"])
    assert len(out["body"].encode()) < len(json.dumps(message).encode())  # 3 bytes a character, not 6
    assert MessageResponse.model_validate(message).content == CJK  # the SDK reads it as before
    assert set(message) == {
        "id",
        "content",
        "peer_id",
        "session_id",
        "workspace_id",
        "metadata",
        "created_at",
        "token_count",
        "seq",
    }

    context = _raw("GET", f"{S}/context?tokens=1000")
    assert CJK in context["body"] and "\\u" not in context["body"]
    parsed = SessionContextResponse.model_validate(json.loads(context["body"]))
    assert [m.content for m in parsed.messages] == [CJK]


def test_datetimes_and_decimals_serialize_as_before(aws):
    """Powertools' own serializer and ours give the same JSON but for the escapes, with a return type or without."""
    from aws_lambda_powertools.event_handler import APIGatewayHttpResolver

    value = {
        "at": datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        "ratio": Decimal("1.5"),
        "count": Decimal("3"),
        "text": "汉字",
    }

    def typed() -> dict:
        return value

    bodies = []
    for app in (create_resolver(), APIGatewayHttpResolver(enable_validation=True)):
        app.get("/health")(typed)  # serialized by pydantic: Z, decimals as strings
        app.get("/openapi.json")(lambda: value)  # by Powertools' encoder: +00:00, decimals as numbers
        bodies.append([app.resolve(http_event("GET", path)[1], None)["body"] for path in ("/health", "/openapi.json")])
    ours, theirs = bodies
    assert ours == [
        '{"at":"2026-01-02T03:04:05Z","ratio":"1.5","count":"3","text":"汉字"}',
        '{"at":"2026-01-02T03:04:05+00:00","ratio":1.5,"count":3,"text":"汉字"}',
    ]
    assert [json.loads(body) for body in ours] == [json.loads(body) for body in theirs]
    assert all("\\u6c49" in body for body in theirs)


def test_the_serializer_is_compact_and_escapes_only_what_utf8_cannot_carry():
    assert to_json({"a": [1, "é"], "b": Decimal("2.5")}) == '{"a":[1,"é"],"b":"2.5"}'
    assert to_json({"lone": "\ud800"}) == '{"lone":"\\ud800"}'  # a lone surrogate has no UTF-8 form


@pytest.fixture
def auth_on(aws, monkeypatch):
    monkeypatch.setenv("PRECIS_AUTH", "true")
    monkeypatch.setenv("PRECIS_JWT_SECRET", "test-signing-secret-0123456789abcdef")
    get_settings.cache_clear()


def _assert_logged_500(out: dict, caplog, error: type[Exception]) -> None:
    assert out["statusCode"] == 500 and out["headers"]["Content-Type"] == "application/json"
    assert json.loads(out["body"]) == {"detail": INTERNAL_ERROR}
    (record,) = [r for r in caplog.records if r.getMessage() == "unhandled error"]
    assert record.levelname == "ERROR" and isinstance(record.exc_info[1], error)  # logged with its traceback


@pytest.mark.parametrize("route", [("GET", f"{S}/context"), ("POST", f"{W}/sessions")])
def test_an_error_raised_while_authenticating_is_the_json_500(auth_on, monkeypatch, caplog, route):
    def broken(*_args, **_kwargs):
        raise RuntimeError("key store exploded")

    monkeypatch.setattr("precis.api.app.verify_key", broken)
    out = _raw(*route, {"id": "s1"} if route[0] == "POST" else None, headers={"Authorization": "Bearer x.y.z"})
    _assert_logged_500(out, caplog, RuntimeError)


def test_an_error_raised_by_the_resolver_itself_is_the_json_500(aws, monkeypatch, caplog):
    from aws_lambda_powertools.event_handler import APIGatewayHttpResolver

    def broken(self, event, context):
        raise KeyError("routeKey")

    monkeypatch.setattr(APIGatewayHttpResolver, "resolve", broken)
    _assert_logged_500(_raw("GET", "/health"), caplog, KeyError)


def test_serve_answers_json_even_for_an_event_it_cannot_read(aws, caplog):
    out = serve(create_resolver(), {"routeKey": "GET /health", "body": 5, "headers": "not a mapping"}, None)
    _assert_logged_500(out, caplog, TypeError)
