"""File upload (docs/design.md, "File upload"): POST …/messages/upload turns a text, Markdown, JSON or PDF file
into consecutive messages of one batch — split where a reader would, stored all or nothing, at most once per
Idempotency-Key."""

from __future__ import annotations

import base64
import io
import json
import os
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from precis.errors import Invalid, TooLarge, UnsupportedMediaType
from precis.messages import upload
from precis.messages.split import LEVELS, split_text
from precis.settings import get_settings
from tests.handlers import Form, call, http_event

W = "/v3/workspaces/ws1"
S = f"{W}/sessions/s1"
UPLOAD = f"{S}/messages/upload"


# ---------------------------------------------------------------- the splitter (pure)


def _spans(text: str, pieces: list[str]) -> list[tuple[int, int]]:
    """Where each piece lies in `text`, in order, asserting that only whitespace lies between (and around) them."""
    spans, at = [], 0
    for piece in pieces:
        start = text.index(piece, at)
        assert text[at:start].strip() == "", (text[at:start], piece)
        spans.append((start, start + len(piece)))
        at = start + len(piece)
    assert text[at:].strip() == ""
    return spans


WORDS = st.text(alphabet='abcdeé你 \t\n.!?。"', max_size=300)


@settings(max_examples=300, deadline=None)
@given(text=WORDS, limit=st.integers(1, 40))
def test_pieces_rejoin_to_the_text_each_within_the_limit(text, limit):
    pieces = split_text(text, limit)
    assert all(1 <= len(p) <= limit and p == p.strip() for p in pieces)
    _spans(text, pieces)  # in order, nothing but whitespace left out
    assert "".join("".join(pieces).split()) == "".join(text.split())


@settings(max_examples=200, deadline=None)
@given(
    paragraphs=st.lists(
        st.text(alphabet="ab .\n", min_size=1, max_size=30)
        .map(str.strip)
        .filter(lambda p: p and not re.search(r"\n[^\S\n]*\n", p)),
        min_size=1,
        max_size=12,
    ),
    limit=st.integers(30, 80),
)
def test_paragraphs_that_fit_are_never_cut_and_pieces_are_packed(paragraphs, limit):
    text = "\n\n".join(paragraphs)
    pieces = split_text(text, limit)
    starts, ends, at = set(), set(), 0
    for paragraph in paragraphs:
        at = text.index(paragraph, at)
        starts.add(at)
        ends.add(at + len(paragraph))
        at += len(paragraph)
    spans = _spans(text, pieces)
    assert all(start in starts and end in ends for start, end in spans)  # cuts fall between paragraphs only
    for (start, _), (_, end) in zip(spans, spans[1:]):
        assert end - start > limit  # greedy: no two neighbours would have fit in one message


def test_a_long_paragraph_is_cut_between_sentences_then_lines_then_words_then_anywhere():
    assert [name for name, _ in LEVELS] == ["paragraph", "sentence", "line", "word"]
    sentences = "One two three. Four five six! Seven eight? Nine."
    assert split_text(f"Short.\n\n{sentences}", 30) == ["Short.", "One two three. Four five six!", "Seven eight? Nine."]
    assert split_text('He said "go." Then left.', 14) == ['He said "go."', "Then left."]
    assert split_text("你好。世界！再见。", 6) == ["你好。世界！", "再见。"]
    assert split_text("a line\nand another line", 16) == ["a line", "and another line"]
    assert split_text("alpha beta gamma", 11) == ["alpha beta", "gamma"]
    assert split_text("x" * 25, 10) == ["x" * 10, "x" * 10, "x" * 5]
    assert split_text(" \n\t ", 5) == [] and split_text("", 5) == []


# ---------------------------------------------------------------- reading the form


@settings(max_examples=60, deadline=None)
@given(
    content=st.binary(max_size=2000),
    peer=st.from_regex(r"[a-zA-Z0-9_-]{1,20}", fullmatch=True),
    metadata=st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=10), max_size=4),
)
def test_the_form_is_read_byte_for_byte_as_the_sdk_encodes_it(content, peer, metadata):
    data, content_type = Form(
        {"peer_id": peer, "metadata": json.dumps(metadata)}, {"file": ("f.pdf", content, "application/pdf")}
    ).encode()
    form = upload.read_form(base64.b64encode(data).decode(), True, content_type)
    assert form.file.content == content and form.file.media_type == "application/pdf"
    assert form.file.filename == "f.pdf"
    assert form.fields.peer_id == peer and form.fields.metadata == metadata


