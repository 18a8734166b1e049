"""actions/gpu-setup and the root action, run step by step as the runner would (fake NVML)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from action_env import REPO, run_gpuci_action


def test_gpu_setup_h200_writes_outputs_and_a_summary_table(tmp_path: Path) -> None:
    run = run_gpuci_action(
        tmp_path, "actions/gpu-setup", {"min-memory-gb": 100}, GPUCI_FAKE_NVML="h200"
    )
    assert run.ok, run.log
    python = run.step("python")
    assert (python.outcome, python.reason) == ("skipped", "condition")  # venv already there
    written = run.step("run").outputs  # parsed from the step's GITHUB_OUTPUT file
    assert written["gpu-count"] == "1"
    assert "H200" in written["gpu-names"]
    assert written["visible-devices"].startswith("GPU-")
    assert "," not in written["visible-devices"]
    # The action's outputs are the step's, mapped through `value:`.
    assert {k: run.outputs[k] for k in written} == written
    assert set(run.outputs) == set(
        yaml.safe_load((REPO / "actions/gpu-setup/action.yml").read_text())["outputs"]
    )
    report = json.loads(Path(run.outputs["report"]).read_text())
    assert report  # the JSON report exists where the output says
    # A markdown table in the job summary, naming the GPU.
    table = [line for line in run.summary.splitlines() if line.startswith("|")]
    assert len(table) >= 3, run.summary
    assert any("H200" in line for line in table)


def test_inputs_reach_the_command_only_through_env(tmp_path: Path) -> None:
    run = run_gpuci_action(
        tmp_path,
        "actions/gpu-setup",
        {"min-memory-gb": 100, "export-visible-devices": True},
        GPUCI_FAKE_NVML="h200",
    )
    assert run.ok, run.log
    step = run.step("run")
    assert step.env["INPUT_MIN_MEMORY_GB"] == "100"
    assert step.env["INPUT_EXPORT_VISIBLE_DEVICES"] == "true"
    assert step.env["INPUT_MIN_GPUS"] == "1"  # the action's default
    assert "${{" not in step.script and "100" not in step.script
    # export-visible-devices went through GITHUB_ENV, for the job's later steps.
    assert run.env["CUDA_VISIBLE_DEVICES"] == run.outputs["visible-devices"]


def test_a_requirement_that_fails_is_exit_1(tmp_path: Path) -> None:
    run = run_gpuci_action(
        tmp_path, "actions/gpu-setup", {"min-memory-gb": 200}, GPUCI_FAKE_NVML="h200"
    )
    assert not run.ok
    assert run.exit_code == 1
    assert any(a.level == "error" for a in run.annotations), run.log


def test_malformed_input_is_exit_2_with_an_error_naming_it(tmp_path: Path) -> None:
    run = run_gpuci_action(
        tmp_path, "actions/gpu-setup", {"min-memory-gb": "lots"}, GPUCI_FAKE_NVML="h200"
    )
    assert not run.ok
    assert run.exit_code == 2
    errors = [a for a in run.annotations if a.level == "error"]
    assert errors, run.log
    assert "min-memory-gb" in errors[0].message and "lots" in errors[0].message
    assert "Traceback" not in run.log


def test_no_gpu_with_require_gpu_false_is_a_clean_cpu_only_run(tmp_path: Path) -> None:
    run = run_gpuci_action(
        tmp_path, "actions/gpu-setup", {"require-gpu": False}, GPUCI_FAKE_NVML="no-driver"
    )
    assert run.ok, run.log
    assert run.outputs["gpu-count"] == "0"
    assert run.outputs["visible-devices"] == ""


def test_root_action_runs_gpu_setup_and_skips_what_is_off(tmp_path: Path) -> None:
    run = run_gpuci_action(tmp_path, ".", {"min-gpus": 1}, GPUCI_FAKE_NVML="h200")
    assert run.ok, run.log
    assert run.step("setup").outcome == "success"
    assert (run.step("cache").outcome, run.step("cache").reason) == ("skipped", "condition")
    assert (run.step("smoke").outcome, run.step("smoke").reason) == ("skipped", "condition")
    assert run.outputs["gpu-count"] == "1"
    # Booleans stay booleans when their part is skipped (principle 1).
    assert run.outputs["cache-hit"] == "false"
    assert run.outputs["smoke-passed"] == "false"
    assert run.outputs["cache-matched-key"] == ""


def test_root_action_stops_after_a_failed_gpu_setup(tmp_path: Path) -> None:
    run = run_gpuci_action(
        tmp_path,
        ".",
        {"min-memory-gb": 500, "cache-key": "k", "cache-path": "models", "smoke": True},
        GPUCI_FAKE_NVML="h200",
    )
    assert run.exit_code == 1
    assert run.step("cache").outcome == "skipped"
    assert run.step("smoke").outcome == "skipped"
