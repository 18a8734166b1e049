"""scripts/bootstrap.sh: one hash-locked venv per job, reused, never half-built."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from action_env import REPO, machine_env

BOOTSTRAP = REPO / "scripts" / "bootstrap.sh"


def bootstrap(
    runner_temp: Path, script: Path = BOOTSTRAP, **env: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, str]]:
    github_env = runner_temp / "github_env"
    github_env.touch()
    full = {
        **machine_env(),
        "GITHUB_ACTIONS": "true",
        "GITHUB_ENV": str(github_env),
        "RUNNER_TEMP": str(runner_temp),
        **env,
    }
    proc = subprocess.run(
        ["bash", str(script)], capture_output=True, text=True, env=full, timeout=600, check=False
    )
    exported = dict(
        line.split("=", 1) for line in github_env.read_text().splitlines() if "=" in line
    )
    return proc, exported


def test_reuses_an_interpreter_that_runs_this_checkout(tmp_path: Path) -> None:
    proc, exported = bootstrap(tmp_path, GPUCI_PYTHON=sys.executable)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == sys.executable
    assert exported == {"GPUCI_PYTHON": sys.executable}
    assert "reusing" in proc.stderr
    assert not list(tmp_path.glob("gpuci-venv-*"))  # nothing built


def test_a_missing_lock_is_one_clear_error(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(BOOTSTRAP, repo / "scripts")
    proc, exported = bootstrap(tmp_path, script=repo / "scripts" / "bootstrap.sh")
    assert proc.returncode == 2
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("::error title=gpu-ci bootstrap::")
    assert "requirements.lock is missing" in lines[0] and "(fix: " in lines[0]
    assert exported == {}


def _pip_only_path(tmp_path: Path) -> str:
    """A PATH whose python3 is this interpreter and that has no uv: the pip branch."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)
    dirs = [str(bin_dir), "/usr/bin", "/bin"]
    if shutil.which("uv", path=os.pathsep.join(dirs[1:])):
        pytest.skip("uv is installed system-wide here; the pip branch cannot be isolated")
    return os.pathsep.join(dirs)


@pytest.mark.slow
@pytest.mark.timeout(900)  # a hang guard: pip installs the lock, minutes on a busy runner
@pytest.mark.parametrize("installer", ["uv", "pip"])
def test_builds_a_venv_from_the_lock_for_real(tmp_path: Path, installer: str) -> None:
    """Slow: installs requirements.lock from PyPI (or the local cache) into a new venv."""
    if installer == "uv":
        bin_dir = Path(sys.executable).parent
        if not (bin_dir / "uv").exists():
            pytest.skip("uv not in this venv")
        path = os.pathsep.join([str(bin_dir), "/usr/bin", "/bin"])
    else:
        path = _pip_only_path(tmp_path)
    proc, exported = bootstrap(tmp_path, PATH=path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"with {installer}" in proc.stderr
    python = Path(exported["GPUCI_PYTHON"])
    assert re.fullmatch(r"gpuci-venv-[0-9a-f]{16}", python.parent.parent.name)
    home = python.parent.parent.parent
    assert home == tmp_path / "gpuci-venvs"  # a private folder inside RUNNER_TEMP
    assert stat.S_IMODE(home.stat().st_mode) == 0o700 and home.stat().st_uid == os.getuid()
    assert proc.stdout.strip().splitlines()[-1] == str(python)  # after ::group:: lines
    assert not list(home.glob("*.incomplete*"))
    # The locked versions, and gpu-ci from this checkout.
    pins = dict(re.findall(r"^([a-z0-9-]+)==(\S+)", (REPO / "requirements.lock").read_text(), re.M))
    probe = subprocess.run(
        [
            str(python),
            "-c",
            "import importlib.metadata as m, gpuci, sys;"
            "print(gpuci.__file__); [print(n, m.version(n)) for n in sys.argv[1:]]",
            "httpx",
            "boto3",
            "nvidia-ml-py",
            "tenacity",
            "pyyaml",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    lines = probe.stdout.splitlines()
    assert Path(lines[0]).resolve().is_relative_to(REPO / "src")
    for line in lines[1:]:
        name, version = line.split()
        assert pins[name] == version, line
    assert (
        subprocess.run(
            [str(python), "-m", "gpuci", "--help"], capture_output=True, check=False, timeout=60
        ).returncode
        == 0
    )
    # The next gpu-ci action in the job (GPUCI_PYTHON not yet in its env) reuses it: no install.
    again, exported_again = bootstrap(tmp_path, PATH=path)
    assert again.returncode == 0 and "reusing" in again.stderr
    assert "installed in" not in again.stderr and "installing" not in again.stdout
    assert exported_again["GPUCI_PYTHON"] == str(python)


@pytest.mark.slow
@pytest.mark.timeout(900)  # a hang guard: pip installs the lock, minutes on a busy runner
def test_a_tampered_lock_fails_and_leaves_nothing(tmp_path: Path) -> None:
    """Slow: a hash that does not match the download must stop the install."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(BOOTSTRAP, repo / "scripts")
    (repo / "src").symlink_to(REPO / "src")
    text = (REPO / "requirements.lock").read_text()
    block = re.search(r"^tenacity==.*?(?=^\S)", text, re.M | re.S)
    assert block
    bad = re.sub(r"sha256:[0-9a-f]{64}", "sha256:" + "0" * 64, block.group(0))
    (repo / "requirements.lock").write_text(text.replace(block.group(0), bad))
    runner_temp = tmp_path / "temp"
    runner_temp.mkdir()
    proc, exported = bootstrap(
        runner_temp, script=repo / "scripts" / "bootstrap.sh", PATH=_pip_only_path(tmp_path)
    )
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "::error title=gpu-ci bootstrap::installing the hash-locked requirements" in proc.stdout
    assert "HASH" in proc.stderr.upper()  # pip says which hash did not match
    assert exported == {}
    assert not list(runner_temp.iterdir()) or not any(
        p.name.startswith("gpuci-venv-") for p in runner_temp.iterdir()
    )
