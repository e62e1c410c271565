"""A bench's baseline run on an earlier design: a checkout of `commit` (the code a deployment ran, with this machine's
virtualenvs and encodings), a snippet of Python run there in a subprocess, and the JSON it printed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_TREE = ("layers/common/precis", "local", "bench", "cli", "functions", "template.yaml")
_LINKED = (".venv-sam", "layers/common/precis/encodings")  # untracked: made by `make`


def run_at(commit: str, script: str, modules: tuple[str, ...] = ()) -> object:
    """What `script` printed (as JSON after a final `@@`), run with the fake AWS of bench.common in a checkout of
    `commit`, into which this checkout's `modules` (paths under bench/) are copied first."""
    with tempfile.TemporaryDirectory() as tree:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", commit, *_TREE], check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", tree], input=archive, check=True)
        for linked in _LINKED:
            if (ROOT / linked).exists() and not Path(tree, linked).exists():
                Path(tree, linked).symlink_to(ROOT / linked)
        for module in modules:
            Path(tree, "bench", module).write_text((ROOT / "bench" / module).read_text())
        env = {**os.environ, "PYTHONPATH": f"{tree}/layers/common:{tree}:{tree}/cli"}
        prelude = "import json\nfrom bench.common import use_fake_aws\nuse_fake_aws()\n"
        ran = subprocess.run(
            [sys.executable, "-c", prelude + script], cwd=tree, env=env, capture_output=True, text=True, check=False
        )
    if ran.returncode:
        raise RuntimeError(f"the run at {commit} failed:\n{ran.stderr[-3000:]}")
    return json.loads(ran.stdout.rsplit("@@", 1)[1])
