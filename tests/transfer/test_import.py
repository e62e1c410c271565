"""Export → import into a new workspace, compared answer by answer through the API (ids, timestamps, metadata,
counts, contexts, summaries, conclusions, cards, search); an import interrupted and resumed; bad uploads refused."""

from __future__ import annotations

import json

import requests

from local.template import template
from tests.handlers import call, invoke
from tests.stream import message_records, stream_record
from tests.transfer.workspace import PEERS, W, build, job_item, run_job


def export_of(aws, ws: str) -> bytes:
    job = call("POST", f"{W}/{ws}/exports").body["id"]
    run_job(aws, ws, job)
    return b"".join(requests.get(u, timeout=10).content for u in call("GET", f"{W}/{ws}/exports/{job}").body["urls"])


def upload(ws: str, data: bytes) -> str:
    target = call("POST", f"{W}/{ws}/imports/uploads")
    assert target.status == 201, target.body
    assert requests.put(target.body["url"], data=data, timeout=10).status_code == 200
    return target.body["upload_id"]


def import_into(aws, ws: str, data: bytes) -> dict:
    assert call("POST", W, {"id": ws}).status == 201
    started = call("POST", f"{W}/{ws}/imports", {"upload_id": upload(ws, data)})
    assert started.status == 202, started.body
    run_job(aws, ws, started.body["id"])
    return call("GET", f"{W}/{ws}/imports/{started.body['id']}").body


def pages(path: str, size: int = 100, **query) -> list:
    items, page = [], 1
    while True:
        reply = call("POST", path, None, page=page, size=size, **query)
        assert reply.status == 200, reply.body
        items += reply.body["items"]
        if page >= reply.body["pages"]:
            return items
        page += 1


def get(path: str, **query):
    reply = call("GET", path, None, **query)
    assert reply.status == 200, (path, reply.body)
    return reply.body


def answers(ws: str, other: str) -> dict:
    """Every answer the API gives about the workspace, its id written as `other`'s (so two can be compared)."""
    w = f"{W}/{ws}"
    out: dict = {"workspace": call("POST", W, {"id": ws}).body}
    out["peers"] = pages(f"{w}/peers/list")
    out["sessions"] = sessions = pages(f"{w}/sessions/list")
    for session in (s["id"] for s in sessions):
        s = f"{w}/sessions/{session}"
        out[f"{session} peers"] = get(f"{s}/peers")
        for peer in PEERS:
            out[f"{session} {peer} config"] = get(f"{s}/peers/{peer}/config")
        out[f"{session} messages"] = pages(f"{s}/messages/list")
        out[f"{session} context"] = get(f"{s}/context")
        out[f"{session} context 300"] = get(f"{s}/context", tokens=300, summary="true")
        out[f"{session} summaries"] = get(f"{s}/summaries")
        out[f"{session} search"] = call("POST", f"{s}/search", {"query": "harbour dawn", "limit": 10}).body
    out["conclusions"] = conclusions = pages(f"{w}/conclusions/list")
    for conclusion in conclusions[:5]:
        out[f"conclusion {conclusion['id']}"] = get(f"{w}/conclusions/{conclusion['id']}")
    out["query"] = call("POST", f"{w}/conclusions/query", {"query": "lighthouse", "top_k": 5}).body
    for observer in PEERS:
        for observed in PEERS:
            out[f"card {observer} {observed}"] = get(f"{w}/peers/{observer}/card", target=observed)
    out["search"] = call("POST", f"{w}/search", {"query": "lighthouse number 5", "limit": 20}).body
    out["queue"] = get(f"{w}/queue/status")
    return json.loads(json.dumps(out).replace(f'"{ws}"', f'"{other}"'))


def settle(aws, ws: str, sessions: list[str], derived: int | None = None) -> None:
    """The stream's consumers over every message stored: summaries written, search merged, and conclusions derived
    from the first `derived` sessions (all when None: the extractive deriver takes seconds for a thousand)."""
    for number, session in enumerate(sessions):
        # (a deleted message's tombstone reaches no consumer once its cascade is done, nor a clone's copy: no stream
        # filter takes them)
        records = [r for r in message_records(aws["dynamodb"], ws, session) if _woken(r)]
        for start in range(0, len(records), 1000):
            batch = {"Records": records[start : start + 1000]}
            assert invoke("SummarizeFunction", batch) == {"batchItemFailures": []}
            if derived is None or number < derived:
                assert invoke("DeriveFunction", batch) == {"batchItemFailures": []}


