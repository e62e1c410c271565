"""The HTTP edge shared by the API functions: one resolver factory, one place mapping errors to status."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response, content_types
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError

from precis.errors import PrecisError

logger = Logger(child=True)


def _json(status: int, body: Any) -> Response:
    return Response(status_code=status, content_type=content_types.APPLICATION_JSON, body=body)


def _describe(error: dict) -> dict:
    """A pydantic error without the echoed input: where, a sentence a person can act on, and the type."""
    msg = error.get("msg") or error.get("type", "invalid")
    if error.get("type") == "json_invalid":
        msg = f"body is not valid JSON: {error.get('ctx', {}).get('error', 'decode error')}"
    return {"loc": list(error.get("loc", ())), "msg": msg, "type": error.get("type", "value_error")}


def create_resolver() -> APIGatewayHttpResolver:
    """A resolver with pydantic validation and Precis's error contract wired in."""
    app = APIGatewayHttpResolver(enable_validation=True)

    @app.exception_handler(PrecisError)
    def _precis_error(exc: PrecisError) -> Response:
        return _json(exc.status, {"detail": exc.detail})

    @app.exception_handler(RequestValidationError)
    def _validation_error(exc: RequestValidationError) -> Response:
        return _json(422, {"detail": [_describe(e) for e in exc.errors()]})

    @app.not_found
    def _not_found(_exc: Exception) -> Response:
        event = app.current_event
        return _json(404, {"detail": f"no route {event.http_method} {event.path}"})

    @app.exception_handler(Exception)
    def _unexpected(exc: Exception) -> Response:
        # Every one of these is a bug: the client gets a generic answer, the log gets the traceback.
        logger.exception("unhandled error")
        return _json(500, {"detail": "internal error; it has been logged"})

    return app


def json_response(status: int, body: Any) -> Response:
    """A JSON answer with an explicit status (201 created vs 200 existing, 202 accepted)."""
    return _json(status, body)
