"""gpu-setup through ``python -m gpuci`` in a subprocess: fakes via GPUCI_FAKE_NVML, real pynvml."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuci.gpu.fake.nvml import FakeNvml

# profile(s), flags, exit code, {output: value}
CASES = [
    ("h200", ["--min-memory-gb", "100"], 0, {"gpu-count": "1", "memory-gb": "150.8"}),
    ("a100-mig", ["--min-memory-gb", "100"], 1, {"gpu-count": "1", "memory-gb": "20.9"}),
    ("h100-sxm,h100-sxm", ["--min-gpus", "2"], 0, {"gpu-count": "2", "cuda-version": "12.2"}),
    ("l4", ["--min-compute-capability", "8.9"], 0, {"compute-capability": "8.9"}),
    ("t4", ["--min-compute-capability", "8.0"], 1, {"compute-capability": "7.5"}),
    ("ecc-bad", [], 1, {"gpu-names": "NVIDIA A100-SXM4-80GB"}),
    ("ecc-bad", ["--fail-on-ecc-errors", "false"], 0, {"memory-gb": "85.9"}),
    ("old-driver", ["--min-cuda", "12.4"], 1, {"cuda-version": "11.4"}),
    ("old-driver", ["--min-cuda", "11.4"], 0, {"driver-version": "470.57.02"}),
]


@pytest.mark.parametrize(("fake", "flags", "code", "outputs"), CASES)
def test_profiles_through_the_cli(cli, cli_json, fake, flags, code, outputs, tmp_path) -> None:
    proc = cli("--json", *flags, fake=fake)
    body = cli_json(proc)
    assert proc.returncode == code, body["headline"]
    assert body["exit_code"] == code
    for key, value in outputs.items():
        assert body["outputs"][key] == value
    on_disk = json.loads(Path(body["outputs"]["report"]).read_text())
    assert on_disk["verdict"] == ("pass" if code == 0 else "fail")
    assert on_disk["nvml"]["source"] == f"fake:{fake}"


def test_mig_uuids_in_visible_devices_via_cli(cli, cli_json) -> None:
    body = cli_json(cli("--json", fake="a100-mig"))
    migs = [m.uuid for m in FakeNvml(["a100-mig"]).devices[0].migs]
    assert body["outputs"]["visible-devices"] == migs[0]  # one MIG device per CUDA process


def test_inputs_from_env_and_malformed_input_exit_2(cli) -> None:
    proc = cli("--json", fake="h200", **{"INPUT_MIN-MEMORY-GB": "200"})
    assert proc.returncode == 1 and "min-memory-gb" in json.loads(proc.stdout)["headline"]
    for args in (["--min-memory-gb", "lots"], ["--dry-run", "--min-cuda", "twelve"]):
        bad = cli(*args, fake="h200")
        assert bad.returncode == 2, bad.stdout
        assert bad.stdout.count("\n") == 1 and "Traceback" not in bad.stdout + bad.stderr
    assert (
        "input 'min-memory-gb' (flag --min-memory-gb) is 'lots'"
        in cli("--min-memory-gb", "lots").stdout
    )


def test_github_actions_rendering(cli, tmp_path: Path) -> None:
    files = {
        n: tmp_path / n.lower() for n in ("GITHUB_OUTPUT", "GITHUB_ENV", "GITHUB_STEP_SUMMARY")
    }
    for path in files.values():
        path.write_text("")
    proc = cli(
        fake="h100-sxm,h100-sxm",
        GITHUB_ACTIONS="true",
        **{"INPUT_EXPORT-VISIBLE-DEVICES": "true"},
        **{k: str(v) for k, v in files.items()},
    )
    assert proc.returncode == 0, proc.stdout
    out = files["GITHUB_OUTPUT"].read_text()
    assert "gpu-count<<ghadelimiter_" in out and "\n2\n" in out
    uuids = [d.uuid for d in FakeNvml(["h100-sxm", "h100-sxm"]).devices]
    assert f"\n{','.join(uuids)}\n" in out
    assert "CUDA_VISIBLE_DEVICES<<ghadelimiter_" in files["GITHUB_ENV"].read_text()
    summary = files["GITHUB_STEP_SUMMARY"].read_text()
    assert "| # | GPU | Memory | CC | Arch | MIG | ECC |" in summary
    assert "| Check | Required | Outcome | Reason |" in summary


def test_real_pynvml_without_a_driver_exits_3_in_one_line(cli) -> None:
    proc = cli()
    assert proc.returncode == 3
    assert proc.stdout.startswith(
        "gpu-setup: infrastructure error: NVML library not found: libnvidia-ml.so.1"
    )
    assert proc.stdout.count("\n") == 1 and "(fix: " in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr


def test_real_pynvml_cpu_only_report(cli, cli_json, tmp_path: Path) -> None:
    proc = cli("--json", "--require-gpu", "false")
    body = cli_json(proc)
    assert proc.returncode == 0
    assert body["headline"] == "no GPU; CPU-only report (require-gpu is false)"
    assert body["outputs"]["gpu-count"] == "0" and body["outputs"]["memory-gb"] == "0"
    assert body["report"]["nvml_error"].startswith("NVML library not found")
    assert (tmp_path / "gpuci-gpu-report.json").exists()


def test_real_pynvml_dry_run_never_fails_on_missing_gpu(cli, tmp_path: Path) -> None:
    proc = cli("--dry-run", "--min-memory-gb", "80")
    assert proc.returncode == 0, proc.stdout
    assert "dry run: this machine lacks what the job needs: require-gpu (a GPU): no GPU found" in (
        proc.stdout
    )
    assert not (tmp_path / "gpuci-gpu-report.json").exists()
    assert not (tmp_path / "journal.jsonl").exists()


def test_help_does_not_import_nvml(tmp_path: Path) -> None:
    import subprocess
    import sys

    code = (
        "import sys, gpuci.cli, gpuci.commands as c; c.all_commands();"
        "print(sorted(m for m in sys.modules if m.startswith(('pynvml','gpuci.gpu','boto3'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=True
    )
    assert out.stdout.strip() == "[]"
    setup_code = "import sys, gpuci.gpu._setup.command; print('boto3' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", setup_code], capture_output=True, text=True, timeout=30, check=True
    )
    assert out.stdout.strip() == "False"


def test_a_failed_check_names_the_fix(cli) -> None:
    small = cli("--min-memory-gb", "200", "--min-gpus", "2", fake="h200").stdout.splitlines()[0]
    assert small.startswith("gpu-setup: check failed: 2 check(s) failed: min-gpus (")
    assert small.endswith(
        "(fix: run on a runner whose GPUs meet min-gpus, min-memory-gb, or relax them)"
    )
    sick = cli(fake="ecc-bad").stdout.splitlines()[0]
    assert sick.endswith("(fix: reset the GPU or take this node out of the runner pool)")