def _multipart(*parts: tuple[str, bytes]) -> tuple[str, str]:
    """A form of these (headers, content) parts, base64-encoded as API Gateway delivers it."""
    body = b"".join(b"--B\r\n" + headers.encode() + b"\r\n\r\n" + content + b"\r\n" for headers, content in parts)
    return base64.b64encode(body + b"--B--\r\n").decode(), "multipart/form-data; boundary=B"


PEER = ('Content-Disposition: form-data; name="peer_id"', b"alice")
FILE = ('Content-Disposition: form-data; name="file"; filename="a.txt"\r\nContent-Type: text/plain', b"hi")


def test_a_malformed_form_is_refused_with_what_is_wrong():
    from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError

    body, content_type = _multipart(PEER, FILE)
    assert upload.read_form(body, True, content_type).file.content == b"hi"
    with pytest.raises(UnsupportedMediaType, match="multipart/form-data expected"):
        upload.read_form(body, True, "application/json")
    raw = base64.b64decode(body)
    with pytest.raises(Invalid, match="not a complete multipart"):
        upload.read_form(base64.b64encode(raw[:-12]).decode(), True, content_type)  # cut short
    with pytest.raises(Invalid, match="not a complete multipart"):
        upload.read_form(body, True, "multipart/form-data")  # no boundary
    with pytest.raises(Invalid, match="bad base64"):
        upload.read_form("not base64!", True, content_type)
    with pytest.raises(Invalid, match="one file per upload"):
        upload.read_form(_multipart(PEER, FILE, FILE)[0], True, content_type)
    with pytest.raises(Invalid, match="peer_id: given more than once"):
        upload.read_form(_multipart(PEER, PEER, FILE)[0], True, content_type)
    with pytest.raises(Invalid, match="peer_id: not valid UTF-8"):
        upload.read_form(_multipart((PEER[0], b"\xff"), FILE)[0], True, content_type)
    with pytest.raises(Invalid, match="needs a Content-Disposition with a name"):
        upload.read_form(_multipart(("Content-Type: text/plain", b"x"), PEER, FILE)[0], True, content_type)

    fields = [
        (f'Content-Disposition: form-data; name="{name}"', value.encode())
        for name, value in (("peer_id", "bad id"), ("surprise", "1"), ("metadata", "[1]"))
    ]
    with pytest.raises(RequestValidationError) as refused:
        upload.read_form(_multipart(*fields)[0], True, content_type)
    locs = sorted(tuple(e["loc"]) for e in refused.value.errors())
    assert locs == [("body", "file"), ("body", "metadata"), ("body", "peer_id"), ("body", "surprise")]


def test_the_file_kind_comes_from_its_type_or_else_its_name():
    def kind(media, name="f", content=b"x"):
        return upload.file_kind(upload.UploadedFile(content, media, None, name))

    assert kind("text/plain") == kind("text/markdown") == kind("text/csv") == "text"
    assert kind("application/json") == kind("application/ld+json") == "json"
    assert kind("application/pdf") == kind("application/octet-stream", "r.PDF") == "pdf"
    assert kind("application/octet-stream", "notes", b"%PDF-1.7 ...") == "pdf"
    assert kind("application/octet-stream", "notes.md") == kind("application/octet-stream", "x.txt") == "text"
    assert kind("application/octet-stream", "x.json") == "json"
    for media, name in (("image/png", "a.png"), ("application/zip", "a.zip"), ("application/octet-stream", "a.bin")):
        with pytest.raises(UnsupportedMediaType, match=f"unsupported type '{media}'"):
            kind(media, name)


# ---------------------------------------------------------------- PDFs


