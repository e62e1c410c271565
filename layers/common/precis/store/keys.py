"""Every table key and S3 object name Precis uses (nothing outside `precis.store` builds one)."""

from __future__ import annotations

SEQ_DIGITS = 12
MAX_SEQ = 10**SEQ_DIGITS - 1
# A conclusion id begins with its creation time in ms, in TIME_CHARS of ID_ALPHABET (ASCII order): ids sort by time.
ID_ALPHABET = "-0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz"
TIME_CHARS = 8  # 64**8 ms ≈ 8900 years


def id_chars(value: int, width: int) -> str:
    """`value` in `width` chars of ID_ALPHABET, most significant first."""
    return "".join(ID_ALPHABET[(value >> (6 * i)) & 63] for i in reversed(range(width)))


def workspace(ws: str) -> dict[str, str]:
    return {"PK": f"WS#{ws}", "SK": "WS"}


def peer(ws: str, peer_id: str) -> dict[str, str]:
    return {"PK": f"WS#{ws}", "SK": f"PEER#{peer_id}"}


def session(ws: str, session_id: str) -> dict[str, str]:
    return {"PK": f"WS#{ws}", "SK": f"SESSION#{session_id}"}


def session_pk(ws: str, session_id: str) -> str:
    """Partition of everything inside a session: members, messages, summaries."""
    return f"WS#{ws}#S#{session_id}"


def member(ws: str, session_id: str, peer_id: str) -> dict[str, str]:
    return {"PK": session_pk(ws, session_id), "SK": f"PEER#{peer_id}"}


def peer_session(ws: str, peer_id: str, session_id: str) -> dict[str, str]:
    """The reverse of `member`, so a peer's sessions are one query."""
    return {"PK": f"WS#{ws}#P#{peer_id}", "SK": f"SESSION#{session_id}"}


def peer_left(ws: str, peer_id: str, session_id: str) -> dict[str, str]:
    """A session the peer left, beside its joined sessions: its messages stay there, and erasing the peer finds them."""
    return {"PK": f"WS#{ws}#P#{peer_id}", "SK": f"LEFT#{session_id}"}


def session_left(ws: str, session_id: str, peer_id: str) -> dict[str, str]:
    """The reverse of `peer_left`, in the session's partition: the session's purge finds and deletes both."""
    return {"PK": session_pk(ws, session_id), "SK": f"LEFT#{peer_id}"}


def peer_sessions_pk(ws: str, peer_id: str) -> str:
    return f"WS#{ws}#P#{peer_id}"


def message_sk(seq: int) -> str:
    return f"MSG#{seq:0{SEQ_DIGITS}d}"


def message(ws: str, session_id: str, seq: int) -> dict[str, str]:
    return {"PK": session_pk(ws, session_id), "SK": message_sk(seq)}


def summary(ws: str, session_id: str, summary_type: str) -> dict[str, str]:
    return {"PK": session_pk(ws, session_id), "SK": f"SUMMARY#{summary_type}"}


def summary_failure(ws: str, session_id: str, summary_type: str) -> dict[str, str]:
    """A failed summary job's marker: under SUMMARY#, so the summarizer reads markers with the summaries in one query
    (readers of a summary use its exact key, which a marker never has)."""
    return {"PK": session_pk(ws, session_id), "SK": f"SUMMARY#{summary_type}#FAILED"}


def summary_parts(ws: str, session_id: str, summary_type: str) -> dict[str, str]:
    """The `summary_type` summaries written since the summary built from them was: under SUMMARY#, read with the
    summaries in one query (readers of a summary use its exact key, which this item never has)."""
    return {"PK": session_pk(ws, session_id), "SK": f"SUMMARY#{summary_type}#PARTS"}


def summary_lease(ws: str, session_id: str) -> dict[str, str]:
    """The lease that lets one invocation at a time summarize the session: in its partition, so a purge removes it,
    and outside SUMMARY#, so the summary query never reads it."""
    return {"PK": session_pk(ws, session_id), "SK": "LEASE#summarize"}


def idempotency(ws: str, session_id: str, key: str) -> dict[str, str]:
    return {"PK": f"{session_pk(ws, session_id)}#IDEM#{key}", "SK": "IDEM"}


def fence(ws: str, session_id: str, seq: int) -> dict[str, str]:
    """The item a delete puts at the seq after the last message, so no append can commit after the delete."""
    return message(ws, session_id, seq)


def body_prefix(ws: str, session_id: str, incarnation: str) -> str:
    """Every large body of one incarnation of a session lives under this prefix (the purge lists it)."""
    return f"bodies/{ws}/{session_id}/{incarnation}/"


def body_object(ws: str, session_id: str, incarnation: str, token: str) -> str:
    return f"{body_prefix(ws, session_id, incarnation)}{token}"


def audit_prefix(ws: str, session_id: str, incarnation: str) -> str:
    return f"audit/{ws}/{session_id}/{incarnation}/"


