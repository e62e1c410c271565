"""The upgrade (`python -m deploy.reindex`) on a table as earlier releases left it, judged by what users see: search.

Two earlier releases wrote what a deployment upgrades from, and the items are written here as they wrote them:
- the release before segments (3ad97f9^): a text item per indexed message (`#XD`), a posting item per (term, message)
  in a partition per term (`WS#…#XT#{term}`), the workspace's and each peer's term counters and statistics
  (`WS#…#XC`, `WS#…#XC#P#{peer}`); no fresh items, segments or manifest;
- the release before any exact index (a5037bf): messages without a unit (`ib`) or text, their vector items carrying
  its BM25 vector (`tvec`, `tsig`, `tlen`), its hashed term statistics (`WS#…#TERMS`, each collection's `TERMS`),
  conclusions without a text item.

Afterwards every workspace's, peer's and session's search ranks exactly as a brute-force BM25 over the messages (written
here from the textbook: a message indexed twice would change N and the document frequencies, so the scores), the old
items are gone, a second run writes nothing, and a run stopped between units or dying anywhere, then run again, still
ranks exactly."""

from __future__ import annotations

import json
import math
import random
import threading
import time
from collections import Counter
from collections.abc import Callable

import pytest

from deploy import reindex
from local import iam
from local.template import template
from precis.lexical import terms
from precis.store import keys, message_search, purge, resources, text_index, vectors
from precis.store.db import Db, attribute_values_as_they_are, from_item, query_all, to_item
from precis.store.messages import NewMessage, append_messages, index_unit, make_message_id, read_range
from precis.store.records import write_batch
from precis.store.vectors import vector_attribute

K1, B = 0.9, 0.4  # Precis's BM25 parameters
SPEAKER_TIMES = 2  # a message's speaker counts twice among its terms
PEERS = ("alice", "bob", "carol")
WORDS = (
    "kayak lisbon budget review thursday bread sunday sister visit garden tomato river bridge piano lesson "
    "train ticket museum coffee recipe marathon knee doctor invoice deadline"
).split()
FILLER = ("the", "a", "to", "we", "is", "and")
QUERIES = (
    "kayak on the river",
    "budget review deadline",
    "piano lesson sister",
    "alice",
    "bread recipe coffee",
    "doctor knee marathon train",
    "museum ticket for bob",
    "nothing matches xylophone",
)
# (workspace, session, messages). s1 spans three blocks of 100 seqs.
SESSIONS = (("ws1", "s1", 230), ("ws1", "s2", 40), ("ws2", "s3", 25))
# The seqs the release before segments indexed (a text, postings, counters): s1's first block whole and its second
# in part (that release's backfill died inside it: 151-200 have no text), s2 whole, as two posts (`ib`) stored it. The
# rest was stored before any exact index.
INDEXED = {("ws1", "s1"): range(1, 151), ("ws1", "s2"): range(1, 41)}
BATCHES = {("ws1", "s2"): ((1, "0a0a0a0a"), (26, "0b0b0b0b"))}  # (first seq, nonce) of each post
LARGE = ("ws1", "s1", 7)  # a message whose body is in S3
COLLECTIONS = (("ws1", "alice", "bob", 6), ("ws1", "bob", "bob", 4), ("ws2", "carol", "carol", 3))
# What a first run does: s1's first block and s2 indexed from their texts (2 units, 140 messages), s1's second and
# third blocks and s3 indexed from their messages (3 units: 50 + 30 + 25 texts written; s1's second block's 50 old
# texts are indexed with it, as its unit).
UNITS, INDEXED_COUNT, REBUILT = 5, 245, 140
ONLY_COUNTED = ("zyzzyva", "quokka")  # a term only the old workspace's counters name, and one only a peer's


# ---------------------------------------------------------------- the earlier releases' table


def _text(rng: random.Random) -> str:
    words = rng.choices(WORDS, weights=[1 / (i + 1) for i in range(len(WORDS))], k=rng.randint(2, 9))
    return " ".join(words + rng.sample(FILLER, rng.randint(0, 3)))


def _old_tvec(rng: random.Random) -> dict:
    """A BM25 vector as a5037bf stored it: 256 numbers, a few of them not zero."""
    slots = set(rng.sample(range(256), 5))
    return {"L": [{"N": "0.731"} if i in slots else {"N": "0"} for i in range(256)]}


def counts(content: str, speaker: str | None = None) -> Counter:
    """A message's terms: its words and its speaker's name, counted SPEAKER_TIMES (BM25F's field weight)."""
    return Counter(terms(content) + (terms(speaker) * SPEAKER_TIMES if speaker else []))


