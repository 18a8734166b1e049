"""gpuci.settings: every variable declared once, read through one parse rule per type, and no
other module spelling a declared name (docs/settings.md is checked in tests/test_docs.py)."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from gpuci import settings
from gpuci.errors import ExitCode, InputError
from gpuci_testing import REPO

# Modules whose owners move their reads onto gpuci.settings on their own branches (issue 36):
# the lead empties this set once those have merged. Paths relative to src/gpuci.
NOT_YET_ON_SETTINGS: frozenset[str] = frozenset()


def _unmigrated(relative: str) -> bool:
    return relative.split("/")[0] in NOT_YET_ON_SETTINGS


def test_every_setting_is_reachable_by_its_own_name_in_the_module():
    """Two declarations bound to one Python name hide the first (GPUCI_RUNNER_NAME was once
    shadowed by the runner's RUNNER_NAME): every declared setting is a module attribute."""
    bound = {id(v) for v in vars(settings).values() if isinstance(v, settings.Setting)}
    hidden = [s.name for s in settings.ALL if id(s) not in bound]
    assert hidden == [], f"settings shadowed by a later declaration of the same name: {hidden}"


def test_no_module_but_settings_py_spells_a_declared_name():
    """A string that is exactly a declared variable's name (``environ.get("GITHUB_TOKEN")``,
    ``ENV = "GPUCI_STORE"``) is a second declaration, with its own default and parse rule:
    read it as ``settings.NAME.value(environ)`` instead. Prose that mentions a name (a
    docstring, a hint) is not a read and is allowed."""
    names = {s.name for s in settings.ALL}
    found: dict[str, list[str]] = {}
    for path in sorted((REPO / "src" / "gpuci").rglob("*.py")):
        relative = path.relative_to(REPO / "src" / "gpuci").as_posix()
        if relative == "settings.py" or _unmigrated(relative):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in names:
                found.setdefault(relative, []).append(f"{node.value}:{node.lineno}")
    assert found == {}, f"read these through gpuci.settings: {found}"


def test_the_allow_list_names_only_what_still_reads_directly():
    """An entry left in NOT_YET_ON_SETTINGS after its module moved over hides a regression."""
    names = {s.name for s in settings.ALL}
    still = set()
    for path in (REPO / "src" / "gpuci").rglob("*.py"):
        relative = path.relative_to(REPO / "src" / "gpuci").as_posix()
        if not _unmigrated(relative):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        if any(isinstance(n, ast.Constant) and n.value in names for n in ast.walk(tree)):
            still.add(relative.split("/")[0])
    assert still == NOT_YET_ON_SETTINGS, f"remove {NOT_YET_ON_SETTINGS - still} from the set"


def test_value_is_set_is_true_and_raw():
    s = settings.GITHUB_API_URL
    assert s.value({}) == "https://api.github.com"
    assert s.value({s.name: "  https://ghes/api/v3 "}) == "https://ghes/api/v3"
    assert s.value({s.name: "   "}) == "https://api.github.com" and not s.is_set({s.name: " "})
    assert settings.GITLAB_CI.is_true({"GITLAB_CI": "True"})
    visible = settings.CUDA_VISIBLE_DEVICES
    assert visible.raw({}) is None and visible.raw({visible.name: ""}) == ""  # "": no GPU


def test_numbers_have_one_parse_rule_and_one_error_naming_the_variable():
    s = settings.PROGRESS_INTERVAL
    assert s.number({}) == 5.0 and s.number({s.name: "0.5"}) == 0.5 and s.number({s.name: "2"}) == 2
    assert settings.DOTENV_LIMIT.integer({}, minimum=1) == 20
    assert settings.DOTENV_LIMIT.integer({"GPUCI_DOTENV_LIMIT": " 7 "}) == 7
    for bad in ("nan", "inf", "-1", "1e3", "5s", "٣", "0x10", "9" * 40):
        with pytest.raises(InputError) as caught:
            s.number({s.name: bad})
        line = caught.value.one_line()
        assert (
            line.startswith("GPUCI_PROGRESS_INTERVAL=")
            and "(fix: set GPUCI_PROGRESS_INTERVAL" in line
        )
        assert len(line) < 200 and caught.value.exit_code == ExitCode.BAD_INPUT
    for bad in ("1.5", "-3", "0", "twenty", "٣"):
        with pytest.raises(InputError, match="GPUCI_DOTENV_LIMIT="):
            settings.DOTENV_LIMIT.integer({"GPUCI_DOTENV_LIMIT": bad}, minimum=1)


def test_a_bad_progress_interval_is_one_line_not_a_traceback(tmp_path):
    """The runtime's progress meter reads GPUCI_PROGRESS_INTERVAL through Setting.number: a
    typo is exit 2 naming the variable (it was float()'s ValueError, an internal error)."""
    from gpuci.runtime import Runtime

    rt = Runtime({"GPUCI_PROGRESS_INTERVAL": "often"})
    with pytest.raises(InputError, match="GPUCI_PROGRESS_INTERVAL='often' is not a number"):
        rt.progress("download", 10)


def test_importing_settings_loads_nothing_heavy():
    """``python -m gpuci --help`` imports it: the table and the standard library's basics."""
    probe = "import sys, gpuci.settings; print(sorted(m for m in sys.modules if 'gpuci' in m))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['gpuci', 'gpuci.settings']"
