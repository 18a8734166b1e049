"""An ``if:`` that mixes text and ``${{ }}`` is a string to GitHub (``format()`` of both), true
when not empty: ``if: ${{ false }} && false`` runs. The plan runs it too, as GitHub does, and
warns in one line naming the file, the job (and step) and the fix, as actionlint does."""

from __future__ import annotations

import pytest

from dryrun.dryrun_testing import WORKFLOWS, plan, write
from gpuci.dryrun._jobs import string_if
from gpuci.dryrun._report import Transcript

WORKFLOW = """\
on: push
jobs:
  j:
    if: ${{ github.event_name == 'push' }} && false
    runs-on: x
    steps:
      - uses: actions/checkout@v4
        if: ${{ false }} && false
      - name: block
        if: |
          ${{ false }}
        run: echo b
      - uses: ./act
      - name: one expression
        if: ${{ false }}
        run: echo c
"""
ACTION = """\
runs:
  using: composite
  steps:
    - if: success() && ${{ false }}
      run: echo
      shell: bash
"""
FIX = "put the whole condition inside one ${{ }} (or drop the ${{ }})"


def test_an_if_that_is_a_string_runs_and_is_warned_of(tmp_path):
    """Before, the plan said nothing: each of these ran (as on GitHub), silently."""
    wf = write(tmp_path, WORKFLOW, f"{WORKFLOWS}/wf.yml")
    write(tmp_path, ACTION, "act/action.yml")
    body = plan(tmp_path, wf, cwd=tmp_path)
    steps = {str(s["index"]): s for s in body["report"]["steps"]}
    file = f"./{WORKFLOWS}/wf.yml"
    expected = {
        "1": f"if: '${{{{ false }}}} && false' in {file} mixes text and ${{{{ }}}}",
        "2": f"if: '${{{{ false }}}}\\n' in {file} mixes text and ${{{{ }}}}",  # | keeps the \n
        "3.1": "if: 'success() && ${{ false }}' in ./act mixes text and ${{ }}",
    }
    for index, start in expected.items():
        (warning,) = steps[index]["warnings"]
        assert warning.startswith(start), warning
        assert warning.endswith(f"a string, always true after success; {FIX}"), warning
        assert steps[index]["verdict"] in ("other-action", "run"), steps[index]  # it runs
    assert steps["4"]["verdict"] == "skipped" and steps["4"]["warnings"] == []
    lines = body["report"]["plan"]
    job_line = "job j: warning: if: \"${{ github.event_name == 'push' }} && false\" in " + file
    assert any(line.startswith(job_line) for line in lines), lines
    assert sum(line.startswith("    warning: if: ") for line in lines) == 3, lines
    messages = [a["message"] for a in body["annotations"]]
    assert any("job j, step 2 (block): if: '${{ false }}\\n'" in m for m in messages), messages
    assert [n for n in body["report"]["notes"] if n.startswith("job j: if: ")], body


@pytest.mark.parametrize(
    ("cond", "warned"),
    [
        ("${{ false }} && false", "always true after success"),
        ("${{ false }}\n", "always true after success"),
        ("${{ always() }} && false", "always true, even after a failure"),
        ("${{ '' }}${{ '' }}", "true when not empty after success"),
        ("${{ false }}", ""),  # one expression, all of it: a condition
        ("${{ 'false' }}", ""),
        ("false && success()", ""),  # no ${{ }}: an expression
        ("${{ false", ""),  # not closed: GitHub refuses the file (bad input elsewhere)
        (True, ""),
        (None, ""),
    ],
)
def test_which_if_is_a_string(cond, warned):
    got = string_if(cond, "wf.yml")
    assert (warned in got) if warned else got == "", got


SKIPPED_JOB = """\
on: push
jobs:
  first:
    runs-on: x
    steps:
      - run: echo
  j:
    if: false
    runs-on: x
    steps:
      - if: ${{ false }} && false
        run: echo
"""


def test_a_step_of_a_job_skipped_here_is_warned_of_too(tmp_path):
    """A lint warning on the file does not depend on whether the job runs here: before, the
    steps of a job skipped by its own ``if:`` were listed with none."""
    wf = write(tmp_path, SKIPPED_JOB, f"{WORKFLOWS}/wf.yml")
    body = plan(tmp_path, wf, cwd=tmp_path)
    (step,) = [s for s in body["report"]["steps"] if s["job"] == "j"]
    assert step["verdict"] == "skipped", step
    (warning,) = step["warnings"]
    assert warning.startswith(f"if: '${{{{ false }}}} && false' in ./{WORKFLOWS}/wf.yml mixes")
    assert warning.endswith(FIX), warning


def test_a_job_warning_is_under_its_own_jobs_heading(tmp_path):
    """In a CI log each ``== job`` heading opens a group: the job's warning, printed before
    its heading, landed in the group of the job before it."""
    wf = write(
        tmp_path, SKIPPED_JOB.replace("if: false", "if: ${{ true }} && true"), f"{WORKFLOWS}/wf.yml"
    )
    lines = plan(tmp_path, wf, cwd=tmp_path)["report"]["plan"]
    heading = lines.index("== job j (runs-on: x)")
    (warned,) = [n for n, line in enumerate(lines) if line.startswith("job j: warning: if: ")]
    assert warned == heading + 1, lines


def test_a_held_line_follows_the_next_heading_or_comes_before_the_next_line():
    """A job's warning is held for its heading; a job with none (skipped, a call) prints it
    before its own next line, and one never followed by a line is still printed."""
    transcript = Transcript()
    transcript.hold("w1")
    transcript.heading("job a")
    transcript.say("a1")
    transcript.hold("w2")
    transcript.say("job b: skipped")
    transcript.hold("w3")
    assert [text for _, text in transcript.lines()] == [
        "job a",
        "w1",
        "a1",
        "w2",
        "job b: skipped",
        "w3",
    ]


MATRIX = """\
on: push
jobs:
  t:
    runs-on: x
    strategy:
      matrix:
        gpu: [a, b, c]
    steps:
      - if: ${{ false }} && false
        run: echo
"""


def test_one_warning_of_each_matrix_leg_is_one_annotation(tmp_path):
    """Each leg of a matrix plans the step again, with the same warning: three legs made three
    annotations of one fact (GitHub shows ten a step). One names the others' count."""
    wf = write(tmp_path, MATRIX, f"{WORKFLOWS}/wf.yml")
    body = plan(tmp_path, wf, cwd=tmp_path)
    assert sum(len(s["warnings"]) for s in body["report"]["steps"]) == 3  # each leg's plan
    warned = [a["message"] for a in body["annotations"] if "mixes text" in a["message"]]
    assert len(warned) == 1, warned
    assert warned[0].startswith("job t (gpu=a) and 2 more, step 1 ("), warned
