"""A workspace's export: a job on the table's stream writing JSON Lines parts, its status and presigned URLs, and a
job interrupted mid-way (a part's write failing at botocore's seam) that resumes to the same output."""

from __future__ import annotations

import json

import pytest
import requests

from local.template import template
from tests.handlers import call, invoke
from tests.stream import stream_record
from tests.transfer.workspace import W, build, export_lines, job_item, run_job

pytestmark = pytest.mark.usefixtures("aws")


def test_an_export_runs_in_parts_and_hands_out_its_urls(aws, monkeypatch):
    from precis.transfer import export

    monkeypatch.setattr(export, "PART_LINES", 7)  # several parts from a small workspace
    build(aws, "src", sessions=3, messages=9)
    started = call("POST", f"{W}/src/exports")
    assert started.status == 202, started.body
    assert started.body["status"] == "running" and started.body["counts"] == {}
    job = started.body["id"]
    assert call("GET", f"{W}/src/exports/{job}").body["status"] == "running"

    run_job(aws, "src", job)

    done = call("GET", f"{W}/src/exports/{job}")
    assert done.status == 200, done.body
    body = done.body
    assert body["status"] == "done"
    assert body["counts"] == {"peer": 3, "session": 3, "message": 27, "collection": 2, "conclusion": 4}
    assert len(body["urls"]) == body["parts"] > 1
    fetched = b"".join(requests.get(url, timeout=10).content for url in body["urls"])
    lines = [json.loads(line) for line in fetched.decode().splitlines()]
    assert lines == export_lines(aws, "src", job)
    assert lines[0]["kind"] == "precis_export" and lines[0]["version"] == 1
    assert lines[0]["workspace"]["metadata"] == {"team": "blue"}
    assert lines[-1] == {"kind": "end", "counts": body["counts"]}
    kinds = [line["kind"] for line in lines]
    # Peers, then each session followed by its messages, then each collection followed by its conclusions.
    assert kinds[1:4] == ["peer"] * 3
    assert kinds[4:14] == ["session"] + ["message"] * 9
    session = lines[4]
    assert session["last_seq"] == 9 and {m["peer_id"] for m in session["members"]} == {"alice", "bob", "carol"}
    messages = [line for line in lines if line["kind"] == "message" and line["session_id"] == session["id"]]
    assert [m["seq"] for m in messages] == list(range(1, 10))
    stored = call("POST", f"{W}/src/sessions/{session['id']}/messages/list", None, size=100).body["items"]
    assert [{k: m[k] for k in ("id", "content", "metadata", "created_at", "peer_id")} for m in stored] == [
        {k: m[k] for k in ("id", "content", "metadata", "created_at", "peer_id")} for m in messages
    ]


def test_deleted_sessions_are_passed_over_within_a_steps_budget(aws, monkeypatch):
    from precis.transfer import export

    monkeypatch.setattr(export, "PART_LINES", 2)  # a step passing two deleted sessions writes nothing
    sessions = build(aws, "src", sessions=5, messages=1)
    for session in sessions[:4]:
        assert call("DELETE", f"{W}/src/sessions/{session}").status in (200, 202, 204)
    job = call("POST", f"{W}/src/exports").body["id"]
    run_job(aws, "src", job)
    done = call("GET", f"{W}/src/exports/{job}").body
    assert done["status"] == "done" and done["counts"]["session"] == 1
    assert [line["id"] for line in export_lines(aws, "src", job) if line["kind"] == "session"] == [sessions[4]]
    assert done["steps"] > done["parts"]  # steps that only passed deleted sessions wrote no part


def test_an_export_record_delivered_again_writes_nothing_twice(aws):
    build(aws, "src", sessions=1, messages=3)
    job = call("POST", f"{W}/src/exports").body["id"]
    first = job_item(aws, "src", job)
    run_job(aws, "src", job)
    before = _parts(aws, "src", job)
    # The insert's record again (a replay): the job is past it, so nothing runs and nothing is written.
    assert invoke("SummarizeFunction", {"Records": [stream_record(first, "INSERT")]}) == {"batchItemFailures": []}
    assert _parts(aws, "src", job) == before


