"""BM25 as Precis computes it (precis.lexical): Porter's stems, the exact score against a textbook formula, the
vector dot product the index ranks by, and idf from hashed counters."""

from __future__ import annotations

import math
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from precis.lexical import (
    AVERAGE_LENGTH, B, DF_SLOTS, DIMENSIONS, K1, Document, Query, Stats, df_slots, stem, term_hash, terms,
)

# From Porter's own sample vocabulary (tartarus.org/martin/PorterStemmer/voc.txt and output.txt).
PORTER = {"caresses": "caress", "ponies": "poni", "ties": "ti", "caress": "caress", "cats": "cat", "feed": "feed",
          "agreed": "agre", "plastered": "plaster", "bled": "bled", "motoring": "motor", "sing": "sing",
          "conflated": "conflat", "troubled": "troubl", "sized": "size", "hopping": "hop", "tanned": "tan",
          "falling": "fall", "hissing": "hiss", "fizzed": "fizz", "failing": "fail", "filing": "file", "happy": "happi",
          "sky": "sky", "relational": "relat", "conditional": "condit", "rational": "ration", "valenci": "valenc",
          "digitizer": "digit", "conformabli": "conform", "radicalli": "radic", "differentli": "differ",
          "vileli": "vile", "analogousli": "analog", "vietnamization": "vietnam", "predication": "predic",
          "operator": "oper", "feudalism": "feudal", "decisiveness": "decis", "hopefulness": "hope",
          "callousness": "callous", "formaliti": "formal", "sensitiviti": "sensit", "sensibiliti": "sensibl",
          "triplicate": "triplic", "formative": "form", "formalize": "formal", "electriciti": "electr",
          "electrical": "electr", "hopeful": "hope", "goodness": "good", "revival": "reviv", "allowance": "allow",
          "inference": "infer", "airliner": "airlin", "gyroscopic": "gyroscop", "adjustable": "adjust",
          "defensible": "defens", "irritant": "irrit", "replacement": "replac", "adjustment": "adjust",
          "dependent": "depend", "adoption": "adopt", "homologou": "homolog", "communism": "commun",
          "activate": "activ", "angulariti": "angular", "homologous": "homolog", "effective": "effect",
          "bowdlerize": "bowdler", "probate": "probat", "rate": "rate", "cease": "ceas", "controll": "control",
          "roll": "roll", "generalizations": "gener", "oscillators": "oscil"}


def test_stems_are_porters():
    assert {word: stem(word) for word in PORTER} == PORTER


def test_terms_drop_stopwords_and_keep_them_only_when_nothing_else_is_said():
    assert terms("What food does Alice like? Alice's favourite food is ramen.") == [
        "food", "alic", "like", "alic", "favourit", "food", "ramen"]
    assert terms("who is he?") == ["who", "is", "he"]
    assert terms("?!") == []


def reference_bm25(query: str, text: str, idf: dict[str, float], average: float) -> float:
    """Okapi BM25 as a textbook writes it, over the same terms."""
    counts, length = Counter(terms(text)), len(terms(text))
    return sum(idf[t] * counts[t] * (K1 + 1) / (counts[t] + K1 * (1 - B + B * length / average))
               for t in set(terms(query)) if t in counts) * 1.0


WORDS = st.sampled_from("alice bob ramen food adoption moved lisbon dog rover guitar concert paris piano hiking "
                        "daughter agency painting camping festival".split())
TEXTS = st.lists(WORDS, min_size=1, max_size=12).map(" ".join)


@given(corpus=st.lists(TEXTS, min_size=1, max_size=20), query=TEXTS)
@settings(max_examples=200, deadline=None)
def test_the_exact_score_is_textbook_bm25_with_the_corpus_idf(corpus, query):
    documents = [Document.of(t) for t in corpus]
    stats = stats_of(documents)
    weights = Query.of(query, stats)
    idf = {t: stats.idf(term_hash(t)) for t in set(terms(query))}
    repeats = Counter(terms(query))  # a word the query says twice counts twice, as in BM25 with query frequencies
    for text, document in zip(corpus, documents):
        expected = sum(reference_bm25(t, text, idf, stats.average_length) * n for t, n in repeats.items())
        assert math.isclose(weights.score(document, stats.average_length), expected, rel_tol=1e-9, abs_tol=1e-9)