def _unit(ws: str, session_id: str, seq: int) -> str:
    """The unit the release before segments indexed a message under: its post's, else its block of 100 seqs."""
    batches = [(first, nonce) for first, nonce in BATCHES.get((ws, session_id), ()) if first <= seq]
    if batches:
        return f"{session_id}:{batches[-1][0]}:{batches[-1][1]}"
    return f"{session_id}:{(seq - 1) // 100 * 100 + 1}:-"


def _old_index(ws: str, indexed: list) -> list:
    """What the release before segments wrote for `indexed` messages ((session, seq, peer, content)): a text each,
    a posting per (term, message), and the workspace's and each peer's counters and statistics."""
    items, counters = [], {}
    for session_id, seq, peer, content in indexed:
        c = counts(content, peer)
        length = sum(c.values())
        items.append(
            {
                "PK": f"WS#{ws}#S#{session_id}#XD",
                "SK": f"{seq:012d}",
                "kind": "xdoc",
                "seq": seq,
                "peer": peer,
                "tsig": " ".join(t if n == 1 else f"{t}:{n}" for t, n in sorted(c.items())),
                "tlen": length,
                "u": _unit(ws, session_id, seq),
            }
        )
        for term, n in c.items():
            items.append(
                {
                    "PK": f"WS#{ws}#XT#{term}",
                    "SK": f"{min(n, 9)}#{length:07d}#{session_id}#{seq:012d}",
                    "n": n,
                    "p": peer,
                }
            )
        for pk in (f"WS#{ws}#XC", f"WS#{ws}#XC#P#{peer}"):
            stats = counters.setdefault((pk, "#"), Counter())
            stats["n"] += 1
            stats["len"] += length
            for term in c:
                counters.setdefault((pk, term), Counter())["n"] += 1
    items += [{"PK": pk, "SK": sk, **values} for (pk, sk), values in counters.items()]
    # Terms only the workspace's counters name, or only a peer's: that release counted a text in one and died before
    # the other (its unit's texts were never written: these words are in no message, only in the old postings).
    session_id, seq, peer, _content = indexed[0]
    for term, pk in ((ONLY_COUNTED[0], f"WS#{ws}#XC"), (ONLY_COUNTED[1], f"WS#{ws}#XC#P#{peer}")):
        items.append({"PK": f"WS#{ws}#XT#{term}", "SK": f"1#0000003#{session_id}#{seq:012d}", "n": 1, "p": peer})
        items.append({"PK": pk, "SK": term, "n": 1})
    return items


