"""Retention (docs/design.md, "Retention") through the real handlers on moto: the setting, the expiry each message
carries from its write, reads hiding it from that second, and the TTL service's removal of the session's marker
(local.ttl plays the service, which moto lacks) deleting it with everything drawn from it through the stream; then the
canary proof that an expiry leaves nothing, as a delete leaves nothing."""

from __future__ import annotations

import json

import pytest

from local.stream_records import lambda_record, matches
from local.template import template
from local.ttl import TtlSweeper
from precis.store import retention
from tests.handlers import call, dynamodb_requests, invoke, post_messages
from tests.memory.test_forget import TABLE, Streams
from tests.memory.test_forget_canary import (
    CANARY,
    bucket_objects,
    canary_message,
    conversation,
    decoded,
    derived_from_it,
    normalized,
    table_items,
    traces,
)

DAY = 86_400
T0 = 1_780_000_000.0 + 3_600  # a fixed start (01:00 UTC of its day): the markers' days are the test's


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    """The time the store reads for retention, driven by the test."""
    clock = Clock()
    monkeypatch.setattr(retention, "clock", clock)
    return clock


class TtlStreams(Streams):
    """The stream as the event-source mappings deliver it, each record chosen by the template's own filters (a REMOVE
    made by the TTL sweeper carries the service's identity, as on AWS)."""

    def __init__(self, aws, sweeper: TtlSweeper, *, chaos: bool = False):
        super().__init__(aws, chaos=chaos)
        self.sweeper = sweeper
        mappings = {name: template().stream_function(name).stream for name in ("SummarizeFunction", "DeriveFunction")}
        self.filters = {
            name: [json.loads(f["Pattern"]) for f in props["FilterCriteria"]["Filters"]]
            for name, props in mappings.items()
        }

    def settle(self, rounds: int = 80, *, before=lambda function, event: None) -> None:
        for _ in range(rounds):
            records = [self.sweeper.stamped(r) for r in self.read()]
            if not records:
                return
            for function, patterns in self.filters.items():
                shaped = [_shaped(r) for r in records]
                chosen = [r for r in shaped if any(matches(p, r) for p in patterns)]
                for batch in self._batches(chosen):
                    answer = invoke(function, {"Records": batch})
                    assert answer == {"batchItemFailures": []}, (function, answer)
        raise AssertionError("the stream did not settle")


def _shaped(record: dict) -> dict:
    shaped = lambda_record(record, "arn:aws:dynamodb:us-east-1:123456789012:table/precis-local/stream/x")
    if "userIdentity" in record:
        shaped["userIdentity"] = record["userIdentity"]
    return shaped


@pytest.fixture
def ttl(aws, clock):
    return TtlSweeper(aws["dynamodb"], TABLE, clock)


def _items(aws, pk: str, prefix: str) -> list[dict]:
    out = aws["dynamodb"].query(
        TableName=TABLE,
        KeyConditionExpression="PK = :p AND begins_with(SK, :s)",
        ExpressionAttributeValues={":p": {"S": pk}, ":s": {"S": prefix}},
        ConsistentRead=True,
    )
    return out["Items"]


# ---------------------------------------------------------------- the setting


@pytest.mark.parametrize(
    ("retention_setting", "named"),
    [
        ({"days": -1}, "configuration.retention.days"),
        ({"days": "7"}, "configuration.retention.days"),
        ({"days": True}, "configuration.retention.days"),
        ({"weeks": 1}, "configuration.retention.weeks"),
        ([7], "configuration.retention must be an object"),
    ],
)
def test_a_bad_retention_setting_is_refused_naming_it(aws, retention_setting, named):
    reply = call("POST", "/v3/workspaces", {"id": "w1", "configuration": {"retention": retention_setting}})
    assert reply.status == 422 and named in json.dumps(reply.body), reply.body
    assert call("POST", "/v3/workspaces", {"id": "w1"}).status == 201
    reply = call("POST", "/v3/workspaces/w1/sessions", {"id": "s1", "configuration": {"retention": retention_setting}})
    assert reply.status == 422 and named in json.dumps(reply.body), reply.body


def test_effective_days_session_over_workspace():
    assert retention_days_of({"days": 30}, None) == 30
    assert retention_days_of({"days": 30}, {"days": 2}) == 2
    assert retention_days_of({"days": 30}, {"days": 0}) is None  # the session keeps its messages
    assert retention_days_of(None, None) is None


