"""Deriver engines: the extractive engine and its cards offline, the llm engine against a local OpenAI-compatible
server, card validation."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from precis.errors import Invalid
from precis.llm import EngineError
from precis.memory.cards import check_client_card, validate_entries
from precis.memory.engines import DeriveMessage, DeriveRequest, default_deriver_engine, get_deriver_engine
from precis.memory.engines.extractive import ExtractiveDeriver, classify, extract, split_sentences, update_card
from precis.memory.engines.prompt import (
    CARD_FORMAT,
    EXPLICIT_FORMAT,
    EXTRACT_INSTRUCTIONS,
    build_messages,
    format_lines,
    prompt_tokens,
)
from precis.settings import Settings
from precis.tokens import count_messages

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def message(content: str, peer: str = "alice", seq: int = 1, at: str = "2025-06-26T14:03:12.123456+00:00"):
    return DeriveMessage(f"m{seq}", seq, peer, content, at)


def request(*contents: str, context: DeriveMessage | None = None, instructions: str | None = None) -> DeriveRequest:
    return DeriveRequest("alice", [message(c, seq=i + 2) for i, c in enumerate(contents)], context, instructions)


# --- extractive: what is kept and how it is rewritten ---------------------------------------------------------


@pytest.mark.parametrize(
    ("sentence", "conclusion"),
    [
        ("I moved to Lisbon last spring.", "alice moved to Lisbon last spring"),
        ("My sister is Ana.", "alice's sister is Ana"),
        ("I'm a nurse.", "alice is a nurse"),
        ("I have two cats.", "alice has two cats"),
        ("I don't eat meat.", "alice doesn't eat meat"),
    ],
)
def test_extractive_rewrites_the_briefs_examples(sentence, conclusion):
    assert extract("alice", sentence) == [conclusion]


KEPT = [
    ("I am allergic to peanuts.", "alice is allergic to peanuts"),
    ("I was born in Porto.", "alice was born in Porto"),
    ("I've been learning Portuguese for two years.", "alice has been learning Portuguese for two years"),
    ("I'd love to visit Japan.", "alice would love to visit Japan"),
    ("I'd been there twice before.", "alice had been there twice before"),
    ("I'll start a new job in May.", "alice will start a new job in May"),
    ("My boss gave me a raise.", "alice's boss gave alice a raise"),
    ("The red bike is mine.", "The red bike is alice's"),
    ("I taught myself to code.", "alice taught alice to code"),
    ("I really like jazz.", "alice really likes jazz"),
    ("I usually work from home.", "alice usually works from home"),
    ("I never eat breakfast.", "alice never eats breakfast"),
    ("I study biology at the university.", "alice studies biology at the university"),
    ("I go to the gym every morning.", "alice goes to the gym every morning"),
    ("I watch a lot of documentaries.", "alice watches a lot of documentaries"),
    ("I fix old radios.", "alice fixes old radios"),
    ("I do not like spicy food.", "alice does not like spicy food"),
    ("I haven't seen the sea.", "alice hasn't seen the sea"),
    ("My wife and I live in Porto.", "alice's wife and alice live in Porto"),  # a plural subject keeps its verb
    ("I like jazz and I usually work from home.", "alice likes jazz and alice usually works from home"),
    ("My sister likes jazz and I play drums.", "alice's sister likes jazz and alice plays drums"),
    ("When I was ten, I broke my arm.", "When alice was ten, alice broke alice's arm"),
    ("Yes, I have a dog named Rover.", "alice has a dog named Rover"),
    ("I’m from Brazil.", "alice is from Brazil"),
    ("i live in berlin", "alice lives in berlin"),
    ("I think the movie was great!", "alice thinks the movie was great"),
    ("Call me Al.", "alice wants to be called Al"),
]
SKIPPED = [
    "Hi, I'm Alice.",
    "Hello!",
    "Thanks for the help, I appreciate it.",
    "What do you think about my plan?",
    "Can I ask something",
    "How do I renew my passport",
    "Please remind me to call my mom.",
    "Let me know.",
    "Tell me a joke about my job.",
    "If I win the lottery I will buy a boat.",
    "Maybe I will move to Berlin.",
    "I might go to the party.",
    "I wish I had a dog.",
    "I'm not sure I like it.",
    "I would go if it were sunny.",
    "I think so.",
    "Me too.",
    "I agree.",
    "I'm fine, thanks.",
    "I love you.",
    "I told you about my sister.",
    "We went to the beach.",
    "The weather is lovely today.",
    "Ok.",
    "I see.",
    "The plan, i.e. the trip, is fun.",
]


@pytest.mark.parametrize(("sentence", "conclusion"), KEPT)
def test_extractive_keeps_first_person_statements_in_the_third_person(sentence, conclusion):
    assert extract("alice", sentence) == [conclusion]


@pytest.mark.parametrize("sentence", SKIPPED)
def test_extractive_skips_questions_greetings_commands_hedges_and_fragments(sentence):
    assert extract("alice", sentence) == []


def test_extractive_splits_sentences_but_not_after_abbreviations():
    assert split_sentences("I work with Dr. Brown. Is it late? I love it!\nMy cat is old") == [
        "I work with Dr. Brown.",
        "Is it late?",
        "I love it!",
        "My cat is old",
    ]
    assert extract("bob", "Hi there! I moved to Oslo. Do you like Oslo? My dog loves the snow.") == [
        "bob moved to Oslo",
        "bob's dog loves the snow",
    ]


def test_extractive_derives_only_the_observed_senders_messages_without_repeats():
    context = message("I live in Paris and I hate rain.", peer="bob", seq=1)
    req = request("I have two cats.", "i have two  cats!", "I'm a nurse. I have two cats.", context=context)
    assert ExtractiveDeriver().derive(req) == ["alice has two cats", "alice is a nurse"]


def test_extractive_is_deterministic_whatever_the_hash_seed():
    text = "\n".join(sentence for sentence, _ in KEPT) + "\n" + " ".join(SKIPPED)
    code = (
        "import sys; from precis.memory.engines.extractive import extract, update_card; "
        f"found = extract('alice', {text!r}); print(found, update_card('alice', None, {{}}, found))"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": f"layers/common{os.pathsep}."},
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(outputs) == 1
    assert extract("alice", text) == [conclusion for _, conclusion in KEPT]


# --- extractive: the card -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("conclusion", "kind"),
    [
        ("alice's name is Alice Smith", "IDENTITY"),
        ("alice is 34 years old", "IDENTITY"),
        ("alice is a nurse", "IDENTITY"),
        ("alice lives in Lisbon", "IDENTITY"),
        ("alice is from Brazil", "IDENTITY"),
        ("alice was born in Porto", "IDENTITY"),
        ("alice works as a teacher", "IDENTITY"),
        ("alice's sister is Ana", "RELATIONSHIP"),
        ("alice's best friend is Tom", "RELATIONSHIP"),
        ("alice has two cats", "RELATIONSHIP"),
        ("alice is married to Bruno", "RELATIONSHIP"),
        ("alice wants to be called Al", "INSTRUCTION"),
        ("alice prefers short answers", "INSTRUCTION"),
        ("alice asks that examples use Python", "INSTRUCTION"),
        ("alice likes jazz", "ATTRIBUTE"),
        ("alice really loves hiking", "ATTRIBUTE"),
        ("alice doesn't eat meat", "ATTRIBUTE"),
        ("alice is allergic to peanuts", "ATTRIBUTE"),
        ("alice is a fan of jazz", "ATTRIBUTE"),
        ("alice prefers tea", "ATTRIBUTE"),
        ("alice thinks the movie was great", None),
        ("alice is a bit tired", None),
        ("bob likes jazz", None),
    ],
)
def test_card_classifies_conclusions(conclusion, kind):
    assert classify("alice", conclusion) == kind


def test_card_holds_the_most_repeated_facts_then_the_newest():
    card, counts = update_card(
        "alice", None, {}, ["alice likes jazz", "alice is a nurse", "alice likes jazz", "alice thinks it will rain"]
    )
    assert card == ["ATTRIBUTE: alice likes jazz", "IDENTITY: alice is a nurse"]  # the thought is not a card fact
    assert counts == {"ATTRIBUTE: alice likes jazz": 2, "IDENTITY: alice is a nurse": 1}
    card, counts = update_card("alice", card, counts, ["alice has two cats", "ALICE IS A  NURSE"])
    # The nurse fact, seen again (case and spaces aside), now ties with jazz and is newer.
    assert card == ["IDENTITY: alice is a nurse", "ATTRIBUTE: alice likes jazz", "RELATIONSHIP: alice has two cats"]
    assert counts["IDENTITY: alice is a nurse"] == 2


def test_card_is_capped_at_40_entries_of_200_characters():
    facts = [f"alice likes band number {i}" for i in range(60)] + ["alice likes " + "x" * 200]
    card, counts = update_card("alice", None, {}, facts)
    assert len(card) == 40 and card[0] == "ATTRIBUTE: alice likes band number 59"  # ties: newest first
    assert all(len(entry) <= 200 for entry in card) and len(counts) == 60  # counts keep climbers, not the long one
    card, _ = update_card("alice", card, counts, ["alice likes band number 0"])
    assert card[0] == "ATTRIBUTE: alice likes band number 0"


def test_card_update_without_a_card_fact_leaves_it_unchanged():
    assert update_card("alice", ["IDENTITY: alice is a nurse"], {}, ["alice thinks it will rain"]) is None
    assert ExtractiveDeriver().update_card("alice", None, {}, []) is None


def test_card_keeps_old_entries_and_drops_unprefixed_ones():
    card, counts = update_card(
        "alice", ["IDENTITY: alice is a nurse", "a note from the client"], {}, ["alice likes tea"]
    )
    assert card == ["ATTRIBUTE: alice likes tea", "IDENTITY: alice is a nurse"]
    assert counts == {"ATTRIBUTE: alice likes tea": 1, "IDENTITY: alice is a nurse": 1}


# --- card validation ------------------------------------------------------------------------------------------


def test_validate_entries_keeps_prefixed_short_unique_entries():
    entries = [
        "IDENTITY: alice is a nurse",
        "identity:  Alice is a  NURSE",
        "ATTRIBUTE: likes tea",
        "no prefix",
        "RELATIONSHIP: " + "x" * 190,
        "INSTRUCTION:   ",
        42,
        "INSTRUCTION: call her Al\n",
    ]
    assert validate_entries(entries) == [
        "IDENTITY: alice is a nurse",
        "ATTRIBUTE: likes tea",
        "INSTRUCTION: call her Al",
    ]
    assert len(validate_entries(f"ATTRIBUTE: fact {i}" for i in range(50))) == 40


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ({"a": 1}, "peer_card: must be a list of strings, got object"),
        ("IDENTITY: x", "peer_card: must be a list of strings, got string"),
        (["ok", 3], "peer_card[1]: must be a string, got number"),
        (["x"] * 41, "peer_card: at most 40 entries, got 41"),
        (["ok", " "], "peer_card[1]: must be 1-200 characters and not blank, got 1"),
        (["y" * 201], "peer_card[0]: must be 1-200 characters and not blank, got 201"),
    ],
)
def test_check_client_card_names_what_is_wrong(value, error):
    with pytest.raises(Invalid, match=re.escape(error)) as caught:
        check_client_card(value)
    assert caught.value.status == 422


def test_check_client_card_accepts_any_short_strings():
    card = ["likes tea", "IDENTITY: nurse", "z" * 200]
    assert check_client_card(card) == card and check_client_card([]) == []


# --- prompt ---------------------------------------------------------------------------------------------------


def test_lines_are_utc_to_the_minute_under_a_line_per_date():
    lines = [
        message("hi", at="2025-06-26T16:03:12.999+02:00"),
        message("x", peer="bob", at="2025-06-26T23:59:59"),
        message("y", peer="bob", at="2025-06-27T00:00:00+00:00"),
    ]
    assert format_lines(lines) == ["[2025-06-26]", "14:03 alice: hi", "23:59 bob: x", "[2025-06-27]", "00:00 bob: y"]


def test_schemas_are_strict_json_schemas():
    for response_format, field in ((EXPLICIT_FORMAT, "explicit"), (CARD_FORMAT, "peer_card")):
        assert response_format["type"] == "json_schema" and response_format["json_schema"]["strict"] is True
        schema = response_format["json_schema"]["schema"]
        assert schema["required"] == [field] and schema["additionalProperties"] is False


# --- factory --------------------------------------------------------------------------------------------------


def test_default_and_get_deriver_engine():
    assert default_deriver_engine(Settings()) == "extractive"
    assert default_deriver_engine(Settings(llm_api_key="sk-x")) == "llm"
    assert default_deriver_engine(Settings(llm_api_key="sk-x", derive_engine="extractive")) == "extractive"
    assert default_deriver_engine(Settings(derive_engine="llm")) == "llm"
    assert get_deriver_engine("extractive", Settings()).name == "extractive"
    with pytest.raises(ValueError, match="deriver engine: must be one of llm, extractive, got 'gpt'"):
        get_deriver_engine("gpt", Settings())
    with pytest.raises(EngineError, match="OPENAI_BASE_URL") as caught:
        get_deriver_engine("llm", Settings())
    assert caught.value.retryable is False


def test_llm_model_is_the_given_one_else_derive_model_else_llm_model():
    url = "http://127.0.0.1:1/v1"
    assert get_deriver_engine("llm", Settings(llm_base_url=url, llm_model="base")).model == "base"
    derive = Settings(llm_base_url=url, llm_model="base", derive_model="deriving")
    assert get_deriver_engine("llm", derive).model == "deriving"
    assert get_deriver_engine("llm", derive, model="session").model == "session"


def test_openai_is_imported_only_by_the_llm_deriver():
    code = (
        "import sys; from precis.memory.engines import get_deriver_engine, DeriveRequest, DeriveMessage; "
        "e = get_deriver_engine('extractive'); "
        "e.derive(DeriveRequest('a', [DeriveMessage('1', 1, 'a', 'I like tea.', '2025-01-01T00:00:00+00:00')])); "
        "import precis.memory.engines.prompt, precis.memory.cards; "
        "assert 'openai' not in sys.modules, 'openai imported'; "
        "from precis.settings import Settings; "
        "get_deriver_engine('llm', Settings(llm_base_url='http://127.0.0.1:1')); "
        "assert 'openai' in sys.modules"
    )
    subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        check=True,
        env={**os.environ, "PYTHONPATH": f"layers/common{os.pathsep}."},
    )


# --- llm, against the local server ----------------------------------------------------------------------------


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def deriver(llm_server, sleeps):
    from precis.memory.engines.llm import LLMDeriver

    return LLMDeriver(
        model="derive-model",
        base_url=llm_server.url,
        api_key="sk-test",
        timeout=2.0,
        max_attempts=3,
        sleep=sleeps.append,
        rng=lambda: 0.5,
    )


def answers(*texts: str):
    """The server's answers, one per request, the last one repeated."""
    queue = list(texts)
    return lambda body: queue.pop(0) if len(queue) > 1 else queue[0]


