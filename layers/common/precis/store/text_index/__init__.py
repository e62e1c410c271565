"""Exact lexical search over a workspace's messages: an inverted index in the table, packed, so that indexing a message
costs a few of its own bytes rather than an item per word, and no item is written by every message of a workspace.

Items (keys in `precis.store.keys`):

- a **text** per message (`text_doc`), beside its session's partition: its term counts, length, speaker and the unit
  that indexed it. A session search ranks the session's texts alone. A text present means its unit is in the index
  (fresh or merged): the repair and the backfill index only what has none.
- a **fresh** item per unit (a post's batch; `text_fresh_pk`, one of FRESH_SHARDS partitions chosen by session): the
  unit's texts packed, written by the request that stores the messages before it writes their texts, and read by
  every workspace search with consistent Queries, so a message is found as soon as its post answers.
- **segments** (`text_segment_pk`, a partition each), immutable: a header (`H`: its speakers, their messages and
  lengths, the first session of each session list part), its sessions' ids sorted in parts (`S…`: a purge looks for
  its session in the one part that could hold it), doc tables (`D…`: session, seq and incarnation by doc number) and
  term buckets (`T…`: each term's whole postings list in the segment, as doc number, count, length and speaker; a
  term too long for one item is chunked in `W…` items, best postings first).
- the **manifest** (`text_manifest`): the live segments with their sizes. It changes once a merge, never a message.
  It also names the segments being written and those a compaction replaced, so that a writer that dies leaves no
  items nothing knows of: the next compaction deletes them (`_sweep`), a workspace delete too.

The deriver merges a shard's fresh units into a segment once MERGE_MIN_DOCS are there (a unit whose texts are not
all written yet stays fresh until its request or the deriver's repair writes them): the segment's items first,
then one transaction adds it to the manifest and deletes the fresh items (both or neither, so nothing is counted
twice or lost), then FAN_IN segments of a level are merged into one of the next (size-tiered, up to
MAX_SEGMENT_DOCS). A merge leaves out the messages of deleted sessions and of earlier incarnations; until it runs, a
search leaves them out when it resolves its winners. A search reads the manifest before and after its other reads
and reads again when a merge came between (a merge removes what it merged only after its manifest changed).

Statistics are exact sums, read with the postings: N and the total length from the manifest (a speaker's from the
headers), a term's document frequency the length of its postings lists. A search reads at most a `Budget`
(requests, bytes, seconds); when it ends first, the ranking is of what was read (the rarest terms' postings come
first, a long list's best postings first) and the budget says so.

Its modules: `items` (sizes, `Text` and `Doc`, units, shards, packing, batched writes), `texts` (a unit's fresh
items and texts), `segments` (pure), `manifest`, `merging` (the deriver's merges, compaction, vacuum), `purging`,
`ranking` (the `Budget`, BM25 over the index) and `upgrade` (the release before segments). This face exports what
the store's search face and the tests call.
"""

from precis.lexical import Document
from precis.store.text_index.items import (
    DOC_PART,
    FAN_IN,
    FRESH_SHARDS,
    ITEM_RAW,
    LEGACY_BLOCK,
    MAX_SEGMENT_DOCS,
    MERGE_MIN_DOCS,
    MERGE_UNITS,
    PART_RAW,
    PURGE_PAGE,
    SESSION_PART,
    STALE_BUILD_S,
    TRANSACT_MAX,
    Doc,
    Text,
    legacy_unit,
    shard_of,
    unit_members,
    unit_of,
    unit_range,
)
from precis.store.text_index.manifest import Manifest, read_manifest
from precis.store.text_index.merging import compact, merge, merge_shard, vacuum, vacuum_messages
from precis.store.text_index.purging import delete_index, forget_in_unit, purge_session
from precis.store.text_index.ranking import Budget, rank_workspace, session_texts
from precis.store.text_index.segments import Segment
from precis.store.text_index.texts import RANGE_READ_MAX, alive, index_texts, missing_texts, put_bound, texts_at
from precis.store.text_index.upgrade import (
    DOC_PAGE,
    HOLDINGS_ROUNDS,
    OLD_PAGE,
    OLD_STATS,
    Holdings,
    delete_old_index,
    index_stored,
)

__all__ = [
    "Budget",
    "DOC_PAGE",
    "DOC_PART",
    "Doc",
    "Document",
    "FAN_IN",
    "FRESH_SHARDS",
    "HOLDINGS_ROUNDS",
    "Holdings",
    "ITEM_RAW",
    "LEGACY_BLOCK",
    "MAX_SEGMENT_DOCS",
    "MERGE_MIN_DOCS",
    "MERGE_UNITS",
    "Manifest",
    "OLD_PAGE",
    "OLD_STATS",
    "PART_RAW",
    "PURGE_PAGE",
    "RANGE_READ_MAX",
    "SESSION_PART",
    "STALE_BUILD_S",
    "Segment",
    "TRANSACT_MAX",
    "Text",
    "alive",
    "compact",
    "delete_index",
    "delete_old_index",
    "index_stored",
    "index_texts",
    "legacy_unit",
    "merge",
    "merge_shard",
    "missing_texts",
    "purge_session",
    "forget_in_unit",
    "put_bound",
    "rank_workspace",
    "read_manifest",
    "session_texts",
    "shard_of",
    "texts_at",
    "unit_members",
    "unit_of",
    "unit_range",
    "vacuum",
    "vacuum_messages",
]
