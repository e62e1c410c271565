"""Lambda's DynamoDB stream event-source mapping, locally: read the table's stream on moto, invoke the stream
function with Lambda-shaped batches, honouring the template's filter, batching, retry and failure settings.

moto's stream has one shard and the mapping delivers each batch once: kinder than AWS, where a table's stream
has many shards read independently and a batch may come again. PRECIS_LOCAL_CHAOS's `shards` and `replay`
take that kindness away (see StreamPoller).
"""

from __future__ import annotations

import http.client
import json
import logging
import threading
import time
import urllib.parse
import uuid
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from local.chaos import Chaos
from local.moto_backend import REGION, client
from local.moto_storage import FILTER_HEADER, READ_HEADER
from local.stream_records import lambda_record, lambda_record_json, matches
from local.template import LocalNames, Template
from local.worker import Invoker, InvokeResult, function_name

# Lambda polls a DynamoDB stream about four times a second; the template's batching window is capped locally
# so that a summary falls due and is readable within the design's 5 s.
POLL_INTERVAL_S = 0.25
MAX_WINDOW_S = 0.25
SHARD_REFRESH_S = 1.0
log = logging.getLogger(__name__)


def default_backoff(attempt: int) -> float:
    """Seconds to wait before retry number `attempt` (1, 2, ...)."""
    return min(0.25 * 2 ** (attempt - 1), 5.0)


class _RecordsReader:
    """GetRecords over plain HTTP, its answer read with `json.loads`: botocore's parser walked every attribute of every
    image against the API's shapes, and the pollers run in the stack's own process, so a stream of 100k records (a
    bulk write) took the API's share of the process while they read it. None when the answer is not a plain 200 (an
    expired iterator, a throttle): the caller asks again through boto3, which raises what it means."""

    def __init__(self, endpoint: str) -> None:
        self._address = urllib.parse.urlsplit(endpoint).netloc
        self._local = threading.local()

    def get_records(self, iterator: str, limit: int, wanted: str | None = None) -> tuple[dict[str, Any], int] | None:
        """The page and how many records it read. With `wanted` (`filter_header`'s value) the page holds only the
        records that pass the filter: the local moto matches them before writing the page (moto_storage)."""
        body = json.dumps({"ShardIterator": iterator, "Limit": limit})
        now = datetime.now(UTC)
        headers = {
            "Content-Type": "application/x-amz-json-1.0",
            "X-Amz-Target": "DynamoDBStreams_20120810.GetRecords",
            "X-Amz-Date": now.strftime("%Y%m%dT%H%M%SZ"),
            # moto routes by the credential scope and does not check the signature
            "Authorization": f"AWS4-HMAC-SHA256 Credential=testing/{now:%Y%m%d}/{REGION}/dynamodb/aws4_request, "
            "SignedHeaders=content-type;host;x-amz-date;x-amz-target, Signature=0",
            **({FILTER_HEADER: wanted} if wanted else {}),
        }
        connection = getattr(self._local, "connection", None)
        try:
            if connection is None:
                connection = self._local.connection = http.client.HTTPConnection(self._address, timeout=60)
            connection.request("POST", "/", body=body, headers=headers)
            response = connection.getresponse()
            data = response.read()
        except (OSError, http.client.HTTPException):
            if connection is not None:
                connection.close()
            self._local.connection = None
            return None
        if response.status != 200:
            return None
        try:
            page = json.loads(data)
        except ValueError:
            return None
        if not isinstance(page, dict) or not isinstance(page.get("Records"), list):
            return None
        read = response.getheader(READ_HEADER)
        return page, int(read) if read and read.isdigit() else len(page["Records"])


def filter_header(stream_arn: str, patterns: list[dict[str, Any]]) -> str | None:
    """What `_RecordsReader.get_records` sends for a poller's filter (None: no filter, every record)."""
    return json.dumps({"arn": stream_arn, "patterns": patterns}) if patterns else None


