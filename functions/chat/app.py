"""Chat function: a peer's and the workspace's dialectic (POST …/peers/{p}/chat, POST …/chat).

A function of its own: an answer may take several LLM rounds (a longer timeout than the context reads), and the
`openai` import stays off the context function's cold start. The offline engine never imports it.
"""

from precis import startup  # first: no garbage collection while the imports run (precis.startup)

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.logging import correlation_paths
from precis.api.chat import router
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
