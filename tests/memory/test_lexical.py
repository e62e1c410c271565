"""BM25 as Precis computes it (precis.lexical): Porter's stems, any text taken apart without error, the exact score
against a textbook formula with a corpus's exact idf, and the top k from impact-ordered postings against a brute-force
ranking of every text."""

from __future__ import annotations

import math
import string
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from precis.lexical import (
    K1,
    MAX_TERMS,
    MAX_WORD,
    B,
    Document,
    Query,
    Stats,
    stem,
    terms,
)

# From Porter's own sample vocabulary (tartarus.org/martin/PorterStemmer/voc.txt and output.txt).
PORTER = {
    "caresses": "caress",
    "ponies": "poni",
    "ties": "ti",
    "caress": "caress",
    "cats": "cat",
    "feed": "feed",
    "agreed": "agre",
    "plastered": "plaster",
    "bled": "bled",
    "motoring": "motor",
    "sing": "sing",
    "conflated": "conflat",
    "troubled": "troubl",
    "sized": "size",
    "hopping": "hop",
    "tanned": "tan",
    "falling": "fall",
    "hissing": "hiss",
    "fizzed": "fizz",
    "failing": "fail",
    "filing": "file",
    "happy": "happi",
    "sky": "sky",
    "relational": "relat",
    "conditional": "condit",
    "rational": "ration",
    "valenci": "valenc",
    "digitizer": "digit",
    "conformabli": "conform",
    "radicalli": "radic",
    "differentli": "differ",
    "vileli": "vile",
    "analogousli": "analog",
    "vietnamization": "vietnam",
    "predication": "predic",
    "operator": "oper",
    "feudalism": "feudal",
    "decisiveness": "decis",
    "hopefulness": "hope",
    "callousness": "callous",
    "formaliti": "formal",
    "sensitiviti": "sensit",
    "sensibiliti": "sensibl",
    "triplicate": "triplic",
    "formative": "form",
    "formalize": "formal",
    "electriciti": "electr",
    "electrical": "electr",
    "hopeful": "hope",
    "goodness": "good",
    "revival": "reviv",
    "allowance": "allow",
    "inference": "infer",
    "airliner": "airlin",
    "gyroscopic": "gyroscop",
    "adjustable": "adjust",
    "defensible": "defens",
    "irritant": "irrit",
    "replacement": "replac",
    "adjustment": "adjust",
    "dependent": "depend",
    "adoption": "adopt",
    "homologou": "homolog",
    "communism": "commun",
    "activate": "activ",
    "angulariti": "angular",
    "homologous": "homolog",
    "effective": "effect",
    "bowdlerize": "bowdler",
    "probate": "probat",
    "rate": "rate",
    "cease": "ceas",
    "controll": "control",
    "roll": "roll",
    "generalizations": "gener",
    "oscillators": "oscil",
}


def test_stems_are_porters():
    assert {word: stem(word) for word in PORTER} == PORTER


def test_terms_drop_stopwords_and_keep_them_only_when_nothing_else_is_said():
    assert terms("What food does Alice like? Alice's favourite food is ramen.") == [
        "food",
        "alic",
        "like",
        "alic",
        "favourit",
        "food",
        "ramen",
    ]
    assert terms("who is he?") == ["who", "is", "he"]
    assert terms("?!") == []


HOSTILE = st.one_of(
    st.text(),  # any Unicode, control characters and all
    st.builds(lambda c, n: c * n, st.sampled_from("yaeiouszlYx\u00e9\u0131\u4e2d"), st.integers(1, 5000)),
    st.lists(st.text(string.ascii_letters + "y ", max_size=300), max_size=5).map(" ".join),
    st.builds(lambda w, n: " ".join(w for _ in range(n)), st.text(min_size=1, max_size=80), st.integers(1, 300)),
)