def _woken(record: dict) -> bool:
    image = record["dynamodb"]["NewImage"]
    return image["kind"]["S"] == "message" and "copy_of" not in image


def test_an_imported_workspace_answers_exactly_as_the_exported_one(aws):
    from precis.settings import get_settings

    sessions = build(aws, "src", sessions=3, messages=40)
    # A body past the inline limit lives in S3: it is read into the export and stored in S3 again by the import.
    large = "I keep a very long logbook. " * (get_settings().inline_body_max_bytes // 20)
    posted = call(
        "POST", f"{W}/src/sessions/{sessions[1]}/messages", {"messages": [{"peer_id": "bob", "content": large}]}
    )
    assert posted.status == 201, posted.body
    settle(aws, "src", sessions)
    before = answers("src", "dst")
    assert any(before[f"{s} summaries"].get("short_summary") for s in sessions), "the source has summaries"
    assert len(before["conclusions"]) > 4, "and derived conclusions"

    status = import_into(aws, "dst", export_of(aws, "src"))
    assert status["status"] == "done", status
    assert status["counts"]["message"] == 121
    bodies = aws["s3"].list_objects_v2(Bucket=template().bucket_name, Prefix="bodies/dst/")
    assert bodies.get("KeyCount") == 1
    # The stream's consumers woken by the imported messages derive and summarize nothing again.
    settle(aws, "dst", sessions)
    after = answers("dst", "dst")
    for key in before:
        assert after[key] == before[key], key
    assert answers("src", "dst") == before  # the source is untouched


def test_six_thousand_messages_round_trip_in_many_steps(aws, monkeypatch):
    from precis.transfer import importer

    monkeypatch.setattr(importer, "RANGE_BYTES", 200_000)  # an import of several steps, as a large one is
    sessions = build(aws, "src", sessions=6, messages=1000)
    settle(aws, "src", sessions, derived=2)
    before = answers("src", "dst")
    data = export_of(aws, "src")
    status = import_into(aws, "dst", data)
    assert status["status"] == "done" and status["steps"] > 5, status
    assert status["counts"]["message"] == 6000
    settle(aws, "dst", sessions, derived=2)
    after = answers("dst", "dst")
    for key in before:
        assert after[key] == before[key], key


def test_an_interrupted_import_resumes_and_writes_nothing_twice(aws, monkeypatch):
    from precis.store.db import get_db
    from precis.transfer import importer

    monkeypatch.setattr(importer, "RANGE_BYTES", 5_000)
    monkeypatch.setattr(importer, "MESSAGES_PER_WRITE", 5)  # a step of several writes, interrupted between two
    sessions = build(aws, "src", sessions=2, messages=60, batch=20)
    settle(aws, "src", sessions)
    before = answers("src", "dst")
    data = export_of(aws, "src")
    assert call("POST", W, {"id": "dst"}).status == 201
    job = call("POST", f"{W}/dst/imports", {"upload_id": upload("dst", data)}).body["id"]
    writes: list[int] = []

    def fail_fourth_batch(params, **_):
        puts = [a["Put"]["Item"] for a in params["TransactItems"] if "Put" in a]
        if puts and all(p.get("kind", {}).get("S") == "message" for p in puts):
            writes.append(len(puts))
            if len(writes) == 7:
                raise ConnectionError("the network went away mid-import")

    client = get_db().client
    client.meta.events.register("provide-client-params.dynamodb.TransactWriteItems", fail_fourth_batch)
    try:
        record = stream_record(job_item(aws, "dst", job), "INSERT")
        assert invoke("SummarizeFunction", {"Records": [record]})["batchItemFailures"]
        stopped = call("GET", f"{W}/dst/imports/{job}").body
        assert stopped["status"] == "running", stopped
        # The failed step had stored some of its messages: its run again meets them.
        listed = pages(f"{W}/dst/sessions/list")
        stored = sum(len(pages(f"{W}/dst/sessions/{s['id']}/messages/list")) for s in listed)
        assert 0 < stopped["counts"].get("message", 0) < stored < 120, (stopped, stored)
        # The stream delivers the failed record again: the step it names runs again from its start.
        run_job(aws, "dst", job)
    finally:
        client.meta.events.unregister("provide-client-params.dynamodb.TransactWriteItems", fail_fourth_batch)
    assert call("GET", f"{W}/dst/imports/{job}").body["status"] == "done"
    assert sum(writes[:6]) + sum(writes[7:]) == 120  # each message stored once: the failed batch stored nothing
    settle(aws, "dst", sessions)
    after = answers("dst", "dst")
    for key in before:
        assert after[key] == before[key], key


def test_an_import_goes_only_into_an_empty_workspace_and_reads_only_an_export(aws):
    build(aws, "src", sessions=1, messages=3)
    data = export_of(aws, "src")
    # Not empty: refused before anything runs.
    occupied = call("POST", f"{W}/src/imports", {"upload_id": upload("src", data)})
    assert occupied.status == 409 and "empty" in occupied.body["detail"]
    # Nothing uploaded under that id.
    assert call("POST", W, {"id": "dst"}).status == 201
    missing = call("POST", f"{W}/dst/imports", {"upload_id": "0123456789abcdef"})
    assert missing.status == 404 and "upload" in missing.body["detail"]

    lines = data.decode().splitlines(keepends=True)
    parsed = [json.loads(line) for line in lines]
    first, second = (n for n, line in enumerate(parsed) if line["kind"] == "message" and line["seq"] in (1, 2))
    misplaced = [*lines]
    misplaced[first] = json.dumps({**parsed[first], "id": parsed[second]["id"]}) + "\n"
    end = parsed[-1] | {"counts": parsed[-1]["counts"] | {"message": parsed[-1]["counts"]["message"] - 1}}
    gap = [*lines[:second], *lines[second + 1 : -1], json.dumps(end) + "\n"]
    cases = {
        "not an export": (b'{"kind": "peer", "id": "x", "created_at": "2026-01-01T00:00:00+00:00"}\n', "line 1"),
        "not JSON": (lines[0].encode() + b"{oops\n", "line 2: not JSON"),
        "truncated": ("".join(lines[:-1]).encode(), "truncated"),
        "counts differ": ("".join(lines[:-2] + lines[-1:]).encode(), "the file says it holds"),
        "newer version": (lines[0].replace('"version":1', '"version":2').encode(), "version 2"),
        "an id not its seq's": ("".join(misplaced).encode(), "is not the id of a message at seq 1"),
        "a gap in a session": ("".join(gap).encode(), "does not follow seq 1"),
    }
    for number, (name, (body, error)) in enumerate(cases.items()):
        ws = f"bad{number}"
        assert call("POST", W, {"id": ws}).status == 201
        started = call("POST", f"{W}/{ws}/imports", {"upload_id": upload(ws, body)})
        assert started.status == 202, (name, started.body)
        run_job(aws, ws, started.body["id"])
        failed = call("GET", f"{W}/{ws}/imports/{started.body['id']}").body
        assert failed["status"] == "failed" and error in failed["error"], (name, failed)


def test_an_export_imports_in_place_for_a_key_that_reaches_both_workspaces(aws, monkeypatch):
    from precis.auth import mint_key
    from precis.transfer import export

    monkeypatch.setattr(export, "PART_LINES", 9)  # several parts, read one after another
    sessions = build(aws, "src", sessions=2, messages=20)
    settle(aws, "src", sessions)
    before = answers("src", "dst")
    job = call("POST", f"{W}/src/exports").body["id"]
    run_job(aws, "src", job)
    assert call("GET", f"{W}/src/exports/{job}").body["parts"] > 3
    assert call("POST", W, {"id": "dst"}).status == 201
    source = {"export": {"workspace_id": "src", "export_id": job}}

    secret = "transfer-test-secret-0123456789abcdef"
    monkeypatch.setenv("PRECIS_AUTH", "true")
    monkeypatch.setenv("PRECIS_JWT_SECRET", secret)
    from precis.settings import get_settings

    get_settings.cache_clear()
    dst_key = {"Authorization": f"Bearer {mint_key(secret, workspace='dst')}"}
    refused = call("POST", f"{W}/dst/imports", source, headers=dst_key)
    assert refused.status == 403, refused.body  # the export is another workspace's data
    admin = {"Authorization": f"Bearer {mint_key(secret, admin=True)}"}
    started = call("POST", f"{W}/dst/imports", source, headers=admin)
    assert started.status == 202, started.body
    monkeypatch.delenv("PRECIS_AUTH")
    get_settings.cache_clear()

    run_job(aws, "dst", started.body["id"])
    assert call("GET", f"{W}/dst/imports/{started.body['id']}").body["status"] == "done"
    settle(aws, "dst", sessions)
    after = answers("dst", "dst")
    for key in before:
        assert after[key] == before[key], key


def forget(aws, ws: str, session: str, message_id: str) -> None:
    """Delete a message and run its cascade to the end, as the stream delivers the tombstone's records."""
    assert call("DELETE", f"{W}/{ws}/sessions/{session}/messages/{message_id}").status == 204
    key = {"PK": {"S": f"WS#{ws}#S#{session}"}}
    for _ in range(50):
        found = aws["dynamodb"].query(
            TableName="precis-local",
            KeyConditionExpression="PK = :p AND begins_with(SK, :m)",
            FilterExpression="kind = :f AND attribute_exists(running)",
            ExpressionAttributeValues={":p": key["PK"], ":m": {"S": "MSG#"}, ":f": {"S": "forgotten"}},
            ConsistentRead=True,
        )["Items"]
        if not found:
            return
        answer = invoke("SummarizeFunction", {"Records": [stream_record(found[0], "MODIFY")]})
        assert answer == {"batchItemFailures": []}, answer
    raise AssertionError(f"the cascade of {message_id} did not finish")


def test_a_workspace_with_deleted_messages_round_trips_with_their_places(aws):
    """A deleted message leaves its place (seq, tokens, run) in the export, never its id or text; the import writes
    the same finished tombstone, so ids, offsets, totals and contexts answer as in the source."""
    sessions = build(aws, "src", sessions=2, messages=40)
    settle(aws, "src", sessions)
    listed = pages(f"{W}/src/sessions/{sessions[0]}/messages/list")
    tail = pages(f"{W}/src/sessions/{sessions[1]}/messages/list")[-1]
    from precis.store.conclusions import message_conclusions
    from precis.store.db import get_db

    drawn = {i for ids in message_conclusions(get_db(), "src", sessions[0], [listed[4]["id"]]).values() for i in ids}
    assert drawn, "conclusions were drawn from the message"
    forget(aws, "src", sessions[0], listed[4]["id"])  # one with conclusions drawn from it: a cascade that removes
    forget(aws, "src", sessions[0], listed[5]["id"])
    forget(aws, "src", sessions[1], tail["id"])  # the newest: the session's tail is a tombstone
    settle(aws, "src", sessions)
    before = answers("src", "dst")
    assert before[f"{sessions[0]} messages"][4]["id"] == listed[6]["id"]
    assert not [c for c in before["conclusions"] if c["id"] in drawn]

    data = export_of(aws, "src")
    places = [json.loads(line) for line in data.decode().splitlines() if '"kind":"forgotten"' in line]
    assert [(p["session_id"], p["seq"]) for p in places] == [(sessions[0], 5), (sessions[0], 6), (sessions[1], 40)]
    text = data.decode()
    for gone in (listed[4], listed[5], tail):
        assert gone["id"] not in text and gone["content"] not in text
    status = import_into(aws, "dst", data)
    assert status["status"] == "done", status
    assert status["counts"]["forgotten"] == 3 and status["counts"]["message"] == 77
    settle(aws, "dst", sessions)
    after = answers("dst", "dst")
    for key in before:
        assert after[key] == before[key], key

    def totals(ws: str) -> list[int]:
        return [call("POST", f"{W}/{ws}/sessions/{s}/messages/list").body["total"] for s in sessions]

    assert totals("dst") == totals("src") == [38, 39]
    # Appending goes on from the same seq in both (a message's id encodes its seq).
    from precis.store.messages import seq_of

    appended = [
        call("POST", f"{W}/{ws}/sessions/{sessions[1]}/messages", {"messages": [{"peer_id": "bob", "content": "x"}]})
        for ws in ("src", "dst")
    ]
    assert [seq_of(a.body[0]["id"]) for a in appended] == [41, 41], [a.body for a in appended]


def test_an_import_of_an_export_whose_parts_are_gone_fails_saying_so(aws):
    """An export withdrawn (a message deleted after it began) or expired while an import reads it in place."""
    build(aws, "src", sessions=1, messages=3)
    job = call("POST", f"{W}/src/exports").body["id"]
    run_job(aws, "src", job)
    assert call("POST", W, {"id": "dst"}).status == 201
    started = call("POST", f"{W}/dst/imports", {"export": {"workspace_id": "src", "export_id": job}})
    assert started.status == 202, started.body
    aws["s3"].delete_object(Bucket=template().bucket_name, Key=f"exports/src/{job}/part-00001.jsonl")
    run_job(aws, "dst", started.body["id"])
    failed = call("GET", f"{W}/dst/imports/{started.body['id']}").body
    assert failed["status"] == "failed" and "gone" in failed["error"], failed


def test_a_clone_s_inherited_deleted_message_round_trips_uncounted(aws):
    """A clone's total counts the deleted messages it inherited (docs/design.md, "The gap"); its import does too."""
    sessions = build(aws, "src", sessions=1, messages=10)
    listed = pages(f"{W}/src/sessions/{sessions[0]}/messages/list")
    forget(aws, "src", sessions[0], listed[2]["id"])
    cloned = call("POST", f"{W}/src/sessions/{sessions[0]}/clone")
    assert cloned.status == 201, cloned.body
    key = {"PK": {"S": "WS#src"}, "SK": {"S": f"SESSION#{cloned.body['id']}"}}
    for _ in range(20):  # the clone's copy, as the stream runs it
        item = aws["dynamodb"].get_item(TableName="precis-local", Key=key, ConsistentRead=True)["Item"]
        if "base_session" not in item:
            break
        assert invoke("SummarizeFunction", {"Records": [stream_record(item, "MODIFY")]}) == {"batchItemFailures": []}
    forget(aws, "src", cloned.body["id"], listed[5]["id"])  # the clone's own delete (of a message it inherited)
    everything = [*sessions, cloned.body["id"]]
    settle(aws, "src", everything)
    before = answers("src", "dst")
    totals = {s: call("POST", f"{W}/src/sessions/{s}/messages/list").body["total"] for s in everything}
    assert totals == {sessions[0]: 9, cloned.body["id"]: 9}  # the parent's 10 less 1; the clone's 10 less its own 1
    data = export_of(aws, "src")
    places = [json.loads(line) for line in data.decode().splitlines() if '"kind":"forgotten"' in line]
    assert sorted((p["session_id"], p["seq"], p["counted"]) for p in places) == sorted(
        [(sessions[0], 3, True), (cloned.body["id"], 3, False), (cloned.body["id"], 6, True)]
    )
    assert import_into(aws, "dst", data)["status"] == "done"
    settle(aws, "dst", everything)
    after = answers("dst", "dst")
    for key in before:
        assert after[key] == before[key], key
    assert {s: call("POST", f"{W}/dst/sessions/{s}/messages/list").body["total"] for s in everything} == totals
    # Exported again, the import's places say the same.
    again = [json.loads(line) for line in export_of(aws, "dst").decode().splitlines() if '"kind":"forgotten"' in line]
    assert [(p["session_id"], p["seq"], p["counted"]) for p in again] == [
        (p["session_id"], p["seq"], p["counted"]) for p in places
    ]
