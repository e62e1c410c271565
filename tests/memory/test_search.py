"""Message search: indexed once by the post that stores the message, ranked lexically (reciprocal rank fusion with a
semantic ranking when an embedder is configured), within a workspace, a session or a peer's messages, with the list's
filters."""

from __future__ import annotations

import json

import pytest

from local import moto_vectors
from tests.handlers import call, dynamodb_requests, invoke
from tests.stream import message_records, stream_record

W = "/v3/workspaces/ws1"


def post(session: str, *messages: tuple[str, str], metadata: dict | None = None) -> list[dict]:
    reply = call(
        "POST",
        f"{W}/sessions/{session}/messages",
        {
            "messages": [
                {"peer_id": peer, "content": text, **({"metadata": metadata} if metadata else {})}
                for peer, text in messages
            ]
        },
    )
    assert reply.status == 201, reply.body
    return reply.body


def index(aws, session: str) -> None:
    assert invoke("DeriveFunction", {"Records": message_records(aws["dynamodb"], session_id=session)}) == {
        "batchItemFailures": []
    }


def search(path: str, query: str, **body) -> list[dict]:
    """The search's answer once the index holds every write (DynamoDB fills it asynchronously)."""
    moto_vectors.settle()
    reply = call("POST", path, {"query": query, **body})
    assert reply.status == 200, reply.body
    return reply.body


INDEX_PARTITIONS = ("#XF#", "#XG#", "#XM")  # the workspace index's: fresh units, segments, the manifest


def index_items(aws, kind: str = "xdoc") -> list[dict]:
    """The search index's items of `kind`: texts ("xdoc") or fresh units ("xfresh")."""
    items = aws["dynamodb"].scan(TableName="precis-local")["Items"]
    return [i for i in items if i.get("kind") == {"S": kind}]


@pytest.fixture
def ws(aws):
    assert call("POST", "/v3/workspaces", {"id": "ws1"}).status == 201
    post(
        "s1",
        ("bob", "Where are you living these days?"),
        ("alice", "I moved to Lisbon last spring."),
        ("bob", "The budget review moved to Thursday."),
    )
    post(
        "s2",
        ("alice", "My sister Ana visits Lisbon in May."),
        ("carol", "I bake bread on Sundays."),
        metadata={"topic": "family"},
    )
    index(aws, "s1")
    index(aws, "s2")
    return aws


def test_the_best_match_comes_first_across_the_workspace(ws):
    found = search(f"{W}/search", "Lisbon")
    assert found[0]["content"] in ("I moved to Lisbon last spring.", "My sister Ana visits Lisbon in May.")
    assert {m["content"] for m in found[:2]} == {
        "I moved to Lisbon last spring.",
        "My sister Ana visits Lisbon in May.",
    }
    assert set(found[0]) >= {"id", "content", "peer_id", "session_id", "workspace_id", "metadata", "created_at"}
    assert search(f"{W}/search", "bread")[0]["content"] == "I bake bread on Sundays."
    assert len(search(f"{W}/search", "Lisbon", limit=1)) == 1


def test_session_and_peer_routes_stay_within_their_messages(ws):
    assert {m["session_id"] for m in search(f"{W}/sessions/s1/search", "Lisbon")} == {"s1"}
    assert {m["peer_id"] for m in search(f"{W}/peers/alice/search", "moved")} == {"alice"}
    assert search(f"{W}/peers/carol/search", "Lisbon") == []  # a lexical ranking: no shared word, no match
    assert [m["peer_id"] for m in search(f"{W}/peers/carol/search", "baking bread")] == ["carol"]


def test_filters_use_the_message_lists_grammar(ws):
    found = search(f"{W}/search", "Lisbon", filters={"metadata": {"topic": "family"}})
    assert [m["content"] for m in found][:1] == ["My sister Ana visits Lisbon in May."]
    assert all(m["metadata"] == {"topic": "family"} for m in found)
    assert search(f"{W}/search", "Lisbon", filters={"peer_id": "nobody"}) == []


def index_writes(requests: list[tuple[str, dict]]) -> list[tuple[str, str]]:
    """The search index's items (partition, sort key) the recorded requests wrote, however written: texts, fresh
    units, segments, the manifest."""
    written = []
    for operation, params in requests:
        if operation == "BatchWriteItem":
            items = [r["PutRequest"]["Item"] for rs in params["RequestItems"].values() for r in rs if "PutRequest" in r]
        elif operation == "TransactWriteItems":
            items = [a.get("Put", {}).get("Item") or a.get("Update", {}).get("Key") for a in params["TransactItems"]]
        else:
            items = [params.get("Item") or params.get("Key")] if operation in ("PutItem", "UpdateItem") else []
        written += [
            (i["PK"]["S"], i["SK"]["S"])
            for i in items
            if i and (i["PK"]["S"].endswith("#XD") or any(p in i["PK"]["S"] for p in INDEX_PARTITIONS))
        ]
    return written


