"""Another user on the runner plants an interpreter where scripts/bootstrap.sh looks for its
venv (issue 11, item 3): nothing may run from a path another user could have written."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BOOTSTRAP = REPO / "scripts" / "bootstrap.sh"
ROOT_ONLY = pytest.mark.skipif(
    os.geteuid() != 0, reason="planting a folder owned by another uid needs root"
)


STUB_VERSION = "3.12.0 (stub)"


def names(tmp: Path) -> tuple[str, str]:
    """The names bootstrap gives the deps venv (sha256 of the lock and the base interpreter's
    path and version) and this checkout's venv (of the deps key and the src path), when the
    base is :func:`run_bootstrap`'s ``python3`` with ``base=True``."""
    python = tmp / "stubs" / "python3"
    lock = (REPO / "requirements.lock").read_bytes()
    deps = hashlib.sha256(lock + f"{python}\n{STUB_VERSION}\n".encode()).hexdigest()[:16]
    venv = hashlib.sha256(f"{deps}\n{REPO.resolve() / 'src'}\n".encode()).hexdigest()[:16]
    return f"gpuci-deps-{deps}", f"gpuci-venv-{venv}"


def venv_name(tmp: Path) -> str:
    return names(tmp)[1]


def plant_venv(venv: Path, marker: Path, owner: int | None = None) -> Path:
    """A 'venv' whose python, when anything runs it, leaves a marker and claims success."""
    python = venv / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f"#!/bin/sh\necho planted >'{marker}'\nexit 0\n")
    python.chmod(0o755)
    if owner is not None:
        for path in (venv, venv / "bin", python):
            os.chown(path, owner, owner)
    return python


def run_bootstrap(tmp: Path, base: bool = False, **env: str) -> subprocess.CompletedProcess[str]:
    """bootstrap.sh as on a laptop or GitLab runner, where no venv can be built: whatever it
    would run must be what was found on disk, never a fresh install. Its ``python3`` is too old,
    or with ``base`` one that answers the probe for a base interpreter (so bootstrap goes on to
    look for its venvs) and can build nothing."""
    stubs = tmp / "stubs"
    stubs.mkdir(exist_ok=True)
    probe = f'[ "$1" = -c ] || exit 1\nprintf "%s\\n" "$0" "{STUB_VERSION}"\n'
    for name in ("python3", "python"):
        (stubs / name).write_text("#!/bin/sh\n" + (probe if base else "exit 1\n"))
        (stubs / name).chmod(0o755)
    full = {
        "PATH": f"{stubs}:/usr/bin:/bin",
        "HOME": str(tmp / "home"),
        "LANG": "C.UTF-8",
        **env,
    }
    return subprocess.run(
        ["bash", str(BOOTSTRAP)], capture_output=True, text=True, env=full, timeout=60, check=False
    )


def shared_tmp(tmp: Path) -> Path:
    shared = tmp / "shared-tmp"
    shared.mkdir()
    shared.chmod(0o1777)  # /tmp
    return shared


def test_a_venv_planted_at_the_old_predictable_tmp_path_never_runs(tmp_path: Path) -> None:
    shared = shared_tmp(tmp_path)
    marker = tmp_path / "ran"
    planted = plant_venv(shared / venv_name(tmp_path), marker, 4242 if os.geteuid() == 0 else None)
    proc = run_bootstrap(tmp_path, TMPDIR=str(shared), XDG_CACHE_HOME=str(tmp_path / "cache"))
    assert not marker.exists(), proc.stderr
    assert str(planted) not in proc.stdout
    assert "no Python 3.10 or newer" in proc.stderr  # it went on to build its own, privately
    assert stat.S_IMODE((tmp_path / "cache" / "gpuci-venvs").stat().st_mode) == 0o700


def test_venvs_live_in_a_private_folder_inside_runner_temp(tmp_path: Path) -> None:
    runner_temp = tmp_path / "_temp"
    runner_temp.mkdir(mode=0o755)
    proc = run_bootstrap(tmp_path, RUNNER_TEMP=str(runner_temp))
    assert proc.returncode == 2, proc.stderr
    home = runner_temp / "gpuci-venvs"
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert home.stat().st_uid == os.geteuid()


