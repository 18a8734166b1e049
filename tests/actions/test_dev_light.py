"""scripts/dev.sh --light: the README's first command on the package and its runtime
dependencies only, without the test tools the second command installs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from action_env import REPO

from gpuci_testing import clean_env

DEV = REPO / "scripts" / "dev.sh"
needs_uv = pytest.mark.skipif(
    not (Path(sys.executable).parent / "uv").exists(), reason="uv (a dev dependency) is absent"
)


@needs_uv
@pytest.mark.timeout(600)  # a hang guard: seconds with uv's cache, a minute on a cold one
def test_light_install_runs_the_dry_run_without_test_tools(tmp_path: Path) -> None:
    venv = tmp_path / "venv-run"
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    env = clean_env(PATH=path, HOME=str(tmp_path / "home"), GPUCI_RUN_VENV=str(venv))
    # The developer's download cache (content-addressed, safe to share), not the new HOME's.
    env.setdefault("UV_CACHE_DIR", str(Path.home() / ".cache" / "uv"))

    def light(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(DEV), "--light", "python", *args],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    done = light("-m", "gpuci", "dry-run", "examples/workflows/train.yml", timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "planning examples/workflows/train.yml" in done.stdout + done.stderr
    assert (venv / ".gpuci-run-stamp").is_file()
    # Light: gpu-ci's runtime dependencies are there, the dev extra's tools are not.
    probe = "import importlib.util as u; print([m for m in {} if u.find_spec(m)])"
    for wanted, mods in ((True, ("httpx", "boto3", "yaml")), (False, ("pytest", "moto", "act"))):
        found = subprocess.run(
            [str(venv / "bin" / "python"), "-c", probe.format(list(mods))],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert found.strip() == (repr(list(mods)) if wanted else "[]"), (wanted, found)
    # A second run reuses the venv: nothing prepared again.
    again = light("-c", "import gpuci", timeout=120)
    assert again.returncode == 0 and "preparing" not in again.stderr, again.stderr
