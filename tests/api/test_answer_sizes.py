"""Every answer fits Lambda's 6 MB as its runtime serializes it (issue 46, item 5): pages fitted by bytes (never a
page silently shorter than its size: the SDKs would skip what it left out), large answers framed so escaping cannot
double them, and the workspace's queue status bounded in what it reads and answers."""

from __future__ import annotations

import json

import httpx
import pytest
from honcho import Honcho

from local.gateway import http_response
from local.inprocess import http_event, invoke
from precis.settings import get_settings
from precis.store.db import get_db
from tests.handlers import call

W = "/v3/workspaces/ws1"
LAMBDA_PAYLOAD_MAX = 6_291_556  # Lambda: "exceeded maximum allowed payload size (6291556 bytes)"
QUOTES = {"q": '"' * 32_700}  # 65,424 bytes as JSON (each quote escaped once): just under the 64 KiB cap


@pytest.fixture
def ws(aws):
    get_settings.cache_clear()
    get_db.cache_clear()
    assert call("POST", "/v3/workspaces", {"id": "ws1", "metadata": QUOTES}).status == 201
    return aws


def _create(kind: str, count: int, prefix: str = "") -> None:
    for i in range(count):
        if kind == "workspaces":
            reply = call("POST", "/v3/workspaces", {"id": f"{prefix}w{i:03d}", "metadata": QUOTES})
        else:
            reply = call("POST", f"{W}/{kind}", {"id": f"{prefix}{kind[0]}{i:03d}", "metadata": QUOTES})
        assert reply.status == 201, reply.body


LISTS = {
    "sessions": f"{W}/sessions/list",
    "peers": f"{W}/peers/list",
    "workspaces": "/v3/workspaces/list",
}


@pytest.mark.parametrize("kind", list(LISTS))
def test_a_page_of_50_items_with_64_kb_of_quotes_each_fits_a_lambda_answer(ws, kind):
    """The reproduction: 6,408,182 bytes for 50 sessions before (AWS answers a 5xx); framed in base64 now."""
    _create(kind, 50)
    reply = call("POST", LISTS[kind], size=50)
    assert reply.status == 200, reply.body
    assert reply.payload_bytes <= LAMBDA_PAYLOAD_MAX
    assert len(reply.body["items"]) == 50 and all(i["metadata"] == QUOTES for i in reply.body["items"])


def test_a_page_that_cannot_fit_is_413_naming_a_size_that_does_and_that_size_reads_every_item_once(ws):
    _create("sessions", 80)
    too_big = call("POST", LISTS["sessions"], size=100)
    assert too_big.status == 413 and too_big.payload_bytes <= LAMBDA_PAYLOAD_MAX
    detail = too_big.body["detail"]
    assert detail.startswith("size: ") and "ask for size at most" in detail
    named = int(detail.rsplit(" ", 1)[1])
    assert 50 <= named < 80
    seen, page = [], 1
    while True:
        reply = call("POST", LISTS["sessions"], size=named, page=page)
        assert reply.status == 200 and reply.payload_bytes <= LAMBDA_PAYLOAD_MAX
        assert len(reply.body["items"]) == min(named, 80 - len(seen))  # every page but the last is full
        seen += [s["id"] for s in reply.body["items"]]
        if page >= reply.body["pages"]:
            break
        page += 1
    assert seen == [f"s{i:03d}" for i in range(80)]


def _sdk_transport(request: httpx.Request) -> httpx.Response:
    """The SDK's requests through the handlers, answered as API Gateway answers (a base64 body decoded)."""
    url = request.url.raw_path.decode()
    function, event = http_event(
        request.method, url, headers=dict(request.headers), raw=request.content.decode() or None
    )
    out = invoke(function, event)
    if len(json.dumps(out, ensure_ascii=False).encode()) > LAMBDA_PAYLOAD_MAX:
        return httpx.Response(502, json={"message": "Internal Server Error"})  # Lambda's refusal, through API Gateway
    status, headers, data = http_response(out)
    return httpx.Response(status, headers=headers, content=data)


def test_the_sdk_iterates_a_byte_heavy_list_and_gets_every_item_exactly_once(ws):
    _create("sessions", 60)
    http = httpx.Client(base_url="http://precis.test", transport=httpx.MockTransport(_sdk_transport))
    client = Honcho(base_url="http://precis.test", api_key="local", workspace_id="ws1", http_client=http)
    ids = [s.id for s in client.sessions()]  # 50 a page
    assert ids == [f"s{i:03d}" for i in range(60)]
    assert client.session("s007").get_metadata() == QUOTES


