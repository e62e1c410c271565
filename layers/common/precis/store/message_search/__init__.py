"""Message search (`POST /search`, a session's, a peer's): exact BM25 over the scope's messages (`text_index`, read
with strongly consistent reads: a message is found as soon as its post answers) and, with a semantic embedder, a
semantic ranking from the vector index `ByMessageMeaning` (asynchronous and approximate, as DynamoDB runs it), fused by
weighted reciprocal rank.

A workspace's or a peer's search reads the query's postings as deep as its top k needs; a session's ranks the
session's indexed texts (its own idf, read whole). The semantic vectors (`svec`) are the deriver's, in items of their
own beside the session's partition (`keys.message_vectors_pk`), written as each insert comes down the stream; the
deriver also finishes the index of a batch whose request died before it could (`ensure_indexed`).

Its modules: `semantic` (the message vectors), `repair` (the deriver's merges and repair, under the session's repair
lease), `backfill` (the upgrade's) and `ranking` (search, fusion, the deleted-session rule, the views).
"""

from precis.store.message_search.backfill import REBUILD_UNIT, REINDEX_WINDOW, Reindexed, reindex_session
from precis.store.message_search.ranking import DEEPER, lexical_rank, rank, read_views, search
from precis.store.message_search.repair import (
    MERGE_CHECK_EVERY,
    REPAIR_LEASE_S,
    RepairBusy,
    ensure_indexed,
    index_unit,
    merge_fresh,
)
from precis.store.message_search.semantic import MEANING_INDEX, index_messages, purge_vectors, vector_item

__all__ = [
    "DEEPER",
    "MEANING_INDEX",
    "MERGE_CHECK_EVERY",
    "REBUILD_UNIT",
    "REINDEX_WINDOW",
    "REPAIR_LEASE_S",
    "Reindexed",
    "RepairBusy",
    "ensure_indexed",
    "index_messages",
    "index_unit",
    "lexical_rank",
    "merge_fresh",
    "purge_vectors",
    "rank",
    "read_views",
    "reindex_session",
    "search",
    "vector_item",
]
