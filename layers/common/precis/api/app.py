"""The HTTP edge shared by the API functions: one resolver factory, one place mapping errors to status."""

from __future__ import annotations

import base64
import binascii
from functools import lru_cache
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError

from precis.api import caller
from precis.api.answers import json_response, to_json
from precis.auth import ROUTES, Access, Principal, authorize, authorize_view, bearer, verify_key
from precis.errors import PrecisError, Throttled
from precis.llm import meter
from precis.schemas import json_body
from precis.secrets import jwt_secret
from precis.settings import get_settings
from precis.sizes import LAMBDA_PAYLOAD_MAX, frame, too_large

logger = Logger(child=True)

MAX_BODY_DEPTH = json_body.MAX_DEPTH
INTERNAL_ERROR = "internal error; it has been logged"
# Routes whose body is a multipart form the route reads itself (bytes as API Gateway hands them over, base64); their
# handlers declare no JSON body, so Powertools never parses it.
FORM_ROUTES = {"POST /v3/workspaces/{workspace_id}/sessions/{session_id}/messages/upload"}
_BODY_READERS = {
    Access.CREATE_WORKSPACE,
    Access.CREATE_PEER,
    Access.CREATE_SESSION,  # decide on the body's id
    Access.PEER,
}  # a peer key may not read through a scope (authorize_view)


def load_json(text: str | bytes) -> Any:
    """A request body as JSON, read once for every route (precis.schemas.json_body): a 422 naming where when it nests
    deeper than MAX_BODY_DEPTH (validators and filters recurse over bodies) or holds text that is not Unicode (a lone
    surrogate, which no route could store or send back)."""
    try:
        return json_body.read(text, max_depth=MAX_BODY_DEPTH)
    except json_body.Unreadable as exc:
        raise RequestValidationError([{"loc": exc.loc, "type": exc.kind, "msg": exc.msg}]) from None


def _describe(error: dict) -> dict:
    """A pydantic error without the echoed input: where, a sentence a person can act on, and the type."""
    msg = error.get("msg") or error.get("type", "invalid")
    if error.get("type") == "json_invalid":
        msg = f"body is not valid JSON: {error.get('ctx', {}).get('error', 'decode error')}"
    return {"loc": list(error.get("loc", ())), "msg": msg, "type": error.get("type", "value_error")}


def create_resolver() -> APIGatewayHttpResolver:
    """A resolver with pydantic validation and Precis's error contract wired in."""
    app = APIGatewayHttpResolver(enable_validation=True, serializer=to_json, json_body_deserializer=load_json)

    @app.exception_handler(PrecisError)
    def _precis_error(exc: PrecisError) -> Response:
        response = json_response(exc.status, {"detail": exc.detail})
        response.headers.update(_retry_after(exc))
        return response

    @app.exception_handler(RequestValidationError)
    def _validation_error(exc: RequestValidationError) -> Response:
        return json_response(422, {"detail": [_describe(e) for e in exc.errors()]})

    @app.not_found
    def _not_found(_exc: Exception) -> Response:
        event = app.current_event
        return json_response(404, {"detail": f"no route {event.http_method} {event.path}"})

    @app.exception_handler(Exception)
    def _unexpected(exc: Exception) -> Response:
        throttled = _throttled(exc)
        if throttled is not None:
            return json_response(throttled.status, {"detail": throttled.detail})
        # Every one of these is a bug: the client gets a generic answer, the log gets the traceback.
        logger.exception("unhandled error")
        return json_response(500, {"detail": INTERNAL_ERROR})

    return app


def _body(event: dict) -> Any:
    """The request's JSON body for a scope decision, or None when there is none or it is not readable JSON (the
    resolver answers that with a 422 once the key has passed)."""
    raw = event.get("body")
    if not raw:
        return None
    try:
        return load_json(base64.b64decode(raw) if event.get("isBase64Encoded") else raw)
    except (ValueError, binascii.Error, RequestValidationError):
        return None


def authenticate(event: dict) -> Principal | None:
    """Check the request's bearer key against the route's scope (401/403), when auth is on; whose key it is (None
    when auth is off or the route is public)."""
    if not get_settings().auth:
        return None
    access = ROUTES.get(event.get("routeKey", ""), Access.ADMIN)  # a route missing from the table: admins only
    if access is Access.PUBLIC:
        return None
    principal = verify_key(bearer(event.get("headers")), jwt_secret())
    ids = event.get("pathParameters") or {}
    workspace = ids.get("workspace_id")

    def is_member(session_id: str) -> bool:
        """Whether the key's peer belongs to the session, and the session is live (a deleted session's member
        items linger until the purge): one BatchGetItem."""
        from precis.store import resources
        from precis.store.db import get_db

        if workspace is None:  # (authorize asks only once the route's workspace is the key's)
            return False
        return resources.is_member(get_db(), workspace, session_id, principal.peer)

    body = _body(event) if access in _BODY_READERS and not principal.admin else None
    authorize(
        principal,
        access,
        workspace=workspace,
        peer=ids.get("peer_id"),
        session=ids.get("session_id"),
        body=body,
        is_member=is_member,
    )
    authorize_view(principal, event.get("queryStringParameters") or {}, body if isinstance(body, dict) else None)
    return principal


