"""Cold start: how long importing each handler module takes in a fresh interpreter, against a bare `import boto3`.

Each sample is a new process set up the way Lambda starts a function: PYTHONPATH = the layer, then the
function's code directory; the function's environment from template.yaml (with TIKTOKEN_CACHE_DIR on the
shipped encodings); Lambda's own variables, so Powertools' Tracer is active as it is in AWS (no X-Ray daemon
is needed to import). Samples of all variants are interleaved; the median of 7 is reported, after one
unmeasured warm-up each (so byte-code caches exist for every variant alike). Besides the import, the
"ready" time includes creating the DynamoDB and S3 clients, which the handlers defer to their first request.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import FAKE_AWS, ROOT, median, print_table, write_json
from local.template import ENCODINGS_DIR, LAYER_DIR, template

REPEATS = 7
DEPLOYED_REPEATS = 5
FUNCTIONS = {
    "context": "ContextFunction",
    "ingest": "IngestFunction",
    "summarize": "SummarizeFunction",
    "derive": "DeriveFunction",
    "chat": "ChatFunction",
    "mcp": "McpFunction",
}
HEAVY = ("openai", "tiktoken")
READY_TARGET = 1.3  # the goal: ready (imported + clients) within 1.3x a bare boto3 + the same clients
CONTEXT_IMPORT_TARGET = 1.15
BUILT_LAYER = ROOT / ".aws-sam" / "build" / "CommonLayer" / "python"  # sam build's output (layers/common/Makefile)
BUILT_CONTEXT = ROOT / ".aws-sam" / "build" / "ContextFunction"
# Imported, then ready to talk to DynamoDB: the handlers defer boto3 to their first request, so the clients
# are part of what a cold request waits for.
PROBE = """
import sys, time
t0 = time.perf_counter()
import {module}
t1 = time.perf_counter()
heavy = {{name: name in sys.modules for name in {heavy!r}}}
modules = len(sys.modules)
{ready}
t2 = time.perf_counter()
import json
print(json.dumps({{"import": t1 - t0, "ready": t2 - t0, "modules": modules, "heavy": heavy}}))
"""
READY = {"boto3": "boto3.client('dynamodb'); boto3.client('s3')", "app": "from precis.store.db import get_db; get_db()"}


def lambda_environment(logical_id: str) -> tuple[dict[str, str], str]:
    """The environment and working directory Lambda would give the function (fake credentials)."""
    fn = template().functions[logical_id]
    env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "TMPDIR", "SYSTEMROOT") if k in os.environ}
    env.update(fn.environment)
    env.update(FAKE_AWS)
    env.update(
        TIKTOKEN_CACHE_DIR=str(ENCODINGS_DIR),
        PYTHONPATH=os.pathsep.join([str(LAYER_DIR), str(fn.code_dir)]),
        AWS_LAMBDA_FUNCTION_NAME=f"precis-{logical_id}",
        AWS_LAMBDA_FUNCTION_MEMORY_SIZE="512",
        AWS_LAMBDA_FUNCTION_VERSION="$LATEST",
        AWS_EXECUTION_ENV="AWS_Lambda_python3.12",
        LAMBDA_TASK_ROOT=str(fn.code_dir),
        _HANDLER=fn.handler,
        AWS_XRAY_CONTEXT_MISSING="LOG_ERROR",
        AWS_XRAY_DAEMON_ADDRESS="127.0.0.1:2000",
    )
    return env, str(fn.code_dir)


def sample(module: str, env: dict[str, str], cwd: str) -> dict:
    probe = PROBE.format(module=module, heavy=HEAVY, ready=READY[module])
    out = subprocess.run([sys.executable, "-c", probe], env=env, cwd=cwd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"importing {module} in {cwd} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def largest_imports(env: dict[str, str], cwd: str, top: int = 6) -> list[tuple[str, float]]:
    """Import time by package (sum of self times, python -X importtime), for one module: top-level packages, but
    Precis's and Powertools' own by their modules (precis.schemas, aws_lambda_powertools.event_handler)."""
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import app"],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )
    by_package: dict[str, float] = {}
    for line in out.stderr.splitlines():
        parts = line.removeprefix("import time:").split("|")
        if not line.startswith("import time:") or len(parts) != 3 or not parts[0].strip().isdigit():
            continue
        name = parts[2].strip().split(".")
        package = ".".join(name[:2] if name[0] in ("precis", "aws_lambda_powertools") else name[:1])
        by_package[package] = by_package.get(package, 0.0) + int(parts[0]) / 1000
    return sorted(by_package.items(), key=lambda kv: -kv[1])[:top]


def as_deployed() -> dict | None:
    """The context handler from `sam build`'s output, as Lambda runs it (nothing can be written next to /opt): with
    the bytecode the layer ships (layers/common/Makefile), and from source only, as SAM's python builder shipped it."""
    layer, function = BUILT_LAYER, BUILT_CONTEXT
    if not layer.is_dir() or not function.is_dir():
        print("\n(no sam build output: run make build to time the built layer with and without its bytecode)")
        return None
    with tempfile.TemporaryDirectory() as tmp:
        source_only = Path(tmp) / "python"
        shutil.copytree(layer, source_only, ignore=shutil.ignore_patterns("__pycache__"))
        env, _ = lambda_environment("ContextFunction")
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        variants = {
            "boto3 (bare import), layer's bytecode": ("boto3", layer),
            "context handler, layer's bytecode": ("app", layer),
            "context handler, source only": ("app", source_only),
        }
        samples: dict[str, list[dict]] = {name: [] for name in variants}
        for _ in range(DEPLOYED_REPEATS):
            for name, (module, path) in variants.items():
                samples[name].append(
                    sample(module, {**env, "PYTHONPATH": f"{path}{os.pathsep}{function}"}, str(function))
                )
    ready = {name: median([s["ready"] for s in runs]) * 1000 for name, runs in samples.items()}
    base = ready["boto3 (bare import), layer's bytecode"]
    print_table(
        f"The built context handler as Lambda runs it (no bytecode written), median of {DEPLOYED_REPEATS}",
        ["module", "ready ms", "x boto3"],
        [[name, ms, ms / base] for name, ms in ready.items()],
    )
    return {name: {"ready_ms": ms, "ready_x_boto3": ms / base} for name, ms in ready.items()}


