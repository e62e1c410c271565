"""A corpus's term statistics for BM25 (`precis.lexical.Stats`): one small item per corpus (a workspace's messages,
a collection's conclusions) holding the document count, the total length and a document-frequency counter per hashed
term slot.

Counted with one UpdateItem of ADDs per write of texts (a message batch, a chunk of conclusions): atomic, so
concurrent writers never conflict or lose a count, and no read first. The item stays small (`lexical.DF_SLOTS`
counters of a few bytes), which is what an update costs in write units. Deletes and redelivered writes are not
subtracted: idf is an estimate, and a count off by a batch moves it very little.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from precis.lexical import DF_SLOTS, Document, Stats
from precis.store.db import Db, to_item

_COUNTER = "x"  # counters are x0 … x3ff (hex): short names keep the item, and each update, small
# DynamoDB allows 300 operators in an expression (and 4 KB): a count touching more counters is sent in several
# updates of at most this many ADDs (moto's parser also recurses once per ADD).
_MAX_ADDS = 100


def _name(slot: int) -> str:
    return f"{_COUNTER}{slot:x}"


def count(db: Db, key: dict[str, str], documents: Iterable[Document]) -> None:
    """Add `documents` to the corpus at `key`: its count, total length and each term's document frequency."""
    documents = list(documents)
    if not documents:
        return
    df = Counter(slot for d in documents for slot in d.df_slots())
    values = {":docs": len(documents), ":terms": sum(d.length for d in documents)}
    pending = ["ndocs :docs", "nterms :terms"]  # the first update carries the totals
    for slot, increment in sorted(df.items()):
        values.setdefault(f":{increment}", increment)
        pending.append(f"{_name(slot)} :{increment}")
    while pending:
        expression, pending = pending[:_MAX_ADDS], pending[_MAX_ADDS:]
        used = {p.split()[1] for p in expression}
        db.client.update_item(TableName=db.table, Key=to_item(key), UpdateExpression="ADD " + ", ".join(expression),
                              ExpressionAttributeValues=to_item({k: v for k, v in values.items() if k in used}))


def read(db: Db, key: dict[str, str]) -> Stats:
    """The corpus's statistics (empty when nothing was counted yet). A consistent read is not needed: idf is an
    estimate."""
    item = db.client.get_item(TableName=db.table, Key=to_item(key)).get("Item")
    return stats_of(item or {})


def stats_of(item: dict[str, Any]) -> Stats:
    """Stats from the item's raw AttributeValues."""
    df = {}
    for name, value in item.items():
        if name.startswith(_COUNTER) and "N" in value:
            slot = int(name[1:], 16)
            if slot < DF_SLOTS:
                df[slot] = int(value["N"])
    documents = int(item["ndocs"]["N"]) if "ndocs" in item else 0
    length = int(item["nterms"]["N"]) if "nterms" in item else 0
    return Stats(documents, length, df)
