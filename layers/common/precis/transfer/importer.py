"""An import's step: the whole lines of one range of the upload, written in order; the job's position is the byte
offset after the last line written (and the line's number, for errors).

A step run again writes nothing twice: a peer, session or conclusion already there is left alone, members,
summaries and cards are put as they are, and a session's messages up to its stored tail are skipped (an imported
message's id encodes its seq, so it can only be stored at that seq). Messages go through the message write path
(`messages.ingest.store_batch`: the seq, token offsets, runs and the search index as a post makes them). A session's
line comes before its messages and brings its summaries and the deriver's cursors: the summarizer and the deriver,
woken by the imported messages, go on from where the exported workspace's stood (conclusions, cards and summaries
come from the export, never derived again).
"""

from __future__ import annotations

from typing import Any

from precis.errors import Invalid
from precis.messages.ingest import store_batch
from precis.settings import get_settings
from precis.store import transfer
from precis.store.conclusions import import_conclusions
from precis.store.db import Db
from precis.store.messages import NewMessage, read_tail, seq_of
from precis.store.resources import remove_members
from precis.transfer import lines

RANGE_BYTES = 4_000_000  # read a step at a time (a line longer than this is read whole: the range grows)
LINE_MAX_BYTES = 64_000_000
MESSAGES_PER_WRITE = 100  # one transaction of the message write path
CONCLUSIONS_PER_WRITE = 100
LEASE_S = 120.0  # how long a batch's search index may wait for the deriver (a step dying between its writes)


class _Writer:
    """Lines in order, messages and conclusions gathered into batches; `flush` writes what is gathered."""

    def __init__(self, db: Db, ws: str, counts: dict[str, int], members: list[str]):
        self.db, self.ws, self.counts = db, ws, counts
        self.messages: list[dict[str, Any]] = []
        self.conclusions: list[dict[str, Any]] = []
        self.members = set(members)  # the exported members of the session whose messages are being read

    def line(self, line: dict[str, Any], number: int) -> None:
        kind = line["kind"]
        if kind not in ("message", "forgotten") and self.messages:
            self.flush_messages()
        if kind != "conclusion" and self.conclusions:
            self.flush_conclusions()
        getattr(self, f"_{kind}")(line, number)
        if kind in lines.KINDS:
            self.counts[kind] = self.counts.get(kind, 0) + 1

    def _peer(self, line: dict[str, Any], number: int) -> None:
        lines.require(line, number, "id", "created_at")
        transfer.put_peer(
            self.db,
            self.ws,
            line["id"],
            line.get("metadata") or {},
            line.get("configuration") or {},
            line["created_at"],
        )

    def _session(self, line: dict[str, Any], number: int) -> None:
        lines.require(line, number, "id", "created_at")
        session_id = line["id"]
        transfer.put_session(
            self.db,
            self.ws,
            session_id,
            metadata=line.get("metadata") or {},
            configuration=line.get("configuration") or {},
            is_active=bool(line.get("is_active", True)),
            created_at=line["created_at"],
            derive_from=int(line["derive_from"]) if line.get("derive_from") is not None else None,
        )
        exported = line.get("members") or []
        transfer.put_members(self.db, self.ws, session_id, exported)
        self.members = {m["peer_id"] for m in exported}
        for summary in line.get("summaries") or []:
            lines.require({"kind": "summary", **summary}, number, "summary_type", "covers_seq", "content")
        transfer.put_summaries(self.db, self.ws, session_id, line.get("summaries") or [])
        transfer.put_cursors(self.db, self.ws, session_id, line.get("derived") or {})

    def _message(self, line: dict[str, Any], number: int) -> None:
        lines.require(line, number, "id", "session_id", "peer_id", "seq", "content", "created_at", "token_count")
        self._message_or_place(line, number)

    def _message_or_place(self, line: dict[str, Any], number: int) -> None:
        if self.messages and (
            self.messages[-1]["session_id"] != line["session_id"] or len(self.messages) >= MESSAGES_PER_WRITE
        ):
            self.flush_messages()
        self.messages.append({**line, "_line": number})

    def _forgotten(self, line: dict[str, Any], number: int) -> None:
        lines.require(line, number, "session_id", "seq", "token_count", "start_tokens", "run_start_seq", "run_index")
        self._message_or_place(line, number)

    def _collection(self, line: dict[str, Any], number: int) -> None:
        lines.require(line, number, "observer_id", "observed_id")
        if line.get("card"):
            transfer.put_card(self.db, self.ws, line["observer_id"], line["observed_id"], line["card"])

    def _conclusion(self, line: dict[str, Any], number: int) -> None:
        lines.require(line, number, "id", "observer_id", "observed_id", "content", "level", "created_at")
        first = self.conclusions[0] if self.conclusions else None
        if first is not None and (
            (first["observer_id"], first["observed_id"]) != (line["observer_id"], line["observed_id"])
            or len(self.conclusions) >= CONCLUSIONS_PER_WRITE
        ):
            self.flush_conclusions()
        self.conclusions.append(line)

    def _precis_export(self, line: dict[str, Any], number: int) -> None:
        raise Invalid(f"line {number}: a header only begins a file")

    def _end(self, line: dict[str, Any], number: int) -> None:
        expected = {k: int(v) for k, v in (line.get("counts") or {}).items() if v}
        got = {k: v for k, v in self.counts.items() if v}
        if expected != got:
            raise Invalid(f"line {number}: the file says it holds {expected} but {got} were read")

    def flush_messages(self) -> None:
        batch, self.messages = self.messages, []
        session_id = batch[0]["session_id"]
        tail = read_tail(self.db, self.ws, session_id).seq
        batch = [m for m in batch if int(m["seq"]) > tail]  # stored by an earlier run of this step
        for expected, m in enumerate(batch, tail + 1):
            if int(m["seq"]) != expected:
                raise Invalid(
                    f"line {m['_line']}: message seq {m['seq']} of session '{session_id}' does not follow seq "
                    f"{expected - 1} (a session's messages are exported contiguous)"
                )
            if m["kind"] == "message" and seq_of(str(m["id"])) != expected:
                raise Invalid(f"line {m['_line']}: message id '{m['id']}' is not the id of a message at seq {expected}")
        # A deleted message's place is written as the finished tombstone it was (seq, tokens, run), between the
        # runs of messages around it, so the seqs, ids and token offsets after it land where they were.
        while batch:
            at = next((n for n, m in enumerate(batch) if m["kind"] == "forgotten"), len(batch))
            if at:
                self._store_messages(session_id, batch[:at])
            if at < len(batch):
                place = batch[at]
                end_tokens = read_tail(self.db, self.ws, session_id).end_tokens
                if int(place["start_tokens"]) != end_tokens:
                    raise Invalid(
                        f"line {place['_line']}: a deleted message's start_tokens {place['start_tokens']} of session "
                        f"'{session_id}' do not follow {end_tokens}"
                    )
                transfer.put_forgotten(self.db, self.ws, session_id, place)
            batch = batch[at + 1 :]

    def _store_messages(self, session_id: str, batch: list[dict[str, Any]]) -> None:
        prepared = [
            NewMessage(
                content=m["content"],
                peer_id=m["peer_id"],
                token_count=int(m["token_count"]),
                metadata=m.get("metadata") or {},
                created_at=m["created_at"],
                run_id=m.get("run_id"),
                message_id=m["id"],
            )
            for m in batch
        ]
        store_batch(self.db, get_settings(), self.ws, session_id, prepared, lease_s=LEASE_S)
        # The write path makes a sender a member; one who had left the session is not one again.
        left = {m.peer_id for m in prepared} - self.members
        if left:
            remove_members(self.db, self.ws, session_id, left)

    def flush_conclusions(self) -> None:
        from precis.llm.embeddings import configured_embedder

        batch, self.conclusions = self.conclusions, []
        observer, observed = batch[0]["observer_id"], batch[0]["observed_id"]
        import_conclusions(self.db, self.ws, observer, observed, batch, embedder=configured_embedder())

    def flush(self) -> None:
        if self.messages:
            self.flush_messages()
        if self.conclusions:
            self.flush_conclusions()


