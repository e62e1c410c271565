"""The deriver: turns each sender's new messages into conclusions for every observer, exactly once.

State lives in one cursor per (session, sender) (`keys.derive_cursor`, in the session's partition, so a purge removes
it): `through_seq` (every message of the sender up to it is derived, or was not to be), `derived` (how many), and
while a batch waits for more tokens `pending`/`due_at` (the ByDue index: the schedule flushes it, the queue status
counts it). A session is derived whole: one request to the engine reads every sender's new lines (the llm engine;
the extractive one reads a message at a time) and answers each observed sender's conclusions, so a pause costs one
request whoever spoke. Each sender's part then runs in three conditional steps, so a redelivered, replayed or
concurrent record never derives a message twice and a failure never skips one:

1. the engine's answer for the sender is stored on its cursor as its `job`, on condition that `through_seq` has not
   moved and no job is stored (a concurrent deriver that lost this race applies the winner's job instead);
2. the job is written into each observer's collection in chunks; each chunk's transaction adds the chunk's name to
   the cursor's `applied` set on condition it is not there yet (a chunk is written at most once), then the cards
   (memory/card_refresh.py: an llm engine's are refreshed once per burst of conclusions, not at every job);
3. the cursor moves past the job's messages and drops it, on condition the job is still the one stored.

An engine that fails leaves the cursor where it was (the record is retried by the stream, then dead-lettered; the
schedule tries the cursor again later): nothing is half-written, nothing skipped.

A batch also ends when its session goes quiet: after each stream batch of an llm session a wake-up is sent, delayed by
the quiet period, naming the newest message seen (`quiet_wakes`); when it fires and no newer message came
(`is_quiet`), the session's waiting batches are derived at once (`derive_session(..., flush=True)`) by the same
three steps, so a duplicate or late wake-up finds nothing left to do.
"""

from __future__ import annotations

import contextlib
import json
import logging
import secrets
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from precis.configuration import DeriveConfig, derive_config
from precis.errors import NotFound
from precis.events import Event, conclusions_created, queue_empty
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
    applied: set[str] = field(default_factory=set)  # senders whose job this call applied
    emptied: dict[str, Event] = field(default_factory=dict)  # queue.empty of each observed sender found caught up
    created: list[Event] = field(default_factory=list)  # conclusions.created of each job applied, per observer

    @property
    def events(self) -> list[Event]:
        """What to publish once the call's work is stored (precis.events)."""
        return [*self.created, *self.emptied.values()]


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


# ---------------------------------------------------------------- one session, every sender at once


@dataclass(frozen=True)
class SessionTarget:
    workspace: str
    session: str


