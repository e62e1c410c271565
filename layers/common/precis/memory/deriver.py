"""The deriver: turns each sender's new messages into conclusions for every observer, exactly once.

State lives in one cursor per (session, sender) (`keys.derive_cursor`, in the session's partition, so a purge removes
it): `through_seq` (every message of the sender up to it is derived, or was not to be), `derived` (how many), and
while a batch waits for more tokens `pending`/`due_at` (the ByDue index: the schedule flushes it, the queue status
counts it). A derivation runs in three conditional steps, so a redelivered, replayed or concurrent record never
derives a message twice and a failure never skips one:

1. the engine's answer is stored on the cursor as its `job`, on condition that `through_seq` has not moved and no job
   is stored (a concurrent deriver that lost this race applies the winner's job instead);
2. the job is written into each observer's collection in chunks; each chunk's transaction adds the chunk's name to
   the cursor's `applied` set on condition it is not there yet (a chunk is written at most once), then the cards;
3. the cursor moves past the job's messages and drops it, on condition the job is still the one stored.

An engine that fails leaves the cursor where it was (the record is retried by the stream, then dead-lettered; the
schedule tries the cursor again later): nothing is half-written, nothing skipped.

A batch also ends when its session goes quiet: after each stream batch of an llm session a wake-up is sent, delayed by
the quiet period, naming the newest message seen (`quiet_wakes`); when it fires and no newer message came
(`quiet_targets`), the session's waiting batches are derived at once (`derive_target(..., flush=True)`) by the same
three steps, so a duplicate or late wake-up finds nothing left to do.
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from precis.configuration import DeriveConfig, derive_config
from precis.errors import NotFound
from precis.memory.wakeups import QuietWake
from precis.settings import Settings
from precis.store import conclusions, derive_cursors
from precis.store.db import Db
from precis.store.messages import MessageItem, read_from, read_range, tail_seq, with_bodies
from precis.store.records import session_of
from precis.store.resources import MemberItem, PeerItem, SessionItem, members, workspace_ids
from precis.store.search import ensure_indexed

log = logging.getLogger("precis.memory.deriver")
NOTHING_DUE = derive_cursors.NOTHING_DUE
CHUNK = 16  # conclusions per transaction (conclusions.write's own chunk)
MAX_JOB_MESSAGES = 200  # the most messages of one sender one job derives; more run as further jobs


@dataclass(frozen=True)
class DeriveTarget:
    workspace: str
    session: str
    sender: str


@dataclass
class Outcome:
    derived: int = 0  # messages derived in this call (or skipped as unobserved)
    conclusions: int = 0
    pending: int = 0  # messages left waiting for their batch
    jobs: int = 0
    batched: bool = False  # the session's batches wait for tokens (an llm engine): a quiet wake-up may end them
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class BackfillTarget:
    """A session just added to a scope: its conclusions are to be copied into the scope's collections."""

    workspace: str
    scope: str
    session: str


def target_of(image: dict[str, Any]) -> DeriveTarget | BackfillTarget | None:
    """The (session, sender) a message insert's new image asks to derive, or the backfill a new scope membership
    asks for; None for any other item."""
    if image.get("kind") == "scope_session" and image.get("state") == "pending":
        return BackfillTarget(image["workspace_id"], image["scope_id"], image["session_id"])
    if image.get("kind") != "message" or "peer_id" not in image:
        return None
    ws, session_id = session_of(image)
    return DeriveTarget(ws, session_id, image["peer_id"])


def _now() -> datetime:
    return datetime.now(UTC)


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat()