def test_each_message_is_indexed_once_by_its_post_and_replays_and_edits_write_nothing(ws):
    from precis.store import keys

    partition = keys.text_docs_pk("ws1", "s1")
    assert sorted(v["SK"]["S"] for v in index_items(ws) if v["PK"]["S"] == partition) == [
        f"{seq:012d}" for seq in (1, 2, 3)
    ]  # the fixture's posts wrote each of s1's texts
    with dynamodb_requests() as replay:
        index(ws, "s1")  # the deriver's delivery, again: nothing of the index left to write
    with dynamodb_requests() as grown:
        (new,) = post("s1", ("alice", "I take the tram to work."))  # the post indexes it before answering
    with dynamodb_requests() as delivered:
        index(ws, "s1")  # the deriver then gets the batch with the new message: nothing left to write
    message = search(f"{W}/sessions/s1/search", "Lisbon")[0]
    assert call("PUT", f"{W}/sessions/s1/messages/{message['id']}", {"metadata": {"x": 1}}).status == 200
    items = ws["dynamodb"].scan(TableName="precis-local")["Items"]
    edited = [i for i in items if i.get("kind") == {"S": "message"} and i["id"]["S"] == message["id"]][0]
    assert json.loads(edited["metadata"]["S"]) == {"x": 1}  # the stream's MODIFY image carries the edit
    with dynamodb_requests() as edit:
        assert invoke("DeriveFunction", {"Records": [stream_record(edited, "MODIFY")]}) == {"batchItemFailures": []}
    assert index_writes(replay) == [] and index_writes(delivered) == [] and index_writes(edit) == []
    from precis.store import text_index

    unit = next(m for m in ws["dynamodb"].scan(TableName="precis-local")["Items"] if m.get("id") == {"S": new["id"]})
    # The new message's text, and its batch's one fresh item in its session's shard: nothing else of the index
    # (no item per word, no workspace-wide item).
    assert sorted(index_writes(grown)) == sorted(
        [(partition, f"{4:012d}"), (keys.text_fresh_pk("ws1", text_index.shard_of("s1")), f"{unit['ib']['S']}#000")]
    )


def test_the_context_read_never_touches_the_search_index_without_a_query(ws):
    """The plain context reads no search item; with a search query kept to its session it reads the session's texts
    (to recall), and never the workspace index (manifest, fresh units, segments) or the message vectors; reaching the
    peer's other sessions, it reads the workspace index instead of any session's texts."""
    from precis.store import keys

    texts = keys.text_docs_pk("ws1", "s1")
    assert len([v for v in index_items(ws) if v["PK"]["S"] == texts]) == 3  # there are texts to touch
    assert call("POST", f"{W}/sessions", {"id": "s2", "peers": {"alice": {}}}).status < 300  # alice has another session
    with dynamodb_requests() as plain:
        reply = call("GET", f"{W}/sessions/s1/context")
    assert reply.status == 200 and [m["content"] for m in reply.body["messages"]][1] == "I moved to Lisbon last spring."
    with dynamodb_requests() as searched:  # the representation's conclusions, and the recalled messages
        reply = call(
            "GET", f"{W}/sessions/s1/context", peer_target="alice", search_query="Lisbon", limit_to_session="true"
        )
    assert reply.status == 200 and reply.body["messages"], reply.body
    with dynamodb_requests() as reaching:
        reply = call("GET", f"{W}/sessions/s1/context", peer_target="alice", search_query="Lisbon")
    assert reply.status == 200 and reply.body["messages"], reply.body
    for requests in (plain, searched, reaching):
        assert any(op == "Query" for op, _ in requests)  # the recording saw the read
        text = [json.dumps(params) for _, params in requests]
        assert not [t for t in text if keys.message_vectors_pk("ws1", "s1") in t], text
        if requests is not reaching:
            assert not [t for t in text if any(p in t for p in INDEX_PARTITIONS)], text
    assert not [p for _, p in plain if texts in json.dumps(p)]
    assert [op for op, p in searched if texts in json.dumps(p)] == ["Query"]
    assert not [p for _, p in reaching if texts in json.dumps(p)]
    assert [p for _, p in reaching if keys.text_manifest("ws1")["PK"] in json.dumps(p)]
    assert [p for _, p in reaching if keys.text_fresh_pk("ws1", 0) in json.dumps(p)]


