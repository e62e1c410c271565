"""The context read: a summary plus the newest messages that fit, in two rounds of DynamoDB requests.

Round 1 (in parallel): the session and its summaries in one BatchGetItem, and the last message's cost.
Round 2: the messages whose `start_tokens` lies in the window the budget allows, from the ByStartTokens
local index (strongly consistent), so only messages that can be returned are read.
With a search query, in parallel with round 2: the messages that best match it (message search's ranking) in every
session the target peer takes part in (or the session's peers, without a target), as far as the request and its key
reach; those not in the newest window are recalled into the share of the budget set aside for them.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

from aws_lambda_powertools import Logger

from precis.configuration import summary_config
from precis.context.budget import (
    ContextPlan,
    MessageCost,
    Recallable,
    SummaryCost,
    plan_context,
    recall_reserve,
    select_messages,
    select_recalled,
)
from precis.errors import Invalid, NotFound, Throttled
from precis.schemas.summary_settings import LONG, ROLLING, SHORT
from precis.store import resources, retention
from precis.store.db import Db
from precis.store.messages import (
    VIEW_FIELDS,
    Base,
    MessageItem,
    base_of,
    is_fence,
    last_message,
    messages_at,
    messages_by_key,
    messages_in_token_range,
    read_range,
    with_bodies,
)
from precis.store.records import json_object
from precis.store.summaries import SUMMARY_TYPES as SUMMARY_TYPES  # bench/context.py still reads it here
from precis.store.summaries import SummaryItem, read_summary, session_with_summaries
from precis.tokens import count_text

if TYPE_CHECKING:  # the representation's modules load with the first read that has a peer_target (_read_once)
    from precis.store import representation

_COST_FIELDS = ("seq", "token_count", "start_tokens", "run_start_seq", "run_index", "kind")
_pool = ThreadPoolExecutor(max_workers=4)
logger = Logger(child=True)


def _cost(item: MessageItem) -> MessageCost:
    return MessageCost(item["seq"], item["token_count"], item["start_tokens"], item["run_start_seq"])


def _summary_cost(item: SummaryItem) -> SummaryCost:
    return SummaryCost(item["summary_type"], item["covers_seq"], item["end_tokens"], item["token_count"])


def summary_view(item: SummaryItem | None) -> dict[str, Any] | None:
    if item is None:
        return None
    return {
        "content": item["content"],
        "message_id": item["message_id"],
        "summary_type": item["summary_type"],
        "created_at": item["created_at"],
        "token_count": item["token_count"],
    }


# Round 1 reads the summaries' costs, not their text: only the chosen summary's content is fetched, in round 2.
_ROUND_ONE = (
    "PK",
    "SK",
    "summary_type",
    "covers_seq",
    "end_tokens",
    "token_count",
    "deleted_at",
    "configuration",
    "base_session",
    "base_through",
    "expiry_day",
    "expiry_from",
)
WINDOW_FIELDS = (*VIEW_FIELDS, "start_tokens", "run_start_seq", "run_index")


def _window(db: Db, ws: str, session_id: str, plan: ContextPlan, base: Base | None) -> list[MessageItem]:
    """The messages the plan's token range holds (a clone's base filling in what it holds no copy of yet)."""
    return messages_in_token_range(
        db, ws, session_id, plan.min_start_tokens, plan.total_tokens, WINDOW_FIELDS, base=base
    )


class SessionContext(TypedDict):
    """A session's context: Honcho's shape (`id`, `messages`, `summary`, `peer_representation`, `peer_card`) and
    Precis's (ext) counts; `recalled` (the recalled messages' ids) only when the read had a search query."""

    id: str
    messages: list[dict[str, Any]]
    summary: dict[str, Any] | None
    peer_representation: str | None
    peer_card: list[str] | None
    messages_skipped: int
    representation_skipped: int
    card_token_count: int
    token_count: int
    recalled: NotRequired[list[str]]


def read_context(
    db: Db,
    ws: str,
    session_id: str,
    limit: int,
    *,
    use_summary: bool = True,
    whole_runs: bool | None = None,
    peer: PeerView | None = None,
    recall: Recall | None = None,
) -> SessionContext:
    """The context of a session within `limit` tokens (summary + newest messages, and with `peer` the
    representation and card), Honcho's shape + ext.

    `whole_runs` None: the session's setting (configuration.summarizer.whole_runs, over the workspace's and the
    deployment's), read with the session in round 1. With `recall`, its share of `limit` is set aside for the
    messages best matching its query, from the sessions it reaches, outside the newest window (ext `recalled`: their
    ids; they come first, in time order, each with its session id and date); what they leave goes to the newest
    messages. The representation and card take at most half of the rest (whole conclusions, then card entries,
    dropped until they fit); the summary 40% of what remains besides the reserve.
    """
    for _ in range(3):
        answer = _read_once(db, ws, session_id, limit, use_summary, whole_runs, peer, recall)
        if answer is not None:
            return answer
    raise Throttled(f"the summaries of session '{session_id}' are being rewritten; retry the request")


def _read_once(
    db: Db,
    ws: str,
    session_id: str,
    limit: int,
    use_summary: bool,
    whole_runs: bool | None,
    peer: PeerView | None,
    recall: Recall | None = None,
) -> SessionContext | None:
    """One two-round read (three with a search query); None when the chosen summary was replaced between the
    rounds (then read again)."""
    peers = (
        tuple(p for p in dict.fromkeys((peer.request.observer, peer.request.observed)) if not p.startswith("scope."))
        if peer
        else ()
    )
    first = _pool.submit(session_with_summaries, db, ws, session_id, _ROUND_ONE, peers)
    if peer:
        from precis.context.fit import card_text, fit
        from precis.store import representation
    finish = representation.start(db, ws, peer.request, peer.embed) if peer else None
    last = last_message(db, ws, session_id, _COST_FIELDS)
    session, summaries, workspace = first.result()
    if session is None or workspace is None or "deleted_at" in session or is_fence(last):
        raise NotFound(f"session '{session_id}' not found in workspace '{ws}'")
    # Retention: a summary covering an expired message is hidden from the second it expires (store.retention).
    oldest = retention.oldest_expired(db, ws, session_id, session)
    if oldest is not None:
        summaries = {kind: s for kind, s in summaries.items() if int(s["covers_seq"]) < oldest}
    try:
        config = summary_config(json_object(workspace.get("configuration")), json_object(session.get("configuration")))
    except Invalid:  # settings broken by a later workspace change: read as if no strategy were set
        config = summary_config(None)
    sliding = config.enabled and config.strategy == "sliding_window"
    recall = None if sliding else recall  # a sliding window's older runs are never returned, recalled or not
    reserve = recall_reserve(limit, recall.share) if recall else 0
    ranked = _pool.submit(_rank, db, ws, session_id, recall, base_of(session), _candidates(reserve)) if recall else None
    read = finish() if finish else None
    fitted = fit(read.conclusions, read.card, (limit - reserve) // 2, count_text) if read else None
    limit -= fitted.tokens if fitted else 0
    costs = [] if sliding else [_summary_cost(s) for s in summaries.values()]
    try:
        plan = plan_context(limit, costs, _cost(last) if last else None, use_summary=use_summary, reserve=reserve)
    except ValueError:
        # A summary that disagrees with the messages (it should not exist: writes are bound to the session's
        # incarnation) is a bug to log, not a reason to refuse the context: answer from the messages alone.
        logger.exception(
            "summary disagrees with the session's messages; answering without summaries", extra={"session": session_id}
        )
        plan = plan_context(limit, [], _cost(last) if last else None, use_summary=False)
    chosen = _pool.submit(read_summary, db, ws, session_id, plan.summary.summary_type) if plan.summary else None
    items = (
        retention.hide_expired(db, ws, session_id, session, _window(db, ws, session_id, plan, base_of(session)))
        if plan.last_seq > plan.after_seq and plan.message_budget > 0
        else []
    )
    if sliding and last:
        # Only the newest `keep_runs` runs exist for the model; older messages are never returned.
        items = [i for i in items if i["run_index"] > last["run_index"] - config.keep_runs]
    summary = chosen.result() if chosen else None
    if plan.summary and (summary is None or summary["covers_seq"] != plan.summary.covers_seq):
        return None  # a newer summary landed after round 1: its boundary and size differ from the plan
    by_seq = {i["seq"]: i for i in items}
    whole_runs = config.whole_runs if whole_runs is None else whole_runs
    selection = select_messages(plan, map(_cost, items), whole_runs=whole_runs)
    recalled: list[dict[str, Any]] = []
    if ranked is not None:
        before = selection.messages[0].seq if selection.messages else plan.last_seq + 1
        recalled = _recalled(
            db, ws, session_id, ranked.result(), min(reserve, plan.message_budget), before, whole_runs, base_of(session)
        )
        if recalled:  # the window gives up what they take (it only shrinks: no overlap)
            taken = sum(i["token_count"] for i in recalled)
            selection = select_messages(
                replace(plan, message_budget=plan.message_budget - taken), map(_cost, items), whole_runs=whole_runs
            )
            after_summary = sum(1 for i in recalled if i["session_id"] == session_id and i["seq"] > plan.after_seq)
            selection = replace(
                selection,
                messages_skipped=selection.messages_skipped - after_summary,
                token_count=selection.token_count + taken,
            )
    # A deleted message's tombstone keeps its place in the window (its seq and tokens: docs/design.md, "Deleting a
    # message") but is not returned, nor counted: the answer holds that many tokens less than would fit.
    shown = [by_seq[m.seq] for m in selection.messages if "id" in by_seq[m.seq]]
    holes = sum(m.token_count for m in selection.messages if "id" not in by_seq[m.seq])
    selection = replace(selection, token_count=selection.token_count - holes)
    answer: SessionContext = {
        "id": session_id,
        "messages": recalled + with_bodies(db, shown, ws, session_id),
        "summary": summary_view(summary),
        "peer_representation": fitted.text if fitted else None,
        "peer_card": fitted.card if fitted else None,
        "messages_skipped": selection.messages_skipped,
        "representation_skipped": fitted.skipped if fitted else 0,
        # (ext) of token_count, what the card takes (the rest of the peer part is the representation's)
        "card_token_count": count_text(card_text(fitted.card)) if fitted and fitted.card else 0,
        "token_count": selection.token_count + (fitted.tokens if fitted else 0),
    }
    if recall is not None:
        answer["recalled"] = [i["id"] for i in recalled]
    return answer


@dataclass(frozen=True)
class Recall:
    """What a context read recalls by and from where: the search query, its semantic embedding function (None:
    lexical only), the share of the tokens set aside for it, whose sessions it reaches (`peers`; None: the session's
    members), narrowed to `sessions` when given (the request's allowlist, or the sessions the caller's key reads:
    precis.auth.Reach.bound)."""

    query: str
    semantic: Callable[[str], list[float]] | None = None
    share: float = 0.25
    peers: tuple[str, ...] | None = None
    sessions: tuple[str, ...] | None = None


# Ranked messages looked at (those inside the newest window are passed over): enough to fill the reserve with
# messages of about 20 tokens, within 20..100 (the most one vector search answers). Looking at one per 10 tokens
# recalled twice the messages on the retrieval bench and not one answer word more.
_MIN_CANDIDATES, _MAX_CANDIDATES, _CANDIDATE_TOKENS = 20, 100, 20


def _candidates(reserve: int) -> int:
    return max(_MIN_CANDIDATES, min(_MAX_CANDIDATES, reserve // _CANDIDATE_TOKENS))


def recall_sessions(db: Db, ws: str, session_id: str, recall: Recall) -> frozenset[str]:
    """The sessions a context's recall reaches: the session itself, and those its peers take part in as far as the
    request narrows them and its key may read (deleted ones are left out by the ranking)."""
    if recall.sessions is not None and set(recall.sessions) <= {session_id}:
        return frozenset({session_id})
    peers = recall.peers if recall.peers is not None else tuple(resources.members(db, ws, session_id))
    joined = resources.sessions_by_peer(db, ws, peers)
    reach = set().union(*(joined[p] for p in peers))
    if recall.sessions is not None:
        reach &= set(recall.sessions)
    return frozenset(reach | {session_id})


def _rank(db: Db, ws: str, session_id: str, recall: Recall, base: Base | None, wanted: int) -> list[tuple[str, int]]:
    from precis.store.search import rank

    sessions = recall_sessions(db, ws, session_id, recall)
    return rank(
        db,
        ws,
        recall.query,
        wanted,
        semantic=recall.semantic,
        session_id=session_id,
        base=base,
        sessions=None if sessions == {session_id} else sessions,
    )


def _recalled(
    db: Db,
    ws: str,
    session_id: str,
    ranked: list[tuple[str, int]],
    budget: int,
    before: int,
    whole_runs: bool,
    base: Base | None,
) -> list[dict[str, Any]]:
    """The recalled messages as the API shows them: the best-ranked that fit `budget`, none of this session's from
    `before` on (the newest window), none of a deleted session's (with `whole_runs`, each with its whole run, or not
    at all); grouped by session, the sessions in time order, each in seq order."""
    ranked = [(s, seq) for s, seq in ranked if s != session_id or seq < before]
    if budget <= 0 or not ranked:
        return []
    found = messages_by_key(db, ws, ranked, WINDOW_FIELDS)  # (`rank` leaves deleted sessions out)
    if base is not None:
        missing = [seq for s, seq in ranked if s == session_id and (s, seq) not in found and seq <= base.through]
        if missing:
            found |= {
                (session_id, seq): i for seq, i in messages_at(db, ws, base.session, missing, WINDOW_FIELDS).items()
            }
    runs: list[list[tuple[str, MessageItem]]] = []
    for session, seq in ranked:
        item = found.get((session, seq))
        if item is None:
            continue
        if whole_runs:
            # The run's messages: from its start, as far as it goes (a run is one agent execution: short).
            start = item["run_start_seq"]
            own = session == session_id
            run = [
                (session, i)
                for i in read_range(
                    db,
                    ws,
                    session,
                    start,
                    min(start + 199, before - 1) if own else start + 199,
                    base=base if own else None,
                )
                if i.get("run_start_seq") == start
            ]
            if run:  # this session's ends before the window, whose first message starts a run when runs are whole
                runs.append(run)
        else:
            runs.append([(session, item)])
    by_key = {(s, i["seq"]): i for run in runs for s, i in run}
    chosen = select_recalled(([Recallable((s, i["seq"]), i["token_count"]) for s, i in run] for run in runs), budget)
    sessions: dict[str, list[MessageItem]] = {}
    for key in sorted(m.key for m in chosen):
        sessions.setdefault(key[0], []).append(by_key[key])
    ordered = sorted(sessions.items(), key=lambda entry: (min(i["created_at"] for i in entry[1]), entry[0]))
    return [view for s, items in ordered for view in with_bodies(db, items, ws, s)]


@dataclass(frozen=True)
class PeerView:
    """The representation a context read adds: whose view of whom (a representation.Request) and the embedder of
    its search query."""

    request: representation.Request
    embed: Callable[[str], list[float]]


def read_summaries(db: Db, ws: str, session_id: str) -> dict[str, Any]:
    """The session's current short and long summaries (a rolling summary reports as the long one)."""
    session, summaries, _ = session_with_summaries(db, ws, session_id)
    if session is None or "deleted_at" in session:
        raise NotFound(f"session '{session_id}' not found in workspace '{ws}'")
    oldest = retention.oldest_expired(db, ws, session_id, session)
    if oldest is not None:  # a summary covering an expired message is hidden (store.retention)
        summaries = {kind: s for kind, s in summaries.items() if int(s["covers_seq"]) < oldest}
    longs = [s for t, s in summaries.items() if t in (LONG, ROLLING)]
    long_summary = max(longs, key=lambda s: s["covers_seq"], default=None)
    return {
        "id": session_id,
        "short_summary": summary_view(summaries.get(SHORT)),
        "long_summary": summary_view(long_summary),
    }