def stats_of(documents: list[Document]) -> Stats:
    df = Counter(slot for d in documents for slot in d.df_slots())
    return Stats(len(documents), sum(d.length for d in documents), dict(df))


def test_idf_is_lucenes_from_the_least_corrected_counter():
    documents = [Document.of("alice likes food"), Document.of("alice moved"), Document.of("alice ramen")]
    stats = stats_of(documents)
    n = 3
    lucene = lambda df: math.log(1 + (n - df + 0.5) / (df + 0.5))  # noqa: E731
    rows = [sum(c for s, c in stats.df.items() if s < DF_SLOTS // 2), sum(c for s, c in stats.df.items()
                                                                        if s >= DF_SLOTS // 2)]
    for term, df in (("alic", 3), ("food", 1), ("unseen", 0)):
        counters = df_slots(term_hash(term))
        assert len(counters) == 2 and all(stats.df.get(c, 0) >= df for c in counters)  # never fewer than true
        corrected = min(max(stats.df.get(c, 0) - (rows[c // (DF_SLOTS // 2)] - stats.df.get(c, 0))
                            / (DF_SLOTS // 2 - 1), 0) for c in counters)
        assert math.isclose(stats.idf(term_hash(term)), lucene(min(corrected, n)))
    assert stats.idf(term_hash("food")) > 3 * stats.idf(term_hash("alic"))


def test_a_rare_word_sharing_a_counter_with_a_common_one_keeps_its_weight():
    food, alice = df_slots(term_hash("food")), df_slots(term_hash("alic"))
    background = {s: 5 for s in range(DF_SLOTS)}
    crowded = Stats(1000, 12_000, {**background, food[0]: 1000})  # "food" shares its first counter with a common word
    assert crowded.idf(term_hash("food")) > 4
    common = Stats(1000, 12_000, {**background, alice[0]: 1000, alice[1]: 1000})
    assert common.idf(term_hash("alic")) < 0.1


def test_a_word_every_text_says_weighs_less_than_the_one_asked_about():
    corpus = ["alice likes hiking", "alice has a dog", "alice's favourite food is ramen", "alice moved to lisbon",
              "alice plays the guitar", "alice went to paris"]
    documents = [Document.of(t) for t in corpus]
    stats = stats_of(documents)
    query = Query.of("what food does alice like", stats)
    score = {t: query.score(Document.of(t), stats.average_length) for t in corpus}
    only_alice = [t for t in corpus if "like" not in t and "food" not in t]
    assert len(only_alice) == 4 and all(0 < score[t] < score["alice's favourite food is ramen"] / 3 for t in only_alice)
    assert max(score, key=score.get) in ("alice's favourite food is ramen", "alice likes hiking")


@given(text=TEXTS, query=TEXTS)
@settings(max_examples=200, deadline=None)
def test_the_vectors_dot_product_is_the_score_when_no_two_terms_share_a_slot(text, query):
    document = Document.of(text)
    weights = Query(Query.of(query, Stats()).weights)
    slots = [(h >> 1) % DIMENSIONS for h in set(document.counts) | set(weights.weights)]
    if len(slots) != len(set(slots)):
        return  # hashing put two terms together: the exact rescoring is there for this
    dot = sum(a * b for a, b in zip(weights.vector(), document.vector(AVERAGE_LENGTH)))
    assert math.isclose(dot, weights.score(document, AVERAGE_LENGTH), rel_tol=0.01, abs_tol=0.01)


@given(text=TEXTS)
def test_a_signature_gives_back_the_counts(text):
    document = Document.of(text)
    assert Document.parse(document.signature(), document.length) == document
    assert len(document.signature()) <= 12 * len(document.counts)


def test_a_message_counts_its_speaker_among_its_terms():
    said = Document.of("I moved to Lisbon", speaker="alice")
    assert said.counts[term_hash("alic")] == 2 and said.length == 4
    stats = stats_of([said, Document.of("the weather is nice", speaker="bob")])
    about_alice = Query.of("where does alice live", stats)
    assert about_alice.score(said, stats.average_length) > 0