def old_release(db: Db) -> dict:
    """Write the earlier releases' items; the messages, by (ws, session, seq) -> (peer, content), the conclusions, by
    (ws, observer, observed) -> {id: content}, and how many old counters and postings there are."""
    rng = random.Random(37)
    messages, found, items = {}, {}, []
    put = items.append  # (written 25 at a time, at the end)
    for ws in sorted({s[0] for s in SESSIONS}):
        resources.get_or_create_workspace(db, ws)
        for peer in PEERS:
            resources.get_or_create_peer(db, ws, peer)
    indexed: dict = {}
    for ws, session_id, count in SESSIONS:
        resources.get_or_create_session(db, ws, session_id)
        incarnation = resources.require_session(db, ws, session_id)["incarnation"]
        start = 0
        for seq in range(1, count + 1):
            peer, content = rng.choice(PEERS), _text(rng)
            messages[ws, session_id, seq] = (peer, content)
            item = {
                **keys.message(ws, session_id, seq),
                "kind": "message",
                "id": make_message_id(seq),
                "seq": seq,
                "peer_id": peer,
                "token_count": len(content.split()),
                "start_tokens": start,
                "run_id": None,
                "run_start_seq": seq,
                "run_index": seq,
                "metadata": "{}",
                "created_at": "2025-06-01T10:00:00+00:00",
                "batch_token": None,
            }
            if (ws, session_id) in BATCHES:
                item["ib"], item["ibu"] = _unit(ws, session_id, seq), 1_750_000_000  # (its request long over)
            if seq in INDEXED.get((ws, session_id), ()):
                indexed.setdefault(ws, []).append((session_id, seq, peer, content))
            start += len(content.split())
            if (ws, session_id, seq) == LARGE:
                body = keys.body_object(ws, session_id, incarnation, f"{seq:08x}")
                db.s3.put_object(Bucket=db.bucket, Key=body, Body=content.encode())
                item["body_key"] = body
            else:
                item["content"] = content
            put(to_item(item))
            vector = {
                **to_item(
                    {
                        "PK": keys.message_vectors_pk(ws, session_id),
                        "SK": f"MV#{seq:012d}",
                        "kind": "mvector",
                        "seq": seq,
                        "mcoll": ws,
                        "msession": session_id,
                        "mpeer": peer,
                        "tsig": "kayak:2 lisbon",
                        "tlen": 3,
                    }
                ),
                "tvec": _old_tvec(rng),
            }
            if seq % 2:
                vector["svec"] = vector_attribute([rng.uniform(-1, 1) for _ in range(256)])
                vector["semantic"] = {"BOOL": True}
            put(vector)
        put(to_item({**keys.message_terms(ws), "ndocs": count, "nterms": 9 * count, "x1a": 3, "x2f": 11}))
    old_items = [i for ws, said in indexed.items() for i in _old_index(ws, said)]
    items += [to_item(i) for i in old_items]
    for ws, observer, observed, count in COLLECTIONS:
        put(
            to_item(
                {
                    **keys.collection_registry(ws, observer, observed),
                    "kind": "collection",
                    "observer_id": observer,
                    "observed_id": observed,
                }
            )
        )
        put(to_item({**keys.collection_terms(ws, observer, observed), "ndocs": count, "nterms": 40, "x3": 2}))
        contents = {}
        for n in range(count):
            cid, content = f"0000000{n}{observer[:2]}{observed[:2]}conclusion"[:21], _text(rng)
            contents[cid] = content
            level = "deductive" if n % 3 == 2 else "explicit"
            put(
                to_item(
                    {
                        **keys.conclusion(ws, observer, observed, cid),
                        "kind": "conclusion",
                        "id": cid,
                        "content": content,
                        "observer_id": observer,
                        "observed_id": observed,
                        "session_id": "s1",
                        "level": level,
                        "created_at": "2025-06-01T10:00:00+00:00",
                        "times_derived": 1,
                        "source_ids": [],
                        "source_message_ids": [],
                        "source_at": "2025-06-01T10:00:00+00:00",
                        "norm": f"digest{n}",
                        "cws": ws,
                        "cid": cid,
                    }
                )
            )
            put(
                {
                    **to_item(
                        {
                            **keys.conclusion_vector(ws, observer, observed, cid),
                            "kind": "cvector",
                            "id": cid,
                            "vcoll": keys.collection_name(ws, observer, observed),
                            "level": level,
                            "vsession": "s1",
                            "tsig": "kayak",
                            "tlen": 1,
                        }
                    ),
                    "vec": vector_attribute([rng.uniform(-1, 1) for _ in range(256)]),
                    "tvec": _old_tvec(rng),
                }
            )
        found[ws, observer, observed] = contents
    for start in range(0, len(items), 25):
        write_batch(db, [{"PutRequest": {"Item": item}} for item in items[start : start + 25]])
    return {
        "messages": messages,
        "conclusions": found,
        "old_counters": sum("#XC" in i["PK"] for i in old_items),
        "old_postings": sum("#XT#" in i["PK"] for i in old_items),
    }


_CLIENT: list = []


@pytest.fixture
def db(aws) -> Db:
    """The table with a DynamoDB client made as the functions make theirs (`precis.store.db.get_db`: no client-side
    validation, AttributeValues sent as they are), once: checking each of a vector's 256 numbers in Python took
    most of a test's time."""
    if not _CLIENT:
        import boto3
        from botocore.config import Config

        _CLIENT.append(
            iam.exempt(
                attribute_values_as_they_are(boto3.client("dynamodb", config=Config(parameter_validation=False)))
            )
        )
    names = template()
    return Db(client=_CLIENT[0], s3=aws["s3"], table=names.table_name, bucket=names.bucket_name)


@pytest.fixture
def old(db) -> dict:
    return old_release(db)


def quiet(_line: str) -> None:
    pass


# ---------------------------------------------------------------- textbook BM25, from the messages themselves


def bm25(query: str, corpus: dict) -> dict:
    """Every text of `corpus` (key -> term counts) that shares a word with `query`, with Okapi BM25's score over
    exactly that corpus: idf ln(1 + (N - df + 0.5) / (df + 0.5)), k1 0.9 and b 0.4."""
    n = len(corpus)
    if not n:
        return {}
    average = sum(sum(c.values()) for c in corpus.values()) / n
    df = Counter(t for c in corpus.values() for t in c)
    scores = {}
    for key, c in corpus.items():
        length = sum(c.values())
        score = sum(
            said
            * math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
            * c[t]
            * (K1 + 1)
            / (c[t] + K1 * (1 - B + B * length / average))
            for t, said in Counter(terms(query)).items()
            if t in c
        )
        if score > 0:
            scores[key] = score
    return scores


