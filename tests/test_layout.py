"""The shared package's shape: no import circles inside `precis`, no module takes another's underscore name, packages
on floors, and only the store names table keys or calls the table's and bucket's clients.

Both are read from the source (every `import`/`from … import`, at any depth, lazy ones included), so a circle hidden
inside a function still counts: it is the coupling that makes a package hard to read, whenever it runs.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Collection
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "layers" / "common" / "precis"
LOCAL = Path(__file__).resolve().parents[1] / "local"
FUNCTIONS = Path(__file__).resolve().parents[1] / "functions"


def _module_of(path: Path, package: Path = PACKAGE) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules(package: Path = PACKAGE) -> dict[str, Path]:
    return {_module_of(p, package): p for p in sorted(package.rglob("*.py"))}


def _imports(path: Path, modules: dict[str, Path], prefix: str = "precis") -> list[tuple[str, str | None, int]]:
    """(module imported, name taken from it or None, line) for each import of a `prefix` module in `path`, at any
    depth: inside functions and under `if TYPE_CHECKING:` too; relative imports resolved."""
    found = []
    package = _module_of(path, modules[prefix].parent).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(a.name, None, node.lineno) for a in node.names if a.name.startswith(prefix)]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            if not base.startswith(prefix):
                continue
            for alias in node.names:
                child = f"{base}.{alias.name}"
                # `from precis.store import messages` imports the module precis.store.messages
                found.append((child, None, node.lineno) if child in modules else (base, alias.name, node.lineno))
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


# ---------------------------------------------------------------- across the checkout

# Each top-level folder of Python: where its modules are imported from (the folder on sys.path that names them; a
# handler in functions/ is the module `app` of its own code directory) and the first-party packages it may import.
# Production code (the layer, the handlers, deploy/, the command) never imports the local stand-in or the benches;
# the local stack reads the template through deploy/ (deploy.template), as the production tools do; the benches run
# on the local stack. docs/layout.md, "Across the checkout".
CHECKOUT = PACKAGE.parents[2]
FOLDERS: dict[str, tuple[str | None, set[str]]] = {
    "layers": ("layers/common", {"precis"}),
    "functions": (None, {"precis"}),
    "deploy": (".", {"precis", "deploy"}),
    "cli": ("cli", {"precis", "precis_cli"}),
    "local": (".", {"precis", "deploy", "local"}),
    "bench": (".", {"precis", "deploy", "local", "bench"}),
    "scripts": (".", {"scripts"}),
}
FIRST_PARTY = {"precis", "precis_cli", "deploy", "local", "bench", "scripts", "tests", "functions"}
# `file:line takes _name from module` allowed, each with its reason. bench/conversation.py is also run inside a checkout
# of an earlier commit (its BASELINE), against that commit's bench/derive.py, which names its offline model `_answer`.
UNDERSCORE_ALLOWED = {"bench/conversation.py _answer bench.derive"}  # "file name module"


def _checkout_modules(root: Path = CHECKOUT) -> dict[str, tuple[str, Path]]:
    """Every first-party module: its dotted name -> (its top-level folder, its file)."""
    found: dict[str, tuple[str, Path]] = {}
    for folder, (base, _allowed) in FOLDERS.items():
        for path in sorted((root / folder).rglob("*.py")):
            relative = path.relative_to(path.parent if base is None else root / base).with_suffix("")
            parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
            name = ".".join(parts)
            if base is None:  # a handler's module `app`: named by its function, as nothing imports it
                name = ".".join(path.relative_to(root).with_suffix("").parts)
            found[name] = (folder, path)
    return found


def _first_party_uses(path: Path, module: str, modules: Collection[str]) -> list[tuple[int, str, str | None, bool]]:
    """(line, module, name taken from it or None, whether an import) for each first-party import in `path` (at any
    depth, relative ones resolved), and each underscore attribute read off an imported module (`template._parse`)."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[tuple[int, str, str | None, bool]] = []
    bound: dict[str, str] = {}  # a name in the file -> the module it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in FIRST_PARTY:
                    found.append((node.lineno, alias.name, None, True))
                    head = alias.asname or alias.name.split(".")[0]
                    bound[head] = alias.name if alias.asname else head
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            if base.split(".")[0] not in FIRST_PARTY:
                continue
            for alias in node.names:
                child = f"{base}.{alias.name}"
                if child in modules:  # `from local import template` imports the module local.template
                    found.append((node.lineno, child, None, True))
                    bound[alias.asname or alias.name] = child
                else:
                    found.append((node.lineno, base, alias.name, True))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.endswith("__"):
            head, _, rest = ast.unparse(node.value).partition(".")
            if head in bound:
                found.append((node.lineno, bound[head] + (f".{rest}" if rest else ""), node.attr, False))
    return sorted(found)