def test_large_answers_are_framed_so_api_gateway_hands_the_client_the_same_json(ws):
    _create("sessions", 20)
    function, event = http_event("POST", f"{LISTS['sessions']}?size=20")
    out = invoke(function, event)
    assert out["isBase64Encoded"] is True  # 1.3 MB of API JSON, 2.6 MB as a JSON string: 1.75 MB as base64
    assert len(json.dumps(out, ensure_ascii=False).encode()) < 1_800_000
    status, _headers, data = http_response(out)
    assert status == 200 and [s["metadata"] for s in json.loads(data)["items"]] == [QUOTES] * 20
    small = call("POST", LISTS["sessions"], size=1)  # small answers stay text
    assert small.status == 200 and len(small.body["items"]) == 1


@pytest.fixture
def long_messages(ws, monkeypatch):
    monkeypatch.setenv("PRECIS_MAX_MESSAGE_CHARS", "300000")
    get_settings.cache_clear()
    return ws


def _post(contents: list[str]) -> None:
    reply = call(
        "POST", f"{W}/sessions/s1/messages", {"messages": [{"peer_id": "alice", "content": c} for c in contents]}
    )
    assert reply.status == 201, reply.body


def test_a_search_whose_matches_cannot_fit_is_413_naming_a_limit_that_does(long_messages):
    quoted = "apple " + '"' * 290_000  # 580 KB as JSON, 1.16 MB as a JSON string
    for _ in range(3):
        _post([quoted] * 4)
    reply = call("POST", f"{W}/sessions/s1/search", {"query": "apple", "limit": 12})
    assert reply.status == 413 and reply.body["detail"].startswith("limit: ")
    named = int(reply.body["detail"].rsplit(" ", 1)[1])
    found = call("POST", f"{W}/sessions/s1/search", {"query": "apple", "limit": named})
    assert found.status == 200 and found.payload_bytes <= LAMBDA_PAYLOAD_MAX
    assert len(found.body) == named and all(m["content"] == quoted for m in found.body)


def test_a_context_whose_tokens_hold_more_bytes_than_an_answer_is_413_naming_tokens_that_fit(long_messages):
    blank = "apple" + " " * 290_000  # whitespace: about 128 bytes a token
    for _ in range(5):
        _post([blank] * 5)
    reply = call("GET", f"{W}/sessions/s1/context", tokens=100_000)
    assert reply.status == 413 and reply.body["detail"].startswith("tokens: ")
    named = int(reply.body["detail"].rsplit(" ", 1)[1])
    fitted = call("GET", f"{W}/sessions/s1/context", tokens=named)
    assert fitted.status == 200 and fitted.payload_bytes <= LAMBDA_PAYLOAD_MAX and fitted.body["messages"]


def test_an_mcp_tool_result_that_cannot_fit_is_a_tool_error_saying_so(long_messages):
    """A tool's result is a JSON string inside the JSON-RPC answer, itself a string in Lambda's: escaped twice."""
    from precis.mcp.catalogue import Call
    from precis.mcp.tools import CATALOGUE

    quoted = "apple " + '"' * 290_000
    for _ in range(2):
        _post([quoted] * 4)
    arguments = {"session_id": "s1", "size": 8}
    result = CATALOGUE.call("get_session_messages", arguments, Call(None, "ws1"))
    assert result["isError"] is True and "ask for less" in result["content"][0]["text"]
    fits = CATALOGUE.call("get_session_messages", {**arguments, "size": 2}, Call(None, "ws1"))
    assert fits["isError"] is False and len(json.loads(fits["content"][0]["text"])["messages"]) == 2


def test_the_edge_refuses_an_answer_that_would_still_pass_the_limit_and_logs_it_as_a_bug(caplog):
    from precis.api.app import fitted

    body = json.dumps({"x": "\x01" * 1_100_000})  # 6.6 MB of \u0001 escapes: 7.7 MB as a string, 8.8 MB as base64
    out = fitted({"statusCode": 200, "headers": {}, "body": body, "isBase64Encoded": False}, "GET /x")
    assert out["statusCode"] == 413 and "past the 6,291,556" in json.loads(out["body"])["detail"]
    assert any("payload limit" in r.getMessage() and r.levelname == "ERROR" for r in caplog.records)
    assert len(json.dumps(out)) < 1_000


