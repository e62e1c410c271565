"""The upgrade's backfill (`python -m deploy.reindex`) on a table as the previous release (a5037bf) left it: messages
without an index unit (`ib`) or text, their vector items carrying that release's BM25 vector (`tvec`, `tsig`,
`tlen`), its hashed term statistics (`WS#…#TERMS`, each collection's `TERMS`), conclusions without a text item. The
items are written here as that release wrote them. Afterwards search finds every old message with the scores a
textbook BM25 computed here from the messages gives, the counters are the messages' document frequencies, a second
run changes nothing, a run stopped between units or dying inside one and then run again counts each message once,
and a unit the deriver's repair indexed first is not counted again."""

from __future__ import annotations

import math
import random
import threading
import time
from collections import Counter

import pytest

from deploy import reindex
from local import iam
from local.template import template
from precis.lexical import K1, SPEAKER_WEIGHT, B, group_of, terms
from precis.store import keys, message_search, resources, text_index, vectors
from precis.store.db import Db, attribute_values_as_they_are, from_item, query_all, to_item
from precis.store.messages import NewMessage, append_messages, index_unit, make_message_id, read_range
from precis.store.records import write_batch
from precis.store.vectors import vector_attribute

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
# Sessions as the previous release stored them: (workspace, session, messages). s1 spans three blocks of 100 seqs.
SESSIONS = (("ws1", "s1", 230), ("ws1", "s2", 40), ("ws2", "s3", 25))
LARGE = ("ws1", "s1", 7)  # a message whose body is in S3
COLLECTIONS = (("ws1", "alice", "bob", 6), ("ws1", "bob", "bob", 4), ("ws2", "carol", "carol", 3))


# ---------------------------------------------------------------- the previous release's table


def _text(rng: random.Random) -> str:
    words = rng.choices(WORDS, weights=[1 / (i + 1) for i in range(len(WORDS))], k=rng.randint(2, 9))
    return " ".join(words + rng.sample(FILLER, rng.randint(0, 3)))


def _old_tvec(rng: random.Random) -> dict:
    """A BM25 vector as that release stored it: 256 numbers, a few of them not zero."""
    slots = set(rng.sample(range(256), 5))
    return {"L": [{"N": "0.731"} if i in slots else {"N": "0"} for i in range(256)]}


def old_release(db: Db) -> dict:
    """Write the previous release's items; the messages, by (ws, session, seq) -> (peer, content), and the
    conclusions, by (ws, observer, observed) -> {id: content}."""
    rng = random.Random(37)
    messages, found, items = {}, {}, []
    put = items.append  # (written 25 at a time, at the end)
    for ws in sorted({s[0] for s in SESSIONS}):
        resources.get_or_create_workspace(db, ws)
        for peer in PEERS:
            resources.get_or_create_peer(db, ws, peer)
    for ws, session_id, count in SESSIONS:
        session, _ = resources.get_or_create_session(db, ws, session_id)
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
    return {"messages": messages, "conclusions": found}


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


def counts(content: str, speaker: str | None = None) -> Counter:
    """A message's terms: its words and its speaker's name, counted SPEAKER_WEIGHT times (BM25F's field weight)."""
    return Counter(terms(content) + (terms(speaker) * SPEAKER_WEIGHT if speaker else []))


def bm25(query: str, corpus: dict) -> dict:
    """Every text of `corpus` (key -> term counts) that shares a word with `query`, with Okapi BM25's score over
    exactly that corpus: idf ln(1 + (N - df + 0.5) / (df + 0.5)), k1 and b as Precis sets them."""
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


# ---------------------------------------------------------------- reading the index


