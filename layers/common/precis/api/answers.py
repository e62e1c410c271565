"""The API's JSON answers: compact UTF-8 JSON, and a Response with an explicit status."""

from __future__ import annotations

import json
from typing import Any

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.shared.json_encoder import Encoder


def to_json(value: Any) -> str:
    """Compact JSON with text as UTF-8: a CJK character costs 3 bytes on the wire, not a 6-byte \\u escape."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), cls=Encoder)
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate has no UTF-8 form: escape it, as ensure_ascii does
            text = json.dumps(value, separators=(",", ":"), cls=Encoder)
    return text


def json_response(status: int, body: Any) -> Response:
    """A JSON answer with an explicit status (201 created vs 200 existing, 202 accepted); a 204 has no body."""
    if status == 204:
        # Not `null`: bytes after a 204's headers are read as the start of the next response on a kept-alive
        # connection.
        return Response(status_code=204, body="")
    return Response(status_code=status, content_type=content_types.APPLICATION_JSON, body=body)
