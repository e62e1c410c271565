"""Context function: the read routes of the v3 API, /health, /openapi.json, its docs (/docs) and the console page.

No Powertools Tracer here: importing the X-Ray SDK costs ~0.2 s of every cold start on the path agents wait
on; the function's active tracing (template) still traces each invocation.
"""

from precis import startup  # first: no garbage collection while the imports run (precis.startup)

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.logging import correlation_paths
from precis.api.read import router
from precis.api.app import create_resolver, openapi_document, serve
from precis.telemetry import log_metrics

logger = Logger()
metrics = Metrics()
app = create_resolver()
app.include_router(router)


@app.get("/health", include_in_schema=False)
def health() -> dict:
    return {"status": "ok"}


@app.get("/openapi.json", include_in_schema=False)
def openapi() -> dict:
    return openapi_document()


@app.get("/console", include_in_schema=False)
def console_page():  # no return annotation: the validating resolver would try to build a schema of Response
    from precis.api import console  # off the read path: its files are read on the first request for them

    return console.serve(console.PAGE)


@app.get("/console/<name>", include_in_schema=False)
def console_file(name: str):
    from precis.api import console

    return console.serve(name)


@app.get("/docs", include_in_schema=False)
def docs_page():
    from precis.api import docs  # off the read path, as the console is

    return docs.serve(docs.PAGE, app.current_event.headers)


@app.get("/docs/<name>", include_in_schema=False)
def docs_file(name: str):
    from precis.api import docs

    return docs.serve(name, app.current_event.headers)


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
@log_metrics(metrics)
def lambda_handler(event: dict, context) -> dict:
    return serve(app, event, context)


startup.done()  # the module is built: freeze what it made (precis.startup)