def retention_days_of(workspace, session):
    from precis.configuration import retention_days

    return retention_days(
        None if workspace is None else {"retention": workspace}, None if session is None else {"retention": session}
    )


def test_only_the_ttl_services_removal_of_a_marker_starts_an_expiry():
    marker = {"PK": "WS#w#S#s", "SK": "EXPIRY#00020000"}
    ttl_service = {**marker, "userIdentity": "dynamodb.amazonaws.com"}
    assert retention.expiry_target("REMOVE", ttl_service) == retention.ExpiryTarget("w", "s")
    assert retention.expiry_target("REMOVE", {**marker, "userIdentity": None}) is None  # a purge's delete
    assert retention.expiry_target("REMOVE", {**ttl_service, "SK": "MSG#000000000001"}) is None
    running = {"PK": "WS#w#S#s", "SK": "EXPIRY#run", "kind": "expiry", "requested": "t"}
    assert retention.expiry_target("MODIFY", running) == retention.ExpiryTarget("w", "s")
    assert retention.expiry_target("REMOVE", {**running, "userIdentity": "dynamodb.amazonaws.com"}) is None


# ---------------------------------------------------------------- the write


def test_each_message_carries_its_expiry_and_a_session_is_marked_once_per_expiry_day(aws, clock):
    assert call("POST", "/v3/workspaces", {"id": "ws1", "configuration": {"retention": {"days": 2}}}).status == 201
    post_messages("s1", ("alice", "one"), ("bob", "two"))
    with dynamodb_requests() as seen:
        clock.now += 600
        post_messages("s1", ("alice", "three"))
    messages = _items(aws, "WS#ws1#S#s1", "MSG#")
    assert [int(m["retain_until"]["N"]) for m in messages] == [int(T0) + 2 * DAY] * 2 + [int(T0) + 600 + 2 * DAY]
    (marker,) = _items(aws, "WS#ws1#S#s1", "EXPIRY#")
    day = (int(T0) + 2 * DAY) // DAY
    assert marker["SK"]["S"] == f"EXPIRY#{day:08d}" and int(marker["expires_at"]["N"]) == (day + 1) * DAY
    # The second post of the day wrote its messages and nothing more (no marker, no session update).
    assert [op for op, _ in seen if op in ("TransactWriteItems", "PutItem", "UpdateItem")] == ["TransactWriteItems"]
    clock.now += DAY
    post_messages("s1", ("bob", "four"))
    assert len(_items(aws, "WS#ws1#S#s1", "EXPIRY#")) == 2


def test_without_retention_nothing_is_added(aws, clock):
    assert call("POST", "/v3/workspaces", {"id": "ws1"}).status == 201
    post_messages("s1", ("alice", "one"))
    (message,) = _items(aws, "WS#ws1#S#s1", "MSG#")
    assert "retain_until" not in message and _items(aws, "WS#ws1#S#s1", "EXPIRY#") == []


# ---------------------------------------------------------------- reads hide an expired message at once


