"""Lexical ranking: Okapi BM25 over stemmed words, exactly.

BM25's score of a text d for a query q is a sum over the query's terms t of idf(t) x sat(t, d), where sat is the
term's saturated, length-normalised count in d and idf comes from how many of the corpus's texts say t. A corpus is a
search's scope (a workspace's messages, one peer's, one session's, a collection's conclusions): its statistics
(`Stats`) are exact counts, so the score is the textbook's over exactly those texts.

`rank_texts` ranks a small corpus whole (a session's texts, a collection's conclusions; the workspace's index,
`store/text_index/`, scores what its postings name the same way). Ties go to the smaller key. `fuse` blends a BM25
ranking with a semantic one by weighted reciprocal rank (BM25's share `LEXICAL_WEIGHT`). Everything here is pure: no
I/O.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

# Lucene's (Anserini's) defaults: chat messages are short, so length normalisation weighs less than in the textbook's
# 1.2 / 0.75 (on `make bench retrieval`: recall@10 0.48 with those, 0.49 with these).
K1, B = 0.9, 0.4
SPEAKER_WEIGHT = 2  # how many times a message's speaker counts among its terms (BM25F's field weight)
AVERAGE_LENGTH = 12.0  # terms of a chat message, until a corpus has its own average
MAX_WORD = 64  # characters of a word that count: a longer one is cut (a 1,000-letter "word" is one term, not a hazard)
MAX_TERMS = 1024  # distinct terms indexed per text, its most frequent: bounds a text's index entries at any size
_WORD = re.compile(r"[^\W_]+")
STOPWORDS = frozenset(
    "a about after again all also am an and any are as at be because been before being both but by can could did do "
    "does doing done down during each few for from further had has have having he her here hers herself him himself "
    "his how i if in into is it its itself just me more most my myself no nor not now of off on once only or other "
    "our ours ourselves out over own same she should so some such than that the their theirs them themselves then "
    "there these they this those through to too under until up us very was we were what when where which while who "
    "whom why will with would you your yours yourself yourselves s t d ll m re ve don didn doesn isn wasn".split()
)


# Porter's stemmer (M.F. Porter, 1980), the one textbook BM25 is measured with: "adoption" and "adopted" -> "adopt".
# Iterative throughout: a word's consonant/vowel pattern is read once, left to right ("y" is a consonant after a
# vowel), so no word, however long or repetitive, recurses.
_VOWELS = frozenset("aeiou")


def _forms(word: str) -> str:
    """'c' or 'v' for each letter of `word`."""
    out = []
    for i, letter in enumerate(word):
        if letter in _VOWELS:
            out.append("v")
        elif letter == "y":
            out.append("v" if i and out[-1] == "c" else "c")
        else:
            out.append("c")
    return "".join(out)


_VC = re.compile(r"v+c+")


def _measure(stem: str) -> int:
    """m in [C](VC)^m[V]: how many vowel-consonant sequences the stem has."""
    return len(_VC.findall(_forms(stem)))


def _has_vowel(stem: str) -> bool:
    return "v" in _forms(stem)


def _double_consonant(word: str) -> bool:
    return len(word) > 1 and word[-1] == word[-2] and _forms(word)[-1] == "c"


def _cvc(word: str) -> bool:
    return len(word) >= 3 and _forms(word).endswith("cvc") and word[-1] not in "wxy"


def _replace(word: str, rules: tuple[tuple[str, str], ...], minimum: int) -> str:
    for suffix, replacement in rules:
        if word.endswith(suffix):
            stem = word[: len(word) - len(suffix)]
            return stem + replacement if _measure(stem) > minimum else word
    return word


_STEP2 = (
    ("ational", "ate"),
    ("tional", "tion"),
    ("enci", "ence"),
    ("anci", "ance"),
    ("izer", "ize"),
    ("bli", "ble"),
    ("alli", "al"),
    ("entli", "ent"),
    ("eli", "e"),
    ("ousli", "ous"),
    ("ization", "ize"),
    ("ation", "ate"),
    ("ator", "ate"),
    ("alism", "al"),
    ("iveness", "ive"),
    ("fulness", "ful"),
    ("ousness", "ous"),
    ("aliti", "al"),
    ("iviti", "ive"),
    ("biliti", "ble"),
    ("logi", "log"),
)
_STEP3 = (("icate", "ic"), ("ative", ""), ("alize", "al"), ("iciti", "ic"), ("ical", "ic"), ("ful", ""), ("ness", ""))
_STEP4 = (
    "al",
    "ance",
    "ence",
    "er",
    "ic",
    "able",
    "ible",
    "ant",
    "ement",
    "ment",
    "ent",
    "ion",
    "ou",
    "ism",
    "ate",
    "iti",
    "ous",
    "ive",
    "ize",
)


@lru_cache(maxsize=131_072)
def stem(word: str) -> str:
    """Porter's stem of a lower-case word."""
    if len(word) <= 2:
        return word
    # Step 1a
    if word.endswith("sses") or word.endswith("ies"):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith("ss"):
        word = word[:-1]
    # Step 1b
    if word.endswith("eed"):
        if _measure(word[:-3]) > 0:
            word = word[:-1]
    else:
        for suffix in ("ed", "ing"):
            if word.endswith(suffix) and _has_vowel(word[: -len(suffix)]):
                word = word[: -len(suffix)]
                if word.endswith(("at", "bl", "iz")):
                    word += "e"
                elif _double_consonant(word) and word[-1] not in "lsz":
                    word = word[:-1]
                elif _measure(word) == 1 and _cvc(word):
                    word += "e"
                break
    # Step 1c
    if word.endswith("y") and _has_vowel(word[:-1]):
        word = word[:-1] + "i"
    word = _replace(word, _STEP2, 0)
    word = _replace(word, _STEP3, 0)
    # Step 4
    for suffix in _STEP4:
        if word.endswith(suffix):
            stem_ = word[: len(word) - len(suffix)]
            if suffix == "ion" and not stem_.endswith(("s", "t")):
                break
            if _measure(stem_) > 1:
                word = stem_
            break
    # Step 5
    if word.endswith("e"):
        stem_ = word[:-1]
        if _measure(stem_) > 1 or (_measure(stem_) == 1 and not _cvc(stem_)):
            word = stem_
    if _measure(word) > 1 and _double_consonant(word) and word.endswith("l"):
        word = word[:-1]
    return word