def run() -> dict:
    variants = {"boto3 (bare import)": ("boto3", *lambda_environment("ContextFunction"))}
    for name, logical_id in FUNCTIONS.items():
        variants[f"{name} handler"] = ("app", *lambda_environment(logical_id))
    samples: dict[str, list[dict]] = {name: [] for name in variants}
    for module, env, cwd in variants.values():  # warm-up: byte-code caches for everyone
        sample(module, env, cwd)
    print(f"cold start: {REPEATS} fresh interpreters per variant ...", flush=True)
    for _ in range(REPEATS):
        for name, (module, env, cwd) in variants.items():
            samples[name].append(sample(module, env, cwd))

    base = {kind: median([s[kind] for s in samples["boto3 (bare import)"]]) for kind in ("import", "ready")}
    rows, results = [], {}
    for name, runs in samples.items():
        imported, ready = (median([s[kind] for s in runs]) for kind in ("import", "ready"))
        heavy = runs[-1]["heavy"]
        results[name] = {
            "import_ms": imported * 1000,
            "import_x_boto3": imported / base["import"],
            "ready_ms": ready * 1000,
            "ready_x_boto3": ready / base["ready"],
            "modules": runs[-1]["modules"],
            **heavy,
        }
        rows.append(
            [
                name,
                imported * 1000,
                imported / base["import"],
                ready * 1000,
                ready / base["ready"],
                runs[-1]["modules"],
                heavy["openai"],
                heavy["tiktoken"],
            ]
        )
    print_table(
        f"Cold start in a fresh interpreter, median of {REPEATS} (ready = imported + DynamoDB and S3 clients created)",
        ["module", "import ms", "x boto3", "ready ms", "x boto3", "modules", "openai", "tiktoken"],
        rows,
    )
    context = results["context handler"]
    slow = [name for name, r in results.items() if r["ready_x_boto3"] > READY_TARGET]
    heavy_anywhere = any(r["openai"] or r["tiktoken"] for r in results.values())
    print(f"\nready within {READY_TARGET}x for every function: {'yes' if not slow else 'no: ' + ', '.join(slow)}")
    import_met = context["import_x_boto3"] <= CONTEXT_IMPORT_TARGET
    print(
        f"context import within {CONTEXT_IMPORT_TARGET}x: {'yes' if import_met else 'no'} "
        f"({context['import_x_boto3']:.2f}x; its import holds no boto3, which comes with the clients)"
    )
    print(f"openai or tiktoken on a cold path: {'yes' if heavy_anywhere else 'no'}")
    top_rows = []
    for name, (module, env, cwd) in variants.items():
        if module != "app":
            continue
        top = largest_imports(env, cwd)
        results[name]["largest_imports_ms"] = dict(top)
        top_rows.append([name, ", ".join(f"{package} {ms:.0f}" for package, ms in top)])
    print_table(
        "Each handler's import time by package (one python -X importtime run, self times summed, ms)",
        ["module", "largest"],
        top_rows,
    )
    results["as_deployed"] = as_deployed()
    path = write_json("coldstart", results)
    print(f"wrote {path.relative_to(ROOT)}")
    return results