def corpus(messages: dict, ws: str, *, session: str | None = None, peer: str | None = None) -> dict:
    return {
        (s, seq): counts(content, who)
        for (w, s, seq), (who, content) in messages.items()
        if w == ws and (session is None or s == session) and (peer is None or who == peer)
    }


def assert_ranked(found: list, expected: dict) -> None:
    assert {key for key, _ in found} == set(expected)
    for key, score in found:
        assert score == pytest.approx(expected[key], rel=1e-9), key
    assert [s for _, s in found] == sorted((s for _, s in found), reverse=True)


def assert_search_exact(db: Db, messages: dict) -> None:
    """Every workspace's, peer's and session's search ranks `messages` as BM25 over exactly them."""
    for ws in sorted({w for w, _, _ in messages}):
        for query in QUERIES:
            assert_ranked(text_index.rank_workspace(db, ws, query, 1000), bm25(query, corpus(messages, ws)))
            for peer in PEERS:
                assert_ranked(
                    text_index.rank_workspace(db, ws, query, 1000, peer=peer),
                    bm25(query, corpus(messages, ws, peer=peer)),
                )
        for session_id in sorted({s for w, s, _ in messages if w == ws}):
            for query in QUERIES:
                assert_ranked(
                    message_search.lexical_rank(db, ws, query, 1000, session_id=session_id),
                    bm25(query, corpus(messages, ws, session=session_id)),
                )


def table(db: Db) -> list:
    """Every item of the table, in key order."""
    items, request = [], {"TableName": db.table, "ConsistentRead": True}
    while True:
        out = db.client.scan(**request)
        items += [from_item(i) for i in out["Items"]]
        if "LastEvaluatedKey" not in out:
            return sorted(items, key=lambda i: (i["PK"], i["SK"]))
        request["ExclusiveStartKey"] = out["LastEvaluatedKey"]


def scan_keys(db: Db, condition: str, values: dict | None = None) -> list:
    """The keys of the table's items that meet `condition` (keys only: an answer holding a binary value, as the
    index's items do, goes moto's slow serializer, and a whole table of vector items with it takes seconds)."""
    request = {
        "TableName": db.table,
        "ConsistentRead": True,
        "ProjectionExpression": "PK, SK",
        "FilterExpression": condition,
        **({"ExpressionAttributeValues": to_item(values)} if values else {}),
    }
    found = []
    while True:
        out = db.client.scan(**request)
        found += [(i["PK"]["S"], i["SK"]["S"]) for i in out["Items"]]
        if "LastEvaluatedKey" not in out:
            return sorted(found)
        request["ExclusiveStartKey"] = out["LastEvaluatedKey"]


def old_index_left(db: Db) -> list:
    """The release before segments' postings and counters still in the table."""
    return scan_keys(db, "contains(PK, :xt) OR contains(PK, :xc)", {":xt": "#XT#", ":xc": "#XC"})


WRITES = frozenset({"put_item", "update_item", "delete_item", "batch_write_item", "transact_write_items"})


class Watched:
    """The table's client, counting the requests that write."""

    def __init__(self, client):
        self.client, self.writes = client, Counter()

    def __getattr__(self, name):
        if name in WRITES:
            self.writes[name] += 1
        return getattr(self.client, name)


class Dying:
    """The table's client, failing the first request `dies(operation, request)` picks (as a lost connection or an
    expired credential would): a run dies there."""

    def __init__(self, client, dies: Callable[[str, dict], bool]):
        self.client, self.dies, self.died = client, dies, False
        self.lock = threading.Lock()

    def __getattr__(self, name):
        method = getattr(self.client, name)

        def call(**request):
            with self.lock:
                dies = not self.died and self.dies(name, request)
                self.died = self.died or dies
            if dies:
                raise ConnectionError(f"{name}: connection lost")
            return method(**request)

        return call


def _puts(request: dict) -> list:
    return [r["PutRequest"]["Item"] for rs in request.get("RequestItems", {}).values() for r in rs if "PutRequest" in r]


def _deletes(request: dict) -> list:
    return [
        r["DeleteRequest"]["Key"] for rs in request.get("RequestItems", {}).values() for r in rs if "DeleteRequest" in r
    ]


def after_a_rebuilt_units_fresh_item() -> Callable[[str, dict], bool]:
    """The read of the session after a unit rebuilt from its texts was written: written, not counted or merged."""
    written = []

    def dies(name: str, request: dict) -> bool:
        if name == "batch_write_item" and any("#XF#" in i["PK"]["S"] and ":r" in i["SK"]["S"] for i in _puts(request)):
            written.append(1)
        return bool(written) and name == "batch_get_item"

    return dies


