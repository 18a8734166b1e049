"""A gate that ends in an error once its rules are read replaces the sticky report with one
saying so: the last push's "Model gate passed" never stays up over a job that failed."""

from __future__ import annotations

import io

import pytest
from training_cli import MARKER, REPO, marked, run_gate

from forges.fake_github import FakeGitHub
from gpuci.runtime import Runtime
from gpuci.training import _gate as gate_mod
from gpuci.training import _report as report
from gpuci.training.options import GateInputs


def test_an_unusable_baseline_after_a_passing_push_says_the_gate_errored(tmp_path):
    """Push 1 passes; push 2's baseline is no JSON: bad input (exit 2) raised after the rules
    were read, and the one comment now says the gate errored, and why, in one line."""
    flags = ("--min", "accuracy=0.5", "--max-regression", "accuracy=0.01", "--comment")
    with FakeGitHub() as github:
        env = github.pull_request_env(tmp_path, REPO, 7)
        first = run_gate(tmp_path, {"accuracy": 0.95}, *flags, env=env, baseline={"accuracy": 0.9})
        assert first.returncode == 0, first.stdout + first.stderr
        second = run_gate(tmp_path, {"accuracy": 0.95}, *flags, env=env, baseline="{not json")
        assert second.returncode == 2, second.stdout + second.stderr
        (body,) = marked(github)
    assert "Model gate passed" not in body
    heading, why = body.split("\n\n")[1:3]
    assert heading == "### \u26a0\ufe0f Model gate errored"
    assert why.startswith("The gate stopped before its verdict: baseline file ")
    assert "is not usable metrics" in why and "\n" not in why


def test_an_internal_error_says_the_gate_errored_with_its_type_only(tmp_path, monkeypatch):
    """A bug's message may hold the PR's data: the comment names the exception's type, the
    job log has the rest; the error itself is raised on, for the CLI's one line and exit 3."""
    posted: list[str] = []

    def broken(*_args: object) -> None:
        raise ZeroDivisionError("the PR's <b>text</b>")

    monkeypatch.setattr(gate_mod, "evaluate", broken)
    monkeypatch.setattr(report, "publish", lambda _to, _rt, body, _result: posted.append(body))
    inp = GateInputs(metrics=str(tmp_path / "m.json"), min=["a=1"], comment=True)
    rt = Runtime({"GITHUB_SHA": "c" * 40}, stdout=io.StringIO(), stderr=io.StringIO())
    with pytest.raises(ZeroDivisionError):
        gate_mod.run(inp, rt)
    (body,) = posted
    assert body.startswith(MARKER + "\n\n### \u26a0\ufe0f Model gate errored")
    assert "internal error in gpu-ci (ZeroDivisionError)" in body
    assert "<b>" not in body and "PR's" not in body


def test_no_comment_is_posted_without_the_comment_input(tmp_path, monkeypatch):
    posted: list[str] = []
    monkeypatch.setattr(report, "publish", lambda _to, _rt, body, _result: posted.append(body))
    inp = GateInputs(
        metrics=str(tmp_path / "m.json"), min=["a=1"], baseline=str(tmp_path / "b.json")
    )
    (tmp_path / "b.json").write_text("[1]")
    rt = Runtime({}, stdout=io.StringIO(), stderr=io.StringIO())
    with pytest.raises(Exception, match="baseline"):
        gate_mod.run(inp, rt)
    assert posted == []
