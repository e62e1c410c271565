"""Segments, pure: a segment's items built from its docs, and its docs rebuilt from its items."""

from __future__ import annotations

import math
import secrets
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from precis.lexical import Document
from precis.store import keys
from precis.store.db import to_item
from precis.store.text_index.items import DOC_PART, ITEM_RAW, PART_RAW, SESSION_PART, Doc, bucket, pack, unpack


@dataclass(frozen=True)
class Segment:
    """A segment built from docs: its manifest entry and its items."""

    id: str
    level: int
    docs: tuple[Doc, ...]

    @classmethod
    def of(cls, docs: Iterable[Doc], level: int) -> Segment:
        unique = {(d.session, d.seq, d.incarnation): d for d in docs}
        ordered = tuple(sorted(unique.values(), key=lambda d: (d.session, d.seq, d.incarnation)))
        return cls(f"{level}.{int(time.time() * 1000):013d}.{secrets.token_hex(4)}", level, ordered)

    def build(self, ws: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """(manifest entry, items) of the segment."""
        peers = sorted({d.peer for d in self.docs})
        peer_no = {p: i for i, p in enumerate(peers)}
        peer_stats = [[0, 0] for _ in peers]
        postings: dict[str, list[tuple[int, int, int, int]]] = {}
        for number, doc in enumerate(self.docs):
            p = peer_no[doc.peer]
            peer_stats[p][0] += 1
            peer_stats[p][1] += doc.document.length
            for term, count in doc.document.counts.items():
                postings.setdefault(term, []).append((number, count, doc.document.length, p))
        raw = sum(16 * len(plist) + len(term) for term, plist in postings.items())
        buckets = max(1, math.ceil(raw / PART_RAW))
        pk = keys.text_segment_pk(ws, self.id)
        items: list[dict[str, Any]] = []
        parts: list[dict[str, Any]] = [{"t": {}, "c": {}} for _ in range(buckets)]
        for term, plist in postings.items():
            plist.sort(key=lambda p: (-p[1], p[2], p[0]))  # best first: most said, then shortest
            part = parts[bucket(term, buckets)]
            if 16 * len(plist) <= ITEM_RAW // 2:
                part["t"][term] = [x for posting in plist for x in posting]
                continue
            per_chunk = ITEM_RAW // 16
            chunks = [plist[i : i + per_chunk] for i in range(0, len(plist), per_chunk)]
            by_peer = Counter(p[3] for p in plist)
            part["c"][term] = [len(chunks), len(plist), [by_peer.get(i, 0) for i in range(len(peers))]]
            items += [
                to_item({"PK": pk, "SK": f"W{term}#{i:04d}", "z": pack([x for posting in chunk for x in posting])})
                for i, chunk in enumerate(chunks)
            ]
        items += [to_item({"PK": pk, "SK": f"T{b:05d}", "z": pack(part)}) for b, part in enumerate(parts)]
        doc_parts = math.ceil(len(self.docs) / DOC_PART)
        items += [
            to_item(
                {
                    "PK": pk,
                    "SK": f"D{j:05d}",
                    "z": pack(
                        [[d.session, d.seq, d.incarnation] for d in self.docs[j * DOC_PART : (j + 1) * DOC_PART]]
                    ),
                }
            )
            for j in range(doc_parts)
        ]
        # The sessions' list is apart from the header, which every peer search reads: a segment of 100,000 messages
        # may hold as many sessions, megabytes of ids (past an item's 400 KB).
        session_parts: list[list[str]] = [[]]
        size = 0
        for session in sorted({d.session for d in self.docs}):
            if session_parts[-1] and size + len(session) + 3 > SESSION_PART:
                session_parts.append([])
                size = 0
            session_parts[-1].append(session)
            size += len(session) + 3
        items += [to_item({"PK": pk, "SK": f"S{j:05d}", "z": pack(part)}) for j, part in enumerate(session_parts)]
        header = {"p": peers, "s": peer_stats, "sf": [part[0] for part in session_parts if part]}
        items.append(to_item({"PK": pk, "SK": "H", "z": pack(header)}))
        entry = {
            "id": self.id,
            "lv": self.level,
            "n": len(self.docs),
            "len": sum(d.document.length for d in self.docs),
            "tb": buckets,
        }
        return entry, items


def segment_docs(items: Iterable[Mapping[str, Any]]) -> list[Doc]:
    """The docs of a segment, rebuilt from all its items (its doc tables, header and postings)."""
    header: dict[str, Any] = {}
    table: dict[int, list[Any]] = {}
    counts: dict[int, dict[str, int]] = {}
    lengths: dict[int, int] = {}
    speaker: dict[int, int] = {}
    chunks: dict[str, list[int]] = {}
    for item in items:
        sk, data = item["SK"], unpack(item["z"])
        if sk == "H":
            header = data
        elif sk.startswith("D"):
            start = int(sk[1:]) * DOC_PART
            table.update({start + i: row for i, row in enumerate(data)})
        elif sk.startswith("T"):
            for term, flat in data["t"].items():
                _add_postings(term, flat, counts, lengths, speaker)
        elif sk.startswith("W"):
            term = sk[1:].rpartition("#")[0]
            chunks.setdefault(term, []).extend(data)
    for term, flat in chunks.items():
        _add_postings(term, flat, counts, lengths, speaker)
    peers = header.get("p") or []
    out = []
    for number in sorted(table):
        session, seq, incarnation = table[number]
        peer = peers[speaker[number]] if number in speaker else ""
        out.append(Doc(session, seq, incarnation, peer, Document(counts.get(number, {}), lengths.get(number, 0))))
    return out


def _add_postings(
    term: str,
    flat: Sequence[int],
    counts: dict[int, dict[str, int]],
    lengths: dict[int, int],
    speaker: dict[int, int],
) -> None:
    for i in range(0, len(flat), 4):
        number, count, length, peer = flat[i : i + 4]
        counts.setdefault(number, {})[term] = count
        lengths[number], speaker[number] = length, peer