def _seq(record: dict[str, Any]) -> str:
    return record["dynamodb"]["SequenceNumber"]


def _iso(epoch: float, millis: bool = False) -> str:
    text = datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds" if millis else "seconds")
    return text.replace("+00:00", "Z")


# ---------------------------------------------------------------- the mapping


@dataclass
class StreamSettings:
    """The DynamoDB event's Properties that shape delivery, with Lambda's defaults."""

    starting_position: str = "TRIM_HORIZON"
    batch_size: int = 100
    window_s: float = 0.0
    max_retries: int = -1  # -1: until the record expires
    bisect: bool = False
    max_age_s: int = -1  # -1: never expires
    report_item_failures: bool = False
    filters: list[dict[str, Any]] = field(default_factory=list)
    on_failure_arn: str | None = None

    @classmethod
    def from_properties(cls, props: dict[str, Any], max_window_s: float = MAX_WINDOW_S) -> StreamSettings:
        filters = props.get("FilterCriteria", {}).get("Filters", [])
        return cls(
            starting_position=props.get("StartingPosition", "TRIM_HORIZON"),
            batch_size=int(props.get("BatchSize", 100)),
            window_s=min(float(props.get("MaximumBatchingWindowInSeconds", 0)), max_window_s),
            max_retries=int(props.get("MaximumRetryAttempts", -1)),
            bisect=bool(props.get("BisectBatchOnFunctionError", False)),
            max_age_s=int(props.get("MaximumRecordAgeInSeconds", -1)),
            report_item_failures="ReportBatchItemFailures" in props.get("FunctionResponseTypes", []),
            filters=[json.loads(f["Pattern"]) for f in filters],
            on_failure_arn=props.get("DestinationConfig", {}).get("OnFailure", {}).get("Destination"),
        )


class _Lane:
    """Matching records waiting for delivery, in stream order: a shard's own, or (with `shards` chaos) those of
    the partitions that hash to one virtual shard. Batches are cut from its head, so order holds within a lane."""

    def __init__(self, lane_id: str):
        self.id = lane_id
        self.pending: list[dict[str, Any]] = []
        self.pending_since = 0.0
        self.ready = threading.Condition()

    def add(self, record: dict[str, Any]) -> None:
        with self.ready:
            if not self.pending:
                self.pending_since = time.monotonic()
            self.pending.append(record)
            self.ready.notify()

    def take(self, settings: StreamSettings, flush: bool = False) -> list[dict[str, Any]] | None:
        """The next batch if one is due (full, its window elapsed, or `flush`), else None."""
        with self.ready:
            if self.pending and (
                flush
                or len(self.pending) >= settings.batch_size
                or time.monotonic() - self.pending_since >= settings.window_s
            ):
                batch = self.pending[: settings.batch_size]
                del self.pending[: settings.batch_size]
                return batch
            return None

    def wait(self, settings: StreamSettings, timeout: float) -> None:
        """Sleep until a batch may be due (a record arrives, the window elapses) or `timeout` passes."""
        with self.ready:
            if self.pending:
                timeout = min(timeout, max(0.0, self.pending_since + settings.window_s - time.monotonic()))
            if timeout > 0:
                self.ready.wait(timeout)

    def wake(self) -> None:
        with self.ready:
            self.ready.notify_all()


@dataclass
class _Shard:
    id: str
    parent: str | None
    starting_position: str
    iterator: str | None = None
    closed: bool = False  # read to its end: the stream closed it and GetRecords gave no next iterator
    lane: _Lane | None = None  # its own lane; None when its records go to virtual shards

    @property
    def done(self) -> bool:
        return self.closed and not (self.lane and self.lane.pending)