@pytest.mark.parametrize("kind", list(LISTS))
def test_a_page_of_an_unfiltered_list_reads_whole_only_the_items_it_shows(ws, kind):
    """The list is counted from ids alone: 50 items of 64 KiB metadata are not brought in for a page of one."""
    _create(kind, 50)
    received: list[int] = []

    def record(http_response, **_) -> None:
        received.append(len(http_response.content))

    client = get_db().client
    client.meta.events.register("after-call.dynamodb", record)
    try:
        reply = call("POST", LISTS[kind], size=1, page=7)
    finally:
        client.meta.events.unregister("after-call.dynamodb", record)
    assert reply.status == 200 and len(reply.body["items"]) == 1 and reply.body["total"] >= 50
    assert sum(received) < 5 * 65_536  # the page's item, the workspace's, and ids: not the 50 items' 3.3 MB


def test_conclusions_and_the_representation_that_cannot_fit_are_413_naming_what_would(ws):
    """A conclusion holds up to 65,535 characters: 100 of quotes are 13 MB of JSON, 17.5 MB framed."""
    assert call("POST", f"{W}/peers", {"id": "alice"}).status == 201
    for start in range(0, 60, 20):
        conclusions = [
            {"content": f"alice {i} " + '"' * 65_000, "observer_id": "alice", "observed_id": "alice"}
            for i in range(start, start + 20)
        ]
        assert call("POST", f"{W}/conclusions", {"conclusions": conclusions}).status == 201
    listed = call("POST", f"{W}/conclusions/list", size=60)
    assert listed.status == 413 and listed.body["detail"].startswith("size: ")
    named = int(listed.body["detail"].rsplit(" ", 1)[1])
    seen = []
    for page in range(1, -(-60 // named) + 1):
        reply = call("POST", f"{W}/conclusions/list", size=named, page=page)
        assert reply.status == 200 and reply.payload_bytes <= LAMBDA_PAYLOAD_MAX
        seen += [c["id"] for c in reply.body["items"]]
    assert len(seen) == len(set(seen)) == 60
    view = call("POST", f"{W}/peers/alice/representation", {"max_conclusions": 60})
    assert view.status == 413 and view.body["detail"].startswith("max_conclusions: ")
    fewer = int(view.body["detail"].rsplit(" ", 1)[1])
    fitted = call("POST", f"{W}/peers/alice/representation", {"max_conclusions": fewer})
    assert fitted.status == 200 and fitted.payload_bytes <= LAMBDA_PAYLOAD_MAX


def test_a_chats_evidence_leaves_out_the_largest_conclusions_contents_rather_than_pass_one_answer():
    from precis.api.app import fitted
    from precis.chat import Evidence, answer_body
    from precis.sizes import payload_bytes

    evidence = Evidence()
    views = [{"id": f"c{i:03d}", "content": f"{i} " + '"' * 65_000, "level": "explicit"} for i in range(60)]
    evidence.read_conclusions([*views, {"id": "small", "content": "alice lives in Lisbon", "level": "explicit"}])
    text = json.dumps(answer_body("an answer", evidence), ensure_ascii=False, separators=(",", ":"))
    out = fitted({"statusCode": 200, "headers": {}, "body": text, "isBase64Encoded": False}, "POST /chat")
    assert out["statusCode"] == 200 and payload_bytes(out) <= LAMBDA_PAYLOAD_MAX
    kept = {c["id"]: c for c in json.loads(text)["evidence"]["conclusions"]}
    assert len(kept) == 61 and kept["small"]["content"] == "alice lives in Lisbon"
    omitted = [c for c in kept.values() if c.get("content_omitted")]
    assert 0 < len(omitted) < 60 and all(c["content"] == "" for c in omitted)


def test_the_cli_export_reads_every_message_of_pages_too_large_for_one_answer(long_messages):
    """`precis export` pages by 100: a page past one answer (413, naming a size) is read by seq in smaller pages."""
    from precis_cli.cli import _all_messages
    from precis_cli.client import Precis

    quoted = "apple " + '"' * 290_000
    for start in range(0, 12, 4):
        _post([f"{i} {quoted}" for i in range(start, start + 4)])
    _post([f"{i} short" for i in range(12, 112)])  # a second page of 100, then a third of 12
    client = Precis("http://precis.test", None, "ws1", transport=httpx.MockTransport(_sdk_transport))
    contents = [m["content"] for m in _all_messages(client, "s1")]
    assert [c.split(" ", 1)[0] for c in contents] == [str(i) for i in range(112)]
