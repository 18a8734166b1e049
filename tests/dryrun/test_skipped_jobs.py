"""A job that does not run (a false ``if:``, a need that fails or is skipped) lists its steps in
the text plan as the JSON does, each marked not run because the job is skipped, with the
warnings the file holds: before, a job skipped by its own ``if:`` listed its steps (and their
warnings) in the JSON and the annotations only, and a reader of the text plan saw a warning
that belonged to no step of it."""

from __future__ import annotations

import json

import pytest

from dryrun.dryrun_testing import WORKFLOWS, dry_run, write

STRING_IF = "${{ false }} && false"  # a string to GitHub: a warning whether the job runs or not
FAILS = "uses: acme/gpu-ci/actions/gpu-setup@v1\n        with: {min-memory-gb: 100000}"
SKIPPED = f"""\
on: push
jobs:
  first:
    runs-on: x
    steps:
      - {FAILS}
  j:
    if: github.event_name == 'pull_request'
    runs-on: ${{{{ matrix.os }}}}
    strategy:
      matrix:
        os: [a, b]
    steps:
      - name: build
        run: make
      - if: {STRING_IF}
        uses: acme/gpu-ci/actions/gpu-setup@v1
        with: {{require-gpu: 'false'}}
"""
BY_IF = "job skipped (if: github.event_name == 'pull_request'; github.event_name is 'push')"
BY_NEEDS = "job skipped: needs first would fail or be skipped here"
BOTH = pytest.mark.parametrize(
    ("body", "why"),
    [
        (SKIPPED, BY_IF),
        (SKIPPED.replace("if: github.event_name == 'pull_request'", "needs: first"), BY_NEEDS),
    ],
    ids=["if", "needs"],
)


def _both(tmp_path, body: str) -> tuple[list[str], list[dict]]:
    """The text plan's lines and the JSON report's steps of the workflow ``body``."""
    wf = write(tmp_path, body, f"{WORKFLOWS}/wf.yml")
    text = dry_run(tmp_path, wf, cwd=tmp_path)
    assert text.returncode == 0, text.stdout + text.stderr
    proc = dry_run(tmp_path, wf, "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)["report"]
    return text.stdout.splitlines(), report["steps"]


@BOTH
def test_a_skipped_job_lists_its_steps_in_the_text_plan(tmp_path, body, why):
    """Each step marked as the JSON's detail says, its warning under it. GitHub skips the job
    before it expands its matrix (one skipped check, named as written): one job here too,
    where a failed need made one per leg."""
    lines, steps = _both(tmp_path, body)
    heading = lines.index("== job j (runs-on: ${{ matrix.os }})")  # as written: never expanded
    build, setup = [s for s in steps if s["job"] == "j"]  # once, not once a matrix leg
    assert build["detail"] == setup["detail"] == why, steps
    assert setup["condition"] == STRING_IF, setup  # its if:, as a step skipped by its own
    (warning,) = setup["warnings"]
    assert warning.startswith(f"if: '{STRING_IF}' in ./{WORKFLOWS}/wf.yml mixes text"), warning
    assert lines[heading + 1 : heading + 5] == [
        f"  {why}",
        f"  step 1: build [{why}]",
        f"  step 2: acme/gpu-ci/actions/gpu-setup@v1 [{why}]",
        f"    warning: {warning}",
    ], lines


@BOTH
def test_each_warning_the_text_plan_shows_is_under_a_step_of_its_job(tmp_path, body, why):
    """The JSON's steps and the text's step lines are one list: every step the JSON names is
    in the text under its job's heading, its warnings right under it."""
    lines, steps = _both(tmp_path, body)
    job = ""
    shown: list[tuple[str, str, list[str]]] = []
    for line in lines:
        if line.startswith("== job "):
            job = line.removeprefix("== job ").split(" ")[0]
        elif line.startswith("  step "):
            shown.append((job, line.split(":")[0].strip(), []))
        elif line.startswith("    warning: "):
            shown[-1][2].append(line.removeprefix("    warning: "))
    assert shown == [(s["job"], f"step {s['index']}", s["warnings"]) for s in steps], lines


@pytest.mark.parametrize("skip", ["if: false", "needs: first"])
def test_a_skipped_job_calling_a_workflow_lists_no_steps_in_either(tmp_path, skip):
    """A call has no steps of its own, and the workflow it calls is not planned behind a
    skip (only its call chain is checked): the text and the JSON both list none of it."""
    write(
        tmp_path,
        "on: workflow_call\njobs:\n  inner:\n    runs-on: x\n    steps:\n      - run: echo\n",
        f"{WORKFLOWS}/called.yml",
    )
    first = f"  first:\n    runs-on: x\n    steps:\n      - {FAILS}\n"
    call = f"  c:\n    {skip}\n    uses: ./{WORKFLOWS}/called.yml\n"
    lines, steps = _both(tmp_path, f"on: push\njobs:\n{first}{call}")
    assert [s["job"] for s in steps] == ["first"], steps
    assert [line for line in lines if line.startswith("job c: skipped")], lines
    assert not [line for line in lines if line.startswith(("== job c", "  step 2"))], lines


def test_a_job_skipped_for_a_failed_need_is_not_expanded(tmp_path):
    """Its matrix is never built, so an empty axis GitHub would refuse is no bad input: before,
    each leg was planned as skipped, and an empty matrix made the plan exit 2."""
    body = SKIPPED.replace("if: github.event_name == 'pull_request'", "needs: first")
    lines, steps = _both(tmp_path, body.replace("os: [a, b]", "os: []"))
    assert [s["verdict"] for s in steps if s["job"] == "j"] == ["skipped", "skipped"], steps
    assert "job j: skipped: needs first would fail or be skipped here" in lines, lines