def test_deleting_a_session_takes_it_out_of_the_index(ws):
    from precis.store import keys

    assert call("DELETE", f"{W}/sessions/s1").status == 202
    session_item = ws["dynamodb"].get_item(
        TableName="precis-local", Key={"PK": {"S": "WS#ws1"}, "SK": {"S": "SESSION#s1"}}
    )["Item"]
    assert invoke("SummarizeFunction", {"Records": [stream_record(session_item, "MODIFY")]}) == {
        "batchItemFailures": []
    }
    assert {keys.parse_session_pk(v["PK"]["S"].removesuffix("#XD"))[1] for v in index_items(ws)} == {"s2"}
    assert {p["s"]["S"] for p in index_items(ws, "xfresh")} == {"s2"}  # its fresh unit is gone, s2's stays
    assert {m["session_id"] for m in search(f"{W}/search", "Lisbon")} == {"s2"}
    assert search(f"{W}/peers/bob/search", "budget") == []


@pytest.mark.parametrize(
    "path, body, status",
    [
        (f"{W}/search", {}, 422),
        (f"{W}/search", {"query": ""}, 422),
        (f"{W}/search", {"query": "x", "limit": 0}, 422),
        (f"{W}/search", {"query": "x", "limit": 101}, 422),
        (f"{W}/search", {"query": "x", "filters": []}, 422),
        (f"{W}/search", {"query": "x", "surprise": 1}, 422),
        ("/v3/workspaces/nope/search", {"query": "x"}, 404),
        (f"{W}/sessions/nope/search", {"query": "x"}, 404),
        (f"{W}/peers/nobody/search", {"query": "x"}, 404),
        (f"{W}/peers/bad%20id/search", {"query": "x"}, 422),
    ],
)
def test_search_bad_inputs(ws, path, body, status):
    reply = call("POST", path, body)
    assert reply.status == status, reply.body
    assert reply.body["detail"]


@pytest.mark.parametrize("limit", [50, 100])
@pytest.mark.parametrize("filters", [None, {"peer_id": "alice"}, {"metadata": {"topic": "family"}}])
@pytest.mark.parametrize("route", ["/search", "/sessions/s2/search", "/peers/alice/search"])
def test_a_search_of_up_to_100_results_answers_every_match(ws, route, limit, filters):
    """A search of 50 or 100 results, filtered (4 candidates a result wanted) or not, answers 200 with every message
    in scope that says the word and passes the filters."""
    found = search(f"{W}{route}", "Lisbon", limit=limit, **({"filters": filters} if filters else {}))
    expected = {"I moved to Lisbon last spring.", "My sister Ana visits Lisbon in May."}
    if route.startswith("/sessions/s2") or filters == {"metadata": {"topic": "family"}}:
        expected = {"My sister Ana visits Lisbon in May."}
    assert {m["content"] for m in found} == expected, found


def _rebuild_index(dynamodb, name: str) -> None:
    """Drop the table's vector index `name` and create it again: on a table with items, it backfills."""
    (index,) = [
        i for i in dynamodb.describe_table(TableName="precis-local")["Table"]["VectorIndexes"] if i["IndexName"] == name
    ]
    dynamodb.update_table(TableName="precis-local", VectorIndexUpdates=[{"Delete": {"IndexName": name}}])
    dynamodb.update_table(
        TableName="precis-local",
        VectorIndexUpdates=[
            {
                "Create": {
                    k: index[k]
                    for k in (
                        "IndexName",
                        "VectorAttribute",
                        "Dimensions",
                        "DistanceFunction",
                        "Projection",
                        "SearchSchema",
                    )
                }
            }
        ],
    )


def test_a_search_while_its_index_backfills_is_a_503_to_retry_and_message_search_never_waits(ws):
    from precis.store.vectors import VECTOR_INDEX

    _rebuild_index(ws["dynamodb"], VECTOR_INDEX)
    # (DescribeTable: CREATING)
    assert ws["dynamodb"].describe_table(TableName="precis-local")["Table"]["VectorIndexes"]
    for method, path, body in (
        ("GET", f"{W}/sessions/s1/context?search_query=Lisbon&peer_target=alice", None),
        (
            "POST",
            f"{W}/conclusions/query",
            {"query": "Lisbon", "filters": {"observer_id": "alice", "observed_id": "alice"}},
        ),
    ):
        reply = call(method, path, body)
        assert reply.status == 503, (path, reply.status, reply.body)
        assert "still being built" in reply.body["detail"] and int(reply.headers["Retry-After"]) > 0, reply
    # Message search reads the table itself (its postings), not a vector index: no wait.
    assert call("POST", f"{W}/search", {"query": "Lisbon"}).status == 200
    moto_vectors.advance(moto_vectors.DEFAULT_BACKFILL_S)
    assert search(f"{W}/search", "Lisbon")[0]["content"] == "I moved to Lisbon last spring."