def explicit(*contents: str) -> str:
    return json.dumps({"explicit": [{"content": c} for c in contents]})


def test_llm_prompt_holds_the_context_line_the_new_messages_and_custom_instructions(deriver, llm_server):
    llm_server.answer = answers(explicit("alice moved to Lisbon on 2025-06-25", "alice has a sister named Ana"))
    context = message("Where do you live now?", peer="bob", seq=1, at="2025-06-26T14:00:00+00:00")
    req = request(
        "I moved to Lisbon yesterday.",
        "My sister Ana </messages> visits.",
        context=context,
        instructions="Focus on places.",
    )
    assert deriver.derive(req) == ["alice moved to Lisbon on 2025-06-25", "alice has a sister named Ana"]
    (sent,) = llm_server.requests
    body = sent.body
    assert (body["model"], body["max_tokens"]) == ("derive-model", 1024)
    assert body["response_format"] == EXPLICIT_FORMAT
    system, user = body["messages"]
    # The instructions are the same for every request (a cacheable prefix): the peer and the session's own
    # instructions come after them.
    assert system["content"] == EXTRACT_INSTRUCTIONS and "alice" not in system["content"]
    assert "absolute dates" in system["content"]
    assert user["content"].startswith("Custom instructions:\nFocus on places.\n\nTarget peers: alice\n")
    transcript = user["content"].split("<messages>\n", 1)[1].removesuffix("\n</messages>")
    assert transcript.splitlines() == [
        "[2025-06-26]",
        "14:00 bob: Where do you live now?",
        "14:03 alice: I moved to Lisbon yesterday.",
        "14:03 alice: My sister Ana <\\/messages> visits.",
    ]
    assert body["messages"] == build_messages(req)
    assert prompt_tokens(req) == count_messages(body["messages"])


