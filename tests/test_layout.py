"""The shared package's shape: no import circles inside `precis`, and no module takes another's underscore name.

Both are read from the source (every `import`/`from … import`, at any depth, lazy ones included), so a circle hidden
inside a function still counts: it is the coupling that makes a package hard to read, whenever it runs.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "layers" / "common" / "precis"
LOCAL = Path(__file__).resolve().parents[1] / "local"


def _module_of(path: Path, package: Path = PACKAGE) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules(package: Path = PACKAGE) -> dict[str, Path]:
    return {_module_of(p, package): p for p in sorted(package.rglob("*.py"))}


def _imports(path: Path, modules: dict[str, Path], prefix: str = "precis") -> list[tuple[str, str | None, int]]:
    """(module imported, name taken from it or None, line) for each import of a `prefix` module in `path`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(a.name, None, node.lineno) for a in node.names if a.name.startswith(prefix)]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(prefix) and not node.level:
            for alias in node.names:
                child = f"{node.module}.{alias.name}"
                # `from precis.store import messages` imports the module precis.store.messages
                found.append((child, None, node.lineno) if child in modules else (node.module, alias.name, node.lineno))
    return found


def _graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    modules = _modules(package)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        for target, _name, _line in _imports(path, modules, package.name):
            while target not in modules and "." in target:
                target = target.rpartition(".")[0]
            # a package's __init__ is not a dependency of its own modules' imports of one another
            if target in modules and target != module and not module.startswith(target + "."):
                graph[module].add(target)
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_checks_see_the_package():
    graph = _graph()
    assert len(graph) > 40 and "precis.store.messages" in graph["precis.messages.ingest"]
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_circle_inside_precis():
    circles = _circles(_graph())
    assert not circles, "import circles: " + "; ".join(" -> ".join(c) for c in circles)


def test_no_module_imports_another_modules_underscore_name():
    modules = _modules()
    taken = [f"{path.relative_to(PACKAGE.parent)}:{line} takes {name} from {target}"
             for module, path in modules.items() for target, name, line in _imports(path, modules)
             if name and name.startswith("_") and target != module]
    assert not taken, "\n".join(taken)


@pytest.mark.parametrize("name", ["context", "representation", "config", "settings", "llm"])
def test_a_name_means_one_thing(name):
    """A module name is used by one module or package in precis, except an engine per capability (`llm.py`)."""
    same = sorted(m for m in _modules() if m.rpartition(".")[2] == name)
    if name == "llm":  # the seam, and each capability's engine that uses it
        assert "precis.llm" in same and all(m == "precis.llm" or m.endswith("engines.llm") or m == "precis.chat.llm"
                                             for m in same), same
    else:
        assert len(same) <= 1, same


# ---------------------------------------------------------------- the local stack

# local/'s floors, lowest first: a module imports only from its own floor or below. The template and what every floor
# shares; the AWS stand-in (moto, its fidelity rules and speed-ups); the Lambda runtime (workers, zygote); the event
# sources (gateway, stream and queue pollers, schedules); the entry points. The fake model servers (local.models) stand
# beside the AWS stand-in and import nothing of the stack: they are on the ground floor.
LOCAL_FLOORS = [
    {"local", "local.template", "local.chaos", "local.lambda_context", "local.stream_records", "local.iam",
     "local.models", "local.models.llm_server", "local.models.bedrock_server"},
    {"local.moto_storage", "local.moto_vectors", "local.moto_patches", "local.moto_server", "local.moto_backend"},
    {"local.runtime", "local.zygote", "local.worker"},
    {"local.gateway", "local.poller", "local.sqs_poller", "local.scheduler"},
    {"local.__main__", "local.invoke"},
]


def test_every_local_module_has_a_floor():
    assert set(_modules(LOCAL)) == set().union(*LOCAL_FLOORS)


def test_no_import_circle_inside_local():
    circles = _circles(_graph(LOCAL))
    assert not circles, "import circles: " + "; ".join(" -> ".join(c) for c in circles)


def test_no_local_module_imports_from_a_floor_above_its_own():
    floor = {m: i for i, modules in enumerate(LOCAL_FLOORS) for m in modules}
    upward = [f"{m} (floor {floor[m]}) imports {t} (floor {floor[t]})" for m, targets in _graph(LOCAL).items()
              if m in floor for t in targets if t in floor and floor[t] > floor[m]]
    assert not upward, "\n".join(upward)
