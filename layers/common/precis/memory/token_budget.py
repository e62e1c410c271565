"""A workspace's monthly token budget (docs/design.md, "Usage"): once its model calls have spent
`configuration.usage.monthly_token_budget` tokens in the calendar month (UTC), derivation (derive, card, dream) pauses;
ingestion, context reads, summaries and chat go on. Paused cursors stay where they are and are marked due, so the
schedule's flush tries them again, and they derive once the month turns or the budget is raised.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

from precis.configuration import monthly_token_budget
from precis.errors import Invalid
from precis.memory.deriver import NOTHING_DUE, DeriveTarget, SessionTarget
from precis.store import derive_cursors, usage
from precis.store.db import Db
from precis.store.records import json_object
from precis.store.resources import WorkspaceItem, require_workspace, workspace_items

log = logging.getLogger("precis.memory.token_budget")
PAUSED = "token_budget"  # what the queue status's `paused` says


@dataclass(frozen=True)
class Budget:
    tokens: int | None  # None: no budget
    spent: int  # this month's tokens so far (0 when there is no budget: not read)

    @property
    def paused(self) -> bool:
        return self.tokens is not None and self.spent >= self.tokens


def budget_of(db: Db, workspace: WorkspaceItem, today: date) -> Budget:
    """The workspace's budget and this month's spend (one bounded Query, only when a budget is set)."""
    tokens = monthly_token_budget(json_object(workspace.get("configuration")))
    if tokens is None:
        return Budget(None, 0)
    return Budget(tokens, usage.month_tokens(db, workspace["id"], today))


def paused_workspaces(db: Db, workspaces: Iterable[str], today: date) -> set[str]:
    """Of `workspaces`, those whose budget is spent: one BatchGetItem of their items, and a Query of this month's
    usage for each that has a budget."""
    wanted = sorted(set(workspaces))
    if not wanted:
        return set()
    return {w["id"] for w in workspace_items(db, wanted) if budget_of(db, w, today).paused}


def hold(db: Db, target: SessionTarget, senders: Iterable[str], now: datetime, images: Iterable[dict] = ()) -> None:
    """Leave a paused session's cursors where they are, due at `now`: those of `senders`, with their messages among
    `images` (a stream batch's) counted as pending, and (a wake-up's or the flush's, with no images) those waiting.
    Every flush of the schedule tries them again (and finds them paused until the budget allows), so nothing waiting
    is forgotten (best effort, like a failure's mark)."""
    counts = Counter(i.get("peer_id") for i in images)
    waiting = set(senders)
    if not counts:
        cursors = derive_cursors.cursors(db, target.workspace, target.session)
        waiting |= {c["sender"] for c in cursors if c.get("sender") and c.get("due_at", NOTHING_DUE) != NOTHING_DUE}
    for sender in sorted(waiting):
        found = DeriveTarget(target.workspace, target.session, sender)
        code = derive_cursors.hold(db, found, now.astimezone(UTC).isoformat(), counts.get(sender, 0))
        if code is not None:
            log.warning("could not mark %s as due while paused: %s", found, code)


def report(db: Db, ws: str, first: str | None, last: str | None, *, today: date | None = None) -> dict[str, Any]:
    """GET …/usage (ext): the workspace's usage by day, role and model from `first` to `last` (default: this month so
    far), its totals, and its budget: the monthly token budget, this month's spend, and whether derivation is paused."""
    today = today or datetime.now(UTC).date()
    try:
        end = date.fromisoformat(last) if last else today
        start = date.fromisoformat(first) if first else end.replace(day=1)
    except ValueError as exc:
        raise Invalid(f"from/to: not a day: {exc}") from None
    if start > end:
        raise Invalid(f"from ({start}) is after to ({end})")
    if (end - start).days >= usage.MAX_DAYS:
        raise Invalid(f"from..to spans {(end - start).days + 1} days; at most {usage.MAX_DAYS} a request")
    workspace = require_workspace(db, ws)
    rows, capped = usage.read(db, ws, start, end)
    totals = {
        "calls": sum(r["calls"] for r in rows),
        "input_tokens": sum(r["input_tokens"] for r in rows),
        "cached_input_tokens": sum(r["cached_input_tokens"] for r in rows),
        "output_tokens": sum(r["output_tokens"] for r in rows),
    }
    month = today.isoformat()[:7]
    if start <= today.replace(day=1) and end >= today and not capped:  # this month so far is among the rows read
        tokens = monthly_token_budget(json_object(workspace.get("configuration")))
        spent = sum(int(r["input_tokens"]) + int(r["output_tokens"]) for r in rows if r["day"][:7] == month)
        budget = Budget(tokens, spent)
    else:
        budget = budget_of(db, workspace, today)
        if budget.tokens is None:
            budget = Budget(None, usage.month_tokens(db, ws, today))
    answer: dict[str, Any] = {
        "workspace_id": ws,
        "from": start.isoformat(),
        "to": end.isoformat(),
        "usage": rows,
        "totals": totals,
        "budget": {
            "monthly_token_budget": budget.tokens,
            "month": month,
            "spent": budget.spent,
            "paused": PAUSED if budget.paused else None,
        },
    }
    if capped:
        answer["capped"] = True  # a month held more items than one read takes: some are left out
    return answer
