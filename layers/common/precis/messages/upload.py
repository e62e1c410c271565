"""File upload (`POST …/sessions/{s}/messages/upload`): a multipart form → the file's text → one message batch.

The batch goes through `ingest.create_messages` like any `POST …/messages`, so an upload is stored all or nothing, at
most once per Idempotency-Key. One upload is one batch: a text that needs more than 100 messages is refused (413)
before anything is written, rather than stored as several transactions of which a later one could fail.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import json
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from io import BytesIO
from typing import Any

from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError
from pydantic import ValidationError

from precis.errors import Invalid, TooLarge, UnsupportedMediaType
from precis.messages.split import split_text
from precis.schemas import ID_MAX, ID_PATTERN, MAX_BATCH
from precis.schemas.bodies import MessageBatch, MessageIn, UploadFields

# The file, base64-encoded by API Gateway (4/3) with the form around it, stays inside Lambda's 6 MB event.
MAX_FILE_BYTES = 4 * 1024 * 1024
MAX_FORM_BYTES = MAX_FILE_BYTES + 256 * 1024  # the other fields (metadata, configuration) and the parts' headers
TEXT_TYPES = ".txt .text .md .markdown .rst .csv .tsv .log .jsonl .ndjson"
SUPPORTED = "text (text/*), Markdown (text/markdown), JSON (application/json) or PDF (application/pdf)"

# The request body as OpenAPI describes it (the route reads the form itself, not through Powertools' JSON body).
OPENAPI_BODY = {
    "required": True,
    "content": {
        "multipart/form-data": {
            "schema": {
                "type": "object",
                "required": ["file", "peer_id"],
                "properties": {
                    "file": {
                        "type": "string",
                        "format": "binary",
                        "description": f"{SUPPORTED}, at most {MAX_FILE_BYTES} bytes",
                    },
                    "peer_id": {"type": "string", "minLength": 1, "maxLength": ID_MAX, "pattern": ID_PATTERN},
                    "metadata": {"type": "object", "description": "given to every message"},
                    "configuration": {"type": "object"},
                    "created_at": {"type": "string", "format": "date-time"},
                },
            },
            # An object part is JSON text (OpenAPI's default for a multipart object, and what the SDK sends).
            "encoding": {
                "file": {"contentType": "text/plain, text/markdown, application/json, application/pdf"},
                "metadata": {"contentType": "application/json"},
                "configuration": {"contentType": "application/json"},
            },
        }
    },
}


@dataclass(frozen=True)
class UploadedFile:
    content: bytes
    media_type: str  # the part's declared type, lower case, without parameters (text/plain when it names none)
    charset: str | None
    filename: str | None


@dataclass(frozen=True)
class UploadForm:
    fields: UploadFields
    file: UploadedFile


def read_form(body: str | None, is_base64: bool | None, content_type: str | None) -> UploadForm:
    """The upload's form as API Gateway delivers it (multipart, base64-encoded): 415 unless multipart/form-data, 413
    over the size limits, 422 (naming the field) when a field is missing or invalid."""
    media = (content_type or "").split(";")[0].strip().lower()
    if media != "multipart/form-data":
        raise UnsupportedMediaType(
            f"Content-Type: multipart/form-data expected (fields file, peer_id, metadata, "
            f"configuration, created_at), got {media or 'none'}"
        )
    raw = _body_bytes(body, is_base64)
    if len(raw) > MAX_FORM_BYTES:
        raise TooLarge(
            f"body: at most {MAX_FORM_BYTES} bytes (a file of at most {MAX_FILE_BYTES} bytes and its "
            f"fields), got {len(raw)}"
        )
    texts, file = _parts(raw, content_type or "")
    errors: list[dict[str, Any]] = []
    try:
        fields = UploadFields.model_validate(texts)
    except ValidationError as exc:
        errors += [{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False, include_input=False)]
    if file is None:
        errors.append({"loc": ("body", "file"), "msg": "Field required", "type": "missing"})
    if errors or file is None:  # (a missing file is one of the errors)
        raise RequestValidationError(errors)
    if len(file.content) > MAX_FILE_BYTES:
        raise TooLarge(f"file: at most {MAX_FILE_BYTES} bytes (4 MiB), got {len(file.content)}")
    return UploadForm(fields, file)


def _body_bytes(body: str | None, is_base64: bool | None) -> bytes:
    if not body:
        return b""
    try:
        return base64.b64decode(body, validate=True) if is_base64 else body.encode("utf-8")
    except (binascii.Error, UnicodeEncodeError):
        raise Invalid("body: not a readable multipart/form-data body (bad base64 or text encoding)") from None


def _parts(raw: bytes, content_type: str) -> tuple[dict[str, str], UploadedFile | None]:
    """The form's text fields and its file, read with the standard library's MIME parser (bytes kept exactly)."""
    if "\r" in content_type or "\n" in content_type:
        raise Invalid("Content-Type: a single header line expected")
    from email import policy  # here, not at import: ~3 ms of the ingest function's cold start for a rare route
    from email.parser import BytesParser

    head = f"Content-Type: {content_type}\r\n\r\n".encode("utf-8", "replace")
    message = BytesParser(policy=policy.HTTP).parsebytes(head + raw)
    if not message.is_multipart() or message.defects:
        found = ", ".join(type(d).__name__ for d in message.defects) or "no parts"
        raise Invalid(f"body: not a complete multipart/form-data body ({found})")
    texts: dict[str, str] = {}
    file: UploadedFile | None = None
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        data = None if part.is_multipart() else part.get_payload(decode=True)
        # (a part that is not multipart decodes to bytes)
        if not isinstance(name, str) or not name or not isinstance(data, bytes) or part.defects:
            raise Invalid('body: every part needs a Content-Disposition with a name (form-data; name="...")')
        if name == "file":
            if file is not None:
                raise Invalid("file: one file per upload, got several")
            file = UploadedFile(data, part.get_content_type().lower(), part.get_content_charset(), part.get_filename())
            continue
        if name in texts:
            raise Invalid(f"{name}: given more than once")
        try:
            texts[name] = data.decode("utf-8")
        except UnicodeDecodeError:
            raise Invalid(f"{name}: not valid UTF-8 text") from None
    return texts, file


def to_batch(
    form: UploadForm, max_message_chars: int, *, deadline: float, clock: Callable[[], float] = time.monotonic
) -> MessageBatch:
    """The file's text as consecutive messages of at most `max_message_chars` (415 for a type Precis does not read,
    422 for a corrupt or empty file, 413 when it needs more than one batch or cannot be read by `deadline`)."""
    limit = MAX_BATCH * max_message_chars
    kind = file_kind(form.file)
    text = (
        pdf_text(form.file.content, deadline=deadline, clock=clock, max_chars=2 * limit)
        if kind == "pdf"
        else _decoded(form.file, kind)
    )
    pieces = split_text(text, max_message_chars)
    if not pieces:
        raise Invalid("file: holds no text" + (" (a scanned PDF's images are not read)" if kind == "pdf" else ""))
    if len(pieces) > MAX_BATCH:
        raise TooLarge(
            f"file: its text ({len(text)} characters) needs {len(pieces)} messages of at most "
            f"{max_message_chars} characters; one upload stores at most {MAX_BATCH} (split the file)"
        )
    f = form.fields
    return MessageBatch(
        messages=[
            MessageIn(
                content=piece,
                peer_id=f.peer_id,
                metadata=f.metadata,
                configuration=f.configuration,
                created_at=f.created_at,
            )
            for piece in pieces
        ]
    )


def file_kind(file: UploadedFile) -> str:
    """What the file holds ("text", "json" or "pdf"): its part's declared type, or when that says nothing
    (application/octet-stream) its name's extension or the PDF signature; else 415."""
    media, name = file.media_type, (file.filename or "").lower()
    extension = name[name.rfind(".") :] if "." in name else ""
    if media == "application/pdf":
        return "pdf"
    if media == "application/json" or media.endswith("+json"):
        return "json"
    if media.startswith("text/"):
        return "text"
    if media in ("application/octet-stream", "binary/octet-stream"):
        if extension == ".pdf" or file.content.startswith(b"%PDF-"):
            return "pdf"
        if extension == ".json":
            return "json"
        if extension and extension in TEXT_TYPES.split():
            return "text"
    raise UnsupportedMediaType(
        f"file: unsupported type '{media}'{f' ({file.filename})' if file.filename else ''}; upload {SUPPORTED}"
    )