def test_a_private_folder_other_users_can_write_is_refused(tmp_path: Path) -> None:
    home = tmp_path / "cache" / "gpuci-venvs"
    marker = tmp_path / "ran"
    plant_venv(home / venv_name(tmp_path), marker)
    home.chmod(0o777)
    proc = run_bootstrap(tmp_path, XDG_CACHE_HOME=str(tmp_path / "cache"))
    assert proc.returncode == 2
    assert not marker.exists()
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: gpu-ci bootstrap: refusing ")
    assert "can be written by other users (mode 777)" in line and "(fix: remove " in line


@ROOT_ONLY
def test_a_private_folder_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    home = tmp_path / "cache" / "gpuci-venvs"
    marker = tmp_path / "ran"
    plant_venv(home / venv_name(tmp_path), marker, owner=4242)
    home.chmod(0o700)
    os.chown(home, 4242, 4242)
    proc = run_bootstrap(tmp_path, XDG_CACHE_HOME=str(tmp_path / "cache"))
    assert proc.returncode == 2
    assert not marker.exists()
    assert f"is owned by uid 4242, not {os.geteuid()}" in proc.stderr


def test_a_cache_folder_other_users_can_write_is_refused(tmp_path: Path) -> None:
    cache = tmp_path / "open-cache"
    cache.mkdir()
    cache.chmod(0o777)  # not sticky: anyone can replace gpuci-venvs inside it
    proc = run_bootstrap(tmp_path, XDG_CACHE_HOME=str(cache))
    assert proc.returncode == 2
    assert f"refusing to keep venvs under {cache}" in proc.stderr
    assert not (cache / "gpuci-venvs").exists()


@pytest.mark.parametrize("spelling", ["absolute", "relative, trailing slash"])
@pytest.mark.parametrize("ancestor", [0o777, 0o755])
def test_every_folder_above_the_cache_is_checked_whatever_its_name(
    tmp_path: Path, spelling: str, ancestor: int
) -> None:
    """bootstrap walks up from the resolved cache folder one parent at a time (``${dir%/*}``,
    no dirname): a folder two levels up that others can write is found though its name holds a
    space and a newline, however XDG_CACHE_HOME spells the path; one only we can write passes."""
    odd = tmp_path.resolve() / "a b\nc"
    cache = odd / "x y" / "cache"
    cache.mkdir(parents=True)
    odd.chmod(ancestor)
    given = str(cache) if spelling == "absolute" else os.path.relpath(cache) + "/"
    proc = run_bootstrap(tmp_path, XDG_CACHE_HOME=given)
    assert proc.returncode == 2, proc.stderr
    if ancestor == 0o777:
        assert f"refusing to keep venvs under {given}: {odd} can be written" in proc.stderr
        assert not (cache / "gpuci-venvs").exists()
    else:
        assert "no Python 3.10 or newer" in proc.stderr  # went on, past the private folder
        assert stat.S_IMODE((cache / "gpuci-venvs").stat().st_mode) == 0o700


@ROOT_ONLY
def test_a_foreign_venv_inside_the_private_folder_is_not_run(tmp_path: Path) -> None:
    home = tmp_path / "cache" / "gpuci-venvs"
    home.mkdir(parents=True, mode=0o700)
    marker = tmp_path / "ran"
    plant_venv(home / venv_name(tmp_path), marker, owner=4242)
    proc = run_bootstrap(tmp_path, base=True, XDG_CACHE_HOME=str(tmp_path / "cache"))
    assert not marker.exists()
    assert "not reusing" in proc.stderr and "owned by uid 4242" in proc.stderr
    assert not (home / venv_name(tmp_path)).exists()  # removed, to be rebuilt


FOREIGN_DEPS = {
    "group-writable": (None, 0o775, "can be written by other users (mode 775)"),
    "world-writable bin": (None, 0o757, "can be written by other users (mode 757)"),
    "another uid": (4242, 0o755, "is owned by uid 4242"),
}


