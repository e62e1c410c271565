"""`precis import` and `precis export`: conversation files, batches with deterministic Idempotency-Keys, and the
small state file that lets an interrupted import skip what it already stored."""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAX_BATCH = 100  # the API's limit per post
# A post's JSON stays well inside the 6 MB Lambda request (the gateway escapes the body once more inside its event).
MAX_BATCH_BYTES = 2_500_000
ID = re.compile(r"^[a-zA-Z0-9_-]{1,100}$")
# What a Precis message line carries into a post; an export's other fields (id, seq, token_count, ...) are ignored.
MESSAGE_FIELDS = ("content", "peer_id", "metadata", "created_at", "run_id")


class ImportFileError(ValueError):
    """A file that cannot be imported as it stands; says where."""


def parse_peer_map(text: str | None) -> dict[str, str]:
    """`user=alice,assistant=bot` → {"user": "alice", "assistant": "bot"}."""
    mapping: dict[str, str] = {}
    for pair in filter(None, (p.strip() for p in (text or "").split(","))):
        source, sep, target = pair.partition("=")
        if not sep or not source.strip() or not ID.match(target.strip()):
            raise ImportFileError(f"--peer-map: '{pair}' is not role=peer_id (peer ids: letters, digits, _ and -)")
        mapping[source.strip()] = target.strip()
    return mapping


