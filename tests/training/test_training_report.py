"""The sticky PR comment against a fake GitHub REST API on 127.0.0.1: created once, then updated."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from training_cli import MARKER, REPO, marked, run_gate, write_json

from forges.fake_github import FakeGitHub
from gpuci import journal
from gpuci.cache._stores.file import LocalStore
from gpuci.training import _ci as ci
from gpuci.training import _history as history
from gpuci.training import _report as report
from gpuci_testing import clean_env, run_cli, run_cli_here


@pytest.fixture
def github():
    with FakeGitHub() as fake:
        yield fake


def pr_env(tmp_path: Path, fake: FakeGitHub, **extra: str) -> dict[str, str]:
    return fake.pull_request_env(tmp_path, REPO, 7, **extra)


# An accuracy floor and an allowance against the baseline (accuracy 0.93, loss 0.31).
RULES = ("--min", "eval.accuracy=0.92", "--max-regression", "accuracy=0.01")


def gate(tmp_path: Path, env: dict[str, str], accuracy: float, *extra: str):
    model = tmp_path / "model.npz"
    model.write_bytes(b"m" * 100)
    metrics = {"eval": {"accuracy": accuracy, "loss": 0.3}}
    baseline = {"eval": {"accuracy": 0.93, "loss": 0.31}}
    return run_gate(
        tmp_path, metrics, *RULES, "--artifacts", str(model), *extra, env=env, baseline=baseline
    )


def test_comment_created_then_updated_in_place_never_duplicated(tmp_path, github):
    # Others' comments fill more than one page, so finding ours needs the Link header.
    for i in range(5):
        github.state.comment(REPO, 7, f"looks good {i}")
    env = pr_env(tmp_path, github)
    journal.record("gpu-setup", {"gpus": [{}, {}], "time": time.time() - 90}, env)  # 2 GPUs

    first = gate(tmp_path, env, 0.95, "--comment")
    assert first.returncode == 0, first.stdout + first.stderr
    (body,) = marked(github)
    assert body.startswith(MARKER)
    assert "✅ Model gate passed" in body
    assert "| `eval.accuracy` | 0.95 | eval.accuracy >= 0.92 | 0.93 | +0.02 | ✅ pass |" in body
    assert "All metrics vs baseline: 2" in body and "| `eval.loss` | 0.3 | 0.31 | -0.01 |" in body
    record = json.loads((tmp_path / "o" / "provenance.json").read_text())
    assert f"**Provenance:** `{record['statement_digest']}`" in body
    assert "GPU-minutes (2 GPU(s) x" in body
    assert "commit `cccccccccccc`" in body
    outputs = (tmp_path / "out").read_text()
    assert "created" in outputs and "issuecomment-" in outputs
    # masked the moment it was read, and printed nowhere else
    lines = (first.stderr + first.stdout).splitlines()  # the log (masks first), then the result
    assert lines[0] == f"::add-mask::{github.state.github_token}"
    assert not [ln for ln in lines[1:] if github.state.github_token in ln]

    second = gate(tmp_path, env, 0.90, "--comment")
    assert second.returncode == 1  # the gate fails, and the comment still says so
    (body,) = marked(github)  # a second run updates, never adds
    assert "❌ Model gate failed" in body and "FAIL: below 0.92" in body
    assert len(github.state.comments[f"{REPO}#7"]) == 6
    methods = [m for m, *_ in github.state.requests]
    assert methods.count("POST") == 1 and methods.count("PATCH") == 1
    # every request went through the GHES-style base path (and /user: whose comment is ours)
    assert all(
        path.startswith(("/api/v3/repos/acme/models/", "/api/v3/user"))
        for _, path, _ in github.state.requests
    )


def test_the_chart_in_the_sticky_comment_is_updated_in_place_with_history(tmp_path, github):
    store = LocalStore(tmp_path / "hist")
    for i, value in enumerate((0.931, 0.935)):  # two default-branch runs before this PR
        ctx = ci.RunContext(platform="github", commit=f"{i}" * 40)
        rows = [{"metric": "eval.accuracy", "value": value}]
        day = 1_700_000_000 + i * 86_400  # 2023-11-14, then the next day
        history.append(store, "training", history.entry({"rows": rows}, None, ctx, now=day))
    env = pr_env(tmp_path, github)
    extra = ("--comment", "--history", (tmp_path / "hist").as_uri())
    assert gate(tmp_path, env, 0.95, *extra).returncode == 0
    assert gate(tmp_path, env, 0.94, *extra).returncode == 0
    (body,) = marked(github)
    chart = body.split("```mermaid\n", 1)[1].split("\n```", 1)[0]
    assert '    x-axis ["Nov 14", "Nov 15", "this run"]' in chart  # days, not commits
    # the default branch's runs, then the PR's value, updated, as a series of its own
    assert "    bar [0.931, 0.935, 0.888]\n    bar [0.888, 0.888, 0.94]" in chart
    assert "    line [0.92, 0.92, 0.92]" in chart and "    line [0.93, 0.93, 0.93]" in chart
    assert body.index("```mermaid") < body.index("| `eval.accuracy` |")  # table under chart
    assert len(list((tmp_path / "hist").rglob("*.json"))) == 2  # a PR adds nothing


def test_report_command_from_the_journal_and_retry_on_502(tmp_path, github):
    env = pr_env(tmp_path, github)
    assert gate(tmp_path, env, 0.95).returncode == 0  # no --comment: nothing posted
    assert github.state.requests == []
    github.state.answer_first = [502]  # one transient failure, retried
    proc = run_cli_here("report", "--comment", "--gpu-minutes", "12.5", env=env)
    assert proc.returncode == 0, proc.stdout
    comment = github.state.comments[f"{REPO}#7"][0]
    assert "12.5 GPU-minutes (as given)" in comment["body"]
    assert [m for m, *_ in github.state.requests] == ["GET", "GET", "POST"]
    assert "Model gate passed" in (tmp_path / "summary").read_text()


def test_a_lost_create_response_is_not_posted_twice(tmp_path, github):
    """POST isn't idempotent: after a 502 that did create the comment, the retry updates it."""
    env = pr_env(tmp_path, github)
    github.state.lose_answers = 1
    proc = run_cli_here("report", "--comment", "--gpu-minutes", "3", env=env)
    assert proc.returncode == 0, proc.stdout
    ours = [c for c in github.state.comments[f"{REPO}#7"] if c["user"]["login"] == "bot"]
    assert len(ours) == 1
    assert "3 GPU-minutes (as given)" in ours[0]["body"]
    methods = [m for m, *_ in github.state.requests]
    assert methods.count("POST") == 1 and methods.count("PATCH") == 1