@functools.cache
def _checkout_uses(root: Path = CHECKOUT) -> list[tuple[str, str, int, str, str | None, bool]]:
    """(folder, file, line, module used, name taken or None, whether an import) for every first-party use in `root`."""
    modules = _checkout_modules(root)
    return [
        (folder, str(path.relative_to(root)), line, target, name, an_import)
        for module, (folder, path) in modules.items()
        for line, target, name, an_import in _first_party_uses(path, module, modules)
        if target != module
    ]


def _underscore_takers(root: Path = CHECKOUT) -> list[str]:
    """`file:line takes _name from module` for each underscore name a first-party module takes from another."""
    return sorted(
        f"{file}:{line} takes {name} from {target}"
        for _folder, file, line, target, name, _import in _checkout_uses(root)
        if name
        and name.startswith("_")
        and not name.endswith("__")
        and f"{file} {name} {target}" not in UNDERSCORE_ALLOWED
    )


def _forbidden_imports(root: Path = CHECKOUT) -> list[str]:
    """`file:line folder imports module` for each first-party import a folder may not make (FOLDERS)."""
    return sorted(
        {
            f"{file}:{line} {folder}/ imports {target}"
            for folder, file, line, target, _name, an_import in _checkout_uses(root)
            if an_import and target.split(".")[0] not in FOLDERS[folder][1]
        }
    )


def test_the_checkout_checks_see_underscore_names_and_imports_across_folders(tmp_path):
    for folder in FOLDERS:
        (tmp_path / folder).mkdir()
    (tmp_path / "local" / "__init__.py").write_text("")
    (tmp_path / "local" / "template.py").write_text("def _parse(t):\n    return t\nx = _parse(1)\n")
    (tmp_path / "deploy" / "upgrade.py").write_text(
        "def f():\n    from local.template import _parse\n    from local import template\n"
        "    return template._parse, template.load\n"
    )
    (tmp_path / "functions" / "derive").mkdir()
    (tmp_path / "functions" / "derive" / "app.py").write_text("import local.template\nimport precis.errors\n")
    (tmp_path / "local" / "worker.py").write_text("from .template import _parse\nfrom deploy import upgrade\n")
    assert _underscore_takers(tmp_path) == [
        "deploy/upgrade.py:2 takes _parse from local.template",
        "deploy/upgrade.py:4 takes _parse from local.template",
        "local/worker.py:1 takes _parse from local.template",
    ]
    assert _forbidden_imports(tmp_path) == [
        "deploy/upgrade.py:2 deploy/ imports local.template",
        "deploy/upgrade.py:3 deploy/ imports local.template",
        "functions/derive/app.py:1 functions/ imports local.template",
    ]
    assert "functions.derive.app" in _checkout_modules() and "local.template" in _checkout_modules()


def test_no_module_imports_another_modules_underscore_name():
    """Across every top-level folder: what one module needs of another is a public name."""
    taken = _underscore_takers()
    assert not taken, "\n".join(taken)


def test_every_allowed_underscore_name_is_still_taken():
    """An allowance outlives its use only by mistake: drop it once the name is public."""
    taken = {f"{file} {name} {target}" for _folder, file, _line, target, name, _import in _checkout_uses()}
    assert taken >= UNDERSCORE_ALLOWED, sorted(UNDERSCORE_ALLOWED - taken)


