"""The gate as a user runs it: flags and INPUT_* env, exit codes, outputs, summary, gate.json."""

from __future__ import annotations

import json
from pathlib import Path

from training_cli import run_gate, write_json

from gpuci_testing import gh_env, parse_file_command, run_cli_here


def read_outputs(path: Path) -> dict[str, str]:
    return parse_file_command(path.read_text(), "GITHUB_OUTPUT")


def test_repeated_flags_pass_and_write_gate_json(tmp_path):
    metrics = {"eval": {"accuracy": 0.95}, "loss": 0.2}
    rules = ("--min", "eval.accuracy=0.92", "--max", "loss=0.35", "--min", "accuracy=0.9")
    proc = run_gate(tmp_path, metrics, *rules)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "3 rule(s) passed" in proc.stdout
    written = json.loads((tmp_path / "o" / "gate.json").read_text())
    assert written["passed"] is True and len(written["rows"]) == 3
    assert not list((tmp_path / "o").glob("*.incomplete"))
    journal = [json.loads(ln) for ln in (tmp_path / "j.jsonl").read_text().splitlines()]
    assert journal[-1]["kind"] == "gate" and journal[-1]["passed"] is True


def test_failing_gate_in_actions_exit_1_with_outputs_table_and_annotation(tmp_path):
    metrics = write_json(tmp_path / "m.json", {"eval": {"accuracy": 0.90, "loss": float("nan")}})
    baseline = write_json(tmp_path / "b.json", {"eval": {"accuracy": 0.93, "loss": 0.3}})
    env = gh_env(
        tmp_path,
        INPUT_METRICS=str(metrics),
        INPUT_MIN="eval.accuracy=0.92\n",
        INPUT_MAX="eval.loss=0.35\nmissing.metric=1",
        INPUT_BASELINE=str(baseline),
        INPUT_MAX_REGRESSION="accuracy=0.01",
        INPUT_OUTPUT_DIR=str(tmp_path / "o"),
    )
    proc = run_cli_here("gate", env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    outputs = read_outputs(tmp_path / "out")
    assert outputs["passed"] == "false"
    assert outputs["failed-rules"] == (
        "eval.accuracy >= 0.92, eval.loss <= 0.35, missing.metric <= 1, "
        "accuracy drop <= 0.01 vs baseline"
    )
    summary = (tmp_path / "summary").read_text()
    assert "| metric | value | rule | baseline | delta | verdict |" in summary
    assert (
        "| `eval.accuracy` | 0.9 | eval.accuracy >= 0.92 | 0.93 | -0.03 | ❌ FAIL: below 0.92 |"
        in (summary)
    )
    assert "FAIL: NaN" in summary and "FAIL: metric missing" in summary
    errors = [ln for ln in proc.stdout.splitlines() if ln.startswith("::error")]
    assert len(errors) == 1 and "model gate failed" in errors[0]


def test_baseline_absent_warns_and_skips_regression(tmp_path):
    metrics = write_json(tmp_path / "m.jsonl", '{"acc": 0.1}\n{"acc": 0.97}\n')
    flags = ("--max-regression", "acc=0.01", "--baseline", str(tmp_path / "none.json"))
    proc = run_gate(tmp_path, metrics, *flags, "--json")
    body = json.loads(proc.stdout)
    assert proc.returncode == 0, body
    assert body["outputs"]["passed"] == "true"
    assert any(
        "not found: max-regression rules skipped" in a["message"] for a in body["annotations"]
    )
    assert body["report"]["gate"]["rows"][0]["verdict"] == "skipped: no baseline"
    proc = run_gate(tmp_path, metrics, *flags, "--require-baseline")
    assert proc.returncode == 1 and "FAIL: no baseline" in proc.stdout


def test_missing_metrics_file_fails_with_cause_and_fix(tmp_path):
    env = gh_env(tmp_path, INPUT_METRICS=str(tmp_path / "absent.json"), INPUT_MIN="acc=0.5")
    proc = run_cli_here("gate", "--output-dir", str(tmp_path / "o"), env=env)
    assert proc.returncode == 1
    assert read_outputs(tmp_path / "out")["passed"] == "false"
    assert "absent.json not found" in proc.stdout and "(fix: " in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr


def test_bad_rules_and_no_rules_exit_2(tmp_path):
    proc = run_gate(tmp_path, {"acc": 1}, "--min", "acc>0.5")
    assert proc.returncode == 2 and "min rule 'acc>0.5' is not name=value" in proc.stdout
    proc = run_gate(tmp_path, {"acc": 1})
    assert proc.returncode == 2 and "the gate has no rules" in proc.stdout
    proc = run_gate(tmp_path, {"acc": 1}, "--min", "acc=0", baseline="{")
    assert proc.returncode == 2 and "baseline file" in proc.stdout


def test_dry_run_plans_and_writes_nothing(tmp_path):
    later = tmp_path / "later.json"
    model = str(tmp_path / "model.npz")
    proc = run_gate(
        tmp_path, later, "--dry-run", "--min", "acc=0.5", "--artifacts", model, "--comment"
    )
    assert proc.returncode == 0, proc.stdout
    assert "would check 1 rule(s): acc >= 0.5" in proc.stdout
    assert "not there yet" in proc.stdout and "PR comment skipped: no token" in proc.stdout
    assert not (tmp_path / "o").exists() and not (tmp_path / "j.jsonl").exists()
    # with the metrics present, the dry run judges them, and still writes nothing
    write_json(later, {"acc": 0.2})
    proc = run_gate(tmp_path, later, "--dry-run", "--min", "acc=0.5")
    assert proc.returncode == 1 and "the gate would FAIL" in proc.stdout
    assert not (tmp_path / "o").exists()
