"""Webhook sender: the webhook queue's one consumer; each record is one delivery to one endpoint
(`precis.webhooks.delivery`). A failed delivery is reported as a batch-item failure after its retry delay is set."""

from precis import startup  # first: no garbage collection while the imports run (precis.startup)

from collections.abc import Mapping
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from precis.secrets import webhook_secret
from precis.settings import get_settings
from precis.store.db import get_db, get_queue_client
from precis.telemetry import log_metrics
from precis.webhooks import delivery

logger = Logger()
metrics = Metrics()


@logger.inject_lambda_context
@log_metrics(metrics)
def lambda_handler(event: dict, context) -> Mapping[str, Any]:
    settings = get_settings()
    failed = delivery.on_records(
        get_db(),
        get_queue_client(),
        settings.webhook_queue_url or "",
        list(event.get("Records") or ()),
        allow_http_local=settings.webhooks_allow_http_local,
        deployment_secret=webhook_secret(),
    )
    return {"batchItemFailures": [{"itemIdentifier": i} for i in failed]}


startup.done()  # the module is built: freeze what it made (precis.startup)
