"""Webhook deliveries: a message on the webhook queue per (event, endpoint), sent by the webhook function at least
once, retried by SQS with a growing visibility timeout until the queue dead-letters it.

A message is `{id, event_id, workspace, endpoint_id, type, data, created}` (`data` holds ids, never message text);
its body on the wire is Honcho's envelope `{type, data, timestamp}`, the same at every attempt, signed anew at each (a
fresh `webhook-timestamp`, the endpoint's live secrets, Honcho's header when the deployment has its secret); `id` is
the `webhook-id` a receiver drops duplicates by, derived from the event's id and the endpoint's (`delivery_id`).

Retries (RETRY_DELAYS_S): after the n-th failed attempt the message comes back 1, 2, 4, ... 128 minutes later (n = 1 to
8), then 256 minutes, then every 6 hours: the 12th and last attempt is about 20.5 hours after the first, and the
queue's maxReceiveCount (MAX_ATTEMPTS = 12) sends the message to the dead-letter queue ~6 hours after that, so a
delivery is tried for about a day.

An endpoint that keeps failing is disabled: the failure of a delivery's last attempt (it failed for about a day) sets
the endpoint's `disabled_at` and `disabled_reason`; from then on its deliveries are dropped, each logged as such,
until the URL is registered again (`POST …/webhooks` re-enables it).
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from precis.errors import NotFound
from precis.store import webhook_deliveries, webhooks
from precis.store.db import Db
from precis.webhooks import signing, targets
from precis.webhooks.endpoints import live_secrets

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 12  # the webhook queue's maxReceiveCount (template.yaml)
FIRST_DELAY_S = 60
MAX_DELAY_S = 6 * 3600  # under SQS's 12-hour limit on a visibility timeout


def retry_delay(attempt: int) -> int:
    """Seconds before the message comes back after failed attempt `attempt` (1-based): doubling, capped."""
    return min(FIRST_DELAY_S * 2 ** (max(attempt, 1) - 1), MAX_DELAY_S)


def delivery_id(event_id: str, endpoint_id: str) -> str:
    """A delivery's id (`webhook-id`): the same whenever the same event is sent to the same endpoint again (a stream
    record replayed, a producer retried), so a receiver drops the duplicate by it."""
    digest = hashlib.sha256(f"{event_id}\n{endpoint_id}".encode()).digest()
    return "msg_" + base64.urlsafe_b64encode(digest[:18]).decode()


def message(
    workspace: str, endpoint_id: str, event_type: str, data: dict[str, Any], *, event_id: str, now: float
) -> dict[str, Any]:
    """A delivery of event `event_id` (of `event_type`, `data` its ids) to one endpoint."""
    created = datetime.fromtimestamp(now, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return {
        "id": delivery_id(event_id, endpoint_id),
        "event_id": event_id,
        "workspace": workspace,
        "endpoint_id": endpoint_id,
        "type": event_type,
        "data": data,
        "created": created,
    }


def body(msg: dict[str, Any]) -> bytes:
    """What is POSTed: Honcho's envelope, the same bytes at every attempt."""
    return json.dumps({"type": msg["type"], "data": msg["data"], "timestamp": msg["created"]}).encode()


@dataclass(frozen=True)
class Outcome:
    """What one attempt came to: delivered, dropped (nothing to deliver to), or failed (SQS tries again)."""

    status: str  # delivered | dropped | failed
    error: str | None = None


