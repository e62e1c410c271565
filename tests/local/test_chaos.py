"""PRECIS_LOCAL_CHAOS: the local stack made as harsh as AWS, one mode at a time (replay, shards, throttle)."""

from __future__ import annotations

import functools
import io
import os
import subprocess
import sys
import threading
import time
import urllib.request

import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from local.chaos import Chaos, ChaosError
from local.moto_backend import client, start_moto
from local.moto_server import Throttling
from local.poller import StreamPoller
from local.template import ROOT, template
from local.worker import InvokeResult
from tests.stack import Stack, free_port, request

TABLE = template().table_name
OK = InvokeResult(True, {"batchItemFailures": []})


# ---------------------------------------------------------------- settings


def test_chaos_is_off_unless_asked():
    chaos = Chaos.from_env({})
    assert chaos.modes == frozenset() and not (chaos.replay or chaos.shards or chaos.throttle)
    assert chaos.describe() == "chaos: off"


def test_modes_settings_and_seed_are_read_from_the_environment():
    chaos = Chaos.from_env(
        {
            "PRECIS_LOCAL_CHAOS": " Replay, shards,,throttle ",
            "PRECIS_LOCAL_CHAOS_THROTTLE": "0.2",
            "PRECIS_LOCAL_CHAOS_SEED": "42",
        }
    )
    assert chaos.replay and chaos.shards and chaos.throttle
    assert (chaos.throttle_rate, chaos.seed) == (0.2, 42)
    assert chaos.describe() == (
        "chaos: replay, shards (4 virtual shards), throttle (20% of the functions' DynamoDB "
        "calls); PRECIS_LOCAL_CHAOS_SEED=42"
    )
    assert Chaos.from_env({"PRECIS_LOCAL_CHAOS": "throttle"}).throttle_rate == 0.05


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"PRECIS_LOCAL_CHAOS": "replay,latency"},
            "PRECIS_LOCAL_CHAOS: unknown mode 'latency' (known: replay, shards, throttle, lag, approximate)",
        ),
        ({"PRECIS_LOCAL_VECTOR_LAG_S": "-1"}, "PRECIS_LOCAL_VECTOR_LAG_S: seconds between 0 and 300, got '-1'"),
        ({"PRECIS_LOCAL_CHAOS_THROTTLE": "5%"}, "PRECIS_LOCAL_CHAOS_THROTTLE: a fraction between 0 and 1, got '5%'"),
        ({"PRECIS_LOCAL_CHAOS_THROTTLE": "1.5"}, "PRECIS_LOCAL_CHAOS_THROTTLE: a fraction between 0 and 1, got '1.5'"),
        ({"PRECIS_LOCAL_CHAOS_SEED": "abc"}, "PRECIS_LOCAL_CHAOS_SEED: an integer, got 'abc'"),
    ],
)
def test_a_malformed_setting_is_refused_with_its_name(env, message):
    with pytest.raises(ChaosError) as refused:
        Chaos.from_env(env)
    assert str(refused.value) == message