def test_an_interrupted_export_resumes_where_it_stopped_with_the_same_output(aws, monkeypatch):
    from precis.store.db import get_db
    from precis.transfer import export

    monkeypatch.setattr(export, "PART_LINES", 5)
    build(aws, "src", sessions=2, messages=8)
    reference = call("POST", f"{W}/src/exports").body["id"]
    run_job(aws, "src", reference)
    expected = export_lines(aws, "src", reference)

    job = call("POST", f"{W}/src/exports").body["id"]
    puts: list[str] = []

    def fail_third_part(params, **_):
        if params["Key"].startswith(f"exports/src/{job}/"):
            puts.append(params["Key"])
            if len(puts) == 3:
                raise ConnectionError("the network went away mid-export")

    s3 = get_db().s3
    s3.meta.events.register("provide-client-params.s3.PutObject", fail_third_part)
    try:
        record = stream_record(job_item(aws, "src", job), "INSERT")
        failed = invoke("SummarizeFunction", {"Records": [record]})
        assert failed["batchItemFailures"], "the failed step is reported, so the stream delivers it again"
        stopped = call("GET", f"{W}/src/exports/{job}").body
        assert stopped["status"] == "running" and stopped["parts"] == 2, (puts, failed)
        # The stream delivers the same record again: its step is not the job's any more, so nothing runs ...
        assert invoke("SummarizeFunction", {"Records": [record]}) == {"batchItemFailures": []}
        assert call("GET", f"{W}/src/exports/{job}").body["parts"] == 2
        # ... and the record of the job's last update goes on from where it stopped.
        run_job(aws, "src", job)
    finally:
        s3.meta.events.unregister("provide-client-params.s3.PutObject", fail_third_part)
    done = call("GET", f"{W}/src/exports/{job}").body
    assert done["status"] == "done"
    assert export_lines(aws, "src", job) == expected
    # Each part was written once but the one that failed (written again by the resumed step).
    assert puts[:3] == [f"exports/src/{job}/part-0000{n}.jsonl" for n in (1, 2, 3)]
    assert len(puts) == done["parts"] + 1


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("POST", f"{W}/nowhere/exports", 404),
        ("GET", f"{W}/src/exports/0123456789abcdef", 404),
        ("GET", f"{W}/src/exports/not-an-id", 422),
        ("GET", f"{W}/src/imports/0123456789abcdef", 404),
    ],
)
def test_export_bad_inputs(aws, method, path, status):
    build(aws, "src", sessions=1, messages=1)
    assert call(method, path).status == status


def _parts(aws, ws: str, job: str) -> dict[str, str]:
    listed = aws["s3"].list_object_versions(Bucket=template().bucket_name, Prefix=f"exports/{ws}/{job}/")
    return {v["Key"]: v["VersionId"] for v in listed.get("Versions", [])}


def test_a_message_deleted_while_its_part_is_written_is_not_in_the_part(aws):
    """The part read the message, the delete answers before the part's write is checked: that version is deleted
    and the part made again, without the message."""
    from precis.store.db import get_db

    build(aws, "src", sessions=1, messages=6)
    bucket = template().bucket_name
    aws["s3"].put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    victim = call("POST", f"{W}/src/sessions/s000/messages/list").body["items"][2]
    job = call("POST", f"{W}/src/exports").body["id"]
    puts: list[str] = []

    def delete_first(params, **_):
        if params["Key"].startswith("exports/") and not puts:
            assert call("DELETE", f"{W}/src/sessions/s000/messages/{victim['id']}").status == 204
        puts.append(params["Key"])

    s3 = get_db().s3
    s3.meta.events.register("provide-client-params.s3.PutObject", delete_first)
    try:
        run_job(aws, "src", job)
    finally:
        s3.meta.events.unregister("provide-client-params.s3.PutObject", delete_first)
    assert puts[0] == puts[1]  # the part written again
    lines = export_lines(aws, "src", job)
    assert [line["seq"] for line in lines if line["kind"] == "message"] == [1, 2, 4, 5, 6]
    assert [line["seq"] for line in lines if line["kind"] == "forgotten"] == [3]
    versions = aws["s3"].list_object_versions(Bucket=bucket, Prefix=f"exports/src/{job}/")
    for version in versions.get("Versions", []):
        body = aws["s3"].get_object(Bucket=bucket, Key=version["Key"], VersionId=version["VersionId"])["Body"].read()
        assert victim["content"].encode() not in body


