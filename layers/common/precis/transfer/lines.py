"""The export format, version 1: JSON Lines, one object a line, `kind` first. The first line is the header
(`precis_export`, the version and the workspace), the last `end` (the lines per kind, so a truncated file is told
apart); between them the peers, then each session (its members and summaries in its line) followed by its messages in
seq order (a deleted message's place as a `forgotten` line), then each collection (its card in its line) followed by
its conclusions, oldest first."""

from __future__ import annotations

import json
from typing import Any

from precis.errors import Invalid
from precis.store.records import json_object

VERSION = 1
HEADER, END = "precis_export", "end"
KINDS = ("peer", "session", "message", "forgotten", "collection", "conclusion")


def dump(line: dict[str, Any]) -> bytes:
    return (json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


def header(workspace: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": HEADER,
        "version": VERSION,
        "workspace": {
            "id": workspace["id"],
            "metadata": json_object(workspace.get("metadata")),
            "configuration": json_object(workspace.get("configuration")),
            "created_at": workspace["created_at"],
        },
    }


def peer(item: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": "peer",
        "id": item["id"],
        "metadata": json_object(item.get("metadata")),
        "configuration": json_object(item.get("configuration")),
        "created_at": item["created_at"],
    }


def session(
    item: dict[str, Any],
    last_seq: int,
    members: list[dict[str, Any]],
    summaries: list[dict[str, Any]],
    derived: dict[str, dict[str, int]],
) -> dict[str, Any]:
    line = {
        "kind": "session",
        "id": item["id"],
        "metadata": json_object(item.get("metadata")),
        "configuration": json_object(item.get("configuration")),
        "is_active": bool(item.get("is_active", True)),
        "created_at": item["created_at"],
        "last_seq": last_seq,  # its messages in this export: 1..last_seq
        "members": [
            {k: m[k] for k in ("peer_id", "joined_at", "observe_me", "observe_others") if k in m} for m in members
        ],
        "summaries": summaries,
        "derived": derived,  # how far the deriver had come through each sender's messages
    }
    if item.get("derive_from") is not None:
        line["derive_from"] = int(item["derive_from"])  # a clone derives from its own point on
    return line


def summary(item: dict[str, Any], parts: list[dict[str, Any]] | None) -> dict[str, Any]:
    fields = ("summary_type", "content", "token_count", "covers_seq", "end_tokens", "message_id", "created_at")
    line = {k: item[k] for k in fields}
    if parts is not None:
        line["parts"] = parts
    return line


def message(view: dict[str, Any]) -> dict[str, Any]:
    line = {"kind": "message"}
    line |= {k: view[k] for k in ("id", "session_id", "peer_id", "seq", "content", "metadata", "created_at")}
    line["token_count"] = view["token_count"]
    if view.get("run_id"):
        line["run_id"] = view["run_id"]
    return line


def forgotten(place: dict[str, Any], session_id: str) -> dict[str, Any]:
    """A deleted message's place in its session (`read_range(gaps=True)`'s placeholder): its seq, the tokens and run
    it spans, and whether the session's own delete made it (`counted`: a clone's inherited ones are not); never its
    id, sender or text."""
    line: dict[str, Any] = {"kind": "forgotten", "session_id": session_id, "seq": place["seq"]}
    line |= {"token_count": int(place.get("gap_tokens", 0)), "start_tokens": place["start_tokens"]}
    line |= {"run_start_seq": place["run_start_seq"], "run_index": place["run_index"]}
    if place.get("run_id"):
        line["run_id"] = place["run_id"]
    line["counted"] = not place.get("gap_copied") and not place.get("inherited")
    return line


def collection(observer: str, observed: str, card: dict[str, Any] | None) -> dict[str, Any]:
    line: dict[str, Any] = {"kind": "collection", "observer_id": observer, "observed_id": observed, "card": None}
    if card is not None and card.get("entries") is not None:
        line["card"] = {k: card[k] for k in ("entries", "counts", "source", "updated_at") if k in card}
    return line


def conclusion(item: dict[str, Any]) -> dict[str, Any]:
    fields = (
        "id",
        "observer_id",
        "observed_id",
        "content",
        "level",
        "created_at",
        "times_derived",
        "source_message_ids",
        "source_at",
        "session_id",
        "source_ids",
    )
    return {"kind": "conclusion", **{k: item[k] for k in fields if item.get(k) is not None}}


def parse(raw: bytes, number: int) -> dict[str, Any]:
    """One line of an upload, as an object with a known kind; Invalid naming the line otherwise."""
    try:
        line = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise Invalid(f"line {number}: not JSON ({exc})") from None
    if not isinstance(line, dict) or line.get("kind") not in (HEADER, END, *KINDS):
        raise Invalid(f"line {number}: an object whose kind is one of {', '.join((HEADER, END, *KINDS))}")
    return line


def require(line: dict[str, Any], number: int, *fields: str) -> None:
    missing = [f for f in fields if f not in line]
    if missing:
        raise Invalid(f"line {number} ({line['kind']}): missing {', '.join(missing)}")
