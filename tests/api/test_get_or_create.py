"""Honcho's get-or-create of what exists already: a peer takes the metadata and configuration sent, a session the
metadata sent and the configuration's keys merged into its own; a card may be set for a target not created yet."""

from __future__ import annotations

import json

import pytest

from precis.store.db import get_db
from tests.handlers import call

W = "/v3/workspaces/ws1"


@pytest.fixture
def ws(aws):
    get_db.cache_clear()
    assert call("POST", "/v3/workspaces", {"id": "ws1"}).status == 201
    return aws


def _stored(aws, sk: str) -> dict:
    item = aws["dynamodb"].get_item(TableName="precis-local", Key={"PK": {"S": "WS#ws1"}, "SK": {"S": sk}})["Item"]
    return {name: json.loads(item[name]["S"]) for name in ("metadata", "configuration")}


def test_getting_an_existing_peer_replaces_its_metadata_and_configuration(ws):
    created = call(
        "POST",
        f"{W}/peers",
        {"id": "alice", "metadata": {"first": True}, "configuration": {"observe_me": False, "extra": 1}},
    )
    assert created.status == 201
    got = call(
        "POST", f"{W}/peers", {"id": "alice", "metadata": {"second": True}, "configuration": {"observe_me": True}}
    )
    assert got.status == 200
    assert (got.body["metadata"], got.body["configuration"]) == ({"second": True}, {"observe_me": True})
    assert got.body["created_at"] == created.body["created_at"]
    assert _stored(ws, "PEER#alice") == {"metadata": {"second": True}, "configuration": {"observe_me": True}}


def test_getting_a_peer_without_metadata_or_configuration_leaves_them(ws):
    call("POST", f"{W}/peers", {"id": "alice", "metadata": {"role": "user"}, "configuration": {"observe_me": False}})
    got = call("POST", f"{W}/peers", {"id": "alice"})
    assert got.status == 200 and (got.body["metadata"], got.body["configuration"]) == (
        {"role": "user"},
        {"observe_me": False},
    )
    only_metadata = call("POST", f"{W}/peers", {"id": "alice", "metadata": {}})
    assert (only_metadata.body["metadata"], only_metadata.body["configuration"]) == ({}, {"observe_me": False})


def test_getting_an_existing_session_replaces_its_metadata_and_merges_its_configuration(ws):
    first = {"summary": {"enabled": False}, "reasoning": {"enabled": True}}
    created = call("POST", f"{W}/sessions", {"id": "s1", "metadata": {"topic": "moving"}, "configuration": first})
    assert created.status == 201
    got = call(
        "POST",
        f"{W}/sessions",
        {
            "id": "s1",
            "metadata": {"topic": "work"},
            "configuration": {"reasoning": {"enabled": False}, "summary": None},
        },
    )
    assert got.status == 200 and got.body["metadata"] == {"topic": "work"}
    # each key sent replaces the stored one of its name; the others stay, and a null changes nothing
    assert got.body["configuration"] == {"summary": {"enabled": False}, "reasoning": {"enabled": False}}
    assert _stored(ws, "SESSION#s1") == {"metadata": {"topic": "work"}, "configuration": got.body["configuration"]}
    assert call("POST", f"{W}/sessions", {"id": "s1"}).body == got.body


def test_a_merge_that_makes_the_sessions_settings_invalid_is_422_and_changes_nothing(ws):
    own = {"summarizer": {"messages_per_short_summary": 40}}
    assert call("POST", f"{W}/sessions", {"id": "s1", "configuration": own}).status == 201
    alone = {"summary": {"messages_per_long_summary": 30}}
    assert call("POST", f"{W}/sessions", {"id": "s2", "configuration": alone}).status == 201  # fine by itself
    refused = call("POST", f"{W}/sessions", {"id": "s1", "metadata": {"x": 1}, "configuration": alone})
    assert refused.status == 422
    assert "messages_per_long_summary" in refused.body["detail"] and "(40)" in refused.body["detail"]
    assert _stored(ws, "SESSION#s1") == {"metadata": {}, "configuration": own}


def test_a_configuration_changed_meanwhile_is_merged_into_not_lost(ws):
    """Another request changes the session between this get-or-create's read and its write (a botocore hook on the
    handlers' client makes that write just before the update goes out): both changes are kept."""
    assert call("POST", f"{W}/sessions", {"id": "s1", "configuration": {"summary": {"enabled": False}}}).status == 201
    client, raced = get_db().client, []

    def change_first(**_) -> None:
        if not raced:  # the first update only (the PUT's own update comes through here too)
            raced.append("PUT")
            raced.append(
                call(
                    "PUT",
                    f"{W}/sessions/s1",
                    {"configuration": {"summary": {"enabled": False}, "deriver": {"max_wait_s": 60}}},
                ).status
            )

    client.meta.events.register("before-call.dynamodb.UpdateItem", change_first)
    try:
        got = call("POST", f"{W}/sessions", {"id": "s1", "configuration": {"reasoning": {"enabled": False}}})
    finally:
        client.meta.events.unregister("before-call.dynamodb.UpdateItem", change_first)
    assert raced == ["PUT", 200] and got.status == 200
    assert got.body["configuration"] == {
        "summary": {"enabled": False},
        "deriver": {"max_wait_s": 60},
        "reasoning": {"enabled": False},
    }


def test_a_card_is_set_and_read_for_a_target_not_created_yet(ws):
    assert call("POST", f"{W}/peers", {"id": "alice"}).status == 201
    assert call("GET", f"{W}/peers/alice/card", target="bob").body == {"peer_card": None}
    assert call("PUT", f"{W}/peers/alice/card", {"peer_card": ["bob likes tea"]}, target="bob").body == {
        "peer_card": ["bob likes tea"]
    }
    assert call("GET", f"{W}/peers/alice/card", target="bob").body == {"peer_card": ["bob likes tea"]}
    assert call("POST", f"{W}/peers", {"id": "bob"}).status == 201  # created afterwards, the card is there
    assert call("GET", f"{W}/peers/alice/card", target="bob").body == {"peer_card": ["bob likes tea"]}
    assert call("GET", f"{W}/peers/alice/card").body == {"peer_card": None}  # alice's own card is another one


def test_a_card_still_needs_its_observer_and_workspace(ws):
    assert call("PUT", f"{W}/peers/nobody/card", {"peer_card": ["x"]}, target="bob").status == 404
    assert call("GET", f"{W}/peers/nobody/card", target="bob").status == 404
    assert call("PUT", "/v3/workspaces/nope/peers/alice/card", {"peer_card": ["x"]}, target="bob").status == 404