@pytest.mark.parametrize("case", FOREIGN_DEPS)
def test_a_dependency_venv_another_user_could_write_is_not_run(tmp_path: Path, case: str) -> None:
    """The deps venv every checkout's venv links to: one another user owns, or that group or
    others can write (the folder or its bin/), is removed and rebuilt, never run."""
    owner, mode, why = FOREIGN_DEPS[case]
    if owner is not None and os.geteuid() != 0:
        pytest.skip("planting a folder owned by another uid needs root")
    home = tmp_path / "cache" / "gpuci-venvs"
    home.mkdir(parents=True, mode=0o700)
    deps = home / names(tmp_path)[0]
    marker = tmp_path / "ran"
    plant_venv(deps, marker, owner)
    (deps / "bin" if "bin" in case else deps).chmod(mode)
    proc = run_bootstrap(tmp_path, base=True, XDG_CACHE_HOME=str(tmp_path / "cache"))
    assert not marker.exists(), proc.stderr
    assert f"not reusing {deps}: " in proc.stderr and why in proc.stderr
    assert not deps.exists()  # removed, to be rebuilt (the stub Python builds nothing)
    assert proc.returncode == 3 and "venv failed" in proc.stderr


def test_an_inherited_gpuci_python_others_can_write_is_not_run(tmp_path: Path) -> None:
    shared = tmp_path / "world"
    marker = tmp_path / "ran"
    python = plant_venv(shared / "venv", marker)
    shared.chmod(0o777)
    proc = run_bootstrap(tmp_path, GPUCI_PYTHON=str(python), XDG_CACHE_HOME=str(tmp_path / "cache"))
    assert not marker.exists()
    assert f"not running GPUCI_PYTHON={python}" in proc.stderr
    assert str(python) not in proc.stdout


@ROOT_ONLY
def test_runner_temp_owned_by_the_runner_user_is_trusted_only_in_a_github_job(
    tmp_path: Path,
) -> None:
    """A container job: root inside, RUNNER_TEMP (/__w/_temp) owned by the runner's host uid."""
    runner_temp = tmp_path / "_temp"
    runner_temp.mkdir(mode=0o755)
    os.chown(runner_temp, 4242, 4242)
    outside = run_bootstrap(tmp_path, RUNNER_TEMP=str(runner_temp))
    assert f"{runner_temp} is owned by uid 4242" in outside.stderr  # not GitHub: a stranger
    github_env = tmp_path / "github_env"
    github_env.touch()
    inside = run_bootstrap(
        tmp_path, RUNNER_TEMP=str(runner_temp), GITHUB_ACTIONS="true", GITHUB_ENV=str(github_env)
    )
    assert "refusing" not in inside.stdout + inside.stderr
    assert "no Python 3.10 or newer" in inside.stdout  # went on to build, privately
    home = runner_temp / "gpuci-venvs"
    assert home.stat().st_uid == os.geteuid() and stat.S_IMODE(home.stat().st_mode) == 0o700


# ----- the interpreters bootstrap runs: the base, an inherited GPUCI_PYTHON, the venvs' python --
def plant_python(folder: Path, marker: Path, name: str = "python3", probe: bool = False) -> Path:
    """An 'interpreter' that leaves a marker whenever anything runs it; with ``probe`` it also
    answers bootstrap's probe for a base interpreter (and can build nothing)."""
    folder.mkdir(parents=True, exist_ok=True)
    python = folder / name
    answer = f'[ "$1" = -c ] || exit 1\nprintf "%s\\n" "$0" "{STUB_VERSION}"\n' if probe else ""
    python.write_text(f"#!/bin/sh\necho planted >>'{marker}'\n{answer}exit 0\n")
    python.chmod(0o755)
    return python


OPEN_FOLDERS = {"world-writable": 0o777, "group-writable": 0o775}


@pytest.mark.parametrize("case", OPEN_FOLDERS)
def test_a_base_python_in_a_folder_others_can_write_is_not_run(tmp_path: Path, case: str) -> None:
    """GPUCI_BASE_PYTHON in a shared Python another user can write (a team Python made group-
    writable): probing it would run their code with the job's env, and the venvs would link to
    it. It is skipped with one line, and the error that no Python is left names the refusal."""
    folder = tmp_path / "shared-python" / "bin"
    marker = tmp_path / "ran"
    python = plant_python(folder, marker)
    folder.chmod(OPEN_FOLDERS[case])
    proc = run_bootstrap(
        tmp_path, GPUCI_BASE_PYTHON=str(python), XDG_CACHE_HOME=str(tmp_path / "cache")
    )
    assert not marker.exists(), proc.stderr
    assert proc.returncode == 2, proc.stderr
    why = f"{folder} can be written by other users (mode {OPEN_FOLDERS[case]:o})"
    lines = proc.stderr.strip().splitlines()
    assert lines[0] == f"gpu-ci bootstrap: not running {python}: {why}"
    assert len(lines) == 2 and "no Python 3.10 or newer found" in lines[1]
    assert f"refused {python}: {why}" in lines[1]