def test_llm_without_custom_instructions_or_context(deriver, llm_server):
    llm_server.answer = answers(explicit())
    assert deriver.derive(request("Nothing to see.")) == []
    system, user = llm_server.requests[0].body["messages"]
    assert "Custom instructions" not in system["content"] + user["content"]
    assert (
        user["content"] == "Target peers: alice\n\n<messages>\n[2025-06-26]\n14:03 alice: Nothing to see.\n</messages>"
    )


def test_llm_session_request_attributes_each_conclusion_to_its_target_peer(deriver, llm_server):
    """One request for every sender of a session: each conclusion goes to the target peer it names (or, naming none,
    the one it is about); one about no target peer is dropped; repeats of a peer's conclusion merge."""
    from precis.memory.engines import SessionRequest

    llm_server.answer = answers(
        json.dumps(
            {
                "explicit": [
                    {"peer": "alice", "content": "alice likes tea"},
                    {"peer": "bob", "content": "bob lives in Porto"},
                    {"peer": "carol", "content": "carol is the context"},
                    {"peer": "alice", "content": "Alice  likes TEA"},
                    {"content": "bob's cat is called Miso"},  # no peer (an answer without the schema): its subject's
                    {"content": "The weather is nice"},  # about no target peer: dropped
                ]
            }
        )
    )
    lines = [message("I like tea.", seq=2), message("I live in Porto.", peer="bob", seq=3)]
    found = deriver.derive_session(SessionRequest(("alice", "bob"), lines, context=message("Hi", peer="carol", seq=1)))
    assert found == {"alice": ["alice likes tea"], "bob": ["bob lives in Porto", "bob's cat is called Miso"]}
    (sent,) = llm_server.requests
    assert sent.body["messages"][0]["content"] == EXTRACT_INSTRUCTIONS
    assert "Target peers: alice, bob\n" in sent.body["messages"][1]["content"]


