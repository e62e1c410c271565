"""Every route answers bad input with its documented 4xx and a message, and writes nothing."""

from __future__ import annotations

import pytest

from tests.handlers import Form, call

W = "/v3/workspaces/ws1"
S = f"{W}/sessions/s1"
LONG_ID = "x" * 101
DEEP = {"a": {"b": {"c": {"d": {"e": {"f": 1}}}}}}
WIDE = {f"k{i}": i for i in range(101)}
DEEP_ARRAYS = "[" * 5000 + "]" * 5000  # ~10 KB: the JSON parser itself runs out of stack
DEEP_OBJECTS = '{"a":' * 3000 + "1" + "}" * 3000


CONCLUSION = {"content": "alice likes tea", "observer_id": "alice", "observed_id": "alice"}
VIEW = {"observer_id": "alice", "observed_id": "alice"}


def nested_filters(levels: int) -> dict:
    """`{"filters": {"AND": [{"AND": [... {"id": "x"}]}]}}`: each level nests an object and an array."""
    filters: dict = {"id": "x"}
    for _ in range(levels):
        filters = {"AND": [filters]}
    return {"filters": filters}


def msgs(*contents, peer="alice", **extra):
    return {"messages": [{"content": c, "peer_id": peer, **extra} for c in contents]}