def test_production_code_never_imports_the_local_stand_in_or_the_benches():
    """The layer, the handlers, deploy/ and the command import only what FOLDERS lets them; local/ and bench/ too."""
    forbidden = _forbidden_imports()
    assert not forbidden, "\n".join(forbidden)


@pytest.mark.parametrize("name", ["context", "representation", "config", "settings", "llm"])
def test_a_name_means_one_thing(name):
    """A module name is used by one module or package in precis, except an engine per capability (`llm.py`)."""
    same = sorted(m for m in _modules() if m.rpartition(".")[2] == name)
    if name == "llm":  # the seam, and each capability's engine that uses it
        assert "precis.llm" in same and all(
            m == "precis.llm" or m.endswith("engines.llm") or m == "precis.chat.llm" for m in same
        ), same
    else:
        assert len(same) <= 1, same


# ---------------------------------------------------------------- the shared package's floors

# precis's packages (a top-level module counts as a package of its own), lowest first: a package imports only from
# its own floor or below, and no two packages import each other, directly or round a loop. docs/layout.md, "Floors".
FLOORS = [
    # shared leaves: errors, shapes and pure arithmetic that every floor uses
    {"precis", "errors", "tokens", "lexical", "schemas", "concurrency", "telemetry", "startup", "sizes"},
    # the deployment: its settings, secrets, the model seam, who may do what, a workspace's or session's configuration
    {"settings", "secrets", "llm", "auth", "configuration"},
    # the store: the only code that names table keys and S3 objects
    {"store"},
    # the capabilities, each deciding in its own package and reading and writing through the store
    {"messages", "context", "summaries", "memory", "chat", "stream", "webhooks", "events", "transfer"},
    # the edges: the HTTP API and the MCP endpoint, each parsing, authorizing and shaping what the capabilities answer
    {"api", "mcp"},
]
# The edges stand side by side: neither imports the other, so a third (a webhook, a batch export, a queue consumer)
# needs neither of them.
EDGES = {"api", "mcp"}
# (importing module, imported module): upward imports not yet moved, each a debt with its reason. None today.
UPWARD_ALLOWED: set[tuple[str, str]] = set()


def _package_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _crossings(package: Path = PACKAGE) -> list[tuple[str, int, str, str]]:
    """(file, line, importing module, imported module) for each import from one package of `package` to another."""
    modules = _modules(package)
    found = set()
    for module, path in modules.items():
        for target, _name, line in _imports(path, modules, package.name):
            while target not in modules and "." in target:
                target = target.rpartition(".")[0]
            if target in modules and _package_of(target) != _package_of(module):
                found.add((str(path.relative_to(package.parent)), line, module, target))
    return sorted(found)


def _where(crossing: tuple[str, int, str, str]) -> str:
    file, line, module, target = crossing
    return f"{file}:{line} {_package_of(module)} -> {_package_of(target)} ({module} imports {target})"


def test_every_package_has_a_floor():
    floored = set().union(*FLOORS)
    assert sum(map(len, FLOORS)) == len(floored), "a package on two floors"
    assert {_package_of(m) for m in _modules()} == floored


def test_the_floor_checks_see_upward_imports_and_loops():
    crossings = _crossings()
    assert any(m == "precis.messages.ingest" and t.startswith("precis.store.") for _f, _l, m, t in crossings)
    assert _upward([("a.py", 3, "precis.errors", "precis.store.keys")]) == [
        "a.py:3 errors -> store (precis.errors imports precis.store.keys)"
    ]
    assert _package_loops([("a.py", 1, "precis.api.x", "precis.chat"), ("b.py", 2, "precis.chat", "precis.api.y")])


