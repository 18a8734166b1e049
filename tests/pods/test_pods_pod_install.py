"""What a smoking pod runs to get gpu-ci (``gpuci_install``): every dependency pinned, by hash.

It used to ``pip install "gpuci @ $GPUCI_PACKAGE"``: gpu-ci pinned, its dependencies resolved
from the index. Now it fetches the pinned source and installs that source's requirements.lock
with ``--require-hashes --no-deps``, as scripts/bootstrap.sh does; a source with no lock (a
wheel) is refused in one line. Each test runs the real shell functions under ``sh`` with an
image whose python has no gpu-ci and a python that records every command it is given
(``pip`` among them), then runs them; pip works offline (pod_sources.offline_pip).
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from pod_sources import (
    TOY,
    gpuci_files,
    offline_pip,
    pinned,
    source_archive,
    source_repository,
    toy_lock,
    wheel,
)
from pods_testing import executable

from gpuci.pods.health._handover import SHELL
from gpuci_testing import clean_env

REPORT = 'echo "rc=$? site=$gpuci_site"; echo "why=$gpuci_why"'


def install(tmp_path: Path, package: str) -> tuple[int, str, str, list[list[str]]]:
    """``gpuci_install`` with ``GPUCI_PACKAGE=package`` on a stock image: its status,
    ``gpuci_site``, ``gpuci_why`` and every command line the pod's python was given."""
    image = tmp_path / "image"
    (image / "gpuci").mkdir(parents=True, exist_ok=True)
    (image / "gpuci" / "__init__.py").write_text("raise ImportError('not on this image')\n")
    calls = tmp_path / "python-calls"
    calls.write_text("")
    python = executable(
        tmp_path / "bin" / "python3",
        f'#!/bin/sh\nprintf "%s\\0" "$@" >>{shlex.quote(str(calls))}\necho >>{calls}\n'
        f'exec {shlex.quote(sys.executable)} "$@"\n',
    )
    env = clean_env(
        HOME=str(tmp_path / "home"),
        PYTHONPATH=str(image),
        GPUCI_SMOKE_PYTHON=str(python),
        GPUCI_PACKAGE=package,
        **offline_pip(tmp_path),
    )
    proc = subprocess.run(
        ["sh", "-c", f"{SHELL}\ngpuci_install\n{REPORT}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    lines = proc.stdout.splitlines()
    status, site = lines[-2].removeprefix("rc=").split(" site=", 1)
    commands = [line.strip("\0").split("\0") for line in calls.read_text().splitlines() if line]
    return int(status), site, lines[-1].removeprefix("why="), commands


def pip_installs(commands: list[list[str]]) -> list[list[str]]:
    return [c for c in commands if c[:3] == ["-m", "pip", "install"]]


@pytest.mark.parametrize("form", ["archive", "git"])
def test_the_pod_installs_every_dependency_from_the_lock_by_hash(tmp_path: Path, form: str):
    """Every pip install the pod runs is the source's lock, hashes required, nothing resolved:
    the one dependency the lock pins is what the smoke imports, gpu-ci from the source."""
    offline_pip(tmp_path)
    lock = toy_lock(tmp_path)
    package = (
        pinned(source_archive(tmp_path, lock))
        if form == "archive"
        else source_repository(tmp_path, lock)
    )
    status, site, why, commands = install(tmp_path, package)
    (pip,) = pip_installs(commands)
    assert "--require-hashes" in pip and "--no-deps" in pip, pip
    assert status == 0, why
    (lock_file,) = [pip[i + 1] for i, arg in enumerate(pip) if arg == "-r"]
    assert Path(lock_file).read_text() == lock
    assert not [a for a in pip if "gpuci" in a and "/" not in a], pip  # no requirement by name
    src, deps = site.split(":")
    probe = f"import gpuci, {TOY}; print(gpuci.__file__, {TOY}.__file__)"
    out = subprocess.run(
        [sys.executable, "-c", probe],
        env=clean_env(PYTHONPATH=site),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split()
    assert out[0].startswith(src) and out[1].startswith(deps), out


def test_a_lock_hash_that_does_not_match_installs_nothing(tmp_path: Path):
    offline_pip(tmp_path)
    package = pinned(source_archive(tmp_path, toy_lock(tmp_path, tampered=True)))
    status, site, why, commands = install(tmp_path, package)
    assert status == 1 and site == "", why
    assert why.startswith("gpu-ci install from GPUCI_PACKAGE failed: ") and "\n" not in why
    assert len(pip_installs(commands)) == 1
    assert not list((tmp_path / "home").rglob(f"{TOY}.py"))


def test_a_wheel_cannot_pin_its_dependencies_and_is_refused(tmp_path: Path):
    """A wheel holds gpu-ci alone: its dependencies would come from the index unpinned, so the
    pod installs nothing and says why in one line (the smoke is skipped)."""
    path = wheel(tmp_path / "gpuci-0.0.0-py3-none-any.whl", "gpuci", "0.0.0", gpuci_files())
    status, site, why, commands = install(tmp_path, pinned(path))
    assert status == 1 and site == "", why
    assert "requirements.lock" in why and "cannot be pinned" in why, why
    assert pip_installs(commands) == []


def test_an_archive_with_other_bytes_is_refused_before_it_is_unpacked(tmp_path: Path):
    offline_pip(tmp_path)
    url = pinned(source_archive(tmp_path, toy_lock(tmp_path)))
    status, _, why, commands = install(tmp_path, url[: -len("0" * 64)] + "0" * 64)
    assert status == 1 and "not the pinned" in why, why
    assert pip_installs(commands) == []
    assert not list((tmp_path / "home").rglob("requirements.lock"))