# (method, path, json body | raw text, query, headers, expected status)
CASES = [
    # workspaces
    ("POST", "/v3/workspaces", {}, {}, {}, 422),
    ("POST", "/v3/workspaces", {"id": "bad id!"}, {}, {}, 422),
    ("POST", "/v3/workspaces", {"id": LONG_ID}, {}, {}, 422),
    ("POST", "/v3/workspaces", {"id": 5}, {}, {}, 422),
    ("POST", "/v3/workspaces", {"id": "w2", "metadata": DEEP}, {}, {}, 422),
    ("POST", "/v3/workspaces", {"id": "w2", "metadata": WIDE}, {}, {}, 422),
    ("POST", "/v3/workspaces", {"id": "w2", "metadata": [1]}, {}, {}, 422),
    ("POST", "/v3/workspaces", {"id": "w2", "surprise": 1}, {}, {}, 422),
    ("POST", "/v3/workspaces", "{not json", {}, {}, 422),
    ("PUT", "/v3/workspaces/nope", {"metadata": {}}, {}, {}, 404),
    ("PUT", "/v3/workspaces/bad%20id", {"metadata": {}}, {}, {}, 422),
    ("PUT", W, {"metadata": "x"}, {}, {}, 422),
    ("DELETE", "/v3/workspaces/nope", None, {}, {}, 404),
    ("DELETE", W, None, {}, {}, 409),  # it has a session
    ("POST", "/v3/workspaces/list", {"filters": "x"}, {}, {}, 422),
    ("POST", "/v3/workspaces/list", None, {"size": 0}, {}, 422),
    ("POST", "/v3/workspaces/list", None, {"size": 101}, {}, 422),
    ("POST", "/v3/workspaces/list", None, {"page": 0}, {}, 422),
    ("POST", "/v3/workspaces/list", None, {"page": "abc"}, {}, 422),
    ("POST", "/v3/workspaces/list", None, {"page": 10**20}, {}, 422),
    # peers
    ("POST", f"{W}/peers", {"id": "bad id"}, {}, {}, 422),
    ("POST", f"{W}/peers", {"id": "p", "metadata": DEEP}, {}, {}, 422),
    ("POST", "/v3/workspaces/nope/peers", {"id": "p"}, {}, {}, 404),
    ("PUT", f"{W}/peers/nope", {"metadata": {}}, {}, {}, 404),
    ("PUT", f"{W}/peers/{LONG_ID}", {"metadata": {}}, {}, {}, 422),
    ("PUT", f"{W}/peers/alice", {"configuration": "x"}, {}, {}, 422),
    ("POST", f"{W}/peers/list", {"filters": {"AND": "x"}}, {}, {}, 422),
    ("POST", "/v3/workspaces/nope/peers/list", None, {}, {}, 404),
    ("POST", f"{W}/peers/nope/sessions", None, {}, {}, 404),
    ("POST", f"{W}/peers/alice/sessions", None, {"size": -1}, {}, 422),
    # sessions
    ("POST", f"{W}/sessions", {"id": "s 2"}, {}, {}, 422),
    ("POST", f"{W}/sessions", {"id": "s2", "peers": {"bad id": {}}}, {}, {}, 422),
    ("POST", f"{W}/sessions", {"id": "s2", "peers": {"p": {"observe_me": "maybe"}}}, {}, {}, 422),
    ("POST", "/v3/workspaces/nope/sessions", {"id": "s2"}, {}, {}, 404),
    ("PUT", f"{W}/sessions/nope", {"metadata": {}}, {}, {}, 404),
    ("PUT", S, {"metadata": WIDE}, {}, {}, 422),
    ("DELETE", f"{W}/sessions/nope", None, {}, {}, 404),
    ("POST", f"{W}/sessions/list", {"filters": {"NOT": ["x"]}}, {}, {}, 422),
    ("POST", "/v3/workspaces/nope/sessions/list", None, {}, {}, 404),
    # session peers
    ("POST", f"{S}/peers", {"bad id": {}}, {}, {}, 422),
    ("POST", f"{S}/peers", ["alice"], {}, {}, 422),
    ("POST", f"{W}/sessions/nope/peers", {"p": {}}, {}, {}, 404),
    ("PUT", f"{S}/peers", {"p": {"observe_others": 3}}, {}, {}, 422),
    ("PUT", f"{W}/sessions/nope/peers", {"p": {}}, {}, {}, 404),
    ("DELETE", f"{S}/peers", {"alice": {}}, {}, {}, 422),
    ("DELETE", f"{S}/peers", ["bad id"], {}, {}, 422),
    ("DELETE", f"{W}/sessions/nope/peers", ["alice"], {}, {}, 404),
    ("GET", f"{W}/sessions/nope/peers", None, {}, {}, 404),
    ("GET", f"{S}/peers/nope/config", None, {}, {}, 404),
    ("PUT", f"{S}/peers/nope/config", {"observe_me": True}, {}, {}, 404),
    ("PUT", f"{S}/peers/alice/config", {"observe_me": "often"}, {}, {}, 422),
    # messages
    ("POST", f"{S}/messages", {"messages": []}, {}, {}, 422),
    ("POST", f"{S}/messages", msgs(*["m"] * 101), {}, {}, 422),
    ("POST", f"{S}/messages", msgs("x" * 25_001), {}, {}, 413),
    ("POST", f"{S}/messages", msgs("ok", "x" * 25_001), {}, {}, 413),
    ("POST", f"{S}/messages", msgs(5), {}, {}, 422),
    ("POST", f"{S}/messages", msgs("hi", peer="bad id"), {}, {}, 422),
    ("POST", f"{S}/messages", msgs("hi", peer=""), {}, {}, 422),
    ("POST", f"{S}/messages", msgs("hi", metadata=DEEP), {}, {}, 422),
    ("POST", f"{S}/messages", msgs("hi", metadata=WIDE), {}, {}, 422),
    ("POST", f"{S}/messages", msgs("hi", run_id="bad run"), {}, {}, 422),
    ("POST", f"{S}/messages", msgs("hi", run_id=""), {}, {}, 422),
    ("POST", f"{S}/messages", msgs("hi", created_at="yesterday"), {}, {}, 422),
    ("POST", f"{S}/messages", '{"messages": [{"content": "\\ud800", "peer_id": "alice"}]}', {}, {}, 422),
    (
        "POST",
        f"{S}/messages",
        '{"messages": [{"content": "ok", "peer_id": "alice", "metadata": {"x": NaN}}]}',
        {},
        {},
        422,
    ),
    ("POST", f"{S}/messages", '{"messages": [', {}, {}, 422),
    ("POST", f"{S}/messages", ["hi"], {}, {}, 422),
    ("POST", f"{S}/messages", None, {}, {}, 422),
    ("POST", "/v3/workspaces/nope/sessions/s1/messages", msgs("hi"), {}, {}, 404),
    ("POST", f"{W}/sessions/{LONG_ID}/messages", msgs("hi"), {}, {}, 422),
    ("POST", f"{S}/messages", msgs("hi"), {}, {"Idempotency-Key": "k" * 256}, 422),
    ("POST", f"{S}/messages/list", {"filters": []}, {}, {}, 422),
    ("POST", f"{S}/messages/list", None, {"size": 1000}, {}, 422),
    ("POST", f"{W}/sessions/nope/messages/list", None, {}, {}, 404),
    ("GET", f"{S}/messages/nope", None, {}, {}, 404),
    ("GET", f"{S}/messages/{'A' * 21}", None, {}, {}, 404),
    ("GET", f"{S}/messages/bad%20id", None, {}, {}, 422),
    ("GET", f"{W}/sessions/nope/messages/{'A' * 21}", None, {}, {}, 404),
    ("PUT", f"{S}/messages/{'A' * 21}", {"metadata": {}}, {}, {}, 404),
    ("PUT", f"{S}/messages/{'A' * 21}", {"content": "new"}, {}, {}, 422),
    ("PUT", f"{S}/messages/{'A' * 21}", {}, {}, {}, 422),
    ("DELETE", f"{S}/messages/{'A' * 21}", None, {}, {}, 404),
    ("DELETE", f"{S}/messages/bad%20id", None, {}, {}, 422),
    ("DELETE", f"{W}/sessions/nope/messages/{'A' * 21}", None, {}, {}, 404),
    # bodies nested deeper than any request needs (the parser, validators and filters would recurse over them)
    ("POST", "/v3/workspaces", DEEP_ARRAYS, {}, {}, 422),
    ("POST", "/v3/workspaces", DEEP_OBJECTS, {}, {}, 422),
    ("POST", "/v3/workspaces", '{"id":"w2","metadata":' + '{"a":' * 900 + "1" + "}" * 900 + "}", {}, {}, 422),
    ("PUT", W, '{"metadata":' + DEEP_OBJECTS + "}", {}, {}, 422),
    ("POST", f"{W}/peers", DEEP_ARRAYS, {}, {}, 422),
    ("POST", f"{W}/sessions", '{"id":"s2","peers":' + DEEP_OBJECTS + "}", {}, {}, 422),
    ("POST", f"{W}/sessions/list", nested_filters(16), {}, {}, 422),
    ("POST", f"{W}/peers/list", '{"filters":' + '{"AND":[' * 2000 + "{}" + "]}" * 2000 + "}", {}, {}, 422),
    ("POST", f"{S}/peers", DEEP_OBJECTS, {}, {}, 422),
    ("DELETE", f"{S}/peers", DEEP_ARRAYS, {}, {}, 422),
    ("POST", f"{S}/messages", '{"messages":' + DEEP_ARRAYS + "}", {}, {}, 422),
    (
        "POST",
        f"{S}/messages",
        '{"messages":[{"content":"hi","peer_id":"alice","metadata":' + DEEP_OBJECTS + "}]}",
        {},
        {},
        422,
    ),
    ("POST", f"{S}/messages/list", DEEP_OBJECTS, {}, {}, 422),
    ("PUT", f"{S}/messages/{'A' * 21}", '{"metadata":' + DEEP_ARRAYS + "}", {}, {}, 422),
    # text that is not Unicode (a lone surrogate from a \ud800 escape) anywhere in a body, and numbers Python cannot
    # read: a 422 from where the body is read (issue 46; each was a 500 when it reached the store)
    ("POST", f"{W}/peers", '{"id": "p", "metadata": {"note": "\\ud800"}}', {}, {}, 422),
    ("POST", f"{W}/peers", '{"id": "p", "metadata": {"\\udc00": 1}}', {}, {}, 422),
    ("POST", f"{W}/sessions", '{"id": "s2", "metadata": {"note": "\\ud800"}}', {}, {}, 422),
    ("POST", f"{W}/sessions", '{"id": "s2", "peers": {"alice": {}}, "configuration": {"k": ["\\udfff"]}}', {}, {}, 422),
    ("PUT", W, '{"metadata": {"note": "\\ud800"}}', {}, {}, 422),
    ("PUT", W, '{"configuration": {"\\ud800x": {}}}', {}, {}, 422),
    ("PUT", S, '{"metadata": {"a": {"b": "x\\udbff"}}}', {}, {}, 422),
    (
        "POST",
        f"{S}/messages",
        '{"messages": [{"content": "hi", "peer_id": "alice", "metadata": {"note": "\\ud800"}}]}',
        {},
        {},
        422,
    ),
    ("POST", f"{S}/messages", '{"messages": [{"content": "hi", "peer_id": "\\ud800"}]}', {}, {}, 422),
    ("POST", f"{W}/peers/list", '{"filters": {"metadata": {"\\ud800": "x"}}}', {}, {}, 422),
    ("POST", f"{W}/peers", '{"id": "p", "metadata": {"n": ' + "1" * 4301 + "}}", {}, {}, 422),
    # NaN and Infinity are not JSON (Python reads them, and 1e400 as infinity): stored, they came back unreadable
    ("PUT", W, '{"configuration": {"x": NaN}}', {}, {}, 422),
    ("POST", f"{W}/sessions", '{"id": "s2", "configuration": {"x": [1e400]}}', {}, {}, 422),
    (
        "POST",
        f"{S}/messages",
        '{"messages": [{"content": "hi", "peer_id": "alice", "configuration": {"x": -Infinity}}]}',
        {},
        {},
        422,
    ),
    # derived memory: conclusions, cards, queue status
    ("POST", f"{W}/conclusions", {"conclusions": []}, {}, {}, 422),
    ("POST", f"{W}/conclusions", {"conclusions": [CONCLUSION] * 101}, {}, {}, 422),
    ("POST", f"{W}/conclusions", {"conclusions": [{**CONCLUSION, "content": ""}]}, {}, {}, 422),
    ("POST", f"{W}/conclusions", {"conclusions": [{**CONCLUSION, "content": "x" * 65536}]}, {}, {}, 422),
    ("POST", f"{W}/conclusions", {"conclusions": [{**CONCLUSION, "observer_id": "bad id"}]}, {}, {}, 422),
    ("POST", f"{W}/conclusions", {"conclusions": [{**CONCLUSION, "level": "deductive"}]}, {}, {}, 422),
    ("POST", f"{W}/conclusions", {"conclusions": [{"content": "x", "observer_id": "alice"}]}, {}, {}, 422),
    ("POST", f"{W}/conclusions", {"conclusions": [{**CONCLUSION, "observer_id": "nobody"}]}, {}, {}, 404),
    ("POST", f"{W}/conclusions", {"conclusions": [{**CONCLUSION, "session_id": "nope"}]}, {}, {}, 404),
    ("POST", "/v3/workspaces/nope/conclusions", {"conclusions": [CONCLUSION]}, {}, {}, 404),
    ("POST", f"{W}/conclusions", {"conclusions": [{**CONCLUSION, "content": "\ud800"}]}, {}, {}, 422),
    ("POST", f"{W}/conclusions", '{"conclusions": [' + DEEP_ARRAYS + "]}", {}, {}, 422),
    ("POST", f"{W}/conclusions/list", {"filters": {"colour": "red"}}, {}, {}, 422),
    ("POST", f"{W}/conclusions/list", {"filters": {"id": {"in": "x"}}}, {}, {}, 422),
    ("POST", f"{W}/conclusions/list", None, {"size": 0}, {}, 422),
    ("POST", "/v3/workspaces/nope/conclusions/list", None, {}, {}, 404),
    ("POST", f"{W}/conclusions/query", {"query": "x"}, {}, {}, 422),  # no observer_id / observed_id
    ("POST", f"{W}/conclusions/query", {"query": "x", "filters": {"observer_id": "alice"}}, {}, {}, 422),
    ("POST", f"{W}/conclusions/query", {"query": "", "filters": VIEW}, {}, {}, 422),
    ("POST", f"{W}/conclusions/query", {"query": "x", "top_k": 0, "filters": VIEW}, {}, {}, 422),
    ("POST", f"{W}/conclusions/query", {"query": "x", "top_k": 101, "filters": VIEW}, {}, {}, 422),
    ("POST", f"{W}/conclusions/query", {"query": "x", "distance": 1.5, "filters": VIEW}, {}, {}, 422),
    ("POST", "/v3/workspaces/nope/conclusions/query", {"query": "x", "filters": VIEW}, {}, {}, 404),
    ("GET", f"{W}/conclusions/{'A' * 21}", None, {}, {}, 404),
    ("GET", f"{W}/conclusions/short", None, {}, {}, 422),
    ("DELETE", f"{W}/conclusions/{'A' * 21}", None, {}, {}, 404),
    ("DELETE", f"{W}/conclusions/bad%20id", None, {}, {}, 422),
    ("GET", f"{W}/peers/nobody/card", None, {}, {}, 404),
    ("GET", f"{W}/peers/alice/card", None, {"target": "bad id"}, {}, 422),
    ("PUT", f"{W}/peers/nobody/card", {"peer_card": ["IDENTITY: x"]}, {}, {}, 404),
    ("PUT", f"{W}/peers/alice/card", {"peer_card": "IDENTITY: x"}, {}, {}, 422),
    ("PUT", f"{W}/peers/alice/card", {"peer_card": [1]}, {}, {}, 422),
    ("PUT", f"{W}/peers/alice/card", {"peer_card": ["x" * 201]}, {}, {}, 422),
    ("PUT", f"{W}/peers/alice/card", {"peer_card": ["x"] * 41}, {}, {}, 422),
    ("PUT", f"{W}/peers/alice/card", {"peer_card": None}, {}, {}, 422),
    ("PUT", f"{W}/peers/alice/card", {}, {}, {}, 422),
    ("GET", f"{W}/queue/status", None, {"session_id": "nope"}, {}, 404),
    ("GET", f"{W}/queue/status", None, {"sender_id": "nobody"}, {}, 404),
    ("GET", f"{W}/queue/status", None, {"observer_id": "bad id"}, {}, 422),
    ("GET", "/v3/workspaces/nope/queue/status", None, {}, {}, 404),
    ("GET", f"{W}/usage", None, {"from": "2026-13-01"}, {}, 422),
    ("GET", f"{W}/usage", None, {"to": "tomorrow"}, {}, 422),
    ("GET", f"{W}/usage", None, {"from": "2026-02-01", "to": "2026-01-01"}, {}, 422),
    ("GET", "/v3/workspaces/nope/usage", None, {}, {}, 404),
    # representations (tests/context/test_representation.py has more)
    ("GET", f"{W}/peers/nobody/context", None, {}, {}, 404),
    ("GET", f"{W}/peers/alice/context", None, {"max_conclusions": 0}, {}, 422),
    ("GET", f"{W}/peers/alice/context", None, {"include_most_frequent": "maybe"}, {}, 422),
    ("POST", f"{W}/peers/nobody/representation", {}, {}, {}, 404),
    ("POST", f"{W}/peers/alice/representation", {"filters": {"session_id": {"gt": "s1"}}}, {}, {}, 422),
    ("POST", f"{W}/peers/alice/representation", {"search_top_k": 0}, {}, {}, 422),
    ("POST", f"{W}/peers/alice/representation", DEEP_ARRAYS, {}, {}, 422),
    ("GET", f"{S}/context", None, {"peer_target": "nobody"}, {}, 404),
    # message search (tests/memory/test_search.py has more)
    ("POST", f"{W}/search", {"query": ""}, {}, {}, 422),
    ("POST", f"{W}/search", {"query": "x", "limit": 101}, {}, {}, 422),
    ("POST", "/v3/workspaces/nope/search", {"query": "x"}, {}, {}, 404),
    ("POST", f"{W}/sessions/nope/search", {"query": "x"}, {}, {}, 404),
    ("POST", f"{S}/search", {"query": "x", "filters": "x"}, {}, {}, 422),
    ("POST", f"{W}/peers/nobody/search", {"query": "x"}, {}, {}, 404),
    ("POST", f"{W}/peers/alice/search", DEEP_ARRAYS, {}, {}, 422),
    # chat (tests/chat/test_chat.py has more)
    ("POST", f"{W}/peers/alice/chat", {"query": ""}, {}, {}, 422),
    ("POST", f"{W}/peers/alice/chat", {"query": "x" * 10_001}, {}, {}, 422),
    ("POST", f"{W}/peers/alice/chat", {"query": "x", "reasoning_level": "extreme"}, {}, {}, 422),
    ("POST", f"{W}/peers/alice/chat", {"query": "x", "temperature": 2}, {}, {}, 422),
    ("POST", f"{W}/peers/alice/chat", {"query": "x", "stream": "maybe"}, {}, {}, 422),
    ("POST", f"{W}/peers/nobody/chat", {"query": "x"}, {}, {}, 404),
    ("POST", f"{W}/peers/alice/chat", {"query": "x", "target": "nobody"}, {}, {}, 404),
    ("POST", f"{W}/peers/alice/chat", {"query": "x", "session_id": "nope"}, {}, {}, 404),
    ("POST", f"{W}/peers/alice/chat", {"query": "x", "scope": "nope"}, {}, {}, 404),
    ("POST", f"{W}/peers/alice/chat", {"query": "x", "scope": ["a"] * 11}, {}, {}, 422),
    ("POST", f"{W}/peers/alice/chat", {"query": "x", "scope": "a", "session_id": "s1"}, {}, {}, 422),
    ("POST", f"{W}/peers/alice/chat", {"query": "x", "filters": {"session_id": {"gt": "s1"}}}, {}, {}, 422),
    ("POST", f"{W}/peers/alice/chat", {"query": "x", "response_format": {"type": "array"}}, {}, {}, 422),
    ("POST", f"{W}/peers/alice/chat", {"query": "x", "response_format": "json"}, {}, {}, 422),
    ("POST", f"{W}/peers/alice/chat", DEEP_ARRAYS, {}, {}, 422),
    ("POST", f"{W}/chat", {"query": "x", "target": "alice"}, {}, {}, 422),
    ("POST", "/v3/workspaces/nope/chat", {"query": "x"}, {}, {}, 404),
    ("POST", f"{W}/chat", {"query": "x", "scope": "nope"}, {}, {}, 404),
    ("POST", f"{W}/chat", None, {}, {}, 422),
    # clones (tests/store/test_clone.py has more)
    ("POST", f"{S}/clone", None, {"message_id": "bad id!"}, {}, 422),
    ("POST", f"{S}/clone", None, {"message_id": "AAAAAAA_nope_nope_nope"}, {}, 404),
    ("POST", f"{W}/sessions/nope/clone", None, {}, {}, 404),
    # dreams (tests/memory/test_dreams.py has more)
    ("POST", f"{W}/schedule_dream", {"observer": "nobody"}, {}, {}, 404),
    ("POST", f"{W}/schedule_dream", {"observer": "alice", "dream_type": "nap"}, {}, {}, 422),
    ("POST", f"{W}/schedule_dream", None, {}, {}, 422),
    # scopes (tests/store/test_scopes.py has more)
    ("POST", f"{W}/scopes", {"id": "scope.x"}, {}, {}, 422),
    ("POST", f"{W}/scopes", DEEP_OBJECTS, {}, {}, 422),
    ("GET", f"{W}/scopes/nope", None, {}, {}, 404),
    ("POST", f"{W}/scopes/list", None, {"size": 0}, {}, 422),
    ("POST", f"{W}/scopes/nope/sessions", {"session_ids": ["s1"]}, {}, {}, 404),
    ("POST", f"{W}/scopes/nope/sessions", {"session_ids": "s1"}, {}, {}, 422),
    ("DELETE", f"{W}/scopes/nope/sessions/s1", None, {}, {}, 404),
    ("POST", f"{W}/scopes/nope/sessions/list", None, {}, {}, 404),
    ("GET", f"{W}/scopes/nope/status", None, {}, {}, 404),
    ("GET", f"{W}/scopes/bad%20id/status", None, {}, {}, 422),
    # webhooks (tests/webhooks/test_endpoints.py has more)
    ("POST", f"{W}/webhooks", {"url": "ftp://example.com/x"}, {}, {}, 422),
    ("POST", f"{W}/webhooks", {"url": "https://example.com/" + "a" * 2048}, {}, {}, 422),
    ("POST", f"{W}/webhooks", {}, {}, {}, 422),
    ("POST", f"{W}/webhooks", {"url": "https://example.com/x", "event_types": ["nope"]}, {}, {}, 422),
    ("POST", "/v3/workspaces/nope/webhooks", {"url": "https://example.com/x"}, {}, {}, 404),
    ("GET", f"{W}/webhooks", None, {"size": 0}, {}, 422),
    ("DELETE", f"{W}/webhooks/{'x' * 21}", None, {}, {}, 404),
    ("DELETE", f"{W}/webhooks/short", None, {}, {}, 422),
    ("POST", f"{W}/webhooks/{'x' * 21}/rotate", None, {}, {}, 404),
    ("GET", "/v3/workspaces/nope/webhooks/test", None, {}, {}, 404),
    ("GET", "/v3/workspaces/bad%20id/webhooks/test", None, {}, {}, 422),
    ("GET", f"{W}/webhooks/{'x' * 21}/deliveries", None, {}, {}, 404),
    ("GET", f"{W}/webhooks/{'x' * 21}/deliveries", None, {"size": 101}, {}, 422),
    ("GET", f"{W}/webhooks/short/deliveries", None, {}, {}, 422),
    # erasing a peer (tests/memory/test_erase_peer.py has more)
    ("DELETE", f"{W}/peers/nope", None, {}, {}, 404),
    ("DELETE", "/v3/workspaces/nope/peers/alice", None, {}, {}, 404),
    ("DELETE", f"{W}/peers/{LONG_ID}", None, {}, {}, 422),
    ("GET", f"{W}/peers/nope/erasure", None, {}, {}, 404),
    ("GET", f"{W}/peers/bad%20id/erasure", None, {}, {}, 422),
    # export and import (tests/transfer has more)
    ("POST", "/v3/workspaces/nope/exports", None, {}, {}, 404),
    ("GET", f"{W}/exports/0123456789abcdef", None, {}, {}, 404),
    ("GET", f"{W}/exports/short", None, {}, {}, 422),
    ("POST", "/v3/workspaces/nope/imports/uploads", None, {}, {}, 404),
    ("POST", f"{W}/imports", {}, {}, {}, 422),
    ("POST", f"{W}/imports", {"upload_id": "../../bodies"}, {}, {}, 422),
    ("POST", f"{W}/imports", {"upload_id": "0123456789abcdef"}, {}, {}, 404),
    ("POST", f"{W}/imports", {"export": {"workspace_id": "ws1", "export_id": "0123456789abcdef"}}, {}, {}, 404),
    (
        "POST",
        f"{W}/imports",
        {"upload_id": "0123456789abcdef", "export": {"workspace_id": "ws1", "export_id": "0123456789abcdef"}},
        {},
        {},
        422,
    ),
    ("GET", f"{W}/imports/0123456789abcdef", None, {}, {}, 404),
    ("GET", f"{W}/imports/short", None, {}, {}, 422),
    # file upload (tests/messages/test_upload.py has more)
    ("POST", f"{S}/messages/upload", '{"messages": []}', {}, {}, 415),  # not a form
    (
        "POST",
        f"{S}/messages/upload",
        Form({"peer_id": "alice"}, {"file": ("a.png", b"\x89PNG", "image/png")}),
        {},
        {},
        415,
    ),
    (
        "POST",
        f"{S}/messages/upload",
        Form({"peer_id": "alice"}, {"file": ("a.pdf", b"%PDF-1 x", "application/pdf")}),
        {},
        {},
        422,
    ),
    ("POST", f"{S}/messages/upload", Form({}, {"file": ("a.txt", b"hi", "text/plain")}), {}, {}, 422),
    ("POST", f"{S}/messages/upload", Form({"peer_id": "alice"}, {}), {}, {}, 422),
    (
        "POST",
        f"{S}/messages/upload",
        Form({"peer_id": "alice"}, {"file": ("a.txt", b"x" * (4 * 2**20 + 1), "text/plain")}),
        {},
        {},
        413,
    ),
    (
        "POST",
        f"{S}/messages/upload",
        Form({"peer_id": "alice", "metadata": '{"note": "\\ud800"}'}, {"file": ("a.txt", b"hi", "text/plain")}),
        {},
        {},
        422,
    ),
    (
        "POST",
        f"{S}/messages/upload",
        Form({"peer_id": "alice"}, {"file": ("a.txt", b"caf\\ud800", "text/plain; charset=unicode_escape")}),
        {},
        {},
        422,
    ),
    (
        "POST",
        f"{W}/sessions/nope/messages/upload",
        Form({"peer_id": "alice"}, {"file": ("a.txt", b"hi", "text/plain")}),
        {},
        {},
        404,
    ),
]


