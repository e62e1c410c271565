"""What a record of the table's stream asks of its consumers (pure: a new image in, a target out)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from precis.errors import Invalid
from precis.store import keys


@dataclass(frozen=True)
class StreamTarget:
    """`summarize` a session after a message insert (or a step of a long summary job), `purge` the incarnation a
    delete marked, or `copy` what a clone inherited into its own partition."""

    action: str
    workspace: str
    session: str
    incarnation: str | None = None


def stream_target(image: dict[str, Any]) -> StreamTarget:
    """The target of a stream record's new image (as plain values); Invalid for any other item."""
    kind, pk = image.get("kind"), image.get("PK", "")
    if kind == "message" or (kind == "summary" and image.get("job_through_seq")):
        # A message written, or one step of a summary job too large for one request: the next step is due.
        ws, session_id = keys.parse_session_pk(pk)
        return StreamTarget("summarize", ws, session_id)
    if kind == "session" and image.get("deleted_at"):
        return StreamTarget("purge", pk.removeprefix("WS#"), image["id"], image.get("incarnation"))
    if kind == "session" and image.get("base_session"):
        # A clone created (or a step of its copy stored): copy the next messages it inherited.
        return StreamTarget("copy", pk.removeprefix("WS#"), image["id"], image.get("incarnation"))
    raise Invalid(f"stream record is neither a message, a summary step, a deleted session nor a clone: kind={kind!r}")
