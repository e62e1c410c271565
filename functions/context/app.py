"""Read routes of the v3 API: context, summaries, lists and message reads; /health and /openapi.json."""

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.logging import correlation_paths

from precis.web import create_resolver

logger = Logger()
tracer = Tracer()
metrics = Metrics()
app = create_resolver()


@app.get("/health", include_in_schema=False)
def health() -> dict:
    return {"status": "ok"}


@app.get("/openapi.json", include_in_schema=False)
def openapi() -> dict:
    return app.get_openapi_schema(title="Precis", version="3.0.0").model_dump(
        mode="json", by_alias=True, exclude_none=True
    )


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
@tracer.capture_lambda_handler
@metrics.log_metrics
def lambda_handler(event: dict, context) -> dict:
    return app.resolve(event, context)
