"""scripts/bootstrap.sh: one hash-locked install per job, shared by every copy of gpu-ci in it,
reused, never half-built."""

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
    runner_temp: Path, script: Path = BOOTSTRAP, umask: int = 0o022, **env: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, str]]:
    github_env = runner_temp / "github_env"
    github_env.touch()
    full = {
        **machine_env(),
        # pip byte-compiles every module it installs (botocore's hundreds): most of its CPU, for
        # files no test here reads (Python compiles what it imports as it imports it)
        "PIP_COMPILE": "0",
        "GITHUB_ACTIONS": "true",
        "GITHUB_ENV": str(github_env),
        "RUNNER_TEMP": str(runner_temp),
        **env,
    }
    proc = subprocess.run(
        ["bash", "-c", f'umask {umask:03o} && exec bash "$0"', str(script)],
        capture_output=True,
        text=True,
        env=full,
        timeout=600,
        check=False,
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


def _uv_path() -> str:
    """A PATH with this venv's uv (and python3) first: the branch the actions take on act.
    Tests that bootstrap other copies of gpu-ci also pass PYTHONPATH="": a PYTHONPATH naming
    this checkout's src (as when the suite runs from a source tree) would shadow theirs."""
    bin_dir = Path(sys.executable).parent
    if not (bin_dir / "uv").exists():
        pytest.skip("uv not in this venv")
    return os.pathsep.join([str(bin_dir), "/usr/bin", "/bin"])


def _copy_checkout(dest: Path) -> Path:
    """Another copy of this gpu-ci ref, as the runner makes one per ``uses:`` path."""
    for name in ("scripts", "src"):
        shutil.copytree(REPO / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "requirements.lock", dest)
    return dest / "scripts" / "bootstrap.sh"


def _where(python: str) -> tuple[Path, Path]:
    """Where ``python`` imports gpu-ci and httpx from (its own, whatever PYTHONPATH says)."""
    out = subprocess.run(
        [python, "-c", "import gpuci, httpx; print(gpuci.__file__); print(httpx.__file__)"],
        env={**machine_env(), "PYTHONPATH": ""},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split()
    return Path(out[0]), Path(out[1])


@pytest.mark.slow
@pytest.mark.timeout(900)  # a hang guard: pip installs the lock, minutes on a busy runner
@pytest.mark.parametrize("installer", ["uv", "pip"])
def test_builds_a_venv_from_the_lock_for_real(tmp_path: Path, installer: str) -> None:
    """Slow: installs requirements.lock from PyPI (or the local cache) into a new venv."""
    path = _uv_path() if installer == "uv" else _pip_only_path(tmp_path)
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
    # The lock is installed once, in the deps venv; this checkout's venv only links to it.
    (deps,) = home.glob("gpuci-deps-*")
    assert _where(str(python))[1].is_relative_to(deps)
    assert not list(python.parent.parent.rglob("httpx"))
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
    """Slow: a hash that does not match the download must stop the install. With uv, which
    bootstrap takes wherever it is; pip's refusal (the branch of a Python image without uv) is
    test_gitlab_install.py's index serving other bytes."""
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
        runner_temp, script=repo / "scripts" / "bootstrap.sh", PATH=_uv_path(), PYTHONPATH=""
    )
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "::error title=gpu-ci bootstrap::installing the hash-locked requirements" in proc.stdout
    assert "HASH" in proc.stderr.upper()  # uv says which hash did not match
    assert exported == {}
    assert not list((runner_temp / "gpuci-venvs").iterdir())  # nothing half-built left


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_checkouts_of_one_job_share_one_install(tmp_path: Path) -> None:
    """A job using three gpu-ci actions runs bootstrap from three copies of gpu-ci, each after
    the one before exported GPUCI_PYTHON: the lock is installed once, each copy gets a venv of
    its own (a few KB) that runs gpu-ci from that copy."""
    path = _uv_path()
    scripts = [BOOTSTRAP, _copy_checkout(tmp_path / "a"), _copy_checkout(tmp_path / "b")]
    runner_temp = tmp_path / "temp"
    runner_temp.mkdir()
    pythons: list[str] = []
    for i, script in enumerate(scripts):
        inherited = {"GPUCI_PYTHON": pythons[-1]} if pythons else {}
        proc, exported = bootstrap(
            runner_temp, script=script, PATH=path, PYTHONPATH="", **inherited
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert ("installed in" in proc.stderr) == (i == 0), proc.stderr
        pythons.append(exported["GPUCI_PYTHON"])
    home = runner_temp / "gpuci-venvs"
    (deps,) = home.glob("gpuci-deps-*")
    assert len(set(pythons)) == 3 and len(list(home.glob("gpuci-venv-*"))) == 3
    for python, script in zip(pythons, scripts, strict=True):
        gpuci, httpx = _where(python)
        assert gpuci.resolve().is_relative_to(script.parent.parent.resolve() / "src")
        assert httpx.is_relative_to(deps)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_umask_of_002_does_not_defeat_reuse(tmp_path: Path) -> None:
    """Under umask 002 (many desktops) a venv made with the caller's umask is group-writable,
    so the next bootstrap refused it and reinstalled, every time: bootstrap sets umask 077."""
    path = _uv_path()
    first, exported = bootstrap(tmp_path, umask=0o002, PATH=path)
    assert first.returncode == 0, first.stdout + first.stderr
    again, _ = bootstrap(tmp_path, umask=0o002, PATH=path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "not reusing" not in again.stderr and "installed in" not in again.stderr
    assert f"reusing {Path(exported['GPUCI_PYTHON']).parent.parent}" in again.stderr
    for venv in (tmp_path / "gpuci-venvs").iterdir():
        assert stat.S_IMODE(venv.stat().st_mode) == 0o700, venv


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_dependency_site_packages_others_can_write_is_rebuilt(tmp_path: Path) -> None:
    """The folder every checkout's .pth names: writable by group, it is not linked to again."""
    path = _uv_path()
    first, exported = bootstrap(tmp_path, PATH=path)
    assert first.returncode == 0, first.stdout + first.stderr
    site = _where(exported["GPUCI_PYTHON"])[1].parent.parent
    deps = site.parents[2]
    assert deps.name.startswith("gpuci-deps-")
    site.chmod(0o770)
    copy = _copy_checkout(tmp_path / "copy")
    proc, exported = bootstrap(tmp_path, script=copy, PATH=path, PYTHONPATH="")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"not reusing {deps}: {site} can be written by other users (mode 770)" in proc.stderr
    assert "installed in" in proc.stderr  # a new one
    assert stat.S_IMODE(site.stat().st_mode) & 0o022 == 0
    assert _where(exported["GPUCI_PYTHON"])[1].is_relative_to(deps)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_checkout_venv_whose_site_packages_others_can_write_is_not_run(tmp_path: Path) -> None:
    """Its gpuci.pth would run before any check once its Python starts: the folder is checked
    first, without starting that Python, and the venv rebuilt."""
    path = _uv_path()
    first, exported = bootstrap(tmp_path, PATH=path)
    assert first.returncode == 0, first.stdout + first.stderr
    venv = Path(exported["GPUCI_PYTHON"]).parent.parent
    (site,) = venv.glob("lib/python3*/site-packages")
    site.chmod(0o777)
    again, exported = bootstrap(tmp_path, PATH=path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"not reusing {venv}: {site} can be written by other users (mode 777)" in again.stderr
    (site,) = Path(exported["GPUCI_PYTHON"]).parent.parent.glob("lib/python3*/site-packages")
    assert stat.S_IMODE(site.stat().st_mode) & 0o022 == 0
