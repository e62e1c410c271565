"""The interactive API docs (GET /docs): Swagger UI over the document the API serves at /openapi.json.

Swagger UI's script and stylesheet are the copies Powertools ships in its package, which the layer installs whole
(pinned in layers/common/requirements.txt): nothing is fetched from elsewhere, at build time or by the browser. The
page is ours, not Powertools' (`enable_swagger`): that one inlines its script and the document, which the console's
policy (script-src 'self') forbids. As with the console, files are read on the first request for them, and names are
looked up in a fixed table, never joined to a path.

Swagger UI's script is 1.5 MB: it goes out gzipped to a browser that accepts it (compressed once per container), with
an ETag, so a reload that has it already gets a 304 instead.
"""

from __future__ import annotations

import gzip
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from aws_lambda_powertools import event_handler
from aws_lambda_powertools.event_handler import Response

from precis.api import console
from precis.errors import NotFound

_HERE = Path(__file__).parent
_SWAGGER_UI = Path(event_handler.__file__).parent / "openapi" / "swagger_ui"
PAGE = "index.html"
# The files served (the page at /docs, the others at /docs/<name>): where each is and its type.
FILES: dict[str, tuple[Path, str]] = {
    PAGE: (_HERE / "index.html", "text/html; charset=utf-8"),
    "docs.js": (_HERE / "docs.js", "text/javascript; charset=utf-8"),
    "swagger-ui-bundle.js": (_SWAGGER_UI / "swagger-ui-bundle.min.js", "text/javascript; charset=utf-8"),
    "swagger-ui.css": (_SWAGGER_UI / "swagger-ui.min.css", "text/css; charset=utf-8"),
}
# The console's policy and headers, but that images may be data: URIs (Swagger UI's stylesheet draws its icons so).
CONTENT_SECURITY_POLICY = console.CONTENT_SECURITY_POLICY.replace("img-src 'self';", "img-src 'self' data:;")
HEADERS = {**console.HEADERS, "Content-Security-Policy": CONTENT_SECURITY_POLICY, "Vary": "Accept-Encoding"}


@dataclass(frozen=True)
class _File:
    content: bytes
    gzipped: bytes
    etag: str


@lru_cache(maxsize=len(FILES))
def _read(name: str) -> _File:
    content = FILES[name][0].read_bytes()
    return _File(content, gzip.compress(content, mtime=0), f'"{hashlib.sha256(content).hexdigest()[:32]}"')


def serve(name: str, request_headers: Mapping[str, str] | None = None) -> Response:
    """The docs file `name` with its type and the docs' security headers, gzipped when the request accepts it, or a
    304 when the request already holds it (If-None-Match); NotFound (404) for any other name."""
    if name not in FILES:
        raise NotFound(f"no such docs file; the docs are at /docs (files: {', '.join(sorted(FILES))})")
    asked = {k.lower(): v for k, v in (request_headers or {}).items()}
    file = _read(name)
    headers = {**HEADERS, "ETag": file.etag}
    if file.etag in (tag.strip().removeprefix("W/") for tag in asked.get("if-none-match", "").split(",")):
        return Response(status_code=304, headers=headers)
    zipped = "gzip" in asked.get("accept-encoding", "")
    if zipped:
        headers["Content-Encoding"] = "gzip"
    return Response(
        status_code=200, content_type=FILES[name][1], body=file.gzipped if zipped else file.content, headers=headers
    )
