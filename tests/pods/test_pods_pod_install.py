"""What a smoking pod runs to get gpu-ci (``gpuci_install``): every dependency pinned, by hash.

It used to ``pip install "gpuci @ $GPUCI_PACKAGE"``: gpu-ci pinned, its dependencies resolved
from the index. Now it fetches the pinned source and installs that source's requirements.lock
with ``--require-hashes --no-deps``, as scripts/bootstrap.sh does; a source with no lock (a
wheel) is refused in one line. Each test runs the real shell functions under ``sh`` with an
image whose python has no gpu-ci and a python that records every command it is given
(``pip`` among them), then runs them; pip works offline (pod_sources.offline_pip).
"""

from __future__ import annotations

import base64
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
    served,
    source_archive,
    source_repository,
    toy_lock,
    wheel,
)
from pods_testing import executable

from gpuci.pods.health import _pod_gpuci as pod_gpuci
from gpuci.pods.health._handover import SHELL
from gpuci_testing import clean_env

REPORT = 'echo "rc=$? site=$gpuci_site"; echo "why=$gpuci_why"'


def pod_env(tmp_path: Path, package: str) -> tuple[dict[str, str], Path]:
    """The env of a pod on a stock image given ``GPUCI_PACKAGE=package``, and the file where
    its python records every command line it is given."""
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
        NO_PROXY="127.0.0.1",
        no_proxy="127.0.0.1",
        **offline_pip(tmp_path),
    )
    return env, calls


def install(tmp_path: Path, package: str) -> tuple[int, str, str, list[list[str]]]:
    """``gpuci_install`` with ``GPUCI_PACKAGE=package`` on a stock image: its status,
    ``gpuci_site``, ``gpuci_why`` and every command line the pod's python was given."""
    env, calls = pod_env(tmp_path, package)
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


# ----- a URL with credentials: sent as Basic auth, never printed ----------------------------
SECRET = "s3cretTok3n"


def _with_credentials(origin: str, archive: Path, password: str) -> str:
    """``origin``'s URL of ``archive`` with ``deploy:password@`` in it, pinned by its sha256."""
    host = origin.removeprefix("http://")
    return f"http://deploy:{password}@{host}/{archive.name}#{pinned(archive).split('#')[1]}"


def test_an_archive_url_s_credentials_go_as_basic_auth(tmp_path: Path):
    """urllib cannot parse ``user:password@`` (it read the password as a port): the pod sends
    them as a Basic Authorization header, to that host only, and installs."""
    offline_pip(tmp_path)
    archive = source_archive(tmp_path, toy_lock(tmp_path))
    with served(archive, "deploy", SECRET) as (origin, seen):
        status, site, why, _ = install(tmp_path, _with_credentials(origin, archive, SECRET))
    assert status == 0 and site, why
    assert seen == ["Basic " + base64.b64encode(f"deploy:{SECRET}".encode()).decode()]


@pytest.mark.parametrize("where", ["refused", "no port"])
def test_a_failed_fetch_names_its_cause_in_one_line_without_the_url_s_secret(
    tmp_path: Path, where: str
):
    """The smoke gate writes the install's failure into the pod's log and, through RunPod's
    API, its name: neither holds the URL's password, nor a traceback. Without a port urllib
    read the password as one (http.client.InvalidURL quoting it, uncaught)."""
    env, _ = pod_env(tmp_path, "")
    archive = source_archive(tmp_path, toy_lock(tmp_path))
    renames = tmp_path / "renames"
    script = (
        f"{SHELL}\n"
        'gpuci_pod_call() { printf "%s %s\\n" "$1" "$3" >>"$RENAMES"; }\n'
        "gpuci_stop() { :; }\ngpuci_smoke_gate\n"
    )
    with served(archive, "deploy", "the-right-one") as (origin, _):
        origin = origin if where == "refused" else "http://localhost"
        env.update(
            GPUCI_SMOKE="1",
            GPUCI_POD_NAME="gpuci-pod",
            GPUCI_PACKAGE=_with_credentials(origin, archive, SECRET),
            RENAMES=str(renames),
        )
        proc = subprocess.run(
            ["sh", "-c", script], env=env, capture_output=True, text=True, timeout=240
        )
    said = proc.stdout + proc.stderr + renames.read_text()
    assert SECRET not in said and "Traceback" not in said, said
    (line,) = [x for x in proc.stdout.splitlines() if "smoke skipped" in x]
    assert "failed: cannot download it: " in line, line
    assert "cannot download it" in renames.read_text()
    if where == "refused":
        assert "cannot download it: HTTP 403" in line, line


@pytest.mark.parametrize("userinfo", [f"deploy:{SECRET}", SECRET])
def test_git_s_own_last_line_is_quoted_without_the_url_s_secret(tmp_path: Path, userinfo: str):
    """git's message may quote the URL it was given: the pod's line takes its userinfo out."""
    log = tmp_path / "log"
    log.write_text(f"fatal: unable to access 'https://{userinfo}@git.example/gpu-ci/': 403\n")
    package = f"git+https://{userinfo}@git.example/gpu-ci@{'a' * 40}"
    proc = subprocess.run(
        ["sh", "-c", f'{SHELL}\ngpuci_last "$LOG" none'],
        env=clean_env(GPUCI_PACKAGE=package, LOG=str(log)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert SECRET not in proc.stdout and "unable to access" in proc.stdout, proc.stdout
    assert "git.example/gpu-ci/" in proc.stdout and "403" in proc.stdout


# ----- a git URL is pinned by a full commit alone, for up and the pod alike ----------------
def _moved_repository(tmp_path: Path) -> tuple[Path, str]:
    """A repository whose ``main`` moved on past the returned commit (a later push)."""
    root = tmp_path / "repo"
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(root)], check=True, timeout=60)
    for who in ("pinned", "later push"):
        (root / "who").write_text(who)
        subprocess.run([*git, "add", "-A"], check=True, timeout=60)
        subprocess.run([*git, "commit", "-qm", who], check=True, timeout=60)
        if who == "pinned":
            sha = subprocess.run(
                [*git, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=60
            ).stdout.strip()
    return root, sha


@pytest.mark.parametrize(
    "tail",
    [
        "@{sha}",
        "@{sha}#egg=gpuci",
        "@{SHA}",
        "@main",
        "@main#sha256=" + "0" * 64,  # a hash no clone checks
        "@main#x@{sha}",  # a commit in the fragment
        "#sha256=" + "0" * 64,  # no ref at all
        "",
    ],
)
def test_up_calls_a_git_url_pinned_exactly_when_the_pod_installs_that_commit(
    tmp_path: Path, tail: str
):
    """One rule on both sides: the ref after the last @ before the first # is 40 hex. A URL up
    warns about the pod refuses in one line (smoke skipped), never cloning the branch tip."""
    root, sha = _moved_repository(tmp_path)
    url = f"git+{root.as_uri()}" + tail.format(sha=sha, SHA=sha.upper())
    warned: list[str] = []
    assert pod_gpuci.resolve(url, {}, warned.append) == url
    dest = tmp_path / "source"
    proc = subprocess.run(
        ["sh", "-c", f'{SHELL}\ngpuci_source "$DEST"'],
        env=clean_env(GPUCI_PACKAGE=url, DEST=str(dest), HOME=str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    if not warned:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert (dest / "who").read_text() == "pinned"
        return
    assert "commit SHA" in warned[0], warned
    assert proc.returncode == 1 and not dest.exists(), proc.stdout
    (line,) = proc.stdout.splitlines()
    assert "full 40-hex commit SHA" in line, line
