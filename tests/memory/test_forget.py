"""Deleting one message (docs/design.md, "Deleting a message") through the real handlers on moto: what the route makes
invisible at once, and what the stream's cascade removes."""

from __future__ import annotations

import pytest

from precis.stream import DERIVER, SUMMARIZER, job_of
from tests.handlers import call, invoke, post_messages
from tests.stream import stream_record

W = "/v3/workspaces/ws1"
S = f"{W}/sessions/s1"
TABLE = "precis-local"


class Streams:
    """The table's stream read from where it stands, each record handed to the consumers whose filters take it, as
    Lambda's event source mappings do; `settle` runs them until nothing new comes."""

    def __init__(self, aws):
        self.streams, self.dynamodb = aws["dynamodbstreams"], aws["dynamodb"]
        arn = self.dynamodb.describe_table(TableName=TABLE)["Table"]["LatestStreamArn"]
        shards = self.streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]
        self.iterators = [
            self.streams.get_shard_iterator(StreamArn=arn, ShardId=s["ShardId"], ShardIteratorType="TRIM_HORIZON")[
                "ShardIterator"
            ]
            for s in shards
        ]

    def read(self) -> list[dict]:
        records = []
        for i, iterator in enumerate(self.iterators):
            while True:
                page = self.streams.get_records(ShardIterator=iterator, Limit=1000)
                iterator = page["NextShardIterator"]
                records += page["Records"]
                if not page["Records"]:
                    break
            self.iterators[i] = iterator
        return records

    def settle(self, rounds: int = 60, *, before=lambda function, event: None) -> None:
        for _ in range(rounds):
            records = self.read()
            if not records:
                return
            for consumer, function in ((SUMMARIZER, "SummarizeFunction"), (DERIVER, "DeriveFunction")):
                chosen = [
                    stream_record(r["dynamodb"]["NewImage"], r["eventName"])
                    for r in records
                    if "NewImage" in r["dynamodb"]
                    and job_of(consumer, r["eventName"], _plain(r["dynamodb"]["NewImage"])) is not None
                ]
                if chosen:
                    event = {"Records": chosen}
                    before(function, event)
                    answer = invoke(function, event)
                    assert answer == {"batchItemFailures": []}, (function, answer)
        raise AssertionError("the stream did not settle")


def _plain(image: dict) -> dict:
    from precis.store.db import from_item

    return from_item(image)


def post(*messages: tuple[str, str]) -> list[dict]:
    return post_messages("s1", *messages)


def conclusions(**filters) -> list[dict]:
    reply = call("POST", f"{W}/conclusions/list?size=100", {"filters": filters} if filters else None)
    assert reply.status == 200, reply.body
    return reply.body["items"]


def messages() -> dict:
    reply = call("POST", f"{S}/messages/list?size=100")
    assert reply.status == 200, reply.body
    return reply.body


@pytest.fixture
def ws(aws):
    assert call("POST", "/v3/workspaces", {"id": "ws1"}).status == 201
    assert call("POST", f"{W}/sessions", {"id": "s1", "peers": {"alice": {}, "bob": {"observe_others": True}}}).status
    return aws


def test_a_deleted_message_and_what_was_drawn_from_it_are_gone_at_once_and_then_for_good(ws):
    streams = Streams(ws)
    posted = post(
        ("alice", "I moved to Lisbon last spring."),
        ("bob", "I play the cello."),
        ("alice", "My sister is Ana."),
    )
    streams.settle()
    assert {c["content"] for c in conclusions(observer_id="alice", observed_id="alice")} == {
        "alice moved to Lisbon last spring",
        "alice's sister is Ana",
    }
    assert call("DELETE", f"{S}/messages/{posted[0]['id']}").status == 204
    # At once: the message, its conclusions (in every collection), its place in search.
    assert call("GET", f"{S}/messages/{posted[0]['id']}").status == 404
    listed = messages()
    assert [m["id"] for m in listed["items"]] == [posted[1]["id"], posted[2]["id"]]
    assert listed["total"] == 2
    assert all("Lisbon" not in c["content"] for c in conclusions())
    found = call("POST", f"{W}/search", {"query": "Lisbon spring"})
    assert found.status == 200 and found.body == []
    context = call("GET", f"{S}/context?tokens=1000").body
    assert [m["id"] for m in context["messages"]] == [posted[1]["id"], posted[2]["id"]]
    assert context["token_count"] == posted[1]["token_count"] + posted[2]["token_count"]
    # Then the cascade.
    streams.settle()
    assert all("Lisbon" not in c["content"] for c in conclusions())
    assert {c["content"] for c in conclusions(observer_id="alice", observed_id="alice")} == {"alice's sister is Ana"}
    assert call("DELETE", f"{S}/messages/{posted[0]['id']}").status == 404
    assert messages()["total"] == 2
