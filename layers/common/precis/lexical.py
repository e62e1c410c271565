"""Lexical ranking: Okapi BM25 over stemmed words, computed inside DynamoDB's vector index, then exactly.

BM25's score of a text d for a query q is a sum over the query's terms t of idf(t) x sat(t, d), where sat is the
term's saturated, length-normalised frequency in d. That is a dot product: a text's vector holds sat(t, d) in the slot
its term hashes to and the query's vector holds idf(t) in the same slots. A DOT_PRODUCT vector index then returns
candidates in (nearly) BM25 order; a slot shared by two terms can only raise a text, never lower it, so a stranger may
come in but no match is lost, and the search asks for several times the candidates it needs and ranks them again exactly
from each text's term signature (`signature`: every term's 32-bit hash and count, a few bytes a term), projected into
the index beside the vector. Document frequencies come from a corpus's `Stats` (`precis.store.term_stats`): counts per
hashed term, kept as texts are written, so idf needs no scan. Everything here is pure: no I/O.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from hashlib import blake2b

# Lucene's (Anserini's) defaults: chat messages are short, so length normalisation weighs less than in the textbook's
# 1.2 / 0.75 (on `make bench retrieval`: recall@10 0.48 with those, 0.49 with these).
K1, B = 0.9, 0.4
DIMENSIONS = 256  # slots of a text's vector: enough that the exact rescoring of 4 candidates a result loses nothing
DF_SLOTS = 1024  # document-frequency counters of a corpus (precis.store.term_stats): one small item
_DF_ROWS = 2  # a term's frequency is the least of its counters in two rows (a count-min sketch)
_DF_ROW = DF_SLOTS // _DF_ROWS
SPEAKER_WEIGHT = 2  # how many times a message's speaker counts among its terms (BM25F's field weight)
AVERAGE_LENGTH = 12.0  # terms of a chat message, until a corpus has its own average
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
_VOWELS = "aeiou"


def _consonant(word: str, i: int) -> bool:
    if word[i] in _VOWELS:
        return False
    if word[i] == "y":
        return i == 0 or not _consonant(word, i - 1)
    return True


def _measure(stem: str) -> int:
    """m in [C](VC)^m[V]: how many vowel-consonant sequences the stem has."""
    forms = "".join("c" if _consonant(stem, i) else "v" for i in range(len(stem)))
    return len(re.findall(r"v+c+", forms))


def _has_vowel(stem: str) -> bool:
    return any(not _consonant(stem, i) for i in range(len(stem)))


def _double_consonant(word: str) -> bool:
    return len(word) > 1 and word[-1] == word[-2] and _consonant(word, len(word) - 1)


def _cvc(word: str) -> bool:
    if len(word) < 3:
        return False
    return (_consonant(word, len(word) - 3) and not _consonant(word, len(word) - 2)
            and _consonant(word, len(word) - 1) and word[-1] not in "wxy")


def _replace(word: str, rules: tuple[tuple[str, str], ...], minimum: int) -> str:
    for suffix, replacement in rules:
        if word.endswith(suffix):
            stem = word[: len(word) - len(suffix)]
            return stem + replacement if _measure(stem) > minimum else word
    return word


_STEP2 = (("ational", "ate"), ("tional", "tion"), ("enci", "ence"), ("anci", "ance"), ("izer", "ize"),
          ("bli", "ble"), ("alli", "al"), ("entli", "ent"), ("eli", "e"), ("ousli", "ous"), ("ization", "ize"),
          ("ation", "ate"), ("ator", "ate"), ("alism", "al"), ("iveness", "ive"), ("fulness", "ful"),
          ("ousness", "ous"), ("aliti", "al"), ("iviti", "ive"), ("biliti", "ble"), ("logi", "log"))
_STEP3 = (("icate", "ic"), ("ative", ""), ("alize", "al"), ("iciti", "ic"), ("ical", "ic"), ("ful", ""),
          ("ness", ""))
_STEP4 = ("al", "ance", "ence", "er", "ic", "able", "ible", "ant", "ement", "ment", "ent", "ion", "ou", "ism",
          "ate", "iti", "ous", "ive", "ize")


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
    """The stemmed content words of `text`, in order (its stopwords too when it has nothing else)."""
    words = _WORD.findall(text.casefold())
    content = [w for w in words if w not in STOPWORDS] or words
    return [stem(w) for w in content]


@lru_cache(maxsize=131_072)
def term_hash(term: str) -> int:
    """A stable 32-bit hash of a term (blake2b; never Python's per-process hash())."""
    return int.from_bytes(blake2b(term.encode(), digest_size=4).digest(), "big")


def _slot(hashed: int) -> int:
    """Where a term lands in a text's vector. Unsigned: terms sharing a slot add up, never cancel, so a match is never
    pushed down (a stranger pulled up is dropped by the exact rescoring)."""
    return (hashed >> 1) % DIMENSIONS


def df_slots(hashed: int) -> tuple[int, ...]:
    """The document-frequency counters of a term, one per row (from other bits than its vector slot's)."""
    return tuple(row * _DF_ROW + (hashed >> (11 + 9 * row)) % _DF_ROW for row in range(_DF_ROWS))


@dataclass(frozen=True)
class Document:
    """What the index keeps of a text: each term's hash and count, and the text's length in terms."""

    counts: dict[int, int]
    length: int

    @classmethod
    def of(cls, text: str, speaker: str | None = None) -> Document:
        """A text's terms, and with `speaker` (a message's peer) the speaker's name as a field of its own: a
        question about alice finds what alice said, which rarely names her."""
        found = terms(text) + (terms(speaker) * SPEAKER_WEIGHT if speaker else [])
        return cls(dict(Counter(term_hash(t) for t in found)), len(found))

    def signature(self) -> str:
        """The counts as text, compact: `hash[:count]` in hex, space-separated (about 9 bytes a term)."""
        return " ".join(f"{h:x}" if n == 1 else f"{h:x}:{n}" for h, n in sorted(self.counts.items()))

    @classmethod
    def parse(cls, signature: str, length: int) -> Document:
        counts = {}
        for part in signature.split():
            h, _, n = part.partition(":")
            counts[int(h, 16)] = int(n or 1)
        return cls(counts, length)

    def vector(self, average_length: float = AVERAGE_LENGTH) -> list[float]:
        """Each term's saturated frequency in its slot: the text's side of BM25's dot product."""
        vector = [0.0] * DIMENSIONS
        for hashed, count in self.counts.items():
            vector[_slot(hashed)] += saturation(count, self.length, average_length)
        return [round(x, 3) if x else x for x in vector]  # three digits rank as well and keep the item small

    def df_slots(self) -> set[int]:
        return {slot for h in self.counts for slot in df_slots(h)}


def saturation(count: int, length: int, average_length: float) -> float:
    """BM25's term-frequency factor: grows with `count`, saturates (k1), shrinks for long texts (b)."""
    return count * (K1 + 1) / (count + K1 * (1 - B + B * length / max(average_length, 1.0)))


@dataclass(frozen=True)
class Stats:
    """A corpus's document count, total length and per-slot document frequencies."""

    documents: int = 0
    total_length: int = 0
    df: dict[int, int] = field(default_factory=dict)

    @property
    def average_length(self) -> float:
        return self.total_length / self.documents if self.documents else AVERAGE_LENGTH

    def idf(self, hashed: int) -> float:
        """BM25's inverse document frequency (Lucene's, never negative); an unseen term is as rare as can be.

        A counter also holds the other terms of its slot: their expected share (the row's other counters' mean) is
        taken off, and the least of the term's counters is its frequency, so a rare word sharing a counter with a
        common one keeps most of its weight."""
        n = max(self.documents, 1)
        estimates = []
        for slot in df_slots(hashed):
            counted = self.df.get(slot, 0)
            others = (self._row_mass[slot // _DF_ROW] - counted) / (_DF_ROW - 1)
            estimates.append(max(counted - others, 0.0))
        df = min(min(estimates), n)
        return math.log(1 + (n - df + 0.5) / (df + 0.5))

    @cached_property
    def _row_mass(self) -> list[int]:
        mass = [0] * _DF_ROWS
        for slot, count in self.df.items():
            mass[slot // _DF_ROW] += count
        return mass


@dataclass(frozen=True)
class Query:
    """A query's distinct terms with their weight (idf x how often the query says them)."""

    weights: dict[int, float]

    @classmethod
    def of(cls, text: str, stats: Stats) -> Query:
        counts = Counter(term_hash(t) for t in terms(text))
        return cls({h: stats.idf(h) * n for h, n in counts.items()})

    def vector(self) -> list[float]:
        """The query's side of the dot product (all zeros for a query with no words)."""
        vector = [0.0] * DIMENSIONS
        for hashed, weight in self.weights.items():
            vector[_slot(hashed)] += weight
        return vector

    def score(self, document: Document, average_length: float) -> float:
        """The exact BM25 score of `document`."""
        return sum(weight * saturation(document.counts[h], document.length, average_length)
                   for h, weight in self.weights.items() if h in document.counts)

    def __bool__(self) -> bool:
        return bool(self.weights)
