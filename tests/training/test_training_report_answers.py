"""What the report takes from a file or a forge is input: a gate report's ``passed`` counts
only when it is ``true`` and so is every row's, and the forge's link becomes the
``comment-url`` output only when it is one plain http(s) URL of shell-inert characters."""

from __future__ import annotations

import json

import pytest
from training_cli import cli_json, run_gate

from forges.fake_github import FakeGitHub
from gpuci import journal
from gpuci.training import _report as report
from gpuci_testing import clean_env, parse_file_command, run_cli_here

_RULE = {"kind": "min", "metric": "acc", "rule": "acc >= 0.5"}
FAILED_ROW = {**_RULE, "value": 0.1, "passed": False, "verdict": "FAIL: below 0.5"}
PASSED_ROW = {**_RULE, "value": 0.9, "passed": True, "verdict": "ok"}


@pytest.mark.parametrize(
    "gate",
    [
        {"passed": "false", "rows": [FAILED_ROW]},  # a string is truthy
        {"passed": 1, "rows": [PASSED_ROW]},
        {"passed": [0], "rows": [PASSED_ROW]},
        {"passed": True, "rows": [PASSED_ROW, FAILED_ROW]},  # a row failed: the gate did
        {"passed": True, "rows": [{**PASSED_ROW, "passed": "true"}]},
    ],
)
def test_a_report_passes_only_when_it_and_every_row_say_true(tmp_path, gate):
    assert report.verdict_markdown(gate).startswith("### ❌ Model gate failed")
    (tmp_path / "g.json").write_text(json.dumps(gate))
    env = clean_env(GPUCI_JOURNAL=str(tmp_path / "j.jsonl"))
    proc = run_cli_here("report", "--gate-report", str(tmp_path / "g.json"), "--json", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    answer = json.loads(proc.stdout)
    assert answer["headline"].startswith("gate failed"), answer["headline"]
    assert "Model gate passed" not in answer["report"]["body"]
    assert not report.gate_passed(gate)


def test_provenance_records_such_a_gate_as_failed(tmp_path):
    """``provenance`` reads the gate from the journal, which the PR's steps can append to."""
    env = clean_env(GPUCI_JOURNAL=str(tmp_path / "j.jsonl"))
    journal.record("gate", {"passed": "false", "rows": [FAILED_ROW]}, env)
    (tmp_path / "model.bin").write_bytes(b"m")
    out = ("--output-dir", str(tmp_path / "o"), "--artifacts", str(tmp_path / "model.bin"))
    assert cli_json(env, "provenance", *out)["rc"] == 0
    record = json.loads((tmp_path / "o" / "provenance.json").read_text())
    assert record["verdict"] == "failed"


def test_a_passed_report_is_still_passed():
    gate = {"passed": True, "rows": [PASSED_ROW]}
    assert report.gate_passed(gate)
    assert report.verdict_markdown(gate) == "### ✅ Model gate passed"


def _outputs_when_github_answers(tmp_path, html_url) -> dict[str, str]:
    """The gate's outputs when GitHub answers its new PR comment with this ``html_url``."""
    with FakeGitHub() as github:
        env = github.pull_request_env(tmp_path, "acme/models", 7)
        github.state.answers[("POST", "/api/v3/repos/acme/models/issues/7/comments")] = (
            201,
            {"id": 5, "html_url": html_url},
            {},
        )
        proc = run_gate(tmp_path, {"accuracy": 0.95}, "--min", "accuracy=0.5", "--comment", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return parse_file_command((tmp_path / "out").read_text(), "GITHUB_OUTPUT")


@pytest.mark.parametrize(
    "html_url",
    [
        {"x": 1},
        "javascript:alert(1)//",
        "https://github.example/acme/models/pull/7#issuecomment-5\n$(touch /tmp/pwned)",
        "https://github.example/a b",
        42,
        # a URL's characters, a shell's too: pasted into a run: line they would run
        "https://github.example/acme/models/pull/7#$(id)",
        "https://github.example/x';id;'",
        "https://github.example/x?a=1&id",
        "https://github.example/%PATH%",
        "https://github.example/*",
    ],
)
def test_a_comment_url_that_is_no_plain_url_is_not_an_output(tmp_path, html_url):
    outputs = _outputs_when_github_answers(tmp_path, html_url)
    assert outputs["comment"] == "created"
    assert outputs["comment-url"] == ""


def test_a_plain_comment_url_is_the_output(tmp_path):
    url = "https://github.example/acme/models/pull/7#issuecomment-5"
    assert _outputs_when_github_answers(tmp_path, url)["comment-url"] == url