# ---------------------------------------------------------------- derived memory (docs/design.md, "Derived memory")
def collection_pk(ws: str, observer: str, observed: str) -> str:
    """Partition of one collection (what `observer` has concluded about `observed`): conclusions, their vectors,
    dedupe keys, the card and the head."""
    return f"WS#{ws}#C#{observer}#{observed}"


def collection_name(ws: str, observer: str, observed: str) -> str:
    """The vector index's HASH value of a collection."""
    return f"{ws}#{observer}#{observed}"


def conclusion(ws: str, observer: str, observed: str, conclusion_id: str) -> dict[str, str]:
    return {"PK": collection_pk(ws, observer, observed), "SK": f"C#{conclusion_id}"}


def conclusion_vector(ws: str, observer: str, observed: str, conclusion_id: str) -> dict[str, str]:
    """A conclusion's embedding, in an item of its own so reads of the text never pay for it."""
    return {"PK": collection_pk(ws, observer, observed), "SK": f"V#{conclusion_id}"}


def conclusion_vectors_since(ms: int) -> tuple[str, str]:
    """The sort keys that bound a collection's vector items of conclusions made from `ms` (epoch ms) on."""
    return "V#" + id_chars(ms, TIME_CHARS), "V#~"


def conclusion_dedupe(
    ws: str, observer: str, observed: str, level: str, session_id: str | None, digest: str
) -> dict[str, str]:
    return {"PK": collection_pk(ws, observer, observed), "SK": f"D#{level}#{session_id or '-'}#{digest}"}


def conclusion_pointer(ws: str, conclusion_id: str) -> dict[str, str]:
    """Where a conclusion id lives (GET/DELETE /conclusions/{id} name only the workspace)."""
    return {"PK": f"WS#{ws}#CID#{conclusion_id}", "SK": "CID"}


def conclusion_provenance(ws: str, session_id: str, conclusion_id: str) -> dict[str, str]:
    """A conclusion drawn from a session, listed in the session's partition: the session's purge deletes it."""
    return {"PK": session_pk(ws, session_id), "SK": f"DERIVED#{conclusion_id}"}


def card(ws: str, observer: str, observed: str) -> dict[str, str]:
    return {"PK": collection_pk(ws, observer, observed), "SK": "CARD"}


def collection_head(ws: str, observer: str, observed: str) -> dict[str, str]:
    """Version (an optimistic lock over the collection's writes, so dedupe holds under concurrency) and count."""
    return {"PK": collection_pk(ws, observer, observed), "SK": "HEAD"}


def dream(ws: str, observer: str, observed: str) -> dict[str, str]:
    """A collection's dream state: new explicit conclusions since its last dream, and a dream due or running."""
    return {"PK": collection_pk(ws, observer, observed), "SK": "DREAM"}


def collection_registry(ws: str, observer: str, observed: str) -> dict[str, str]:
    """A collection listed in its workspace's partition, so a workspace delete finds it."""
    return {"PK": f"WS#{ws}", "SK": f"COLL#{observer}#{observed}"}


def message_terms(ws: str) -> dict[str, str]:
    """Where releases before the exact index kept a workspace's hashed term statistics (deleted by the upgrade and
    the workspace delete)."""
    return {"PK": f"WS#{ws}#TERMS", "SK": "MESSAGES"}


def collection_terms(ws: str, observer: str, observed: str) -> dict[str, str]:
    """Where releases before the exact index kept a collection's hashed term statistics (its delete takes it)."""
    return {"PK": collection_pk(ws, observer, observed), "SK": "TERMS"}


def message_vectors_pk(ws: str, session_id: str) -> str:
    """Partition of a session's message embeddings (search): beside the session's, outside its local index's
    10 GB item collection, and never read by the context."""
    return f"{session_pk(ws, session_id)}#MV"


def message_vector(ws: str, session_id: str, seq: int) -> dict[str, str]:
    """A message's embedding (semantic search), in its session's vector partition."""
    return {"PK": message_vectors_pk(ws, session_id), "SK": f"MV#{seq:0{SEQ_DIGITS}d}"}


def text_fresh_pk(ws: str, shard: int) -> str:
    """Partition of one shard of a workspace's fresh index units (exact lexical search): a post's batch, packed, until
    the deriver merges it into a segment. Sharded by session, so no partition takes every post of a workspace."""
    return f"WS#{ws}#XF#{shard:02d}"


def text_segment_pk(ws: str, segment: str) -> str:
    """Partition of one segment of a workspace's lexical index: immutable, packed postings of many messages."""
    return f"WS#{ws}#XG#{segment}"


def text_manifest(ws: str) -> dict[str, str]:
    """The workspace's lexical index manifest: its live segments and their statistics (changed once a merge)."""
    return {"PK": f"WS#{ws}#XM", "SK": "#"}


def text_counters_pk(ws: str) -> str:
    """Partition where the release before segments kept a workspace's term counters (a workspace delete takes it)."""
    return f"WS#{ws}#XC"