def _upward(crossings: list[tuple[str, int, str, str]]) -> list[str]:
    floor = {p: i for i, packages in enumerate(FLOORS) for p in packages}
    return [
        _where(c)
        for c in crossings
        if floor[_package_of(c[3])] > floor[_package_of(c[2])] and (c[2], c[3]) not in UPWARD_ALLOWED
    ]


def _package_loops(crossings: list[tuple[str, int, str, str]]) -> list[str]:
    """Each loop of packages, with the imports in it that do not run down the floors (those close it)."""
    floor = {p: i for i, packages in enumerate(FLOORS) for p in packages}
    graph: dict[str, set[str]] = {}
    crossings = [c for c in crossings if (c[2], c[3]) not in UPWARD_ALLOWED]
    for _file, _line, module, target in crossings:
        graph.setdefault(_package_of(module), set()).add(_package_of(target))
        graph.setdefault(_package_of(target), set())
    loops = []
    for loop in _circles(graph):
        inside = [
            _where(c)
            for c in crossings
            if {_package_of(c[2]), _package_of(c[3])} <= set(loop)
            and floor.get(_package_of(c[3]), 0) >= floor.get(_package_of(c[2]), 0)
        ]
        loops.append(" ⇄ ".join(loop) + ":\n  " + "\n  ".join(inside))
    return loops


def _edge_crossings(crossings: list[tuple[str, int, str, str]]) -> list[str]:
    return [_where(c) for c in crossings if {_package_of(c[2]), _package_of(c[3])} <= EDGES]


def test_the_edge_check_sees_one_edge_importing_another():
    assert _edge_crossings([("a.py", 4, "precis.mcp.tools.x", "precis.api.read")]) == [
        "a.py:4 mcp -> api (precis.mcp.tools.x imports precis.api.read)"
    ]
    assert _edge_crossings([("a.py", 4, "precis.mcp.tools.x", "precis.context.session")]) == []


def test_no_edge_imports_another():
    crossing = _edge_crossings(_crossings())
    assert not crossing, "an edge imports another:\n" + "\n".join(crossing)


def test_no_package_imports_from_a_floor_above_its_own():
    upward = _upward(_crossings())
    assert not upward, "imports running upward:\n" + "\n".join(upward)


def test_no_import_loop_between_packages():
    loops = _package_loops(_crossings())
    assert not loops, "import loops between packages:\n" + "\n".join(loops)


def test_every_allowed_upward_import_still_exists():
    """An allowance outlives its import only by mistake: drop it once the import has moved."""
    crossings = {(m, t) for _f, _l, m, t in _crossings()}
    assert crossings >= UPWARD_ALLOWED, sorted(UPWARD_ALLOWED - crossings)


# ---------------------------------------------------------------- the store's keys and clients

# The store is the only code that names table keys and S3 objects: outside `precis.store`, no module imports
# `precis.store.keys`, and none reaches for a `Db`'s clients (`db.client`, `db.s3`, whatever the name it is held by).
# A module's own client (`self.client`, as a model's HTTP client) is its own business. No exemptions.
STORE_CLIENTS = {"client", "s3"}