def derive_session(
    db: Db,
    settings: Settings,
    target: SessionTarget,
    *,
    engine_for: Callable[[DeriveConfig], Any],
    embedder: Any,
    senders: Iterable[str] = (),
    now: Callable[[], datetime] = _now,
    time_left: Callable[[], float] = lambda: float("inf"),
    flush: bool = False,
) -> Outcome:
    """Derive what is due of the session's underived messages, every sender's in one request: all of them with the
    extractive engine or when `flush` (the session went quiet, or a batch is due), else once the observed senders'
    new messages hold the batch's tokens or the oldest has waited past its age (the schedule's flush comes back for
    those). `senders`: those a stream batch brought (others are found by their cursors)."""
    outcome = Outcome()
    for _ in range(1000):  # each round is a job or a decision; a lost race re-reads
        session, workspace, cursors = derive_cursors.read_session(db, target.workspace, target.session)
        if session is None or workspace is None or "deleted_at" in session:
            return outcome  # deleted: the purge removes the cursors and what was derived
        incarnation = session["incarnation"]  # (a cursor of an earlier incarnation was purged with it)
        config = derive_config(_json(workspace.get("configuration")), _json(session.get("configuration")), settings)
        outcome.batched = config.engine != "extractive" and config.batch_tokens > 0
        try:
            running = [c for c in cursors.values() if c.get("job")]
            for cursor in running:
                sender = DeriveTarget(target.workspace, target.session, cursor["sender"])
                _apply(db, settings, config, sender, incarnation, cursor, engine_for(config), embedder, now(), outcome)
            if running:
                continue
            decided = _decide(db, config, target, session, cursors, set(senders), engine_for, now(), outcome, flush)
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
    target: SessionTarget,
    session: SessionItem,
    cursors: dict[str, dict[str, Any]],
    senders: set[str],
    engine_for,
    now: datetime,
    outcome: Outcome,
    flush: bool,
) -> bool:
    """Read the session's underived messages and derive them, mark them waiting, or skip them; whether to go on."""
    ws, s = target.workspace, target.session
    # A clone derives from its own point on: what it inherited was derived in its parent (docs/design.md, cloning).
    inherited = int(session.get("derive_from", 1)) - 1

    def through(peer: str) -> int:
        return max(int(cursors.get(peer, {}).get("through_seq", inherited)), inherited)

    waiting = {p for p, c in cursors.items() if c.get("due_at", NOTHING_DUE) != NOTHING_DUE}
    # (the senders whose job this call applied: read once more, to see whether they caught up)
    asked = senders | waiting | outcome.applied
    if not asked:
        return False
    start = min(through(p) for p in asked) + 1
    window = read_from(db, ws, s, start, limit=MAX_JOB_MESSAGES * 5)
    new: dict[str, list[MessageItem]] = {}
    for m in window:
        if m["seq"] > through(m["peer_id"]):
            new.setdefault(m["peer_id"], []).append(m)
    full = len(window) == MAX_JOB_MESSAGES * 5
    moved = False
    for peer in sorted(asked - set(new)):  # nothing of theirs here: nothing waits, or the window is behind them
        cursor = cursors.get(peer)
        sender = DeriveTarget(ws, s, peer)
        if full and through(peer) < window[-1]["seq"]:  # (a sender who first spoke past a long session's start)
            derive_cursors.finish(db, sender, session["incarnation"], window[-1]["seq"], 0, _iso(now), seen=cursor)
            moved = True
        else:
            if cursor is not None and cursor.get("due_at", NOTHING_DUE) != NOTHING_DUE:
                derive_cursors.clear_due(db, sender, cursor)
            if cursor is not None and cursor.get("observed") is True:
                # Caught up (no message of theirs after the cursor, nothing waiting): the queue status shows the unit
                # empty now. Seen again (a replayed record, a racing deriver), it is the same event: the same id.
                outcome.emptied[peer] = queue_empty(
                    ws,
                    "representation",
                    s,
                    observed=peer,
                    incarnation=session["incarnation"],
                    position=through(peer),
                    now=now.timestamp(),
                )
    if not new:
        return moved  # a cursor moved past a full window: read on from there
    watchers = _watchers(db, config, ws, s, sorted(new))
    for peer in sorted(p for p in new if not watchers[p]):
        # Not observed: nothing is derived from these messages, by anyone; they are done (indexed first).
        mine = new.pop(peer)
        ensure_indexed(db, ws, s, mine)
        sender, seen = DeriveTarget(ws, s, peer), cursors.get(peer)
        derive_cursors.finish(db, sender, session["incarnation"], mine[-1]["seq"], len(mine), _iso(now), seen=seen)
        outcome.derived += len(mine)
    if not new:
        return full or moved
    # One job's messages: the oldest MAX_JOB_MESSAGES of every observed sender's, together.
    taken = sorted((m for mine in new.values() for m in mine), key=lambda m: m["seq"])[:MAX_JOB_MESSAGES]
    cut = taken[-1]["seq"]
    jobs = {peer: [m for m in mine if m["seq"] <= cut] for peer, mine in new.items()}
    jobs = {peer: mine for peer, mine in jobs.items() if mine}
    oldest = _parse(taken[0]["created_at"])
    tokens = sum(int(m.get("token_count") or 0) for m in taken)
    due = oldest + timedelta(seconds=config.max_wait_s)
    batch_tokens = 0 if config.engine == "extractive" else config.batch_tokens
    if not flush and tokens < batch_tokens and now < due and len(taken) < MAX_JOB_MESSAGES:
        for peer, mine in jobs.items():
            cursor = cursors.get(peer)
            if cursor is None or int(cursor.get("pending", 0)) != len(mine) or cursor.get("due_at") != _iso(due):
                derive_cursors.wait(db, DeriveTarget(ws, s, peer), cursor, session["incarnation"], _iso(due), len(mine))
            outcome.pending += len(mine)
        return False
    # Searchable before derived: a batch whose request died before its index is indexed here (a failure fails the
    # derivation, which the stream and then the schedule retry: the cursors have not moved).
    ensure_indexed(db, ws, s, taken)
    engine = engine_for(config)
    # The lines: from the first new message to the job's last, each sender's derived ones left out (a sender whose
    # cursor is ahead of the others'); the extractive engine reads only the job's messages.
    lines = [m for m in window if taken[0]["seq"] <= m["seq"] <= cut and m["seq"] > through(m["peer_id"])]
    if config.engine == "extractive":
        lines = taken
    views = {v["seq"]: v for v in with_bodies(db, lines, ws, s)}
    context = _context_message(db, ws, s, lines[0], window, start - 1)
    found = _extract(engine, jobs, views, [views[m["seq"]] for m in lines], context, config)
    outcome.jobs += 1
    for peer, mine in sorted(jobs.items()):
        job = {
            "token": secrets.token_hex(8),
            "to_seq": mine[-1]["seq"],
            "count": len(mine),
            "observers": watchers[peer],
            "conclusions": found.get(peer, []),
        }
        # A sender whose cursor moved meanwhile: another deriver holds its job, which the next round applies.
        with contextlib.suppress(derive_cursors.Moved):
            derive_cursors.store_job(db, DeriveTarget(ws, s, peer), cursors.get(peer), session["incarnation"], job)
    return True  # the next round applies the stored jobs


