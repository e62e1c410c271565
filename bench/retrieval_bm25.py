"""The retrieval benchmark's reference ranking: textbook Okapi BM25 (k1 1.2, b 0.75) over Porter-stemmed words with
English stopwords removed, one conversation's turns as the corpus. Written here, independent of Precis's code."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence

K1, B = 1.2, 0.75
STOPWORDS = frozenset(
    """
a about above after again against all am an and any are aren't as at be because been before being below between both
but by can can't cannot could couldn't did didn't do does doesn't doing don't down during each few for from further
had hadn't has hasn't have haven't having he he'd he'll he's her here here's hers herself him himself his how how's
i i'd i'll i'm i've if in into is isn't it it's its itself let's me more most mustn't my myself no nor not of off on
once only or other ought our ours ourselves out over own same shan't she she'd she'll she's should shouldn't so some
such than that that's the their theirs them themselves then there there's these they they'd they'll they're they've
this those through to too under until up very was wasn't we we'd we'll we're we've were weren't what what's when
when's where where's which while who who's whom why why's with won't would wouldn't you you'd you'll you're you've
your yours yourself yourselves s t just now also will get got
""".split()
)
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


# ---------------------------------------------------------------- Porter (1980)

_VOWELS = frozenset("aeiou")


def _cons(word: str, i: int) -> bool:
    c = word[i]
    if c in _VOWELS:
        return False
    if c == "y":
        return i == 0 or not _cons(word, i - 1)
    return True


def _measure(stem: str) -> int:
    """m in [C](VC)^m[V]."""
    m, i, n = 0, 0, len(stem)
    while i < n and _cons(stem, i):
        i += 1
    while i < n:
        while i < n and not _cons(stem, i):
            i += 1
        if i >= n:
            break
        while i < n and _cons(stem, i):
            i += 1
        m += 1
    return m


def _has_vowel(stem: str) -> bool:
    return any(not _cons(stem, i) for i in range(len(stem)))


def _double_cons(word: str) -> bool:
    return len(word) >= 2 and word[-1] == word[-2] and _cons(word, len(word) - 1)


def _cvc(word: str) -> bool:
    n = len(word)
    return n >= 3 and _cons(word, n - 3) and not _cons(word, n - 2) and _cons(word, n - 1) and word[-1] not in "wxy"


def _replace(word: str, rules: Sequence[tuple[str, str]], min_m: int) -> str:
    for suffix, repl in rules:
        if word.endswith(suffix):
            stem = word[: len(word) - len(suffix)]
            return stem + repl if _measure(stem) > min_m else word
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


def stem(word: str) -> str:
    """The Porter stem of a lower-case word."""
    if len(word) <= 2:
        return word
    # step 1a
    if word.endswith("sses") or word.endswith("ies"):
        word = word[:-2]
    elif word.endswith("ss"):
        pass
    elif word.endswith("s"):
        word = word[:-1]
    # step 1b
    extra = False
    if word.endswith("eed"):
        if _measure(word[:-3]) > 0:
            word = word[:-1]
    elif word.endswith("ed") and _has_vowel(word[:-2]):
        word, extra = word[:-2], True
    elif word.endswith("ing") and _has_vowel(word[:-3]):
        word, extra = word[:-3], True
    if extra:
        if word.endswith(("at", "bl", "iz")):
            word += "e"
        elif _double_cons(word) and word[-1] not in "lsz":
            word = word[:-1]
        elif _measure(word) == 1 and _cvc(word):
            word += "e"
    # step 1c
    if word.endswith("y") and _has_vowel(word[:-1]):
        word = word[:-1] + "i"
    # steps 2 and 3
    word = _replace(word, _STEP2, 0)
    word = _replace(word, _STEP3, 0)
    # step 4
    for suffix in sorted(_STEP4, key=len, reverse=True):
        if word.endswith(suffix):
            stem_ = word[: len(word) - len(suffix)]
            if _measure(stem_) > 1 and (suffix != "ion" or stem_.endswith(("s", "t"))):
                word = stem_
            break
    # step 5
    if word.endswith("e"):
        stem_ = word[:-1]
        m = _measure(stem_)
        if m > 1 or (m == 1 and not _cvc(stem_)):
            word = stem_
    if _measure(word) > 1 and _double_cons(word) and word.endswith("l"):
        word = word[:-1]
    return word


def words(text: str) -> list[str]:
    """Lower-cased, stopwords removed, Porter-stemmed words of `text`, in order."""
    out = []
    for token in _WORD.findall(text.lower().replace("\u2019", "'")):
        if token in STOPWORDS:
            continue
        token = token.split("'")[0]  # "peter's" -> "peter"
        if token and token not in STOPWORDS:
            out.append(stem(token))
    return out


class BM25:
    """Okapi BM25 over `docs` [(id, text)]: idf = ln(1 + (N - n + 0.5) / (n + 0.5))."""

    def __init__(self, docs: Iterable[tuple[str, str]], k1: float = K1, b: float = B):
        self.ids, self.tf, self.length = [], [], []
        df: Counter[str] = Counter()
        for doc_id, text in docs:
            terms = Counter(words(text))
            self.ids.append(doc_id)
            self.tf.append(terms)
            self.length.append(sum(terms.values()))
            df.update(terms.keys())
        n = len(self.ids)
        self.avgdl = (sum(self.length) / n) if n else 0.0
        self.idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}
        self.k1, self.b = k1, b

    def scores(self, query: str) -> list[float]:
        terms = set(words(query))
        out = []
        for tf, dl in zip(self.tf, self.length):
            norm = self.k1 * (1 - self.b + self.b * dl / self.avgdl) if self.avgdl else self.k1
            out.append(sum(self.idf[t] * tf[t] * (self.k1 + 1) / (tf[t] + norm) for t in terms if t in tf))
        return out

    def rank(self, query: str, k: int | None = None) -> list[str]:
        """Ids of the documents that share a term with `query`, best first (ties: corpus order)."""
        scored = [(s, -i) for i, s in enumerate(self.scores(query)) if s > 0]
        scored.sort(reverse=True)
        return [self.ids[-i] for _, i in scored[:k]]