def test_skips_without_token_or_outside_a_pull_request(tmp_path, github):
    env = pr_env(tmp_path, github)
    del env["GITHUB_TOKEN"]
    proc = run_cli_here("report", "--comment", env=env)
    assert proc.returncode == 0
    assert "PR comment skipped: no token" in proc.stdout
    env = pr_env(tmp_path, github, GITHUB_EVENT_NAME="push")
    (tmp_path / "event.json").write_text(json.dumps({"ref": "refs/heads/main"}))
    proc = run_cli_here("report", "--comment", env=env)
    assert proc.returncode == 0 and "PR comment skipped: not a pull request" in proc.stdout
    assert github.state.requests == []


def test_rejected_token_is_bad_input_and_forbidden_is_a_warning(tmp_path, github):
    """The rejected token is in no line the runner shows, the interpreter's exit included:
    that run has a process of its own."""
    env = pr_env(tmp_path, github, GITHUB_TOKEN="ghs_wrongtoken")
    proc = run_cli("report", "--comment", env=env)
    assert proc.returncode == 2
    assert "GitHub rejected the token" in proc.stdout
    shown = [ln for ln in proc.stdout.splitlines() if not ln.startswith("::add-mask::")]
    assert "ghs_wrongtoken" not in "\n".join(shown)
    env = pr_env(tmp_path, github)
    github.state.answer_first = [403]
    proc = run_cli_here("report", "--comment", env=env)
    assert proc.returncode == 0
    assert "::warning" in proc.stdout and "fork PRs get a read-only token" in proc.stdout


def test_unreachable_api_is_infra_error(tmp_path, github):
    env = pr_env(tmp_path, github, GITHUB_API_URL="http://127.0.0.1:9/api/v3")
    proc = run_cli_here("report", "--comment", env=env)
    assert proc.returncode == 3 and "cannot reach the GitHub API" in proc.stdout


