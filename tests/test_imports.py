"""The house's floors, read from the source: no import cycles, and arrows only point down.

The graph is static (the AST of every module under ``src/gpuci``), so a cycle is caught even
when it only bites on one code path. Every import statement counts wherever it stands: at
module level, inside a function (a lazy import), and under ``if TYPE_CHECKING:`` (a type-only
import still ties two modules' shapes together, and is one edit away from a real one).
``from a.b import c`` is an arrow to the module ``a.b.c`` when there is one, else to ``a.b``.
Not counted: Python running a package's ``__init__`` before any of its modules (an arrow to a
parent package counts only when a module names it), and imports by string
(``commands``' ``"module:function"`` targets), which is how the registry stays light.
"""

from __future__ import annotations

import ast
from pathlib import Path

from gpuci_testing import REPO

SRC = REPO / "src"

# The floors, top to bottom. A module may import its own floor and any floor below it.
ENTRY = {"gpuci.__main__", "gpuci.cli", "gpuci.dryrun"}  # parse, dispatch, read workflows
REGISTRY = {"gpuci.commands"}  # what each command takes; implementations named by string
USERS = {"gpuci.training", "gpuci.pods"}  # features built on the ones below
# Features on the foundation. Quarantine is on gpu's floor, not above it: it is a step of
# gpu-smoke (gpu.smoke.command calls it after the verdict), and it stands on gpu's options and
# NVML and on the forges' runner clients; the arrow from gpu is that one module's alone.
BASE = {"gpuci.gpu", "gpuci.cache", "gpuci.fetch", "gpuci.forges", "gpuci.quarantine"}
ABOVE_BASE = ENTRY | REGISTRY | USERS
# The cache's own floors, top to bottom (docs/architecture.md): its Python API, the
# operations, moving bytes, the format, the stores, and the names and inputs all of them share.
# A cache module imports its own floor and the ones below; every module sits on one floor.
CACHE_FLOORS = (
    {"gpuci.cache.api"},
    {"gpuci.cache.restore", "gpuci.cache.save", "gpuci.cache.upkeep", "gpuci.cache.common"},
    {"gpuci.cache.transfer"},
    {"gpuci.cache.format"},
    {"gpuci.cache.stores"},
    {"gpuci.cache.layout", "gpuci.cache.options"},
)
# What the forge clients may use: they are talked to by training and pods, and talk to no one.
FORGES_MAY_IMPORT = {
    "gpuci.errors",
    "gpuci.redact",
    "gpuci.retry",
    "gpuci.settings",  # the variables they read (GPUCI_GITLAB_TOKEN, GITHUB_API_URL)
    "gpuci.httpclients",  # the one client factory (gpuci.__init__ is only the version)
    "gpuci.untrusted_json",  # every answer's body is untrusted JSON
    "gpuci.forges",
}


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in sorted((SRC / "gpuci").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _module_for(name: str) -> str | None:
    """The longest prefix of ``name`` that is one of our modules."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str, path: Path) -> set[str]:
    """Every module of ours that ``module`` imports, anywhere in its source."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            targets = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names
            ]
        else:
            continue
        found.update(m for m in map(_module_for, targets) if m is not None)
    found.discard(module)
    return found


GRAPH = {module: _imports(module, path) for module, path in MODULES.items()}

