"""The examples and the metric-gate action, run for real: training script, gate, dry run, lint."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpuci.commands._training import GATE
from gpuci_testing import REPO, clean_env, run_cli

sys.path.insert(0, str(REPO / "tests" / "actions"))
from action_env import run_gpuci_action

TRAIN = REPO / "examples" / "train_tiny.py"
WORKFLOW = REPO / "examples" / "workflows" / "train-gated.yml"
GITLAB = REPO / "examples" / "gitlab" / "train-gated.gitlab-ci.yml"
ACTION = REPO / "actions" / "metric-gate" / "action.yml"
VENV_BIN = Path(sys.executable).parent
needs_numpy = pytest.mark.skipif(
    importlib.util.find_spec("numpy") is None, reason="numpy (a dev dependency) not installed"
)


def train_tiny(workdir: Path, *args: str) -> None:
    subprocess.run(
        [sys.executable, str(TRAIN), *args],
        cwd=workdir,
        check=True,
        capture_output=True,
        timeout=60,
    )


def trained(workdir: Path) -> Path:
    """make-data, train and evaluate as the example workflow does; returns the model path."""
    train_tiny(workdir, "make-data", "--out", "data/tiny.npz")
    data = ("--data", "data/tiny.npz")
    outputs = ("--out", "out/model.npz", "--log", "out/train.jsonl")
    train_tiny(workdir, "train", *data, "--init", "weights/base.npz", *outputs)
    train_tiny(
        workdir, "evaluate", *data, "--model", "out/model.npz", "--metrics", "out/metrics.json"
    )
    return workdir / "out" / "model.npz"


def example_gate_inputs() -> dict[str, str]:
    steps = yaml.safe_load(WORKFLOW.read_text())["jobs"]["train"]["steps"]
    gate = next(s for s in steps if "metric-gate" in str(s.get("uses", "")))
    return {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in gate["with"].items()}


@needs_numpy
def test_training_is_deterministic_and_passes_the_example_gate(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir(), second.mkdir()
    model = trained(first)
    assert hashlib.sha256(model.read_bytes()).digest() == (
        hashlib.sha256(trained(second).read_bytes()).digest()
    ), "same inputs must give the same model"
    metrics = json.loads((first / "out" / "metrics.json").read_text())
    assert 0.5 < metrics["eval"]["accuracy"] <= 1.0
    # The gate with the example's own rules (baseline absent: regression skipped) passes.
    with_ = example_gate_inputs()
    names = ("metrics", "min", "max", "baseline", "max-regression", "artifacts")
    flags = [arg for name in names for arg in (f"--{name}", with_[name])]
    env = clean_env(GPUCI_JOURNAL=str(tmp_path / "j.jsonl"))
    proc = run_cli("gate", *flags, "--json", env=env, cwd=first)
    body = json.loads(proc.stdout)
    assert proc.returncode == 0, body
    statement = json.loads((first / body["outputs"]["statement"]).read_text())
    digest = hashlib.sha256(model.read_bytes()).hexdigest()
    assert statement["subject"] == [{"name": "out/model.npz", "digest": {"sha256": digest}}]


def test_example_workflow_passes_the_dry_run(tmp_path):
    # on an H200 as on the runner (without a GPU the runner would skip the gate after gpu-setup)
    env = clean_env(
        GPUCI_JOURNAL=str(tmp_path / "j.jsonl"), HOME=str(tmp_path), GPUCI_FAKE_NVML="h200"
    )
    proc = run_cli("dry-run", str(WORKFLOW), "--json", env=env)
    body = json.loads(proc.stdout)
    assert proc.returncode == 0, body["headline"]
    assert body["outputs"]["bad-input"] == "0"
    gate = next(s for s in body["report"]["steps"] if s["command"] == "gate")
    assert gate["verdict"] == "ok"
    assert "would check 3 rule(s)" in gate["detail"] and "then provenance" in gate["detail"]
    assert not (tmp_path / "j.jsonl").exists()


@pytest.mark.skipif(not (VENV_BIN / "actionlint").exists(), reason="actionlint not installed")
def test_example_workflow_passes_actionlint(tmp_path):
    config = tmp_path / "actionlint.yaml"
    config.write_text("self-hosted-runner:\n  labels: [gpu-large]\n")
    proc = subprocess.run(
        [str(VENV_BIN / "actionlint"), "-config-file", str(config), str(WORKFLOW)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.skipif(not (VENV_BIN / "check-jsonschema").exists(), reason="check-jsonschema absent")
def test_gitlab_example_and_action_match_their_schemas():
    for schema, path in (("vendor.gitlab-ci", GITLAB), ("vendor.github-actions", ACTION)):
        proc = subprocess.run(
            [str(VENV_BIN / "check-jsonschema"), "--builtin-schema", schema, str(path)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr


def test_gitlab_example_uses_only_known_flags():
    from gpuci.commands import iter_leaf_commands

    leaves = dict(iter_leaf_commands())
    script = " ".join(yaml.safe_load(GITLAB.read_text())["train"]["script"]).replace("\\\n", " ")
    seen = set()
    for chunk in script.split("gpuci ")[1:]:
        words = chunk.split()
        name = " ".join(words[:2]) if words[0] == "cache-weights" else words[0]
        known = {spec.flag for spec in leaves[name].inputs}
        rest = words[len(name.split()) :]
        while rest and rest[0].startswith("--"):  # flags (and values) up to the next command
            flag = rest[0].rstrip(";")
            assert flag in known, (name, flag)
            if rest[0].endswith(";"):  # a bare boolean flag ending the command
                break
            rest = rest[1:] if len(rest) > 1 and rest[1].startswith("--") else rest[2:]
        seen.add(name)
    assert {"gate", "report", "gpu-setup", "gpu-smoke", "retry-fetch"} <= seen


def test_action_passes_every_gate_input_through_env_and_maps_every_output():
    action = yaml.safe_load(ACTION.read_text())
    assert set(action["inputs"]) == {spec.name for spec in GATE.inputs}
    assert set(action["outputs"]) == {out.name for out in GATE.outputs}
    step = next(s for s in action["runs"]["steps"] if s.get("id") == "run")
    for spec in GATE.inputs:
        env_name = "INPUT_" + spec.name.upper().replace("-", "_")
        assert step["env"][env_name] == f"${{{{ inputs.{spec.name} }}}}"
    for out in GATE.outputs:
        assert action["outputs"][out.name]["value"] == f"${{{{ steps.run.outputs.{out.name} }}}}"
    for s in action["runs"]["steps"]:
        assert "${{" not in s.get("run", ""), "no expressions inside run: (template injection)"


@needs_numpy
def test_metric_gate_action_runs_as_on_the_runner(tmp_path):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    shutil.copy(TRAIN, workspace / "train_tiny.py")
    model = trained(workspace)
    inputs = example_gate_inputs()
    inputs["comment"] = "false"
    inputs["pin"] = "false"  # an expression the runner evaluates: false off main
    run = run_gpuci_action(tmp_path, "actions/metric-gate", inputs)
    assert run.ok, run.log
    assert run.outputs["passed"] == "true"
    assert run.outputs["failed-rules"] == ""
    assert run.outputs["digest"].startswith("sha256:")
    record = json.loads((workspace / run.outputs["record"]).read_text())
    assert record["artifacts"][0]["sha256"] == hashlib.sha256(model.read_bytes()).hexdigest()
    assert "| `eval.accuracy` |" in run.summary and "### Provenance" in run.summary
    # A rule the model cannot meet: exit 1, outputs still true/false, provenance still written.
    inputs["min"] = "eval.accuracy=0.999"
    run = run_gpuci_action(tmp_path, "actions/metric-gate", inputs)
    assert run.exit_code == 1
    assert run.outputs["passed"] == "false"
    assert run.outputs["failed-rules"] == "eval.accuracy >= 0.999"
    assert json.loads((workspace / run.outputs["record"]).read_text())["verdict"] == "failed"


def test_both_examples_show_a_nightly_that_retrains_against_the_last_passing_baseline():
    workflow = yaml.safe_load(WORKFLOW.read_text())
    triggers = workflow[True] if True in workflow else workflow["on"]  # YAML 1.1 reads on: as True
    assert triggers["schedule"][0]["cron"].split()[2:] == ["*", "*", "*"]  # every night
    steps = workflow["jobs"]["train"]["steps"]
    baseline = next(s for s in steps if s.get("with", {}).get("key") == "metrics-baseline-main")
    assert "metrics-baseline-main-" in baseline["with"]["restore-keys"]  # the last passing one
    gate = next(s for s in steps if "metric-gate" in s.get("uses", ""))
    assert "refs/heads/main" in gate["with"]["pin"]  # a model main keeps: its data is pinned

    job = yaml.safe_load(GITLAB.read_text())["train"]
    schedule = [r for r in job["rules"] if '"schedule"' in r.get("if", "")]
    assert any("$CI_DEFAULT_BRANCH" in r["if"] and r.get("when") != "never" for r in schedule)
    script = " ".join(job["script"])
    assert "--restore-keys metrics-baseline-main-" in script
    assert "gpuci report --comment true" in script  # the MR note in merge-request pipelines
