"""How the GitLab templates get gpu-ci: one hidden job, ``.gpuci-install``
(examples/gitlab/gpuci-install.gitlab-ci.yml, which every template includes), downloads gpu-ci's
source at one commit, refuses it unless it hashes to ``GPUCI_SOURCE_SHA256``, and runs that
source's scripts/bootstrap.sh: the GitHub actions' own install (a private venv under
~/.cache, ``--require-hashes`` from requirements.lock). No template makes a venv or runs pip
for gpu-ci itself, and none keeps one in a shared folder such as /tmp, where another user of a
self-hosted runner could plant code that then runs with the job's tokens.

Quick: the templates are read as GitLab would merge them (include, extends), and the install
lines run in bash against a local archive of this checkout; gitlab-ci-local runs them whole in
test_gitlab_ci_local.py.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from real_clients import download_caches

from gpuci_testing import REPO

TEMPLATES = REPO / "examples" / "gitlab"
INSTALL = TEMPLATES / "gpuci-install.gitlab-ci.yml"
INCLUDED_AS = ".gitlab/gpuci-install.gitlab-ci.yml"  # where the templates include it from
PIPELINES = sorted(p for p in TEMPLATES.glob("*.gitlab-ci.yml") if p != INSTALL)
KEYWORDS = {"stages", "variables", "include", "workflow", "default"}


def merged(template: Path) -> dict[str, Any]:
    """The template with its local includes, as GitLab reads it (the template wins)."""
    doc = yaml.safe_load(template.read_text())
    out: dict[str, Any] = {}
    for entry in doc.get("include", []):
        local = entry["local"] if isinstance(entry, dict) else entry
        assert local.lstrip("/") == INCLUDED_AS, local
        out.update(yaml.safe_load(INSTALL.read_text()))
    variables = {**out.get("variables", {}), **doc.get("variables", {})}
    out.update(doc)
    out["variables"] = variables
    return out


def resolve(doc: dict[str, Any], name: str) -> dict[str, Any]:
    """A job after ``extends`` (its parents in order, then itself; lists are replaced)."""
    job: dict[str, Any] = {}
    parents = doc[name].get("extends", [])
    for parent in [parents] if isinstance(parents, str) else parents:
        job.update(resolve(doc, parent))
    job.update({k: v for k, v in doc[name].items() if k != "extends"})
    return job


def job_lines(doc: dict[str, Any], name: str) -> list[str]:
    job = resolve(doc, name)
    return [*job.get("before_script", []), *job.get("script", [])]


def jobs(doc: dict[str, Any]) -> list[str]:
    return [k for k in doc if k not in KEYWORDS and not k.startswith(".")]


def all_lines(doc: dict[str, Any], name: str) -> str:
    after = resolve(doc, name).get("after_script", [])
    return "\n".join([*job_lines(doc, name), *after])


@pytest.mark.parametrize("template", PIPELINES, ids=lambda p: p.name)
def test_no_template_keeps_gpu_ci_in_a_shared_folder(template: Path) -> None:
    """F1: /tmp/gpuci-venv was the quarantine job's venv: anyone on the runner could create it
    first (a .pth in its site-packages), and `python3 -m venv` reuses an existing folder."""
    doc = merged(template)
    for name in jobs(doc):
        lines = all_lines(doc, name)
        assert not re.search(r"/tmp\b|/var/tmp\b|\$\{?TMPDIR", lines), (name, lines)


def test_the_quarantine_job_runs_gpu_ci_only_from_the_bootstrapped_venv() -> None:
    doc = merged(TEMPLATES / "gpu-quarantine.gitlab-ci.yml")
    lines = job_lines(doc, "gpu-smoke")
    assert lines[: len(install_lines())] == install_lines()
    assert lines[len(install_lines()) :] == ["gpuci gpu-smoke --on-failure quarantine"]


def install_lines() -> list[str]:
    lines: list[str] = yaml.safe_load(INSTALL.read_text())[".gpuci-install"]["before_script"]
    return lines


def test_the_install_makes_no_venv_of_its_own_and_hands_over_to_bootstrap() -> None:
    text = "\n".join(install_lines())
    assert "-m venv" not in text and not re.search(r"\bpip\b", text)
    assert (
        'GPUCI_PYTHON="$(bash .gpuci-src/scripts/bootstrap.sh)"' in text
        and "GPUCI_SOURCE_SHA256" in text
    )


@pytest.mark.parametrize("template", PIPELINES, ids=lambda p: p.name)
def test_every_job_that_runs_gpu_ci_installs_it_only_through_the_pinned_bootstrap(
    template: Path,
) -> None:
    """F2: ``pip install "gpuci @ $GPUCI_PACKAGE"`` (a movable tag archive, and whatever the
    index served within pyproject's ranges) was in all five templates. Each job that runs gpu-ci
    now starts with .gpuci-install's lines, and nothing else installs gpu-ci or makes its venv."""
    doc = merged(template)
    text = template.read_text()
    assert not re.search(r"gpuci @|GPUCI_VENV|/opt/gpuci|pip install[^\n]*gpuci", text)
    assert set(doc["variables"]) >= {"GPUCI_SOURCE", "GPUCI_SOURCE_SHA256"}
    users = [n for n in jobs(doc) if re.search(r"\bgpuci |GPUCI_PYTHON", all_lines(doc, n))]
    assert users, template.name
    for name in users:
        before = resolve(doc, name).get("before_script", [])
        assert before == install_lines(), name
        rest = "\n".join(job_lines(doc, name)[len(before) :])
        # a job's own venv (train-gated's numpy for the user's training) is not gpu-ci's
        for line in rest.splitlines():
            assert "bootstrap.sh" not in line or ".gpuci-src/scripts/bootstrap.sh" in line, line
            made = re.search(r"-m venv|\bpip\b", line)
            if made:  # a venv made, or a pip install, for gpu-ci
                assert not re.search("gpuci", line[made.start() :], re.I), (name, line)


def run_install(
    tmp_path: Path, url: str, sha256: str, path: str | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    """The install lines in bash, as a job runs them, then gpu-ci through ``gpuci``."""
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    script = "\n".join(
        ["set -eo pipefail", *install_lines(), 'echo "GPUCI_PYTHON=$GPUCI_PYTHON"', "gpuci --help"]
    )
    bin_dir = str(Path(sys.executable).parent)  # python3 (and uv) of the dev venv
    full = {
        **os.environ,
        "PATH": path or os.pathsep.join([bin_dir, "/usr/bin", "/bin"]),
        "HOME": str(tmp_path / "home"),
        **download_caches(),
        "PYTHONPATH": "",  # the suite's src/ would shadow the downloaded one
        "CI_PROJECT_DIR": str(project),
        "GPUCI_SOURCE": url,
        "GPUCI_SOURCE_SHA256": sha256,
        **env,
    }
    full.pop("XDG_CACHE_HOME", None)
    full.pop("GPUCI_PYTHON", None)
    return subprocess.run(
        ["bash", "-c", script], cwd=project, env=full, capture_output=True, text=True, timeout=600
    )


def lock_pins() -> dict[str, str]:
    text = (REPO / "requirements.lock").read_text()
    return dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", text, re.M))


def test_the_pinned_source_runs_gpu_ci_from_bootstrap_s_private_locked_venv(gpuci_source, tmp_path):
    url, sha256 = gpuci_source
    done = run_install(tmp_path, url, sha256)
    assert done.returncode == 0, done.stdout + done.stderr
    python = Path(re.search(r"^GPUCI_PYTHON=(.+)$", done.stdout, re.M)[1])  # type: ignore[index]
    home = tmp_path / "home" / ".cache" / "gpuci-venvs"
    assert python.parent.parent.parent == home and re.fullmatch(
        r"gpuci-venv-[0-9a-f]{16}", python.parent.parent.name
    )
    assert home.stat().st_mode & 0o777 == 0o700
    where = subprocess.run(
        [str(python), "-c", "import gpuci, httpx; print(gpuci.__file__, httpx.__version__)"],
        env={**os.environ, "PYTHONPATH": ""},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert Path(where[0]).is_relative_to(tmp_path / "project" / ".gpuci-src" / "src")
    assert where[1] == lock_pins()["httpx"]
    assert "usage" in done.stdout.lower()  # gpuci ran


@pytest.mark.parametrize("pin", ["other", "<sha256 of that archive>"])
def test_other_bytes_are_refused_before_anything_in_them_runs(gpuci_source, tmp_path, pin):
    url, _ = gpuci_source
    sha256 = hashlib.sha256(b"another archive").hexdigest() if pin == "other" else pin
    done = run_install(tmp_path, url, sha256)
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: gpu-ci source: ") and "(fix: " in line
    assert ("not GPUCI_SOURCE_SHA256" if pin == "other" else "is not a sha256") in line
    assert not (tmp_path / "project" / ".gpuci-src").exists()
    assert not (tmp_path / "home").exists()  # bootstrap never ran


def test_an_index_serving_other_dependency_bytes_installs_nothing_of_them(gpuci_source, tmp_path):
    """F2: ``pip install "gpuci @ $GPUCI_PACKAGE"`` took whatever the index served within
    pyproject's ranges. Now every dependency is requirements.lock's, by hash: an index that
    serves the locked versions with other bytes (a payload .pth) fails the job (exit 3), and
    the payload never runs."""
    url, sha256 = gpuci_source
    index = tmp_path / "index"
    index.mkdir()
    marker = tmp_path / "PWNED"
    for name, version in lock_pins().items():
        dist = f"{re.sub(r'[-.]+', '_', name)}-{version}"
        files = {
            f"{dist}.dist-info/METADATA": (
                f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
            ),
            f"{dist}.dist-info/WHEEL": (
                "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
            ),
            f"zz_{dist}.pth": f"import pathlib; pathlib.Path({str(marker)!r}).write_text('ran')\n",
        }
        files[f"{dist}.dist-info/RECORD"] = "".join(f"{k},,\n" for k in files)
        with zipfile.ZipFile(index / f"{dist}-py3-none-any.whl", "w") as whl:
            for key, value in files.items():
                whl.writestr(key, value)
    pip_only = tmp_path / "bin"  # python3 without uv: the pip branch, as on python:3.12-slim
    pip_only.mkdir()
    (pip_only / "python3").symlink_to(sys.executable)
    done = run_install(
        tmp_path,
        url,
        sha256,
        path=os.pathsep.join([str(pip_only), "/usr/bin", "/bin"]),
        PIP_NO_INDEX="1",
        PIP_FIND_LINKS=str(index),
    )
    assert done.returncode == 3, done.stdout + done.stderr
    assert "hash-locked requirements with pip failed" in done.stderr
    assert "HASHES" in done.stderr  # pip's own refusal
    assert not marker.exists()
    assert not list((tmp_path / "home" / ".cache" / "gpuci-venvs").iterdir())  # nothing half-built