@given(text=HOSTILE, speaker=st.one_of(st.none(), st.from_regex(r"[A-Za-z0-9_-]{1,100}", fullmatch=True)))
@settings(max_examples=300, deadline=None)
def test_any_text_is_taken_apart_into_bounded_terms_without_error(text, speaker):
    document = Document.of(text, speaker)
    assert len(document.counts) <= MAX_TERMS
    assert all(0 < len(t) <= MAX_WORD and " " not in t and ":" not in t for t in document.counts)
    assert document.length >= sum(document.counts.values())
    assert Document.parse(document.signature(), document.length) == document
    stats = Stats.of([document])
    assert math.isfinite(Query.of(text, stats).score(document, stats.average_length))


def test_a_thousand_letter_word_is_one_term_of_at_most_max_word_letters():
    document = Document.of("y" * 1000 + " and " + "a" * 100_000)
    assert len(document.counts) == 2 and all(len(t) <= MAX_WORD for t in document.counts)


def test_a_text_of_many_distinct_words_keeps_its_most_frequent():
    words = [f"w{i}x" for i in range(MAX_TERMS + 50)]
    document = Document.of(" ".join(words + ["often"] * 3))
    assert len(document.counts) == MAX_TERMS and document.counts[stem("often")] == 3
    assert document.length == MAX_TERMS + 53


def textbook_bm25(query: str, text: str, corpus: list[str]) -> float:
    """Okapi BM25 as a textbook writes it (Lucene's idf), over the same terms, from the raw texts."""
    bags = [Counter(terms(t)) for t in corpus]
    average = sum(sum(b.values()) for b in bags) / len(bags)
    counts, length = Counter(terms(text)), len(terms(text))
    total = 0.0
    for term, asked in Counter(terms(query)).items():
        df = sum(1 for b in bags if term in b)
        weight = math.log(1 + (len(bags) - df + 0.5) / (df + 0.5))
        if term in counts:
            total += asked * weight * counts[term] * (K1 + 1) / (counts[term] + K1 * (1 - B + B * length / average))
    return total


WORDS = st.sampled_from(
    "alice bob ramen food adoption moved lisbon dog rover guitar concert paris piano hiking "
    "daughter agency painting camping festival".split()
)
TEXTS = st.lists(WORDS, min_size=1, max_size=12).map(" ".join)


@given(corpus=st.lists(TEXTS, min_size=1, max_size=20), query=TEXTS)
@settings(max_examples=200, deadline=None)
def test_the_exact_score_is_textbook_bm25_with_the_corpus_idf(corpus, query):
    documents = [Document.of(t) for t in corpus]
    stats = Stats.of(documents)
    weights = Query.of(query, stats)
    for text, document in zip(corpus, documents):
        assert math.isclose(
            weights.score(document, stats.average_length),
            textbook_bm25(query, text, corpus),
            rel_tol=1e-9,
            abs_tol=1e-9,
        )


def test_a_word_every_text_says_weighs_less_than_the_one_asked_about():
    corpus = [
        "alice likes hiking",
        "alice has a dog",
        "alice's favourite food is ramen",
        "alice moved to lisbon",
        "alice plays the guitar",
        "alice went to paris",
    ]
    stats = Stats.of(Document.of(t) for t in corpus)
    query = Query.of("what food does alice like", stats)
    score = {t: query.score(Document.of(t), stats.average_length) for t in corpus}
    only_alice = [t for t in corpus if "like" not in t and "food" not in t]
    assert len(only_alice) == 4 and all(0 < score[t] < score["alice's favourite food is ramen"] / 3 for t in only_alice)


def test_a_message_counts_its_speaker_among_its_terms():
    said = Document.of("I moved to Lisbon", speaker="alice")
    assert said.counts["alic"] == 2 and said.length == 4
    stats = Stats.of([said, Document.of("the weather is nice", speaker="bob")])
    assert Query.of("where does alice live", stats).score(said, stats.average_length) > 0