def test_a_python3_on_path_in_a_folder_others_can_write_is_not_run(tmp_path: Path) -> None:
    folder = tmp_path / "open-bin"
    marker = tmp_path / "ran"
    for name in ("python3", "python"):
        plant_python(folder, marker, name)
    folder.chmod(0o777)
    proc = run_bootstrap(
        tmp_path, PATH=f"{folder}:/usr/bin:/bin", XDG_CACHE_HOME=str(tmp_path / "cache")
    )
    assert not marker.exists(), proc.stderr
    assert proc.returncode == 2
    assert f"not running {folder / 'python3'}: {folder} can be written" in proc.stderr


@pytest.mark.parametrize(
    ("variable", "named"),
    [("GPUCI_BASE_PYTHON", "{link}"), ("GPUCI_PYTHON", "GPUCI_PYTHON={link}")],
)
def test_a_python_linking_into_a_folder_others_can_write_is_not_run(
    tmp_path: Path, variable: str, named: str
) -> None:
    """The folder named is ours, the one its link points into is not: the resolved path counts.
    GPUCI_BASE_PYTHON, or an inherited GPUCI_PYTHON (a venv's bin/python always links to its
    base)."""
    shared = tmp_path / "world"
    marker = tmp_path / "ran"
    planted = plant_python(shared, marker)
    shared.chmod(0o777)
    link = tmp_path / "ours" / "bin" / "python3"
    link.parent.mkdir(parents=True)
    link.symlink_to(planted)
    proc = run_bootstrap(tmp_path, XDG_CACHE_HOME=str(tmp_path / "c"), **{variable: str(link)})
    assert not marker.exists(), proc.stderr
    assert proc.returncode == 2
    shown = named.format(link=link)
    assert f"not running {shown}: {shared} can be written by other users (mode 777)" in proc.stderr
    assert str(link) not in proc.stdout


def test_a_base_python_only_we_can_write_is_run_through_its_links(tmp_path: Path) -> None:
    """A tool cache's python3 is a link to python3.X in the same folder: still the base."""
    folder = tmp_path / "toolcache" / "Python" / "3.12.0" / "x64" / "bin"
    marker = tmp_path / "ran"
    plant_python(folder, marker, "python3.12", probe=True)
    (folder / "python3").symlink_to("python3.12")
    proc = run_bootstrap(
        tmp_path, GPUCI_BASE_PYTHON=str(folder / "python3"), XDG_CACHE_HOME=str(tmp_path / "c")
    )
    assert marker.exists(), proc.stderr
    assert "not running" not in proc.stderr
    assert proc.returncode == 3 and "venv failed" in proc.stderr  # went on to build from it


@ROOT_ONLY
def test_a_base_python_owned_by_another_user_is_run_only_when_it_is_the_runners(
    tmp_path: Path,
) -> None:
    """A container job's tool cache (/__t) belongs to the runner's host uid, the owner of
    RUNNER_TEMP: trusted in a GitHub job, like RUNNER_TEMP; outside one, a stranger's."""
    folder = tmp_path / "tool" / "bin"
    marker = tmp_path / "ran"
    python = plant_python(folder, marker, probe=True)
    for path in (folder.parent, folder, python):
        os.chown(path, 4242, 4242)
    runner_temp = tmp_path / "_temp"
    runner_temp.mkdir(mode=0o755)
    os.chown(runner_temp, 4242, 4242)
    outside = run_bootstrap(
        tmp_path, GPUCI_BASE_PYTHON=str(python), XDG_CACHE_HOME=str(tmp_path / "c")
    )
    assert not marker.exists(), outside.stderr
    assert f"not running {python}: {folder} is owned by uid 4242" in outside.stderr
    github_env = tmp_path / "github_env"
    github_env.touch()
    inside = run_bootstrap(
        tmp_path,
        GPUCI_BASE_PYTHON=str(python),
        RUNNER_TEMP=str(runner_temp),
        GITHUB_ACTIONS="true",
        GITHUB_ENV=str(github_env),
    )
    assert marker.exists(), inside.stderr
    assert "not running" not in inside.stderr and "venv failed" in inside.stdout


