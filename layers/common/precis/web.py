"""The HTTP edge shared by the API functions: one resolver factory, one place mapping errors to status."""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response, content_types
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError

from precis.auth import ROUTES, Access, authorize, bearer, verify_key
from precis.config import get_settings
from precis.errors import PrecisError
from precis.secrets import jwt_secret

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


def _body_id(event: dict) -> str | None:
    try:
        body = json.loads(event.get("body") or "null")
    except ValueError:
        return None
    value = body.get("id") if isinstance(body, dict) else None
    return value if isinstance(value, str) else None


def authenticate(event: dict) -> None:
    """Check the request's bearer key against the route's scope (401/403), when auth is on."""
    if not get_settings().auth:
        return
    access = ROUTES.get(event.get("routeKey", ""), Access.ADMIN)  # a route missing from the table: admins only
    if access is Access.PUBLIC:
        return
    principal = verify_key(bearer(event.get("headers")), jwt_secret())
    ids = event.get("pathParameters") or {}
    workspace, session = ids.get("workspace_id"), ids.get("session_id")

    def is_member() -> bool:
        from precis.store.db import get_db
        from precis.store.resources import is_member as member

        return member(get_db(), workspace, session, principal.peer)

    authorize(principal, access, workspace=workspace, peer=ids.get("peer_id"), session=session,
              body_id=_body_id(event), is_member=is_member)


def serve(app: APIGatewayHttpResolver, event: dict, context) -> dict:
    """Authenticate, then let the resolver route, validate and answer."""
    try:
        authenticate(event)
    except PrecisError as exc:
        return {"statusCode": exc.status, "headers": {"Content-Type": "application/json"},
                "body": json.dumps({"detail": exc.detail}), "isBase64Encoded": False}
    return app.resolve(event, context)


@lru_cache(maxsize=1)
def openapi_document() -> dict:
    """The OpenAPI document of the whole API (both functions' routers), built once, on first request."""
    from precis.routes import read, write  # the write routes are imported here only, off the read path

    app = create_resolver()
    app.include_router(read.router)
    app.include_router(write.router)
    schema = app.get_openapi_schema(title="Precis", version="3.0.0",
                                    description="Conversation memory, wire-compatible with Honcho v3")
    return schema.model_dump(mode="json", by_alias=True, exclude_none=True)
