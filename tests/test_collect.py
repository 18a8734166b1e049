"""Any combination of test files collects: the plumbing that makes that true stays true.

Test folders have no ``__init__.py``, so pytest imports every test module and helper under its
bare name: two helpers of one name in two folders, or ``from conftest import`` (which picks
whichever folder's conftest pytest loaded last), work in one order and break in another, e.g.
``pytest tests/cache/test_cache_format.py tests/pods/test_pods_cancel.py``.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from gpuci_testing import REPO, clean_env

TESTS = REPO / "tests"
# Not imported by the suite: files act copies into a runner's environment.
NOT_MODULES = ("actions/act_stubs/",)


def _python_files() -> list[Path]:
    return sorted(
        path
        for path in TESTS.rglob("*.py")
        if not path.relative_to(TESTS).as_posix().startswith(NOT_MODULES)
    )


def _imports_conftest(node: ast.AST) -> bool:
    if isinstance(node, ast.ImportFrom):
        return node.module == "conftest"
    return isinstance(node, ast.Import) and any(a.name == "conftest" for a in node.names)


def test_no_module_imports_a_conftest():
    found = [
        f"{path.relative_to(REPO)}:{node.lineno}"
        for path in _python_files()
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if _imports_conftest(node)
    ]
    assert found == [], f"move what these import into a named helper module: {found}"


def test_module_names_are_unique_across_the_tree():
    seen: dict[str, list[str]] = {}
    for path in _python_files():
        if path.name not in ("conftest.py", "__init__.py"):
            seen.setdefault(path.stem, []).append(path.relative_to(REPO).as_posix())
    assert {k: v for k, v in seen.items() if len(v) > 1} == {}


def test_files_from_every_folder_collect_together():
    """The issue's example, plus the first test file of every other folder, in one run: every
    folder's conftest is loaded before any of their modules is imported."""
    chosen = ["tests/cache/test_cache_format.py", "tests/pods/test_pods_cancel.py"]
    folders = sorted(
        {p.parent for p in TESTS.rglob("test_*.py")} - {TESTS / "cache", TESTS / "pods"}
    )
    for folder in folders:
        first = min(folder.glob("test_*.py"))
        chosen.append(first.relative_to(REPO).as_posix())
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "-n0",
            *chosen,
        ],
        cwd=REPO,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for name in chosen:
        assert f"{name}::" in proc.stdout, name
