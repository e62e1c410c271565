"""The `precis` command against the local stack (keys checked): settings, keys, context, summaries, tail, errors.

Fast cases run in-process through click's CliRunner; the installed entry point runs as a real subprocess where a
terminal's view matters (no TTY: plain output), for `tail` and its Ctrl-C, and for the help of every command.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner
from precis_cli.cli import main

from precis.auth import mint_key
from precis.configuration import retention_days, summary_config
from precis.errors import Invalid
from precis.webhooks.event_types import EVENT_TYPES
from tests.stack import free_port, wait_for

pytestmark = pytest.mark.stack
SECRET = "cli-test-secret-0123456789abcdef"
STACK_ENV = {"PRECIS_AUTH": "true", "PRECIS_JWT_SECRET": SECRET}
ADMIN = mint_key(SECRET, admin=True)
PRECIS = Path(sys.executable).with_name("precis")


@pytest.fixture
def env(stack, tmp_path):
    return {
        "PRECIS_URL": stack.url,
        "PRECIS_KEY": ADMIN,
        "PRECIS_STATE_DIR": str(tmp_path / "state"),
        "PRECIS_WORKSPACE": None,
        "NO_COLOR": None,
    }


def precis(env, *args):
    """The command in-process (click's runner): its result, stdout and stderr apart."""
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def precis_process(env, *args, **kwargs) -> subprocess.Popen:
    """The installed `precis` entry point as a subprocess (stdout and stderr piped: not a terminal)."""
    assert PRECIS.exists(), f"{PRECIS} is missing: `make dev` or `pip install -e . --no-deps` installs it"
    full = {k: v for k, v in {**os.environ, **env}.items() if v is not None}
    return subprocess.Popen(
        [str(PRECIS), *args], env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs
    )


def run_process(env, *args, timeout: float = 60) -> tuple[int, str, str]:
    proc = precis_process(env, *args)
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def api(stack, method: str, path: str, **kwargs):
    response = httpx.request(
        method, f"{stack.url}{path}", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30, **kwargs
    )
    response.raise_for_status()
    return response.json() if response.content else None


def post_messages(stack, ws: str, session: str, texts: list[str]) -> None:
    api(stack, "POST", "/v3/workspaces", json={"id": ws})
    for start in range(0, len(texts), 100):
        batch = [
            {"peer_id": "alice" if i % 2 else "bot", "content": t}
            for i, t in enumerate(texts[start : start + 100], start)
        ]
        api(stack, "POST", f"/v3/workspaces/{ws}/sessions/{session}/messages", json={"messages": batch})


def workspace_configuration(stack, ws: str) -> dict | None:
    items = api(stack, "POST", "/v3/workspaces/list", json={"filters": {"id": ws}})["items"]
    return items[0]["configuration"] if items else None


# ---------------------------------------------------------------- help, usage, reaching the service


@pytest.mark.parametrize(
    "command",
    [
        [],
        ["config"],
        ["config", "get"],
        ["config", "set"],
        ["keys"],
        ["keys", "mint"],
        ["context"],
        ["summaries"],
        ["usage"],
        ["tail"],
        ["import"],
        ["export"],
        ["webhooks"],
        ["webhooks", "list"],
        ["webhooks", "create"],
        ["webhooks", "delete"],
        ["webhooks", "rotate"],
        ["webhooks", "deliveries"],
        ["webhooks", "test"],
        ["messages"],
        ["messages", "delete"],
    ],
)
def test_every_command_has_help(command):
    result = CliRunner().invoke(main, [*command, "--help"])
    assert result.exit_code == 0 and result.output.startswith("Usage: precis")


def test_the_installed_entry_point_runs():
    code, out, _ = run_process({}, "--help")
    assert code == 0 and all(c in out for c in ("config", "keys", "context", "summaries", "tail", "import", "export"))


@pytest.mark.parametrize(
    "args, says",
    [
        (
            ["context", "s1", "--tokens", "0"],
            "Invalid value for '-t' / '--tokens': 0 is not in the range 1<=x<=100000.",
        ),
        (["context", "s1"], "Missing option '-t' / '--tokens'."),
        (["config", "set", "novalue"], "'novalue': expected key=value (e.g. strategy=rolling)"),
        (
            ["config", "set", "deriver.batch=3"],
            "'deriver.batch': a setting is key, summarizer.key, summary.key or retention.days",
        ),
        (
            ["import", "s1", "/no/such/file.jsonl"],
            "Invalid value for 'FILE': File '/no/such/file.jsonl' does not exist.",
        ),
        (["keys", "mint", "--admin", "--session", "s1"], "--admin cannot be combined with --peer or --session"),
        (
            ["webhooks", "create", "https://example.com/h", "-e", "message.created"],
            "Invalid value for '-e' / '--event-type': 'message.created' is not one of "
            + ", ".join(f"'{t}'" for t in EVENT_TYPES)
            + ".",
        ),
        (
            ["keys", "mint", "--expires", "soon"],
            "Invalid value for --expires: a duration (30m, 12h, 7d) or an ISO 8601 time",
        ),
    ],
)
def test_usage_errors_exit_2_before_anything_is_sent(args, says):
    unreachable = {"PRECIS_URL": f"http://127.0.0.1:{free_port()}"}  # any request would be exit 1 instead
    result = CliRunner().invoke(main, args, env=unreachable)
    assert (result.exit_code, result.output.strip().splitlines()[-1]) == (2, f"Error: {says}"), result.output


def test_no_service_at_the_url_is_one_clear_line():
    url = f"http://127.0.0.1:{free_port()}"
    result = precis({"PRECIS_URL": url}, "summaries", "s1")
    assert result.exit_code == 1
    assert result.stderr == f"Error: no Precis at {url} (is `make dev` running?)\n"


def test_the_running_stack_is_found_through_its_announcement(stack, env):
    assert f"export PRECIS_URL={stack.url}" in stack.log.read_text()  # what `make dev` prints about the command
    announced = {**env, "PRECIS_URL": None, "PRECIS_DEV_JSON": str(stack.dev_json)}
    result = precis(announced, "config", "set", "-w", "found", "keep_runs=4")
    assert result.exit_code == 0, result.output
    assert workspace_configuration(stack, "found") == {"summarizer": {"keep_runs": 4}}


# ---------------------------------------------------------------- service errors: one line, exit 1


def test_service_refusals_are_one_line_with_the_services_detail(stack, env):
    post_messages(stack, "errs", "mine", ["hello"])
    session_key = precis(env, "keys", "mint", "-w", "errs", "--session", "mine").stdout.strip()

    assert precis({**env, "PRECIS_KEY": session_key}, "summaries", "-w", "errs", "mine").exit_code == 0
    cases = [
        ({"PRECIS_KEY": session_key}, ["summaries", "-w", "errs", "other"], "403 Forbidden: "),
        ({"PRECIS_KEY": "not-a-key"}, ["summaries", "-w", "errs", "mine"], "401 Unauthorized: "),
        ({}, ["summaries", "-w", "errs", "nosuch"], "404 Not Found: session 'nosuch' not found"),
        ({}, ["context", "-w", "errs", "bad id", "--tokens", "10"], "Error: 4"),
    ]
    for extra, args, expected in cases:
        result = precis({**env, **extra}, *args)
        assert result.exit_code == 1, (args, result.output)
        assert expected in result.stderr and result.stderr.count("\n") == 1, result.stderr
        assert "Traceback" not in result.output


# ---------------------------------------------------------------- config


def test_config_set_and_get_typed_values_for_a_workspace_and_its_session(stack, env):
    result = precis(
        env,
        "config",
        "set",
        "-w",
        "cfg",
        "strategy=rolling",
        "token_threshold=4000",
        "temperature=0.2",
        "summary.enabled=true",
        "instructions=Keep names.",
        "model=gpt-4o-mini",
    )
    assert result.exit_code == 0, result.output
    stored = workspace_configuration(stack, "cfg")
    assert stored == {
        "summarizer": {
            "strategy": "rolling",
            "token_threshold": 4000,
            "temperature": 0.2,
            "instructions": "Keep names.",
            "model": "gpt-4o-mini",
        },
        "summary": {"enabled": True},
    }
    got = json.loads(precis(env, "config", "get", "-w", "cfg").stdout)
    assert got["summarizer"] == stored["summarizer"] and got["summary"] == stored["summary"]
    assert got["effective"] == summary_config(stored).model_dump(mode="json")

    result = precis(env, "config", "set", "-w", "cfg", "-s", "s1", "keep_recent_runs=2", "model=null")
    assert result.exit_code == 0, result.output
    got = json.loads(precis(env, "config", "get", "-w", "cfg", "--session", "s1").stdout)
    assert got["session"] == "s1" and got["summarizer"] == {"keep_recent_runs": 2}
    assert got["effective"]["strategy"] == "rolling" and got["effective"]["keep_recent_runs"] == 2  # merged

    assert precis(env, "config", "set", "-w", "cfg", "model=null").exit_code == 0
    assert "model" not in workspace_configuration(stack, "cfg")["summarizer"]


def test_config_get_of_what_does_not_exist_is_an_error(env):
    result = precis(env, "config", "get", "-w", "never-made")
    assert result.exit_code == 1 and "workspace 'never-made' not found" in result.stderr


def _layer_says(workspace, session=None) -> str:
    with pytest.raises(Invalid) as refused:
        summary_config(workspace, session)
    return refused.value.detail


def test_an_invalid_setting_exits_2_with_the_layers_message_and_sends_nothing(stack, env):
    assert precis(env, "config", "set", "-w", "strict", "token_threshold=1000").exit_code == 0

    result = precis(env, "config", "set", "-w", "strict", "token_threshold=5")
    assert result.exit_code == 2
    assert result.stderr == f"Error: {_layer_says({'summarizer': {'token_threshold': 5}})}\n"
    assert "token_threshold" in result.stderr
    assert workspace_configuration(stack, "strict") == {"summarizer": {"token_threshold": 1000}}

    # A session's settings are checked merged with its workspace's, as the service does.
    precis(env, "config", "set", "-w", "strict", "messages_per_short_summary=30")
    result = precis(env, "config", "set", "-w", "strict", "-s", "s1", "messages_per_long_summary=25")
    assert result.exit_code == 2
    expected = _layer_says(
        {"summarizer": {"token_threshold": 1000, "messages_per_short_summary": 30}},
        {"summarizer": {"messages_per_long_summary": 25}},
    )
    assert result.stderr == f"Error: {expected}\n"
    assert api(stack, "POST", "/v3/workspaces/strict/sessions/list")["items"] == []  # not even created

    result = precis(env, "config", "set", "-w", "fresh-ws", "strategy=sometimes")
    assert result.exit_code == 2 and "configuration.summarizer.strategy" in result.stderr
    assert workspace_configuration(stack, "fresh-ws") is None


def session_configuration(stack, ws: str, session: str) -> dict | None:
    items = api(stack, "POST", f"/v3/workspaces/{ws}/sessions/list", json={"filters": {"id": session}})["items"]
    return items[0]["configuration"] if items else None


def test_config_sets_shows_and_clears_retention_days_at_a_workspace_and_its_sessions(stack, env):
    result = precis(env, "config", "set", "-w", "kept", "retention.days=30", "keep_runs=4")
    assert result.exit_code == 0, result.output
    assert workspace_configuration(stack, "kept") == {"retention": {"days": 30}, "summarizer": {"keep_runs": 4}}
    got = json.loads(precis(env, "config", "get", "-w", "kept").stdout)
    assert got["retention"] == {"days": 30} and got["effective_retention"] == {"days": 30}

    # A session's 0 keeps its messages whatever the workspace says; another session's own value wins.
    assert precis(env, "config", "set", "-w", "kept", "-s", "s1", "retention.days=0").exit_code == 0
    assert precis(env, "config", "set", "-w", "kept", "-s", "s2", "retention.days=7").exit_code == 0
    assert session_configuration(stack, "kept", "s1") == {"retention": {"days": 0}}
    got = json.loads(precis(env, "config", "get", "-w", "kept", "-s", "s1").stdout)
    assert got["retention"] == {"days": 0} and got["effective_retention"] == {"days": None}
    got = json.loads(precis(env, "config", "get", "-w", "kept", "-s", "s2").stdout)
    assert got["retention"] == {"days": 7} and got["effective_retention"] == {"days": 7}

    # null removes the setting: the session inherits the workspace's, the workspace keeps for ever.
    result = precis(env, "config", "set", "-w", "kept", "-s", "s1", "retention.days=null")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["effective_retention"] == {"days": 30}
    assert "retention" not in (session_configuration(stack, "kept", "s1") or {})
    got = json.loads(precis(env, "config", "get", "-w", "kept", "-s", "s1").stdout)
    assert got["retention"] == {} and got["effective_retention"] == {"days": 30}
    assert precis(env, "config", "set", "-w", "kept", "retention.days=null").exit_code == 0
    assert workspace_configuration(stack, "kept") == {"summarizer": {"keep_runs": 4}}
    got = json.loads(precis(env, "config", "get", "-w", "kept", "-s", "s2").stdout)
    assert got["effective_retention"] == {"days": 7}


def _retention_says(configuration) -> str:
    with pytest.raises(Invalid) as refused:
        retention_days(configuration)
    return refused.value.detail


@pytest.mark.parametrize(
    ("assignment", "section"),
    [
        ("retention.days=-1", {"days": -1}),
        ("retention.days=36501", {"days": 36501}),
        ("retention.days=thirty", {"days": "thirty"}),
        ("retention.days=1.5", {"days": 1.5}),
        ("retention.days=true", {"days": True}),
        ("retention.hours=3", {"hours": 3}),
    ],
)
def test_a_bad_retention_exits_2_with_the_layers_message_and_sends_nothing(stack, env, assignment, section):
    result = precis(env, "config", "set", "-w", "unkept", assignment)
    assert result.exit_code == 2
    assert result.stderr == f"Error: {_retention_says({'retention': section})}\n"
    assert "configuration.retention." in result.stderr
    assert workspace_configuration(stack, "unkept") is None

    assert precis(env, "config", "set", "-w", "unkept-s", "retention.days=3").exit_code == 0
    result = precis(env, "config", "set", "-w", "unkept-s", "-s", "s1", assignment)
    assert result.exit_code == 2 and "configuration.retention." in result.stderr
    assert session_configuration(stack, "unkept-s", "s1") is None  # not even created


# ---------------------------------------------------------------- keys


def test_keys_mint_scoped_keys(stack, env):
    post_messages(stack, "keyed", "s1", ["hi"])
    api(stack, "POST", "/v3/workspaces/keyed/sessions/s1/peers", json={"alice": {}})
    peer_key = precis(env, "keys", "mint", "-w", "keyed", "--peer", "alice", "--expires", "1h").stdout.strip()
    workspace_key = precis(env, "keys", "mint", "-w", "keyed").stdout.strip()
    admin_key = precis(env, "keys", "mint", "--admin").stdout.strip()
    assert peer_key.count(".") == workspace_key.count(".") == admin_key.count(".") == 2
    assert precis({**env, "PRECIS_KEY": workspace_key}, "export", "-w", "keyed", "s1").exit_code == 0
    assert precis({**env, "PRECIS_KEY": peer_key}, "export", "-w", "keyed", "s1").exit_code == 0  # alice is in it
    assert precis({**env, "PRECIS_KEY": admin_key}, "keys", "mint", "-w", "other").exit_code == 0
    refused = precis({**env, "PRECIS_KEY": workspace_key}, "keys", "mint", "-w", "keyed")
    assert refused.exit_code == 1 and "403 Forbidden: this route needs an admin key" in refused.stderr


# ---------------------------------------------------------------- context, summaries, tail


def test_context_draws_the_budget_bar_with_its_numbers(stack, env):
    texts = [f"message {i}: the rent in Lisbon was {i * 10} euros" for i in range(30)]
    post_messages(stack, "ctx", "s1", texts[:20])
    wait_for(lambda: json.loads(precis(env, "summaries", "-w", "ctx", "s1", "--json").stdout)["short_summary"], 30)
    post_messages(stack, "ctx", "s1", texts[20:])  # after the summary of 1-20
    answer = json.loads(precis(env, "context", "-w", "ctx", "s1", "--tokens", "1000", "--json").stdout)
    summary = answer["summary"]["token_count"]
    messages = sum(m["token_count"] for m in answer["messages"])
    assert summary > 0 and messages > 0

    code, out, err = run_process(env, "context", "-w", "ctx", "s1", "--tokens", "1000")  # a pipe: plain
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"context: {summary + messages:,} of 1,000 tokens"
    assert lines[1].startswith("[=") and lines[1].endswith("]") and "#" in lines[1] and "\x1b[" not in out
    assert lines[2] == (
        f"= summary {summary:,}  # messages {messages:,} in {len(answer['messages'])} messages  "
        f". unused {1000 - summary - messages:,}"
    )
    assert "short summary (honcho_chat_summary_short) · covers messages 1–20" in out
    assert all(m["content"] in out for m in answer["messages"])

    coloured = precis(env, "context", "-w", "ctx", "s1", "--tokens", "1000", "--color")
    assert "\x1b[" in coloured.stdout
    assert "\x1b[" not in precis(env, "context", "-w", "ctx", "s1", "--tokens", "1000").stdout  # not a TTY

    no_summary = precis(env, "context", "-w", "ctx", "s1", "--tokens", "1000", "--no-summary").stdout
    assert "= summary 0 " in no_summary and "short summary" not in no_summary


def test_tail_sees_a_summary_appear(stack, env):
    tail = precis_process(env, "tail", "-w", "tailed", "s1", "--count", "1", "--interval", "0.2")
    try:
        post_messages(stack, "tailed", "s1", [f"turn {i}: we planned the move to Lisbon" for i in range(20)])
        out, err = tail.communicate(timeout=60)
    finally:
        tail.kill()
    assert tail.returncode == 0, err
    assert "short summary (honcho_chat_summary_short) · covers messages 1–20" in out
    assert "turn" in out  # its text
    shown = precis(env, "summaries", "-w", "tailed", "s1").stdout
    assert "covers messages 1–20" in shown
    once = precis(env, "tail", "-w", "tailed", "s1", "--once")
    assert once.exit_code == 0 and "covers messages 1–20" in once.stdout


def test_tail_ends_cleanly_on_ctrl_c(env):
    tail = precis_process(env, "tail", "-w", "quiet", "nobody-yet", "--interval", "0.1")
    try:
        # Polling once it says so (a signal during the interpreter's start would be another story).
        assert select.select([tail.stderr], [], [], 120)[0], "tail never started polling"
        said = tail.stderr.readline()
        assert said.startswith("waiting for session 'nobody-yet'"), said
        tail.send_signal(signal.SIGINT)
        _, err = tail.communicate(timeout=60)
    finally:
        tail.kill()
        tail.wait()
    assert tail.returncode == 0 and "Traceback" not in err, err


def seed_usage(stack, ws: str, spent: dict) -> None:
    """Usage items in the stack's table, written as an invocation's end writes them (precis.store.usage)."""
    import boto3

    from precis.store import usage
    from precis.store.db import Db

    endpoint = json.loads(stack.dev_json.read_text())["moto_endpoint"]
    client = boto3.client("dynamodb", endpoint_url=endpoint, region_name="us-east-1")
    db = Db(client=client, s3=None, table=os.environ["TABLE_NAME"], bucket="")  # type: ignore[arg-type]
    assert usage.write(db, spent) == 0


def test_usage_prints_a_workspace_s_tokens_by_day_role_and_model_and_its_budget(stack, env):
    from datetime import UTC, datetime

    from precis.llm.meter import Key, Spend

    today = datetime.now(UTC).date().isoformat()
    api(
        stack,
        "POST",
        "/v3/workspaces",
        json={"id": "metered", "configuration": {"usage": {"monthly_token_budget": 2000}}},
    )
    seed_usage(
        stack,
        "metered",
        {
            Key("metered", today, "derive", "gpt-4o-mini"): Spend(3, 1500, 1024, 120),
            Key("metered", today, "card", "gpt-4o-mini"): Spend(1, 400, 0, 30),
        },
    )
    seed_usage(stack, "metered", {Key("metered", today, "derive", "gpt-4o-mini"): Spend(1, 10, 0, 2)})  # a shard more
    result = precis(env, "usage", "metered")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"usage of workspace 'metered', {today[:8]}01 to {today}"
    assert lines[1].split() == ["day", "role", "model", "calls", "input", "cached", "output"]
    assert lines[3].split() == [today, "card", "gpt-4o-mini", "1", "400", "0", "30"]
    assert lines[4].split() == [today, "derive", "gpt-4o-mini", "4", "1,510", "1,024", "122"]
    assert lines[6].split() == ["total", "5", "1,910", "1,024", "152"]
    assert lines[7] == f"{today[:7]}: 2,062 of 2,000 tokens of the monthly budget spent"
    assert lines[8].startswith("derivation paused")
    answer = json.loads(precis(env, "usage", "-w", "metered", "--json").stdout)
    assert answer["budget"]["paused"] == "token_budget" and len(answer["usage"]) == 2
    assert precis(env, "usage", "metered", "--from", "2026-02-30").exit_code == 2
    empty = precis(env, "usage", "metered", "--from", "2020-01-01", "--to", "2020-01-31").stdout.splitlines()
    assert empty[1] == "no model calls"


# ---------------------------------------------------------------- webhooks


def test_webhooks_create_list_rotate_deliveries_delete(stack, env):
    import time

    from local.moto_backend import client
    from precis.webhooks import delivery
    from tests.webhooks.receiver import Receiver

    api(stack, "POST", "/v3/workspaces", json={"id": "hooks"})
    rx = Receiver()
    try:
        made = precis(env, "webhooks", "create", "-w", "hooks", rx.url, "-e", "summary.created", "-e", "queue.empty")
        assert made.exit_code == 0, made.output
        endpoint = json.loads(made.stdout)
        assert endpoint["secret"].startswith("whsec_") and endpoint["event_types"] == ["queue.empty", "summary.created"]
        rx.secrets = [endpoint["secret"]]
        listed = precis(env, "webhooks", "list", "-w", "hooks").stdout.splitlines()
        assert listed[0].split() == ["id", "state", "events", "url"]
        assert listed[1].split() == [endpoint["id"], "enabled", "queue.empty,summary.created", rx.url]
        rotation = precis(env, "webhooks", "rotate", "-w", "hooks", endpoint["id"])
        assert rotation.exit_code == 0, rotation.output  # (failed once under a full run's load: say how)
        rotated = json.loads(rotation.stdout)
        assert rotated["secret"] != endpoint["secret"] and rotated["previous_secret_expires_at"] > time.time()
        empty = precis(env, "webhooks", "deliveries", "-w", "hooks", endpoint["id"])
        assert empty.stdout == "no deliveries in the last 3 days\n"

        sqs = client("sqs", json.loads(stack.dev_json.read_text())["moto_endpoint"])
        msg = delivery.message("hooks", endpoint["id"], "queue.empty", {"workspace_id": "hooks"}, event_id="e1", now=0)
        sqs.send_message(
            QueueUrl=sqs.get_queue_url(QueueName="precis-webhook-local")["QueueUrl"], MessageBody=json.dumps(msg)
        )
        wait_for(lambda: rx.accepted, 30)
        log = wait_for(
            lambda: (
                "delivered" in (out := precis(env, "webhooks", "deliveries", "-w", "hooks", endpoint["id"]).stdout)
                and out
            )
        )
        head, row = log.splitlines()
        assert head.split() == ["created", "id", "event", "status", "attempts", "http", "last", "error"]
        assert row.split() == ["1970-01-01T00:00:00.000Z", msg["id"], "queue.empty", "delivered", "1", "204"]

        assert precis(env, "webhooks", "delete", "-w", "hooks", endpoint["id"]).stdout == (
            f"deleted webhook endpoint {endpoint['id']}\n"
        )
        assert precis(env, "webhooks", "list", "-w", "hooks").stdout == "no webhook endpoints\n"
        gone = precis(env, "webhooks", "rotate", "-w", "hooks", endpoint["id"])
        assert gone.exit_code == 1 and "404 Not Found" in gone.stderr
    finally:
        rx.close()


# ---------------------------------------------------------------- messages


def test_messages_delete_removes_one_message_and_says_so(stack, env):
    api(stack, "POST", "/v3/workspaces", json={"id": "forget"})
    api(stack, "POST", "/v3/workspaces/forget/sessions", json={"id": "s1"})
    posted = api(
        stack,
        "POST",
        "/v3/workspaces/forget/sessions/s1/messages",
        json={"messages": [{"peer_id": "alice", "content": f"line {i}"} for i in range(3)]},
    )
    deleted = precis(env, "messages", "delete", "-w", "forget", "s1", posted[1]["id"])
    assert (deleted.exit_code, deleted.stdout) == (0, f"deleted message {posted[1]['id']} of session s1\n")
    left = api(stack, "POST", "/v3/workspaces/forget/sessions/s1/messages/list")
    assert [m["id"] for m in left["items"]] == [posted[0]["id"], posted[2]["id"]] and left["total"] == 2
    again = precis(env, "messages", "delete", "-w", "forget", "s1", posted[1]["id"])
    assert again.exit_code == 1 and "404 Not Found" in again.stderr


def test_peers_erase_waits_for_the_erasure_and_prints_its_receipt(stack, env):
    api(stack, "POST", "/v3/workspaces", json={"id": "erase"})
    api(stack, "POST", "/v3/workspaces/erase/sessions", json={"id": "s1", "peers": {"alice": {}, "zed": {}}})
    lines = [{"peer_id": p, "content": f"{p} says {i}"} for i in range(3) for p in ("alice", "zed")]
    api(stack, "POST", "/v3/workspaces/erase/sessions/s1/messages", json={"messages": lines})
    erased = precis(env, "peers", "erase", "-w", "erase", "zed")
    assert erased.exit_code == 0, erased.stderr
    assert erased.stdout.startswith("erased peer zed of workspace erase: ") and "3 messages" in erased.stdout
    left = api(stack, "POST", "/v3/workspaces/erase/sessions/s1/messages/list")
    assert [m["content"] for m in left["items"]] == [f"alice says {i}" for i in range(3)]
    peers = api(stack, "POST", "/v3/workspaces/erase/peers/list")
    assert [p["id"] for p in peers["items"]] == ["alice"]
    again = precis(env, "peers", "erase", "-w", "erase", "zed")  # the same erasure: its receipt
    assert (again.exit_code, again.stdout) == (0, erased.stdout)