def test_a_workspace_delete_takes_its_exports_every_version_and_their_jobs(aws):
    bucket = template().bucket_name
    aws["s3"].put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    for ws in ("src", "src2"):  # src2: another workspace whose id src is a prefix of keeps its exports
        build(aws, ws, sessions=1, messages=3)
    jobs = {ws: call("POST", f"{W}/{ws}/exports").body["id"] for ws in ("src", "src2")}
    for ws, job in jobs.items():
        run_job(aws, ws, job)
    # A part written twice (a step run again) leaves a noncurrent version: it goes too.
    key = f"exports/src/{jobs['src']}/part-00001.jsonl"
    aws["s3"].put_object(Bucket=bucket, Key=key, Body=aws["s3"].get_object(Bucket=bucket, Key=key)["Body"].read())
    assert call("DELETE", f"{W}/src/sessions/s000").status == 202
    assert call("DELETE", f"{W}/src").status in (200, 202, 204)

    def versions(prefix: str) -> list:
        found = aws["s3"].list_object_versions(Bucket=bucket, Prefix=prefix)
        return [*found.get("Versions", []), *found.get("DeleteMarkers", [])]

    assert versions("exports/src/") == []
    assert len(versions("exports/src2/")) == 1
    assert "Item" not in aws["dynamodb"].get_item(
        TableName="precis-local", Key={"PK": {"S": "WS#src"}, "SK": {"S": f"JOB#{jobs['src']}"}}
    )
    # A workspace made again under the id knows no export of the first.
    assert call("POST", W, {"id": "src"}).status == 201
    assert call("GET", f"{W}/src/exports/{jobs['src']}").status == 404


def test_a_message_delete_withdraws_the_exports_begun_before_it(aws, monkeypatch):
    """Forgetting for real: the parts of an export that may hold the message go, every version, and the export says
    why; an export begun after the delete stays."""
    from precis.store import transfer

    monkeypatch.setattr(transfer, "_SKEW_S", 0)  # (the margin for other hosts' clocks: none among these calls)
    bucket = template().bucket_name
    aws["s3"].put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    build(aws, "src", sessions=1, messages=4)
    before = call("POST", f"{W}/src/exports").body["id"]
    run_job(aws, "src", before)
    victim = call("POST", f"{W}/src/sessions/s000/messages/list").body["items"][1]
    assert call("DELETE", f"{W}/src/sessions/s000/messages/{victim['id']}").status == 204
    after = call("POST", f"{W}/src/exports").body["id"]
    run_job(aws, "src", after)
    for _ in range(20):  # the tombstone's records, until its cascade is done
        found = aws["dynamodb"].query(
            TableName="precis-local",
            KeyConditionExpression="PK = :p AND begins_with(SK, :m)",
            FilterExpression="attribute_exists(running)",
            ExpressionAttributeValues={":p": {"S": "WS#src#S#s000"}, ":m": {"S": "MSG#"}},
            ConsistentRead=True,
        )["Items"]
        if not found:
            break
        assert invoke("SummarizeFunction", {"Records": [stream_record(found[0], "MODIFY")]}) == {
            "batchItemFailures": []
        }

    def versions(job: str) -> list:
        found = aws["s3"].list_object_versions(Bucket=bucket, Prefix=f"exports/src/{job}/")
        return [*found.get("Versions", []), *found.get("DeleteMarkers", [])]

    assert versions(before) == []
    withdrawn = call("GET", f"{W}/src/exports/{before}").body
    assert withdrawn["status"] == "failed" and "withdrawn" in withdrawn["error"] and not withdrawn.get("urls")
    assert len(versions(after)) == 1
    kept = call("GET", f"{W}/src/exports/{after}").body
    assert kept["status"] == "done" and len(kept["urls"]) == 1
    assert victim["content"].encode() not in requests.get(kept["urls"][0], timeout=10).content
