"""Shared test helpers: run the CLI as a user would, in a subprocess, with a clean environment.

A uniquely named module (not ``conftest``): several test folders have a conftest.py, and
``from conftest import`` would pick whichever pytest loaded last.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Variables a developer's shell or a real runner may set that would change what we test.
_SCRUB_PREFIXES = ("INPUT_", "GITHUB_", "GITLAB_", "CI_", "RUNNER_", "GPUCI_", "AWS_", "RUNPOD_")


def clean_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(_SCRUB_PREFIXES) and k not in ("CI", "NO_COLOR")
    }
    env.update(extra)
    return env


def run_cli(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuci", *args],
        capture_output=True,
        text=True,
        env=env if env is not None else clean_env(),
        cwd=cwd or REPO,
        timeout=timeout,
        check=False,
    )
