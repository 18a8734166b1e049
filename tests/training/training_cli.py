"""What the training tests share: a GitHub job's env, a metrics file written and ``gpuci gate``
run on it, a command's ``--json`` answer read with its exit code, and the sticky report."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from gpuci_testing import clean_env, run_cli, run_cli_here

REPO = "acme/models"
MARKER = "<!-- gpuci-report:training -->"


def marked(github: Any) -> list[str]:
    """The bodies of PR 7's comments on a fake GitHub that carry the training report's marker."""
    return [c["body"] for c in github.state.comments[f"{REPO}#7"] if MARKER in c["body"]]


def github_env(tmp_path: Path) -> dict[str, str]:
    """A pull-request job of acme/models on a self-hosted GitHub runner, its journal in TMP."""
    return clean_env(
        GPUCI_JOURNAL=str(tmp_path / "journal.jsonl"),
        GITHUB_REPOSITORY="acme/models",
        GITHUB_SERVER_URL="https://github.com",
        GITHUB_SHA="a" * 40,
        GITHUB_REF="refs/pull/7/merge",
        GITHUB_RUN_ID="123",
        GITHUB_RUN_ATTEMPT="2",
        GITHUB_WORKFLOW_REF="acme/models/.github/workflows/train.yml@refs/pull/7/merge",
        GITHUB_JOB="train",
        RUNNER_ENVIRONMENT="self-hosted",
    )


def write_json(path: Path, data: Any) -> Path:
    """``data`` into ``path``: a str as it is (hostile or torn JSON), anything else as JSON."""
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def run_gate(
    tmp_path: Path,
    metrics: Any,
    *flags: str,
    env: dict[str, str] | None = None,
    baseline: Any = None,
    process: bool = False,
) -> subprocess.CompletedProcess[str]:
    """``gpuci gate --metrics M [--baseline TMP/b.json] FLAGS --output-dir TMP/o``, in this
    process, or with ``process`` in a fresh interpreter (a token never printed, at exit
    included, is a property of the process).

    ``metrics`` is the Path of a metrics file (there or not yet), else what ``write_json``
    writes to ``TMP/m.json``; ``baseline`` is written to ``TMP/b.json`` likewise. ``env``
    defaults to a clean one whose job journal is ``TMP/j.jsonl``.
    """
    if not isinstance(metrics, Path):
        metrics = write_json(tmp_path / "m.json", metrics)
    args = ["--metrics", str(metrics)]
    if baseline is not None:
        args += ["--baseline", str(write_json(tmp_path / "b.json", baseline))]
    if env is None:
        env = clean_env(GPUCI_JOURNAL=str(tmp_path / "j.jsonl"))
    args += [*flags, "--output-dir", str(tmp_path / "o")]
    return run_cli("gate", *args, env=env) if process else run_cli_here("gate", *args, env=env)


def answer(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """A ``--json`` run's answer, with the run's exit code as ``rc``."""
    body = json.loads(proc.stdout)
    body["rc"] = proc.returncode
    return body


def cli_json(env: dict[str, str], *args: str) -> dict[str, Any]:
    """``gpuci ARGS --json``: its answer, with the exit code as ``rc``."""
    return answer(run_cli_here(*args, "--json", env=env))
