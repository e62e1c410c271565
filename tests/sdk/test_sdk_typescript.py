"""Honcho's TypeScript SDK (@honcho-ai/sdk as published on npm, pinned in tests/sdk/ts/package-lock.json) driving
Precis through the local stack, under Node.js: workspaces, peers, sessions, messages, file upload, the context,
summaries, search, chat and its stream, conclusions, cards, the queue status, scopes and dreams.

Each file tests/sdk/ts/*.test.mjs (node:test) asserts what its calls answer; they run at once, each in a workspace of
its own. Then the last test checks that together they ran every public method and property of every class the
package exports. That is measured, not declared: Node writes V8's count of every function's calls when
NODE_V8_COVERAGE is set (nothing in the SDK or the tests is replaced or wrapped), and the classes and their members are
read from the package itself (tests/sdk/ts/surface.mjs), so a release that adds one fails here, naming it.

`make test` installs the package (`npm ci` in tests/sdk/ts, behind a stamp as the virtualenvs are).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from local.template import ROOT

pytestmark = pytest.mark.stack
STACK_ENV = {"PRECIS_LOCAL_SCHEDULE_S": "1"}

TS = ROOT / "tests" / "sdk" / "ts"
STAMP = TS / "node_modules" / ".installed"
SDK = TS / "node_modules" / "@honcho-ai" / "sdk"
FILES = sorted(path.name for path in TS.glob("*.test.mjs"))
RUN_TIMEOUT_S = 240  # a hang guard: together they take ~10 s


@dataclass(frozen=True)
class Run:
    returncode: int
    output: str


def _node() -> str:
    node = shutil.which("node")
    if node is None or not STAMP.exists():
        pytest.fail(
            "the TypeScript SDK is not installed: `make test` (or `make test-fast`) installs it, npm ci in "
            "tests/sdk/ts (Node.js 20 or later)"
        )
    return node


@pytest.fixture(scope="module")
def runs(stack, tmp_path_factory) -> tuple[dict[str, Run], Path]:
    """Every test file run once against the module's stack, all at once; their V8 coverage lands in one directory."""
    node = _node()
    coverage = tmp_path_factory.mktemp("v8-coverage")
    env = {**os.environ, "PRECIS_URL": stack.url, "NODE_V8_COVERAGE": str(coverage)}
    started = {
        name: subprocess.Popen(
            [node, "--test-reporter=spec", name],
            cwd=TS,
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for name in FILES
    }
    results = {}
    for name, process in started.items():
        try:
            output, _ = process.communicate(timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            output = process.communicate()[0] + f"\n(killed after {RUN_TIMEOUT_S} s)"
        results[name] = Run(process.returncode, output)
    return results, coverage


@pytest.mark.parametrize("name", FILES)
def test_the_typescript_sdk_against_the_stack(runs, name):
    run = runs[0][name]
    assert run.returncode == 0, f"node {name} failed:\n{run.output}"
    assert re.search(r"^ℹ fail 0$", run.output, re.M) and not re.search(r"^ℹ pass 0$", run.output, re.M), run.output


# ---------------------------------------------------------------- what ran


def _surface() -> dict[str, list[str]]:
    """Each exported class's public members (statics too), as the package itself lists them."""
    done = subprocess.run([_node(), "surface.mjs"], cwd=TS, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return {name: found["members"] + found["statics"] for name, found in json.loads(done.stdout).items()}


def _calls(coverage: Path) -> dict[Path, list[tuple[str, int, int]]]:
    """(function name, start offset, calls) of every function of the SDK's files, summed over the processes."""
    counted: dict[tuple[Path, str, int], int] = {}
    for report in coverage.glob("coverage-*.json"):
        for script in json.loads(report.read_text())["result"]:
            url = urlsplit(script["url"])
            if url.scheme != "file" or not unquote(url.path).startswith(str(SDK.resolve())):
                continue
            for function in script["functions"]:
                whole = function["ranges"][0]  # the function's own range; the others are blocks inside it
                key = (Path(unquote(url.path)), function["functionName"], whole["startOffset"])
                counted[key] = counted.get(key, 0) + whole["count"]
    calls: dict[Path, list[tuple[str, int, int]]] = {}
    for (path, name, start), count in counted.items():
        calls.setdefault(path, []).append((name, start, count))
    return calls


def _declarations(cls: str, members: list[str]) -> tuple[Path, dict[str, tuple[int, int]]]:
    """The compiled file that declares class `cls` and, for each member, the span of its declaration's head (from
    its indentation to its parameters' parenthesis): where V8 says the member's function starts."""
    for path in sorted((SDK / "dist").rglob("*.js")):
        source = path.read_text(encoding="utf-8")
        head = re.search(rf"^class {cls}\b.*$", source, re.M)
        if head:
            break
    else:
        raise AssertionError(f"no compiled file declares class {cls}")
    end = source.index("\n}", head.end())

    def utf16(index: int) -> int:  # V8's offsets count UTF-16 units
        return len(source[:index].encode("utf-16-le")) // 2

    spans = {}
    for member in members:
        declaration = re.compile(rf"^    (?:static )?(?:async )?(?:get |set )?\*?{re.escape(member)}\(", re.M)
        found = declaration.search(source, head.end(), end)
        assert found, f"{cls}.{member}: no declaration in {path.name}"
        spans[member] = (utf16(found.start()), utf16(found.end()))
    return path, spans


def test_every_public_member_of_every_class_of_the_sdk_ran(runs):
    results, coverage = runs
    failed = [name for name, run in results.items() if run.returncode != 0]
    calls = _calls(coverage)
    assert calls, f"no V8 coverage of the SDK under {coverage}"
    members, not_run = 0, []
    for cls, names in sorted(_surface().items()):
        path, spans = _declarations(cls, names)
        functions = calls.get(path.resolve(), [])
        for member, (start, end) in spans.items():
            members += 1
            count = sum(
                n
                for name, offset, n in functions
                if start <= offset <= end and name in (member, f"get {member}", f"set {member}")
            )
            if not count:
                not_run.append(f"{cls}.{member}")
    assert members >= 120, members  # the rule sees the package (2.5.0: 124 members of 14 classes)
    assert not_run == [], f"never called by tests/sdk/ts ({len(not_run)} of {members}): {', '.join(not_run)}" + (
        f"; failed files: {failed}" if failed else ""
    )
