"""Run our composite actions through the harness as a job would (a uniquely named module, not a
conftest.py: ``from conftest import`` would pick whichever folder's conftest loaded last)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml
from harness import ActionRun, run_action

from gpuci_testing import REPO, clean_env


def machine_env() -> dict[str, str]:
    """The runner machine's environment: this one, minus anything CI- or gpu-ci-specific."""
    return {k: v for k, v in clean_env().items() if k != "VIRTUAL_ENV"}


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


def step_script(action: str, tmp_path: Path) -> Path:
    """The ``run:`` of the action's gpu-ci step (id ``run``), as the runner writes it to a file."""
    spec = yaml.safe_load((REPO / action / "action.yml").read_text())
    step = next(s for s in spec["runs"]["steps"] if s.get("id") == "run")
    script = tmp_path / "step.sh"
    script.write_text(step["run"])
    return script
