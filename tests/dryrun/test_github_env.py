"""A step may add to the job's ``env`` context at run time (``echo NAME=value >> $GITHUB_ENV``,
an action's ``core.exportVariable``), so from the second step on a name no ``env:`` block
declares is unknown at plan time, not empty: an input taken from it is left to the run, never
called missing. Before any step has run, nothing can have set it, and it is empty as before."""

from __future__ import annotations

from pathlib import Path

from dryrun.dryrun_testing import dry_run, one_job, plan_steps, steps_of

FETCH = """\
- uses: ./actions/retry-fetch
  with:
    url: ${{ env.BLOB_URL }}
    dest: out.bin
"""


def test_an_input_from_a_name_an_earlier_step_may_set_is_left_to_the_run(tmp_path: Path):
    wf = one_job(tmp_path, '- run: echo "BLOB_URL=http://127.0.0.1:1/b" >> "$GITHUB_ENV"\n' + FETCH)
    fetch = plan_steps(tmp_path, wf)[-1]
    assert fetch["verdict"] != "bad-input", fetch
    assert "env.BLOB_URL" in str(fetch), fetch


def test_any_earlier_step_may_set_it_an_action_too(tmp_path: Path):
    wf = one_job(tmp_path, "- uses: some/action@v1\n" + FETCH)
    assert plan_steps(tmp_path, wf)[-1]["verdict"] != "bad-input"


def test_before_any_step_ran_an_undeclared_name_is_empty(tmp_path: Path):
    wf = one_job(tmp_path, FETCH)
    proc = dry_run(tmp_path, wf, "--json")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert steps_of(proc)[0]["verdict"] == "bad-input"
    assert "input 'url' is required" in proc.stdout


def test_a_step_surely_skipped_sets_nothing(tmp_path: Path):
    wf = one_job(tmp_path, "- if: false\n  run: echo X=1 >> $GITHUB_ENV\n" + FETCH)
    proc = dry_run(tmp_path, wf, "--json")
    assert proc.returncode == 2, proc.stdout + proc.stderr


def test_a_declared_name_keeps_its_value_after_steps_ran(tmp_path: Path):
    steps = "- run: echo hi\n- uses: ./actions/retry-fetch\n  env: {BLOB_URL: ''}\n"
    steps += "  with: {url: '${{ env.BLOB_URL }}', dest: out.bin}\n"
    proc = dry_run(tmp_path, one_job(tmp_path, steps), "--json")
    assert proc.returncode == 2, proc.stdout + proc.stderr


def test_this_repositorys_own_ci_workflow_plans_clean(tmp_path: Path):
    proc = dry_run(tmp_path, ".github/workflows/ci.yml", "--json")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