def text_peer_counters_pk(ws: str, peer_id: str) -> str:
    """Partition where the release before segments kept one peer's term counters (a workspace delete takes it)."""
    return f"WS#{ws}#XC#P#{peer_id}"


def old_text_postings_pk(ws: str, term: str) -> str:
    """Partition where the release before segments kept one term's postings in a workspace's messages: its counters'
    sort keys name the terms (the upgrade and a workspace delete take them)."""
    return f"WS#{ws}#XT#{term}"


def text_docs_pk(ws: str, session_id: str) -> str:
    """Partition of a session's indexed texts (each message's term counts), beside the session's: a session search
    reads it whole, a workspace search reads the few it needs by key."""
    return f"{session_pk(ws, session_id)}#XD"


def text_doc(ws: str, session_id: str, seq: int) -> dict[str, str]:
    return {"PK": text_docs_pk(ws, session_id), "SK": f"{seq:0{SEQ_DIGITS}d}"}


def text_repair_lease(ws: str, session_id: str) -> dict[str, str]:
    """Held while the deriver indexes a session's messages whose request died before it could."""
    return {"PK": session_pk(ws, session_id), "SK": "XFIX"}


def conclusion_text(ws: str, observer: str, observed: str, conclusion_id: str) -> dict[str, str]:
    """A conclusion's term counts, small, in the collection's partition: a collection's lexical ranking reads them
    all (and nothing else)."""
    return {"PK": collection_pk(ws, observer, observed), "SK": f"L#{conclusion_id}"}


def derive_cursor(ws: str, session_id: str, sender: str) -> dict[str, str]:
    """How far the deriver has come through `sender`'s messages in the session (in its partition: purged with it)."""
    return {"PK": session_pk(ws, session_id), "SK": f"DERIVE#{sender}"}


def parse_session_pk(pk: str) -> tuple[str, str]:
    """(workspace, session) of a session partition key."""
    ws, session_id = pk.removeprefix("WS#").split("#S#", 1)
    return ws, session_id


def audit_object(
    ws: str, session_id: str, summary_type: str, covers_seq: int, nonce: str, incarnation: str = "_"
) -> str:
    return f"{audit_prefix(ws, session_id, incarnation)}{summary_type}/{covers_seq:0{SEQ_DIGITS}d}-{nonce}.json"


# ---------------------------------------------------------------- usage (docs/design.md, "Usage")
USAGE_SHARDS = 8  # items per (day, role, model): each flush adds to one at random, so no item takes every flush


def usage_pk(ws: str, month: str) -> str:
    """Partition of a workspace's model usage in one month (YYYY-MM): its days are one Query. Outside `WS#`, so the
    read-only functions may be granted writes to usage alone (IAM's dynamodb:LeadingKeys `USAGE#*`)."""
    return f"USAGE#{ws}#{month}"


def usage(ws: str, day: str, role: str, model: str, shard: int) -> dict[str, str]:
    """One shard of a (day, role, model)'s counts; the model last, as it may hold any character."""
    return {"PK": usage_pk(ws, day[:7]), "SK": f"{day}#{role}#{shard}#{model}"}


def parse_usage_sk(sk: str) -> tuple[str, str, str]:
    """(day, role, model) of a usage item's sort key."""
    day, role, _shard, model = sk.split("#", 3)
    return day, role, model


WEBHOOKS_PREFIX = "HOOK"  # every webhook item of a workspace's partition (endpoints and their count) starts so


def webhook(ws: str, url_key: str) -> dict[str, str]:
    """A webhook endpoint, keyed by its URL's hash so that get-or-create by URL is one conditional put; in the
    workspace's partition, so a workspace delete finds it."""
    return {"PK": f"WS#{ws}", "SK": f"{WEBHOOKS_PREFIX}#{url_key}"}


def webhook_count(ws: str) -> dict[str, str]:
    """How many endpoints the workspace has: the limit's counter, changed by the transaction adding or deleting one."""
    return {"PK": f"WS#{ws}", "SK": f"{WEBHOOKS_PREFIX}S"}


# ---------------------------------------------------------------- export and import (docs/design.md)
def transfer_job(ws: str, job_id: str) -> dict[str, str]:
    """An export's or import's job (its progress, where it stopped): in the workspace's partition, so a workspace
    delete takes it."""
    return {"PK": f"WS#{ws}", "SK": f"JOB#{job_id}"}


def export_prefix(ws: str, job_id: str) -> str:
    return f"exports/{ws}/{job_id}/"


def exports_prefix(ws: str) -> str:
    """Every export part of the workspace (its delete removes them)."""
    return f"exports/{ws}/"


def export_part(ws: str, job_id: str, number: int) -> str:
    """The `number`th (from 1) JSON Lines part of an export: one per step (a step run again overwrites it)."""
    return f"{export_prefix(ws, job_id)}part-{number:05d}.jsonl"


def import_upload(ws: str, upload_id: str) -> str:
    """Where the command uploads a file to import into `ws` (a presigned PUT)."""
    return f"imports/{ws}/{upload_id}.jsonl"