def test_llm_reads_json_in_a_fence_or_in_chatter_and_drops_repeats(deriver, llm_server):
    llm_server.answer = answers(
        "```json\n" + explicit("alice likes tea", "Alice  likes TEA") + "\n```",
        "Sure! Here it is: " + explicit("alice likes coffee") + " Hope it helps.",
    )
    assert deriver.derive(request("I like tea.")) == ["alice likes tea"]
    assert deriver.derive(request("I like coffee.")) == ["alice likes coffee"]


def test_llm_on_a_server_without_structured_output_asks_once_more_without_it(deriver, llm_server, sleeps):
    llm_server.structured_output = False
    llm_server.answer = answers(explicit("alice likes tea"))
    assert deriver.derive(request("I like tea.")) == ["alice likes tea"]
    assert deriver.derive(request("I like tea.")) == ["alice likes tea"]
    assert [r.mode for r in llm_server.requests] == ["unsupported", "ok", "ok"] and sleeps == []
    assert [("response_format" in r.body) for r in llm_server.requests] == [True, False, False]


@pytest.mark.parametrize(
    "bad",
    [
        "not json at all",
        json.dumps({"conclusions": []}),
        json.dumps({"explicit": "x"}),
        json.dumps({"explicit": [{"content": "  "}]}),
        json.dumps({"explicit": ["x"]}),
        json.dumps([1, 2]),
    ],
)
def test_llm_retries_a_malformed_answer_then_succeeds(deriver, llm_server, sleeps, bad):
    llm_server.answer = answers(bad, explicit("alice likes tea"))
    assert deriver.derive(request("I like tea.")) == ["alice likes tea"]
    assert len(llm_server.requests) == 2 and sleeps == [0.375]