def nth(operation: str, picked: Callable[[dict], bool], n: int) -> Callable[[str, dict], bool]:
    seen = []

    def dies(name: str, request: dict) -> bool:
        if name == operation and picked(request):
            seen.append(1)
        return len(seen) == n and name == operation and picked(request)

    return dies


DYING = {
    "after a rebuilt unit's fresh item": after_a_rebuilt_units_fresh_item,
    "a backfilled unit's texts, some written": lambda: nth(
        "batch_write_item", lambda r: any(i["PK"]["S"].endswith("#XD") for i in _puts(r)), 2
    ),
    "a merge's segment items": lambda: nth(
        "batch_write_item", lambda r: any("#XG#" in i["PK"]["S"] for i in _puts(r)), 1
    ),
    "a merge's manifest change": lambda: nth(
        "transact_write_items", lambda r: any("#XM" in json.dumps(a) for a in r["TransactItems"]), 1
    ),
    "the old postings, some deleted": lambda: nth(
        "batch_write_item", lambda r: any("#XT#" in k["PK"]["S"] for k in _deletes(r)), 3
    ),
    "the postings of a term only the workspace's old counters name": lambda: nth(
        "batch_write_item", lambda r: any(k["PK"]["S"].endswith(f"#XT#{ONLY_COUNTED[0]}") for k in _deletes(r)), 1
    ),
    "the old counters": lambda: nth(
        "batch_write_item", lambda r: any(k["PK"]["S"].endswith("#XC") for k in _deletes(r)), 1
    ),
    "a conclusion's text item": lambda: nth(
        "transact_write_items", lambda r: any('"L#' in json.dumps(a) for a in r["TransactItems"]), 2
    ),
}


def lapse_leases(db: Db) -> None:
    """The repair leases a dead run held, lapsed (after REPAIR_LEASE_S; a run started at once waits for them)."""
    for pk, sk in scan_keys(db, "SK = :fix", {":fix": "XFIX"}):
        db.client.delete_item(TableName=db.table, Key=to_item({"PK": pk, "SK": sk}))


# ---------------------------------------------------------------- the upgrade


def test_after_the_upgrade_search_ranks_every_message_as_bm25_over_the_messages(db, old):
    assert text_index.rank_workspace(db, "ws1", "kayak", 10) == []  # the old texts alone: nothing is found
    done = reindex.run(db, say=quiet)
    assert (done.workspaces, done.sessions, done.stopped, done.left) == (2, 3, None, False)
    assert (done.units, done.indexed, done.rebuilt) == (UNITS, INDEXED_COUNT, REBUILT)
    assert (done.old_counters, done.old_postings) == (old["old_counters"], old["old_postings"])
    assert_search_exact(db, old["messages"])
    assert old_index_left(db) == []
    # The route's search reads the message back, its body from S3 too.
    _peer, content = old["messages"][LARGE]
    found = message_search.search(db, "ws1", content, 300, None)
    assert any(view["seq"] == LARGE[2] and view["content"] == content for view in found)


def test_a_second_run_writes_nothing(db, old):
    reindex.run(db, say=quiet)
    watched = Watched(db.client)
    again = reindex.run(Db(watched, db.s3, db.table, db.bucket), say=quiet)
    assert (again.indexed, again.units, again.conclusion_texts, again.statistics, again.old_counters) == (0,) * 5
    assert watched.writes == Counter()
    assert_search_exact(db, old["messages"])


@pytest.mark.parametrize("stop_after", [1, 2, 3, 4])
def test_a_run_stopped_between_units_and_run_again_indexes_each_message_once(db, old, stop_after):
    first = reindex.run(db, max_units=stop_after, say=quiet)
    assert first.stopped == f"stopped after {stop_after} units (--max-units)" and first.left
    assert first.units == stop_after
    everyone = "alice bob carol"  # (every message has one of them for its speaker)
    found = sum(len(text_index.rank_workspace(db, ws, everyone, 1000)) for ws in ("ws1", "ws2"))
    assert found < len(old["messages"])  # (stopped before the end)
    seen = []
    rest = reindex.run(db, on_unit=lambda unit, written: seen.append(unit), say=quiet)
    assert rest.units == UNITS - stop_after and not rest.left and len(seen) == len(set(seen))
    assert_search_exact(db, old["messages"])
    assert old_index_left(db) == []


