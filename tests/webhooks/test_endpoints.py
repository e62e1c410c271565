"""Webhook endpoints through the ingest function's handler, under its template role: Honcho's routes and shapes,
the secret shown once, its rotation, the limit, bad input, and the workspace delete taking them."""

from __future__ import annotations

import base64

import pytest

from precis.webhooks import endpoints
from tests.handlers import call, dynamodb_requests

W = "/v3/workspaces/ws1"
HOOK = "https://example.com/hook"
EXT = {"event_types", "disabled", "disabled_at", "disabled_reason"}  # beside Honcho's fields


@pytest.fixture
def ws(aws):
    assert call("POST", "/v3/workspaces", {"id": "ws1"}).status == 201
    return aws


def test_get_or_create_by_url_shows_the_secret_once(ws):
    made = call("POST", f"{W}/webhooks", {"url": HOOK})
    assert made.status == 201, made.body
    assert set(made.body) == {"id", "workspace_id", "url", "created_at", "secret"} | EXT
    assert {k: made.body[k] for k in EXT} == {
        "event_types": None, "disabled": False, "disabled_at": None, "disabled_reason": None
    }  # fmt: skip
    assert made.body["workspace_id"] == "ws1" and made.body["url"] == HOOK and len(made.body["id"]) == 21
    secret = made.body["secret"]
    assert secret.startswith("whsec_") and len(base64.b64decode(secret[6:])) == 32
    again = call("POST", f"{W}/webhooks", {"url": HOOK})
    assert again.status == 200 and again.body == {k: v for k, v in made.body.items() if k != "secret"}
    listed = call("GET", f"{W}/webhooks")
    assert listed.status == 200
    assert listed.body == {"items": [again.body], "total": 1, "page": 1, "size": 50, "pages": 1}
    assert secret not in str(listed.body)


def test_an_endpoint_subscribes_to_some_event_types_and_a_new_registration_replaces_them(ws):
    from precis.store import webhooks
    from precis.store.db import get_db

    types = ["summary.created", "queue.empty", "queue.empty"]
    made = call("POST", f"{W}/webhooks", {"url": HOOK, "event_types": types})
    assert made.status == 201 and made.body["event_types"] == ["queue.empty", "summary.created"]  # EVENT_TYPES' order
    stored = webhooks.endpoint(get_db(), "ws1", made.body["id"])
    assert stored.get("event_types") == ["queue.empty", "summary.created"]  # what publishing filters by
    assert call("POST", f"{W}/webhooks", {"url": HOOK}).body["event_types"] == ["queue.empty", "summary.created"]
    again = call("POST", f"{W}/webhooks", {"url": HOOK, "event_types": ["dream.completed"]})
    assert again.status == 200 and again.body["id"] == made.body["id"]
    assert again.body["event_types"] == ["dream.completed"]
    assert call("GET", f"{W}/webhooks").body["items"][0]["event_types"] == ["dream.completed"]
    every = call("POST", f"{W}/webhooks", {"url": HOOK, "event_types": []})
    assert every.body["event_types"] is None
    assert "event_types" not in webhooks.endpoint(get_db(), "ws1", made.body["id"])


def test_an_unknown_event_type_is_a_422_naming_it_and_stores_nothing(ws):
    bad = call("POST", f"{W}/webhooks", {"url": HOOK, "event_types": ["queue.empty", "message.created"]})
    assert bad.status == 422 and "'message.created'" in bad.body["detail"] and "queue.empty" in bad.body["detail"]
    assert call("GET", f"{W}/webhooks").body["total"] == 0
    assert call("POST", f"{W}/webhooks", {"url": HOOK, "event_types": "queue.empty"}).status == 422  # not a list
    assert call("POST", f"{W}/webhooks", {"url": HOOK, "event_types": ["x" * 65]}).status == 422


def test_ten_endpoints_then_409_and_a_delete_makes_room(ws):
    ids = [call("POST", f"{W}/webhooks", {"url": f"{HOOK}/{i}"}).body["id"] for i in range(10)]
    eleventh = call("POST", f"{W}/webhooks", {"url": f"{HOOK}/10"})
    assert eleventh.status == 409 and "10" in eleventh.body["detail"], eleventh.body
    assert call("POST", f"{W}/webhooks", {"url": f"{HOOK}/3"}).status == 200  # an existing URL is no new endpoint
    assert call("DELETE", f"{W}/webhooks/{ids[0]}").status == 204
    assert call("POST", f"{W}/webhooks", {"url": f"{HOOK}/10"}).status == 201
    page = call("GET", f"{W}/webhooks", size=4, page=3).body
    assert page["total"] == 10 and page["pages"] == 3 and len(page["items"]) == 2
    assert call("POST", f"{W}/webhooks", {"url": f"{HOOK}/11"}).status == 409