def test_an_expired_message_is_hidden_from_every_read_before_the_ttl_service_comes(aws, clock, ttl):
    streams = TtlStreams(aws, ttl)
    assert call("POST", "/v3/workspaces", {"id": "ws1"}).status == 201
    peers = {"alice": {}, "bob": {"observe_others": True}}
    assert call("POST", "/v3/workspaces/ws1/sessions", {"id": "s1", "peers": peers}).status == 201
    old = post_messages("s1", *[("alice", f"I keep bees in Lisbon, note {i}.") for i in range(12)])
    streams.settle()
    config = {"configuration": {"retention": {"days": 1}}}
    assert call("PUT", "/v3/workspaces/ws1/sessions/s1", config).status == 200
    clock.now += 3_600
    new = post_messages(
        "s1", *[("bob", f"The quokka sleeps under the jacaranda, day {i}.") for i in range(10)], ("alice", "Quokkas!")
    )
    streams.settle()
    assert call("GET", f"/v3/workspaces/ws1/sessions/s1/messages/{new[0]['id']}").status == 200
    context = call("GET", "/v3/workspaces/ws1/sessions/s1/context", tokens=100_000).body
    assert "quokka" in json.dumps(context).lower()
    summaries = call("GET", "/v3/workspaces/ws1/sessions/s1/summaries").body
    assert "quokka" in json.dumps(summaries["short_summary"]).lower()  # a summary drawn from them (seqs 1-20)

    clock.now += DAY  # both expired; the TTL service has not come (nothing swept)
    listed = call("POST", "/v3/workspaces/ws1/sessions/s1/messages/list", size=100).body["items"]
    assert [m["id"] for m in listed] == [m["id"] for m in old]
    assert call("GET", f"/v3/workspaces/ws1/sessions/s1/messages/{new[0]['id']}").status == 404
    assert call("PUT", f"/v3/workspaces/ws1/sessions/s1/messages/{new[0]['id']}", {"metadata": {"a": 1}}).status == 404
    context = call("GET", "/v3/workspaces/ws1/sessions/s1/context", tokens=100_000).body
    assert [m["id"] for m in context["messages"]] == [m["id"] for m in old]
    assert context["summary"] is None or "quokka" not in json.dumps(context["summary"]).lower()
    summaries = call("GET", "/v3/workspaces/ws1/sessions/s1/summaries").body
    assert "quokka" not in json.dumps(summaries).lower()
    found = call("POST", "/v3/workspaces/ws1/sessions/s1/search", {"query": "quokka jacaranda"}).body
    assert not {m["id"] for m in found} & {m["id"] for m in new}
    # Still stored: only the TTL service's removal of the marker starts its deletion.
    assert len(_items(aws, "WS#ws1#S#s1", "MSG#")) == 23


def test_the_ttl_service_removing_the_marker_deletes_the_expired_messages_through_the_stream(aws, clock, ttl):
    streams = TtlStreams(aws, ttl)
    assert call("POST", "/v3/workspaces", {"id": "ws1"}).status == 201
    assert call("POST", "/v3/workspaces/ws1/sessions", {"id": "s1", "peers": {"alice": {}}}).status == 201
    kept = post_messages("s1", ("alice", "I keep bees in Lisbon."))
    assert call("PUT", "/v3/workspaces/ws1/sessions/s1", {"configuration": {"retention": {"days": 1}}}).status == 200
    gone = post_messages("s1", ("alice", "I moved to Quokkaville last year."), ("alice", "Quokkas are my friends."))
    streams.settle()
    assert ttl.sweep() == []  # nothing expired yet
    clock.now += DAY + 1
    streams.settle()
    assert len(_items(aws, "WS#ws1#S#s1", "EXPIRY#")) == 1  # expired, hidden, not yet removed by the service

    clock.now += DAY  # the service comes (within days on AWS)
    swept = ttl.sweep()
    assert [k["SK"]["S"].split("#")[0] for k in swept] == ["EXPIRY"]
    streams.settle()
    messages = {int(m["seq"]["N"]): m for m in _items(aws, "WS#ws1#S#s1", "MSG#")}
    assert messages[1]["kind"]["S"] == "message" and messages[1]["id"]["S"] == kept[0]["id"]
    assert [messages[s]["kind"]["S"] for s in (2, 3)] == ["forgotten", "forgotten"]
    assert all("forgot_done" in messages[s] for s in (2, 3))  # the delete's cascade ran to its end
    assert _items(aws, "WS#ws1#S#s1", "EXPIRY#") == []  # the running expiry item went with its end
    stored = [{k: decoded(v) for k, v in item.items()} for item in table_items(aws)]
    assert [i["SK"] for i in stored if "quokka" in json.dumps(i, ensure_ascii=False).lower()] == []
    ids = {g["id"] for g in gone}
    # Only the tombstones name them (their place: as a delete's), and nothing else does.
    assert [i["SK"] for i in stored if ids & set(json.dumps(i).split('"'))] == ["MSG#000000000002", "MSG#000000000003"]


# ---------------------------------------------------------------- the canary proof


@pytest.fixture(params=["in order", "replayed and reordered"])
def runs(aws, clock, ttl, request):
    streams = TtlStreams(aws, ttl, chaos=request.param != "in order")
    for ws, canary in (("wclean", False), ("wcanary", True)):
        conversation(ws, streams, canary=False)
        config = {"configuration": {"retention": {"days": 1}}}
        assert call("PUT", f"/v3/workspaces/{ws}/sessions/s1", config).status == 200
        if canary:  # the only message stored under retention
            body = {"messages": [{"peer_id": "alice", "content": canary_message()}]}
            reply = call("POST", f"/v3/workspaces/{ws}/sessions/s1/messages", body, headers={"Idempotency-Key": "k1"})
            assert reply.status == 201
        streams.settle()
    return aws, streams