def _watchers(db: Db, config: DeriveConfig, ws: str, s: str, senders: list[str]) -> dict[str, list[str]]:
    """Each sender's observers (none when derivation is off): `observers`, and the session's scopes for those
    observed (explicit conclusions, no cards)."""
    if not config.enabled:
        return {peer: [] for peer in senders}
    from precis.store import scopes

    peers = derive_cursors.read_peers(db, ws, senders)
    held = members(db, ws, s)
    found = {peer: observers(peer, peers.get(peer), held) for peer in senders}
    if any(found.values()):
        in_scopes = [scopes.observer(scope_id) for scope_id in scopes.session_scopes(db, ws, s)]
        found = {peer: [*watching, *in_scopes] if watching else [] for peer, watching in found.items()}
    return found


def _context_message(
    db: Db, ws: str, s: str, first: MessageItem, window: list[MessageItem], through: int
) -> dict[str, Any] | None:
    """The message just before the first line, when another peer sent it (Honcho's context line)."""
    before = [m for m in window if m["seq"] < first["seq"]]
    if not before and first["seq"] - 1 > 0:
        before = read_range(db, ws, s, max(1, through - 4), first["seq"] - 1, limit=5, forward=False)[::-1]
    candidate = before[-1] if before else None
    if candidate is None or candidate["peer_id"] == first["peer_id"]:
        return None
    return with_bodies(db, [candidate], ws, s)[0]


def _extract(
    engine: Any,
    jobs: dict[str, list[MessageItem]],
    views: dict[int, dict[str, Any]],
    lines: list[dict[str, Any]],
    context: dict | None,
    config: DeriveConfig,
) -> dict[str, list[dict]]:
    """Each observed sender's conclusions with their provenance. The extractive engine reads one message at a time,
    so each conclusion names the message it came from; the llm engine reads the session's lines in one request, and
    a sender's conclusions name every message of theirs it read."""
    from precis.memory.engines import DeriveMessage, DeriveRequest, SessionRequest

    def as_message(m: dict) -> DeriveMessage:
        return DeriveMessage(m["id"], m["seq"], m["peer_id"], m.get("content") or "", m["created_at"])

    def conclusion(text: str, sources: list[dict]) -> dict:
        return {
            "content": text,
            "source_message_ids": [m["id"] for m in sources],
            "source_at": max(m["created_at"] for m in sources),
        }

    found: dict[str, list[dict]] = {}
    if config.engine == "extractive" or not hasattr(engine, "derive_session"):  # (an engine of one peer at a time)
        for peer, mine in jobs.items():
            for m in mine:
                one = DeriveRequest(observed=peer, messages=[as_message(views[m["seq"]])])
                found.setdefault(peer, []).extend(conclusion(t, [views[m["seq"]]]) for t in engine.derive(one))
        return found
    request = SessionRequest(
        peers=tuple(sorted(jobs)),
        messages=[as_message(v) for v in lines],
        context=as_message(context) if context is not None else None,
        custom_instructions=config.custom_instructions,
    )
    for peer, texts in engine.derive_session(request).items():
        sources = [views[m["seq"]] for m in jobs.get(peer, ())]
        if sources:
            found[peer] = [conclusion(t, sources) for t in texts]
    return found


