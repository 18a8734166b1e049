"""gpu-setup as a command: outputs, JSON report, summary, env, journal, dry run; in-process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuci import journal
from gpuci.errors import InputError, NvmlUnavailable
from gpuci.gpu.fake.nvml import FakeNvml


def test_h200_passes_and_writes_outputs_report_and_journal(setup_run, tmp_path: Path) -> None:
    result = setup_run(["h200"], min_memory_gb="100", min_cuda="12.4", gpu_name="H200")
    assert result.exit_code == 0, result.headline
    assert result.headline == "1 device(s) ready: NVIDIA H200"
    uuid = FakeNvml(["h200"]).devices[0].uuid
    assert result.outputs == {
        "gpu-count": 1,
        "gpu-names": "NVIDIA H200",
        "memory-gb": 150.8,
        "cuda-version": "12.4",
        "driver-version": "550.90.07",
        "compute-capability": "9.0",
        "visible-devices": uuid,
        "report": str(tmp_path / "gpuci-gpu-report.json"),
    }
    report = json.loads((tmp_path / "gpuci-gpu-report.json").read_text())
    assert not list(tmp_path.glob("*.incomplete"))
    assert report["verdict"] == "pass" and report["schema"] == 1
    assert report["nvml"]["gpus"][0]["name"] == "NVIDIA H200"
    assert report["nvml"]["gpus"][0]["health"]["clock_events"] == ["gpu_idle"]
    assert {c["check"]: c["outcome"] for c in report["checks"]} == {
        "require-gpu": "pass",
        "allow-mig": "pass",
        "min-gpus": "pass",
        "min-memory-gb": "pass",
        "min-cuda": "pass",
        "gpu-name": "pass",
        "fail-on-ecc-errors": "pass",
    }
    assert report["report_path"] == result.outputs["report"]
    assert result.env == {}  # export-visible-devices defaults to false
    (entry,) = journal.read("gpu-setup", {"GPUCI_JOURNAL": str(tmp_path / "journal.jsonl")})
    assert entry["driver_version"] == "550.90.07" and entry["cuda_version"] == "12.4"
    assert entry["gpus"][0]["name"] == "NVIDIA H200" and entry["visible_devices"] == [uuid]


def test_summary_has_gpu_overview_per_gpu_tables_and_checks(setup_run) -> None:
    result = setup_run(["h100-sxm", "l4"], min_compute_capability="8.0")
    text = "\n\n".join(result.summary)
    assert "| 0 | NVIDIA H100 80GB HBM3 | 85.5 GB | 9.0 | Hopper | off | ok |" in text
    assert "| 1 | NVIDIA L4 | 24.2 GB | 8.9 | Ada | — | ok |" in text
    assert text.count("<details><summary>GPU ") == 2
    assert "| PCIe (current/max) | Gen5/5 x16/16 |" in text
    assert "| min-compute-capability | >= 8.0 | ✅ pass |" in text


def test_a100_40gb_fails_min_memory_and_reports_why(setup_run, tmp_path: Path) -> None:
    result = setup_run(["a100-mig"], min_memory_gb="100")
    assert result.exit_code == 1
    assert result.headline.startswith("1 check(s) failed: min-memory-gb (GPU 0/MIG 0 ")
    assert [a.level for a in result.annotations] == ["notice", "error"]  # notice: MIG count
    report = json.loads((tmp_path / "gpuci-gpu-report.json").read_text())
    assert report["verdict"] == "fail"
    assert result.outputs["memory-gb"] == 20.9  # outputs still describe the machine


def test_a100_mig_counts_and_exports_what_cuda_shows(setup_run) -> None:
    """CUDA enumerates one MIG instance per process: promising two would be a lie."""
    fake = FakeNvml(["a100-mig"])
    migs = [m.uuid for m in fake.devices[0].migs]
    assert all(u.startswith("MIG-") for u in migs)
    result = setup_run(fake, export_visible_devices="true", min_gpus="2")
    assert result.exit_code == 1
    assert "min-gpus (1 GPU(s)/MIG device(s) one CUDA process can use" in result.headline
    result = setup_run(fake, export_visible_devices="true")
    assert result.exit_code == 0
    assert result.outputs["visible-devices"] == migs[0]
    assert result.outputs["gpu-count"] == 1
    assert result.env == {"CUDA_VISIBLE_DEVICES": migs[0]}
    notice = result.annotations[0]
    assert notice.level == "notice" and "CUDA shows one MIG device per process" in notice.message
    devices = result.report["devices"]
    assert [(d["uuid"], d["cuda_visible"]) for d in devices] == [(migs[0], True), (migs[1], False)]


def test_mig_refused_when_not_allowed(setup_run) -> None:
    result = setup_run(["a100-mig"], allow_mig="false")
    assert result.exit_code == 1
    assert "allow-mig (GPU 0 'NVIDIA A100-SXM4-40GB' in MIG mode" in result.headline
    assert result.outputs["visible-devices"] == "" and result.outputs["gpu-count"] == 0


def test_old_driver_fails_min_cuda(setup_run) -> None:
    result = setup_run(["old-driver"], min_cuda="12.4")
    assert result.exit_code == 1
    assert "min-cuda (driver 470.57.02 supports CUDA up to 11.4" in result.headline
    assert result.outputs["cuda-version"] == "11.4"


def test_ecc_bad_fails_by_default_and_warns_when_told_not_to_fail(setup_run) -> None:
    assert setup_run(["ecc-bad"]).exit_code == 1
    relaxed = setup_run(["ecc-bad"], fail_on_ecc_errors="false")
    assert relaxed.exit_code == 0
    assert [(a.level, a.title) for a in relaxed.annotations] == [("warning", "gpu-setup: ECC")]
    assert "2 volatile uncorrected ECC errors" in relaxed.annotations[0].message


def test_t4_unsupported_counters_pass(setup_run) -> None:
    result = setup_run(["t4"], min_memory_gb="15", min_compute_capability="7.5")
    assert result.exit_code == 0, result.headline
    assert result.outputs["memory-gb"] == 16.1


def test_no_gpu_is_infra_error_unless_cpu_only_allowed(setup_run, tmp_path: Path) -> None:
    with pytest.raises(NvmlUnavailable, match="NVML driver not loaded"):
        setup_run(FakeNvml(init_error=9))
    result = setup_run(FakeNvml(init_error=9), require_gpu="false")
    assert result.exit_code == 0
    assert result.headline == "no GPU; CPU-only report (require-gpu is false)"
    assert result.outputs["gpu-count"] == 0 and result.outputs["visible-devices"] == ""
    report = json.loads((tmp_path / "gpuci-gpu-report.json").read_text())
    assert report["cpu_only"] is True and report["nvml_error"].startswith("NVML driver not loaded")


def test_dry_run_describes_what_is_lacking_and_writes_nothing(setup_run, tmp_path: Path) -> None:
    result = setup_run(FakeNvml(init_error=12), dry_run=True, min_memory_gb="80")
    assert result.exit_code == 0
    assert result.headline.startswith("dry run: this machine lacks what the job needs: ")
    assert "require-gpu (a GPU): no GPU found" in result.headline
    assert "min-memory-gb (>= 80 GB per GPU): no usable GPU" in result.headline
    assert result.outputs == {} and result.env == {}
    assert result.report["dry_run"] is True and result.report["verdict"] == "fail"
    assert "NVML library not found" in result.annotations[0].message
    assert list(tmp_path.iterdir()) == []  # no report, no journal


def test_dry_run_on_a_matching_machine(setup_run, tmp_path: Path) -> None:
    result = setup_run(["h200"], dry_run=True, export_visible_devices="true")
    assert result.exit_code == 0 and result.headline == "dry run: 1 device(s) ready: NVIDIA H200"
    assert result.report["outputs"]["gpu-count"] == 1 and result.env == {}
    assert list(tmp_path.iterdir()) == []


def test_report_to_an_unwritable_place_is_one_clear_input_error(setup_run, tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(InputError, match="cannot write the GPU report to"):
        setup_run(["l4"], report=str(blocker / "sub" / "r.json"))