def terms(text: str) -> list[str]:
    """The stemmed content words of `text`, in order (its stopwords too when it has nothing else); a word is cut to
    its first MAX_WORD characters."""
    words = [w[:MAX_WORD] for w in _WORD.findall(text.casefold())]
    content = [w for w in words if w not in STOPWORDS] or words
    return [stem(w) for w in content]


@dataclass(frozen=True)
class Document:
    """What the index keeps of a text: its terms' counts (its MAX_TERMS most frequent) and its length in terms."""

    counts: dict[str, int]
    length: int

    @classmethod
    def of(cls, text: str, speaker: str | None = None) -> Document:
        """A text's terms, and with `speaker` (a message's peer) the speaker's name as a field of its own: a
        question about alice finds what alice said, which rarely names her."""
        found = terms(text) + (terms(speaker) * SPEAKER_WEIGHT if speaker else [])
        counts = Counter(found)
        if len(counts) > MAX_TERMS:  # most frequent first; ties in order of first use (Counter keeps it)
            counts = Counter(dict(counts.most_common(MAX_TERMS)))
        return cls(dict(counts), len(found))

    def signature(self) -> str:
        """The counts as text: `term[:count]`, space-separated, in term order (terms hold no space or colon)."""
        return " ".join(t if n == 1 else f"{t}:{n}" for t, n in sorted(self.counts.items()))

    @classmethod
    def parse(cls, signature: str, length: int) -> Document:
        counts = {}
        for part in signature.split():
            term, _, n = part.partition(":")
            counts[term] = int(n or 1)
        return cls(counts, length)