def step(db: Db, job: transfer.JobItem, position: dict[str, Any], counts: dict[str, int]) -> tuple[dict, bool, int]:
    """Import the whole lines of the next range: (the position after them, whether the import is complete, 0).
    The source is one or more objects read in order (an upload, or an export's parts: each holds whole lines)."""
    ws = job["PK"].removeprefix("WS#")
    sources = transfer.job_sources(job)
    index = int(position.get("object", 0))
    key = sources[index]
    offset, number = int(position.get("offset", 0)), int(position.get("line", 0))
    size = int(position["size"]) if "size" in position else transfer.object_size(db, key)
    if offset >= size:
        raise Invalid(f"line {number}: the file ends without its end line (truncated?)")
    length = RANGE_BYTES
    while True:
        data = transfer.read_range(db, key, offset, length)
        cut = data.rfind(b"\n") + 1
        if offset + len(data) >= size:
            cut = len(data)  # the last line may lack its newline
        if cut:
            break
        if length >= LINE_MAX_BYTES:
            raise Invalid(f"line {number + 1}: longer than {LINE_MAX_BYTES} bytes")
        length *= 2
    writer = _Writer(db, ws, counts, position.get("members") or [])
    done = False
    for raw in data[:cut].split(b"\n"):
        if not raw.strip():
            continue
        number += 1
        line = lines.parse(raw, number)
        if number == 1:
            _header(db, ws, line)
            continue
        if done:
            raise Invalid(f"line {number}: after the end line")
        writer.line(line, number)
        done = line["kind"] == lines.END
    writer.flush()
    after = {"object": index, "offset": offset + cut, "line": number, "size": size, "members": sorted(writer.members)}
    if not done and offset + cut >= size:
        if index + 1 == len(sources):
            raise Invalid(f"line {number}: the file ends without its end line (truncated?)")
        after = {"object": index + 1, "offset": 0, "line": number, "members": after["members"]}  # the next part
    return after, done, 0


def _header(db: Db, ws: str, line: dict[str, Any]) -> None:
    if line["kind"] != lines.HEADER:
        raise Invalid("line 1: not a Precis export (its first line is the precis_export header)")
    if line.get("version") != lines.VERSION:
        raise Invalid(f"line 1: export version {line.get('version')!r}; this Precis reads version {lines.VERSION}")
    workspace = line.get("workspace") or {}
    lines.require(workspace | {"kind": "workspace"}, 1, "created_at")
    transfer.put_workspace_fields(
        db, ws, workspace.get("metadata") or {}, workspace.get("configuration") or {}, workspace["created_at"]
    )