def test_llm_always_malformed_is_a_retryable_error_after_the_attempts(deriver, llm_server, sleeps):
    llm_server.answer = answers("I cannot do that.")
    with pytest.raises(EngineError, match="gave up after 3 attempts: unusable answer: answer is not JSON") as caught:
        deriver.derive(request("I like tea."))
    assert caught.value.retryable is True
    assert len(llm_server.requests) == 3 and sleeps == [0.375, 0.75]


def test_llm_retries_server_errors_like_the_summarizer(deriver, llm_server, sleeps):
    llm_server.answer = answers(explicit("alice likes tea"))
    llm_server.script(["429", "500"])
    assert deriver.derive(request("I like tea.")) == ["alice likes tea"]
    assert [r.mode for r in llm_server.requests] == ["429", "500", "ok"]


@pytest.mark.parametrize("mode", ["401", "400"])
def test_llm_refused_request_is_not_retried(deriver, llm_server, sleeps, mode):
    llm_server.mode = mode
    with pytest.raises(EngineError, match=f"HTTP {mode}") as caught:
        deriver.derive(request("I like tea."))
    assert caught.value.retryable is False
    assert len(llm_server.requests) == 1 and sleeps == []


def test_llm_empty_request_asks_nothing(deriver, llm_server):
    assert deriver.derive(DeriveRequest("alice", [])) == []
    assert llm_server.requests == []


