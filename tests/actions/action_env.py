"""Run our composite actions through the harness as a job would (no conftest.py here on purpose:
other test folders import names from tests/conftest.py, and a second conftest would shadow it)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from harness import ActionRun, run_action

REPO = Path(__file__).resolve().parents[2]
_SCRUB = ("INPUT_", "GITHUB_", "GITLAB_", "CI_", "RUNNER_", "GPUCI_", "AWS_")


def machine_env() -> dict[str, str]:
    """The runner machine's environment: this one, minus anything CI- or gpu-ci-specific."""
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(_SCRUB) and k not in ("CI", "NO_COLOR", "VIRTUAL_ENV")
    }


def run_gpuci_action(
    tmp_path: Path, folder: str, inputs: dict[str, Any] | None = None, **job_env: str
) -> ActionRun:
    """Run ``folder`` (``actions/<name>`` or ``.``) with this interpreter as the job's venv.

    ``GPUCI_PYTHON`` in the job env is what the first gpu-ci action of a real job leaves
    behind, so setup-python is skipped by its ``if:`` and bootstrap.sh reuses the interpreter.
    """
    workspace = tmp_path / "workspace"
    runner_temp = tmp_path / "runner-temp"
    workspace.mkdir(exist_ok=True)
    runner_temp.mkdir(exist_ok=True)
    return run_action(
        REPO / folder,
        inputs,
        job_env={"GPUCI_PYTHON": sys.executable, **job_env},
        base_env=machine_env(),
        workspace=workspace,
        runner_temp=runner_temp,
        timeout=60,
    )
