"""How many summaries a session's strategy says are due: the queue status counts them, and only its requests pay
for the bounded read (the strategies decide; the summarizer's runner writes)."""

from __future__ import annotations

from precis.configuration import summary_config
from precis.errors import Invalid
from precis.store.db import Db
from precis.store.messages import base_of, read_from
from precis.store.records import json_object
from precis.store.resources import SessionItem, WorkspaceItem
from precis.store.summaries import read_summary_state
from precis.summaries.strategies import MessageRef, SummaryCost, decide, needed_from

SUMMARIES_READ_MAX = 1_000  # messages the queue status reads to count a session's due summaries (a bounded read)


def summaries_due(db: Db, ws: str, session_id: str, session: SessionItem, workspace: WorkspaceItem) -> int:
    """How many summaries the session's strategy says are due and not yet written (the queue status counts them)."""
    try:
        config = summary_config(json_object(workspace.get("configuration")), json_object(session.get("configuration")))
    except Invalid:
        return 0
    raw, _markers = read_summary_state(db, ws, session_id)
    stored = {t: SummaryCost(t, s["covers_seq"], s["end_tokens"], s["token_count"]) for t, s in raw.items()}
    first = needed_from(config, stored)
    if first is None:
        return 0
    items = read_from(db, ws, session_id, first, limit=SUMMARIES_READ_MAX, base=base_of(session), gaps=True)
    unfinished = {t: s["job_through_seq"] for t, s in raw.items() if s.get("job_through_seq")}
    due = len(
        decide(config, stored, [MessageRef(i["seq"], i["token_count"], i.get("run_id")) for i in items], unfinished)
    )
    # More messages wait than one status reads: summaries are behind, so at least one is due (never 0 while they are).
    return max(due, 1) if len(items) == SUMMARIES_READ_MAX else due