def _apply(
    db: Db,
    settings: Settings,
    config: DeriveConfig,
    target: DeriveTarget,
    incarnation: str,
    cursor: dict,
    engine: Any,
    embedder: Any,
    now: datetime,
    outcome: Outcome,
) -> None:
    """Write a stored job into each observer's collection (each chunk once), keep the cards, move the cursor; each
    collection counts its new explicit conclusions towards its next dream and its card's next refresh."""
    from precis.memory import card_refresh
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
    immediate = config.engine == "extractive"  # a card costs no model call: kept current at every job
    written = 0
    for observer in job["observers"]:
        collection = DreamTarget(target.workspace, observer, target.sender)
        state = None
        ids: list[str] = []
        chunks: list[str] = []
        for start in range(0, len(items), CHUNK):
            name = f"{observer}#{start}"
            if name in applied:
                continue
            extra = [derive_cursors.applied_mark(db, target, job["token"], name)]
            try:
                views = conclusions.write(
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
                ids += [v["id"] for v in views if v.get("id") and v["id"] not in ids]
                chunks.append(name)
                state = note_explicit(
                    db,
                    collection,
                    len(items[start : start + CHUNK]),
                    now,
                    min_conclusions=settings.dream_min_conclusions,
                    idle_s=settings.dream_idle_s,
                    card=not immediate,
                )
            except conclusions.ExtraConditionFailed:
                pass  # applied already, by us before a crash or by a concurrent deriver
        if ids:
            event = conclusions_created(
                target.workspace,
                session_id=target.session,
                observer=observer,
                observed=target.sender,
                conclusion_ids=ids,
                cause=(job["token"], *chunks),  # each chunk is written once: so is its event
                now=now.timestamp(),
            )
            outcome.created.append(event)
        if observer.startswith("scope.") or not items:
            continue
        card_name = f"{observer}#card"
        if immediate and card_name not in applied:
            _update_card(db, target, observer, job["token"], card_name, engine, [i.content for i in items])
        elif state is not None and card_refresh.due(state, now, settings):
            card_refresh.refresh(db, collection, engine, now)
    derive_cursors.finish(db, target, incarnation, int(job["to_seq"]), int(job["count"]), _iso(now), token=job["token"])
    outcome.applied.add(target.sender)
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


def mark_failed(db: Db, target: SessionTarget, senders: Iterable[str], now: datetime) -> None:
    """After a failed derivation: make the senders' cursors (those named, and those waiting) due again in a few
    minutes, so the schedule retries them even when the stream has given up on its records (best effort: the
    stream's own retry comes first)."""
    try:
        waiting = {
            c["sender"]
            for c in derive_cursors.cursors(db, target.workspace, target.session)
            if c.get("sender") and (c.get("job") or c.get("due_at", NOTHING_DUE) != NOTHING_DUE)
        }
    except Exception as exc:  # noqa: BLE001 - best effort, as each mark is
        log.warning("could not read %s's cursors: %s", target, exc)
        waiting = set()
    for sender in sorted(set(senders) | waiting):
        found = DeriveTarget(target.workspace, target.session, sender)
        code = derive_cursors.mark_due(db, found, _iso(now + timedelta(minutes=5)))
        if code is not None:
            log.warning("could not mark %s as due again: %s", found, code)


# ---------------------------------------------------------------- a quiet session's wake-up


def quiet_wakes(derived: Iterable[tuple[SessionTarget, Iterable[dict[str, Any]], Outcome | None]]) -> list[QuietWake]:
    """After a stream batch: one wake-up per session whose batches wait (an llm engine), naming the newest message of
    it the batch brought, whether its derivation succeeded (None) or not, so that the session's last message always
    has a wake-up naming it or a newer one."""
    newest: dict[tuple[str, str], int] = {}
    batched: set[tuple[str, str]] = set()
    for target, images, outcome in derived:
        key = (target.workspace, target.session)
        newest[key] = max([newest.get(key, 0), *(int(i["seq"]) for i in images if "seq" in i)])
        if outcome is not None and outcome.batched:
            batched.add(key)
    return [QuietWake(ws, s, seq) for (ws, s), seq in sorted(newest.items()) if (ws, s) in batched]


def is_quiet(db: Db, wake: QuietWake) -> bool:
    """Whether no message came after the one `wake` names (the session has been quiet for the wake-up's delay);
    when one did, that message's wake-up comes later."""
    return tail_seq(db, wake.workspace, wake.session) <= wake.seq


def session_collections(db: Db, ws: str, s: str) -> list[tuple[str, str]]:
    """(observer, observed) of the cards the session's senders feed: each sender with a cursor, by its observers."""
    cursors = {c["sender"] for c in derive_cursors.cursors(db, ws, s) if c.get("sender")}
    peers = derive_cursors.read_peers(db, ws, sorted(cursors))
    held = members(db, ws, s)
    return [(observer, sender) for sender in sorted(cursors) for observer in observers(sender, peers.get(sender), held)]


# ---------------------------------------------------------------- the schedule's flush


def due_targets(db: Db, workspaces: Iterable[str], now: datetime) -> list[SessionTarget]:
    """Sessions with a cursor whose waiting batch (or failed derivation) is due by `now`."""
    return sorted({SessionTarget(ws, s) for ws, s, _sender in derive_cursors.due(db, workspaces, _iso(now))}, key=repr)


def all_workspaces(db: Db) -> list[str]:
    return workspace_ids(db)
