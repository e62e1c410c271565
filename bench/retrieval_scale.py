"""Lexical search at workspace scale: does Precis's exact BM25, the inverted index in the table,
rank 100,000 messages as BM25 does, and what does a search cost as the workspace grows?

Data, generated here from a seed (nothing downloaded): 1,000 sessions of 100 messages, `user` and `assistant` taking
turns, 4-25 words a message drawn from a Zipf-Mandelbrot law over 40,000 synthetic words, with a few stopwords
between them. The synthetic words are pronounceable letters, not stopwords, and fixed points of Porter's stemmer
(bench/retrieval_bm25.py's), so each is its own stem and no two share one: how text is cut into terms cannot be what
differs, only the ranking. PLANTED real rare words are said once each, by `user`, in the first ten sessions, which
are the 1,000-message corpus (the same generator's prefix). Queries: (a) "what about the X?" for each planted word,
(b) questions of 2-5 vocabulary words, common and rare, a third naming a speaker.

The reference (`Reference`) is BM25 written here from Precis's definition, never from its code: k1 0.9, b 0.4,
Lucene's idf log(1 + (N - df + 0.5) / (df + 0.5)), a message's terms its stemmed content words plus its speaker's
name twice, stopwords removed (STOPWORDS is Precis's list, copied: it is part of the definition), each of a query's
distinct terms weighted by how often the query says it, ties to the smaller (session id, seq). Each scope has its
own statistics: a workspace search all messages, a peer search that peer's, a session search that session's.

Precis's side is its own code. The workspace, its peers and its sessions are made through their routes; the messages
are loaded by bench/seed.py as the message route stores them, posts of UNIT, each indexed by `text_index.index_texts`
(what the ingest function calls: a fresh item in its session's shard and a text a message), then the session's shard
merged by `text_index.merge` (what the deriver does as the stream brings the post's inserts: a shard of 100 fresh
messages becomes a segment, the manifest's transaction deletes the fresh items, segments are compacted four into
one). The load sends these calls to `DictTable`, a client that applies them to a dict and meters their write units
as DynamoDB bills them, then puts the items in moto in one pass: the same load through botocore and moto, metered by
bench/cost.py's `Capacity` (which sizes each written item before and after, from moto), is several times slower (the
report prints both for the first session). `check_direct` loads the first session both ways and compares every
item and the write units. The searches go through the search routes (`POST .../search` of the workspace, the
session, the peer: the handler as API Gateway invokes it), their requests and response bytes counted at the AWS door,
whether their read budget ran out (`text_index.Budget`; the answer's X-Precis-Search-Budget), and read units from the
stored items' sizes (`ReadMeter`, checked against bench/cost.py's `Capacity` at 1,000 messages).

Beside it, in the same run, the previous design (commit PREVIOUS: hashed 256-slot BM25 vectors in a DynamoDB vector
index and a count-min sketch of document frequencies) on the same corpus and queries: its own code, from a temporary
git worktree, in a subprocess (bench/retrieval_previous.py) started first and running alongside. moto answers its
SearchVectors by an exact scan (about a second a search at 100,000), so it runs at 1,000 and PREVIOUS_MESSAGES messages.

PRECIS_BENCH_SCALE_SESSIONS (default 1,000) sets the corpus's sessions, for a quicker look.
"""

from __future__ import annotations

import base64
import bisect
import functools
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import retrieval_bm25

SEED = 37
SESSIONS, PER_SESSION, SMALL_SESSIONS = 1_000, 100, 10  # 100,000 messages; the small corpus: the first 10 sessions
UNIT = 50  # messages indexed as one unit (a post of 50): two units a session
VOCABULARY = 40_000
ZIPF_S, ZIPF_Q = 1.0, 5.0  # Zipf-Mandelbrot: the r-th word's weight is 1 / (r + q)^s
WORDS_PER_MESSAGE = (4, 25)
PEERS = ("user", "assistant")
K = 10
COMMON = 100  # the most frequent words, a "common" word of the queries
K1, B = 0.9, 0.4
SPEAKER_WEIGHT = 2
# Precis's stopword list (precis/lexical.py), copied as data: which words do not count is part of BM25's definition
# there, as k1 and b are.
STOPWORDS = frozenset(
    "a about after again all also am an and any are as at be because been before being both but by can could did do "
    "does doing done down during each few for from further had has have having he her here hers herself him himself "
    "his how i if in into is it its itself just me more most my myself no nor not now of off on once only or other "
    "our ours ourselves out over own same she should so some such than that the their theirs them themselves then "
    "there these they this those through to too under until up us very was we were what when where which while who "
    "whom why will with would you your yours yourself yourselves s t d ll m re ve don didn doesn isn wasn".split()
)
# Real rare words, each a fixed point of Porter's stemmer (checked in `corpus`), said once in the whole corpus.
PLANTED = tuple(
    """toronto kayak hammock tarantula zeppelin accordion harpoon lasagna igloo pelican origami tornado
volcano glacier canyon lantern compass kimono banjo dolphin falcon gazebo haiku jigsaw kiosk lagoon marzipan nougat
quokka raccoon sombrero tundra vortex wombat yodel zucchini flamingo gondola iguana jackal koala llama moccasin
narwhal""".split()
)
FILLERS = ("the", "and", "i", "it", "so", "about", "with", "we", "that", "was", "for", "just", "my", "you")
QUESTIONS = (
    "what did we say about {}?",
    "do you remember the {}?",
    "anything on {} lately?",
    "remind me what was said about {}",
    "{}: what came of it?",
    "tell me again about {}",
)
_ONSETS = "b c d f g h j k l m n p r s t v w z b d k l m n p r s t br ch dr fl gr kr pl sh st tr".split()
_VOWELS = "a e i o u a e i o u a o u ai ee oo ou".split()
_CODAS = ("", "", "", "", "", "b", "d", "g", "k", "l", "m", "n", "p", "r", "t", "x", "nd", "nk", "mp", "rk", "st")


# ---------------------------------------------------------------- the corpus


@dataclass(frozen=True)
class Message:
    session: str
    seq: int
    peer: str
    text: str

    @property
    def key(self) -> tuple[str, int]:
        return (self.session, self.seq)


@dataclass(frozen=True)
class Corpus:
    messages: list[Message]
    words: list[str]  # the vocabulary, most frequent first
    planted: dict[str, tuple[str, int]]  # planted word -> the (session, seq) of the one message that says it


def session_id(index: int) -> str:
    return f"s{index:04d}"  # fixed width: the text order of ids is their numeric order


@functools.cache
def stem(word: str) -> str:
    """Porter's stem (bench/retrieval_bm25.py's, written independently of Precis's), remembered."""
    return retrieval_bm25.stem(word)


def vocabulary(size: int, rng: random.Random) -> list[str]:
    """`size` pronounceable words of 2-3 syllables, letters only, each its own Porter stem; the order is the Zipf
    rank."""
    taken = {*STOPWORDS, *PEERS, *map(stem, PEERS), *PLANTED}  # not a stopword, a speaker, a planted word
    out: list[str] = []
    seen: set[str] = set()
    while len(out) < size:
        syllables = rng.choice((2, 2, 2, 3, 3))
        word = "".join(
            rng.choice(_ONSETS)
            + rng.choice(_VOWELS)
            + (rng.choice(_CODAS) if i == syllables - 1 or rng.random() < 0.2 else "")
            for i in range(syllables)
        )
        if word in seen or word in taken or not 4 <= len(word) <= 12 or stem(word) != word:
            continue
        seen.add(word)
        out.append(word)
    return out


def _zipf(size: int) -> list[float]:
    total, cumulative = 0.0, []
    for rank in range(1, size + 1):
        total += 1.0 / (rank + ZIPF_Q) ** ZIPF_S
        cumulative.append(total)
    return cumulative


