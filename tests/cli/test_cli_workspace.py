"""`precis export` and `precis import FILE -w NEW` of a whole workspace against the local stack (its stream's chaos
delivering every batch twice): the export job waited for and downloaded, the file uploaded and imported into a new
workspace that answers as the first; a workspace not empty, and a file that is not an export, refused."""

from __future__ import annotations

import json

import httpx
import pytest
from click.testing import CliRunner
from precis_cli.cli import main

from precis.auth import mint_key

pytestmark = pytest.mark.stack
SECRET = "cli-test-secret-0123456789abcdef"
STACK_ENV = {"PRECIS_AUTH": "true", "PRECIS_JWT_SECRET": SECRET}
ADMIN = mint_key(SECRET, admin=True)


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
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def api(stack, method: str, path: str, **kwargs):
    response = httpx.request(
        method, f"{stack.url}{path}", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30, **kwargs
    )
    response.raise_for_status()
    return response.json() if response.content else None


def listed(stack, path: str) -> list:
    items, page = [], 1
    while True:
        answer = api(stack, "POST", path, params={"page": page, "size": 100})
        items += answer["items"]
        if page >= answer["pages"]:
            return items
        page += 1


def stable_answers(stack, ws: str) -> dict:
    """What the API answers of the workspace that no background job changes (summaries may still be on their way)."""
    w = f"/v3/workspaces/{ws}"
    out = {
        "workspace": api(stack, "POST", "/v3/workspaces", json={"id": ws}),
        "peers": listed(stack, f"{w}/peers/list"),
        "sessions": listed(stack, f"{w}/sessions/list"),
        "conclusions": listed(stack, f"{w}/conclusions/list"),
        "card": api(stack, "GET", f"{w}/peers/alice/card", params={"target": "bot"}),
    }
    for session in out["sessions"]:
        out[session["id"]] = listed(stack, f"{w}/sessions/{session['id']}/messages/list")
        out[f"{session['id']} peers"] = api(stack, "GET", f"{w}/sessions/{session['id']}/peers")
    return json.loads(json.dumps(out).replace(f'"{ws}"', '"WS"'))


def test_a_workspace_exported_and_imported_by_the_command_answers_as_the_first(stack, env, tmp_path):
    w = "/v3/workspaces/cli-src"
    api(stack, "POST", "/v3/workspaces", json={"id": "cli-src", "metadata": {"team": "red"}})
    for session in ("s1", "s2"):
        api(stack, "POST", f"{w}/sessions", json={"id": session, "metadata": {"n": session}})
        for start in range(0, 150, 50):
            batch = [
                {
                    "peer_id": "alice" if i % 2 else "bot",
                    "content": f"{session} message {i}: the tide was {i % 7} metres",
                    "metadata": {"i": i},
                    "created_at": f"2026-02-01T08:{i // 60:02d}:{i % 60:02d}Z",
                }
                for i in range(start, start + 50)
            ]
            api(stack, "POST", f"{w}/sessions/{session}/messages", json={"messages": batch})
    api(
        stack,
        "POST",
        f"{w}/conclusions",
        json={"conclusions": [{"content": "Bot knows tides", "observer_id": "alice", "observed_id": "bot"}]},
    )
    api(stack, "PUT", f"{w}/peers/alice/card", params={"target": "bot"}, json={"peer_card": ["Bot: tides"]})
    before = stable_answers(stack, "cli-src")

    path = tmp_path / "cli-src.jsonl"
    exported = precis(env, "export", "-w", "cli-src", "--out", str(path))
    assert exported.exit_code == 0, exported.output
    assert "exported workspace cli-src" in exported.stderr and "300 messages" in exported.stderr
    lines = path.read_text().splitlines()
    assert json.loads(lines[0])["kind"] == "precis_export" and json.loads(lines[-1])["kind"] == "end"

    imported = precis(env, "import", str(path), "-w", "cli-dst")
    assert imported.exit_code == 0, imported.output
    assert "imported" in imported.stdout and "300 messages" in imported.stdout
    assert "importing:" in imported.stderr  # its progress, while it waited
    assert stable_answers(stack, "cli-dst") == before

    again = precis(env, "import", str(path), "-w", "cli-dst")
    assert again.exit_code == 1 and "new (or empty) workspace" in again.stderr


def test_a_file_that_is_not_a_workspace_export_is_refused_before_anything_is_sent(env, tmp_path):
    path = tmp_path / "chat.jsonl"
    path.write_text('{"peer_id": "alice", "content": "hi"}\n')
    refused = precis(env, "import", str(path), "-w", "cli-none")
    assert refused.exit_code == 2 and "not a workspace export" in refused.stderr
