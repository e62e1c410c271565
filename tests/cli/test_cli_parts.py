"""The `precis` command's pure parts: the budget bar, `key=value` typing, conversation files and batches."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from precis_cli import render, settings, transfer

from precis.configuration import summary_config
from precis.errors import Invalid


@given(st.lists(st.integers(0, 10**6), min_size=1, max_size=4), st.integers(1, 200))
def test_bar_cells_fill_the_width_and_show_every_nonzero_part(amounts, width):
    cells = render.split_width(amounts, width)
    if sum(amounts) == 0:
        assert cells == [0] * len(amounts)
        return
    assert sum(cells) == width
    if width >= len(amounts):
        assert all(c >= 1 for a, c in zip(amounts, cells, strict=True) if a > 0)
    assert all(c == 0 for a, c in zip(amounts, cells, strict=True) if a == 0)


def test_bar_is_to_scale_and_plain_without_colour():
    budget = render.Budget(limit=1000, summary=250, messages=500, message_count=7, skipped=3)
    lines = render.budget_bar(budget, 40, color=False)
    assert lines[0] == "context: 750 of 1,000 tokens"
    assert lines[1] == "[" + "=" * 10 + "#" * 20 + "." * 10 + "]"
    assert lines[2] == "= summary 250  # messages 500 in 7 messages  . unused 250"
    assert lines[3] == "3 older messages after the summary did not fit"
    assert not any("\x1b[" in line for line in lines)
    assert any("\x1b[" in line for line in render.budget_bar(budget, 40, color=True))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("strategy=rolling", ("summarizer", "strategy", "rolling")),
        ("token_threshold=4000", ("summarizer", "token_threshold", 4000)),
        ("temperature=0.2", ("summarizer", "temperature", 0.2)),
        ("summary.enabled=false", ("summary", "enabled", False)),
        ("custom_instructions=Be brief.", ("summary", "custom_instructions", "Be brief.")),
        ("model=4", ("summarizer", "model", "4")),  # a text setting stays text
        ('model="gpt-4o"', ("summarizer", "model", "gpt-4o")),
        ("instructions=a=b", ("summarizer", "instructions", "a=b")),
    ],
)
def test_assignments_are_typed_by_json_unless_the_setting_takes_text(text, expected):
    a = settings.parse_assignment(text)
    assert (a.section, a.key, a.value) == expected and type(a.value) is type(expected[2])


@pytest.mark.parametrize("text", ["strategy", "=3", "deriver.x=1", "summarizer.a.b=1"])
def test_malformed_assignments_are_refused(text):
    with pytest.raises(settings.SettingError):
        settings.parse_assignment(text)


def test_null_removes_a_key_and_other_sections_are_kept():
    current = {"summarizer": {"model": "m", "keep_runs": 3}, "other": {"x": 1}}
    updated = settings.apply(
        current, [settings.parse_assignment("model=null"), settings.parse_assignment("summary.enabled=false")]
    )
    assert updated == {"summarizer": {"keep_runs": 3}, "summary": {"enabled": False}, "other": {"x": 1}}
    assert current["summarizer"] == {"model": "m", "keep_runs": 3}  # not changed in place


def test_validation_is_the_layers_own():
    for workspace, session in [
        ({"summarizer": {"token_threshold": 5}}, None),
        ({"summary": {"messages_per_short_summary": 30}}, {"summary": {"messages_per_long_summary": 25}}),
    ]:
        with pytest.raises(Invalid) as layer:
            summary_config(workspace, session)
        with pytest.raises(settings.SettingError) as ours:
            settings.effective(workspace, session)
        assert str(ours.value) == layer.value.detail


def test_precis_jsonl_and_openai_files_read_as_message_bodies():
    precis = b"\n".join(
        json.dumps(r).encode()
        for r in [
            {
                "peer_id": "alice",
                "content": "hi",
                "run_id": "r1",
                "metadata": {"k": 1},
                "created_at": "2025-01-01T00:00:00Z",
                "id": "ignored",
                "seq": 1,
                "token_count": 1,
            },
            {"peer_id": "bot", "content": "", "run_id": None, "metadata": {}},
        ]
    )
    assert transfer.read_messages(precis) == [
        {
            "content": "hi",
            "peer_id": "alice",
            "metadata": {"k": 1},
            "created_at": "2025-01-01T00:00:00Z",
            "run_id": "r1",
        },
        {"content": "", "peer_id": "bot"},
    ]
    conversation = {
        "messages": [
            {"role": "user", "content": "hello"},
            {"role": "assistant", "content": [{"type": "text", "text": "hi there"}]},
            {"role": "assistant", "content": None, "tool_calls": []},
        ]
    }
    expected = [
        {"content": "hello", "peer_id": "alice"},
        {"content": "hi there", "peer_id": "bot"},
        {"content": "", "peer_id": "bot"},
    ]
    mapping = transfer.parse_peer_map("user=alice, assistant=bot")
    assert transfer.read_messages(json.dumps(conversation).encode(), mapping) == expected
    assert transfer.read_messages(json.dumps([conversation]).encode(), mapping) == expected
    assert transfer.read_messages(json.dumps(conversation["messages"]).encode(), mapping) == expected
    jsonl = (json.dumps(conversation) + "\n\n" + json.dumps(conversation)).encode()
    assert transfer.read_messages(jsonl, mapping) == expected * 2


@pytest.mark.parametrize(
    ("data", "where"),
    [
        (b'{"peer_id": "a", "content": "x"}\n{"peer_id": "a", "content": 3}\n', "line 2"),
        (b'{"peer_id": "a", "content": "x"}\nnot json\n', "line 2: not JSON"),
        (b'{"peer_id": "a b", "content": "x"}\n', "peer 'a b' is not a valid id"),
        (b'{"role": "user"}\n{"text": "x"}\n', "line 2: expected"),
        (b"", "no messages"),
        (b"\xff\xfe", "not UTF-8"),
    ],
)
def test_a_bad_file_is_refused_saying_where(data, where):
    with pytest.raises(transfer.ImportFileError, match=where):
        transfer.read_messages(data)


def test_batches_are_deterministic_and_bounded_by_count_and_bytes():
    messages = [{"content": "x" * (i % 7 * 1000), "peer_id": "p"} for i in range(1000)]
    batches = transfer.make_batches(messages, max_count=100, max_bytes=50_000)
    assert [m for b in batches for m in b] == messages
    assert all(len(b) <= 100 and sum(len(json.dumps(m)) + 1 for m in b) <= 50_000 for b in batches)
    assert transfer.make_batches(messages, max_count=100, max_bytes=50_000) == batches
    assert [len(b) for b in transfer.make_batches(messages)] == [100] * 10


def test_batch_keys_follow_the_file_and_its_options():
    one = transfer.import_id(b"a", {}, 100)
    assert one == transfer.import_id(b"a", {}, 100)
    assert (
        len(
            {
                one,
                transfer.import_id(b"b", {}, 100),
                transfer.import_id(b"a", {"user": "x"}, 100),
                transfer.import_id(b"a", {}, 50),
            }
        )
        == 4
    )
    assert transfer.batch_key(one, 3) == transfer.batch_key(one, 3) != transfer.batch_key(one, 4)
    assert len(transfer.batch_key(one, 10**6)) <= 255


def test_the_usage_table_aligns_its_numbers_and_says_the_budget():
    answer = {
        "workspace_id": "w",
        "from": "2026-03-01",
        "to": "2026-03-02",
        "usage": [
            {
                "day": "2026-03-01",
                "role": "derive",
                "model": "m",
                "calls": 12,
                "input_tokens": 123456,
                "cached_input_tokens": 1024,
                "output_tokens": 789,
            },
            {
                "day": "2026-03-02",
                "role": "embed",
                "model": "text-embedding-3-small",
                "calls": 1,
                "input_tokens": 7,
                "cached_input_tokens": 0,
                "output_tokens": 0,
            },
        ],  # fmt: skip
        "totals": {"calls": 13, "input_tokens": 123463, "cached_input_tokens": 1024, "output_tokens": 789},
        "budget": {"monthly_token_budget": None, "month": "2026-03", "spent": 124252, "paused": None},
    }
    assert render.usage_table(answer) == [
        "usage of workspace 'w', 2026-03-01 to 2026-03-02",
        "day         role    model                   calls    input  cached  output",
        "----------  ------  ----------------------  -----  -------  ------  ------",
        "2026-03-01  derive  m                          12  123,456   1,024     789",
        "2026-03-02  embed   text-embedding-3-small      1        7       0       0",
        "----------  ------  ----------------------  -----  -------  ------  ------",
        "total                                          13  123,463   1,024     789",
        "2026-03: 124,252 tokens spent, no monthly token budget",
    ]
    budgeted = {**answer, "usage": [], "budget": {**answer["budget"], "monthly_token_budget": 1000, "paused": "x"}}
    assert render.usage_table(budgeted)[1:] == [
        "no model calls",
        "2026-03: 124,252 of 1,000 tokens of the monthly budget spent",
        "derivation paused: the monthly token budget is spent (it resumes next month or when raised)",
    ]
