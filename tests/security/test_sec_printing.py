"""Workflow-command injection: no value gpu-ci prints can start a command of its own.

Each route a value takes to the log in GitHub Actions mode gets the same hostile value
(:data:`runner_view.PAYLOAD`: LF, CR, CRLF, leading spaces, ``##[``, an escape sequence), and
the output is read the way the runner reads it (:mod:`runner_view`).
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
from runner_view import PAYLOAD, injected

from gpuci.errors import ExitCode, InputError
from gpuci.runtime import Result, Runtime
from gpuci_testing import REPO, clean_env, parse_file_command, run_cli

sys.path.insert(0, str(REPO / "tests" / "actions"))
from action_env import run_gpuci_action


@pytest.fixture
def gh(tmp_path):
    files = {
        n: tmp_path / n.lower() for n in ("GITHUB_OUTPUT", "GITHUB_ENV", "GITHUB_STEP_SUMMARY")
    }
    for f in files.values():
        f.write_text("")
    env = {"GITHUB_ACTIONS": "true", **{k: str(v) for k, v in files.items()}}
    out, err = io.StringIO(), io.StringIO()
    return Runtime(env, stdout=out, stderr=err), out, err, files


def printed(out: io.StringIO, err: io.StringIO) -> str:
    text = out.getvalue() + err.getvalue()
    assert "INJ-lf" in text  # the value was printed: the route was exercised
    return text


def assert_clean(text: str) -> None:
    bad = injected(text)
    assert bad == [], "\n".join(repr(c.line) for c in bad)
    # no escape sequence from a value reaches a log (add-mask data is never shown)
    assert not [ln for ln in text.splitlines() if "\x1b" in ln and "::add-mask::" not in ln]


def test_annotations_titles_and_headline(gh):
    rt, out, err, _ = gh
    result = Result(command="x", exit_code=ExitCode.BAD_INPUT, headline=PAYLOAD)
    result.error(PAYLOAD, title=PAYLOAD)
    result.warning("w " + PAYLOAD)
    result.notice(PAYLOAD)
    rt.render(result)
    assert_clean(printed(out, err))


def test_logs_and_group_titles(gh):
    rt, out, err, _ = gh
    with rt.group(PAYLOAD):
        rt.log(PAYLOAD)
        rt.log("step 1: " + PAYLOAD)
    assert_clean(printed(out, err))


def test_summary_and_outputs_printed_in_the_log(gh):
    rt, out, err, files = gh
    result = Result(command="x", headline="ok")
    result.summary.append("### title\n\n" + PAYLOAD)
    result.outputs = {"value": PAYLOAD}  # multi-line outputs are printed indented
    rt.render(result)
    assert_clean(printed(out, err))
    # ...while the output itself reaches the next step unchanged
    # (the runner reads the file by lines, so a lone CR reads as a line break; never as an end)
    values = parse_file_command(files["GITHUB_OUTPUT"].read_text(), "o")
    assert values == {"value": "\n".join(PAYLOAD.splitlines())}


def test_masks_cannot_carry_a_command(gh):
    rt, out, err, _ = gh
    rt.mask(PAYLOAD)
    rt.log("the value: " + PAYLOAD)
    text = out.getvalue() + err.getvalue()
    assert_clean(text)
    assert "INJ-lf" not in text.split("::add-mask::")[-1].split("\n", 1)[1]  # redacted after


def test_render_failure_and_progress_label(gh):
    rt, out, err, _ = gh
    rt.render_failure(InputError(PAYLOAD, hint=PAYLOAD))
    meter = rt.progress(PAYLOAD, 10)
    meter.advance(5)
    meter.close()
    assert_clean(printed(out, err))


def test_json_mode_keeps_the_value_and_starts_no_command(gh):
    rt, out, err, _ = gh
    rt.platform = "json"
    result = Result(command="x", headline=PAYLOAD)
    result.report = {"name": PAYLOAD}
    rt.render(result)
    text = printed(out, err)
    assert_clean(text)
    assert json.loads(out.getvalue())["report"]["name"] == PAYLOAD  # same value, parsed


def test_a_heredoc_value_cannot_close_its_own_entry(gh, monkeypatch):
    """The delimiter is random and checked against the value; a planted one is not used."""
    import uuid

    rt, _, _, files = gh
    fixed = [uuid.UUID(int=1), uuid.UUID(int=1), uuid.UUID(int=2)]
    monkeypatch.setattr(uuid, "uuid4", lambda: fixed.pop(0))
    planted = f"a\nghadelimiter_{uuid.UUID(int=1)}\nevil<<X\nowned\nX"
    result = Result(command="x", outputs={"one": "1", "two": planted})
    rt.render(result)
    values = parse_file_command(files["GITHUB_OUTPUT"].read_text(), "o")
    assert values == {"one": "1", "two": planted}
    with pytest.raises(InputError, match="variable name"):
        rt.render(Result(command="x", env={"A\nB<<X": "v"}))


def test_cli_usage_error_quoting_the_value(tmp_path):
    env = clean_env(GITHUB_ACTIONS="true", GITHUB_OUTPUT=str(tmp_path / "o"))
    (tmp_path / "o").write_text("")
    proc = run_cli("pods", PAYLOAD, env=env)
    assert proc.returncode == 2
    assert_clean(proc.stdout + proc.stderr)


def test_a_bad_input_value_echoed_in_the_error(tmp_path):
    env = clean_env(GITHUB_ACTIONS="true", GITHUB_OUTPUT=str(tmp_path / "o"))
    (tmp_path / "o").write_text("")
    proc = run_cli("pods", "up", "--gpu-types", "x", "--image", "y", "--ttl", PAYLOAD, env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert_clean(proc.stdout + proc.stderr)
    assert "INJ-lf" in proc.stdout  # named in the error, escaped


def test_dry_run_of_a_workflow_with_hostile_step_names(tmp_path):
    workflow = tmp_path / "w.yml"
    step = {"name": PAYLOAD, "uses": "./actions/gpu-setup", "with": {"min-gpus": PAYLOAD}}
    workflow.write_text(json.dumps({"on": "push", "jobs": {PAYLOAD: {"steps": [step]}}}))
    env = clean_env(
        GITHUB_ACTIONS="true",
        GITHUB_OUTPUT=str(tmp_path / "o"),
        GITHUB_STEP_SUMMARY=str(tmp_path / "s"),
        GPUCI_FAKE_NVML="h100-sxm",
    )
    proc = run_cli("dry-run", str(workflow), env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert_clean(proc.stdout + proc.stderr)
    assert "INJ-lf" in proc.stdout + proc.stderr


def test_gpu_pod_action_input_holding_a_newline(tmp_path):
    """The reported case: actions/gpu-pod echoes a bad `action` in its own shell step."""
    run = run_gpuci_action(
        tmp_path, "actions/gpu-pod", {"action": PAYLOAD}, RUNPOD_API_KEY="k" * 20
    )
    assert run.exit_code == 2
    raw = "".join(step.stdout for step in run.steps)
    assert "INJ-lf" in raw
    assert_clean(raw)
    assert [a.level for a in run.annotations] == ["error"]


def test_the_fix_is_central_for_terminal_and_gitlab_too(tmp_path):
    """No escape sequence or carriage return from a value reaches a terminal or GitLab log."""
    for env in ({}, {"GITLAB_CI": "true", "GPUCI_DOTENV": str(tmp_path / "d.env")}):
        out = io.StringIO()
        rt = Runtime(env, stdout=out, stderr=out)
        rt.log(PAYLOAD)
        rt.render(Result(command="x", headline=PAYLOAD, summary=[PAYLOAD]))
        assert "\x1b[31m" not in out.getvalue() and "\r::" not in out.getvalue()
        assert not [ln for ln in out.getvalue().splitlines() if ln.lstrip().startswith("::")]


def test_runner_view_catches_the_old_code(tmp_path):
    """The checker itself: the line the unpatched gpu-pod action printed is an injection."""
    old = "::error title=x::action is 'innocent\n::error::INJ-lf', not one of up\n"
    assert injected(old) and injected("ok ##[add-mask]INJ")
    assert not injected("::error::innocent%0A::error::INJ-lf")
    assert Path(REPO / "actions" / "gpu-pod" / "action.yml").exists()


def test_a_mask_is_the_secret_itself_even_with_odd_characters(gh):
    """Escaping for display must not change what the runner masks: ``##[`` and a tab stay."""
    rt, out, err, _ = gh
    rt.mask("pa##[ss\tword")
    assert err.getvalue() == "::add-mask::pa##[ss\tword\n"  # with the log, on stderr
    assert out.getvalue() == ""
