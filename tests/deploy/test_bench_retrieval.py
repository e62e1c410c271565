"""The retrieval benchmark's parts (bench/retrieval*.py): its data are deterministic and its questions point at turns
that answer them; its BM25 reference ranks as the textbook says."""

from __future__ import annotations

from collections import Counter

import pytest

from bench.retrieval import answer_words, context_text, evaluate, held, recall
from bench.retrieval_bm25 import BM25, stem, words
from bench.retrieval_data import KINDS, generate


@pytest.fixture(scope="module")
def data():
    return generate(3, seed=23)


def test_the_same_seed_gives_the_same_conversations(data):
    again = generate(3, seed=23)
    assert [c.turns for c in again] == [c.turns for c in data]
    assert [c.questions for c in again] == [c.questions for c in data]
    assert [c.turns for c in generate(3, seed=24)] != [c.turns for c in data]


def test_conversations_are_long_dated_and_between_two_peers(data):
    for conversation in data:
        assert 15 <= len(conversation.sessions) <= 30
        assert len(conversation.turns) >= 250
        assert {t.speaker for t in conversation.turns} == set(conversation.peers)
        stamps = [t.created_at for t in conversation.turns]
        assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)
        assert len({t.id for t in conversation.turns}) == len(conversation.turns)
        assert Counter(q.kind for q in conversation.questions).keys() == set(KINDS)


def test_every_question_points_at_turns_that_exist_and_answer_it(data):
    for conversation in data:
        turns = {t.id: t for t in conversation.turns}
        for question in conversation.questions:
            assert question.turns and all(t in turns for t in question.turns), question
            assert question.about in conversation.peers
            if question.kind == "multi":
                assert len(set(question.turns)) >= 2, question
                spoken = set().union(*(words(turns[t].text) for t in question.turns))
                assert set(words(question.answer)) <= spoken | set(words(question.text)), question
            if question.kind == "single":
                (turn,) = question.turns
                assert turns[turn].speaker == question.about, question
                assert set(words(question.answer)) <= set(words(turns[turn].text)), question


def test_facts_that_change_are_answered_by_the_newer_turn(data):
    checked = 0
    for conversation in data:
        turns = {t.id: t for t in conversation.turns}
        for question in conversation.questions:
            if question.kind == "multi" and "cities" in question.text:
                old, new = question.turns
                now = [
                    q
                    for q in conversation.questions
                    if q.kind == "single" and q.about == question.about and q.turns == (new,)
                ]
                assert now and turns[old].created_at < turns[new].created_at
                checked += 1
    assert checked >= 2


def test_porter_stems_as_the_paper_does():
    assert [
        stem(w)
        for w in (
            "caresses",
            "ponies",
            "relational",
            "adoption",
            "running",
            "agreed",
            "generalizations",
            "hopeful",
            "motoring",
        )
    ] == ["caress", "poni", "relat", "adopt", "run", "agre", "gener", "hope", "motor"]
    assert words("Caroline's dogs weren't running at the park") == ["carolin", "dog", "run", "park"]


def test_bm25_ranks_an_exact_match_first_and_weighs_rare_words():
    docs = [
        ("t1", "Caroline said the weather was nice"),
        ("t2", "Caroline adopted a beagle named Biscuit"),
        ("t3", "Caroline went to the park with Caroline's sister"),
        ("t4", "Melanie likes the park"),
        ("t5", "Caroline! Caroline, Caroline, are you there?"),
        ("t6", "The puppy sleeps a lot"),
    ]
    index = BM25(docs)
    assert index.rank("Caroline adopted a beagle named Biscuit")[0] == "t2"
    assert index.rank("what did Caroline adopt")[0] == "t2"
    assert index.rank("Caroline puppy")[0] == "t6"  # "puppy" is rare, "Caroline" is everywhere (idf)
    assert index.rank("nothing matches here") == []
    scores = index.scores("park")
    assert scores[3] > scores[2] > 0 == scores[0]  # the shorter document first (length normalisation)


def test_recall_and_the_context_score():
    question = generate(1, seed=23)[0].questions[0]
    wanted = question.turns[0]
    assert recall([wanted], question)["r@1"] is True
    assert recall(["x"] * 5 + [wanted], question) == {
        "r@1": False,
        "r@5": False,
        "r@10": True,
        "all@10": len(question.turns) == 1,
    }
    words_ = answer_words(question)
    assert held(question, "nothing at all") == 0.0
    assert held(question, question.answer) == 1.0 and words_
    text = context_text(
        {
            "summary": None,
            "messages": [{"content": "hello", "created_at": "2023-03-07T10:00:00Z"}],
            "recalled": [{"content": question.answer, "created_at": None}],
            "peer_card": ["x"],
        }
    )
    assert "7 March 2023 hello" in text and question.answer in text
    by_id = context_text(
        {"messages": [{"id": "m1", "content": "hello"}], "recalled": ["m1", {"id": "m1", "content": "hello"}]}
    )
    assert by_id.count("hello") == 1


def test_evaluate_scores_any_ranking(data):
    perfect = evaluate(lambda query, c: [t for q in c.questions if q.text == query for t in q.turns], data)
    assert perfect["overall"]["r@1"] == 1.0 and perfect["overall"]["all@10"] == 1.0
    nothing = evaluate(lambda query, c: [], data)
    assert nothing["overall"]["r@10"] == 0.0
    assert perfect["overall"]["questions"] == sum(len(c.questions) for c in data)


def test_the_bm25_pack_reference_takes_the_best_matching_turns_that_fit_the_budget(data):
    import tiktoken

    from bench.retrieval import bm25_pack, whole

    conversation = data[0]
    question = conversation.questions[0]
    encoding = tiktoken.get_encoding("o200k_base")
    ranked = BM25((t.id, t.text) for t in conversation.turns).rank(question.text)
    by_id = {t.id: t for t in conversation.turns}
    for budget in (0, 30, 200):
        packed = bm25_pack(question, conversation, budget)
        lines = [line for line in packed.split("\n") if line]
        assert sum(len(encoding.encode(line.split(" ", 3)[3])) for line in lines) <= budget
        if budget >= len(encoding.encode(by_id[ranked[0]].text)):
            assert by_id[ranked[0]].text in packed  # the best turn first, whenever it fits at all
    assert all(t.text in whole(conversation) for t in conversation.turns)
