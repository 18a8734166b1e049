"""``dry-run``'s inputs for what a run would have (vars, which secrets exist, the event's
payload), events' null fields, called workflows' typed inputs and outputs, and where the plan
goes (stdout) apart from progress (stderr)."""

from __future__ import annotations

import json

import pytest

from dryrun.dryrun_testing import WORKFLOWS, dry_run, one_job, plan, plan_steps, write
from gpuci.dryrun._expressions import Partial, Unknown, condition, evaluate, opaque
from gpuci.dryrun._jobs import nothing_failed as ok  # the status functions where nothing failed
from gpuci_testing import gh_env, run_cli_here

# Each workflow is in the checkout tmp_path, where each dry run runs too.
WF, CALLED_WF = f"{WORKFLOWS}/wf.yml", f"{WORKFLOWS}/called.yml"


def test_a_secret_named_is_non_empty_but_its_text_stays_unknown():
    ctx = {"secrets": {"HF_TOKEN": opaque("secrets.HF_TOKEN"), "OTHER": ""}}
    assert evaluate("secrets.HF_TOKEN != ''", ctx, ok) is True
    assert evaluate("secrets.HF_TOKEN == null", ctx, ok) is False
    assert evaluate("!secrets.HF_TOKEN", ctx, ok) is False
    assert evaluate("secrets.HF_TOKEN && 'yes'", ctx, ok) == "yes"
    assert isinstance(evaluate("secrets.HF_TOKEN == 'abc'", ctx, ok), Unknown)
    assert condition("secrets.OTHER != ''", ctx, ok) is False


def test_an_event_payload_field_the_event_lacks_is_null_and_one_it_has_unknown():
    event = Partial("github.event", {}, open=frozenset({"ref", "pull_request"}))
    ctx = {"github": Partial("github", {"event": event})}
    assert evaluate("github.event.issue", ctx, ok) is None
    assert isinstance(evaluate("github.event.pull_request.draft", ctx, ok), Unknown)


@pytest.mark.parametrize(
    ("event", "decided"),
    [("push", True), ("schedule", True), ("workflow_dispatch", True), ("pull_request", False)],
)
def test_a_draft_gate_is_decided_on_every_event_but_a_pull_request(tmp_path, event, decided):
    wf = write(
        tmp_path,
        f"""
        on: [{event}]
        jobs:
          j:
            runs-on: x
            if: ${{{{ !github.event.pull_request.draft }}}}
            steps:
              - uses: acme/gpu-ci/actions/gpu-setup@v1
                with:
                  require-gpu: false
        """,
        WF,
    )
    (step,) = plan_steps(tmp_path, wf, cwd=tmp_path)
    assert (step["verdict"] != "conditional") is decided, step


def test_an_event_payload_decides_a_pull_request_s_labels_and_draft(tmp_path):
    wf = write(
        tmp_path,
        """
        on: pull_request
        jobs:
          j:
            runs-on: x
            if: >-
              contains(github.event.pull_request.labels.*.name, 'gpu')
              && !github.event.pull_request.draft
            steps:
              - uses: acme/gpu-ci/actions/gpu-setup@v1
                with:
                  require-gpu: false
        """,
        WF,
    )
    payload = tmp_path / "event.json"
    payload.write_text(json.dumps({"pull_request": {"draft": False, "labels": [{"name": "x"}]}}))
    (step,) = plan_steps(tmp_path, wf, "--event-payload", str(payload), cwd=tmp_path)
    assert step["verdict"] == "skipped"  # no gpu label
    payload.write_text(json.dumps({"pull_request": {"draft": False, "labels": [{"name": "gpu"}]}}))
    (step,) = plan_steps(tmp_path, wf, "--event-payload", str(payload), cwd=tmp_path)
    assert step["verdict"] == "ok"


VARS = """
- uses: acme/gpu-ci/actions/gpu-setup@v1
  if: vars.GPU_TESTS == 'on'
  with:
    min-memory-gb: ${{ vars.MEM }}
    require-gpu: false
"""  # the steps of one_job's job j