def corpus(sessions: int = SESSIONS) -> Corpus:
    """The first `sessions` sessions of the benchmark's corpus (the same every run; a smaller one is a prefix of a
    larger one, planted words included)."""
    words = vocabulary(VOCABULARY, random.Random(SEED))
    assert all(stem(w) == w for w in PLANTED) and not set(PLANTED) & set(words)
    cumulative = _zipf(len(words))
    top = cumulative[-1]
    # The planted words: each in one `user` message of the first SMALL_SESSIONS sessions.
    place = random.Random(SEED + 1)
    spots = place.sample(
        [(session_id(s), q) for s in range(SMALL_SESSIONS) for q in range(1, PER_SESSION + 1, 2)], len(PLANTED)
    )
    planted_at = dict(zip(spots, PLANTED))
    messages = []
    for s in range(sessions):
        rng = random.Random(f"{SEED}:{s}")  # each session its own stream: any prefix of sessions is the same
        sid = session_id(s)
        for seq in range(1, PER_SESSION + 1):
            count = rng.randint(*WORDS_PER_MESSAGE)
            said = [words[bisect.bisect_left(cumulative, rng.random() * top)] for _ in range(count)]
            for _ in range(rng.randint(0, count // 2)):
                said.insert(rng.randrange(len(said) + 1), rng.choice(FILLERS))
            if (sid, seq) in planted_at:
                said.insert(rng.randrange(len(said) + 1), planted_at[(sid, seq)])
            text = " ".join(said)
            messages.append(Message(sid, seq, PEERS[(seq - 1) % 2], text[0].upper() + text[1:] + rng.choice(".?!")))
    planted = {word: spot for spot, word in planted_at.items() if int(spot[0][1:]) < sessions}
    return Corpus(messages, words, planted)


@dataclass(frozen=True)
class Query:
    kind: str  # "planted" (a), "mixed" (b), "common" (c) or "edge" (d)
    text: str
    session: str  # the session the session-scope search asks
    planted: str | None = None


def queries(data: Corpus, mixed: int = 60, common_only: int = 20) -> list[Query]:
    """(a) "what about the X?" for each planted word; (b) `mixed` questions of 2-5 vocabulary words (one or two of
    the COMMON most frequent, the rest from the words the first sessions say, often from their rarer half), a third of
    them naming a speaker; (c) `common_only` questions of 2-3 of the COMMON most frequent words, the case an exact top
    k must read deeper for as the corpus grows; and (d) `edge_queries`. The session a session search asks is the
    planted word's, or one that says the question's rarest word."""
    out = [Query("planted", f"what about the {word}?", spot[0], word) for word, spot in sorted(data.planted.items())]
    rng = random.Random(SEED + 2)
    said_in: dict[str, str] = {}
    for message in data.messages[: SMALL_SESSIONS * PER_SESSION]:  # sessions both corpora hold
        for word in message.text.lower().rstrip(".?!").split():
            said_in.setdefault(word, message.session)
    small = [w for w in data.words if w in said_in]
    for _ in range(mixed):
        common = rng.sample(data.words[:COMMON], rng.choice((1, 1, 2)))
        rest = [
            rng.choice(small[len(small) // 2 :]) if rng.random() < 0.5 else rng.choice(small)
            for _ in range(rng.randint(max(1, 2 - len(common)), 5 - len(common)))
        ]
        chosen = common + rest
        rng.shuffle(chosen)
        phrase = ", ".join(chosen[:-1]) + " and " + chosen[-1]
        text = rng.choice(QUESTIONS).format(phrase)
        if rng.random() < 1 / 3:
            text = f"what did the {rng.choice(PEERS)} say: {text}"
        rarest = max(chosen, key=data.words.index)
        out.append(Query("mixed", text, said_in[rarest]))
    rng = random.Random(SEED + 3)
    for _ in range(common_only):
        chosen = rng.sample(data.words[:COMMON], rng.choice((2, 3)))
        text = rng.choice(QUESTIONS).format(", ".join(chosen[:-1]) + " and " + chosen[-1])
        out.append(Query("common", text, said_in[max(chosen, key=data.words.index)]))
    out += edge_queries(data)
    return out


def edge_queries(data: Corpus) -> list[Query]:
    """(d) The corners of the definition: a speaker's name alone (every message of that peer says it twice), both
    names, a word said twice or three times in the query, stopwords only, the most common word alone, two planted
    words, a speaker with common words."""
    words, planted = data.words, sorted(data.planted)
    first, home = session_id(0), {word: spot[0] for word, spot in data.planted.items()}
    return [
        Query("edge", text, session)
        for text, session in (
            ("what did the user say?", first),
            ("what did the assistant say?", first),
            ("user and assistant", first),
            (f"{planted[0]} {planted[0]} and {words[0]}", home[planted[0]]),
            (f"{words[0]} {words[0]} {words[1]}", first),
            (f"{words[5]}, {words[5]}, {words[5]}!", first),
            (f"{words[3000]} from the user", first),
            ("what about it?", first),
            (f"{planted[1]} or {planted[2]}?", home[planted[1]]),
            (words[0], first),
            (f"assistant: {words[0]} {words[1]} {words[2]}", first),
        )
    ]


# ---------------------------------------------------------------- the reference


def reference_terms(text: str) -> list[str]:
    """A text's content words, stemmed (the corpus is ASCII letters, spaces and punctuation)."""
    return [stem(w) for w in re.findall(r"[a-z]+", text.lower()) if w not in STOPWORDS]


class Reference:
    """Okapi BM25 over `messages`, with their own statistics, scored term at a time from postings (exact: every
    message that says a query term gets its whole score)."""

    def __init__(self, messages: Iterable[Message]):
        self.keys: list[tuple[str, int]] = []
        self.lengths: list[int] = []
        self.postings: dict[str, list[tuple[int, int]]] = {}
        for i, message in enumerate(messages):
            found = reference_terms(message.text) + reference_terms(message.peer) * SPEAKER_WEIGHT
            self.keys.append(message.key)
            self.lengths.append(len(found))
            for term, count in Counter(found).items():
                self.postings.setdefault(term, []).append((i, count))
        self.n = len(self.keys)
        self.average = sum(self.lengths) / self.n if self.n else 0.0

    def idf(self, term: str) -> float:
        df = len(self.postings.get(term, ()))
        return math.log(1 + (self.n - df + 0.5) / (df + 0.5))

    def rank(self, query: str, k: int = K) -> list[tuple[tuple[str, int], float]]:
        """The k best (key, score) that share a term with `query`, best first, ties to the smaller key."""
        asked = Counter(reference_terms(query))
        scores: dict[int, float] = {}
        for term, said in asked.items():  # in the query's order
            weight = self.idf(term) * said
            for i, tf in self.postings.get(term, ()):
                norm = K1 * (1 - B + B * self.lengths[i] / self.average)
                scores[i] = scores.get(i, 0.0) + weight * (tf * (K1 + 1) / (tf + norm))
        best = sorted(scores.items(), key=lambda kv: (-kv[1], self.keys[kv[0]]))[:k]
        return [(self.keys[i], s) for i, s in best]


# ---------------------------------------------------------------- Precis, on moto

WS = "bench"
CREATED_AT = "2026-11-30T00:00:00+00:00"
BUDGET_HEADER = "x-precis-search-budget"  # (ext) on a search answer whose read budget ran out first
INDEX_FAMILIES = ("fresh", "texts", "segments", "manifest")  # the index's items (`family`)


def load(client, messages: Sequence[Message]) -> None:
    """Store `messages` and index them as Precis's write path does, by bench/seed.py: each session's messages in posts
    of UNIT, each post's index written as the ingest function writes it (`text_index.index_texts`: a fresh item and
    the texts), then the session's fresh shard merged as the deriver merges it when the stream brings the post's
    inserts (`text_index.merge`). The sessions exist already (`_open`). `client` is a DynamoDB client, or a
    `DictTable`."""
    from bench.common import template
    from bench.seed import Said, write_messages

    by_session: dict[str, list[Message]] = {}
    for message in messages:
        by_session.setdefault(message.session, []).append(message)
    for sid, said in by_session.items():
        assert [m.seq for m in said] == list(range(1, len(said) + 1)), sid  # whole sessions, from their first seq
        write_messages(
            client,
            template().table_name,
            WS,
            sid,
            [Said(m.peer, m.text, tokens=len(m.text.split()), created_at=CREATED_AT) for m in said],
            post=UNIT,
            index=True,
            merge=True,
        )


KB, PAGE = 1024, 1024 * 1024  # a write unit's size; a Query page's
_KEY_CONDITION = re.compile(
    r"PK = (:\w+)(?: AND SK (<=|<|>=|>|=) (:\w+)| AND begins_with\(SK, (:\w+)\)| AND SK BETWEEN (:\w+) AND (:\w+))?"
)
_ASSIGNMENT = re.compile(r"(#?\w+) = (:\w+)")
_TEST = re.compile(r"(attribute_exists|attribute_not_exists)\((#?\w+)\)|(#?\w+) = (:\w+)")


def _bytes(value: dict[str, Any]) -> dict[str, Any]:
    """A typed value, binary as bytes (moto holds what a request wrote as base64 text)."""
    return {"B": base64.b64decode(value["B"])} if isinstance(value.get("B"), str) else value


def family(pk: str, sk: str) -> str:
    """What an item is, for the meter: an index family by its key (keys.py), else messages or other items."""
    if re.search(r"#XF#\d+$", pk):
        return "fresh"
    if "#XG#" in pk:
        return "segments"
    if pk.endswith("#XM"):
        return "manifest"
    if pk.endswith("#XD"):
        return "texts"
    return "messages" if sk.startswith("MSG#") else "other"


class DictTable:
    """A DynamoDB client for the bulk load: the requests Precis's index and the loader send (BatchWriteItem puts and
    deletes, BatchGetItem, GetItem, Query with a key condition on PK (and SK), ConsistentRead, Limit,
    ExclusiveStartKey, ScanIndexForward, a FilterExpression and ProjectionExpression of plain equality and names,
    TransactWriteItems of conditional Updates (SET) and Deletes, DeleteItem), applied to a dict of items, which
    `materialize` then puts in moto's table: through botocore and moto the load costs minutes per thousand messages.
    Every write is metered as DynamoDB bills it, by item family and write kind: 1 WRU per started KB of the larger of
    the item before and after, a failed condition as the write it would have been, each action of a transaction
    twice (a cancelled one too: nothing applied); `check_direct` shows that it stores and bills what botocore's path
    does (bench/cost.py's `Capacity`)."""

    def __init__(self, table: str = "precis-local"):
        import threading

        self.name = table
        self.items: dict[tuple[str, str], dict[str, Any]] = {}
        self.sizes: dict[tuple[str, str], int] = {}
        self.keys: dict[str, list[str]] = {}  # each partition's sort keys, in order
        self.lock = threading.RLock()
        self.wru: Counter[str] = Counter()  # by family
        self.by_kind: Counter[tuple[str, str]] = Counter()  # by (family, "put" | "update" | "delete" | "refused")
        self.writes: Counter[str] = Counter()

    # -- the dict

    def _set(self, key: tuple[str, str], item: dict[str, Any] | None) -> None:
        if item is None:
            if self.items.pop(key, None) is not None:
                del self.sizes[key]
                sks = self.keys[key[0]]
                del sks[bisect.bisect_left(sks, key[1])]
                if not sks:
                    del self.keys[key[0]]
            return
        if key not in self.items:
            bisect.insort(self.keys.setdefault(key[0], []), key[1])
        self.items[key], self.sizes[key] = item, _size(item)

    def _bill(self, key: tuple[str, str], size: int, kind: str, *, transactional: bool = False) -> None:
        units = max(1, -(-size // KB)) * (2 if transactional else 1)
        which = family(*key)
        self.wru[which] += units
        self.by_kind[which, kind] += units
        self.writes[which] += 1

    def absorb(self, items: Iterable[dict[str, Any]]) -> None:
        """Hold `items` (typed; binary values as bytes or base64 text), unbilled: what the routes made before a load."""
        with self.lock:
            for typed in items:
                item = {k: _bytes(v) for k, v in typed.items()}
                self._set((item["PK"]["S"], item["SK"]["S"]), item)

    # -- expressions (the shapes Precis sends; anything else is refused, not guessed)

    @staticmethod
    def _name(token: str, names: dict[str, str]) -> str:
        return names[token] if token.startswith("#") else token

    def _project(self, item: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
        expression = request.get("ProjectionExpression")
        if not expression:
            return item
        names = request.get("ExpressionAttributeNames") or {}
        wanted = {self._name(p.strip(), names) for p in expression.split(",")}
        return {k: v for k, v in item.items() if k in wanted}

    def _holds(self, expression: str | None, item: dict[str, Any] | None, request: dict[str, Any]) -> bool:
        if not expression:
            return True
        names, values = request.get("ExpressionAttributeNames") or {}, request.get("ExpressionAttributeValues") or {}
        for test in expression.split(" AND "):
            matched = _TEST.fullmatch(test.strip())
            if matched is None:
                raise NotImplementedError(expression)
            function, operand, left, right = matched.groups()
            if function is not None:
                present = item is not None and self._name(operand, names) in item
                if present != (function == "attribute_exists"):
                    return False
            elif item is None or item.get(self._name(left, names)) != values[right]:
                return False
        return True

    def _updated(self, before: dict[str, Any] | None, key: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
        """The item after an update of the shapes the index sends: SET of names to values, ADD and DELETE of string
        sets (the manifest's notes), each clause once."""
        expression = spec["UpdateExpression"].strip()
        clauses = re.split(r"\b(SET|ADD|DELETE)\s+", expression)
        if clauses[0].strip() or len(clauses) < 3:
            raise NotImplementedError(expression)
        names, values = spec.get("ExpressionAttributeNames") or {}, spec["ExpressionAttributeValues"]
        after = dict(before or key)
        for verb, body in zip(clauses[1::2], clauses[2::2]):
            for assignment in body.split(","):
                if verb == "SET":
                    pair = _ASSIGNMENT.fullmatch(assignment.strip())
                    if pair is None:
                        raise NotImplementedError(expression)
                    after[self._name(pair.group(1), names)] = values[pair.group(2)]
                    continue
                parts = assignment.split()
                if len(parts) != 2 or "SS" not in values[parts[1]]:
                    raise NotImplementedError(expression)
                name, given = self._name(parts[0], names), set(values[parts[1]]["SS"])
                held = set(after.get(name, {}).get("SS", ()))
                held = held | given if verb == "ADD" else held - given
                if held:
                    after[name] = {"SS": sorted(held)}
                else:
                    after.pop(name, None)
        return after

    def update_item(self, *, TableName: str, Key: dict[str, Any], **request: Any) -> dict[str, Any]:  # noqa: N803
        key = self._key(Key)
        with self.lock:
            before = self.items.get(key)
            if not self._holds(request.get("ConditionExpression"), before, request):
                self._bill(key, _size(before), "refused")
                raise self._error("ConditionalCheckFailedException", "UpdateItem")
            after = self._updated(before, Key, request)
            self._bill(key, max(_size(before), _size(after)), "update")
            self._set(key, after)
        return {}

    @staticmethod
    def _key(key: dict[str, Any]) -> tuple[str, str]:
        return key["PK"]["S"], key["SK"]["S"]

    @staticmethod
    def _error(code: str, operation: str, **extra: Any) -> Exception:
        from botocore.exceptions import ClientError

        return ClientError({"Error": {"Code": code, "Message": code}, **extra}, operation)

    # -- reads

    def get_item(self, *, TableName: str, Key: dict[str, Any], **request: Any) -> dict[str, Any]:  # noqa: N803
        with self.lock:
            item = self.items.get(self._key(Key))
        return {} if item is None else {"Item": self._project(item, request)}

    def batch_get_item(self, RequestItems: dict[str, Any]) -> dict[str, Any]:  # noqa: N803 - botocore's names
        (spec,) = RequestItems.values()
        with self.lock:
            found = [self.items.get(self._key(key)) for key in spec["Keys"]]
        return {
            "Responses": {self.name: [self._project(item, spec) for item in found if item is not None]},
            "UnprocessedKeys": {},
        }

    def query(self, *, TableName: str, KeyConditionExpression: str, **request: Any) -> dict[str, Any]:  # noqa: N803
        """A page: the partition's items the key condition selects, in order (reversed when not ScanIndexForward),
        after ExclusiveStartKey, until Limit items or 1 MB examined; then the filter and the projection."""
        if request.get("IndexName"):
            raise NotImplementedError("IndexName")
        matched = _KEY_CONDITION.fullmatch(KeyConditionExpression.strip())
        if matched is None:
            raise NotImplementedError(KeyConditionExpression)
        values = request["ExpressionAttributeValues"]
        pk_value, operator, sk_value, prefix, low, high = matched.groups()
        pk = values[pk_value]["S"]
        bound = values[sk_value]["S"] if sk_value else None
        between = (values[low]["S"], values[high]["S"]) if low else None
        compare = {
            "<=": lambda s: s <= bound,
            "<": lambda s: s < bound,
            ">=": lambda s: s >= bound,
            ">": lambda s: s > bound,
            "=": lambda s: s == bound,
        }
        with self.lock:
            sks = [
                s
                for s in self.keys.get(pk, ())
                if (operator is None or compare[operator](s))
                and (prefix is None or s.startswith(values[prefix]["S"]))
                and (between is None or between[0] <= s <= between[1])
            ]
            forward = request.get("ScanIndexForward", True)
            if not forward:
                sks.reverse()
            start = request.get("ExclusiveStartKey")
            if start is not None:
                after = start["SK"]["S"]
                sks = [s for s in sks if (s > after if forward else s < after)]
            page, size, limit = [], 0, request.get("Limit") or math.inf
            for sk in sks:
                if len(page) >= limit or (page and size + self.sizes[pk, sk] > PAGE):
                    break
                page.append(sk)
                size += self.sizes[pk, sk]
            examined = [self.items[pk, sk] for sk in page]
        kept = [i for i in examined if self._holds(request.get("FilterExpression"), i, request)]
        out: dict[str, Any] = {
            "Items": [self._project(i, request) for i in kept],
            "Count": len(kept),
            "ScannedCount": len(examined),
        }
        if page and page[-1] != sks[-1]:
            out["LastEvaluatedKey"] = {"PK": {"S": pk}, "SK": {"S": page[-1]}}
        return out

    # -- writes

    def batch_write_item(self, RequestItems: dict[str, Any]) -> dict[str, Any]:  # noqa: N803
        (requests,) = RequestItems.values()
        with self.lock:
            for request in requests:
                if "PutRequest" in request:
                    item = request["PutRequest"]["Item"]
                    key = self._key(item)
                    self._bill(key, max(self.sizes.get(key, 0), _size(item)), "put")
                    self._set(key, item)
                else:
                    key = self._key(request["DeleteRequest"]["Key"])
                    self._bill(key, self.sizes.get(key, 0), "delete")
                    self._set(key, None)
        return {"UnprocessedItems": {}}

    def delete_item(self, *, TableName: str, Key: dict[str, Any], **request: Any) -> dict[str, Any]:  # noqa: N803
        key = self._key(Key)
        with self.lock:
            holds = self._holds(request.get("ConditionExpression"), self.items.get(key), request)
            self._bill(key, self.sizes.get(key, 0), "delete" if holds else "refused")  # (refused: billed the same)
            if not holds:
                raise self._error("ConditionalCheckFailedException", "DeleteItem")
            self._set(key, None)
        return {}

    def transact_write_items(self, TransactItems: list[dict[str, Any]], **_: Any) -> dict[str, Any]:  # noqa: N803
        """All or nothing: every action's condition is checked first; a failed one cancels the transaction (its
        reasons, action by action), billed as the writes it would have made."""
        actions = []
        for entry in TransactItems:
            ((kind, spec),) = entry.items()
            if kind not in ("Update", "Delete", "Put"):
                raise NotImplementedError(kind)
            actions.append((kind, spec, self._key(spec["Item"] if kind == "Put" else spec["Key"])))
        if len({key for _, _, key in actions}) < len(actions):
            raise self._error("ValidationException", "TransactWriteItems")  # (one action an item)
        with self.lock:
            befores = [self.items.get(key) for _, _, key in actions]
            reasons = [
                "None" if self._holds(spec.get("ConditionExpression"), before, spec) else "ConditionalCheckFailed"
                for (_, spec, _), before in zip(actions, befores)
            ]
            if any(r != "None" for r in reasons):
                for (kind, spec, key), before in zip(actions, befores):
                    new = _size(spec["Item"]) if kind == "Put" else 0
                    self._bill(key, max(_size(before), new), "refused", transactional=True)
                raise self._error(
                    "TransactionCanceledException",
                    "TransactWriteItems",
                    CancellationReasons=[{"Code": r} for r in reasons],
                )
            for (kind, spec, key), before in zip(actions, befores):
                after = None
                if kind == "Put":
                    after = spec["Item"]
                elif kind == "Update":
                    after = self._updated(before, spec["Key"], spec)
                self._bill(key, max(_size(before), _size(after)), kind.lower(), transactional=True)
                self._set(key, after)
        return {}

    def materialize(self, table_name: str) -> None:
        """Put every item in moto's table `table_name`, before any Query of it (nothing derived from it to update):
        moto's Items built as local/moto_storage.py's `_item_init` builds them, without re-reading each value; binary
        values as moto holds what a request wrote (base64 text)."""
        from moto.dynamodb.models.dynamo_type import DynamoType, Item, LimitedSizeDict

        from bench.cost import moto_table

        def value(typed: dict[str, Any]) -> DynamoType:
            ((kind, v),) = typed.items()
            if kind in ("L", "M"):
                return DynamoType(typed)
            out = object.__new__(DynamoType)
            out.type, out.value = kind, base64.b64encode(v).decode() if kind == "B" else v
            return out

        table = moto_table(table_name)
        for attrs in self.items.values():
            item = object.__new__(Item)
            values = {name: value(v) for name, v in attrs.items()}
            item.hash_key, item.range_key = values["PK"], values["SK"]
            item.attrs = LimitedSizeDict.__new__(LimitedSizeDict)
            dict.update(item.attrs, values)
            table.items[item.hash_key][item.range_key] = item


@functools.cache
def _number_size(text: str) -> int:
    from bench.cost import number_size

    return number_size(text)


def _size(item: dict[str, Any] | None) -> int:
    """bench/cost.py's `item_size`, remembering number sizes (the index's items are mostly S, N and B)."""
    if item is None:
        return 0
    size = 0
    for name, value in item.items():
        text = value.get("S")
        if text is not None:
            size += len(name) + (len(text) if text.isascii() else len(text.encode()))
        elif (number := value.get("N")) is not None:
            size += len(name) + _number_size(number)
        elif isinstance(data := value.get("B"), bytes):
            size += len(name) + len(data)
        else:
            from bench.cost import attribute_size

            size += len(name.encode()) + attribute_size(value)
    return size


class ReadMeter:
    """Read units of a client's reads as DynamoDB bills them (strongly consistent: 1 per started 4 KB), from the
    sizes of the items stored (`DictTable.sizes`): a Query page examines `ScannedCount` items from where it starts
    (the key conditions Precis's search sends: `PK = :pk`, alone, with `begins_with(SK, :p)` or `SK <= :s`, read
    forward or backward), summed then rounded up; a BatchGetItem is billed per item, a missing one a minimal read.
    bench/cost.py's `Capacity` finds the same by asking each page again and sizing every item it names: at 100,000
    messages, most of the searches' time. `measure_precis` runs both at the small size and compares."""

    _KEY = re.compile(r"PK = (:\w+)(?: AND (?:begins_with\(SK, (:\w+)\)|SK <= (:\w+)|SK BETWEEN (:\w+) AND (:\w+)))?")

    def __init__(self, client, sizes: dict[tuple[str, str], int]):
        self.sizes = sizes
        partitions: dict[str, list[tuple[str, int]]] = {}
        for (pk, sk), size in sizes.items():
            partitions.setdefault(pk, []).append((sk, size))
        self.partitions: dict[str, tuple[list[str], list[int]]] = {}
        for pk, entries in partitions.items():
            entries.sort()
            totals = [0]
            for _, size in entries:
                totals.append(totals[-1] + size)
            self.partitions[pk] = ([sk for sk, _ in entries], totals)
        self.rru = 0
        self.events = client.meta.events
        self.events.register("before-parameter-build.dynamodb", self._params)
        self.events.register("after-call.dynamodb", self._after)

    def detach(self) -> None:
        self.events.unregister("before-parameter-build.dynamodb", self._params)
        self.events.unregister("after-call.dynamodb", self._after)

    def _params(self, params, model, context, **_):
        context["read_meter"] = (model.name, params)

    @staticmethod
    def _units(size: int, consistent: bool) -> float:
        blocks = max(1, -(-size // 4096))
        return blocks if consistent else blocks / 2

    def _after(self, parsed, model, context, **_):
        op, params = context["read_meter"]
        if op == "Query":
            matched = self._KEY.fullmatch(params["KeyConditionExpression"])
            if matched is None or params.get("IndexName"):
                raise NotImplementedError(params["KeyConditionExpression"])
            values = params["ExpressionAttributeValues"]
            sks, totals = self.partitions.get(values[matched.group(1)]["S"], ([], [0]))
            # The key range [low, high) of sort keys, then where the page starts in it, and its ScannedCount items.
            low, high = 0, len(sks)
            if matched.group(2):
                prefix = values[matched.group(2)]["S"]
                low = bisect.bisect_left(sks, prefix)
                high = bisect.bisect_left(sks, prefix + "\U0010ffff")
            if matched.group(3):
                high = bisect.bisect_right(sks, values[matched.group(3)]["S"])
            if matched.group(4):
                low = bisect.bisect_left(sks, values[matched.group(4)]["S"])
                high = bisect.bisect_right(sks, values[matched.group(5)]["S"])
            after = (params.get("ExclusiveStartKey") or {}).get("SK", {}).get("S")
            if params.get("ScanIndexForward") is False:
                if after is not None:
                    high = min(high, bisect.bisect_left(sks, after))
                low = max(low, high - parsed["ScannedCount"])
            else:
                if after is not None:
                    low = max(low, bisect.bisect_right(sks, after))
                high = min(high, low + parsed["ScannedCount"])
            self.rru += self._units(totals[high] - totals[low], bool(params.get("ConsistentRead")))
        elif op == "BatchGetItem":
            unprocessed = {
                (k["PK"]["S"], k["SK"]["S"])
                for spec in (parsed.get("UnprocessedKeys") or {}).values()
                for k in spec["Keys"]
            }
            for spec in params["RequestItems"].values():
                for key in spec["Keys"]:
                    if (key["PK"]["S"], key["SK"]["S"]) not in unprocessed:
                        self.rru += self._units(
                            self.sizes.get((key["PK"]["S"], key["SK"]["S"]), 0), bool(spec.get("ConsistentRead"))
                        )
        elif op == "GetItem":
            self.rru += self._units(
                self.sizes.get((params["Key"]["PK"]["S"], params["Key"]["SK"]["S"]), 0),
                bool(params.get("ConsistentRead")),
            )
        else:
            raise NotImplementedError(op)


def _moto_items(table_name: str) -> list[dict[str, Any]]:
    """Every item of moto's table, typed as stored (binary values as base64 text)."""
    from bench.cost import moto_table, typed

    return [
        {k: typed(v) for k, v in item.attrs.items()}
        for partition in moto_table(table_name).items.values()
        for item in partition.values()
    ]


def _comparable(items: Iterable[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """Items as two loads of the same messages are compared: sets sorted, binary values as bytes, without a message's
    id (its tail is random, `make_message_id`), and a segment's id (its creation time and a random tail) replaced by
    its place in the manifest, in its partition key and in the manifest."""
    items = list(items)
    manifest = next((i for i in items if i["PK"]["S"].endswith("#XM")), None)
    place = {s["id"]: f"segment {n}" for n, s in enumerate(json.loads(manifest["segs"]["S"]))} if manifest else {}

    def pk(value: str) -> str:
        head, mark, segment = value.partition("#XG#")
        return f"{head}{mark}{place.get(segment, segment)}"

    def one(name: str, value: dict[str, Any]) -> Any:
        if "NS" in value:
            return {"NS": sorted(value["NS"], key=float)}
        if isinstance(value.get("B"), str):
            return {"B": base64.b64decode(value["B"])}
        if name == "PK":
            return {"S": pk(value["S"])}
        if name == "segs":
            return [{**s, "id": place.get(s["id"], s["id"])} for s in json.loads(value["S"])]
        return value

    return {
        (pk(i["PK"]["S"]), i["SK"]["S"]): {
            k: one(k, v) for k, v in i.items() if not (k == "id" and i.get("kind") == {"S": "message"})
        }
        for i in items
    }


def check_direct(data: Corpus) -> dict[str, Any]:
    """The first session loaded both ways: through botocore and moto (metered by bench/cost.py's `Capacity`), and
    through `DictTable`, after the same workspace, peers and session made by their routes. The same items and the
    same write units mean the bulk load stands for the botocore one."""
    import boto3

    from bench.common import moto, template
    from bench.cost import Capacity
    from local.template import table_definition

    sample = [m for m in data.messages if m.session == session_id(0)]
    name = template().table_name
    with moto(stream=False) as clients:
        _open([session_id(0)])
        made = _moto_items(name)
        metered = boto3.client("dynamodb")
        capacity = Capacity(metered, clients["dynamodb"], table_definition(template()))
        started = time.perf_counter()
        load(metered, sample)
        botocore_s = time.perf_counter() - started
        capacity.hooks.detach()
        stored = _comparable(_moto_items(name))
        totals = capacity.totals["setup"]
    direct = DictTable(name)
    direct.absorb(made)
    started = time.perf_counter()
    load(direct, sample)
    direct_s = time.perf_counter() - started
    mine = _comparable(direct.items.values())
    differ = sorted(k for k in stored.keys() | mine.keys() if stored.get(k) != mine.get(k))
    return {
        "messages": len(sample),
        "items": len(stored),
        "differing_items": len(differ),
        "example": differ[:3],
        "wru_botocore": totals["wru"],
        "wru_direct": sum(direct.wru.values()),
        "wru_indexes": {k: v for k, v in totals.items() if k.startswith("wru_")},
        "botocore_s": botocore_s,
        "direct_s": direct_s,
    }


SCOPES = ("workspace", "session", "peer")
PEER = "user"


def _scope_path(query: Query, scope: str) -> str:
    """The search route of `scope`: the workspace's, the query's session's, or PEER's."""
    within = {"session": f"/sessions/{query.session}", "peer": f"/peers/{PEER}"}.get(scope, "")
    return f"/v3/workspaces/{WS}{within}/search"


def _open(sessions: Iterable[str]) -> None:
    """What the load and the search routes need there, created through the API: the workspace, the peers, and the
    sessions (the index takes back what a post wrote for a session that is not there, and a search leaves out a
    message whose session it does not find)."""
    from bench.front import call

    for path, body in (
        ("/v3/workspaces", {"id": WS}),
        *((f"/v3/workspaces/{WS}/peers", {"id": peer}) for peer in PEERS),
        *((f"/v3/workspaces/{WS}/sessions", {"id": sid}) for sid in sessions),
    ):
        reply = call("POST", path, body)
        assert reply.status in (200, 201), (path, reply.status, reply.body)


def _searches(
    clients: dict[str, Any],
    asked: Sequence[Query],
    *,
    sizes: dict[tuple[str, str], int] | None = None,
    capacity: bool = False,
) -> list[dict[str, Any]]:
    """Every query in every scope through its search route (`POST .../search`, limit K, the search function's handler
    as API Gateway invokes it): each search's results, DynamoDB requests and response bytes counted at the AWS door,
    and whether its read budget ran out (the answer's X-Precis-Search-Budget); with `sizes` (the stored items'), its
    read units by `ReadMeter`; with `capacity`, by bench/cost.py's `Capacity` too."""
    from bench.common import Requests, template
    from bench.front import AWS, call

    meter = ReadMeter(AWS, sizes) if sizes is not None else None
    check = None
    if capacity:
        from bench.cost import Capacity
        from local.template import table_definition

        check = Capacity(AWS, clients["dynamodb"], table_definition(template()))
    rows = []
    try:
        for number, query in enumerate(asked):
            for scope in SCOPES:
                label = f"{number}:{scope}"
                if check is not None:
                    check.label = label
                read_before = meter.rru if meter is not None else 0
                with Requests(AWS) as counted:
                    reply = call("POST", _scope_path(query, scope), {"query": query.text, "limit": K})
                assert reply.status == 200, (query.text, scope, reply.status, reply.body)
                budget = {k.lower(): v for k, v in reply.headers.items()}.get(BUDGET_HEADER)
                rows.append(
                    {
                        "query": number,
                        "kind": query.kind,
                        "scope": scope,
                        "got": [[v["session_id"], int(v["seq"])] for v in reply.body],
                        "requests": len(counted.ops),
                        "bytes": counted.bytes,
                        "ops": counted.by_op(),
                        "exhausted": budget is not None,
                        "budget": budget,
                        "rru": meter.rru - read_before if meter is not None else None,
                        "rru_capacity": check.totals[label]["rru"] if check is not None else None,
                    }
                )
    finally:
        if meter is not None:
            meter.detach()
        if check is not None:
            check.hooks.detach()
    return rows


def measure_precis(data: Corpus, asked: Sequence[Query], sizes: Sequence[int]) -> dict[int, dict[str, Any]]:
    """The workspace, its peers and every session of the corpus made through their routes (in moto, then held by a
    `DictTable`); then the corpus's first `sizes` messages loaded one after the other (each the next's prefix) into
    it, put in a fresh moto each time, and searched (read units metered by `ReadMeter`, and at the first size by
    `Capacity` as well)."""
    from bench.common import moto, template

    name = template().table_name
    direct = DictTable(name)
    started = time.perf_counter()
    with moto(stream=False):
        _open(dict.fromkeys(m.session for m in data.messages))
        direct.absorb(_moto_items(name))
    print(f"  Precis: the workspace and its sessions made through the routes in {time.perf_counter() - started:.0f} s")
    out, loaded, load_s = {}, 0, 0.0
    for size in sizes:
        started = time.perf_counter()
        load(direct, data.messages[loaded:size])
        load_s += time.perf_counter() - started
        loaded = size
        print(
            f"  Precis: {size:,} messages indexed through text_index.index_texts + merge in {load_s:.0f} s", flush=True
        )
        wru, by_kind = dict(direct.wru), {f"{f} {k}": v for (f, k), v in direct.by_kind.items()}
        manifest = direct.items.get((f"WS#{WS}#XM", "#"))
        segments = len(json.loads(manifest["segs"]["S"])) if manifest else 0
        with moto(stream=False) as clients:
            started = time.perf_counter()
            direct.materialize(name)
            materialize_s = time.perf_counter() - started
            if size == sizes[-1]:
                direct.items = {}  # moto holds them now; nothing loads after this
            started = time.perf_counter()
            rows = _searches(clients, asked, sizes=direct.sizes, capacity=size == sizes[0])
            search_s = time.perf_counter() - started
        print(
            f"  Precis: {size:,} messages put in moto in {materialize_s:.0f} s; {len(rows)} searches in "
            f"{search_s:.0f} s",
            flush=True,
        )
        out[size] = {
            "rows": rows,
            "wru": wru,
            "wru_by_kind": by_kind,
            "segments": segments,
            "load_s": load_s,
            "materialize_s": materialize_s,
            "search_s": search_s,
        }
    return out


# ---------------------------------------------------------------- the previous design, in a subprocess

PREVIOUS = "a5037bf"  # the last commit of the hashed-vector design (BM25 in a vector index)
PREVIOUS_MESSAGES = 10_000  # moto's SearchVectors is an exact scan: ~1 s a search at 100,000 messages


class Previous:
    """The previous design's run: a temporary git worktree of PREVIOUS, and bench/retrieval_previous.py's `main` run
    there by a subprocess with that worktree's `precis`, `local` and `bench` (started at once; `finish` waits for it and
    removes the worktree)."""

    def __init__(self, data: Corpus, asked: Sequence[Query], sizes: Sequence[int]):
        from bench.common import ROOT

        self.root = ROOT
        self.dir = Path(tempfile.mkdtemp(prefix=f"precis-{PREVIOUS}-"))
        self.tree = self.dir / "tree"
        try:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(self.tree), PREVIOUS], check=True
            )
        except subprocess.CalledProcessError:
            shutil.rmtree(self.dir, ignore_errors=True)
            raise
        encodings = ROOT / "layers" / "common" / "precis" / "encodings"  # fetched, not committed
        if encodings.is_dir() and not (self.tree / "layers/common/precis/encodings").exists():
            (self.tree / "layers/common/precis/encodings").symlink_to(encodings)
        self.request, self.answer, self.log = self.dir / "in.json", self.dir / "out.json", self.dir / "log.txt"
        self.request.write_text(
            json.dumps(
                {
                    "messages": [[m.session, m.seq, m.peer, m.text] for m in data.messages[: max(sizes)]],
                    "queries": [q.__dict__ for q in asked],
                    "sizes": list(sizes),
                }
            )
        )
        # Run from the worktree with `-c`: the module is loaded by path, everything it imports from the worktree.
        previous = str(Path(__file__).with_name("retrieval_previous.py"))
        code = (
            "import importlib.util, sys; spec = importlib.util.spec_from_file_location('retrieval_previous', "
            f"{previous!r}); module = importlib.util.module_from_spec(spec); "
            "sys.modules[spec.name] = module; spec.loader.exec_module(module); module.main(sys.argv[1:])"
        )
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(self.tree), str(self.tree / "layers" / "common")])}
        with open(self.log, "w") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-c", code, str(self.request), str(self.answer)],
                cwd=self.tree,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def finish(self, *, kill: bool = False) -> dict[str, Any]:
        """Its answer (waiting for it, or killing it first), the worktree removed either way."""
        try:
            if kill:
                self.process.kill()
            code = self.process.wait()
            if code != 0 or not self.answer.exists():
                tail = self.log.read_text()[-3000:]
                print(f"  the previous design's run failed (exit {code}):\n{tail}", flush=True)
                return {"failed": tail}
            return json.loads(self.answer.read_text())
        finally:
            if self.process.poll() is None:
                self.process.kill()
            subprocess.run(["git", "-C", str(self.root), "worktree", "remove", "--force", str(self.tree)], check=False)
            shutil.rmtree(self.dir, ignore_errors=True)


# ---------------------------------------------------------------- scoring and report


class References:
    """The reference's top K for each query in each scope, at each corpus size (a size's corpus: the first messages)."""

    def __init__(self, data: Corpus, asked: Sequence[Query]):
        self.data, self.asked = data, asked
        self.by_session: dict[str, list[Message]] = {}
        for message in data.messages:
            self.by_session.setdefault(message.session, []).append(message)
        self.sessions: dict[str, Reference] = {}
        self.sizes: dict[int, dict[tuple[int, str], list[tuple[tuple[str, int], float]]]] = {}
        self.workspace: dict[int, Reference] = {}

    def at(self, size: int) -> dict[tuple[int, str], list[tuple[tuple[str, int], float]]]:
        if size not in self.sizes:
            messages = self.data.messages[:size]
            scopes = {"workspace": Reference(messages), "peer": Reference(m for m in messages if m.peer == PEER)}
            self.workspace[size] = scopes["workspace"]
            expected = {}
            for number, query in enumerate(self.asked):
                for scope in SCOPES:
                    if scope == "session":
                        if query.session not in self.sessions:
                            self.sessions[query.session] = Reference(self.by_session[query.session])
                        reference = self.sessions[query.session]
                    else:
                        reference = scopes[scope]
                    expected[number, scope] = reference.rank(query.text)
            self.sizes[size] = expected
        return self.sizes[size]


def score(rows: list[dict[str, Any]], expected: dict, asked: Sequence[Query], data: Corpus) -> list[dict[str, Any]]:
    """Each row with its agreement: overlap (|top 10 ∩ reference top 10| / the longer of the two, 1 when both are
    empty), identical (the same ordered list) and, for a planted word, whether its message came first."""
    for row in rows:
        want = [tuple(key) for key, _ in expected[row["query"], row["scope"]]]
        got = [tuple(key) for key in row["got"]]
        row["expected"] = want
        row["overlap"] = len(set(want) & set(got)) / max(len(want), len(got)) if want or got else 1.0
        row["identical"] = want == got
        word = asked[row["query"]].planted
        row["first"] = bool(got) and got[0] == data.planted[word] if word else None
    return rows


def _median(values: Iterable[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else float("nan")


KINDS = (
    ("planted", "(a) what about the X?"),
    ("mixed", "(b) 2-5 Zipf words"),
    ("common", "(c) common words only"),
    ("edge", "(d) edge cases"),
)


def agreement_rows(label: str, size: int, rows: list[dict[str, Any]]) -> list[tuple]:
    out = []
    for scope in SCOPES:
        for kind, title in (*KINDS, (None, "all")):
            chosen = [r for r in rows if r["scope"] == scope and (kind is None or r["kind"] == kind)]
            planted = [r for r in chosen if r["kind"] == "planted"]
            out.append(
                (
                    label,
                    size,
                    scope,
                    title,
                    len(chosen),
                    sum(r["overlap"] for r in chosen) / len(chosen),
                    sum(r["identical"] for r in chosen) / len(chosen),
                    f"{sum(r['first'] for r in planted)}/{len(planted)}" if planted else "-",
                )
            )
    return out


def cost_rows(label: str, small: int, large: int, by_size: dict[int, list[dict[str, Any]]], units: bool) -> list[tuple]:
    """Per scope and query class: each search's requests, bytes and read units at both sizes (medians and maxima) and
    the per-search growth from the small corpus to the large (median, max, the share within 2x)."""
    out = []
    for scope in SCOPES:
        for kind, title in KINDS:
            pick = {
                size: {r["query"]: r for r in by_size[size] if r["scope"] == scope and r["kind"] == kind}
                for size in (small, large)
            }
            row = [label, scope, title]
            for measure in ("requests", "bytes", "rru"):
                if measure == "rru" and not units:
                    row += ["-"] * 5
                    continue
                a = {q: r[measure] for q, r in pick[small].items()}
                b = {q: r[measure] for q, r in pick[large].items()}
                ratios = [b[q] / a[q] for q in a if a[q]]
                row += [
                    _median(a.values()),
                    _median(b.values()),
                    max(b.values()),
                    _median(ratios),
                    sum(x <= 2 for x in ratios) / len(ratios),
                ]
            out.append(tuple(row))
    return out


def budget_rows(precis: dict[int, dict[str, Any]]) -> list[tuple]:
    """Per scope and query class, at each size: the searches whose read budget ran out, and the largest search's
    requests and response bytes."""
    out = []
    for scope in SCOPES:
        for kind, title in KINDS:
            for size, result in precis.items():
                chosen = [r for r in result["rows"] if r["scope"] == scope and r["kind"] == kind]
                out.append(
                    (
                        scope,
                        title,
                        size,
                        len(chosen),
                        sum(r["exhausted"] for r in chosen),
                        max(r["requests"] for r in chosen),
                        max(r["bytes"] for r in chosen),
                    )
                )
    return out


DF_BUCKETS = ((1, 1), (2, 100), (101, 1_000), (1_001, 10_000), (10_001, 10**9))


def growth_by_rarity(
    small: int, large: int, by_size: dict[int, list[dict[str, Any]]], asked: Sequence[Query], reference: Reference
) -> list[tuple]:
    """Workspace and peer searches by how many of the large corpus's messages say the query's rarest word: the
    per-search growth of requests, bytes and read units from the small corpus to the large (median and max)."""
    rarest = {}
    for number, query in enumerate(asked):
        said = [len(reference.postings[t]) for t in set(reference_terms(query.text)) if t in reference.postings]
        rarest[number] = min(said) if said else 0
    out = []
    for scope in ("workspace", "peer"):
        for low, high in DF_BUCKETS:
            a = {r["query"]: r for r in by_size[small] if r["scope"] == scope and low <= rarest[r["query"]] <= high}
            b = {r["query"]: r for r in by_size[large] if r["scope"] == scope and r["query"] in a}
            if not a:
                continue
            row = [
                scope,
                f"{low:,}" if low == high else f"{low:,}-{high:,}" if high < 10**9 else f"> {low - 1:,}",
                len(a),
            ]
            for measure in ("requests", "bytes", "rru"):
                ratios = [b[q][measure] / a[q][measure] for q in a if a[q][measure]]
                row += [_median(ratios), max(ratios)]
            out.append(tuple(row))
    return out


def report(
    data: Corpus,
    asked: Sequence[Query],
    check: dict,
    precis: dict[int, dict],
    previous: dict,
    references: References,
    started: float,
) -> dict[str, Any]:
    from bench.common import print_table

    small, large = SMALL_SESSIONS * PER_SESSION, len(data.messages)
    for size, result in precis.items():
        score(result["rows"], references.at(size), asked, data)
    old = {int(size): result for size, result in (previous.get("sizes") or {}).items()}
    for size, result in old.items():
        score(result["rows"], references.at(size), asked, data)

    agreement = [row for size, result in precis.items() for row in agreement_rows("Precis (now)", size, result["rows"])]
    agreement += [
        row for size, result in old.items() for row in agreement_rows(f"previous ({PREVIOUS})", size, result["rows"])
    ]
    counts = Counter(q.kind for q in asked)
    print_table(
        f"Agreement with the reference BM25's top {K} ({len(asked)} queries: {counts['planted']} (a), "
        f"{counts['mixed']} (b), {counts['common']} (c), {counts['edge']} (d); overlap = |top {K} ∩ "
        f"reference top {K}| / the longer list; identical = the same ordered list; peer = 'user')",
        ["design", "messages", "scope", "queries", "n", "overlap", "identical", "planted first"],
        agreement,
    )

    growth = cost_rows("Precis (now)", small, large, {s: r["rows"] for s, r in precis.items()}, units=True)
    if len(old) == 2:
        small_old, large_old = sorted(old)
        growth += cost_rows(
            f"previous @{large_old:,}", small_old, large_old, {s: r["rows"] for s, r in old.items()}, units=False
        )
    headers = ["design", "scope", "queries"]
    for measure in ("requests", "bytes", "RRU"):
        headers += [f"{measure} 1k", f"{measure} big", "max", "x med", "<=2x"]
    print_table(
        f"Cost per search (message_search.search, limit {K}): medians at {small:,} messages and at the large "
        f"size (Precis {large:,}; previous: its own), the large size's max, the median per-search growth and "
        "the share of searches within 2x. RRU: read units as DynamoDB bills them (strongly consistent Query "
        "pages summed then rounded to 4 KB; BatchGetItem per item)",
        headers,
        growth,
    )

    print_table(
        f"Precis's growth per search, {small:,} -> {large:,} messages, by how many of the {large:,} say the "
        "query's rarest word (a search reads each query word's whole postings in every segment, and the fresh "
        "shards: a common word's grow with the corpus)",
        ["scope", "rarest word's messages", "n", "requests x med", "max", "bytes x med", "max", "RRU x med", "max"],
        growth_by_rarity(small, large, {s: r["rows"] for s, r in precis.items()}, asked, references.workspace[large]),
    )

    print_table(
        "Read budget (text_index.Budget: 64 requests, 8 MB, 5 s a search by default): the searches whose budget ran "
        "out before the ranking had read everything (the answer's X-Precis-Search-Budget), and the largest search's "
        "requests and response bytes, at each size",
        ["scope", "queries", "messages", "n", "budget out", "max requests", "max bytes"],
        budget_rows(precis),
    )

    # Write units per message: Precis's from DictTable's meter, the previous design's from its Capacity.
    writes = []
    for size, result in precis.items():
        kinds = result["wru_by_kind"]
        index = {k: v for k, v in result["wru"].items() if k in INDEX_FAMILIES}
        writes.append(
            (
                "Precis (now)",
                size,
                kinds.get("fresh put", 0) / size,
                sum(v for k, v in kinds.items() if k.startswith("fresh ") and k != "fresh put") / size,
                index.get("texts", 0) / size,
                sum(v for k, v in kinds.items() if k.startswith("segments ") and k != "segments delete") / size,
                kinds.get("segments delete", 0) / size,
                index.get("manifest", 0) / size,
                "-",
                "-",
                sum(index.values()) / size,
            )
        )
    for size, result in old.items():
        search_items, stats = result["wru"]["search items"], result["wru"]["term statistics"]
        writes.append(
            (
                f"previous ({PREVIOUS})",
                size,
                *["-"] * 6,
                (search_items.get("wru", 0) + search_items.get("wru_vector", 0)) / size,
                stats.get("wru", 0) / size,
                (search_items.get("wru", 0) + search_items.get("wru_vector", 0) + stats.get("wru", 0)) / size,
            )
        )
    print_table(
        f"Write units per message written, for the search index alone (posts of {UNIT} messages; the message "
        "items themselves, the same in both designs, left out). Precis: metered per item as DynamoDB bills it "
        "(the larger of the item before and after, per started KB; twice in a transaction) by the bulk loader: a "
        "post's fresh item and texts, the deriver's merge (segment items written, the fresh items deleted in the "
        "manifest's transaction) and compaction (segments written and the merged ones deleted); previous: its "
        "vector item and its entry in the ByMessageTerms vector index, and its statistics item's update per unit, "
        "metered by bench/cost.py's Capacity in its own run",
        [
            "design",
            "messages",
            "fresh (post)",
            "fresh deleted (merge)",
            "texts",
            "segments written",
            "segments deleted",
            "manifest",
            "vector item+index",
            "term stats",
            "total",
        ],
        writes,
    )
    print(
        "  Segments at each size: "
        + ", ".join(f"{size:,} messages: {result['segments']}" for size, result in precis.items()),
        flush=True,
    )

    print(
        f"\n  Loading: the first session through botocore and moto took {check['botocore_s']:.1f} s for "
        f"{check['messages']} messages ({check['botocore_s'] / check['messages'] * 1000:.0f} ms a message: "
        f"{check['botocore_s'] / check['messages'] * large / 60:.0f} min for {large:,}), so the corpus is indexed by "
        f"the same Precis calls with DictTable as the client ({check['direct_s']:.2f} s for that session): the two "
        f"tables differ in {check['differing_items']} of {check['items']} items, write units {check['wru_direct']} "
        f"vs {check['wru_botocore']} (botocore, Capacity; besides, the messages' ByStartTokens entries: "
        f"{check['wru_indexes']}). Precis: "
        f"{large:,} messages indexed in {precis[large]['load_s']:.0f} s, put in moto in "
        f"{precis[large]['materialize_s']:.0f} s.",
        flush=True,
    )
    checked = [r for r in precis[small]["rows"] if r["rru_capacity"] is not None]
    print(
        f"  Read units: ReadMeter's (at {large:,}) equal bench/cost.py Capacity's on "
        f"{sum(r['rru'] == r['rru_capacity'] for r in checked)} of the {len(checked)} searches at {small:,}.",
        flush=True,
    )

    verdict = _verdicts(precis, old, small, large, writes)
    print_table("Targets (exact BM25 at workspace scale)", ["measure", "target", "measured", "verdict"], verdict)
    wrong = [
        {"size": size, "scope": r["scope"], "query": asked[r["query"]].text, "expected": r["expected"], "got": r["got"]}
        for size, result in precis.items()
        for r in result["rows"]
        if not r["identical"]
    ]
    if wrong:
        print(f"\n  Precis disagrees with the reference on {len(wrong)} searches; the first: {wrong[:3]}", flush=True)
    print(f"  (retrieval_scale: {time.perf_counter() - started:.0f} s)", flush=True)
    return {
        "corpus": {
            "messages": large,
            "sessions": len(data.messages) // PER_SESSION,
            "vocabulary": len(data.words),
            "planted": len(data.planted),
            "unit": UNIT,
        },
        "queries": [q.__dict__ for q in asked],
        "check": check,
        "agreement": agreement,
        "cost": growth,
        "writes": writes,
        "verdict": verdict,
        "disagreements": wrong[:50],
        "precis": {
            size: {k: v for k, v in r.items() if k != "rows"} | {"rows": _lean(r["rows"])} for size, r in precis.items()
        },
        "previous": {
            size: {k: v for k, v in r.items() if k != "rows"} | {"rows": _lean(r["rows"])} for size, r in old.items()
        }
        if old
        else previous,
    }


def _lean(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k not in ("expected",)} for r in rows]


def _verdicts(precis: dict[int, dict], old: dict[int, dict], small: int, large: int, writes: list[tuple]) -> list:
    rows = precis[large]["rows"]
    out = []
    for scope in SCOPES:
        chosen = [r for r in rows if r["scope"] == scope]
        overlap = sum(r["overlap"] for r in chosen) / len(chosen)
        out.append(
            (f"agreement@{K}, {scope}, {large:,} messages", ">= 0.99", overlap, "met" if overlap >= 0.99 else "NOT met")
        )
    for scope in SCOPES:
        planted = [r for r in rows if r["scope"] == scope and r["kind"] == "planted"]
        first = sum(r["first"] for r in planted)
        out.append(
            (
                f"planted words first, {scope}",
                f"{len(planted)}/{len(planted)}",
                f"{first}/{len(planted)}",
                "met" if first == len(planted) else "NOT met",
            )
        )
    for kind, title in KINDS[:3]:  # (d)'s corners are in the tables
        for measure in ("requests", "bytes"):
            ratios = []
            for scope in SCOPES:
                a = {r["query"]: r[measure] for r in precis[small]["rows"] if r["scope"] == scope and r["kind"] == kind}
                b = {r["query"]: r[measure] for r in precis[large]["rows"] if r["scope"] == scope and r["kind"] == kind}
                ratios += [b[q] / a[q] for q in a if a[q]]
            worst = max(ratios)
            out.append(
                (
                    f"{measure} per search {large // 1000}k / {small // 1000}k, {title}, all scopes",
                    "<= 2x",
                    f"median {_median(ratios):.2f}x, max {worst:.2f}x, {sum(x <= 2 for x in ratios)}/"
                    f"{len(ratios)} within",
                    "met" if worst <= 2 else "NOT met",
                )
            )
    for size, result in precis.items():
        out_of_budget = sum(r["exhausted"] for r in result["rows"])
        out.append(
            (
                f"searches whose read budget ran out, {size:,} messages",
                "0",
                f"{out_of_budget}/{len(result['rows'])}",
                "met" if out_of_budget == 0 else "NOT met",
            )
        )
    now = [w for w in writes if w[0] == "Precis (now)"]
    before = [w for w in writes if w[0] != "Precis (now)"]
    if now and before:
        ratio = now[-1][-1] / before[-1][-1]
        out.append(
            (
                "index write units per message, now / previous",
                "<= 1.5x",
                f"{now[-1][-1]:.1f} / {before[-1][-1]:.1f} = {ratio:.1f}x",
                "met" if ratio <= 1.5 else "NOT met",
            )
        )
    return out


def run() -> dict[str, Any]:
    from bench.common import write_json

    started = time.perf_counter()
    data = corpus(int(os.environ.get("PRECIS_BENCH_SCALE_SESSIONS", SESSIONS)))
    asked = queries(data)
    small, large = SMALL_SESSIONS * PER_SESSION, len(data.messages)
    print(
        f"\n  workspace-scale lexical search: {large:,} messages in {large // PER_SESSION:,} sessions, "
        f"{len(data.words):,} synthetic words (Zipf), {len(data.planted)} planted words; {len(asked)} queries",
        flush=True,
    )
    try:
        previous = Previous(data, asked, (small, min(PREVIOUS_MESSAGES, large)))  # runs beside this one
    except (OSError, subprocess.CalledProcessError) as error:  # (a clone without that commit, say)
        print(f"  the previous design is left out: its worktree could not be made ({error})", flush=True)
        previous = None
    try:
        references = References(data, asked)
        check = check_direct(data)
        precis = measure_precis(data, asked, (small, large))
    except BaseException:
        if previous is not None:
            previous.finish(kill=True)
        raise
    old = previous.finish() if previous is not None else {"failed": "no worktree"}
    out = report(data, asked, check, precis, old, references, started)
    write_json("retrieval_scale", out)
    return out