def _scan(aws) -> list:
    return sorted(aws["dynamodb"].scan(TableName="precis-local")["Items"], key=lambda i: (i["PK"]["S"], i["SK"]["S"]))


@pytest.fixture
def seeded(aws):
    """ws1 with peer alice and session s1 holding one message."""
    assert call("POST", "/v3/workspaces", {"id": "ws1"}).status == 201
    assert call("POST", f"{W}/sessions", {"id": "s1", "peers": {"alice": {}}}).status == 201
    assert call("POST", f"{S}/messages", msgs("hello")).status == 201
    return aws


@pytest.mark.parametrize(
    ("method", "path", "body", "query", "headers", "status"),
    CASES,
    ids=[f"{c[0]} {c[1][:60]} -> {c[5]} #{i}" for i, c in enumerate(CASES)],
)
def test_bad_input_answers_4xx_with_a_message_and_writes_nothing(seeded, method, path, body, query, headers, status):
    before = _scan(seeded)
    raw = body if isinstance(body, str) else None
    reply = call(method, path, None if raw else body, raw=raw, headers=headers, **query)
    assert reply.status == status, reply.body
    detail = reply.body["detail"]
    assert detail, "an error must say what is wrong"
    if isinstance(detail, list):
        assert all(e["msg"] and e["loc"] for e in detail)
    assert _scan(seeded) == before