@pytest.mark.parametrize(
    "form",
    [
        "GPU_TESTS: 'on'\nMEM: 999\n",  # YAML (999: more than any GPU here, so it fails)
        '{"GPU_TESTS": "on", "MEM": "999"}',  # JSON
        'export GPU_TESTS=on\nMEM="999"\n',  # dotenv
    ],
)
def test_vars_come_from_a_file_in_any_of_three_forms_and_a_flag_beats_it(tmp_path, form):
    wf = one_job(tmp_path, VARS, WF)
    file = tmp_path / "vars"
    file.write_text(form)
    (step,) = plan_steps(tmp_path, wf, "--vars-file", str(file), cwd=tmp_path)
    assert step["verdict"] == "ok" and step["unresolved"] == []
    off = ("--var", "GPU_TESTS=off")
    (step,) = plan_steps(tmp_path, wf, "--vars-file", str(file), *off, cwd=tmp_path)
    assert step["verdict"] == "skipped"
    # without any: both wait for the run
    (step,) = plan_steps(tmp_path, wf, cwd=tmp_path)
    assert step["verdict"] == "conditional"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--secret", "HF_TOKEN=hf_sekrit_value"], "--secret 'HF_TOKEN' was given a value"),
        (["--var", "NOEQUALS"], "--var 'NOEQUALS' has no '='"),
        (["--var", "1BAD=x"], "name '1BAD' is not a valid name"),
        (["--vars-file", "missing.yml"], "cannot read the vars file missing.yml"),
        (["--event-payload", "payload.json"], "the event payload payload.json is not usable"),
        (["--event-payload", "deep.json"], "nested more than 64 levels deep"),
    ],
)
def test_bad_inputs_are_one_line_and_a_secret_s_value_is_never_printed(tmp_path, args, expected):
    wf = one_job(tmp_path, VARS, WF)
    (tmp_path / "payload.json").write_text("{not json")
    (tmp_path / "deep.json").write_text('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    proc = dry_run(tmp_path, wf, *args, cwd=tmp_path)
    assert proc.returncode == 2
    assert expected in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "sekrit" not in proc.stdout + proc.stderr


CALLER = """
on: push
jobs:
  call:
    strategy:
      matrix:
        arch: [cuda, cpu]
    uses: ./.github/workflows/called.yml
    with:
      gpu: ${{ matrix.arch == 'cuda' }}
      runner: ${{ matrix.arch }}-box
      mem: 20
    secrets: inherit
  after:
    needs: call
    if: needs.call.outputs.hit == 'false'
    runs-on: x
    steps:
      - uses: acme/gpu-ci/actions/gpu-setup@v1
        with:
          require-gpu: false
"""
CALLED = """
on:
  workflow_call:
    inputs:
      gpu: {type: boolean, default: false}
      runner: {type: string, required: true}
      mem: {type: number, default: 10}
    outputs:
      hit:
        value: ${{ jobs.run.outputs.hit }}
jobs:
  run:
    name: run on ${{ inputs.runner }}
    runs-on:
      group: ${{ inputs.runner }}
      labels: [linux]
    outputs:
      hit: ${{ steps.w.outputs.cache-hit }}
    env:  # an if: cannot read secrets (GitHub refuses the workflow): it reads this
      READ_TOKEN: ${{ secrets.HF_TOKEN }}
    steps:
      - name: GPU (${{ inputs.mem }} GB)
        if: inputs.gpu
        uses: acme/gpu-ci/actions/gpu-setup@v1
        with:
          min-memory-gb: ${{ inputs.mem }}
      - id: w
        if: env.READ_TOKEN != ''
        uses: acme/gpu-ci/actions/cache-weights@v1
        with:
          key: w-${{ inputs.runner }}
          path: ~/.cache/huggingface/hub
"""


def test_a_matrix_calling_a_local_workflow_is_planned_leg_by_leg_with_typed_inputs(tmp_path):
    wf = write(tmp_path, CALLER, WF)
    write(tmp_path, CALLED, CALLED_WF)
    body = plan(tmp_path, wf, "--secret", "HF_TOKEN", cwd=tmp_path, GPUCI_FAKE_NVML="h200")
    found = {(s["job"], s["index"]): s for s in body["report"]["steps"]}
    # a boolean input is a boolean: false skips (the text 'false' would be truthy)
    assert found[("call (arch=cpu)/run", 1)]["verdict"] == "skipped"
    gpu = found[("call (arch=cuda)/run", 1)]
    assert (gpu["verdict"], gpu["name"]) == ("ok", "GPU (20 GB)")
    restore = found[("call (arch=cpu)/run", 2)]
    assert restore["verdict"] == "ok" and "w-cpu-box" in restore["detail"]
    # the called workflow's output reaches the caller's next job: both legs missed
    assert found[("after", 1)]["verdict"] == "ok"
    text = "\n".join(body["report"]["plan"])
    assert "== job call (arch=cpu)/run: run on cpu-box (runs-on: group cpu-box, linux)" in text
    assert "${{" not in text and "{'group'" not in text


def test_a_called_workflow_sees_only_the_secrets_it_is_given(tmp_path):
    wf = write(tmp_path, CALLER.replace("secrets: inherit", "secrets: {}"), WF)
    write(tmp_path, CALLED, CALLED_WF)
    steps = plan_steps(tmp_path, wf, "--secret", "HF_TOKEN", cwd=tmp_path, GPUCI_FAKE_NVML="h200")
    found = {(s["job"], s["index"]): s["verdict"] for s in steps}
    assert found[("call (arch=cpu)/run", 2)] == "skipped"  # HF_TOKEN not passed: empty there
    # no --secret at all: whether it exists is known only at run time
    steps = plan_steps(tmp_path, wf, cwd=tmp_path, GPUCI_FAKE_NVML="h200")
    found = {(s["job"], s["index"]): s["verdict"] for s in steps}
    assert found[("call (arch=cpu)/run", 2)] == "skipped"  # still not passed: empty


def test_a_value_only_the_run_knows_leaves_the_called_step_unjudged_never_ok(tmp_path):
    wf = write(tmp_path, CALLER.replace("mem: 20", "mem: ${{ vars.MEM }}"), WF)
    write(tmp_path, CALLED, CALLED_WF)
    steps = plan_steps(tmp_path, wf, cwd=tmp_path, GPUCI_FAKE_NVML="h200")
    found = {(s["job"], s["index"]): s for s in steps}
    gpu = found[("call (arch=cuda)/run", 1)]
    assert gpu["verdict"] == "not-evaluated"  # planned without min-memory-gb: not "ok"
    assert gpu["unresolved"] == ["min-memory-gb"] and gpu["why"]["min-memory-gb"] == "vars.MEM"
    assert gpu["plans"][0]["report"].get("unresolved") == ["min-memory-gb"]


def test_the_plan_goes_to_stdout_and_progress_to_stderr(tmp_path):
    wf = one_job(tmp_path, VARS, WF)
    proc = dry_run(tmp_path, wf, "--var", "GPU_TESTS=on", "--var", "MEM=1", cwd=tmp_path)
    assert proc.returncode == 0
    assert "== job j (runs-on: x)" in proc.stdout and "step 1:" in proc.stdout
    assert "step 1:" not in proc.stderr and "planning" in proc.stderr
    assert "conditional (if: conditional" not in proc.stdout


def test_in_github_actions_the_plan_is_grouped_by_job_in_the_log(tmp_path):
    wf = one_job(tmp_path, VARS, WF)
    env = gh_env(tmp_path, HOME=str(tmp_path))
    proc = run_cli_here(
        "dry-run", str(wf), "--var", "GPU_TESTS=on", "--var", "MEM=1", env=env, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "::group::job j (runs-on: x)" in proc.stderr and "  step 1:" in proc.stderr
    assert "| j | 1 |" in (tmp_path / "summary").read_text()


def test_continue_on_error_and_a_dispatch_s_event_inputs_are_evaluated(tmp_path):
    wf = write(
        tmp_path,
        """
        on:
          workflow_dispatch:
            inputs:
              mem: {default: "999"}
        jobs:
          j:
            runs-on: x
            strategy:
              matrix:
                tolerate: [true, false]
            steps:
              - continue-on-error: ${{ matrix.tolerate }}
                uses: acme/gpu-ci/actions/gpu-setup@v1
                with:
                  min-memory-gb: ${{ github.event.inputs.mem }}
              - uses: acme/gpu-ci/actions/gpu-setup@v1
                with:
                  require-gpu: false
        """,
        WF,
    )
    found = {(s["job"], s["index"]): s["verdict"] for s in plan_steps(tmp_path, wf, cwd=tmp_path)}
    assert found[("j (tolerate=true)", 1)] == "would-fail"  # 999 GB: no GPU has it
    assert found[("j (tolerate=true)", 2)] == "ok"  # the failure is tolerated
    assert found[("j (tolerate=false)", 2)] == "skipped"


def test_this_repository_s_own_workflow_named_in_full_is_read_from_the_checkout(tmp_path):
    wf = write(tmp_path, CALLER.replace("./.github/", "acme/trainer/.github/").replace(
        "called.yml", "called.yml@main"
    ), WF)  # fmt: skip
    write(tmp_path, CALLED, CALLED_WF)
    payload = tmp_path / "event.json"
    payload.write_text(json.dumps({"repository": {"full_name": "acme/trainer"}}))
    given = ("--event-payload", str(payload))
    steps = plan_steps(tmp_path, wf, *given, cwd=tmp_path, GPUCI_FAKE_NVML="h200")
    found = {(s["job"], s["index"]): s["verdict"] for s in steps}
    assert found[("call (arch=cuda)/run", 1)] == "ok"
    # another repository's is named, not read
    payload.write_text(json.dumps({"repository": {"full_name": "acme/other"}}))
    steps = plan_steps(tmp_path, wf, *given, cwd=tmp_path, GPUCI_FAKE_NVML="h200")
    assert {s["verdict"] for s in steps if s["job"] == "call"} == {"not-inspected"}


def test_the_runner_s_own_token_exists_without_any_secret_named(tmp_path):
    """Read through the job's env, as an if: cannot name secrets (GitHub refuses it)."""
    steps = """
        - if: env.TOKEN != '' && env.OTHER == ''
          uses: acme/gpu-ci/actions/gpu-setup@v1
          with:
            require-gpu: false
        - if: env.TOKEN != ''
          uses: acme/gpu-ci/actions/gpu-setup@v1
          with:
            require-gpu: false
        """
    wf = one_job(tmp_path, steps, WF)
    env = "    env:\n      TOKEN: ${{ secrets.GITHUB_TOKEN }}\n      OTHER: ${{ secrets.OTHER }}\n"
    wf.write_text(wf.read_text().replace("    steps:\n", env + "    steps:\n", 1))
    first, second = plan_steps(tmp_path, wf, cwd=tmp_path)
    assert first["verdict"] == "conditional"  # OTHER: known only at run time
    assert second["verdict"] == "ok"


def test_a_vars_file_nested_past_what_github_reads_is_no_mapping_not_an_internal_error(tmp_path):
    """The vars file is read by the same bounded loader as a workflow: past its depth it is
    not a mapping (then read as dotenv, which it is not either), never a RecursionError."""
    from gpuci.dryrun._given import _read_vars_file
    from gpuci.errors import InputError

    deep = tmp_path / "vars.yml"
    deep.write_text("A: " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(InputError):
        _read_vars_file(str(deep))


@pytest.mark.timeout(60)  # a bound on a hang, not a timing: this takes milliseconds
def test_a_dotenv_line_of_long_white_space_is_read_in_linear_time(tmp_path):
    """``A=x`` then 200,000 spaces then ``y``: the value's lazy ``.*?`` tried the trailing
    white space at every position (20,000 spaces took 2 s, this minutes)."""
    from gpuci.dryrun._given import _read_vars_file

    file = tmp_path / "vars.env"
    file.write_text("A=x" + " " * 200_000 + "y  \nB = 'q'\n")
    assert _read_vars_file(str(file)) == {"A": "x" + " " * 200_000 + "y", "B": "q"}


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ("GPU: 'on'\ngpu: 'off'\n", "'gpu' again (after 'GPU') at line 2"),  # YAML
        ('{"GPU": "on", "Gpu": "off"}', "'Gpu' again (after 'GPU') at line 1"),  # JSON
        ("GPU=on\nMEM=1\ngpu=off\n", "'gpu' again (after 'GPU') at line 3"),  # dotenv
        ("GPU=on\nGPU=off\n", "'GPU' again at line 2"),
        ("base: &b {GPU: 'on'}\n<<: *b\ngpu: 'off'\n", "'gpu' again (after 'GPU')"),  # a merge
    ],
)
def test_a_vars_file_naming_a_variable_twice_case_blind_says_which(tmp_path, body, where):
    """GitHub's variable names are case-blind: the YAML reader refused such a file, which was
    then read as dotenv and failed as "line 1 is not NAME=VALUE", naming neither the name
    nor the fix."""
    wf = one_job(tmp_path, VARS, WF)
    (tmp_path / "vars").write_text(body)
    proc = dry_run(tmp_path, wf, "--vars-file", "vars", cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = [line for line in proc.stdout.splitlines() if line.strip()]
    assert line.startswith("dry-run: bad input: the vars file vars names the variable "), line
    assert where in line and "case-blind" in line and "fix: keep one of them" in line, line


def test_a_var_flag_replaces_the_file_s_variable_whatever_its_case(tmp_path):
    from gpuci.dryrun._given import vars_context

    (tmp_path / "vars").write_text("GPU_TESTS: 'on'\nMEM: '1'\n")
    got = vars_context(["gpu_tests=off", "mem=2", "MEM=3"], str(tmp_path / "vars"))
    assert got == {"gpu_tests": "off", "MEM": "3"}