def _counter_items(db: Db, ws: str) -> list[dict]:
    """The workspace's counters and statistics items, and each peer's."""
    peers = {
        k["SK"].removeprefix("PEER#")
        for k in query_all(
            db,
            KeyConditionExpression="PK = :pk AND begins_with(SK, :p)",
            ConsistentRead=True,
            ExpressionAttributeValues=to_item({":pk": f"WS#{ws}", ":p": "PEER#"}),
        )
    }
    items = []
    for pk in [keys.text_counters_pk(ws), *(keys.text_peer_counters_pk(ws, p) for p in sorted(peers))]:
        items += query_all(
            db, KeyConditionExpression="PK = :pk", ConsistentRead=True, ExpressionAttributeValues=to_item({":pk": pk})
        )
    return items


def counters(db: Db, ws: str) -> dict:
    """The workspace's counters and statistics, each peer's folded in (`p:{peer}` on a term, `n:{peer}` and
    `len:{peer}` on the statistics), without the units' marks."""
    prefix = keys.text_peer_counters_pk(ws, "")
    out: dict = {}
    for i in _counter_items(db, ws):
        values = {k: v for k, v in i.items() if k not in ("PK", "SK") and not k.startswith("u:")}
        entry = out.setdefault(i["SK"], {})
        if not i["PK"].startswith(prefix):
            entry.update(values)
            continue
        peer = i["PK"].removeprefix(prefix)
        if i["SK"] == keys.TEXT_STATS:
            entry.update({f"n:{peer}": values.get("n", 0), f"len:{peer}": values.get("len", 0)})
        else:
            entry[f"p:{peer}"] = values.get("n", 0)
    return out


def marks(db: Db, ws: str) -> set:
    return {(i["PK"], i["SK"], k) for i in _counter_items(db, ws) for k in i if k.startswith("u:")}


def expected_counters(messages: dict, ws: str) -> dict:
    """The counters a workspace's messages make: per term, how many say it (all, each peer's) and the groups of
    their counts; the statistics item, how many messages and their total length (all, each peer's)."""
    stats, terms_ = Counter(), {}
    for (w, _s, _seq), (peer, content) in messages.items():
        if w != ws:
            continue
        c = counts(content, peer)
        stats["n"] += 1
        stats["len"] += sum(c.values())
        stats[f"n:{peer}"] += 1
        stats[f"len:{peer}"] += sum(c.values())
        for term, count in c.items():
            entry = terms_.setdefault(term, {"n": 0, "g": set()})
            entry["n"] += 1
            entry[f"p:{peer}"] = entry.get(f"p:{peer}", 0) + 1
            entry["g"].add(group_of(count))
    return {keys.TEXT_STATS: dict(stats), **{t: {**e, "g": sorted(e["g"])} for t, e in terms_.items()}}


def table(db: Db) -> list:
    """Every item of the table, in key order."""
    items, request = [], {"TableName": db.table, "ConsistentRead": True}
    while True:
        out = db.client.scan(**request)
        items += [from_item(i) for i in out["Items"]]
        if "LastEvaluatedKey" not in out:
            return sorted(items, key=lambda i: (i["PK"], i["SK"]))
        request["ExclusiveStartKey"] = out["LastEvaluatedKey"]


def workspaces(old: dict) -> list:
    return sorted({ws for ws, _, _ in old["messages"]})


# ---------------------------------------------------------------- the backfill


def test_after_the_backfill_search_finds_old_messages_with_textbook_bm25_scores(db, old):
    assert text_index.rank_workspace(db, "ws1", "kayak", 10) == []  # before: nothing is indexed
    done = reindex.run(db, say=quiet)
    assert (done.workspaces, done.sessions, done.indexed, done.stopped) == (2, 3, 295, None)
    assert done.units == 3 + 1 + 1  # s1's three blocks of 100 seqs, s2's and s3's one
    for ws in workspaces(old):
        for query in QUERIES:
            assert_ranked(text_index.rank_workspace(db, ws, query, 1000), bm25(query, corpus(old["messages"], ws)))
            for peer in PEERS:
                assert_ranked(
                    text_index.rank_workspace(db, ws, query, 1000, peer=peer),
                    bm25(query, corpus(old["messages"], ws, peer=peer)),
                )
    for ws, session_id, _ in SESSIONS:
        for query in QUERIES:
            assert_ranked(
                message_search.lexical_rank(db, ws, query, 1000, session_id=session_id),
                bm25(query, corpus(old["messages"], ws, session=session_id)),
            )
    # The route's search reads the message back, its body from S3 too.
    peer, content = old["messages"][LARGE]
    found = message_search.search(db, "ws1", content, 300, None)
    assert any(view["seq"] == LARGE[2] and view["content"] == content for view in found)