def test_llm_update_card_validates_the_proposed_card(deriver, llm_server):
    llm_server.answer = answers(
        json.dumps(
            {
                "peer_card": [
                    "IDENTITY: alice is a nurse",
                    "attribute: alice likes tea",
                    "alice likes tea",
                    "IDENTITY: Alice is a nurse",
                    "RELATIONSHIP: " + "x" * 200,
                ]
            }
        )
    )
    card, counts = deriver.update_card(
        "alice", ["IDENTITY: alice is a nurse"], {"IDENTITY: alice is a nurse": 3}, ["alice likes tea"]
    )
    assert card == ["IDENTITY: alice is a nurse", "ATTRIBUTE: alice likes tea"]
    assert counts == {"IDENTITY: alice is a nurse": 3}
    body = llm_server.requests[0].body
    assert body["response_format"] == CARD_FORMAT
    assert "<card>\nIDENTITY: alice is a nurse\n</card>" in body["messages"][1]["content"]
    assert "<conclusions>\nalice likes tea\n</conclusions>" in body["messages"][1]["content"]


def test_llm_update_card_with_nothing_valid_or_new_leaves_it_unchanged(deriver, llm_server):
    llm_server.answer = answers(
        json.dumps({"peer_card": ["no prefix", "IDENTITY: " + "y" * 300]}),
        json.dumps({"peer_card": ["IDENTITY: alice is a nurse"]}),
    )
    assert deriver.update_card("alice", None, {}, ["alice likes tea"]) is None
    assert deriver.update_card("alice", ["IDENTITY: alice is a nurse"], {}, ["alice is a nurse"]) is None
    assert deriver.update_card("alice", None, {}, []) is None
    assert len(llm_server.requests) == 2


def test_llm_update_card_retries_a_wrong_shape(deriver, llm_server, sleeps):
    llm_server.answer = answers(
        json.dumps({"peer_card": "IDENTITY: x"}),
        json.dumps({"card": []}),
        json.dumps({"peer_card": ["IDENTITY: alice is a nurse"]}),
    )
    assert deriver.update_card("alice", None, {}, ["alice is a nurse"]) == (["IDENTITY: alice is a nurse"], {})
    assert len(llm_server.requests) == 3
