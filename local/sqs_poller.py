"""Lambda's SQS event-source mapping, locally: receive from each queue the template maps to a function, invoke the
function with Lambda-shaped batches, delete what it processed, and dead-letter a message received too often.

moto honours a message's DelaySeconds, so a delayed message arrives when it would on AWS. What the function reports
failed (ReportBatchItemFailures), or the whole batch when it fails, stays on the queue and comes back once its
visibility timeout passes, until the queue's RedrivePolicy moves it to its dead-letter queue. PRECIS_LOCAL_CHAOS's
`replay` delivers every batch twice, as SQS's at-least-once delivery may.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from local.chaos import Chaos
from local.moto_backend import REGION, client
from local.template import LocalNames, Resolver, Template, is_queue_source
from local.worker import Invoker, InvokeResult

POLL_INTERVAL_S = 0.25  # short polls: moto's server answers one request at a time, a long poll would hold it
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class QueueMapping:
    """One SQS event-source mapping of the template, resolved for the local stack."""

    function: str  # the logical id
    queue: str  # the queue's name
    batch_size: int = 10
    report_item_failures: bool = False
    dead_letter_queue: str | None = None
    max_receive_count: int | None = None


def queue_mappings(tpl: Template) -> list[QueueMapping]:
    """Every AWS::Lambda::EventSourceMapping of the template whose source is one of its queues."""
    resolver = Resolver(tpl.raw, LocalNames())
    found = []
    for res in tpl.raw["Resources"].values():
        props = res.get("Properties", {})
        if res.get("Type") != "AWS::Lambda::EventSourceMapping" or not is_queue_source(
            tpl.raw, props.get("EventSourceArn")
        ):
            continue
        queue_id = props["EventSourceArn"].value
        queue_id = (queue_id if isinstance(queue_id, str) else ".".join(queue_id)).split(".", 1)[0]
        redrive = resolver.resolve(tpl.resource(queue_id)["Properties"].get("RedrivePolicy") or {})
        found.append(
            QueueMapping(
                function=props["FunctionName"].value,
                queue=tpl.queue_names[queue_id],
                batch_size=int(props.get("BatchSize", 10)),
                report_item_failures="ReportBatchItemFailures" in props.get("FunctionResponseTypes", []),
                dead_letter_queue=redrive["deadLetterTargetArn"].rsplit(":", 1)[-1] if redrive else None,
                max_receive_count=int(redrive["maxReceiveCount"]) if redrive else None,
            )
        )
    return found


def lambda_record(message: dict[str, Any], queue_arn: str) -> dict[str, Any]:
    """A ReceiveMessage message shaped as Lambda delivers it to the function."""
    attributes = message.get("Attributes", {})
    return {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": {
            k: attributes[k]
            for k in ("ApproximateReceiveCount", "SentTimestamp", "SenderId", "ApproximateFirstReceiveTimestamp")
            if k in attributes
        },
        "messageAttributes": {},
        "md5OfBody": message.get("MD5OfBody") or hashlib.md5(message["Body"].encode()).hexdigest(),  # noqa: S324
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": REGION,
    }


class QueuePoller:
    """Polls one queue and invokes its function with what arrives (the StreamPoller's start/stop/join)."""

    def __init__(
        self,
        endpoint: str,
        mapping: QueueMapping,
        invoke: Invoker,
        chaos: Chaos | None = None,
        poll_interval_s: float = POLL_INTERVAL_S,
    ):
        self.mapping, self.invoke, self.chaos, self.poll_interval_s = mapping, invoke, chaos or Chaos(), poll_interval_s
        self._sqs = client("sqs", endpoint)
        names = LocalNames()
        self._arn = f"arn:aws:sqs:{names.region}:{names.account}:{mapping.queue}"
        self._url: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def from_template(
        cls, tpl: Template, endpoint: str, invokers: dict[str, Invoker], **kwargs: Any
    ) -> list[QueuePoller]:
        """A poller for each of the template's queue mappings whose function is in `invokers`."""
        return [cls(endpoint, m, invokers[m.function], **kwargs) for m in queue_mappings(tpl) if m.function in invokers]

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"sqs-{self.mapping.queue}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout: float = 10.0) -> bool:
        if self._thread is not None:
            self._thread.join(timeout)
        return not (self._thread and self._thread.is_alive())

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                busy = self.poll_once()
            except Exception:  # noqa: BLE001 - a dead poller would silently stop every wake-up; log and go on
                log.exception("sqs poller (%s)", self.mapping.queue)
                busy = False
            if not busy:
                self._stop.wait(self.poll_interval_s)

    def _queue_url(self, name: str) -> str:
        return self._sqs.get_queue_url(QueueName=name)["QueueUrl"]

    def poll_once(self) -> bool:
        """Receive one batch and deliver it; True if there was one."""
        if self._url is None:
            self._url = self._queue_url(self.mapping.queue)
        messages = self._sqs.receive_message(
            QueueUrl=self._url, MaxNumberOfMessages=min(10, self.mapping.batch_size), AttributeNames=["All"]
        ).get("Messages", [])
        messages = [m for m in messages if not self._dead_letter(m)]
        if not messages:
            return False
        records = [lambda_record(m, self._arn) for m in messages]
        started = time.monotonic()
        result = self.invoke({"Records": records})
        if self.chaos.replay and not self._stop.is_set():
            result = self.invoke({"Records": records})
        failed = self._failed(result, records)
        log.info(
            "sqs %s -> %s: %d message(s) %.0fms %s",
            self.mapping.queue,
            self.mapping.function,
            len(records),
            (time.monotonic() - started) * 1000,
            f"{len(failed)} failed" if failed else "ok",
        )
        done = [m for m in messages if m["MessageId"] not in failed]
        if done:
            self._sqs.delete_message_batch(
                QueueUrl=self._url,
                Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(done)],
            )
        return True

    def _failed(self, result: InvokeResult, records: list[dict[str, Any]]) -> set[str]:
        """The message ids to leave on the queue: every one when the function failed, else those it reported."""
        ids = {r["messageId"] for r in records}
        if not result.ok:
            return ids
        if not self.mapping.report_item_failures or not isinstance(result.payload, dict):
            return set()
        reported = {
            f.get("itemIdentifier") if isinstance(f, dict) else None
            for f in result.payload.get("batchItemFailures") or []
        }
        return ids if not reported <= ids else reported  # an unknown identifier fails the whole batch, as Lambda

    def _dead_letter(self, message: dict[str, Any]) -> bool:
        """Move a message received more than maxReceiveCount times to the dead-letter queue (SQS's redrive)."""
        count = int(message.get("Attributes", {}).get("ApproximateReceiveCount", 1))
        if self.mapping.max_receive_count is None or count <= self.mapping.max_receive_count:
            return False
        if self.mapping.dead_letter_queue:
            self._sqs.send_message(
                QueueUrl=self._queue_url(self.mapping.dead_letter_queue), MessageBody=message["Body"]
            )
        self._sqs.delete_message(QueueUrl=self._url, ReceiptHandle=message["ReceiptHandle"])
        log.warning(
            "sqs %s: a message received %d times went to %s", self.mapping.queue, count, self.mapping.dead_letter_queue
        )
        return True