# A command's shell (``*.command``): it calls the library and renders the typed outcome as the
# step's Result. The library never imports a shell or the registry (httpx's CLI is built on its
# Client, not the reverse); the entry points, the registry and other shells may.
SHELLS = {m for m in MODULES if m.rpartition(".")[2] == "command"}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _under(module: str, packages: set[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def _arrows(sources: set[str], targets: set[str]) -> list[str]:
    return sorted(
        f"{module} -> {target}"
        for module, imported in GRAPH.items()
        if _under(module, sources)
        for target in imported
        if _under(target, targets) and not _under(target, sources)
    )


def test_the_graph_is_read():
    """Guards the reader: known arrows must be there, or the checks below check nothing."""
    assert "gpuci.cache.stores.file" in GRAPH["gpuci.cache.stores"]  # module level
    assert "gpuci.cache.stores.s3.store" in GRAPH["gpuci.cache.stores"]  # inside a function
    assert "gpuci.forges._rest" in GRAPH["gpuci.forges._github"]
    assert "gpuci.commands.dispatch" in GRAPH["gpuci.dryrun._calls"]


def test_a_cycle_is_found():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    assert _cycles(GRAPH) == []


def test_base_features_import_nothing_above_them():
    """gpu, cache, fetch and forges never reach up into the commands, the CLI, the dry run,
    training or pods (a base feature that needs one of those needs a new lower module)."""
    assert _arrows(BASE, ABOVE_BASE) == []


def test_only_the_smoke_command_calls_quarantine_from_gpu():
    """The rest of gpu (NVML, setup, the smoke's checks) never depends on the forges' clients."""
    assert _arrows({"gpuci.gpu"}, {"gpuci.quarantine"}) == [
        "gpuci.gpu.smoke.command -> gpuci.quarantine"
    ]


def test_training_and_pods_use_the_base_not_each_other_or_the_commands():
    assert _arrows({"gpuci.training"}, {"gpuci.pods"}) == []
    assert _arrows({"gpuci.pods"}, {"gpuci.training"}) == []
    assert _arrows(USERS, ENTRY | REGISTRY) == []


def test_the_library_never_imports_a_command():
    """Commands call the Python API, never the reverse: no module but the entry points, the
    registry and the shells themselves imports a ``*.command`` module or the registry (so
    ``gpuci.cache.api``, ``gpuci.gpu.api`` and the operations they call reach neither)."""
    assert "gpuci.cache.restore.command" in SHELLS and "gpuci.cache.save.command" in SHELLS
    assert "gpuci.gpu.setup.command" in SHELLS and "gpuci.gpu.smoke.command" in SHELLS
    up = sorted(
        f"{module} -> {target}"
        for module, imported in GRAPH.items()
        if module not in SHELLS and not _under(module, ENTRY | REGISTRY)
        for target in imported
        if target in SHELLS or _under(target, REGISTRY)
    )
    assert up == []


def test_the_registry_does_not_import_the_entry_points():
    assert _arrows(REGISTRY, ENTRY) == []
    assert _arrows({"gpuci.dryrun"}, {"gpuci.cli", "gpuci.__main__"}) == []


def test_the_foundation_imports_no_feature():
    """errors, redact, retry, runtime, inputs and the rest at the top level of the package."""
    features = ABOVE_BASE | BASE
    foundation = {m for m in MODULES if m.count(".") == 1 and not _under(m, features)}
    foundation.discard("gpuci")
    assert "gpuci.retry" in foundation and "gpuci.runtime" in foundation
    assert _arrows(foundation, features) == []


def test_the_forge_clients_stand_on_the_foundation_only():
    bad = sorted(
        f"{m} -> {t}"
        for m, ts in GRAPH.items()
        if _under(m, {"gpuci.forges"})
        for t in ts
        if not _under(t, FORGES_MAY_IMPORT)
    )
    assert bad == []


def test_the_cache_is_laid_out_by_floor():
    """Each folder of ``cache/`` is a floor, and arrows only point down: the stores never reach
    into the format, the format never into the transfer or the operations, and so on."""
    floor_of: dict[str, int] = {}
    unplaced = []
    for module in MODULES:
        if module == "gpuci.cache" or not _under(module, {"gpuci.cache"}):
            continue
        floors = [i for i, floor in enumerate(CACHE_FLOORS) if _under(module, floor)]
        if floors:
            floor_of[module] = floors[0]
        else:
            unplaced.append(module)
    assert unplaced == [], "give each a floor in CACHE_FLOORS (and docs/architecture.md)"
    upward = sorted(
        f"{module} -> {target}"
        for module, imported in GRAPH.items()
        if module in floor_of
        for target in imported
        if floor_of.get(target, len(CACHE_FLOORS)) < floor_of[module]
    )
    assert upward == []
