"""A matrix GitHub refuses (an axis with no values, no axis at all) is its job's one bad-input
line, as GitHub fails the job at 'Evaluate strategy' (review E, finding 10)."""

from __future__ import annotations

import json

from dryrun.dryrun_testing import dry_run, matrix_job, steps_of


def test_an_empty_matrix_axis_is_the_jobs_bad_input(tmp_path):
    proc = dry_run(tmp_path, matrix_job(tmp_path, "{gpu: []}"), "--json")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    steps = steps_of(proc)
    assert [(s["index"], s["verdict"]) for s in steps] == [("-", "bad-input")]
    assert "Matrix vector 'gpu' does not contain any values" in steps[0]["detail"]


def test_an_empty_axis_built_by_an_expression_is_bad_input_too(tmp_path):
    wf = matrix_job(tmp_path, '"${{ fromJSON(\'{\\"gpu\\": []}\') }}"')
    steps = steps_of(dry_run(tmp_path, wf, "--json"))
    assert [s["verdict"] for s in steps] == ["bad-input"], json.dumps(steps)


def test_a_matrix_with_no_axis_is_bad_input(tmp_path):
    steps = steps_of(dry_run(tmp_path, matrix_job(tmp_path, "{exclude: [{gpu: a}]}"), "--json"))
    assert [s["verdict"] for s in steps] == ["bad-input"]
    assert "at least one vector" in steps[0]["detail"]


def test_an_exclude_key_that_is_no_axis_is_the_jobs_bad_input(tmp_path):
    """actions/runner#2111: GitHub refuses it, where the plan ran every leg."""
    proc = dry_run(tmp_path, matrix_job(tmp_path, "{gpu: [a, b], exclude: [{build: false}]}"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Matrix exclude key 'build' does not match any key within the matrix" in proc.stdout