@pytest.mark.parametrize("which", ["checkout venv", "deps venv"])
def test_a_reused_venv_whose_python_links_into_a_folder_others_can_write_is_not_run(
    tmp_path: Path, which: str
) -> None:
    """Both venvs are ours and private, but their bin/python is a link to the base interpreter:
    one pointing into a folder another user can write is removed and rebuilt, never run."""
    home = tmp_path / "cache" / "gpuci-venvs"
    home.mkdir(parents=True, mode=0o700)
    deps, venv = (home / name for name in names(tmp_path))
    shared = tmp_path / "world"
    marker = tmp_path / "ran"
    planted = plant_python(shared, marker)
    shared.chmod(0o777)
    for made in (deps, venv):
        (made / "lib" / "python3.12" / "site-packages").mkdir(parents=True)
        (made / "bin").mkdir()
    (deps / "bin" / "python").write_text("#!/bin/sh\nexit 0\n")  # imports all it needs
    (deps / "bin" / "python").chmod(0o755)
    target = venv if which == "checkout venv" else deps
    (target / "bin" / "python").unlink(missing_ok=True)
    (target / "bin" / "python").symlink_to(planted)
    proc = run_bootstrap(tmp_path, base=True, XDG_CACHE_HOME=str(tmp_path / "cache"))
    assert not marker.exists(), proc.stderr
    assert f"not reusing {target}: {shared} can be written by other users" in proc.stderr
    assert not target.exists()  # removed, to be rebuilt (the stub Python builds nothing)
    assert proc.returncode == 3 and "venv failed" in proc.stderr


@pytest.mark.parametrize("runner", ["github-hosted", "self-hosted"])
def test_a_tool_cache_others_can_write_is_trusted_only_on_a_github_hosted_runner(
    tmp_path: Path, runner: str
) -> None:
    """GitHub's hosted image makes /opt/hostedtoolcache mode 0777; that VM has no other user, so
    setup-python's interpreter there stays the base. On a self-hosted runner the same folder is
    another user's door, and outside the tool cache a hosted runner's folders are checked too."""
    cache = tmp_path / "hostedtoolcache"
    folder = cache / "Python" / "3.12.0" / "x64" / "bin"
    marker = tmp_path / "ran"
    python = plant_python(folder, marker, probe=True)
    for path in (cache, folder, python):
        path.chmod(0o777)
    elsewhere = tmp_path / "world"
    other = plant_python(elsewhere, tmp_path / "ran-elsewhere", probe=True)
    elsewhere.chmod(0o777)
    runner_temp = tmp_path / "_temp"
    runner_temp.mkdir(mode=0o755)
    github_env = tmp_path / "github_env"
    github_env.touch()
    job = {
        "GITHUB_ACTIONS": "true",
        "GITHUB_ENV": str(github_env),
        "RUNNER_TEMP": str(runner_temp),
        "RUNNER_ENVIRONMENT": runner,
        "RUNNER_TOOL_CACHE": str(cache),
    }
    proc = run_bootstrap(tmp_path, GPUCI_BASE_PYTHON=str(python), **job)
    if runner == "github-hosted":
        assert marker.exists(), proc.stdout + proc.stderr
        assert "not running" not in proc.stderr and "venv failed" in proc.stdout
    else:
        assert not marker.exists(), proc.stdout + proc.stderr
        assert f"not running {python}: {folder} can be written by other users" in proc.stderr
    proc = run_bootstrap(tmp_path, GPUCI_BASE_PYTHON=str(other), **job)
    assert not (tmp_path / "ran-elsewhere").exists(), proc.stdout + proc.stderr
    assert f"not running {other}: {elsewhere} can be written by other users" in proc.stderr


def test_a_user_id_that_cannot_be_read_is_one_line_not_a_silent_stop(tmp_path: Path) -> None:
    """Every ownership check compares with ``id -u``, asked once up front: where ``id`` fails
    (a broken PATH, a minimal image), bootstrap stops with the cause and the fix, exit 3,
    not silently under ``set -e`` with nothing said."""
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    (stubs / "id").write_text("#!/bin/sh\nexit 1\n")
    (stubs / "id").chmod(0o755)
    done = run_bootstrap(tmp_path, RUNNER_TEMP=str(tmp_path / "runner-temp"))
    assert done.returncode == 3, done.stderr
    assert "cannot read this user's id (id -u failed)" in done.stderr, done.stderr
