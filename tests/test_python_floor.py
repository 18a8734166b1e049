"""The Python floor ``requires-python`` declares is the one the code really needs.

Many GPU images and Ubuntu 22.04 runners ship Python 3.10, so gpu-ci must import and run there.
vermin (PyPI) reads the source and names every feature newer than the floor (``datetime.UTC``,
``tomllib``, ``typing.Self``, ``StrEnum``, ``ExceptionGroup``, ``except*``, ``TaskGroup``...);
a run on a 3.10 interpreter would need one on every developer's machine, vermin does not.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpuci_testing import REPO

FLOOR = "3.10"
# Files another branch of this round fixes (h21http rewrites the S3 fast path, datetime.UTC
# included); the integrator empties this once both branches are merged.
_PENDING: tuple[str, ...] = ()


def _vermin(*paths: str | Path) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("vermin") or str(Path(sys.executable).with_name("vermin"))
    if not Path(exe).exists():
        pytest.fail("vermin is not installed: it is in the dev extra (pip install -e '.[dev]')")
    cmd = [exe, f"--target={FLOOR}-", "--no-tips", "--violations", "--eval-annotations", "-q"]
    # one process: vermin's default, a pool of one per CPU, each importing vermin again and
    # sent every file's results back, took more CPU (5.1 against 4.4 s on a 2-core machine, the
    # mean of three paired runs), and pytest-xdist already keeps the CPUs busy
    cmd.append("--processes=1")
    return subprocess.run(
        [*cmd, *map(str, paths)], capture_output=True, text=True, cwd=REPO, check=False
    )


def test_declared_floor_is_the_tested_one():
    # (read with a pattern: tomllib is 3.11+, the very thing this file guards against)
    pyproject = (REPO / "pyproject.toml").read_text()
    assert f'requires-python = ">={FLOOR}"' in pyproject
    assert f'target-version = "py{FLOOR.replace(".", "")}"' in pyproject
    # bootstrap.sh looks for an interpreter at the same floor and says so when none is found.
    boot = (REPO / "scripts" / "bootstrap.sh").read_text()
    major, minor = FLOOR.split(".")
    assert f"sys.version_info < ({major}, {minor})" in boot
    assert f"Python {FLOOR} or newer" in boot
    assert f"Python >= {FLOOR}" in boot


def test_package_needs_nothing_newer_than_the_floor():
    files = [
        p
        for p in sorted((REPO / "src" / "gpuci").rglob("*.py"))
        if p.relative_to(REPO).as_posix() not in _PENDING
    ]
    files += sorted((REPO / "scripts").glob("*.py"))
    proc = _vermin(*files)
    assert proc.returncode == 0, f"features newer than Python {FLOOR}:\n{proc.stdout}{proc.stderr}"


NEWER = [
    "import datetime\nSTAMP = datetime.UTC\n",
    "from datetime import UTC\n",
    "import tomllib\n",
    "from typing import Self\n",
    "from enum import StrEnum\n",
    "try:\n    pass\nexcept* ValueError:\n    pass\n",
    "import asyncio\nasync def f():\n    async with asyncio.TaskGroup():\n        pass\n",
    "def f(e: list):\n    raise ExceptionGroup('x', e)\n",
]


def test_the_check_sees_what_3_10_lacks(tmp_path: Path):
    """The check above is live: each 3.11 feature, alone in a scratch file, fails it (one
    vermin run over the eight files, each named with its 3.11+ need)."""
    paths = []
    for i, source in enumerate(NEWER):
        paths.append(tmp_path / f"newer{i}.py")
        paths[-1].write_text(source)
    proc = _vermin(*paths)
    assert proc.returncode != 0, proc.stdout
    flagged = set(re.findall(r"^!2, 3\.1[1-9]\s+(\S+)$", proc.stdout, re.MULTILINE))
    for path, source in zip(paths, NEWER, strict=True):
        assert str(path) in flagged, f"{source}\n{proc.stdout}"
