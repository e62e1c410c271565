"""Conclusions (what an observer has concluded about an observed peer), their vectors, and peer cards: the face the rest
of the code imports.

A collection (ws, observer, observed) is one partition: conclusions `C#{id}` (ids sort by time, so the partition
reads newest first), vectors `V#{id}`, dedupe keys `D#…`, the card and the head. Every write to a collection's
conclusions is one transaction that moves the head's version on, conditioned on the version its dedupe reads saw:
two writers of the same text cannot both miss each other (the loser re-reads and counts the text as derived again).
Outside the partition: an id pointer per conclusion (GET/DELETE name only the workspace), a provenance item in the
session's partition (the session's purge deletes the conclusion), and the collection's registry item in the
workspace's partition (the workspace delete finds it).

Ranked inside, lowest first: `items`; `provenance`; `dedupe`, `reads`, `cards`, `backfill`; `writes` and
`deletes`; each imports only those below it.
"""

from __future__ import annotations

from precis.store.conclusions.backfill import write_missing_texts
from precis.store.conclusions.cards import (
    card_state,
    collection_contents,
    forget_card_actions,
    get_card,
    newest_contents,
    put_card,
    rebuild_card,
    write_card,
    write_card_step,
)
from precis.store.conclusions.deletes import (
    delete,
    delete_collections,
    purge_session_conclusions,
    remove_conclusions,
    remove_deductions,
    remove_session_copies,
)
from precis.store.conclusions.imports import import_card, import_conclusions
from precis.store.conclusions.items import (
    Derived,
    EmbedsTexts,
    ExtraConditionFailed,
    SessionGone,
    content_digest,
    new_conclusion_id,
    vector_item,
)
from precis.store.conclusions.provenance import message_conclusions, session_explicit
from precis.store.conclusions.reads import (
    get,
    list_conclusions,
    query,
)
from precis.store.conclusions.writes import (
    create,
    write,
)

__all__ = [
    "Derived",
    "EmbedsTexts",
    "ExtraConditionFailed",
    "SessionGone",
    "card_state",
    "collection_contents",
    "content_digest",
    "create",
    "delete",
    "delete_collections",
    "forget_card_actions",
    "get",
    "get_card",
    "import_card",
    "import_conclusions",
    "list_conclusions",
    "message_conclusions",
    "new_conclusion_id",
    "newest_contents",
    "purge_session_conclusions",
    "put_card",
    "query",
    "rebuild_card",
    "remove_conclusions",
    "remove_deductions",
    "remove_session_copies",
    "session_explicit",
    "vector_item",
    "write",
    "write_card",
    "write_card_step",
    "write_missing_texts",
]