def read_messages(data: bytes, peer_map: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """The messages of a conversation file, as message bodies for the API, in file order.

    Accepted: JSONL of `{peer_id, content, created_at?, run_id?, metadata?}` (what `precis export` writes), and
    JSON or JSONL of OpenAI-style messages (`{"role", "content"}`, peer = role or `peer_map[role]`), alone or in
    `{"messages": [...]}` objects or arrays.
    """
    peer_map = peer_map or {}
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ImportFileError(f"not UTF-8 text (byte {exc.start})") from None
    messages: list[dict[str, Any]] = []
    for where, record in _records(text):
        messages.extend(_messages_of(record, where, peer_map))
    if not messages:
        raise ImportFileError("no messages in the file")
    return messages


def _records(text: str) -> Iterator[tuple[str, Any]]:
    try:
        whole = json.loads(text)
    except ValueError:
        whole = None
    else:  # one JSON document: an array of records, or one record
        for i, record in enumerate(whole if isinstance(whole, list) else [whole]):
            yield f"item {i + 1}", record
        return
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield f"line {number}", json.loads(line)
        except ValueError as exc:
            raise ImportFileError(f"line {number}: not JSON ({exc.msg})") from None


def _messages_of(record: Any, where: str, peer_map: dict[str, str]) -> Iterator[dict[str, Any]]:
    if isinstance(record, list):
        for i, item in enumerate(record):
            yield from _messages_of(item, f"{where}, message {i + 1}", peer_map)
    elif isinstance(record, dict) and isinstance(record.get("messages"), list) and "content" not in record:
        for i, item in enumerate(record["messages"]):
            yield from _messages_of(item, f"{where}, message {i + 1}", peer_map)
    elif isinstance(record, dict) and "peer_id" in record:
        yield _precis_message(record, where, peer_map)
    elif isinstance(record, dict) and "role" in record:
        yield _openai_message(record, where, peer_map)
    else:
        raise ImportFileError(f"{where}: expected {{peer_id, content}}, {{role, content}} or {{messages: [...]}}")


def _peer(name: Any, where: str, peer_map: dict[str, str]) -> str:
    peer = peer_map.get(name, name) if isinstance(name, str) else name
    if not isinstance(peer, str) or not ID.match(peer):
        raise ImportFileError(
            f"{where}: peer '{peer}' is not a valid id (1-100 letters, digits, _ and -); map it with --peer-map"
        )
    return peer


def _precis_message(record: dict[str, Any], where: str, peer_map: dict[str, str]) -> dict[str, Any]:
    if not isinstance(record.get("content"), str):
        raise ImportFileError(f"{where}: content must be a string")
    message = {"content": record["content"], "peer_id": _peer(record["peer_id"], where, peer_map)}
    for name, kind in (("metadata", dict), ("created_at", str), ("run_id", str)):
        value = record.get(name)
        if value in (None, {}):
            continue
        if not isinstance(value, kind):
            raise ImportFileError(f"{where}: {name} must be {'an object' if kind is dict else 'a string'}")
        message[name] = value
    return message


def _openai_message(record: dict[str, Any], where: str, peer_map: dict[str, str]) -> dict[str, Any]:
    content = record.get("content")
    if isinstance(content, list):  # content parts: the text ones, in order
        content = "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    elif content is None:
        content = ""  # e.g. an assistant turn that only calls tools
    if not isinstance(content, str):
        raise ImportFileError(f"{where}: content must be a string or a list of parts")
    return {"content": content, "peer_id": _peer(record["role"], where, peer_map)}


def make_batches(
    messages: list[dict[str, Any]], max_count: int = MAX_BATCH, max_bytes: int = MAX_BATCH_BYTES
) -> list[list[dict[str, Any]]]:
    """Consecutive batches of at most `max_count` messages and about `max_bytes` of JSON; deterministic, so the same
    file always makes the same batches (and the same Idempotency-Keys)."""
    batches: list[list[dict[str, Any]]] = []
    current: list[dict[str, Any]] = []
    size = 0
    for message in messages:
        length = len(json.dumps(message, ensure_ascii=False).encode("utf-8", "surrogatepass")) + 1
        if current and (len(current) == max_count or size + length > max_bytes):
            batches.append(current)
            current, size = [], 0
        current.append(message)
        size += length
    if current:
        batches.append(current)
    return batches


def import_id(data: bytes, peer_map: dict[str, str], batch_size: int) -> str:
    """The identity of one import: the file's content hash with what changes its batches' bodies."""
    digest = hashlib.sha256(data).hexdigest()
    options = json.dumps({"peer_map": peer_map, "batch_size": batch_size}, sort_keys=True)
    return hashlib.sha256(f"{digest}\n{options}".encode()).hexdigest()


def batch_key(import_key: str, index: int) -> str:
    """The Idempotency-Key of batch `index`: a re-run posts the same key, which the service replays."""
    return f"precis-import-{import_key[:40]}-{index}"


def state_dir() -> Path:
    """Where import progress is kept: PRECIS_STATE_DIR, else $XDG_STATE_HOME/precis, else ~/.local/state/precis."""
    if os.environ.get("PRECIS_STATE_DIR"):
        return Path(os.environ["PRECIS_STATE_DIR"])
    base = os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"
    return Path(base) / "precis"


@dataclass
class ImportState:
    """How far one import (file, options) into one session of one service got: batches done, in order, and the
    last message they stored, checked against the service before anything is skipped."""

    path: Path
    done: int = 0
    last_message_id: str | None = None

    @classmethod
    def load(cls, url: str, workspace: str, session: str, import_key: str) -> ImportState:
        name = hashlib.sha256(f"{url}\n{workspace}\n{session}\n{import_key}".encode()).hexdigest()[:32]
        state = cls(state_dir() / "imports" / f"{name}.json")
        try:
            saved = json.loads(state.path.read_text())
            state.done, state.last_message_id = int(saved["done"]), saved.get("last_message_id")
        except (OSError, ValueError, KeyError, TypeError):
            pass  # no state (or unreadable): start from the first batch; the keys still prevent doubles
        return state

    def save(self, done: int, last_message_id: str) -> None:
        self.done, self.last_message_id = done, last_message_id
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"done": done, "last_message_id": last_message_id}))
        os.replace(tmp, self.path)  # a kill mid-write leaves the old state, never half a file

    def forget(self) -> None:
        self.done, self.last_message_id = 0, None


def export_line(message: dict[str, Any]) -> str:
    """One message of `precis export`: the API's message, which `precis import` reads back."""
    return json.dumps(message, ensure_ascii=False)