def test_delete_then_404(ws):
    made = call("POST", f"{W}/webhooks", {"url": HOOK}).body
    assert call("DELETE", f"{W}/webhooks/{made['id']}").status == 204
    again = call("DELETE", f"{W}/webhooks/{made['id']}")
    assert again.status == 404 and made["id"] in again.body["detail"]
    assert call("GET", f"{W}/webhooks").body["items"] == []
    assert call("POST", f"{W}/webhooks", {"url": HOOK}).status == 201  # the URL can be registered again


def test_other_workspaces_do_not_see_or_delete_the_endpoint(ws):
    assert call("POST", "/v3/workspaces", {"id": "ws2"}).status == 201
    made = call("POST", f"{W}/webhooks", {"url": HOOK}).body
    assert call("GET", "/v3/workspaces/ws2/webhooks").body["items"] == []
    assert call("DELETE", f"/v3/workspaces/ws2/webhooks/{made['id']}").status == 404
    assert call("POST", "/v3/workspaces/ws2/webhooks", {"url": HOOK}).status == 201  # its own, of the same URL
    assert [e["id"] for e in call("GET", f"{W}/webhooks").body["items"]] == [made["id"]]


def test_rotation_keeps_the_old_secret_for_the_overlap(ws):
    from precis.store import webhooks
    from precis.store.db import get_db

    made = call("POST", f"{W}/webhooks", {"url": HOOK}).body
    rotated = call("POST", f"{W}/webhooks/{made['id']}/rotate")
    assert rotated.status == 200, rotated.body
    assert rotated.body["secret"].startswith("whsec_") and rotated.body["secret"] != made["secret"]
    expires = rotated.body["previous_secret_expires_at"]
    item = webhooks.endpoint(get_db(), "ws1", made["id"])
    assert endpoints.live_secrets(item, expires - 1) == [rotated.body["secret"], made["secret"]]
    assert endpoints.live_secrets(item, expires) == [rotated.body["secret"]]
    # A second rotation within the overlap: the first secret stops at once, two at most sign.
    second = endpoints.rotate(get_db(), "ws1", made["id"], now=expires - 10)
    item = webhooks.endpoint(get_db(), "ws1", made["id"])
    assert endpoints.live_secrets(item, expires - 9) == [second["secret"], rotated.body["secret"]]
    assert second["previous_secret_expires_at"] == expires - 10 + endpoints.ROTATION_OVERLAP_S
    assert call("POST", f"{W}/webhooks/{'x' * 21}/rotate").status == 404


def test_the_workspace_delete_takes_its_endpoints(ws):
    from precis.store.db import get_db

    for i in range(3):
        call("POST", f"{W}/webhooks", {"url": f"{HOOK}/{i}"})
    assert call("DELETE", W).status == 202
    db = get_db()
    left = db.client.query(
        TableName=db.table, KeyConditionExpression="PK = :pk", ExpressionAttributeValues={":pk": {"S": "WS#ws1"}}
    )["Items"]
    assert left == []
    assert call("POST", "/v3/workspaces", {"id": "ws1"}).status == 201
    assert call("GET", f"{W}/webhooks").body["total"] == 0
    assert all(call("POST", f"{W}/webhooks", {"url": f"{HOOK}/{i}"}).status == 201 for i in range(10))