@pytest.mark.parametrize("where", sorted(DYING))
def test_a_run_dying_anywhere_and_run_again_indexes_each_message_once(db, old, where):
    dying = Dying(db.client, DYING[where]())
    with pytest.raises(ConnectionError):
        reindex.run(Db(dying, db.s3, db.table, db.bucket), say=quiet)
    assert dying.died
    lapse_leases(db)
    again = reindex.run(db, say=quiet)
    assert not again.left
    assert_search_exact(db, old["messages"])
    assert old_index_left(db) == []
    for (ws, observer, observed), contents in old["conclusions"].items():
        texts = query_all(
            db,
            KeyConditionExpression="PK = :pk AND begins_with(SK, :l)",
            ConsistentRead=True,
            ExpressionAttributeValues=to_item({":pk": keys.collection_pk(ws, observer, observed), ":l": "L#"}),
        )
        assert {t["id"] for t in texts} == set(contents)


def test_a_unit_the_deriver_repaired_first_is_not_counted_again(db, old):
    stored = read_range(db, "ws1", "s1", 151, 160)
    assert message_search.ensure_indexed(db, "ws1", "s1", stored) == 50  # the whole block 101-200: its 50 texts
    done = reindex.run(db, say=quiet)
    assert (done.units, done.indexed, done.rebuilt) == (UNITS - 1, INDEXED_COUNT - 50, REBUILT)
    assert_search_exact(db, old["messages"])


def _post(db: Db, ws: str, session_id: str, contents: list, *, index_by: float, indexed: bool = True) -> dict:
    """A post stored (and indexed, unless its request is still running) as the ingest does; its messages."""
    new = [NewMessage(content, "carol", 7) for content in contents]
    nonce = f"{len(contents):04d}{session_id}{len(read_range(db, ws, session_id, 1, 10_000)):04d}"
    views = append_messages(db, ws, session_id, new, inline_max_bytes=100_000, index_nonce=nonce, index_by=index_by)
    if indexed:
        text_index.index_texts(
            db,
            ws,
            session_id,
            index_unit(session_id, views[0]["seq"], nonce),
            [text_index.Text(v["seq"], "carol", m.content) for v, m in zip(views, new)],
        )
    return {(ws, session_id, v["seq"]): ("carol", m.content) for v, m in zip(views, new)}


def test_posts_since_the_deploy_are_counted_once_and_one_still_being_stored_is_left_to_its_request(db, old):
    rng, messages = random.Random(5), dict(old["messages"])
    # Posted under this release before the upgrade ran: merged into a segment (a manifest exists), or still fresh.
    for _ in range(2):
        messages |= _post(db, "ws1", "s2", [_text(rng) for _ in range(60)], index_by=time.time() - 1)
    assert text_index.merge(db, "ws1", ["s2"]) == 120
    messages |= _post(db, "ws1", "s1", [f"a new kayak trip {i}" for i in range(5)], index_by=time.time() - 1)
    # A post whose request is still running (its deadline ahead): it indexes it, or the deriver does after.
    live = _post(db, "ws2", "s3", ["kayak lisbon"] * 3, index_by=time.time() + 600, indexed=False)
    done = reindex.run(db, say=quiet)
    assert (done.in_flight, done.left, done.indexed, done.rebuilt) == (3, True, INDEXED_COUNT, REBUILT)
    assert_search_exact(db, {k: v for k, v in messages.items() if k[0] == "ws1"})
    assert_search_exact(db, {k: v for k, v in messages.items() if k[0] == "ws2"})
    later = message_search.reindex_session(db, "ws2", "s3", now=lambda: time.time() + 700)
    assert (later.indexed, later.units, later.in_flight) == (3, 1, 0)
    assert_search_exact(db, messages | live)


def test_a_clone_whose_copy_that_release_indexed_in_part_is_left_until_its_copy_is_done(db, old):
    # s2 as a clone of s1's first 30 messages, its copy under way when that release ended: it had indexed seqs 1-30
    # under the copy's own unit; 31-40 (s2's own) have no text yet.
    for seq in range(1, 41):
        key = to_item(keys.text_doc("ws1", "s2", seq))
        if seq <= 30:
            db.client.update_item(
                TableName=db.table,
                Key=key,
                UpdateExpression="SET u = :u",
                ExpressionAttributeValues={":u": {"S": "s2:1:copyabc"}},
            )
        else:
            db.client.delete_item(TableName=db.table, Key=key)
    db.client.update_item(
        TableName=db.table,
        Key=to_item(keys.session("ws1", "s2")),
        UpdateExpression="SET base_session = :p, base_through = :t",
        ExpressionAttributeValues=to_item({":p": "s1", ":t": 30}),
    )
    copying = reindex.run(db, workspace="ws1", say=quiet)
    assert copying.copying == 40 and copying.left  # its copy still runs: left for a later run
    db.client.update_item(
        TableName=db.table, Key=to_item(keys.session("ws1", "s2")), UpdateExpression="REMOVE base_session, base_through"
    )
    copied = reindex.run(db, workspace="ws1", say=quiet)
    assert (copied.indexed, copied.rebuilt, copied.copying, copied.left) == (10 + 30, 30, 0, False)
    assert_search_exact(db, {k: v for k, v in old["messages"].items() if k[0] == "ws1"})