def _parse(value: str) -> datetime:
    moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _json(value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    return value if isinstance(value, dict) else {}


# ---------------------------------------------------------------- who observes whom


def observers(sender: str, peer: PeerItem | None, members: Mapping[str, MemberItem]) -> list[str]:
    """Who observes whom (docs/design.md, "Derived memory"): nobody when the sender is not observed (the session-peer
    config's observe_me if set, else the peer's configuration.observe_me, else true); else the sender and each other
    member with observe_others."""
    member = members.get(sender)
    observe_me = member.get("observe_me") if member is not None else None
    if observe_me is None:
        observe_me = _json(peer["configuration"] if peer is not None else None).get("observe_me")
    if observe_me is False:
        return []
    others = sorted(p for p, m in members.items() if p != sender and m.get("observe_others") is True)
    return [sender, *others]


# ---------------------------------------------------------------- one (session, sender)


def derive_target(
    db: Db,
    settings: Settings,
    target: DeriveTarget,
    *,
    engine_for: Callable[[DeriveConfig], Any],
    embedder: Any,
    now: Callable[[], datetime] = _now,
    time_left: Callable[[], float] = lambda: float("inf"),
    flush: bool = False,
) -> Outcome:
    """Derive what is due of `target`'s underived messages: all of them with the extractive engine or when `flush`
    (the session went quiet), else once they hold the batch's tokens or the oldest has waited past its age (the
    schedule's flush comes back for those)."""
    outcome = Outcome()
    for _ in range(1000):  # each round is a job or a decision; a lost race re-reads
        session, workspace, peer, cursor = derive_cursors.read_state(db, target)
        if session is None or workspace is None or "deleted_at" in session:
            return outcome  # deleted: the purge removes the cursor and what was derived
        incarnation = session["incarnation"]  # (a cursor of an earlier incarnation was purged with it)
        config = derive_config(_json(workspace.get("configuration")), _json(session.get("configuration")), settings)
        outcome.batched = config.engine != "extractive" and config.batch_tokens > 0
        try:
            if cursor is not None and cursor.get("job"):
                _apply(db, settings, target, incarnation, cursor, engine_for(config), embedder, now(), outcome)
                continue
            decided = _decide(db, config, target, session, peer, cursor, engine_for, now(), outcome, flush)
        except derive_cursors.Moved:
            continue
        except NotFound:
            return outcome  # the session was deleted while we wrote: its purge removes what landed
        if not decided or time_left() < 10:
            return outcome
    return outcome


def _decide(
    db: Db,
    config: DeriveConfig,
    target: DeriveTarget,
    session: SessionItem,
    peer: PeerItem | None,
    cursor: dict[str, Any] | None,
    engine_for,
    now: datetime,
    outcome: Outcome,
    flush: bool = False,
) -> bool:
    """Read the sender's underived messages and derive them, mark them waiting, or skip them; whether to go on."""
    ws, s = target.workspace, target.session
    # A clone derives from its own point on: what it inherited was derived in its parent (docs/design.md, cloning).
    through = int((cursor or {}).get("through_seq", session.get("derive_from", 1) - 1))
    window = read_from(db, ws, s, through + 1, limit=MAX_JOB_MESSAGES * 5)
    mine = [m for m in window if m["peer_id"] == target.sender][:MAX_JOB_MESSAGES]
    if not mine:
        if cursor is not None and cursor.get("due_at", NOTHING_DUE) != NOTHING_DUE:
            derive_cursors.clear_due(db, target, cursor)
        return False
    last_seq = mine[-1]["seq"]
    watchers = observers(target.sender, peer, members(db, ws, s)) if config.enabled else []
    if watchers:  # the session's scopes observe what it says too (explicit conclusions, no cards)
        from precis.store import scopes

        watchers += [scopes.observer(scope_id) for scope_id in scopes.session_scopes(db, ws, s)]
    if not watchers:
        # Not observed: nothing is derived from these messages, by anyone; they are done (indexed first).
        ensure_indexed(db, ws, s, mine)
        derive_cursors.finish(db, target, session["incarnation"], last_seq, len(mine), _iso(now), seen=cursor)
        outcome.derived += len(mine)
        return len(mine) == MAX_JOB_MESSAGES
    oldest = _parse(mine[0]["created_at"])
    tokens = sum(int(m.get("token_count") or 0) for m in mine)
    due = oldest + timedelta(seconds=config.max_wait_s)
    batch_tokens = 0 if config.engine == "extractive" else config.batch_tokens
    if not flush and tokens < batch_tokens and now < due and len(mine) < MAX_JOB_MESSAGES:
        derive_cursors.wait(db, target, cursor, session["incarnation"], _iso(due), len(mine))
        outcome.pending = len(mine)
        return False
    # Searchable before derived: a batch whose request died before its index is indexed here (a failure fails the
    # derivation, which the stream and then the schedule retry: the cursor has not moved).
    ensure_indexed(db, ws, s, mine)
    engine = engine_for(config)
    views = with_bodies(db, mine, ws, s)
    context = _context_message(db, ws, s, mine[0], window, through)
    found = _extract(engine, target.sender, views, context, config)
    job = {
        "token": secrets.token_hex(8),
        "to_seq": last_seq,
        "count": len(views),
        "observers": watchers,
        "conclusions": found,
    }
    derive_cursors.store_job(db, target, cursor, session["incarnation"], job)
    outcome.jobs += 1
    return True  # the next round applies the stored job


def _context_message(
    db: Db, ws: str, s: str, first: MessageItem, window: list[MessageItem], through: int
) -> dict[str, Any] | None:
    """The message just before the sender's first new one, when another peer sent it (Honcho's context line)."""
    before = [m for m in window if m["seq"] < first["seq"]]
    if not before and first["seq"] - 1 > 0:
        before = read_range(db, ws, s, max(1, through - 4), first["seq"] - 1, limit=5, forward=False)[::-1]
    candidate = before[-1] if before else None
    if candidate is None or candidate["peer_id"] == first["peer_id"]:
        return None
    return with_bodies(db, [candidate], ws, s)[0]


def _extract(engine: Any, sender: str, mine: list[dict], context: dict | None, config: DeriveConfig) -> list[dict]:
    """The engine's conclusions with their provenance. The extractive engine reads one message at a time, so each
    conclusion names the message it came from; an LLM batch's conclusions name every message of the batch."""
    from precis.memory.engines import DeriveMessage, DeriveRequest

    def as_message(m: dict) -> DeriveMessage:
        return DeriveMessage(m["id"], m["seq"], m["peer_id"], m.get("content") or "", m["created_at"])

    if config.engine == "extractive":
        groups = [[m] for m in mine]
    else:
        groups = [mine]
    found: list[dict] = []
    for group in groups:
        request = DeriveRequest(
            observed=sender,
            messages=[as_message(m) for m in group],
            context=as_message(context) if context is not None and group is groups[0] else None,
            custom_instructions=config.custom_instructions,
        )
        for text in engine.derive(request):
            found.append(
                {
                    "content": text,
                    "source_message_ids": [m["id"] for m in group],
                    "source_at": max(m["created_at"] for m in group),
                }
            )
    return found


def _apply(
    db: Db,
    settings: Settings,
    target: DeriveTarget,
    incarnation: str,
    cursor: dict,
    engine: Any,
    embedder: Any,
    now: datetime,
    outcome: Outcome,
) -> None:
    """Write a stored job into each observer's collection (each chunk once), update the cards, move the cursor;
    each collection counts its new explicit conclusions towards its next dream."""
    from precis.memory.dreams import DreamTarget, note_explicit

    job = cursor["job"]
    applied = set(cursor.get("applied") or ())
    items = [
        conclusions.Derived(
            c["content"],
            session_id=target.session,
            source_message_ids=tuple(c["source_message_ids"]),
            source_at=c["source_at"],
        )
        for c in job["conclusions"]
    ]
    written = 0
    for observer in job["observers"]:
        for start in range(0, len(items), CHUNK):
            name = f"{observer}#{start}"
            if name in applied:
                continue
            extra = [derive_cursors.applied_mark(db, target, job["token"], name)]
            try:
                conclusions.write(
                    db,
                    target.workspace,
                    observer,
                    target.sender,
                    items[start : start + CHUNK],
                    embedder=embedder,
                    extra=extra,
                    incarnation=incarnation,
                )
                written += len(items[start : start + CHUNK])
                note_explicit(
                    db,
                    DreamTarget(target.workspace, observer, target.sender),
                    len(items[start : start + CHUNK]),
                    now,
                    min_conclusions=settings.dream_min_conclusions,
                    idle_s=settings.dream_idle_s,
                )
            except conclusions.ExtraConditionFailed:
                pass  # applied already, by us before a crash or by a concurrent deriver
        card_name = f"{observer}#card"
        if card_name not in applied and items and not observer.startswith("scope."):
            _update_card(db, target, observer, job["token"], card_name, engine, [i.content for i in items])
    derive_cursors.finish(db, target, incarnation, int(job["to_seq"]), int(job["count"]), _iso(now), token=job["token"])
    outcome.derived += int(job["count"])
    outcome.conclusions += written


def _update_card(
    db: Db, target: DeriveTarget, observer: str, token: str, name: str, engine: Any, new: list[str]
) -> None:
    """The observer's card of the sender, proposed by the engine from the old card and the new conclusions; written
    with the chunk marker, so a replay never counts the same conclusions twice. Nothing valid: left unchanged."""
    ws = target.workspace
    entries, counts, _source = conclusions.card_state(db, ws, observer, target.sender)
    try:
        proposed = engine.update_card(target.sender, entries, counts or {}, new)
    except Exception as exc:  # noqa: BLE001 - a card is a convenience: its failure never blocks the conclusions
        log.warning("card update failed for %s/%s: %s", observer, target.sender, exc)
        proposed = None
    conclusions.write_card_step(
        db, ws, observer, target.sender, proposed, entries, derive_cursors.applied_mark(db, target, token, name)
    )


def mark_failed(db: Db, target: DeriveTarget, now: datetime) -> None:
    """After a failed derivation: make the cursor due again in a few minutes, so the schedule retries it even when
    the stream has given up on its records (best effort: the stream's own retry comes first)."""
    code = derive_cursors.mark_due(db, target, _iso(now + timedelta(minutes=5)))
    if code is not None:
        log.warning("could not mark %s as due again: %s", target, code)


# ---------------------------------------------------------------- a quiet session's wake-up


def quiet_wakes(derived: Iterable[tuple[DeriveTarget, Iterable[dict[str, Any]], Outcome | None]]) -> list[QuietWake]:
    """After a stream batch: one wake-up per session whose batches wait (an llm engine), naming the newest message of
    it the batch brought, whichever sender's and whether its derivation succeeded (None) or not, so that the
    session's last message always has a wake-up naming it or a newer one."""
    newest: dict[tuple[str, str], int] = {}
    batched: set[tuple[str, str]] = set()
    for target, images, outcome in derived:
        key = (target.workspace, target.session)
        newest[key] = max([newest.get(key, 0), *(int(i["seq"]) for i in images if "seq" in i)])
        if outcome is not None and outcome.batched:
            batched.add(key)
    return [QuietWake(ws, s, seq) for (ws, s), seq in sorted(newest.items()) if (ws, s) in batched]


def quiet_targets(db: Db, wake: QuietWake) -> list[DeriveTarget]:
    """When `wake` fires: the senders whose batch waits in its session, if no message came after the one it names
    (the session has been quiet for the wake-up's delay); none when one did (that message's wake-up comes later)."""
    if tail_seq(db, wake.workspace, wake.session) > wake.seq:
        return []
    return [
        DeriveTarget(wake.workspace, wake.session, c["sender"])
        for c in derive_cursors.cursors(db, wake.workspace, wake.session)
        if c.get("sender") and (c.get("job") or c.get("due_at", NOTHING_DUE) != NOTHING_DUE)
    ]


# ---------------------------------------------------------------- the schedule's flush


def due_targets(db: Db, workspaces: Iterable[str], now: datetime) -> list[DeriveTarget]:
    """Cursors whose waiting batch (or failed derivation) is due by `now`."""
    return [DeriveTarget(*due) for due in derive_cursors.due(db, workspaces, _iso(now))]


def all_workspaces(db: Db) -> list[str]:
    return workspace_ids(db)
