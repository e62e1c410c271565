"""The console: one page of HTML, CSS and JavaScript (files beside this module) that reads the public v3 API.

The files are read on the first request for them, not at import: the context function's cold start pays nothing for
a page most invocations never serve. Names are looked up in a fixed table, never joined to a path, so no request
can reach another file.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from aws_lambda_powertools.event_handler import Response

from precis.errors import NotFound

_HERE = Path(__file__).parent
PAGE = "index.html"
# The only files served, and their types (the page's own assets are served at /console/<name>).
ASSETS = {
    PAGE: "text/html; charset=utf-8",
    "console.js": "text/javascript; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}
# Nothing but the page's own files and the same-origin API: no inline script or style, no other origin, no framing.
# style-src 'self' still lets the script size the bar through the CSSOM (element.style), which CSP does not govern.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-cache",  # revalidated every load: a deploy's new page never meets a cached old script
}


@lru_cache(maxsize=len(ASSETS))
def _read(name: str) -> str:
    return (_HERE / name).read_text(encoding="utf-8")


def serve(name: str) -> Response:
    """The console file `name` with its type and the console's security headers; NotFound (404) for any other
    name."""
    content_type = ASSETS.get(name)
    if content_type is None:
        raise NotFound(f"no such console file; the console is at /console (files: {', '.join(sorted(ASSETS))})")
    return Response(status_code=200, content_type=content_type, body=_read(name), headers=dict(HEADERS))
