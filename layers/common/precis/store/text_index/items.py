"""What every part of the exact index shares: its sizes, a message to index (`Text`) and an indexed one (`Doc`),
units and shards, the packing of an item's payload and batched writes."""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from precis.lexical import Document, Key
from precis.store.db import Db, each
from precis.store.records import write_batch

if TYPE_CHECKING:
    from types_boto3_dynamodb.type_defs import WriteRequestTypeDef


FRESH_SHARDS = 8  # partitions a workspace's fresh units spread over (by session): 1,000 WCU/s each
MERGE_MIN_DOCS = 100  # fresh messages in a shard before the deriver merges them into a segment
FAN_IN = 4  # segments of one level merged into one of the next
MAX_SEGMENT_DOCS = 100_000  # a segment this large is not merged further
TRANSACT_MAX = 100  # actions in one TransactWriteItems
MERGE_UNITS = TRANSACT_MAX - 1  # fresh items one merge takes: each is deleted in the manifest's transaction
PART_RAW = 24_000  # raw (JSON) bytes a segment's term bucket aims at: ~8 KB stored
ITEM_RAW = 300_000  # raw bytes past which an item is split (DynamoDB's item limit is 400 KB; zlib only shrinks it)
DOC_PART = 500  # docs a segment's doc table item holds
SESSION_PART = 32_000  # raw bytes of session ids a segment's session list item holds (its header names the first)
PURGE_PAGE = 1_000  # texts a purge deletes between two looks at its deadline
LEGACY_BLOCK = 100  # seqs of a legacy unit (a message stored without one)
STALE_BUILD_S = 3_600  # a segment written for longer than this has no writer left (an invocation runs 15 min at most)


@dataclass(frozen=True)
class Text:
    """One message to index: its seq, speaker and text."""

    seq: int
    peer: str
    content: str


@dataclass(frozen=True)
class Doc:
    """One indexed message: where it is, the incarnation of its session it belongs to, its speaker and its terms."""

    session: str
    seq: int
    incarnation: str
    peer: str
    document: Document

    @property
    def key(self) -> Key:
        return (self.session, self.seq)


@cache
def pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=8, thread_name_prefix="precis-text-index")


def shard_of(session_id: str) -> int:
    """The fresh shard of a session's units."""
    return zlib.crc32(session_id.encode("utf-8", "surrogatepass")) % FRESH_SHARDS


def bucket(term: str, buckets: int) -> int:
    return zlib.crc32(term.encode("utf-8")) % buckets


def pack(value: Any) -> bytes:
    return zlib.compress(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8"), 6)


def unpack(data: bytes) -> Any:
    return json.loads(zlib.decompress(data))


def legacy_unit(session_id: str, seq: int) -> str:
    """The unit of a message stored without one (before this index, or by a writer that does not index): the aligned
    block of 100 seqs it is in, so every indexer (the deriver's repair, the upgrade's backfill) names it the same."""
    first = (seq - 1) // LEGACY_BLOCK * LEGACY_BLOCK + 1
    return f"{session_id}:{first}:-"


def unit_of(session_id: str, message: Mapping[str, Any]) -> str:
    """The index unit a stored message belongs to (`ib`, else its legacy block)."""
    return message.get("ib") or legacy_unit(session_id, int(message["seq"]))


def write(db: Db, requests: list[WriteRequestTypeDef]) -> None:
    """BatchWriteItems of 25, in parallel; unprocessed items retried."""
    chunks = [requests[i : i + 25] for i in range(0, len(requests), 25)]
    each(pool(), lambda chunk: write_batch(db, chunk), chunks)


def unit_range(unit: str) -> tuple[int, int]:
    """The first and last seq the messages of a unit `unit_of` names can be at: a batch is 100 messages at most from
    its first seq, a legacy block 100 seqs from its first (`session:first:nonce`; ids hold no colon)."""
    first = int(unit.split(":")[1])
    return first, first + LEGACY_BLOCK - 1


def unit_members[M: Mapping[str, Any]](session_id: str, unit: str, messages: Iterable[M]) -> list[M]:
    """The messages of `unit` among `messages` (stored items of the session), by seq. Given every stored message of
    `unit_range(unit)`, the whole unit: what each indexer of stored messages passes `index_texts`, so none indexes a
    unit twice or in part."""
    first, last = unit_range(unit)
    return sorted(
        (m for m in messages if first <= int(m["seq"]) <= last and unit_of(session_id, m) == unit),
        key=lambda m: int(m["seq"]),
    )
