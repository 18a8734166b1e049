"""What the jobs after a job read of it (``needs.<job>.result``, ``success()``, ``failure()``)
as GitHub computes it: a job with ``continue-on-error`` that fails is a success to them."""

from __future__ import annotations

import pytest

from dryrun.dryrun_testing import WORKFLOWS, dry_run, plan_steps, write

FAILS = "uses: acme/gpu-ci/actions/gpu-setup@v1\n        with: {min-memory-gb: 100000}"


def _verdicts(tmp_path, body: str) -> dict[str, str]:
    """job -> the verdict of its first step, from the JSON plan of ``body``."""
    wf = write(tmp_path, body, f"{WORKFLOWS}/wf.yml")
    verdicts: dict[str, str] = {}
    for step in plan_steps(tmp_path, wf, cwd=tmp_path):
        verdicts.setdefault(step["job"], step["verdict"])
    return verdicts


@pytest.mark.parametrize(("tolerated", "after"), [("true", "run"), ("false", "skipped")])
def test_a_failed_job_with_continue_on_error_is_a_success_to_its_needs(tmp_path, tolerated, after):
    """actions/runner#1161: with ``continue-on-error: true`` a failed job's
    ``needs.<job>.result`` is ``success`` (the run passes; the UI shows the job failed), so a
    job that needs it runs. Before, the plan skipped it as after a failure."""
    body = (
        "on: push\njobs:\n  e:\n    runs-on: x\n"
        f"    continue-on-error: {tolerated}\n    steps:\n      - {FAILS}\n"
        "  f:\n    needs: e\n    runs-on: x\n    steps:\n      - run: echo\n"
    )
    assert _verdicts(tmp_path, body) == {"e": "would-fail", "f": after}
    if tolerated == "true":
        lines = dry_run(tmp_path, tmp_path / WORKFLOWS / "wf.yml", cwd=tmp_path).stdout
        assert "  continue-on-error: needs.e.result is success" in lines.splitlines()


@pytest.mark.parametrize(("failing", "after"), [("true", "run"), ("false", "skipped")])
def test_continue_on_error_is_read_leg_by_leg(tmp_path, failing, after):
    """GitHub's example: ``continue-on-error: ${{ matrix.experimental }}``. A failing leg that
    is experimental fails no job that needs the matrix; one that is not does."""
    body = f"""\
on: push
jobs:
  t:
    runs-on: x
    continue-on-error: ${{{{ matrix.experimental }}}}
    strategy:
      matrix:
        version: [6, 7]
        experimental: [false]
        include:
          - version: 9
            experimental: true
    steps:
      - if: matrix.experimental == {failing}
        {FAILS}
  f:
    needs: t
    runs-on: x
    steps:
      - run: echo
"""
    assert _verdicts(tmp_path, body)["f"] == after


def _chain(first: str, last: str) -> str:
    """a (``first``: its if:, or a step that fails here) -> b (``if: always()``) -> c (``last``:
    its if:), each with one ``run:`` step."""
    step = "    steps:\n      - run: echo\n"
    return (
        f"on: push\njobs:\n  a:\n    runs-on: x\n{first}"
        f"  b:\n    needs: a\n    if: always()\n    runs-on: x\n{step}"
        f"  c:\n    needs: b\n    runs-on: x\n{last}{step}"
    )


A_SKIPPED = "    if: false\n    steps:\n      - run: echo\n"
A_FAILS = f"    steps:\n      - {FAILS}\n"


@pytest.mark.parametrize(
    ("first", "last", "ran"),
    [
        (A_SKIPPED, "", "skipped"),  # actions/runner#2205
        (A_FAILS, "", "skipped"),
        (A_FAILS, "    if: success()\n", "skipped"),
        (A_FAILS, "    if: failure()\n", "run"),  # "if any ancestor job fails"
        (A_FAILS, "    if: always()\n", "run"),
    ],
    ids=["skipped-success", "failed-success", "failed-explicit", "failed-failure", "always"],
)
def test_a_jobs_status_functions_read_every_job_above_it(tmp_path, first, last, ran):
    """GitHub's ``success()`` for a job is false when any ancestor failed or was skipped, though
    the job it needs (here ``b``, ``if: always()``) succeeded, and ``failure()`` is true when
    any ancestor failed. Before, the plan read only the jobs a job names in ``needs``."""
    verdicts = _verdicts(tmp_path, _chain(first, last))
    assert verdicts["b"] == "run", verdicts
    assert verdicts["c"] == ran, verdicts


def test_a_job_skipped_for_an_ancestor_says_which(tmp_path):
    wf = write(tmp_path, _chain(A_FAILS, ""), f"{WORKFLOWS}/wf.yml")
    lines = dry_run(tmp_path, wf, cwd=tmp_path).stdout.splitlines()
    assert "job c: skipped: ancestor a would fail or be skipped here" in lines, lines


@pytest.mark.parametrize(
    ("need", "ran"), [(A_SKIPPED, "skipped"), (A_FAILS, "run")], ids=["skipped", "failed"]
)
def test_failure_is_false_after_a_skipped_need(tmp_path, need, ran):
    """A skipped job is no failure: ``if: failure()`` after one does not run (GitHub's
    ``failure()`` is true when a job above *fails*; success() is false after either). Before,
    the plan counted the skip as a failure and ran the job."""
    body = (
        f"on: push\njobs:\n  a:\n    runs-on: x\n{need}"
        "  d:\n    needs: a\n    if: failure()\n    runs-on: x\n    steps:\n      - run: echo\n"
    )
    assert _verdicts(tmp_path, body)["d"] == ran
