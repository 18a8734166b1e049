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
# gpu-smoke (gpu._smoke.command calls it after the verdict), and it stands on gpu's options and
# NVML and on the forges' runner clients; the arrow from gpu is that one module's alone.
BASE = {"gpuci.gpu", "gpuci.cache", "gpuci.fetch", "gpuci.forges", "gpuci.quarantine"}
ABOVE_BASE = ENTRY | REGISTRY | USERS
# The cache's own floors, top to bottom (docs/architecture.md): its Python API, the
# operations, moving bytes, the format, the stores, and the names and inputs all of them share.
# A cache module imports its own floor and the ones below; every module sits on one floor.
CACHE_FLOORS = (
    {"gpuci.cache.api"},
    {"gpuci.cache._restore", "gpuci.cache._save", "gpuci.cache._upkeep", "gpuci.cache._common"},
    {"gpuci.cache._transfer"},
    {"gpuci.cache._format"},
    {"gpuci.cache._stores"},
    {"gpuci.cache._layout", "gpuci.cache.options"},
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
    assert "gpuci.cache._stores.file" in GRAPH["gpuci.cache._stores"]  # module level
    assert "gpuci.cache._stores.s3.store" in GRAPH["gpuci.cache._stores"]  # inside a function
    assert "gpuci.forges._rest" in GRAPH["gpuci.forges._github"]
    assert "gpuci.commands._dispatch" in GRAPH["gpuci.dryrun._calls"]


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
        "gpuci.gpu._smoke.command -> gpuci.quarantine"
    ]


def test_training_and_pods_use_the_base_not_each_other_or_the_commands():
    assert _arrows({"gpuci.training"}, {"gpuci.pods"}) == []
    assert _arrows({"gpuci.pods"}, {"gpuci.training"}) == []
    assert _arrows(USERS, ENTRY | REGISTRY) == []


def test_the_library_never_imports_a_command():
    """Commands call the Python API, never the reverse: no module but the entry points, the
    registry and the shells themselves imports a ``*.command`` module or the registry (so
    ``gpuci.cache.api``, ``gpuci.gpu.api`` and the operations they call reach neither)."""
    assert "gpuci.cache._restore.command" in SHELLS and "gpuci.cache._save.command" in SHELLS
    assert "gpuci.gpu._setup.command" in SHELLS and "gpuci.gpu._smoke.command" in SHELLS
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


# ----- Public and private (issue 36) ------------------------------------------------------------
# A module a user must not import is private: its name, or a folder above it, starts with ``_``.
# Every other module of these packages is public and named in its package's ``__all__``.
PRIVACY_CHECKED = (
    "gpuci.gpu",
    "gpuci.pods",
    "gpuci.commands",
    "gpuci.dryrun",
    "gpuci.training",
    "gpuci.forges",
    "gpuci.cache",
    "gpuci.fetch",
    "gpuci.ranged",
)
# Private in intent, but named publicly until what blocks the rename is gone (delete on rename).
NOT_YET_PRIVATE: dict[str, str] = {}
# Names a public module's ``__all__`` takes from a private module on purpose: its surface.
RE_EXPORTED = {
    "gpuci.cache.options": {"SaveInputs"},  # built on first use: a restore never builds it
    "gpuci.fetch": {"FetchPolicy", "FetchResult", "fetch_file"},  # its API, defined privately
    "gpuci.gpu.api": {"CheckOutcome"},  # SetupResult.checks holds them
    "gpuci.dryrun": {"ROOT", "DryRunInputs", "classify_uses"},  # the dry run's entry points
    "gpuci.gpu.fake.nvml": {  # the fake's seam: its profiles, devices and error
        "MACHINE_STATES",
        "MEMORY_READS",
        "PROFILES",
        "UNSUPPORTED",
        "FakeDevice",
        "FakeMig",
        "MiB",
        "MigProfile",
        "NVMLError",
        "Profile",
        "clock_event_names_for_counter",
    },
}


def _is_private(module: str) -> bool:
    return any(part.startswith("_") for part in module.split(".")) or _under(
        module, set(NOT_YET_PRIVATE)
    )


def _all_of(path: Path) -> list[str] | None:
    """The literal ``__all__`` of a module's source; None when it has none."""
    for node in ast.parse(path.read_text(encoding="utf-8"), str(path)).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if isinstance(target, ast.Name) and target.id == "__all__":
            return [ast.literal_eval(e) for e in getattr(node.value, "elts", [])]
    return None


def _unlisted(modules: list[str], alls: dict[str, list[str] | None]) -> list[str]:
    """Public modules (and packages) missing from their package's ``__all__``, or a public
    package without an ``__all__``."""
    bad = []
    for module in modules:
        if _is_private(module):
            continue
        if module in alls and alls[module] is None:
            bad.append(f"{module} has no __all__")
        parent, _, name = module.rpartition(".")
        if parent in alls and name not in (alls[parent] or []):
            bad.append(f"{module} is public but not in {parent}.__all__")
    return sorted(bad)


def _taken_from_private(module: str, path: Path) -> set[str]:
    """The names in ``module``'s ``__all__`` that it imports from a private module."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    exported = set(_all_of(path) or [])
    taken = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if not isinstance(node, ast.ImportFrom):
            continue
        base = node.module or ""
        if node.level:
            anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
            base = ".".join([*anchor, *([node.module] if node.module else [])])
        for alias in node.names:
            source = f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
            if (alias.asname or alias.name) in exported and _is_private(source):
                taken.add(alias.asname or alias.name)
    return taken


def _checked() -> list[str]:
    return sorted(m for m in MODULES if any(m.startswith(p + ".") for p in PRIVACY_CHECKED))


def test_the_privacy_rule_can_fail():
    """Guards the checks below on made-up packages: each must catch what it is for."""
    alls = {"p": ["a"], "p.pkg": None, "p._q": None}
    assert _unlisted(["p.a", "p.b", "p._c", "p._q.d", "p.pkg"], alls) == [
        "p.b is public but not in p.__all__",
        "p.pkg has no __all__",
        "p.pkg is public but not in p.__all__",
    ]
    assert "gpuci.gpu.options" in _checked() and "gpuci.gpu._nvml" in _checked()
    assert _taken_from_private("gpuci.gpu.api", MODULES["gpuci.gpu.api"]) == {"CheckOutcome"}


def test_every_public_module_is_in_its_package_all():
    """A module not named ``_x`` (nor under a ``_x/`` folder) is public: its package's
    ``__all__`` names it, and a public package has an ``__all__``."""
    modules = _checked()
    alls = {m: _all_of(MODULES[m]) for m in modules if MODULES[m].name == "__init__.py"}
    alls.update({p: _all_of(MODULES[p]) for p in PRIVACY_CHECKED})
    assert _unlisted(modules, alls) == []


def test_no_public_module_exports_a_private_name_by_accident():
    """A public module's ``__all__`` holds no ``_`` name, and takes from a private module only
    the names :data:`RE_EXPORTED` lists (and all of them: the list never goes stale)."""
    found = {}
    for module in (*PRIVACY_CHECKED, *_checked()):
        if _is_private(module):
            continue
        exported = _all_of(MODULES[module]) or []
        assert [n for n in exported if n.startswith("_")] == [], module
        taken = _taken_from_private(module, MODULES[module])
        if taken:
            found[module] = taken
    assert found == RE_EXPORTED


def test_not_yet_private_modules_still_wait():
    """Each entry names a module still there under its public name, not yet under the private
    one: delete the entry when the module is renamed."""
    for now, later in NOT_YET_PRIVATE.items():
        assert now in MODULES and later not in MODULES, (now, later)