def test_make_dev_refuses_an_unknown_mode_at_start(tmp_path):
    env = {
        **os.environ,
        "PRECIS_LOCAL_CHAOS": "replay,bogus",
        "PRECIS_PORT": str(free_port()),
        "PRECIS_DEV_JSON": str(tmp_path / "dev.json"),
    }
    done = subprocess.run(
        [sys.executable, "-m", "local"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert "PRECIS_LOCAL_CHAOS: unknown mode 'bogus' (known: replay, shards, throttle, lag, approximate)" in done.stderr
    assert "Precis local stack" not in done.stdout


# ---------------------------------------------------------------- the poller: replay and shards


@pytest.fixture
def endpoint():
    backend = start_moto(template())
    yield backend.endpoint
    urllib.request.urlopen(urllib.request.Request(f"{backend.endpoint}/moto-api/reset", method="POST")).close()
    backend.stop()


@functools.cache
def table_client(endpoint: str):
    return client("dynamodb", endpoint)  # one per endpoint: building a client costs more than a put


def put_message(endpoint: str, seq: int, ws: str = "w", session: str = "s") -> None:
    table_client(endpoint).put_item(
        TableName=TABLE,
        Item={
            "PK": {"S": f"WS#{ws}#S#{session}"},
            "SK": {"S": f"MSG#{seq:012d}"},
            "kind": {"S": "message"},
            "id": {"S": f"{session}/m{seq}"},
            "content": {"S": "hello"},
        },
    )


def put_session(endpoint: str, ws: str, session: str) -> None:
    table_client(endpoint).put_item(
        TableName=TABLE,
        Item={
            "PK": {"S": f"WS#{ws}"},
            "SK": {"S": f"SESSION#{session}"},
            "kind": {"S": "session"},
            "id": {"S": session},
        },
    )


def delete_session(endpoint: str, ws: str, session: str) -> None:
    """Mark the session deleted, as the delete route does: the MODIFY record wakes the summarizer to purge it."""
    table_client(endpoint).update_item(
        TableName=TABLE,
        Key={"PK": {"S": f"WS#{ws}"}, "SK": {"S": f"SESSION#{session}"}},
        UpdateExpression="SET deleted_at = :t",
        ExpressionAttributeValues={":t": {"S": "2026-01-01T00:00:00Z"}},
    )


def image_id(record: dict) -> str:
    image = record["dynamodb"]["NewImage"]
    return "delete " + image["id"]["S"] if "deleted_at" in image else image["id"]["S"]


class Recorder:
    """An invoker recording each batch (ids, and the thread that delivered it) and answering `respond(event)`."""

    def __init__(self, respond=lambda event: OK):
        self.respond, self.lock = respond, threading.Lock()
        self.batches: list[list[str]] = []
        self.threads: list[str] = []

    def __call__(self, event: dict) -> InvokeResult:
        with self.lock:
            self.batches.append([image_id(r) for r in event["Records"]])
            self.threads.append(threading.current_thread().name)
        return self.respond(event)

    def delivered(self) -> list[str]:
        with self.lock:
            return [i for batch in self.batches for i in batch]


def poller(endpoint: str, invoke, *modes: str, seed: int = 7) -> StreamPoller:
    return StreamPoller.from_template(
        template(),
        endpoint,
        invoke,
        max_window_s=0,
        backoff=lambda attempt: 0,
        poll_interval_s=0.02,
        chaos=Chaos(frozenset(modes), seed=seed),
    )


def wait_for(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_replay_invokes_every_batch_twice(endpoint):
    for seq in (1, 2):
        put_message(endpoint, seq)
    recorder = Recorder()
    replaying = poller(endpoint, recorder, "replay")
    for _ in range(3):
        replaying.poll_once()
    assert recorder.batches == [["s/m1", "s/m2"], ["s/m1", "s/m2"]]


def test_replay_keeps_retrying_from_the_first_failed_record(endpoint):
    for seq in (1, 2, 3):
        put_message(endpoint, seq)

    def respond(event: dict) -> InvokeResult:
        if len(recorder.batches) == 2:  # the replayed delivery is the one that counts; it fails from m2
            second = event["Records"][1]["dynamodb"]["SequenceNumber"]
            return InvokeResult(True, {"batchItemFailures": [{"itemIdentifier": second}]})
        return OK

    recorder = Recorder(respond)
    replaying = poller(endpoint, recorder, "replay")
    for _ in range(3):
        replaying.poll_once()
    assert recorder.batches == [["s/m1", "s/m2", "s/m3"]] * 2 + [["s/m2", "s/m3"]] * 2


def sessions_on_two_virtual_shards(probe: StreamPoller) -> tuple[str, str]:
    """A workspace and session whose session item and messages hash to different virtual shards."""
    for n in range(100):
        ws, session = f"w{n}", "s"
        if probe.virtual_shard({"PK": {"S": f"WS#{ws}"}}) != probe.virtual_shard({"PK": {"S": f"WS#{ws}#S#{session}"}}):
            return ws, session
    raise AssertionError("every candidate hashed to one virtual shard")


def test_shards_can_deliver_a_sessions_delete_before_its_earlier_messages(endpoint):
    # By construction: the summarizer is still busy with the first message when the second message and then the
    # delete are written. On one shard the delete would wait behind the second message; on AWS (and here) the
    # session item's partition is read independently of the messages' partition, so the delete comes first.
    recorder_holds_first = threading.Event()
    delete_delivered = threading.Event()

    def respond(event: dict) -> InvokeResult:
        ids = [image_id(r) for r in event["Records"]]
        if any(i.startswith("delete") for i in ids):
            delete_delivered.set()
        elif f"{session}/m1" in ids:
            recorder_holds_first.set()
            delete_delivered.wait(5)  # without independent shards this only times out
        return OK

    recorder = Recorder(respond)
    sharded = poller(endpoint, recorder, "shards")
    ws, session = sessions_on_two_virtual_shards(sharded)
    put_session(endpoint, ws, session)
    put_message(endpoint, 1, ws, session)
    sharded.start()
    try:
        assert recorder_holds_first.wait(10)
        put_message(endpoint, 2, ws, session)
        delete_session(endpoint, ws, session)
        wait_for(lambda: f"{session}/m2" in recorder.delivered())
    finally:
        sharded.stop()
        assert sharded.join(5)
    assert recorder.delivered() == [f"{session}/m1", f"delete {session}", f"{session}/m2"]


def test_shards_keep_each_partitions_order_and_run_partitions_concurrently(endpoint):
    recorder = Recorder()
    sharded = poller(endpoint, recorder, "shards")
    sessions = [f"s{n}" for n in range(8)]
    sharded.start()
    try:
        for seq in range(1, 13):
            for session in sessions:
                put_message(endpoint, seq, session=session)
        wait_for(lambda: len(recorder.delivered()) == 12 * len(sessions))
    finally:
        sharded.stop()
        assert sharded.join(5)
    delivered = recorder.delivered()
    for session in sessions:
        assert [i for i in delivered if i.startswith(f"{session}/")] == [f"{session}/m{q}" for q in range(1, 13)]
    # each session's batches come from its own virtual shard's thread, and there are several
    by_session = {}
    for batch, thread in zip(recorder.batches, recorder.threads, strict=True):
        for i in batch:
            by_session.setdefault(i.split("/")[0], set()).add(thread)
    assert all(len(threads) == 1 for threads in by_session.values())
    assert len({t for threads in by_session.values() for t in threads}) > 1


def test_the_seed_decides_which_partitions_share_a_virtual_shard():
    keys = [{"PK": {"S": f"WS#w#S#s{n}"}} for n in range(40)]
    unused = "http://127.0.0.1:9"  # no call is made: the shard of a key is pure
    one, same, other = (poller(unused, Recorder(), "shards", seed=s) for s in (1, 1, 2))
    assert [one.virtual_shard(k) for k in keys] == [same.virtual_shard(k) for k in keys]
    assert [one.virtual_shard(k) for k in keys] != [other.virtual_shard(k) for k in keys]
    assert set(one.virtual_shard(k) for k in keys) == {0, 1, 2, 3}


# ---------------------------------------------------------------- throttle


@pytest.fixture
def throttled():
    """A moto server whose functions' port refuses half the DynamoDB calls (seed 3)."""
    backend = start_moto(template(), Chaos(frozenset({"throttle"}), throttle_rate=0.5, seed=3))
    yield backend
    backend.stop()


def dynamodb(endpoint: str, **retries):
    """A DynamoDB client with the given botocore retry settings (no retry unless asked)."""
    return client("dynamodb", endpoint, Config(retries=retries or {"mode": "standard", "total_max_attempts": 1}))


def outcomes(ddb, calls: int) -> list[str]:
    """The error code of each of `calls` GetItems ("ok" when answered)."""
    seen = []
    for _ in range(calls):
        try:
            ddb.get_item(TableName=TABLE, Key={"PK": {"S": "x"}, "SK": {"S": "y"}})
            seen.append("ok")
        except ClientError as exc:
            assert exc.response["ResponseMetadata"]["HTTPStatusCode"] == 400
            seen.append(exc.response["Error"]["Code"])
    return seen


def test_throttle_refuses_a_share_of_the_functions_dynamodb_calls_with_dynamodbs_errors(throttled):
    seen = outcomes(dynamodb(throttled.functions_endpoint), 200)
    assert set(seen) == {"ok", "ThrottlingException", "ProvisionedThroughputExceededException"}
    assert 60 <= seen.count("ok") <= 140
    assert throttled.server.throttling.refused == 200 - seen.count("ok")


def test_throttle_spares_the_stacks_own_clients_and_other_services(throttled):
    assert throttled.functions_endpoint != throttled.endpoint
    assert set(outcomes(dynamodb(throttled.endpoint), 50)) == {"ok"}  # the poller's and the tests' port
    streams = client(
        "dynamodbstreams", throttled.functions_endpoint, Config(retries={"mode": "standard", "total_max_attempts": 1})
    )
    arn = client("dynamodb", throttled.endpoint).describe_table(TableName=TABLE)["Table"]["LatestStreamArn"]
    for _ in range(30):
        streams.describe_stream(StreamArn=arn)
    s3 = client("s3", throttled.functions_endpoint)
    for _ in range(30):
        s3.list_objects_v2(Bucket=template().bucket_name)


def test_throttled_transactions_are_cancelled_with_a_throttling_reason_or_refused_outright(throttled):
    ddb = dynamodb(throttled.functions_endpoint)
    items = [{"Put": {"TableName": TABLE, "Item": {"PK": {"S": "t"}, "SK": {"S": f"i{n}"}}}} for n in range(3)]
    codes, reasons = [], []
    for _ in range(60):
        try:
            ddb.transact_write_items(TransactItems=items)
            codes.append("ok")
        except ClientError as exc:
            codes.append(exc.response["Error"]["Code"])
            if "CancellationReasons" in exc.response:
                reasons.append([r["Code"] for r in exc.response["CancellationReasons"]])
    assert {"ok", "TransactionCanceledException", "ThrottlingException"} <= set(codes)
    assert reasons and all(sorted(r) == ["None", "None", "ThrottlingError"] for r in reasons)


def test_botocore_retries_past_plain_throttling(throttled):
    ddb = dynamodb(throttled.functions_endpoint, mode="legacy", total_max_attempts=10)
    assert set(outcomes(ddb, 20)) == {"ok"}
    assert throttled.server.throttling.refused > 0


def test_the_seed_makes_throttling_reproducible():
    def statuses(seed: int) -> list[str]:
        front = Throttling(lambda environ, start_response: start_response("200 OK", []) or [b"{}"], 0.5, seed)
        seen: list[str] = []
        for _ in range(40):
            environ = {
                "HTTP_X_AMZ_TARGET": "DynamoDB_20120810.GetItem",
                "CONTENT_LENGTH": "2",
                "wsgi.input": io.BytesIO(b"{}"),
            }
            front(environ, lambda status, headers: seen.append(status))
        return seen

    assert statuses(11) == statuses(11) != statuses(12)
    assert {"200 OK", "400 Bad Request"} == set(statuses(11))


# ---------------------------------------------------------------- the whole stack


@pytest.mark.stack
def test_the_stack_announces_its_chaos_and_ingests_through_throttling(tmp_path):
    stack = Stack(
        tmp_path,
        env={
            "PRECIS_LOCAL_CHAOS": "replay,shards,throttle",
            "PRECIS_LOCAL_CHAOS_THROTTLE": "0.2",
            "PRECIS_LOCAL_CHAOS_SEED": "5",
        },
    )
    try:
        stack.wait_healthy()
        assert (
            "chaos: replay, shards (4 virtual shards), throttle (20% of the functions' DynamoDB calls); "
            "PRECIS_LOCAL_CHAOS_SEED=5"
        ) in stack.log.read_text()
        headers = {"Content-Type": "application/json"}
        statuses = [
            request(stack.port, "POST", "/v3/workspaces", headers, f'{{"id": "w{n}"}}'.encode())[0] for n in range(10)
        ]
        # botocore's retries absorb most refusals; what is left must reach the client as a 429, never a 500
        assert set(statuses) <= {201, 429} and 201 in statuses, stack.log.read_text()
    finally:
        assert stack.stop() == 0