class StreamPoller:
    """Reads the table's stream and invokes `invoke` with Lambda-shaped batches, each shard's in order.

    Chaos makes it as harsh as Lambda (see local/chaos.py): with `replay` every batch is invoked twice; with
    `shards` the records are spread over virtual shards by partition key, each delivered by its own thread, so
    only records of one partition keep their order, as on AWS.
    """

    def __init__(
        self,
        endpoint: str,
        table_name: str,
        settings: StreamSettings,
        invoke: Invoker,
        function_arn: str,
        poll_interval_s: float = POLL_INTERVAL_S,
        backoff: Callable[[int], float] = default_backoff,
        chaos: Chaos | None = None,
        stamp: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ):
        self.table_name, self.settings, self.invoke, self.function_arn = table_name, settings, invoke, function_arn
        # Lambda-shaped record -> the record as AWS would have it: the local TTL service's REMOVE records get the
        # service's userIdentity (local.ttl), which moto's stream never carries.
        self.stamp = stamp
        self.poll_interval_s, self.backoff = poll_interval_s, backoff
        self.chaos = chaos or Chaos()
        self._dynamodb, self._streams, self._sqs = (client(s, endpoint) for s in ("dynamodb", "dynamodbstreams", "sqs"))
        self._records = _RecordsReader(endpoint)
        self._stream_arn: str | None = None
        self._hash_key = "PK"
        self._shards: dict[str, _Shard] = {}
        virtual = self.chaos.virtual_shards if self.chaos.shards else 0
        self._lanes = [_Lane(f"shardId-virtual-{i:02d}") for i in range(virtual)]
        self._refreshed_at = float("-inf")
        self._queue_url: str | None = None
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    @classmethod
    def from_template(
        cls,
        tpl: Template,
        endpoint: str,
        invoke: Invoker,
        max_window_s: float = MAX_WINDOW_S,
        function: str = "SummarizeFunction",
        **kwargs: Any,
    ) -> StreamPoller:
        """A poller for one of the template's stream functions, its table and its on-failure destination."""
        fn = tpl.stream_function(function)
        names = LocalNames()
        arn = f"arn:aws:lambda:{names.region}:{names.account}:function:{function_name(tpl, fn)}"
        settings = StreamSettings.from_properties(fn.stream, max_window_s)
        return cls(endpoint, tpl.table_name, settings, invoke, arn, **kwargs)

    # -- lifecycle

    def start(self) -> None:
        """Poll in the background: one reader thread, plus one delivering thread per virtual shard if any."""
        self._threads = [threading.Thread(target=self._run, name="stream-poller", daemon=True)]
        self._threads += [
            threading.Thread(target=self._run_lane, args=(lane,), name=f"stream-{lane.id}", daemon=True)
            for lane in self._lanes
        ]
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        """No new invocations; those in flight still end (see `join`)."""
        self._stop.set()
        for lane in self._lanes:
            lane.wake()

    def join(self, timeout: float = 10.0) -> bool:
        """Wait up to `timeout` s in all for the threads to end; whether they all did."""
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(thread.is_alive() for thread in self._threads)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                busy = self.poll_once()
            except Exception:  # noqa: BLE001 - a dead poller would silently stop every summary; log and go on
                log.exception("stream poller")
                busy = False
            if not busy:
                self._stop.wait(self.poll_interval_s)

    def _run_lane(self, lane: _Lane) -> None:
        while not self._stop.is_set():
            try:
                batch = lane.take(self.settings)
                if batch:
                    self._deliver(lane.id, batch)
                else:
                    lane.wait(self.settings, self.poll_interval_s)
            except Exception:  # noqa: BLE001 - as in _run: log and go on
                log.exception("stream poller (%s)", lane.id)
                self._stop.wait(self.poll_interval_s)

    # -- polling

    def virtual_shard(self, keys: dict[str, Any]) -> int:
        """The virtual shard of a record with these (typed) keys: a seeded hash of its partition key alone."""
        partition = json.dumps(keys[self._hash_key], sort_keys=True)
        return zlib.crc32(f"{self.chaos.seed}:{partition}".encode()) % len(self._lanes)

    def poll_once(self) -> bool:
        """One pass over the stream's shards; True if records were read or delivered.

        With virtual shards this only reads: their threads deliver (see `start`).
        """
        self._refresh_shards()
        progressed = False
        for shard in list(self._shards.values()):
            parent = self._shards.get(shard.parent or "")
            if shard.done or (parent is not None and not parent.done):
                continue  # a child shard waits until its parent is finished, as Lambda keeps per-key order
            progressed |= self._read(shard)
            while shard.lane and (batch := shard.lane.take(self.settings, flush=shard.closed)):
                self._deliver(shard.lane.id, batch)
                progressed = True
        return progressed

    def _refresh_shards(self) -> None:
        now = time.monotonic()
        if now - self._refreshed_at < SHARD_REFRESH_S:
            return
        self._refreshed_at = now
        table = self._dynamodb.describe_table(TableName=self.table_name)["Table"]
        arn = table["LatestStreamArn"]
        if arn != self._stream_arn:  # a new table (or first look): start over on its stream
            self._stream_arn, self._shards = arn, {}
            self._hash_key = next(k["AttributeName"] for k in table["KeySchema"] if k["KeyType"] == "HASH")
            position = self.settings.starting_position
        else:
            position = "TRIM_HORIZON"  # shards opened later are read from their start, so nothing is skipped
        for desc in self._streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]:
            if desc["ShardId"] not in self._shards:
                lane = None if self._lanes else _Lane(desc["ShardId"])
                self._shards[desc["ShardId"]] = _Shard(desc["ShardId"], desc.get("ParentShardId"), position, lane=lane)

    def _read(self, shard: _Shard) -> bool:
        """Read the shard's next page into the lanes; True if it held records."""
        if shard.closed:
            return False
        if shard.iterator is None:
            shard.iterator = self._streams.get_shard_iterator(
                StreamArn=self._stream_arn, ShardId=shard.id, ShardIteratorType=shard.starting_position
            )["ShardIterator"]
        # moto filters before the stamp; a pattern on userIdentity is matched here only, after it.
        stamped_filter = self.stamp is not None and any("userIdentity" in p for p in self.settings.filters)
        wanted = None if stamped_filter else filter_header(self._stream_arn, self.settings.filters)
        read = self._records.get_records(shard.iterator, 1000, wanted)
        if read is not None:
            (page, count), shaped = read, lambda_record_json
        else:
            page, shaped = self._streams.get_records(ShardIterator=shard.iterator, Limit=1000), lambda_record
            count = len(page["Records"])
        shard.iterator = page.get("NextShardIterator")
        shard.closed = shard.iterator is None
        for raw in page["Records"]:
            record = shaped(raw, self._stream_arn)
            if self.stamp is not None:
                record = self.stamp(record)
            if self.settings.filters and not any(matches(p, record) for p in self.settings.filters):
                continue  # filtered out: consumed without an invocation, as Lambda does
            lane = shard.lane or self._lanes[self.virtual_shard(record["dynamodb"]["Keys"])]
            lane.add(record)
        return count > 0

    # -- delivery

    def _deliver(self, shard_id: str, batch: list[dict[str, Any]]) -> None:
        """Invoke until every record of `batch` is processed or handed to the on-failure destination, in order.

        Bisecting a batch does not use up a retry attempt; a partial failure retries from the lowest failed
        record and does. With `replay` each invocation is followed by a second one with the same records, and
        the second's outcome is the one that counts (as if the first's had been lost).
        """
        todo: list[tuple[list[dict[str, Any]], int]] = [(batch, 0)]
        while todo:
            records, retries = todo.pop(0)
            records = self._drop_expired(shard_id, records, retries)
            if not records:
                continue
            started = time.monotonic()
            result = self.invoke({"Records": records})
            replayed = self.chaos.replay and not self._stop.is_set()
            if replayed:
                result = self.invoke({"Records": records})
            if self._stop.is_set():
                return  # the stack is going away; its in-memory stream goes with it
            failed_from, function_error = self._outcome(result, records)
            outcome = "ok" if failed_from is None else result.error or f"{len(records) - failed_from} failed"
            log.info(
                "stream -> %s: %d record(s) %.0fms %s%s",
                self.function_arn.rsplit(":", 1)[-1],
                len(records),
                (time.monotonic() - started) * 1000,
                outcome,
                " (delivered twice)" if replayed else "",
            )
            if failed_from is None:
                continue
            if function_error and self.settings.bisect and len(records) > 1:
                half = len(records) // 2
                todo[:0] = [(records[:half], retries), (records[half:], retries)]
                continue
            if 0 <= self.settings.max_retries <= retries:
                self._give_up(shard_id, records[failed_from:], "RetryAttemptsExhausted", retries + 1, result)
                continue
            if self._stop.wait(self.backoff(retries + 1)):
                return
            todo.insert(0, (records[failed_from:], retries + 1))

    def _outcome(self, result: InvokeResult, records: list[dict[str, Any]]) -> tuple[int | None, bool]:
        """(index of the first record to retry, or None if all succeeded; whether the batch failed as a whole)."""
        if not result.ok:
            return 0, True
        if not self.settings.report_item_failures or not isinstance(result.payload, dict):
            return None, False
        failures = result.payload.get("batchItemFailures") or []
        seqs = [_seq(r) for r in records]
        ids = [f.get("itemIdentifier") if isinstance(f, dict) else None for f in failures]
        if not ids:
            return None, False
        if any(i not in seqs for i in ids):  # null, empty or unknown identifiers fail the whole batch
            return 0, True
        return min(seqs.index(i) for i in ids), False

    def _drop_expired(self, shard_id: str, records: list[dict[str, Any]], invokes: int) -> list[dict[str, Any]]:
        if self.settings.max_age_s < 0:
            return records
        cutoff = time.time() - self.settings.max_age_s
        expired = [r for r in records if r["dynamodb"]["ApproximateCreationDateTime"] < cutoff]
        if expired:
            self._give_up(shard_id, expired, "RecordAgeExceeded", invokes, None)
        return records[len(expired) :]

    def _give_up(
        self, shard_id: str, records: list[dict[str, Any]], condition: str, invokes: int, result: InvokeResult | None
    ) -> None:
        """Send Lambda's on-failure record for `records` to the destination queue and move past them."""
        response = {"statusCode": 200, "executedVersion": "$LATEST"}
        if result is not None and not result.ok:
            response["functionError"] = "Unhandled"
        first, last = records[0]["dynamodb"], records[-1]["dynamodb"]
        message = {
            "requestContext": {
                "requestId": str(uuid.uuid4()),
                "functionArn": self.function_arn,
                "condition": condition,
                "approximateInvokeCount": invokes,
            },
            "responseContext": response,
            "version": "1.0",
            "timestamp": _iso(time.time(), millis=True),
            "DDBStreamBatchInfo": {
                "shardId": shard_id,
                "startSequenceNumber": first["SequenceNumber"],
                "endSequenceNumber": last["SequenceNumber"],
                "approximateArrivalOfFirstRecord": _iso(first["ApproximateCreationDateTime"]),
                "approximateArrivalOfLastRecord": _iso(last["ApproximateCreationDateTime"]),
                "batchSize": len(records),
                "streamArn": self._stream_arn,
            },
        }
        log.warning(
            "stream poller: %s for %d record(s) from %s (%s)",
            condition,
            len(records),
            first["SequenceNumber"],
            result.error if result else "not invoked",
        )
        if self.settings.on_failure_arn:
            if self._queue_url is None:
                name = self.settings.on_failure_arn.rsplit(":", 1)[-1]
                self._queue_url = self._sqs.get_queue_url(QueueName=name)["QueueUrl"]
            self._sqs.send_message(QueueUrl=self._queue_url, MessageBody=json.dumps(message))