def _storage_reaches(source: str) -> list[tuple[int, str]]:
    """(line, what) for each import of `precis.store.keys` in `source` (at any depth) and each use of a `.client` or
    `.s3` attribute of anything but `self`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [
                (node.lineno, f"imports {a.name}")
                for a in node.names
                if a.name == "precis.store.keys" or a.name.startswith("precis.store.keys.")
            ]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "precis.store.keys" or node.module.startswith("precis.store.keys."):
                found.append((node.lineno, f"imports from {node.module}"))
            elif node.module == "precis.store" and any(a.name == "keys" for a in node.names):
                found.append((node.lineno, "imports precis.store.keys"))
        elif (
            isinstance(node, ast.Attribute)
            and node.attr in STORE_CLIENTS
            and not (isinstance(node.value, ast.Name) and node.value.id == "self")
        ):
            found.append((node.lineno, f"uses .{node.attr} of {ast.unparse(node.value)}"))
    return sorted(found)


def _outside_the_store() -> list[Path]:
    modules = _modules()
    return [
        path for module, path in modules.items() if module != "precis.store" and not module.startswith("precis.store.")
    ] + sorted(FUNCTIONS.rglob("*.py"))


def test_the_storage_check_sees_keys_and_clients():
    assert _storage_reaches(
        "from precis.store import keys, resources\nimport precis.store.keys\n"
        "def f(db):\n    from precis.store.keys import session\n    return db.client.get_item()\n"
        "x = get_db().s3\n"
    ) == [
        (1, "imports precis.store.keys"),
        (2, "imports precis.store.keys"),
        (4, "imports from precis.store.keys"),
        (5, "uses .client of db"),
        (6, "uses .s3 of get_db()"),
    ]
    assert _storage_reaches("from precis.store import resources\nself.client.chat.completions.create()\n") == []
    outside = {p.relative_to(PACKAGE.parents[2]).as_posix() for p in _outside_the_store()}
    assert "layers/common/precis/context/compose.py" in outside and "functions/derive/app.py" in outside
    assert not any(p.startswith("layers/common/precis/store/") for p in outside)


def test_only_the_store_names_keys_or_calls_the_clients():
    reaches = [
        f"{path.relative_to(PACKAGE.parents[2])}:{line} {what}"
        for path in _outside_the_store()
        for line, what in _storage_reaches(path.read_text(encoding="utf-8"))
    ]
    assert not reaches, "outside the store:\n" + "\n".join(reaches)


# ---------------------------------------------------------------- search's one face

# Indexing and ranking messages live behind `precis.store.search`: the index's own packages (their modules too) are
# imported by it and by each other only, so ingest, the deriver, clones, purges and deploy/reindex call one set of
# functions, and a second backend is a module behind them (docs/design.md, "Lexical ranking").
SEARCH_INSIDE = {"precis.store.search", "precis.store.text_index", "precis.store.message_search"}
SEARCH_BEHIND = {"precis.store.text_index", "precis.store.message_search"}


def _search_reaches(root: Path) -> list[str]:
    """`file:line imports module` for each import of the index's own modules in `root`'s files (at any depth)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if path.is_relative_to(PACKAGE) and _within(_module_of(path), SEARCH_INSIDE):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            found += [
                f"{path.relative_to(PACKAGE.parents[2], walk_up=True)}:{node.lineno} imports {n}"
                for n in names
                if _within(n, SEARCH_BEHIND)
            ]
    return found


