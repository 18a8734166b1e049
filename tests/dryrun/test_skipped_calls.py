"""GitHub reads the whole workflow, and every workflow it calls, when it creates the run: a cycle
of reusable workflows, or a chain nested past ten levels, refuses the run ("error parsing called
workflow"), before any job's ``if:`` is evaluated. So the plan checks the call chain of a job it
skips (a false ``if:``, a needed job that fails) too, without planning its steps."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from dryrun.dryrun_testing import WORKFLOWS, dry_run, steps_of, write
from gpuci.commands._dry_run import DryRunInputs
from gpuci.dryrun import run
from gpuci.errors import InputError
from gpuci.runtime import Runtime
from gpuci_testing import clean_env

SELF = f"./{WORKFLOWS}/wf.yml"


def _bad(proc) -> list[tuple[str, str]]:
    """(job, detail) of each bad-input plan; the run exits 2."""
    assert proc.returncode == 2, proc.stdout + proc.stderr
    return [(s["job"], s["detail"]) for s in steps_of(proc) if s["verdict"] == "bad-input"]


def test_a_cycle_behind_a_false_if_is_bad_input(tmp_path):
    """Before, the job was listed skipped and the plan exited 0: GitHub refuses the run."""
    body = f"on: [push, workflow_call]\njobs:\n  a:\n    if: false\n    uses: {SELF}\n"
    wf = write(tmp_path, body, f"{WORKFLOWS}/wf.yml")
    proc = dry_run(tmp_path, wf, "--json", cwd=tmp_path)
    ((job, detail),) = _bad(proc)
    assert job == "a"
    assert f"reusable workflow {SELF} calls itself ({SELF} -> {SELF})" in detail
    lines = json.loads(proc.stdout)["report"]["plan"]
    assert any(line.startswith("job a: skipped (if: false") for line in lines), lines
    assert f"job a: uses {SELF}: BAD INPUT: a cycle ({SELF} -> {SELF})" in lines


def _chain(tmp_path: Path, called: int, skipped: int) -> Path:
    """wf.yml calling w1.yml, each calling the next, ``called`` in all; the job of level
    ``skipped`` (0: wf.yml's) has ``if: false``, and each workflow has a job that runs a step."""
    step = "  s:\n    runs-on: x\n    steps:\n      - run: echo\n"
    for level in range(called + 1):
        name = f"w{level}" if level else "wf"
        call = f"    uses: ./{WORKFLOWS}/w{level + 1}.yml\n" if level < called else ""
        cond = "    if: false\n" if level == skipped else ""
        body = f"on: {'workflow_call' if level else 'push'}\njobs:\n{step}"
        write(
            tmp_path,
            body + (f"  j{level}:\n{cond}{call}" if call else ""),
            f"{WORKFLOWS}/{name}.yml",
        )
    return tmp_path / WORKFLOWS / "wf.yml"


@pytest.mark.parametrize("skipped", [0, 4])
def test_a_chain_too_deep_behind_a_false_if_is_bad_input(tmp_path, skipped):
    """The tenth call is refused wherever the false ``if:`` sits; the steps of the workflows
    behind it are not planned (only the jobs before it run here)."""
    proc = dry_run(tmp_path, _chain(tmp_path, 10, skipped), "--json", cwd=tmp_path)
    ((job, detail),) = _bad(proc)
    assert job == "/".join(f"j{level}" for level in range(10)), job
    assert detail.startswith(
        f'GitHub refuses the run: job "j9" calls workflow "./{WORKFLOWS}/w10.yml", but doing '
        "so would exceed the limit on called workflow depth of 9"
    ), detail
    ran = [s["job"] for s in steps_of(proc) if s["verdict"] == "run"]
    assert len(ran) == skipped + 1, ran  # the s jobs down to the skipped call, none behind it


def test_a_chain_within_the_limit_behind_a_false_if_is_fine(tmp_path):
    proc = dry_run(tmp_path, _chain(tmp_path, 9, 0), "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [s["job"] for s in steps_of(proc)] == ["s"]


def test_a_cycle_behind_a_job_skipped_for_its_needs_is_bad_input(tmp_path):
    """``b`` needs ``a``, whose empty matrix GitHub refuses: ``b`` is skipped here, and its call
    back to the workflow is still a cycle."""
    body = (
        "on: [push, workflow_call]\njobs:\n  a:\n    runs-on: x\n    strategy:\n"
        "      matrix: {os: []}\n    steps:\n      - run: echo\n"
        f"  b:\n    needs: a\n    uses: {SELF}\n"
    )
    wf = write(tmp_path, body, f"{WORKFLOWS}/wf.yml")
    bad = dict(_bad(dry_run(tmp_path, wf, "--json", cwd=tmp_path)))
    assert "calls itself" in bad["b"], bad


def test_a_wide_tree_behind_a_false_if_ends_at_the_count(tmp_path, monkeypatch):
    """Walking the calls behind a skipped job counts each job it reads: 4 jobs each calling
    the next workflow, 8 levels deep (4^8 calls), ends in one line."""
    monkeypatch.setattr("gpuci.dryrun._bounds.MAX_PLANNED", 200)
    for level in range(1, 9):
        jobs = "".join(f"  c{n}:\n    uses: ./{WORKFLOWS}/w{level + 1}.yml\n" for n in range(4))
        write(tmp_path, f"on: workflow_call\njobs:\n{jobs}", f"{WORKFLOWS}/w{level}.yml")
    write(
        tmp_path,
        "on: workflow_call\njobs:\n  s:\n    runs-on: x\n    steps: []\n",
        f"{WORKFLOWS}/w9.yml",
    )
    top = f"on: push\njobs:\n  a:\n    if: false\n    uses: ./{WORKFLOWS}/w1.yml\n"
    wf = write(tmp_path, top, f"{WORKFLOWS}/wf.yml")
    with pytest.raises(InputError) as caught:
        out = io.StringIO()
        run(DryRunInputs(workflow=str(wf)), Runtime(clean_env(), stdout=out, stderr=out))
    assert caught.value.one_line().startswith("dry-run stopped at job a/c0/c0/"), caught.value
