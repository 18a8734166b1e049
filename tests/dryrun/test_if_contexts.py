"""An ``if:`` may name only some contexts (actions/runner workflow-v1.0.json): a job's github,
inputs, vars and needs; a step's also strategy, matrix, steps, job, runner and env. Any other
(``secrets`` in a step's, ``env`` or ``matrix`` in a job's) makes GitHub refuse the workflow
when it reads it ("Unrecognized named-value: 'secrets'", fern-api/fern#14711), whether the
job runs or not. Before, the plan evaluated such an ``if:`` and exited 0."""

from __future__ import annotations

import pytest

from dryrun.dryrun_testing import WORKFLOWS, dry_run, write


def _workflow(job_if: str, step_if: str) -> str:
    job = f"    if: {job_if}\n" if job_if else ""
    step = f"      - if: {step_if}\n        run: echo\n" if step_if else "      - run: echo\n"
    return (
        "on: push\nenv:\n  GO: 'no'\njobs:\n  j:\n"
        f"{job}    runs-on: x\n    strategy:\n      matrix: {{os: [a]}}\n    steps:\n{step}"
    )


@pytest.mark.parametrize(
    ("job_if", "step_if", "named", "where"),
    [
        ("", "secrets.HF_TOKEN != ''", "secrets", "job 'j' step 1"),
        ("", "${{ secrets.HF_TOKEN }}", "secrets", "job 'j' step 1"),
        ("env.GO == 'yes'", "", "env", "job 'j'"),
        ("matrix.os == 'a'", "", "matrix", "job 'j'"),
        ("false", "always() && secrets.X", "secrets", "job 'j' step 1"),  # skipped: still read
    ],
    ids=["step-secrets", "step-secrets-wrapped", "job-env", "job-matrix", "skipped-job"],
)
def test_an_if_naming_a_context_it_cannot_read_is_bad_input(
    tmp_path, job_if, step_if, named, where
):
    wf = write(tmp_path, _workflow(job_if, step_if), f"{WORKFLOWS}/wf.yml")
    proc = dry_run(tmp_path, wf, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    said = f"GitHub refuses it: {where} if: Unrecognized named-value: '{named}'"
    assert said in proc.stdout + proc.stderr, proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("job_if", "step_if"),
    [
        ("github.event_name == 'push' && vars.X != 'y' && inputs.z != 'w'", ""),
        ("always() && needs.x.result != 'failure'", ""),
        ("", "env.GO != '' && matrix.os && steps.a.outcome != 'x' && runner.os && job.status"),
        ("", "hashFiles('x') != '' && strategy.fail-fast && fromJSON('[1]')[0] && github.x.env"),
    ],
    ids=["job", "job-needs", "step", "step-functions"],
)
def test_an_if_naming_only_what_it_may_read_plans(tmp_path, job_if, step_if):
    wf = write(tmp_path, _workflow(job_if, step_if), f"{WORKFLOWS}/wf.yml")
    proc = dry_run(tmp_path, wf, cwd=tmp_path)
    assert "Unrecognized named-value" not in proc.stdout + proc.stderr, proc.stdout


def test_an_if_aliased_on_many_steps_is_read_once(tmp_path, monkeypatch):
    """A YAML alias puts one long ``if:`` on thousands of steps: the check reads each text once
    (without it, every step's copy was tokenized again when the workflow was read)."""
    from gpuci.dryrun import _expressions
    from gpuci.dryrun._workflow import load_workflow

    calls = []
    tokenize = _expressions.tokenize
    monkeypatch.setattr(_expressions, "tokenize", lambda text: calls.append(1) or tokenize(text))
    cond = " && ".join(["github.event_name != 'x'"] * 500)
    first = f'      - if: &c "{cond}"\n        run: echo\n'
    steps = first + "".join("      - if: *c\n        run: echo\n" for _ in range(2000))
    wf = write(tmp_path, f"on: push\njobs:\n  j:\n    runs-on: x\n    steps:\n{steps}", "wf.yml")
    load_workflow(wf)
    assert len(calls) <= 2, len(calls)  # one text: its condition and its names (2001 steps)


def _composite(tmp_path, step_if: str):
    action = write(
        tmp_path,
        "name: act\nruns:\n  using: composite\n  steps:\n    - run: echo\n      shell: bash\n"
        f"    - if: {step_if}\n      run: echo\n      shell: bash\n",
        "act/action.yml",
    )
    body = "on: push\njobs:\n  j: {runs-on: x, steps: [{uses: actions/checkout@v4}, {uses: ./act}]}"
    return action, dry_run(tmp_path, write(tmp_path, body, f"{WORKFLOWS}/wf.yml"), cwd=tmp_path)


@pytest.mark.parametrize(
    ("step_if", "named"),
    [
        ("secrets.TOKEN != ''", "secrets"),
        ("${{ secrets.TOKEN != '' }}", "secrets"),
        ("${{ vars.X == 'y' }}", "vars"),  # the schema's step-if: no vars, no needs
        ("${{ needs.a.result == 'success' }}", "needs"),
        ("false && jobs.x", "jobs"),
    ],
    ids=["secrets", "secrets-wrapped", "vars-wrapped", "needs-wrapped", "jobs"],
)
def test_a_composite_steps_if_naming_a_context_it_cannot_read_is_bad_input(
    tmp_path, step_if, named
):
    """actions/runner loads a composite action's steps through action_yaml.json (step-if:
    github, inputs, strategy, matrix, steps, job, runner, env) and WorkflowTemplateConverter
    (a step's if: also vars and needs, bare): 'Unrecognized named-value' fails the job when it
    loads the action. Before, the plan evaluated such an if: and exited 0."""
    action, proc = _composite(tmp_path, step_if)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    said = f"composite action {action}: the runner refuses it: step 2 if: Unrecognized "
    assert said + f"named-value: '{named}'" in proc.stdout + proc.stderr, proc.stdout


@pytest.mark.parametrize(
    "step_if",
    [
        "github.x && inputs.a && strategy.fail-fast && matrix.os && steps.s.outcome",
        "${{ job.status && runner.os && env.X && hashFiles('x') && always() }}",
        "vars.X == 'y' && needs.a.result",  # bare: the converter's list, which has both
    ],
    ids=["bare", "wrapped", "bare-vars-needs"],
)
def test_a_composite_steps_if_naming_only_what_it_may_read_plans(tmp_path, step_if):
    _, proc = _composite(tmp_path, step_if)
    assert "Unrecognized named-value" not in proc.stdout + proc.stderr, proc.stdout
