"""The benchmarks reach Precis as its callers do (bench/front.py: the handlers as Lambda invokes them, the AWS requests
counted at the in-process AWS's door): no bench imports the tests' helpers, and none imports the store, but for the
files below, each with what it still takes and why. The list only shrinks: an entry no longer used fails too."""

from __future__ import annotations

import ast
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"

# file -> the precis.store modules it still imports, and why. Each entry is a step still to take, not a permission.
STILL_INSIDE = {
    # The previous search design (a5037bf), run in that commit's worktree on that commit's store by
    # bench/retrieval_scale.py, as a measured baseline: that commit has no front door to go through.
    "retrieval_previous.py": {
        "precis.store.keys",
        "precis.store.db",
        "precis.store.messages",
        "precis.store.message_search",
        "precis.store.term_stats",
    },
    # The one bulk loader (sessions of up to 100,000 messages, their search index, summaries: no route writes one;
    # collections of 10,000 conclusions), with the store's item encoding; tests/deploy/test_bench_seed.py and
    # test_bench_seed_conclusions.py check it writes what the message and conclusion routes write.
    "seed.py": {
        "precis.store.conclusions",
        "precis.store.keys",
        "precis.store.db",
        "precis.store.messages",
        "precis.store.records",
        "precis.store.resources",
        "precis.store.search",
        "precis.store.summaries",
        "precis.store.vectors",
    },
}


def imports(path: Path) -> set[str]:
    """Every module `path` imports, at any depth (lazy imports inside functions too); `from a import b` as `a.b`."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def store_modules(found: set[str]) -> set[str]:
    """The store's modules among `found` (`precis.store.db.get_db` counts as `precis.store.db`)."""
    return {".".join(name.split(".")[:3]) for name in found if name.startswith("precis.store.")}


def test_no_bench_imports_the_tests():
    offenders = {
        p.name: sorted(n for n in imports(p) if n == "tests" or n.startswith("tests."))
        for p in sorted(BENCH.glob("*.py"))
    }
    assert not {k: v for k, v in offenders.items() if v}


def test_no_bench_imports_the_store_beyond_what_is_listed():
    beyond = {
        p.name: sorted(store_modules(imports(p)) - STILL_INSIDE.get(p.name, set())) for p in sorted(BENCH.glob("*.py"))
    }
    assert not {k: v for k, v in beyond.items() if v}, "bench/ reaches into precis.store: go through bench/front.py"


def test_the_list_only_shrinks():
    stale = {
        name: sorted(modules - store_modules(imports(BENCH / name)))
        for name, modules in STILL_INSIDE.items()
        if (BENCH / name).exists()
    }
    assert not {k: v for k, v in stale.items() if v}, "no longer imported: take it off STILL_INSIDE"
    assert all((BENCH / name).exists() for name in STILL_INSIDE)


def test_the_check_sees_lazy_and_from_imports(tmp_path):
    source = tmp_path / "x.py"
    source.write_text(
        "def f():\n    from precis.store import keys\n    from precis.store.db import get_db\n"
        "    import tests.handlers\n"
    )
    found = imports(source)
    assert store_modules(found) == {"precis.store.keys", "precis.store.db"} and "tests.handlers" in found