def test_conclusions_get_their_text_items_and_lexical_rank_finds_them_with_textbook_scores(db, old):
    done = reindex.run(db, say=quiet)
    assert done.conclusions == done.conclusion_texts == 13
    for (ws, observer, observed), contents in old["conclusions"].items():
        texts = {("", cid): counts(content) for cid, content in contents.items()}
        for query in QUERIES:
            assert_ranked(vectors.lexical_rank(db, ws, observer, observed, query, 100), bm25(query, texts))


def test_the_old_statistics_and_index_go_and_strip_leaves_the_old_vector_indexes_nothing(db, old):
    def old_lexical() -> list:
        return scan_keys(
            db,
            "(attribute_exists(tvec) OR attribute_exists(tsig) OR attribute_exists(tlen)) "
            "AND (begins_with(SK, :mv) OR begins_with(SK, :v))",
            {":mv": "MV#", ":v": "V#"},
        )

    kept = reindex.run(db, say=quiet)
    assert kept.statistics == 2 + 3 and kept.stripped == 0
    assert (kept.old_counters, kept.old_postings) == (old["old_counters"], old["old_postings"])
    assert old_index_left(db) == []
    assert len(old_lexical()) == 295 + 13  # without --strip, the vector items are left as they are
    stripped = reindex.run(db, strip=True, say=quiet)
    assert stripped.stripped == 295 + 13 and stripped.statistics == stripped.old_counters == 0
    assert old_lexical() == []
    assert scan_keys(db, "SK IN (:m, :t)", {":m": "MESSAGES", ":t": "TERMS"}) == []
    # What the vector items still hold for the indexes that stay: the semantic vector, the conclusion's embedding.
    assert len(scan_keys(db, "begins_with(SK, :mv) AND attribute_exists(svec)", {":mv": "MV#"})) == sum(
        seq % 2 for _ws, _s, seq in old["messages"]
    )
    assert scan_keys(db, "begins_with(SK, :v) AND attribute_not_exists(vec)", {":v": "V#"}) == []
    assert reindex.run(db, strip=True, say=quiet).stripped == 0


def test_a_dry_run_writes_nothing_and_says_what_is_left(db, old):
    before, watched = table(db), Watched(db.client)
    dry = reindex.run(Db(watched, db.s3, db.table, db.bucket), dry_run=True, strip=True, say=quiet)
    assert (dry.indexed, dry.rebuilt, dry.units, dry.conclusion_texts, dry.statistics, dry.stripped) == (
        INDEXED_COUNT,
        REBUILT,
        UNITS,
        13,
        5,
        308,
    )
    assert dry.old_counters == old["old_counters"]
    assert watched.writes == Counter()
    assert table(db) == before


def test_holdings_finds_each_sessions_docs_across_segments_doc_table_pages_and_a_compaction_meanwhile(db, aws):
    """`Holdings` against what it reads: segments whose doc tables span several items, fresh units, a session's
    docs of another incarnation (not held), sessions asked in order and out of it, and a compaction between its
    manifest read and its read of a segment it lists."""
    ws, rng = "ws9", random.Random(3)
    resources.get_or_create_workspace(db, ws)
    sessions = [f"t{i}" for i in range(6)]
    incarnations = {}
    for s in sessions:
        resources.get_or_create_session(db, ws, s)
        incarnations[s] = resources.require_session(db, ws, s)["incarnation"]
    held: dict = {s: set() for s in sessions}
    last = dict.fromkeys(sessions, 0)
    docs = []
    for _ in range(1_300):  # segments over several doc table items (DOC_PART rows each)
        s = rng.choice(sessions)
        last[s] = seq = last[s] + rng.randint(1, 3)
        held[s].add(seq)
        docs.append(text_index.Doc(s, seq, incarnations[s], "alice", text_index.Document({"kayak": 1}, 3)))
    docs.append(text_index.Doc("t0", 9_999, "an earlier incarnation", "alice", text_index.Document({"x": 1}, 1)))
    entries = []
    for level, part in ((1, docs[:700]), (0, docs[700:1_000]), (0, docs[1_000:1_100]), (0, docs[1_100:1_200])):
        entry, items = text_index.Segment.of(part, level).build(ws)
        write_batch_all(db, items)
        entries.append(entry)
    fourth, items = text_index.Segment.of(docs[1_200:], 0).build(ws)
    write_batch_all(db, items)
    entries.append(fourth)
    db.client.put_item(
        TableName=db.table,
        Item=to_item({**keys.text_manifest(ws), "v": 1, "segs": json.dumps(entries)}),
    )
    fresh = [text_index.Text(seq, "bob", "kayak lisbon") for seq in (5_001, 5_002)]
    text_index.index_texts(db, ws, "t3", "t3:5001:f00d", fresh, incarnation=incarnations["t3"])
    held["t3"] |= {5_001, 5_002}

    holdings = text_index.Holdings(db, ws)
    for s in sessions:  # in order
        assert holdings.held(s, incarnations[s]) == held[s], s
    for s in reversed(sessions):  # out of order (each read again from the start)
        assert holdings.held(s, incarnations[s]) == held[s], s

    # A compaction between the manifest read and the read of a level-0 segment's doc tables: the four level-0
    # segments merged into one (and deleted) before the first of them is read.
    compacted = []

    class Compacting:
        def __getattr__(self, name):
            method = getattr(db.client, name)
            if name == "query":

                def query(**request):
                    pk = request["ExpressionAttributeValues"][":pk"]["S"]
                    if not compacted and "#XG#0." in pk:
                        compacted.append(text_index.compact(db, ws, rounds=1))
                    return method(**request)

                return query
            return method

    fresh_eyes = text_index.Holdings(Db(Compacting(), db.s3, db.table, db.bucket), ws)
    for s in sessions:
        assert fresh_eyes.held(s, incarnations[s]) == held[s], s
    assert compacted == [4]


