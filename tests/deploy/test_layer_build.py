"""The layer as `sam build` makes it (layers/common/Makefile): every module ships its python3.12 bytecode, compiled with
unchecked hashes, so no cold start compiles anything from source (/opt is read-only: Python could not keep it).

`make test` builds before it tests; run alone without a build, these tests skip and say why."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from bench.coldstart import BUILT_CONTEXT as FUNCTION
from bench.coldstart import BUILT_LAYER as LAYER
from local.template import LAYER_DIR

pytestmark = pytest.mark.skipif(not LAYER.is_dir(), reason="no sam build output (.aws-sam/build): run make build")


def test_every_module_of_the_layer_has_unchecked_python312_bytecode():
    sources = [p for p in LAYER.rglob("*.py")]
    assert len(sources) > 1000 and (LAYER / "precis" / "schemas" / "__init__.py") in sources
    missing, checked = [], []
    for source in sources:
        cached = Path(importlib.util.cache_from_source(str(source)))
        if not cached.is_file():
            missing.append(source.relative_to(LAYER))
            continue
        header = cached.read_bytes()[:8]
        if header[:4] != importlib.util.MAGIC_NUMBER or int.from_bytes(header[4:8], "little") != 0b01:
            checked.append(source.relative_to(LAYER))  # wrong Python, or a bytecode that checks its source
    assert missing == [] and checked == []


def test_the_layer_carries_the_encodings_and_its_own_botocore():
    assert sorted(p.name for p in (LAYER / "precis" / "encodings").iterdir()) == [
        "9b5ad71b2ce5302211f9c61530b329a4922fc6a4",
        "fb374d419588a4632f3f557e76b4b70aebbca790",
    ]
    pinned = next(
        line.split("==")[1].strip()
        for line in (LAYER_DIR / "requirements.txt").read_text().splitlines()
        if line.startswith("botocore==")
    )
    assert (LAYER / f"botocore-{pinned}.dist-info").is_dir()  # SearchVectors; never the runtime's older one


def test_the_layer_carries_every_file_the_api_docs_serve():
    """GET /docs serves Swagger UI from the copy in Powertools' package: the layer keeps it whole."""
    import aws_lambda_powertools

    from precis.api import docs

    roots = (LAYER_DIR, Path(aws_lambda_powertools.__file__).parents[1])
    for source, _type in docs.FILES.values():
        relative = next(source.relative_to(root) for root in roots if source.is_relative_to(root))
        assert (LAYER / relative).read_bytes() == source.read_bytes(), relative


def test_the_built_context_handler_imports_without_compiling_a_module_of_the_layer():
    # Python compiles a module from source only through SourceLoader.source_to_code: count the layer's calls.
    probe = f"""
import sys
from importlib.machinery import SourceFileLoader
sys.dont_write_bytecode = True  # as in Lambda, where /opt is read-only
compiled, compile_source = [], SourceFileLoader.source_to_code
def source_to_code(self, data, path, **kwargs):
    compiled.append(path)
    return compile_source(self, data, path, **kwargs)
SourceFileLoader.source_to_code = source_to_code
import app
from precis.store.db import get_db
get_db()
loaded = [m for m in list(sys.modules.values()) if (getattr(m, "__file__", None) or "").startswith({str(LAYER)!r})]
print(len(loaded), len([p for p in compiled if p.startswith({str(LAYER)!r})]))
"""
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": f"{LAYER}:{FUNCTION}",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "PYDANTIC_DISABLE_PLUGINS": "__all__",
    }
    out = subprocess.run(
        [sys.executable, "-s", "-c", probe],
        env=env,
        cwd=FUNCTION,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    loaded, compiled = map(int, out.stdout.split())
    assert loaded > 300 and compiled == 0