def test_every_route_has_bad_input_cases():
    from local.template import template

    covered = set()
    for method, path, *_ in CASES:
        from tests.handlers import route_of as _match

        found = _match(method, path.split("?")[0])
        if found:
            covered.add((found[0].method, found[0].path))
    routes = {
        (r.method, r.path)
        for r in template().routes
        if r.path.startswith("/v3/") and not r.path.endswith(("/context", "/summaries")) and r.path != "/v3/keys"
    }
    assert routes - covered == set()


def test_a_put_that_changes_nothing_is_fine(seeded):
    def stored() -> list[dict]:  # what the table holds, but when it was last written
        return [{k: v for k, v in item.items() if k != "updated_at"} for item in _scan(seeded)]

    # Values other than the defaults, so that an empty PUT resetting them would show.
    assert call("PUT", W, {"metadata": {"team": "a"}, "configuration": {"deriver": {"max_wait_s": 60}}}).status == 200
    assert call("PUT", f"{W}/peers/alice", {"metadata": {"role": "user"}}).status == 200
    assert call("PUT", S, {"metadata": {"topic": "moving"}}).status == 200
    assert call("PUT", f"{S}/peers/alice/config", {"observe_others": True}).status == 204
    shown = call("GET", f"{S}/peers/alice/config").body
    assert shown["observe_others"] is True
    before = stored()
    reply = call("PUT", W, {})
    assert reply.status == 200 and (reply.body["metadata"], reply.body["configuration"]) == (
        {"team": "a"},
        {"deriver": {"max_wait_s": 60}},
    ), reply.body
    reply = call("PUT", f"{W}/peers/alice", {"metadata": None})
    assert reply.status == 200 and reply.body["metadata"] == {"role": "user"}, reply.body
    reply = call("PUT", S, {})
    assert reply.status == 200 and reply.body["metadata"] == {"topic": "moving"}, reply.body
    assert call("PUT", f"{S}/peers/alice/config", {}).status == 204
    assert call("GET", f"{S}/peers/alice/config").body == shown
    reply = call("PUT", "/v3/workspaces/nope", {})
    assert reply.status == 404 and "nope" in reply.body["detail"]
    assert stored() == before


