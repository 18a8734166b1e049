"""The GitLab retry recipe (examples/gitlab/gpu-quarantine.gitlab-ci.yml) is valid GitLab CI.

gitlab-ci-local checks a pipeline against GitLab's own JSON schema before it lists or runs a
job; the same file with a malformed ``retry`` is refused, so the check is real. The exit code
retried is gpu-smoke's hardware verdict and nothing else.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from actions.real_clients import client_env, gitlab_ci_local, make_project
from gpuci.errors import ExitCode
from gpuci_testing import REPO

BINARY, WHY_NOT = gitlab_ci_local()
TEMPLATE = REPO / "examples" / "gitlab" / "gpu-quarantine.gitlab-ci.yml"
# gpu-ci's install, which the template includes from the user's repository
INSTALL = {
    ".gitlab/gpuci-install.gitlab-ci.yml": REPO / "examples/gitlab/gpuci-install.gitlab-ci.yml"
}


def test_the_recipe_retries_only_the_hardware_verdict():
    job = yaml.safe_load(TEMPLATE.read_text())["gpu-smoke"]
    assert job["retry"] == {"max": 2, "exit_codes": [int(ExitCode.CHECK_FAILED)]}
    assert int(ExitCode.CHECK_FAILED) == 1
    assert any("--on-failure quarantine" in line for line in job["script"])


def _list(project: Path, home: Path) -> subprocess.CompletedProcess[str]:
    assert BINARY is not None
    return subprocess.run(
        [str(BINARY), "--list"],
        cwd=project,
        env=client_env(home),
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.skipif(BINARY is None, reason=WHY_NOT)
def test_gitlab_ci_local_accepts_the_recipe_and_refuses_a_broken_one(tmp_path):
    good = make_project(tmp_path / "good", {".gitlab-ci.yml": TEMPLATE, **INSTALL})
    done = _list(good, tmp_path / "home")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "json schema validated" in done.stdout + done.stderr
    assert "gpu-smoke" in done.stdout

    broken = TEMPLATE.read_text().replace("exit_codes: [1]", "exit_codes: [one]")
    bad = make_project(tmp_path / "bad", {".gitlab-ci.yml": broken, **INSTALL})
    refused = _list(bad, tmp_path / "home")
    assert "exit_codes" in refused.stdout + refused.stderr
    assert "gpu-smoke   " not in refused.stdout