def write_batch_all(db: Db, items: list) -> None:
    for start in range(0, len(items), 25):
        write_batch(db, [{"PutRequest": {"Item": item}} for item in items[start : start + 25]])


def test_the_command_line(db, old, capsys):
    assert reindex.main(["--table", db.table, "--bucket", db.bucket, "--max-units", "1"], db=db) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "2 workspaces"
    assert out[-2] == "stopped after 1 units (--max-units); run again to go on"
    assert out[-1].startswith(
        "left for the next run: 1 workspaces, 1 sessions, 230 messages read, 50 indexed in 1 units (0 from their "
        "texts), "
    )
    assert reindex.main(["--table", db.table, "--bucket", db.bucket, "--workspace", "ws2"], db=db) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith(
        "ws2: 1 sessions, 25 messages read, 25 indexed in 1 units (0 from their texts), 3 conclusions (3 text items "
        "written), 2 old statistics items deleted, 0 old counters and 0 postings deleted, 0 vector items stripped, "
    )
    assert out[-1].startswith("done: 1 workspaces, ")
    assert reindex.main(["--table", db.table, "--bucket", db.bucket, "--dry-run"], db=db) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "dry run: 2 workspaces"
    assert out[-1].startswith(
        f"dry run: 2 workspaces, 3 sessions, 295 messages read, {INDEXED_COUNT - 50 - 25} to index in {UNITS - 2} "
        f"units ({REBUILT} from their texts), 13 conclusions (10 without a text item), 3 old statistics items to "
        f"delete, {old['old_counters']} old counters to delete (and their terms' postings), "
    )
    with pytest.raises(Exception, match="workspace 'nope' not found"):
        reindex.main(["--table", db.table, "--bucket", db.bucket, "--workspace", "nope"], db=db)


def test_a_long_walk_says_how_it_goes(db, old):
    lines, ticks = [], iter(range(0, 100_000, 11))  # 11 s between two looks at the clock: past PROGRESS_S each time
    reindex.run(db, workspace="ws1", say=lines.append, clock=lambda: next(ticks))
    assert lines[1].startswith("  ws1: session 1/2, 230 messages read, ")
    assert any(line.startswith("  ws1: old index: ") and " postings deleted, " in line for line in lines)
    assert lines[-1].startswith(
        f"done: 1 workspaces, 2 sessions, 270 messages read, {INDEXED_COUNT - 25} indexed in {UNITS - 1} units "
        f"({REBUILT} from their texts), "
    )


def test_a_workspace_deleted_before_the_upgrade_ran_takes_the_old_index_with_it(db, old):
    # Its sessions deleted and purged under this release (which knows nothing of the old postings), then itself.
    for session_id in ("s1", "s2"):
        incarnation = resources.require_session(db, "ws1", session_id)["incarnation"]
        purge.delete_session(db, "ws1", session_id)
        purge.purge_session(db, "ws1", session_id, incarnation)
    purge.delete_workspace(db, "ws1")
    assert old_index_left(db) == []
    assert reindex.run(db, say=quiet).old_counters == 0