def _within(module: str, packages: set[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def test_the_search_check_sees_the_index_imported(tmp_path):
    (tmp_path / "a.py").write_text(
        "from precis.store import search, text_index\nfrom precis.store.text_index.ranking import Budget\n"
        "def f():\n    import precis.store.message_search\n"
    )
    where = f"{tmp_path.relative_to(PACKAGE.parents[2], walk_up=True)}/a.py"
    assert _search_reaches(tmp_path) == [
        f"{where}:1 imports precis.store.text_index",
        f"{where}:2 imports precis.store.text_index.ranking",
        f"{where}:2 imports precis.store.text_index.ranking.Budget",
        f"{where}:4 imports precis.store.message_search",
    ]


def test_only_the_search_face_is_imported_from_outside_the_index():
    assert _search_reaches(PACKAGE) == []
    assert _search_reaches(PACKAGE.parents[2] / "deploy") == []
    assert _search_reaches(PACKAGE.parents[2] / "functions") == []


# ---------------------------------------------------------------- the local stack

# local/'s floors, lowest first: a module imports only from its own floor or below. The template and what every floor
# shares; the AWS stand-in (moto, its fidelity rules and speed-ups); the Lambda runtime (workers, zygote); the event
# sources (gateway, stream and queue pollers, schedules, the in-process harness); the entry points. The fake model
# servers (local.models, their shared scaffolding in local.models.scripted) stand beside the AWS stand-in and import
# nothing of the stack: they are on the ground floor.
LOCAL_FLOORS = [
    {
        "local",
        "local.template",
        "local.chaos",
        "local.moto_meter",
        "local.lambda_context",
        "local.stream_records",
        "local.ttl",
        "local.iam",
        "local.models",
        "local.models.llm_server",
        "local.models.bedrock_server",
        "local.models.scripted",
    },
    {
        "local.moto_storage",
        "local.moto_vectors",
        "local.moto_sqs",
        "local.moto_patches",
        "local.moto_server",
        "local.moto_backend",
    },
    {"local.runtime", "local.zygote", "local.worker"},
    {"local.gateway", "local.poller", "local.sqs_poller", "local.scheduler", "local.inprocess"},
    {"local.__main__", "local.invoke"},
]


def test_every_local_module_has_a_floor():
    assert set(_modules(LOCAL)) == set().union(*LOCAL_FLOORS)


def test_no_import_circle_inside_local():
    circles = _circles(_graph(LOCAL))
    assert not circles, "import circles: " + "; ".join(" -> ".join(c) for c in circles)


def test_no_local_module_imports_from_a_floor_above_its_own():
    floor = {m: i for i, modules in enumerate(LOCAL_FLOORS) for m in modules}
    upward = [
        f"{m} (floor {floor[m]}) imports {t} (floor {floor[t]})"
        for m, targets in _graph(LOCAL).items()
        if m in floor
        for t in targets
        if t in floor and floor[t] > floor[m]
    ]
    assert not upward, "\n".join(upward)


# ---------------------------------------------------------------- the store's packages' faces

# A store module split by item family is a package whose `__init__` is its face (`__all__`): code outside the package
# (the layer, the handlers, deploy/, bench/, local/, cli/) imports the face, never the files behind it, so the files
# can move without a caller changing; inside, the files import one another, never the face (it imports them).
# Tests may reach a file for what the face does not offer. docs/layout.md, "Rules".
ROOT = PACKAGE.parents[2]
FACE_CALLERS = [PACKAGE, FUNCTIONS, LOCAL, ROOT / "deploy", ROOT / "bench", ROOT / "cli"]


def _store_packages() -> list[str]:
    return sorted(_module_of(p) for p in (PACKAGE / "store").glob("*/__init__.py"))


def _face_reaches(source: str, inside: str, packages: list[str]) -> list[tuple[int, str]]:
    """(line, what) for each import in `source` (the module `inside`, "" outside the layer) of a file behind one of
    `packages`' faces from outside that package, or of a face from a file behind it."""
    modules = _modules()
    found = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        for name in names:
            for package in packages:
                mine = inside == package or inside.startswith(package + ".")
                if name.startswith(package + ".") and name in modules and not mine:
                    found.append((node.lineno, f"imports {name} from behind its face"))
                elif name == package and mine and inside != package:
                    found.append((node.lineno, f"imports its own package's face {name}"))
    return found


def test_the_face_check_sees_files_and_faces():
    packages = _store_packages()
    assert "precis.store.resources" in packages
    source = (
        "from precis.store.resources import require_session\nfrom precis.store.resources.sessions import x\n"
        "def f():\n    import precis.store.resources.membership\n"
    )
    assert _face_reaches(source, "precis.api.read", packages) == [
        (2, "imports precis.store.resources.sessions from behind its face"),
        (4, "imports precis.store.resources.membership from behind its face"),
    ]
    assert _face_reaches(source, "precis.store.resources", packages) == []
    assert _face_reaches(source, "precis.store.resources.peers", packages) == [
        (1, "imports its own package's face precis.store.resources")
    ]


def test_outside_a_store_package_only_its_face_is_imported():
    packages = _store_packages()
    reaches = [
        f"{path.relative_to(ROOT)}:{line} {what}"
        for root in FACE_CALLERS
        for path in sorted(root.rglob("*.py"))
        for line, what in _face_reaches(
            path.read_text(encoding="utf-8"), _module_of(path) if path.is_relative_to(PACKAGE) else "", packages
        )
    ]
    assert not reaches, "\n".join(reaches)
