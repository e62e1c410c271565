"""Ingest function: the write routes of the v3 API (workspaces, peers, sessions, messages, keys).

No Powertools Tracer, as in the other API functions: the X-Ray SDK (and its botocore patch) is ~8% of a cold start
that an agent's first post waits on; the function's active tracing (template) still traces each invocation.
"""

from precis import startup  # first: no garbage collection while the imports run (precis.startup)

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.logging import correlation_paths
from precis.api.write import router
from precis.api.app import create_resolver, serve
from precis.telemetry import log_metrics

logger = Logger()
metrics = Metrics()
app = create_resolver()
app.include_router(router)


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
@log_metrics(metrics)
def lambda_handler(event: dict, context) -> dict:
    return serve(app, event, context)


startup.done()  # the module is built: freeze what it made (precis.startup)