def test_a_create_costs_one_read_and_one_transaction(ws):
    with dynamodb_requests() as seen:
        assert call("POST", f"{W}/webhooks", {"url": HOOK}).status == 201
    assert [op for op, _ in seen] == ["GetItem", "TransactWriteItems"]
    with dynamodb_requests() as seen:
        assert call("POST", f"{W}/webhooks", {"url": HOOK}).status == 200
    assert [op for op, _ in seen] == ["GetItem"]


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("ftp://example.com/x", "scheme must be https, not 'ftp'"),
        ("example.com/hook", "scheme must be https"),
        ("http://example.com/hook", "scheme must be https, not 'http'"),  # https only, as deployed
        ("https://", "has no host"),
        ("https://example.com/" + "a" * 2030, "longer than 2048 characters"),
        ("https://127.0.0.1:8080/x", "127.0.0.1 is a loopback address"),
        ("https://10.1.2.3/x", "10.1.2.3 is a private address"),
        ("https://169.254.169.254/latest", "instance-metadata range"),
        ("https://[::1]/x", "::1 is a loopback address"),
        ("https://2130706433/x", "non-standard form"),
        ("https://example.com:99999/x", "port is not a number from 1 to 65535"),
    ],
)
def test_bad_urls_are_422_naming_what_is_wrong(ws, url, says):
    reply = call("POST", f"{W}/webhooks", {"url": url})
    assert reply.status == 422 and says in reply.body["detail"], reply.body
    assert call("GET", f"{W}/webhooks").body["total"] == 0


def test_other_bad_input(ws):
    assert call("POST", f"{W}/webhooks", {}).status == 422
    assert call("POST", f"{W}/webhooks", {"url": 5}).status == 422
    assert call("POST", "/v3/workspaces/nope/webhooks", {"url": HOOK}).status == 404
    assert call("GET", "/v3/workspaces/nope/webhooks").status == 404
    assert call("DELETE", f"{W}/webhooks/short").status == 422
    assert call("GET", f"{W}/webhooks", size=0).status == 422


def test_concurrent_creates_hold_the_limit_and_one_endpoint_a_url(ws):
    from concurrent.futures import ThreadPoolExecutor

    from precis.store.db import get_db

    db = get_db()
    urls = [f"{HOOK}/{i}" for i in range(14)] + [HOOK] * 6
    with ThreadPoolExecutor(max_workers=8) as pool:
        outcomes = list(pool.map(lambda url: _try_create(db, url), urls))
    made = [o for o in outcomes if o[0] == "created"]
    refused = [o for o in outcomes if o[0] == "conflict"]
    assert len(made) == 10 and len(made) + len(refused) + sum(o[0] == "existing" for o in outcomes) == len(urls)
    listed = call("GET", f"{W}/webhooks").body
    assert listed["total"] == 10 and len({e["url"] for e in listed["items"]}) == 10
    same = {o[1] for o in outcomes if o[0] != "conflict" and o[2] == HOOK}
    assert len(same) <= 1  # every answer for one URL names the one endpoint


def _try_create(db, url: str) -> tuple[str, str | None, str]:
    from precis.errors import Conflict

    try:
        view, created = endpoints.get_or_create(db, "ws1", url)
    except Conflict:
        return "conflict", None, url
    return ("created" if created else "existing"), view["id"], url


def test_a_create_that_loses_the_race_for_its_url_answers_the_winner(ws):
    from precis.store.db import get_db

    db = get_db()
    winner: dict = {}

    def first_wins(**_) -> None:  # another request creates the same URL between this one's read and its write
        db.client.meta.events.unregister("before-call.dynamodb.TransactWriteItems", first_wins)
        winner.update(endpoints.get_or_create(db, "ws1", HOOK)[0])

    db.client.meta.events.register("before-call.dynamodb.TransactWriteItems", first_wins)
    try:
        view, created = endpoints.get_or_create(db, "ws1", HOOK)
    finally:
        db.client.meta.events.unregister("before-call.dynamodb.TransactWriteItems", first_wins)
    assert not created and "secret" not in view and view["id"] == winner["id"] and winner["secret"]
    # The loser counted nothing: nine more fit, the eleventh does not.
    assert all(call("POST", f"{W}/webhooks", {"url": f"{HOOK}/{i}"}).status == 201 for i in range(9))
    assert call("POST", f"{W}/webhooks", {"url": f"{HOOK}/9"}).status == 409


def test_make_devs_setting_lets_a_receiver_on_this_machine_register_over_http(ws, monkeypatch):
    from precis.settings import get_settings

    assert call("POST", f"{W}/webhooks", {"url": "http://127.0.0.1:8080/hook"}).status == 422  # as deployed
    monkeypatch.setenv("PRECIS_WEBHOOKS_ALLOW_HTTP_LOCAL", "true")
    get_settings.cache_clear()
    assert call("POST", f"{W}/webhooks", {"url": "http://127.0.0.1:8080/hook"}).status == 201
    reply = call("POST", f"{W}/webhooks", {"url": "http://10.0.0.1/hook"})  # loopback only, nothing else private
    assert reply.status == 422 and "private address" in reply.body["detail"]
