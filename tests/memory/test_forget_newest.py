"""A session whose newest message was deleted is summarized again through its place: the summary's end agrees with
the tokens the deleted message spanned, so the context still serves it."""

from __future__ import annotations

import logging

import pytest

from tests.handlers import call, post_messages
from tests.memory.test_forget import S, Streams, W


@pytest.fixture
def ws(aws):
    assert call("POST", "/v3/workspaces", {"id": "ws1"}).status == 201
    assert call("POST", f"{W}/sessions", {"id": "s1", "peers": {"alice": {}, "bob": {}}}).status == 201
    return aws


def test_the_context_serves_the_summary_made_again_after_the_newest_message_is_deleted(ws, caplog):
    streams = Streams(ws)
    # Honcho's cadence: a short summary every 20 messages.
    posted = post_messages("s1", *[("alice" if i % 2 else "bob", f"Fact number {i} about boats.") for i in range(20)])
    streams.settle()
    assert call("GET", f"{S}/summaries").body["short_summary"]["message_id"] == posted[-1]["id"]
    assert call("DELETE", f"{S}/messages/{posted[-1]['id']}").status == 204
    streams.settle()
    short = call("GET", f"{S}/summaries").body["short_summary"]
    assert short is not None and short["message_id"] == posted[-2]["id"]  # the newest it covers still there
    # The context plans with the summary against the newest place it reads (the deleted message's, spanning its
    # tokens): they agree, so the summary is not refused as disagreeing with the session's messages.
    for tokens in (30, short["token_count"] + 20, 300, 10_000):
        with caplog.at_level(logging.ERROR):
            context = call("GET", f"{S}/context", tokens=tokens, summary="true")
        assert context.status == 200, context.body
        assert all(m["id"] != posted[-1]["id"] for m in context.body["messages"])
    assert not [r for r in caplog.records if "disagrees" in r.getMessage()]
