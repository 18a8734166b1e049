"""A workflow whose ``needs:`` cannot all run is refused by GitHub's workflow parser (actions/
runner WorkflowTemplateConverter) before any job: a need of no job of the workflow, a cycle,
or no job free of needs. Before, the plan ran such jobs as conditional and exited 0."""

from __future__ import annotations

import pytest

from dryrun.dryrun_testing import WORKFLOWS, dry_run, steps_of, write

STEP = "    runs-on: x\n    steps:\n      - run: echo\n"


def _jobs(*needs: tuple[str, str]) -> str:
    """A workflow on push of the jobs (name, its ``needs:`` as YAML or '')."""
    return "on: push\njobs:\n" + "".join(
        f"  {name}:\n" + (f"    needs: {need}\n" if need else "") + STEP for name, need in needs
    )


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (_jobs(("a", ""), ("b", "[a, nope]")), "Job 'b' depends on unknown job 'nope'."),
        (
            _jobs(("a", ""), ("c", "d"), ("d", "c")),
            "Job 'c' depends on job 'd' which creates a cycle in the dependency graph.",
        ),
        (
            _jobs(("c", "d"), ("d", "c")),
            "The workflow must contain at least one job with no dependencies.",
        ),
    ],
    ids=["unknown", "cycle", "no-root"],
)
def test_a_needs_graph_github_refuses_is_bad_input(tmp_path, body, said):
    wf = write(tmp_path, body, f"{WORKFLOWS}/wf.yml")
    proc = dry_run(tmp_path, wf, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    out = proc.stdout + proc.stderr
    assert f"{WORKFLOWS}/wf.yml: GitHub refuses it: {said}" in out, out


def test_a_called_workflow_with_a_cycle_is_bad_input(tmp_path):
    """GitHub reads every workflow a run calls when it creates the run."""
    write(
        tmp_path,
        _jobs(("a", ""), ("c", "d"), ("d", "c")).replace("on: push", "on: workflow_call"),
        f"{WORKFLOWS}/called.yml",
    )
    top = f"on: push\njobs:\n  call:\n    uses: ./{WORKFLOWS}/called.yml\n"
    proc = dry_run(tmp_path, write(tmp_path, top, f"{WORKFLOWS}/wf.yml"), cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "which creates a cycle in the dependency graph" in proc.stdout + proc.stderr


def test_needs_name_jobs_case_blind_as_on_github(tmp_path):
    """GitHub matches a need to a job ignoring case: ``needs: Build`` waits for ``build`` and
    reads its result. Before, the plan found no such job and ran ``test`` as conditional."""
    fails = "    runs-on: x\n    steps:\n      - uses: acme/gpu-ci/actions/gpu-setup@v1\n"
    fails += "        with: {min-memory-gb: 100000}\n"
    body = _jobs(("test", "Build")) + "  build:\n" + fails  # needed below the job needing it
    wf = write(tmp_path, body, f"{WORKFLOWS}/wf.yml")
    proc = dry_run(tmp_path, wf, "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    verdicts = [(s["job"], s["verdict"]) for s in steps_of(proc)]
    assert verdicts == [("build", "would-fail"), ("test", "skipped")], verdicts