def test_the_counters_are_the_messages_document_frequencies_and_a_second_run_changes_nothing(db, old):
    reindex.run(db, say=quiet)
    for ws in workspaces(old):
        assert counters(db, ws) == expected_counters(old["messages"], ws)
        assert marks(db, ws) == set()  # every unit settled: no mark is left to pile up on a counter
    before = table(db)
    again = reindex.run(db, say=quiet)
    assert (again.indexed, again.units, again.conclusion_texts, again.statistics) == (0, 0, 0, 0)
    assert table(db) == before


def test_a_run_stopped_between_units_and_run_again_counts_each_message_once(db, old):
    first = reindex.run(db, max_units=2, say=quiet)
    assert first.stopped == "stopped after 2 units (--max-units)" and first.units == 2 and first.left
    assert counters(db, "ws1") != expected_counters(old["messages"], "ws1")
    seen = []
    rest = reindex.run(db, on_unit=lambda unit, written: seen.append(unit), say=quiet)
    assert rest.units == 3 and not rest.left and len(seen) == len(set(seen)) == 3
    for ws in workspaces(old):
        assert counters(db, ws) == expected_counters(old["messages"], ws)
        assert marks(db, ws) == set()


class Dying:
    """The table's client, failing the `at`-th call of `operation` (as a lost connection or an expired credential
    would): a run dies wherever that request falls, inside a unit's postings, counts or texts."""

    def __init__(self, client, operation: str, at: int):
        self.client, self.operation, self.at, self.calls = client, operation, at, 0
        self.lock = threading.Lock()

    def __getattr__(self, name):
        method = getattr(self.client, name)
        if name != self.operation:
            return method

        def call(*args, **kwargs):
            with self.lock:
                self.calls += 1
                dies = self.calls == self.at
            if dies:
                raise ConnectionError(f"{name} #{self.at}: connection lost")
            return method(*args, **kwargs)

        return call


@pytest.mark.parametrize(
    ("operation", "at"),
    [
        ("update_item", 30),  # inside the first unit's counts
        ("update_item", 160),  # while a unit is settled (its marks removed)
        ("batch_write_item", 4),  # the first unit's postings
        ("batch_write_item", 23),  # the first unit's texts: some written, not all
        ("transact_write_items", 2),  # a conclusion's text item
    ],
)
def test_a_run_dying_inside_a_unit_and_run_again_counts_each_message_once(db, old, operation, at):
    dying = Dying(db.client, operation, at)
    with pytest.raises(ConnectionError):
        reindex.run(Db(dying, db.s3, db.table, db.bucket), say=quiet)
    assert dying.calls >= at
    # A repair lease the dead run may still hold lapses after REPAIR_LEASE_S (a run started at once waits for it).
    for item in table(db):
        if item["SK"] == keys.text_repair_lease("ws1", "s1")["SK"]:
            db.client.delete_item(TableName=db.table, Key=to_item({"PK": item["PK"], "SK": item["SK"]}))
    again = reindex.run(db, say=quiet)
    assert not again.left
    for ws in workspaces(old):
        assert counters(db, ws) == expected_counters(old["messages"], ws)
        assert marks(db, ws) == set()
    for (ws, observer, observed), contents in old["conclusions"].items():
        texts = query_all(
            db,
            KeyConditionExpression="PK = :pk AND begins_with(SK, :l)",
            ConsistentRead=True,
            ExpressionAttributeValues=to_item({":pk": keys.collection_pk(ws, observer, observed), ":l": "L#"}),
        )
        assert {t["id"] for t in texts} == set(contents)