def saturation(count: int, length: int, average_length: float) -> float:
    """BM25's term-frequency factor: grows with `count`, saturates (k1), shrinks for long texts (b)."""
    return count * (K1 + 1) / (count + K1 * (1 - B + B * length / max(average_length, 1.0)))


def idf(df: int, documents: int) -> float:
    """BM25's inverse document frequency (Lucene's, never negative)."""
    n = max(documents, 1)
    df = min(max(df, 0), n)
    return math.log(1 + (n - df + 0.5) / (df + 0.5))


@dataclass(frozen=True)
class Stats:
    """A corpus's exact statistics: how many texts, their total length, and how many say each term."""

    documents: int = 0
    total_length: int = 0
    df: Mapping[str, int] = field(default_factory=dict)

    @property
    def average_length(self) -> float:
        return self.total_length / self.documents if self.documents else AVERAGE_LENGTH

    @classmethod
    def of(cls, documents: Iterable[Document]) -> Stats:
        documents = list(documents)
        return cls(
            len(documents), sum(d.length for d in documents), dict(Counter(t for d in documents for t in d.counts))
        )


@dataclass(frozen=True)
class Query:
    """A query's distinct terms with their weight (idf x how often the query says them)."""

    weights: dict[str, float]

    @classmethod
    def of(cls, text: str, stats: Stats) -> Query:
        counts = Counter(terms(text))
        return cls({t: idf(stats.df.get(t, 0), stats.documents) * n for t, n in counts.items()})

    def score(self, document: Document, average_length: float) -> float:
        """The exact BM25 score of `document` (terms summed in query order)."""
        return sum(
            weight * saturation(document.counts[t], document.length, average_length)
            for t, weight in self.weights.items()
            if t in document.counts
        )

    def __bool__(self) -> bool:
        return bool(self.weights)


def rank_all(query: Query, documents: Mapping[Key, Document], average_length: float, k: int) -> list[tuple[Key, float]]:
    """The k best of `documents` by exact score (ties to the smaller key); only those that share a term."""
    scored = [(key, query.score(d, average_length)) for key, d in documents.items()]
    return sorted(((key, s) for key, s in scored if s > 0), key=lambda hit: (-hit[1], hit[0]))[:k]


Key = tuple[str, int]  # a text's key, and its order among equal scores: (session id, seq) or (collection, id)


# --- fusing with a semantic ranking ----------------------------------------------------------------------------------

RRF_K = 60
# BM25's share of a fused ranking (messages' and conclusions'), beside a semantic embedder's: chosen on
# `make bench retrieval`.
LEXICAL_WEIGHT = 0.9


def fuse[K](lexical: Sequence[K], semantic: Sequence[K] | None, weight: float = LEXICAL_WEIGHT) -> list[K]:
    """One ranking from a lexical and a semantic one (best first): weighted reciprocal rank (k = 60), ties in key
    order; the lexical ranking alone when there is no semantic one."""
    if semantic is None:
        return list(lexical)
    fused: dict[K, float] = {}
    for share, ranking in ((weight, lexical), (1.0 - weight, semantic)):
        for rank, key in enumerate(ranking, start=1):
            fused[key] = fused.get(key, 0.0) + share / (RRF_K + rank)
    return sorted(fused, key=lambda k: (-fused[k], k))


# ---------------------------------------------------------------- a query, and a small corpus ranked whole

MAX_QUERY_TERMS = 99  # distinct words of a query that count


def query_terms(text: str) -> Counter[str]:
    """A query's distinct terms and how often it says each (its first MAX_QUERY_TERMS)."""
    counts = Counter(terms(text))
    return Counter(dict(list(counts.items())[:MAX_QUERY_TERMS]))


def rank_texts(documents: Mapping[Key, Document], text: str, k: int) -> list[tuple[Key, float]]:
    """The k best of `documents` for `text` by BM25 over exactly them (their own idf and average length)."""
    stats = Stats.of(documents.values())
    query = Query({t: idf(stats.df.get(t, 0), stats.documents) * n for t, n in query_terms(text).items()})
    return rank_all(query, documents, stats.average_length, k) if query else []
