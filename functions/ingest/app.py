"""Ingest function: the write routes of the v3 API (workspaces, peers, sessions, messages, keys)."""

from precis import startup  # first: no garbage collection while the imports run (precis.startup)

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.logging import correlation_paths
from precis.routes.write import router
from precis.web import create_resolver, serve
from precis.telemetry import log_metrics

logger = Logger()
tracer = Tracer(patch_modules=("botocore",))  # not patch_all: it imports httpx, requests and click (~30 ms cold)
metrics = Metrics()
app = create_resolver()
app.include_router(router)


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
@tracer.capture_lambda_handler
@log_metrics(metrics)
def lambda_handler(event: dict, context) -> dict:
    return serve(app, event, context)


startup.done()  # the module is built: freeze what it made (precis.startup)
