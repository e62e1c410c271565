"""`precis import` and `precis export` against the local stack: 1,500 messages, a crash halfway and a resume with
nothing lost or doubled; a re-run without the state file; a round trip into another session; OpenAI files."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner
from precis_cli.cli import main

from tests.stack import Stack

pytestmark = pytest.mark.stack
# The deriver would share the one moto server with 1,500 imported messages; this module tests the import alone.
STACK_ENV = {"PRECIS_LOCAL_IDLE": "DeriveFunction"}
PRECIS = Path(sys.executable).with_name("precis")
STOP_WAIT_S = 120
STALL_S = 600  # no batch done for this long: the import is stuck (a batch takes well under a second)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """The local stack (as conftest's), given longer to stop: after 1,500 messages its moto holds gigabytes (moto
    deep-copies the whole table for every TransactWriteItems) and exiting takes longer than Stack.stop waits."""
    running = Stack(tmp_path_factory.mktemp("stack"), env=STACK_ENV)
    try:
        running.wait_healthy()
        yield running
    finally:
        if running.proc.poll() is None:
            running.proc.send_signal(signal.SIGTERM)
        try:
            running.proc.wait(timeout=STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            running.proc.kill()
            raise


@pytest.fixture
def env(stack, tmp_path):
    return {
        "PRECIS_URL": stack.url,
        "PRECIS_STATE_DIR": str(tmp_path / "state"),
        "PRECIS_KEY": None,
        "PRECIS_WORKSPACE": None,
    }


def precis(env, *args):
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def precis_process(env, outputs: Path, *args) -> subprocess.Popen:
    """`precis` as a process of its own, its stdout and stderr in files under `outputs` (a pipe nobody reads while
    the test polls could fill and stall it)."""
    assert PRECIS.exists(), f"{PRECIS} is missing: `make dev` or `pip install -e . --no-deps` installs it"
    full = {k: v for k, v in {**os.environ, **env}.items() if v is not None}
    outputs.mkdir()
    with open(outputs / "stdout", "w") as stdout, open(outputs / "stderr", "w") as stderr:
        return subprocess.Popen([str(PRECIS), *args], env=full, stdout=stdout, stderr=stderr, text=True)


def output(outputs: Path) -> tuple[str, str]:
    return (outputs / "stdout").read_text(), (outputs / "stderr").read_text()


def conversation(n: int, tag: str = "") -> list[dict]:
    """n messages in runs of 1-4, some with metadata and a client timestamp."""
    lines = []
    for i in range(n):
        line = {
            "peer_id": "alice" if i % 3 else "assistant",
            "content": f"{tag}message {i}: the flat in Lisbon, floor {i % 9}, {i * 13 % 1000} euros",
            "run_id": f"run-{i // 4}" if i % 5 else None,
        }
        if i % 7 == 0:
            line["metadata"] = {"i": i, "tags": ["imported"]}
        if i % 11 == 0:
            line["created_at"] = f"2025-03-01T12:{i % 60:02d}:00+00:00"
        lines.append(line)
    return lines


def write_jsonl(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def exported(env, ws: str, session: str) -> list[dict]:
    result = precis(env, "export", "-w", ws, session)
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines()]


def as_imported(line: dict) -> tuple:
    """What an import stores of a line (a line without `created_at` gets the time it is stored)."""
    return line["peer_id"], line["content"], line.get("run_id"), line.get("metadata") or {}


def assert_stored_as(stored: list[dict], lines: list[dict]) -> None:
    assert [as_imported(m) for m in stored] == [as_imported(line) for line in lines]
    given = [
        (m["created_at"], line["created_at"]) for m, line in zip(stored, lines, strict=True) if line.get("created_at")
    ]
    assert given and all(stored_at == line_at for stored_at, line_at in given)


def state_done(state_dir: Path) -> int:
    for path in (state_dir / "imports").glob("*.json"):
        try:
            return json.loads(path.read_text())["done"]
        except (OSError, ValueError, KeyError):
            return 0
    return 0


def test_a_rerun_without_its_state_replays_every_batch_by_its_key(env, tmp_path):
    source = write_jsonl(tmp_path / "part.jsonl", conversation(1_000, "replayed "))
    first = precis(env, "import", "-w", "rerun", "s2", str(source), "--max-batches", "4")
    assert first.exit_code == 0, first.output
    assert first.stdout == (
        "imported 400 messages in 4 batches, 0 already there; 600 to go (run the same command again to continue)\n"
    )
    shutil.rmtree(env["PRECIS_STATE_DIR"])  # forget what was done: only the Idempotency-Keys remain

    second = precis(env, "import", "-w", "rerun", "s2", str(source))
    assert second.exit_code == 0, second.output
    assert second.stdout == "imported 600 messages in 6 batches, 400 already there\n"
    stored = exported(env, "rerun", "s2")
    assert [m["content"] for m in stored] == [m["content"] for m in conversation(1_000, "replayed ")]


def test_export_then_import_into_another_session_round_trips(env, tmp_path):
    lines = conversation(250, "round ")
    assert precis(env, "import", "-w", "trip", "a", str(write_jsonl(tmp_path / "a.jsonl", lines))).exit_code == 0
    out = tmp_path / "a-export.jsonl"
    result = precis(env, "export", "-w", "trip", "a", "-o", str(out))
    assert result.exit_code == 0 and result.stderr == f"exported 250 messages to {out}\n"

    result = precis(env, "import", "-w", "trip", "b", str(out))
    assert result.exit_code == 0 and result.stdout == "imported 250 messages in 3 batches, 0 already there\n"
    a, b = exported(env, "trip", "a"), exported(env, "trip", "b")
    assert_stored_as(a, lines)
    assert_stored_as(b, a)  # every created_at too
    assert [m["token_count"] for m in b] == [m["token_count"] for m in a]


def test_openai_messages_import_with_a_peer_map(env, tmp_path):
    chat = {
        "messages": [
            {"role": "system", "content": "You help people move."},
            {"role": "user", "content": "I moved to Lisbon."},
            {"role": "assistant", "content": [{"type": "text", "text": "How is the flat?"}]},
        ]
    }
    source = tmp_path / "chat.jsonl"
    source.write_text(json.dumps(chat) + "\n" + json.dumps(chat) + "\n")
    result = precis(env, "import", "-w", "openai", "s1", str(source), "--peer-map", "user=alice,assistant=bot")
    assert result.exit_code == 0 and result.stdout == "imported 6 messages in 1 batches, 0 already there\n"
    assert [(m["peer_id"], m["content"]) for m in exported(env, "openai", "s1")] == [
        ("system", "You help people move."),
        ("alice", "I moved to Lisbon."),
        ("bot", "How is the flat?"),
    ] * 2


def test_a_bad_line_is_refused_before_anything_is_posted(env, tmp_path):
    source = tmp_path / "bad.jsonl"
    source.write_text('{"peer_id": "alice", "content": "fine"}\n{"peer_id": "alice"}\n')
    result = precis(env, "import", "-w", "bad", "s1", str(source))
    assert result.exit_code == 2 and result.stderr == "Error: line 2: content must be a string\n"
    export = precis(env, "export", "-w", "bad", "s1")
    assert (export.exit_code, export.stdout) == (1, ""), export.stderr
    assert export.stderr == "Error: 404 Not Found: session 's1' not found in workspace 'bad'\n"  # nothing was created
    workspaces = httpx.post(f"{env['PRECIS_URL']}/v3/workspaces/list", json={}, timeout=30).json()["items"]
    assert "bad" not in [w["id"] for w in workspaces]


def wait_for_batches(process: subprocess.Popen, state_dir: Path, wanted: int) -> int:
    """Batches done (the import's state file) once `wanted` are or the process has ended. Waits on progress, not on
    the clock: a slow machine only slows it; it fails when no batch at all is done for STALL_S (a stuck import)."""
    done, moved = state_done(state_dir), time.monotonic()
    while done < wanted and process.poll() is None:
        time.sleep(0.05)
        now = state_done(state_dir)
        if now != done:
            done, moved = now, time.monotonic()
        assert time.monotonic() - moved < STALL_S, f"no batch done in {STALL_S} s (stuck after {done})"
    return done


def ended(process: subprocess.Popen) -> None:
    """The child is gone, whatever happened: a leftover import would keep posting into the next test's stack."""
    if process.poll() is None:
        process.kill()
    process.wait()


# ~50 s idle (~160 s with moto's table copies); the timeout is a hang guard only: the test waits on progress.
@pytest.mark.timeout(3600)
def test_import_of_1500_messages_killed_halfway_resumes_with_nothing_lost_or_doubled(env, tmp_path):
    # (1,500: each post indexes its words before answering, and the local stack's moto takes ~1.5 s a batch of 100;
    # killed after a third of the batches, the resumed run still has most of them to do)
    lines = conversation(1_500)
    source = write_jsonl(tmp_path / "big.jsonl", lines)
    # The summarizer is tested elsewhere; here it would only compete with the import for the local stack's moto.
    assert precis(env, "config", "set", "-w", "bulk", "summary.enabled=false").exit_code == 0
    state_dir = Path(env["PRECIS_STATE_DIR"])

    started = time.monotonic()
    first = precis_process(env, tmp_path / "first", "import", "-w", "bulk", "s1", str(source))
    try:
        assert wait_for_batches(first, state_dir, 5) >= 5 and first.poll() is None, output(tmp_path / "first")
        first.send_signal(signal.SIGKILL)  # a crash: no clean-up, a batch possibly in flight
    finally:
        ended(first)
    done_before = state_done(state_dir)
    assert 5 <= done_before < 15

    second = precis_process(env, tmp_path / "second", "import", "-w", "bulk", "s1", str(source))
    try:
        wait_for_batches(second, state_dir, 10**9)  # until it ends
    finally:
        ended(second)
    elapsed = time.monotonic() - started
    out, err = output(tmp_path / "second")
    assert second.returncode == 0, err
    summary = out.strip().splitlines()[-1]
    imported, batches, already = (int(w) for w in summary.replace(",", "").split() if w.isdigit())
    assert imported + already == 1_500 and already >= done_before * 100 and batches == imported // 100
    assert summary == f"imported {imported} messages in {batches} batches, {already} already there"
    assert "importing" in err  # the progress bar's label (not a terminal: no bar drawn)

    export_started = time.monotonic()
    stored = exported(env, "bulk", "s1")
    export_s = time.monotonic() - export_started
    assert [m["seq"] for m in stored] == list(range(1, 1_501))
    assert_stored_as(stored, lines)
    print(
        f"\n1,500-message import, killed after {done_before} batches and resumed: {elapsed:.1f} s; "
        f"export: {export_s:.1f} s"
    )

    again = precis(env, "import", "-w", "bulk", "s1", str(source))  # done already: nothing is posted
    assert again.exit_code == 0 and again.stdout == "imported 0 messages in 0 batches, 1500 already there\n"