def _body_problem(event: dict) -> tuple[int, Any] | None:
    """Why a request body cannot be JSON, before Powertools parses it (it raises a 500 on bytes that are not UTF-8,
    which API Gateway hands over base64-encoded, and on form or multipart bodies it cannot parse).

    Every body is read as JSON whatever its Content-Type (`curl -d` sends form-urlencoded): the event's header is
    set to application/json, so a body that is not JSON is a 422 that says so.
    """
    if not event.get("body") or event.get("routeKey") in FORM_ROUTES:
        return None
    headers = event.setdefault("headers", {}) or {}
    headers["content-type"] = "application/json"
    event["headers"] = headers
    if event.get("isBase64Encoded"):
        try:
            base64.b64decode(event["body"], validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return 422, [{"loc": ["body"], "msg": "body is not valid UTF-8 JSON", "type": "json_invalid"}]
    return None


def _answer(status: int, detail: Any, headers: dict[str, str] | None = None) -> dict:
    return {
        "statusCode": status,
        "headers": {"Content-Type": "application/json", **(headers or {})},
        "body": to_json({"detail": detail}),
        "isBase64Encoded": False,
    }


def _retry_after(exc: PrecisError) -> dict[str, str]:
    """The Retry-After header of an error that knows when to come back (an index still backfilling)."""
    seconds = getattr(exc, "retry_after_s", None)
    return {"Retry-After": str(seconds)} if seconds else {}


def serve(app: APIGatewayHttpResolver, event: dict, context) -> dict:
    """Authenticate, then let the resolver route, validate and answer; nothing escapes to API Gateway but JSON."""
    try:
        token = caller.serving(authenticate(event))
        try:
            problem = _body_problem(event)
            if problem is not None:
                return _answer(*problem)
            # The route's model calls (a chat, a query's or a conclusion's embedding) are its workspace's: counted,
            # then written once as the request ends (precis.store.usage); a route that calls none writes nothing.
            from precis.store import usage  # (the store's modules load with the first route that reads: lazily here)
            from precis.store.db import get_db

            workspace = (event.get("pathParameters") or {}).get("workspace_id")
            with usage.metered(get_db), meter.workspace(workspace):
                answer = app.resolve(event, context)
            return fitted(answer, event.get("routeKey"))
        finally:
            caller.done(token)
    except PrecisError as exc:
        return _answer(exc.status, exc.detail, _retry_after(exc))
    except Exception as exc:
        throttled = _throttled(exc)
        if throttled is not None:
            return _answer(throttled.status, throttled.detail)
        # Raised outside the resolver's handlers (authentication, the resolver itself): still a bug to fix, still
        # the generic answer rather than API Gateway's bare 500.
        logger.exception("unhandled error")
        return _answer(500, INTERNAL_ERROR)


def fitted(response: dict, route: str | None) -> dict:
    """`response` framed to fit Lambda's answer (base64 when escaping would inflate a large body); the last line
    when it still would not: a 413 and an error in the log, since every page and answer is fitted before it comes
    here (docs/design.md, "Limits")."""
    response = frame(response)
    size = too_large(response)
    if size is None:
        return response
    logger.error(
        "answer past Lambda's payload limit: a bug, answers are fitted before this",
        extra={"route": route, "bytes": size},
    )
    return _answer(
        413,
        f"the answer would be {size:,} bytes, past the {LAMBDA_PAYLOAD_MAX:,} a Lambda answer holds; "
        "ask for less (a smaller size, limit, top_k or tokens)",
    )


def _throttled(exc: Exception) -> PrecisError | None:
    """A 429 for DynamoDB refusing for capacity after botocore's retries, wherever in a request it happened: the
    client should back off and retry, not see a 500."""
    from botocore.exceptions import ClientError

    from precis.store.db import is_throttling

    if isinstance(exc, ClientError) and is_throttling(exc):
        logger.warning("throttled by DynamoDB", extra={"code": exc.response.get("Error", {}).get("Code")})
        return Throttled("the table is throttling requests; retry with backoff")
    return None


@lru_cache(maxsize=1)
def openapi_document() -> dict:
    """The OpenAPI document of the whole API (both functions' routers), built once, on first request."""
    from precis.api import chat, read, write  # the write and chat routes are imported here only, off the read path

    app = create_resolver()
    app.include_router(read.router)
    app.include_router(write.router)
    app.include_router(chat.router)
    schema = app.get_openapi_schema(
        title="Precis", version="3.0.0", description="Conversation memory, wire-compatible with Honcho v3"
    )
    return _with_bearer_keys(_with_error_responses(schema.model_dump(mode="json", by_alias=True, exclude_none=True)))


def _with_bearer_keys(document: dict) -> dict:
    """Declare the keys every documented route takes (none is public: /health, the docs and the console stay out of
    the document), so that a client generator, or the docs' "Authorize", sends them."""
    document.setdefault("components", {})["securitySchemes"] = {
        "bearer": {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "JWT",
            "description": "A Precis key: an HS256 JWT with Honcho's claims (POST /v3/keys mints scoped ones). "
            "Checked when auth is on, as it always is deployed.",
        }
    }
    document["security"] = [{"bearer": []}]
    return document


def _with_error_responses(document: dict) -> dict:
    """Document the error contract Powertools cannot infer: every 4xx body is `{"detail": "<sentence>"}`, and a 422
    is either that (a rule across parameters, e.g. scope with peer_perspective) or the list of schema violations."""
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    schemas["Error"] = {
        "title": "Error",
        "type": "object",
        "required": ["detail"],
        "properties": {"detail": {"type": "string", "title": "Detail"}},
    }
    error = {"$ref": "#/components/schemas/Error"}
    invalid = {"anyOf": [{"$ref": "#/components/schemas/HTTPValidationError"}, error]}
    for operation in (op for path in document.get("paths", {}).values() for op in path.values()):
        responses = operation.setdefault("responses", {})
        if "422" in responses:
            responses["422"] = {"description": "Validation Error", "content": {"application/json": {"schema": invalid}}}
        responses.setdefault("4XX", {"description": "Client error", "content": {"application/json": {"schema": error}}})
    return document