def test_minting_a_key_without_a_signing_secret_is_503_not_a_crash(seeded):
    reply = call("POST", "/v3/keys")
    assert reply.status == 503 and "PRECIS_JWT_SECRET" in reply.body["detail"]


@pytest.mark.parametrize(
    ("method", "path", "body", "loc"),
    [
        ("POST", f"{W}/peers", {"id": "p", "metadata": {"note": "ok \ud800"}}, ["body", "metadata", "note"]),
        ("POST", f"{W}/sessions", {"id": "s2", "metadata": {"\udfff": 1}}, ["body", "metadata"]),
        ("PUT", W, {"metadata": {"note": "\ud800"}}, ["body", "metadata", "note"]),
        (
            "POST",
            f"{S}/messages",
            {"messages": [{"content": "hi", "peer_id": "alice"}, {"content": "\ud800", "peer_id": "alice"}]},
            ["body", "messages", 1, "content"],
        ),
        ("POST", f"{W}/peers/alice/chat", {"query": "where\ud800"}, ["body", "query"]),
        ("PUT", f"{W}/peers/alice/card", {"peer_card": ["ok", "\udc00"]}, ["body", "peer_card", 1]),
    ],
    ids=["peer metadata", "session metadata key", "workspace metadata", "second message", "chat query", "card"],
)
def test_text_that_is_not_unicode_is_a_422_naming_where(seeded, method, path, body, loc):
    before = _scan(seeded)
    reply = call(method, path, body)
    assert reply.status == 422, reply.body
    [error] = reply.body["detail"]
    where = ".".join(str(p) for p in loc[:1]) + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc[1:])
    assert error["loc"] == loc and error["type"] == "string_unicode", error
    assert error["msg"].startswith(f"{where}: ") and "lone surrogate" in error["msg"], error
    assert _scan(seeded) == before


def test_a_body_at_the_nesting_limit_is_read(seeded):
    from precis.api.app import MAX_BODY_DEPTH

    assert MAX_BODY_DEPTH == 32
    assert call("POST", f"{W}/peers/list", nested_filters(15)).body["total"] == 0  # 32 levels: accepted
    reply = call("POST", f"{W}/peers/list", nested_filters(16))
    assert reply.status == 422
    assert reply.body["detail"] == [
        {"loc": ["body"], "msg": "body: JSON nests deeper than the limit of 32 levels", "type": "json_too_deep"}
    ]
