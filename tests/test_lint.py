"""ruff and mypy are part of the test command, so a lint or type error fails CI like a test."""

import shutil
import subprocess
import sys

from gpuci_testing import REPO

TARGETS = ["src", "tests", "scripts", "examples"]


def _ruff(*args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("ruff") or sys.executable
    cmd = [exe, *args] if exe != sys.executable else [exe, "-m", "ruff", *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, check=False)


def test_ruff_check():
    proc = _ruff("check", *TARGETS)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ruff_format():
    proc = _ruff("format", "--check", *TARGETS)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy():
    """The type checker over all of src/ (configured in pyproject.toml's [tool.mypy])."""
    proc = subprocess.run(
        [sys.executable, "-m", "mypy"], capture_output=True, text=True, cwd=REPO, check=False
    )
    assert proc.returncode == 0, proc.stdout[-8000:] + proc.stderr[-2000:]
