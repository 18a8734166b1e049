"""What the ``dry-run`` tests share: write a workflow, run ``gpuci dry-run`` on it, read its steps.

Imported as ``dryrun.dryrun_testing`` (``tests`` is on the path), from this folder and above.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import textwrap
from pathlib import Path
from typing import Any

from gpuci_testing import clean_env, run_cli_here

WORKFLOWS = ".github/workflows"  # a workflow here makes its folder the checkout (workspace)


def write(tmp_path: Path, body: str, name: str = "wf.yml") -> Path:
    """The dedented ``body`` written to ``tmp_path / name`` (its folders made); its path."""
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(body))
    return path


def one_job(tmp_path: Path, steps: str, name: str = "wf.yml") -> Path:
    """A workflow on push with one job ``j`` (runs-on x) whose steps are ``steps`` (YAML list
    items, at any indent)."""
    items = textwrap.indent(textwrap.dedent(steps).strip("\n"), "      ")
    return write(tmp_path, "on: push\njobs:\n  j:\n    runs-on: x\n    steps:\n" + items, name)


def matrix_job(tmp_path: Path, matrix: str, with_: str = "{require-gpu: 'false'}") -> Path:
    """A workflow on push whose job ``train`` (runs-on x) runs gpu-setup ``with_`` (flow YAML)
    once per leg of ``matrix`` (flow YAML, or an expression)."""
    lines = ["on: push", "jobs:", "  train:", "    runs-on: x", "    strategy:"]
    lines += [f"      matrix: {matrix}", "    steps:", "      - uses: ./actions/gpu-setup"]
    return write(tmp_path, "\n".join([*lines, f"        with: {with_}\n"]), f"{WORKFLOWS}/wf.yml")


def dry_run(
    tmp_path: Path, wf: Path | str, *args: str, cwd: Path | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    """``gpuci dry-run wf args`` with HOME in ``tmp_path`` (an empty embedded store: a cache
    would miss) and ``env`` over a clean environment, run in ``cwd`` (else the repository);
    in this process (:func:`run_cli_here`): a plan is what these tests check, not a process."""
    env = clean_env(HOME=str(tmp_path), **env)
    return run_cli_here("dry-run", str(wf), *args, env=env, cwd=cwd)


def steps_of(proc: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    """The steps of a ``dry-run --json`` report, whatever it exited with."""
    return json.loads(proc.stdout)["report"]["steps"]


def plan(
    tmp_path: Path, wf: Path | str, *args: str, cwd: Path | None = None, **env: str
) -> dict[str, Any]:
    """The JSON result of :func:`dry_run` with ``--json``, which must exit 0."""
    proc = dry_run(tmp_path, wf, "--json", *args, cwd=cwd, **env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


def plan_steps(
    tmp_path: Path, wf: Path | str, *args: str, cwd: Path | None = None, **env: str
) -> list[dict[str, Any]]:
    """The steps of :func:`plan`'s report."""
    return plan(tmp_path, wf, *args, cwd=cwd, **env)["report"]["steps"]


def runner_hash_files(*contents: bytes) -> str:
    """hashFiles() as actions/runner computes it: sha256 over each file's sha256, in path order
    (``contents`` given in that order)."""
    combined = hashlib.sha256()
    for data in contents:
        combined.update(hashlib.sha256(data).digest())
    return combined.hexdigest()
