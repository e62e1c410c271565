"""One exception hierarchy for everything a caller can get wrong; `precis.api.app` maps it to status codes."""

from __future__ import annotations


class PrecisError(Exception):
    """Base of the errors that answer the caller with a status and a message."""

    status = 400

    def __init__(self, detail: str):
        super().__init__(detail)
        self.detail = detail


class Invalid(PrecisError):
    status = 422


class Unauthorized(PrecisError):
    status = 401


class Forbidden(PrecisError):
    status = 403


class NotFound(PrecisError):
    status = 404


class Conflict(PrecisError):
    status = 409


class TooLarge(PrecisError):
    status = 413


class Throttled(PrecisError):
    status = 429


class Unavailable(PrecisError):
    """The service lacks something it needs (e.g. a signing secret, a search index still being built); not the
    caller's fault, nor a crash. `retry_after_s`, when known, is the answer's Retry-After."""

    status = 503

    def __init__(self, detail: str, retry_after_s: int | None = None):
        super().__init__(detail)
        self.retry_after_s = retry_after_s


class BadGateway(PrecisError):
    """A backend the request needs (the LLM endpoint) refused it or answered nothing usable; not the caller's fault."""

    status = 502


class UnsupportedMediaType(PrecisError):
    """A request or uploaded file of a type Precis does not read (e.g. an image uploaded as a message)."""

    status = 415
