"""The harness itself behaves like the runner where our actions depend on it."""

from __future__ import annotations

from pathlib import Path

import pytest
from action_env import machine_env
from harness import HarnessError, run_action

from gpuci.dryrun._expressions import ExpressionError, condition, evaluate, interpolate
from gpuci_testing import FileCommandError, parse_file_command

CTX = {
    "inputs": {"key": "", "smoke": "true", "name": "H200"},
    "steps": {"cache": {"outputs": {"cache-hit": "true"}, "outcome": "success"}},
    "env": {"GPUCI_PYTHON": ""},
}


def ok(name: str) -> bool:
    return name in ("success", "always")


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("inputs.smoke == 'true'", True),
        ("inputs.smoke == 'TRUE'", True),  # strings compare case-insensitively
        ("inputs.key != ''", False),
        ("env.GPUCI_PYTHON == '' && inputs.name == 'h200'", True),
        ("steps.cache.outputs.cache-hit || 'false'", "true"),
        ("steps.smoke.outputs.passed || 'false'", "false"),  # missing step: null
        ("steps['cache'].outputs['cache-hit']", "true"),
        ("!(inputs.key)", True),
        ("1 == '1'", True),
        ("startsWith(inputs.name, 'h2')", True),
        ("contains('a,b', 'B')", True),
    ],
)
def test_expressions(expr: str, expected: object) -> None:
    assert evaluate(expr, CTX, ok) == expected


def test_interpolation_and_conditions() -> None:
    assert interpolate("x=${{ inputs.name }} y=${{ inputs.key }}.", CTX, ok) == "x=H200 y=."
    assert condition("${{ inputs.smoke == 'true' }}", CTX, ok)
    assert not condition(
        "inputs.smoke == 'true'", CTX, lambda s: s == "always"
    )  # implicit success()
    assert condition("always() && inputs.smoke == 'true'", CTX, lambda s: s == "always")
    with pytest.raises(ExpressionError):
        evaluate("hashFiles(inputs)", CTX, ok)
    with pytest.raises(ExpressionError):
        evaluate("secrets.TOKEN", CTX, ok)


def test_file_commands_parse_both_forms() -> None:
    text = "a=1\nmulti<<EOF_x\nline 1\nline=2\nEOF_x\nempty=\n"
    assert parse_file_command(text, "GITHUB_OUTPUT") == {
        "a": "1",
        "multi": "line 1\nline=2",
        "empty": "",
    }
    with pytest.raises(FileCommandError):
        parse_file_command("b<<END\nnever closed\n", "GITHUB_OUTPUT")


ACTION = """
name: probe
description: harness self-test
inputs:
  word: {description: a word, default: hello}
  secret: {description: a secret}
outputs:
  said: {description: what step one said, value: "${{ steps.one.outputs.said }}"}
  later: {description: a later value, value: "${{ steps.two.outputs.saw || 'none' }}"}
runs:
  using: composite
  steps:
    - id: one
      shell: bash
      env: {WORD: "${{ inputs.word }}", SECRET: "${{ inputs.secret }}"}
      run: |
        echo "::add-mask::$SECRET"
        echo "the secret is $SECRET"
        { echo "said<<DELIM"; echo "$WORD"; echo "second line"; echo "DELIM"; } >> "$GITHUB_OUTPUT"
        echo "CARRIED=from-one" >> "$GITHUB_ENV"
        mkdir -p "$RUNNER_TEMP/bin"
        printf '#!/bin/sh\\necho tool-ran\\n' > "$RUNNER_TEMP/bin/mytool"
        chmod +x "$RUNNER_TEMP/bin/mytool" && echo "$RUNNER_TEMP/bin" >> "$GITHUB_PATH"
        echo "## one" >> "$GITHUB_STEP_SUMMARY"
        env | grep '^INPUT_' || echo "no INPUT_ variables"
    - id: two
      if: env.CARRIED == 'from-one'
      shell: bash
      run: |
        echo "saw=$CARRIED $(mytool)" >> "$GITHUB_OUTPUT"
        test "$GITHUB_ACTION_PATH" = "$(pwd -P)/../action" || true
        false
    - id: three
      shell: bash
      run: echo never
    - id: cleanup
      if: failure()
      shell: bash
      run: echo "cleanup ran"
"""


def test_a_composite_action_runs_as_on_the_runner(tmp_path: Path) -> None:
    action = tmp_path / "action"
    action.mkdir()
    (action / "action.yml").write_text(ACTION)
    (tmp_path / "ws").mkdir()
    (tmp_path / "temp").mkdir()
    run = run_action(
        action,
        {"secret": "hunter2-very-secret"},
        base_env={**machine_env(), "INPUT_WORD": "leaked"},
        workspace=tmp_path / "ws",
        runner_temp=tmp_path / "temp",
    )
    one, two, three, cleanup = run.steps
    assert one.outcome == "success"
    assert "no INPUT_ variables" in one.stdout  # composite steps get no automatic INPUT_*
    assert run.outputs["said"] == "hello\nsecond line"  # the input's default, heredoc parsed
    assert two.outputs["saw"] == "from-one tool-ran"  # GITHUB_ENV and GITHUB_PATH carried
    assert run.outputs["later"] == "from-one tool-ran"
    assert two.outcome == "failure" and two.exit_code == 1  # bash -e: `false` fails the step
    assert (three.outcome, three.reason) == ("skipped", "condition")
    assert cleanup.outcome == "success" and "cleanup ran" in cleanup.stdout
    assert not run.ok and run.exit_code == 1
    assert "hunter2-very-secret" in one.stdout and "hunter2-very-secret" not in run.log
    assert "the secret is ***" in run.log
    assert run.summary == "## one\n"
    assert run.env == {"CARRIED": "from-one"}


def test_unknown_inputs_are_rejected(tmp_path: Path) -> None:
    (tmp_path / "action.yml").write_text(ACTION)
    with pytest.raises(HarnessError, match="unexpected input"):
        run_action(tmp_path, {"wrod": "x"}, workspace=tmp_path, runner_temp=tmp_path)


def test_pipefail_is_on(tmp_path: Path) -> None:
    (tmp_path / "action.yml").write_text(
        "name: p\ndescription: p\nruns:\n  using: composite\n  steps:\n"
        "    - shell: bash\n      run: false | true\n"
    )
    run = run_action(tmp_path, workspace=tmp_path, runner_temp=tmp_path)
    assert not run.ok