def _decoded(file: UploadedFile, kind: str) -> str:
    """A text or JSON file's text: UTF-8 (a BOM is dropped) unless the part names another charset."""
    charset = file.charset or "utf-8"
    try:
        codec = codecs.lookup(charset)
    except LookupError:
        raise UnsupportedMediaType(f"file: unknown charset '{charset}'") from None
    try:
        text = file.content.decode("utf-8-sig" if codec.name == "utf-8" else codec.name)
    except UnicodeDecodeError as exc:
        raise Invalid(
            f"file: not valid {codec.name} text (byte {exc.start}); send UTF-8 or name the charset "
            f"(text/plain; charset=...)"
        ) from None
    if "\x00" in text:
        raise Invalid(f"file: holds NUL characters, so it is not text; upload {SUPPORTED}")
    if kind == "json":
        try:
            json.loads(text)
        except RecursionError:
            raise Invalid("file: JSON nests too deeply to read") from None
        except ValueError as exc:
            raise Invalid(f"file: not valid JSON ({exc})") from None
    return text


def pdf_text(content: bytes, *, deadline: float, max_chars: int, clock: Callable[[], float] = time.monotonic) -> str:
    """The text of the pages, in page order, each a paragraph of its own (pypdf, imported here only); 422 for a
    damaged or password-protected file, 413 past `max_chars` or `deadline`."""
    from pypdf import PdfReader

    with _unreadable("the PDF"):
        pages = PdfReader(BytesIO(content), strict=False).pages
        count = len(pages)
    texts, total = [], 0
    for number in range(count):
        if clock() > deadline:
            raise TooLarge(
                f"file: reading the PDF's {count} pages takes longer than a request may (stopped at page "
                f"{number + 1}); upload fewer pages at a time"
            )
        with _unreadable(f"page {number + 1} of the PDF"):
            text = pages[number].extract_text() or ""
        total += len(text)
        if total > max_chars:
            raise TooLarge(f"file: the PDF holds more than {max_chars} characters of text; upload fewer pages")
        if text.strip():  # a lone surrogate (from a broken font map) becomes "?"
            texts.append(text.strip().encode("utf-8", "replace").decode("utf-8"))
    return "\n\n".join(texts)


@contextmanager
def _unreadable(what: str):
    """pypdf's many ways of failing on a damaged file (PdfReadError, ValueError, KeyError, ...) as a 422."""
    from pypdf.errors import FileNotDecryptedError

    try:
        yield
    except FileNotDecryptedError:
        raise Invalid("file: the PDF is encrypted with a password") from None
    except Exception as exc:
        raise Invalid(f"file: {what} cannot be read ({_reason(exc)})") from None


def _reason(exc: Exception) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text if len(text) <= 200 else text[:199] + "…"