def test_a_unit_the_deriver_repaired_first_is_not_counted_again(db, old):
    stored = read_range(db, "ws1", "s1", 101, 150)
    assert message_search.ensure_indexed(db, "ws1", "s1", stored) == 100  # the whole block of seqs 101-200
    assert marks(db, "ws1") == set()  # (the repair settles what it indexed)
    done = reindex.run(db, say=quiet)
    assert (done.indexed, done.units, done.settled) == (295 - 100, 4, 0)
    assert counters(db, "ws1") == expected_counters(old["messages"], "ws1")
    assert marks(db, "ws1") == set()


def test_a_new_batch_beside_old_messages_is_counted_once_and_one_still_being_stored_is_left_to_its_request(db, old):
    messages = dict(old["messages"])
    new = [NewMessage(f"a new kayak trip to the river {i}", "carol", 7) for i in range(5)]
    # Stored and indexed as the ingest does it: its own unit, inside s2's legacy block of seqs 1-100.
    views = append_messages(
        db, "ws1", "s2", new, inline_max_bytes=100_000, index_nonce="00c0ffee", index_by=time.time() - 1
    )
    text_index.index_texts(
        db,
        "ws1",
        "s2",
        index_unit("s2", views[0]["seq"], "00c0ffee"),
        [text_index.Text(v["seq"], "carol", m.content) for v, m in zip(views, new)],
    )
    messages |= {("ws1", "s2", v["seq"]): ("carol", m.content) for v, m in zip(views, new)}
    # A batch whose request is still running (its deadline ahead): it indexes it, or the deriver does after.
    live = append_messages(
        db, "ws2", "s3", new[:3], inline_max_bytes=100_000, index_nonce="0b0e1234", index_by=time.time() + 600
    )
    done = reindex.run(db, say=quiet)
    assert done.in_flight == 3 and done.left and done.indexed == 295
    assert counters(db, "ws1") == expected_counters(messages, "ws1")
    assert counters(db, "ws2") == expected_counters(old["messages"], "ws2")
    later = message_search.reindex_session(db, "ws2", "s3", now=lambda: time.time() + 700)
    assert (later.indexed, later.units, later.in_flight) == (3, 1, 0)
    messages |= {("ws2", "s3", v["seq"]): ("carol", m.content) for v, m in zip(live, new)}
    assert counters(db, "ws2") == expected_counters(messages, "ws2")


def test_a_block_a_clone_copy_indexed_in_part_counts_the_rest_once(db, old):
    # s2 as a clone whose copy (new code) indexed seqs 1-30 under the copy's own unit; 31-40 are its own old messages,
    # in the same legacy block of seqs 1-100.
    views = read_range(db, "ws1", "s2", 1, 30)
    text_index.index_texts(
        db, "ws1", "s2", "s2:1:copyabc", [text_index.Text(int(v["seq"]), v["peer_id"], v["content"]) for v in views]
    )
    db.client.update_item(
        TableName=db.table,
        Key=to_item(keys.session("ws1", "s2")),
        UpdateExpression="SET base_session = :p, base_through = :t",
        ExpressionAttributeValues=to_item({":p": "s1", ":t": 30}),
    )
    copying = reindex.run(db, workspace="ws1", say=quiet)
    assert copying.copying == 10 and copying.left  # its copy still runs: the block is left for a later run
    db.client.update_item(
        TableName=db.table, Key=to_item(keys.session("ws1", "s2")), UpdateExpression="REMOVE base_session, base_through"
    )
    copied = reindex.run(db, workspace="ws1", say=quiet)
    assert (copied.indexed, copied.copying, copied.left) == (10, 0, False)
    assert counters(db, "ws1") == expected_counters(old["messages"], "ws1")