def deliver(
    db: Db,
    msg: dict[str, Any],
    *,
    attempt: int,
    now: float | None = None,
    allow_http_local: bool = False,
    deployment_secret: str | None = None,
    resolver: targets.Resolver | None = None,
) -> Outcome:
    """Attempt one delivery and record it in the endpoint's log; an endpoint gone or disabled is a drop (logged,
    and in the disabled one's log). The last attempt's failure disables the endpoint."""
    now = time.time() if now is None else now
    ws, endpoint_id = msg["workspace"], msg["endpoint_id"]
    try:
        endpoint = webhooks.endpoint(db, ws, endpoint_id)
    except NotFound:
        log.info("webhook delivery dropped: endpoint gone", extra={"workspace": ws, "endpoint_id": endpoint_id})
        return Outcome("dropped")
    if endpoint.get("disabled_at") and endpoint.get("disabled_by") == msg["id"]:
        # This delivery's last attempt again (SQS delivered it twice): still a failure, so that its message goes on
        # to the dead-letter queue rather than being deleted as a drop.
        return Outcome("failed", "endpoint disabled by this delivery")
    if endpoint.get("disabled_at"):
        log.info("webhook delivery dropped: endpoint disabled", extra={"workspace": ws, "endpoint_id": endpoint_id})
        outcome = Outcome("dropped", f"endpoint disabled at {endpoint['disabled_at']}")
        _record(db, msg, outcome, attempt=attempt, now=now, http_status=None)
        return outcome
    payload = body(msg)
    http_status = None
    try:
        vetted = targets.vet(
            endpoint["url"], allow_http_local=allow_http_local, **({"resolver": resolver} if resolver else {})
        )
        headers = signing.headers(
            live_secrets(endpoint, int(now)), msg["id"], int(now), payload, deployment_secret=deployment_secret
        )
        response = targets.post(vetted, payload, {"Content-Type": "application/json", **headers})
        http_status, error = response.status, response.error
        if error and response.excerpt:
            error = f"{error}: {response.excerpt}"
    except targets.TargetError as exc:
        error = str(exc)
    outcome = Outcome("failed", error[: targets.EXCERPT_BYTES]) if error else Outcome("delivered")
    _record(db, msg, outcome, attempt=attempt, now=now, http_status=http_status)
    if outcome.status == "failed" and attempt >= MAX_ATTEMPTS:
        at = datetime.fromtimestamp(now, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
        reason = f"delivery {msg['id']} failed {attempt} times over about a day; last: {outcome.error}"
        if webhooks.disable(db, endpoint, at=at, reason=reason[: targets.EXCERPT_BYTES + 128], by=msg["id"]):
            log.warning("webhook endpoint disabled", extra={"workspace": ws, "endpoint_id": endpoint_id})
    return outcome


def _record(db: Db, msg: dict[str, Any], outcome: Outcome, *, attempt: int, now: float, http_status: int | None):
    webhook_deliveries.record(
        db,
        msg["workspace"],
        msg["endpoint_id"],
        msg["id"],
        msg["created"],
        event_type=msg["type"],
        status=outcome.status,
        attempt=attempt,
        now=int(now),
        http_status=http_status,
        error=outcome.error,
    )


def on_records(
    db: Db,
    sqs: Any,
    queue_url: str,
    records: list[dict[str, Any]],
    *,
    allow_http_local: bool = False,
    deployment_secret: str | None = None,
) -> list[str]:
    """Attempt each SQS record's delivery; the message ids that failed, each made visible again after its
    `retry_delay` (ChangeMessageVisibility), so SQS tries it then, until its maxReceiveCount dead-letters it."""
    failed = []
    for record in records:
        attempt = int(record.get("attributes", {}).get("ApproximateReceiveCount", 1))
        try:
            msg = json.loads(record["body"])
        except (KeyError, ValueError):
            log.warning("webhook delivery dropped: unreadable message", extra={"message_id": record.get("messageId")})
            continue
        try:
            outcome = deliver(
                db, msg, attempt=attempt, allow_http_local=allow_http_local, deployment_secret=deployment_secret
            )
        except Exception:  # noqa: BLE001 - the store failing: SQS retries this delivery, the others go on
            log.exception("webhook delivery: not attempted", extra={"message_id": record.get("messageId")})
            outcome = Outcome("failed")
        if outcome.status != "failed":
            continue
        failed.append(record["messageId"])
        try:
            sqs.change_message_visibility(
                QueueUrl=queue_url, ReceiptHandle=record["receiptHandle"], VisibilityTimeout=retry_delay(attempt)
            )
        except Exception:  # noqa: BLE001 - the retry then comes after the queue's own visibility timeout
            log.exception("webhook delivery: retry delay not set", extra={"message_id": record.get("messageId")})
    return failed
