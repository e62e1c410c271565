"""Summary caps (docs/design.md, "Summaries"): no summary holds more tokens than its cap, a rolling summary at most
a quarter of its threshold, and no summary more than the history it replaces, whatever the engine answers."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from local.models.llm_server import LLMServer, summary_text
from local.template import template
from precis.settings import Settings
from precis.store.db import Db
from precis.store.messages import NewMessage, append_messages, read_range
from precis.store.resources import get_or_create_session, get_or_create_workspace, require_session
from precis.store.summaries import put_summary, read_summary_state
from precis.summaries.engines.extractive import ExtractiveEngine
from precis.summaries.runner import cut_to_tokens, summarize_session
from precis.summaries.strategies import SummaryConfig, default_max_output_tokens, merge_config
from precis.tokens import count_text
from tests.handlers import call

WS = "ws1"
SHORT, LONG, ROLLING = "honcho_chat_summary_short", "honcho_chat_summary_long", "rolling"
# Words whose tokens per word vary: plain English, multi-byte text, CJK (a word a character), and long unbroken
# "words" (a hash, a base64 blob) that a word limit alone cannot hold to a token limit.
WORDS = (
    "the agent called the weather tool for Lisbon and got light wind then answered résumé naïve 東京データ "
    "🙂🙂 ok JSON stacktrace Δ≈0.5 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855 "
    "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVphYmNkZWZnaGlqa2xtbm9wcXJzdHV2d3h5ejAxMjM0NTY3ODk"
).split()
_sessions = itertools.count(1)


# --- the settings ------------------------------------------------------------------------------------------------


@given(st.integers(256, 400_000))
def test_the_rolling_default_is_a_sixteenth_of_the_threshold_and_always_allowed(threshold):
    config = SummaryConfig(strategy="rolling", token_threshold=threshold)
    assert (
        config.max_output_tokens
        == min(4096, max(64, threshold // 16))
        == default_max_output_tokens("rolling", threshold)
    )
    assert config.max_output_tokens * 4 <= threshold


@given(st.integers(256, 20_000), st.integers(64, 4096))
def test_a_rolling_summary_may_hold_at_most_a_quarter_of_the_threshold(threshold, cap):
    if cap * 4 <= threshold:
        assert SummaryConfig(strategy="rolling", token_threshold=threshold, max_output_tokens=cap)
        return
    with pytest.raises(ValidationError) as caught:
        SummaryConfig(strategy="rolling", token_threshold=threshold, max_output_tokens=cap)
    error = caught.value.errors()[0]
    assert error["loc"] == ("max_output_tokens",)
    assert error["msg"].startswith(
        f"at most a quarter of token_threshold {threshold} ({threshold // 4}) for the rolling strategy, got {cap}"
    )


@pytest.mark.parametrize("threshold", [100, 200, 255])
def test_rolling_needs_a_threshold_with_room_for_the_smallest_summary(threshold):
    with pytest.raises(ValidationError) as caught:
        merge_config({"strategy": "rolling", "token_threshold": threshold})
    error = caught.value.errors()[0]
    assert error["loc"] == ("token_threshold",)
    assert f"at least 256 for the rolling strategy, got {threshold}" in error["msg"] and "64" in error["msg"]
    assert merge_config({"strategy": "rolling", "token_threshold": 256}).max_output_tokens == 64


def test_cadence_keeps_512_and_other_strategies_are_not_held_to_the_threshold():
    assert SummaryConfig().max_output_tokens == 512
    assert SummaryConfig(token_threshold=100, max_output_tokens=4096).max_output_tokens == 4096
    assert SummaryConfig(strategy="sliding_window", token_threshold=100, max_output_tokens=4096)
    assert SummaryConfig(strategy="rolling", enabled=False, token_threshold=100)  # writes nothing: nothing to hold


def test_a_later_strategy_change_derives_the_cap_again():
    # The cap no layer set follows the merged settings: a session switching its workspace to rolling gets one that
    # fits its threshold, not cadence's 512.
    assert merge_config({"token_threshold": 1000}, {"strategy": "rolling"}).max_output_tokens == 64
    assert merge_config({"strategy": "rolling", "token_threshold": 40_000}, {}).max_output_tokens == 2500


@pytest.fixture
def ws(aws):
    assert call("POST", "/v3/workspaces", {"id": WS}).status == 201
    return aws


def test_an_output_cap_over_a_quarter_of_the_threshold_is_422_naming_both(ws):
    reply = call(
        "PUT",
        f"/v3/workspaces/{WS}",
        {"configuration": {"summarizer": {"strategy": "rolling", "token_threshold": 400, "max_output_tokens": 512}}},
    )
    assert reply.status == 422
    assert reply.body["detail"] == (
        "configuration.summarizer.max_output_tokens: at most a quarter of token_threshold "
        "400 (100) for the rolling strategy, got 512: a summary must stay far smaller "
        "than the history it folds"
    )
    reply = call(
        "POST",
        f"/v3/workspaces/{WS}/sessions",
        {"id": "s1", "configuration": {"summarizer": {"strategy": "rolling", "token_threshold": 200}}},
    )
    assert reply.status == 422 and reply.body["detail"].startswith(
        "configuration.summarizer.token_threshold: at least 256 for the rolling strategy, got 200"
    )


# --- cutting a text to a token count ------------------------------------------------------------------------------


@settings(max_examples=300)
@given(st.lists(st.sampled_from(WORDS + ["\n", "é", "🙂", " "]), max_size=300).map(" ".join), st.integers(1, 300))
def test_a_cut_text_fits_its_tokens_and_keeps_the_start(text, tokens):
    cut = cut_to_tokens(text, tokens)
    assert count_text(cut) <= tokens
    if count_text(text) <= tokens:
        assert cut == text
    else:
        assert cut.endswith("…") and text.startswith(cut[:-1])


# --- stored summaries, whatever the messages and the engine ---------------------------------------------------


@pytest.fixture
def db(aws) -> Db:
    db = Db(client=aws["dynamodb"], s3=aws["s3"], table=template().table_name, bucket=template().bucket_name)
    get_or_create_workspace(db, WS)
    return db


def plain_settings(**overrides) -> Settings:
    return Settings(table_name=template().table_name, bucket_name=template().bucket_name, **overrides)


configs = st.one_of(
    st.builds(
        lambda cap: {
            "strategy": "cadence",
            "messages_per_short_summary": 10,
            "messages_per_long_summary": 20,
            "max_output_tokens": cap,
        },
        st.sampled_from([None, 64, 200, 512]),
    ),
    st.builds(
        lambda threshold, keep, share: {
            "strategy": "rolling",
            "token_threshold": threshold,
            "keep_recent_runs": keep,
            "max_output_tokens": max(64, threshold // share) if share else None,
        },
        st.integers(256, 2_500),
        st.integers(1, 3),
        st.sampled_from([0, 4, 8]),
    ),
)
# A message: 0-120 words (0: empty content), in a run (a small id) or none.
messages = st.tuples(st.integers(0, 120), st.sampled_from([None, None, "r0", "r1", "r2"]))
batches = st.lists(st.lists(messages, min_size=1, max_size=25), min_size=1, max_size=4)


def post_batches(
    db: Db,
    session: str,
    drawn: list[list[tuple[int, str | None]]],
    seed: int,
) -> Iterator[dict[int, int]]:
    """Store the drawn batches one by one; after each, the token counts by seq so far."""
    tokens, seq = {}, 0
    for b, batch in enumerate(drawn):
        stored = []
        for m, (words, run) in enumerate(batch):
            content = " ".join(WORDS[(seed + 7 * b + 3 * m + k) % len(WORDS)] for k in range(words))
            stored.append(
                NewMessage(
                    content, "alice" if m % 3 else "agent", count_text(content), run_id=f"{run}-{b}" if run else None
                )
            )
            seq += 1
            tokens[seq] = stored[-1].token_count
        append_messages(db, WS, session, stored, inline_max_bytes=16_384)
        yield tokens


def audits(db: Db, session: str) -> list[dict]:
    listed = db.s3.list_objects_v2(Bucket=db.bucket, Prefix="audit/").get("Contents", [])
    records = [json.loads(db.s3.get_object(Bucket=db.bucket, Key=o["Key"])["Body"].read()) for o in listed]
    return [r for r in records if r["session_id"] == session and r["outcome"] == "written"]


def check_summaries(db: Db, session: str, config: SummaryConfig, tokens: dict[int, int], quarter: bool = False) -> int:
    """Every summary written: within its cap, a rolling one within a quarter of the threshold, and none larger than
    what it replaced (previous summary + its messages), nor, with `quarter` (the extractive engine), larger than a
    quarter of it. Returns how many were checked."""
    written = audits(db, session)
    by_end = {(r["summary_type"], r["covers"]["through_seq"]): r for r in written}
    for record in written:
        covers = record["covers"]
        before = covers["previous_covers_seq"]
        replaced = (by_end[(record["summary_type"], before)]["token_count"] if before else 0) + sum(
            tokens[seq] for seq in range(covers["first_seq"], covers["through_seq"] + 1)
        )
        assert record["token_count"] == count_text(record["output"])
        assert record["token_count"] <= record["max_output_tokens"] <= config.max_output_tokens
        assert record["max_output_tokens"] == max(1, min(config.max_output_tokens, replaced))
        assert record["token_count"] <= replaced, record
        if quarter:
            assert record["token_count"] * 4 <= replaced, record
        if config.strategy == "rolling":
            assert record["token_count"] * 4 <= config.token_threshold
    stored, _ = read_summary_state(db, WS, session)
    for item in stored.values():
        assert item["token_count"] == count_text(item["content"]) <= config.max_output_tokens
    return len(written)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(configs, batches, st.integers(0, 1000))
def test_extractive_summaries_stay_within_their_bounds(db, raw, drawn, seed):
    session = f"x{next(_sessions)}"
    get_or_create_session(db, WS, session, configuration={"summarizer": raw})
    config = merge_config(raw)
    for tokens in post_batches(db, session, drawn, seed):
        summarize_session(db, plain_settings(), WS, session, engine_for=lambda _: ExtractiveEngine())
        check_summaries(db, session, config, tokens, quarter=True)


@pytest.fixture
def llm():
    with LLMServer() as server:
        yield server


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(configs, batches, st.integers(0, 1000), st.integers(0, 3_000))
def test_llm_summaries_stay_within_their_bounds_whatever_the_model_answers(db, llm, raw, drawn, seed, answer_words):
    # The model ignores max_tokens and answers `answer_words` words (or its usual short answer for 0).
    long_answer = " ".join(WORDS[k % len(WORDS)] for k in range(answer_words))
    llm.answer = (lambda body: long_answer) if answer_words else summary_text
    llm.requests.clear()
    session = f"l{next(_sessions)}"
    get_or_create_session(db, WS, session, configuration={"summarizer": {**raw, "engine": "llm"}})
    config = merge_config(raw)
    checked = 0
    for tokens in post_batches(db, session, drawn, seed):
        summarize_session(db, plain_settings(llm_base_url=llm.url, llm_api_key="sk-test", llm_model="m"), WS, session)
        checked = check_summaries(db, session, config, tokens)
    sent = [r.body["max_tokens"] for r in llm.requests]
    assert all(1 <= cap <= config.max_output_tokens for cap in sent)
    assert len(sent) <= checked  # steps that replace only empty messages ask nothing


def test_a_long_answer_is_cut_to_the_cap_and_the_audit_says_so(db, llm):
    llm.answer = lambda body: "The quarterly budget review moved to Thursday. " * 400  # ~3,600 tokens
    get_or_create_session(
        db,
        WS,
        "s1",
        configuration={
            "summarizer": {"strategy": "rolling", "token_threshold": 1000, "keep_recent_runs": 1, "engine": "llm"}
        },
    )
    contents = [
        f"Run {i}: the supplier sent quote {i} and the agent compared it with the budget. " * 4 for i in range(16)
    ]
    append_messages(db, WS, "s1", [NewMessage(c, "alice", count_text(c)) for c in contents], inline_max_bytes=16_384)
    summarize_session(db, plain_settings(llm_base_url=llm.url, llm_api_key="sk-test", llm_model="m"), WS, "s1")
    assert [r.body["max_tokens"] for r in llm.requests] == [64]  # 1000 / 16: far less than what 15 runs hold
    rolling = read_summary_state(db, WS, "s1")[0][ROLLING]
    assert rolling["token_count"] <= 64 and rolling["content"].endswith("…")
    assert rolling["content"].startswith("The quarterly budget review moved to Thursday.")
    (record,) = audits(db, "s1")
    assert record["output_cut_from_tokens"] > 3_000 and record["max_output_tokens"] == 64


def test_a_summary_is_never_asked_for_more_than_it_replaces(db, llm):
    get_or_create_session(db, WS, "s1", configuration={"summarizer": {"engine": "llm"}})
    append_messages(
        db, WS, "s1", [NewMessage("ok", "alice", count_text("ok")) for _ in range(20)], inline_max_bytes=16_384
    )
    summarize_session(db, plain_settings(llm_base_url=llm.url, llm_api_key="sk-test", llm_model="m"), WS, "s1")
    (request,) = llm.requests
    assert request.body["max_tokens"] == 20 * count_text("ok")  # not 512
    assert "At most 15 words." in request.body["messages"][0]["content"]


def test_empty_messages_get_an_empty_summary_without_a_request(db, llm):
    get_or_create_session(db, WS, "s1", configuration={"summarizer": {"engine": "llm"}})
    append_messages(db, WS, "s1", [NewMessage("", "alice", 0) for _ in range(20)], inline_max_bytes=16_384)
    outcome = summarize_session(
        db, plain_settings(llm_base_url=llm.url, llm_api_key="sk-test", llm_model="m"), WS, "s1"
    )
    assert [w.covers_seq for w in outcome.written] == [20] and not llm.requests
    short = read_summary_state(db, WS, "s1")[0][SHORT]
    assert (short["content"], short["token_count"]) == ("", 0)


def test_an_extractive_summary_holds_its_cap_in_tokens_even_for_a_blob(db):
    # A previous summary made of one long unbroken "word" (a pasted blob, ~1,000 tokens) under a 64-token cap: the
    # extractive engine counts tokens itself (a quarter of what it covers, within the cap), so nothing is cut after.
    blob = WORDS[-1] * 20
    get_or_create_session(
        db,
        WS,
        "s1",
        configuration={
            "summarizer": {"messages_per_short_summary": 10, "messages_per_long_summary": 1000, "max_output_tokens": 64}
        },
    )
    contents = [f"hello {blob} number {i}" for i in range(20)]
    append_messages(db, WS, "s1", [NewMessage(c, "alice", count_text(c)) for c in contents], inline_max_bytes=16_384)
    first = read_range(db, WS, "s1", 1, 10)
    put_summary(
        db,
        WS,
        "s1",
        incarnation=require_session(db, WS, "s1")["incarnation"],
        summary_type=SHORT,
        content=blob,
        token_count=count_text(blob),
        covers_seq=10,
        end_tokens=sum(m["token_count"] for m in first),
        message_id=first[-1]["id"],
    )
    engine = ExtractiveEngine()
    request_seen = []

    class Watching:
        name = engine.name

        def summarize(self, request):
            result = engine.summarize(request)
            request_seen.append(count_text(result.text))
            return result

    summarize_session(db, plain_settings(), WS, "s1", engine_for=lambda _: Watching())
    assert request_seen and 0 < request_seen[0] <= 64  # what the engine gave
    short = read_summary_state(db, WS, "s1")[0][SHORT]
    assert short["covers_seq"] == 20 and short["token_count"] == request_seen[0]
    (record,) = audits(db, "s1")
    assert record["output_cut_from_tokens"] is None