def test_an_expired_message_leaves_no_trace_and_changes_nothing_else(runs, clock, ttl):
    """Also with every stream batch delivered twice and its partitions in reversed order (the local stack's chaos)."""
    aws, streams = runs
    before = traces(table_items(aws), bucket_objects(aws))
    kinds = {t.split(" / ")[-1].split("#")[0] for t in before if t.startswith("item")}
    assert {"C", "L", "CARD", "SUMMARY"} <= kinds, before
    assert any(t.startswith("object bodies/") for t in before) and any(t.startswith("object audit/") for t in before)

    clock.now += 2 * DAY + 1
    assert ttl.sweep()  # the marker (and the idempotency record of the post: its own 24 h TTL)
    streams.settle()

    assert traces(table_items(aws), bucket_objects(aws)) == []
    clean, canary = normalized(table_items(aws), "wclean"), normalized(table_items(aws), "wcanary")
    differ = {t for t in (clean - canary) + (canary - clean) if not derived_from_it(t)}
    assert differ == set(), "\n".join(sorted(differ))
    assert CANARY not in json.dumps(call("GET", "/v3/workspaces/wcanary/sessions/s1/context", tokens=100_000).body)


# ---------------------------------------------------------------- an expiry interrupted, and a clone's


def test_an_expiry_out_of_time_goes_on_through_its_running_item(aws, clock, ttl):
    from precis.store import expiry
    from precis.store.db import get_db
    from precis.store.forget import BATCH_MAX

    streams = TtlStreams(aws, ttl)
    assert call("POST", "/v3/workspaces", {"id": "ws1", "configuration": {"retention": {"days": 1}}}).status == 201
    n = BATCH_MAX + 3
    post_messages("s1", *(("alice", f"I collect quokka stamps, album {i}.") for i in range(n)))
    streams.settle()
    clock.now += 2 * DAY
    budget = iter([1.0, -1.0])  # time for one batch of deletes, then none (a run's Lambda time running out)
    assert not expiry.run(get_db(), retention.ExpiryTarget("ws1", "s1"), time_left=lambda: next(budget, -1.0))
    kinds = [m["kind"]["S"] for m in _items(aws, "WS#ws1#S#s1", "MSG#")]
    assert kinds == ["forgotten"] * BATCH_MAX + ["message"] * 3
    (running,) = _items(aws, "WS#ws1#S#s1", "EXPIRY#run")
    assert running["kind"]["S"] == "expiry" and "requested" in running
    streams.settle()  # its record wakes the deriver: the rest goes
    assert [m["kind"]["S"] for m in _items(aws, "WS#ws1#S#s1", "MSG#")] == ["forgotten"] * n
    assert _items(aws, "WS#ws1#S#s1", "EXPIRY#run") == []


def test_a_clone_expires_what_it_copied_in_its_own_partition(aws, clock, ttl):
    streams = TtlStreams(aws, ttl)
    assert call("POST", "/v3/workspaces", {"id": "ws1", "configuration": {"retention": {"days": 1}}}).status == 201
    post_messages("s1", ("alice", "I collect quokka stamps."), ("alice", "Quokkas again."))
    streams.settle()
    clone = call("POST", "/v3/workspaces/ws1/sessions/s1/clone")
    assert clone.status in (200, 201), clone.body
    streams.settle()
    pk = f"WS#ws1#S#{clone.body['id']}"
    assert [m["kind"]["S"] for m in _items(aws, pk, "MSG#")] == ["message", "message"]
    assert len(_items(aws, pk, "EXPIRY#")) == 1
    clock.now += 3 * DAY
    ttl.sweep()
    streams.settle()
    assert [m["kind"]["S"] for m in _items(aws, pk, "MSG#")] == ["forgotten", "forgotten"]
    assert [m["kind"]["S"] for m in _items(aws, "WS#ws1#S#s1", "MSG#")] == ["forgotten", "forgotten"]