def test_conclusions_get_their_text_items_and_lexical_rank_finds_them_with_textbook_scores(db, old):
    done = reindex.run(db, say=quiet)
    assert done.conclusions == done.conclusion_texts == 13
    for (ws, observer, observed), contents in old["conclusions"].items():
        texts = {("", cid): counts(content) for cid, content in contents.items()}
        for query in QUERIES:
            assert_ranked(vectors.lexical_rank(db, ws, observer, observed, query, 100), bm25(query, texts))


def test_the_old_statistics_go_and_strip_leaves_the_old_vector_indexes_nothing(db, old):
    def old_lexical() -> list:
        return [i for i in table(db) if set(i) & {"tvec", "tsig", "tlen"} and i["SK"].startswith(("MV#", "V#"))]

    kept = reindex.run(db, say=quiet)
    assert kept.statistics == 2 + 3 and kept.stripped == 0
    assert len(old_lexical()) == 295 + 13  # without --strip, the vector items are left as they are
    stripped = reindex.run(db, strip=True, say=quiet)
    assert stripped.stripped == 295 + 13 and stripped.statistics == 0
    assert old_lexical() == []
    items = table(db)
    assert not [i for i in items if i["SK"] in ("MESSAGES", "TERMS")]
    # What the vector items still hold for the indexes that stay: the semantic vector, the conclusion's embedding.
    assert sum("svec" in i for i in items if i["SK"].startswith("MV#")) == sum(
        seq % 2 for _ws, _s, seq in old["messages"]
    )
    assert all("vec" in i for i in items if i["SK"].startswith("V#"))
    assert reindex.run(db, strip=True, say=quiet).stripped == 0


def test_a_dry_run_writes_nothing_and_says_what_is_left(db, old):
    before = table(db)
    dry = reindex.run(db, dry_run=True, strip=True, say=quiet)
    assert (dry.indexed, dry.units, dry.conclusion_texts, dry.statistics, dry.stripped) == (295, 5, 13, 5, 308)
    assert table(db) == before


def test_the_command_line(db, old, capsys):
    assert reindex.main(["--table", db.table, "--bucket", db.bucket, "--max-units", "1"], db=db) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "2 workspaces"
    assert out[-2] == "stopped after 1 units (--max-units); run again to go on"
    assert out[-1].startswith(
        "left for the next run: 1 workspaces, 1 sessions, 230 messages read, 100 indexed in 1 units"
    )
    assert reindex.main(["--table", db.table, "--bucket", db.bucket, "--workspace", "ws2"], db=db) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith(
        "ws2: 1 sessions, 25 messages read, 25 indexed in 1 units, 3 conclusions (3 text items "
        "written), 2 old statistics items deleted, 0 vector items stripped, "
    )
    assert out[-1].startswith("done: 1 workspaces, ")
    assert reindex.main(["--table", db.table, "--bucket", db.bucket, "--dry-run"], db=db) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "dry run: 2 workspaces"
    assert out[-1].startswith(
        "dry run: 2 workspaces, 3 sessions, 295 messages read, 170 to index in 3 units, "
        "13 conclusions (10 without a text item), 3 old statistics items to delete, "
    )
    with pytest.raises(Exception, match="workspace 'nope' not found"):
        reindex.main(["--table", db.table, "--bucket", db.bucket, "--workspace", "nope"], db=db)


def test_a_long_walk_says_how_it_goes(db, old):
    lines, ticks = [], iter(range(0, 10_000, 11))  # 11 s between two looks at the clock: past PROGRESS_S each time
    reindex.run(db, workspace="ws2", say=lines.append, clock=lambda: next(ticks))
    assert lines[1].startswith("  ws2: session 1/1, 25 messages read, 25 indexed in 1 units, ")
    assert lines[-1].startswith("done: 1 workspaces, 1 sessions, 25 messages read, 25 indexed in 1 units, ")