def test_dry_run_says_it_would_post_and_sends_nothing(tmp_path, github):
    env = pr_env(tmp_path, github)
    proc = run_cli_here("report", "--comment", "--dry-run", env=env)
    assert proc.returncode == 0, proc.stdout
    assert "would post or update the sticky comment on acme/models#7" in proc.stdout
    assert github.state.requests == []


def test_no_baseline_note_only_when_regression_rules_were_asked():
    ctx = ci.RunContext(platform="local")
    minutes = (None, "no gpu-setup step in this job")
    row = {"kind": "min", "metric": "a", "value": 1.0, "rule": "a >= 0.5", "passed": True,
           "skipped": False, "baseline": None, "delta": None, "verdict": "pass"}  # fmt: skip
    gate = {"passed": True, "rows": [row], "baseline_found": False}
    assert "No baseline metrics" not in report.render("t", gate, None, minutes, ctx)
    regression = {**row, "kind": "max-regression", "rule": "a drop <= 0.1 vs baseline"}
    gate["rows"].append({**regression, "skipped": True, "verdict": "skipped: no baseline"})
    assert "No baseline metrics" in report.render("t", gate, None, minutes, ctx)


def test_report_without_a_gate_says_so_plainly(tmp_path):
    env = clean_env(GPUCI_JOURNAL=str(tmp_path / "journal.jsonl"))
    proc = run_cli_here("report", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout.splitlines()[0] == "report: ok: no gate ran in this job; comment skipped"


@pytest.mark.parametrize(
    ("seconds", "gpus", "shown"),
    [
        (2.4, 2, "0.08 GPU-minutes (2 GPU(s) x 0.04 min since gpu-setup)"),  # was 0.1 (... 0.0)
        (40.2, 2, "1.34 GPU-minutes (2 GPU(s) x 0.67 min since gpu-setup)"),  # was 1.3 (... 0.7)
        (3600, 8, "480 GPU-minutes (8 GPU(s) x 60 min since gpu-setup)"),
        (0.1, 4, "0 GPU-minutes (4 GPU(s) x 0 min since gpu-setup)"),
    ],
)
def test_gpu_minutes_shown_are_the_gpus_times_the_minutes_shown(tmp_path, seconds, gpus, shown):
    env = {"GPUCI_JOURNAL": str(tmp_path / "journal.jsonl")}
    journal.record("gpu-setup", {"gpus": [{}] * gpus, "time": 1000.0}, env)
    minutes = report.gpu_minutes(env, None, now=1000.0 + seconds)
    body = report.render("t", None, None, minutes, ci.RunContext(platform="local"))
    assert f"**GPU time:** {shown}" in body


def test_a_marker_quoted_in_another_report_does_not_make_it_that_reports(tmp_path, github):
    """A metric named after the eval report's marker puts that marker in the training comment
    (in a code span); the eval report must still post its own comment, not overwrite it."""
    env = pr_env(tmp_path, github)
    quoted = {"<!-- gpuci-report:eval -->": {"accuracy": 0.5}}
    training = run_gate(tmp_path, quoted, "--min", "accuracy=0.9", "--comment", env=env)
    assert training.returncode == 1, training.stdout + training.stderr
    evaluation = run_gate(
        tmp_path, {"bleu": 0.9}, "--min", "bleu=0.5", "--marker", "eval", "--comment", env=env
    )
    assert evaluation.returncode == 0, evaluation.stdout + evaluation.stderr
    bodies = [c["body"] for c in github.state.comments[f"{REPO}#7"]]
    assert len(bodies) == 2, bodies
    assert bodies[0].startswith(MARKER) and "❌ Model gate failed" in bodies[0]
    assert bodies[1].startswith("<!-- gpuci-report:eval -->")


@pytest.mark.parametrize("marker", ["x-->y", "a b", "<b>", "ev\nal"])
def test_a_marker_that_could_end_its_html_comment_is_bad_input(tmp_path, marker):
    path = write_json(tmp_path / "gate.json", {"passed": True, "rows": []})
    env = clean_env(GPUCI_JOURNAL=str(tmp_path / "j.jsonl"))
    proc = run_cli_here("report", "--gate-report", str(path), "--marker", marker, env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    first = proc.stdout.splitlines()[0]
    assert first.startswith("report: bad input: input 'marker' is "), proc.stdout
    assert "only letters, digits, '.', '_' and '-'" in first
    assert "Traceback" not in proc.stderr