def make_pdf(pages: list[list[str]], password: str | None = None) -> bytes:
    """A real PDF whose pages show these lines in Helvetica (written with pypdf, as the upload reads it)."""
    from pypdf import PdfWriter
    from pypdf.generic import DecodedStreamObject, DictionaryObject, NameObject

    writer = PdfWriter()
    font = DictionaryObject(
        {
            NameObject("/Type"): NameObject("/Font"),
            NameObject("/Subtype"): NameObject("/Type1"),
            NameObject("/BaseFont"): NameObject("/Helvetica"),
            NameObject("/Encoding"): NameObject("/WinAnsiEncoding"),
        }
    )
    for lines in pages:
        page = writer.add_blank_page(612, 792)
        page[NameObject("/Resources")] = DictionaryObject(
            {NameObject("/Font"): DictionaryObject({NameObject("/F1"): font})}
        )
        shown = " ".join(
            "(" + line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") + ") Tj T*" for line in lines
        )
        stream = DecodedStreamObject()
        stream.set_data(f"BT /F1 12 Tf 14 TL 72 720 Td {shown} ET".encode("latin-1"))
        page.replace_contents(stream)
    if password:
        writer.encrypt(password, algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def test_a_pdf_is_read_page_by_page_in_order():
    data = make_pdf([["Page one. It opens."], [], ["Page three (the last)."]])
    assert upload.pdf_text(data, deadline=float("inf"), max_chars=10_000) == (
        "Page one. It opens.\n\nPage three (the last)."
    )


def test_a_pdf_too_slow_or_too_long_to_read_is_413_and_a_damaged_one_422():
    data = make_pdf([[f"page {i}"] for i in range(5)])
    ticks = iter(range(100))
    with pytest.raises(TooLarge, match="stopped at page 3"):
        upload.pdf_text(data, deadline=1.5, max_chars=10_000, clock=lambda: next(ticks))
    with pytest.raises(TooLarge, match="more than 20 characters"):
        upload.pdf_text(data, deadline=float("inf"), max_chars=20)
    with pytest.raises(Invalid, match="encrypted with a password"):
        upload.pdf_text(make_pdf([["secret"]], password="pw"), deadline=float("inf"), max_chars=10_000)
    for broken in (b"%PDF-1.4\nnot really", data[: len(data) // 2], b""):
        with pytest.raises(Invalid, match="cannot be read"):
            upload.pdf_text(broken, deadline=float("inf"), max_chars=10_000)


# A fresh interpreter with the tests' environment and moto: uploads a text file, then a PDF, through the real
# handler, and says after each whether pypdf is loaded.
_UPLOADS = """
import json, sys
import tests.conftest  # the tests' environment (fake credentials, the template's table and bucket), before boto3
import boto3
from moto import mock_aws
from local import moto_patches
from local.template import create_resources, template
from tests.handlers import Form, call

moto_patches.install()
seen = {"at start": "pypdf" in sys.modules}
with mock_aws():
    clients = {name: boto3.client(name) for name in ("dynamodb", "s3", "sqs")}
    create_resources(template(), clients["dynamodb"], clients["s3"], clients["sqs"])
    assert call("POST", "/v3/workspaces", {"id": "ws1"}).status == 201
    assert call("POST", "/v3/workspaces/ws1/sessions", {"id": "s1", "peers": {"alice": {}}}).status == 201
    for name, media in (("notes.txt", "text/plain"), ("a.pdf", "application/pdf")):
        form = Form({"peer_id": "alice"}, {"file": (name, open(sys.argv[1] + name, "rb").read(), media)})
        reply = call("POST", "/v3/workspaces/ws1/sessions/s1/messages/upload", form)
        seen[name] = [reply.status, reply.body, "pypdf" in sys.modules]
print(json.dumps(seen))
"""


def test_pypdf_is_imported_only_when_a_pdf_is_uploaded(tmp_path):
    import subprocess
    import sys

    from local.template import ROOT

    (tmp_path / "notes.txt").write_bytes(b"Plain notes.")
    (tmp_path / "a.pdf").write_bytes(make_pdf([["A page of text."]]))
    path = os.pathsep.join(str(ROOT / p) for p in (".", "layers/common", "cli"))
    done = subprocess.run(
        [sys.executable, "-c", _UPLOADS, f"{tmp_path}/"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": path},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["at start"] is False, seen
    (text_status, text_body, after_text), (pdf_status, pdf_body, after_pdf) = seen["notes.txt"], seen["a.pdf"]
    assert (text_status, after_text) == (201, False), seen  # a text file's upload never loads pypdf
    assert [m["content"] for m in text_body] == ["Plain notes."]
    assert (pdf_status, after_pdf) == (201, True), seen  # a PDF's does
    assert [m["content"] for m in pdf_body] == ["A page of text."]


# ---------------------------------------------------------------- the route, in process


def _scan(aws) -> list:
    return sorted(aws["dynamodb"].scan(TableName="precis-local")["Items"], key=lambda i: (i["PK"]["S"], i["SK"]["S"]))


def _objects(aws) -> list[str]:
    return [o["Key"] for o in aws["s3"].list_objects_v2(Bucket=get_settings().bucket_name).get("Contents", [])]


@pytest.fixture
def session(aws, monkeypatch):
    """ws1 with session s1 (member alice); messages of at most 60 characters."""
    monkeypatch.setenv("PRECIS_MAX_MESSAGE_CHARS", "60")
    get_settings.cache_clear()
    assert call("POST", "/v3/workspaces", {"id": "ws1"}).status == 201
    assert call("POST", f"{W}/sessions", {"id": "s1", "peers": {"alice": {}}}).status == 201
    return aws


def _file(content: bytes, name: str = "notes.txt", media: str = "text/plain", **fields) -> Form:
    return Form({"peer_id": "alice", **fields}, {"file": (name, content, media)})


ESSAY = (
    "Lisbon sits on seven hills. Its light is famous.\n\n"
    "Trams climb the hills all day. The 28 is the oldest line, and the busiest by far.\n\n"
    "Fado started in Alfama."
)


def test_a_text_file_becomes_consecutive_messages_split_at_paragraphs_then_sentences(session):
    reply = call(
        "POST", UPLOAD, _file(ESSAY.encode(), metadata='{"source": "essay"}', created_at="2025-03-01T10:00:00+00:00")
    )
    assert reply.status == 201, reply.body
    assert [m["content"] for m in reply.body] == [
        "Lisbon sits on seven hills. Its light is famous.",
        "Trams climb the hills all day.",
        "The 28 is the oldest line, and the busiest by far.",
        "Fado started in Alfama.",
    ]
    posted = call("POST", f"{S}/messages", {"messages": [{"content": "after", "peer_id": "alice"}]}).body[0]
    assert list(reply.body[0]) == list(posted)  # the Message shape of POST …/messages
    assert [m["seq"] for m in reply.body] == [1, 2, 3, 4] and posted["seq"] == 5
    assert all(
        m["metadata"] == {"source": "essay"}
        and m["peer_id"] == "alice"
        and m["token_count"] > 0
        and m["created_at"] == "2025-03-01T10:00:00+00:00"
        for m in reply.body
    )
    listed = call("POST", f"{S}/messages/list").body["items"]
    assert [m["id"] for m in listed[:4]] == [m["id"] for m in reply.body]


def test_markdown_json_and_pdf_files_are_read(session):
    markdown = b"# Notes\n\nFirst point.\n\n- a list item\n- another"
    reply = call("POST", UPLOAD, _file(markdown, "notes.md", "application/octet-stream"))  # the SDK's guess failed
    assert reply.status == 201 and [m["content"] for m in reply.body] == [markdown.decode()]

    document = b'{"name": "alice",\n "city": "Lisbon"}'
    reply = call("POST", UPLOAD, _file(document, "a.json", "application/json"))
    assert reply.status == 201 and [m["content"] for m in reply.body] == [document.decode()]  # as uploaded

    pdf = make_pdf([["Page one says hello."], ["Page two says goodbye."]])
    reply = call("POST", UPLOAD, _file(pdf, "a.pdf", "application/pdf"))
    assert reply.status == 201 and [m["content"] for m in reply.body] == [
        "Page one says hello.\n\nPage two says goodbye."
    ]

    reply = call("POST", UPLOAD, _file(b"Notes.", "r\u00e9sum\u00e9 \u7b80\u5386.md", "application/octet-stream"))
    assert reply.status == 201 and reply.body[0]["content"] == "Notes."  # a non-ASCII name, as httpx sends it

    latin = "Café au lait.".encode("latin-1")
    reply = call("POST", UPLOAD, _file(latin, "a.txt", "text/plain; charset=latin-1"))
    assert reply.status == 201 and reply.body[0]["content"] == "Café au lait."


def test_an_upload_larger_than_one_batch_is_413_and_writes_nothing(session):
    before, objects = _scan(session), _objects(session)
    long = "Paragraph {} is here, and too long to share a message."  # over 30 characters: one a message
    text = "\n\n".join(long.format(i) for i in range(101))  # one more than a batch
    reply = call("POST", UPLOAD, _file(text.encode()))
    assert reply.status == 413 and "needs 101 messages" in reply.body["detail"], reply.body
    assert _scan(session) == before and _objects(session) == objects
    reply = call("POST", UPLOAD, _file("\n\n".join(long.format(i) for i in range(100)).encode()))
    assert reply.status == 201 and len(reply.body) == 100


BAD = [
    ("too large", _file(b"x" * (upload.MAX_FILE_BYTES + 1)), S, 413, "at most 4194304 bytes"),
    ("an image", _file(b"\x89PNG\r\n", "a.png", "image/png"), S, 415, "unsupported type 'image/png'"),
    ("a zip named .txt", _file(b"PK\x03\x04\xff\xfe", "a.txt", "text/plain"), S, 422, "not valid utf-8 text"),
    ("a corrupt PDF", _file(b"%PDF-1.4 garbage", "a.pdf", "application/pdf"), S, 422, "cannot be read"),
    ("a PDF without text", _file(make_pdf([[], []]), "a.pdf", "application/pdf"), S, 422, "holds no text"),
    ("invalid JSON", _file(b'{"a": ', "a.json", "application/json"), S, 422, "not valid JSON"),
    ("an empty file", _file(b"  \n"), S, 422, "holds no text"),
    ("no peer_id", Form({}, {"file": ("a.txt", b"hi", "text/plain")}), S, 422, "peer_id"),
    ("no file", Form({"peer_id": "alice"}, {}), S, 422, "file"),
    ("bad metadata", _file(b"hi", metadata="[1, 2]"), S, 422, "metadata"),
    ("bad created_at", _file(b"hi", created_at="yesterday"), S, 422, "created_at"),
    ("an unknown session", _file(b"hi"), f"{W}/sessions/nope", 404, "session 'nope' not found"),
    ("an unknown workspace", _file(b"hi"), "/v3/workspaces/nope/sessions/s1", 404, "not found"),
]


@pytest.mark.parametrize(("case", "form", "session_path", "status", "says"), BAD, ids=[c[0] for c in BAD])
def test_a_bad_upload_says_what_is_wrong_and_writes_nothing(session, case, form, session_path, status, says):
    before, objects = _scan(session), _objects(session)
    reply = call("POST", f"{session_path}/messages/upload", form)
    assert reply.status == status, reply.body
    assert says.lower() in json.dumps(reply.body).lower(), reply.body
    assert _scan(session) == before and _objects(session) == objects


def test_a_deleted_session_is_404(session):
    assert call("DELETE", S).status == 202
    before, objects = _scan(session), _objects(session)
    reply = call("POST", UPLOAD, _file(b"hi"))
    assert reply.status == 404 and "session 's1'" in reply.body["detail"], reply.body
    assert _scan(session) == before and _objects(session) == objects  # nothing stored


def test_a_body_that_is_not_a_form_is_415_and_json_routes_still_read_json(session):
    reply = call("POST", UPLOAD, {"messages": [{"content": "hi", "peer_id": "alice"}]})
    assert reply.status == 415 and "multipart/form-data expected" in reply.body["detail"]
    form = _file(b"hi")
    reply = call("POST", f"{S}/messages", form)  # a form sent to a JSON route is read as JSON: 422, not a crash
    assert reply.status == 422 and reply.body["detail"][0]["type"] == "json_invalid"


def test_an_idempotency_key_replays_the_upload_without_writing_twice(session):
    key = {"Idempotency-Key": "upload-1"}
    first = call("POST", UPLOAD, _file(ESSAY.encode()), headers=key)
    assert first.status == 201 and len(first.body) == 4
    stored = _scan(session)
    again = call("POST", UPLOAD, _file(ESSAY.encode()), headers=key)
    assert (again.status, again.body) == (first.status, first.body)
    assert _scan(session) == stored
    other = call("POST", UPLOAD, _file(b"Another file."), headers=key)
    assert other.status == 409 and "different request body" in other.body["detail"]
    assert call("POST", f"{S}/messages/list").body["total"] == 4


def test_the_local_gateway_hands_a_multipart_body_over_base64_encoded_like_api_gateway():
    from local.gateway import build_event
    from local.template import template

    route = next(r for r in template().routes if r.path.endswith("/messages/upload"))
    data, content_type = _file(b"plain ascii").encode()
    event = build_event("POST", UPLOAD, [("Content-Type", content_type)], data, route, {}, "127.0.0.1", "HTTP/1.1")
    assert event["isBase64Encoded"] is True and base64.b64decode(event["body"]) == data
    json_event = build_event(
        "POST", UPLOAD, [("Content-Type", "application/json")], b"{}", route, {}, "127.0.0.1", "HTTP/1.1"
    )
    assert json_event["isBase64Encoded"] is False and json_event["body"] == "{}"


def test_an_upload_event_at_the_file_limit_fits_lambdas_6_mb():
    from local.worker import MAX_EVENT_BYTES

    form = _file(b"x" * upload.MAX_FILE_BYTES, metadata=json.dumps({f"k{i}": "v" * 500 for i in range(100)}))
    _, event = http_event("POST", UPLOAD, form)
    assert len(json.dumps(event).encode()) < MAX_EVENT_BYTES


# ---------------------------------------------------------------- the honcho-ai SDK on the local stack

STACK_ENV = {"PRECIS_MAX_MESSAGE_CHARS": "100"}


@pytest.mark.stack
def test_the_sdk_uploads_text_and_pdf_files_unchanged(stack):
    from honcho import Honcho
    from honcho.http.exceptions import APIError

    client = Honcho(base_url=stack.url, api_key="local", workspace_id="sdk-upload")
    alice = client.peer("alice")
    session = client.session("docs")
    made = session.upload_file(
        ("essay.txt", ESSAY.encode(), "text/plain"),
        alice,
        metadata={"source": "essay"},
        created_at="2025-03-01T10:00:00+00:00",
    )
    assert [m.content for m in made] == [
        "Lisbon sits on seven hills. Its light is famous.",
        "Trams climb the hills all day. The 28 is the oldest line, and the busiest by far.",
        "Fado started in Alfama.",
    ]
    assert all(m.peer_id == "alice" and m.metadata == {"source": "essay"} and m.token_count > 0 for m in made)
    assert made[0].created_at.year == 2025

    pdf = io.BytesIO(make_pdf([["Page one says hello."], ["Page two says goodbye."]]))
    pdf.name = "pages.pdf"  # a file object: the SDK guesses application/pdf from the name
    (page,) = session.upload_file(pdf, "alice")
    assert page.content == "Page one says hello.\n\nPage two says goodbye."
    assert [m.id for m in session.messages()] == [m.id for m in made] + [page.id]

    with pytest.raises(APIError) as refused:
        session.upload_file(("photo.png", b"\x89PNG\r\n", "image/png"), alice)
    assert refused.value.status == 415 and "image/png" in str(refused.value.body)


@pytest.mark.stack
def test_the_async_sdk_uploads_a_file(stack):
    import asyncio

    from honcho import Honcho

    async def flow():
        client = Honcho(base_url=stack.url, api_key="local", workspace_id="sdk-upload-aio")
        session = await client.aio.session("docs")
        made = await session.aio.upload_file(("notes.md", b"# Notes\n\nOne point.", "text/markdown"), "bob")
        return [m.content for m in made], [m.content async for m in await session.aio.messages()]

    uploaded, listed = asyncio.run(flow())
    assert uploaded == listed == ["# Notes\n\nOne point."]


def test_the_openapi_document_describes_the_form_so_it_can_be_fuzzed(session):
    from precis.api.app import openapi_document
    from precis.schemas import ID_MAX, ID_PATTERN
    from precis.schemas.bodies import UploadFields

    operation = openapi_document()["paths"]["/v3/workspaces/{workspace_id}/sessions/{session_id}/messages/upload"][
        "post"
    ]
    form = operation["requestBody"]["content"]["multipart/form-data"]
    schema = form["schema"]
    # The fields the route reads, each described, none missing and none made up; required as the route requires.
    assert set(schema["properties"]) == {"file", *UploadFields.model_fields}
    assert schema["required"] == ["file", *(n for n, f in UploadFields.model_fields.items() if f.is_required())]
    assert schema["properties"]["peer_id"] == {
        "type": "string",
        "minLength": 1,
        "maxLength": ID_MAX,
        "pattern": ID_PATTERN,
    }
    file = schema["properties"]["file"]
    assert (file["type"], file["format"]) == ("string", "binary")
    assert upload.SUPPORTED in file["description"] and f"at most {upload.MAX_FILE_BYTES} bytes" in file["description"]
    assert form["encoding"]["metadata"] == form["encoding"]["configuration"] == {"contentType": "application/json"}
    # Each file type the document names is one the route reads, with the other parts encoded as it says.
    samples = {
        "text/plain": b"Plain notes.",
        "text/markdown": b"# Notes",
        "application/json": b'{"a": 1}',
        "application/pdf": make_pdf([["A page of text."]]),
    }
    named = form["encoding"]["file"]["contentType"].split(", ")
    assert set(named) == set(samples)
    for media in named:
        reply = call("POST", UPLOAD, _file(samples[media], "upload", media, metadata='{"via": "the document"}'))
        assert reply.status == 201, (media, reply.body)
        assert [m["metadata"] for m in reply.body] == [{"via": "the document"}], media
    assert {p["name"] for p in operation["parameters"]} == {"workspace_id", "session_id", "idempotency-key"}
