"""The Python API, ``gpuci.gpu.api.setup`` / ``smoke``, on the fake NVML: typed results, and the
errors its docstrings name (InputError, CheckFailed, InfraError/NvmlUnavailable)."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

from gpuci.errors import CheckFailed, InfraError, InputError, NvmlUnavailable
from gpuci.gpu import api
from gpuci.gpu.fake.nvml import FakeNvml
from gpuci.runtime import Runtime
from gpuci_testing import REPO, clean_env, commands_loaded, run_python


def runtime(tmp: Path, fake: str | None = None, dry_run: bool = False, **env: str) -> Runtime:
    """A runtime on a clean environment: reports and journal in ``tmp``, NVML faked by env."""
    environ = {"RUNNER_TEMP": str(tmp), "GPUCI_JOURNAL": str(tmp / "journal.jsonl"), **env}
    if fake is not None:
        environ["GPUCI_FAKE_NVML"] = fake
    return Runtime(environ, stdout=io.StringIO(), stderr=io.StringIO(), dry_run=dry_run)


def test_every_public_name_is_exported() -> None:
    assert set(api.__all__) == {
        "CheckOutcome",
        "SetupInputs",
        "SetupResult",
        "SmokeInputs",
        "SmokeResult",
        "setup",
        "smoke",
    }
    assert all(hasattr(api, name) for name in api.__all__)


def test_setup_returns_what_the_gpus_are(tmp_path: Path) -> None:
    got = api.setup(
        min_gpus=2,
        min_memory_gb=100,
        min_cuda="12.4",
        min_compute_capability=(9, 0),
        gpu_name="H200",
        runtime=runtime(tmp_path, "h200,h200"),
    )
    assert got.passed and got.gpu_count == 2
    assert got.gpu_names == ["NVIDIA H200"] * 2 and got.memory_gb is not None
    assert got.memory_gb > 100 and got.compute_capability == "9.0"
    assert got.cuda_version and got.driver_version
    fake = FakeNvml(["h200", "h200"])
    assert got.visible_devices == [d.uuid for d in fake.devices]
    assert {c.check: c.outcome for c in got.checks} == {
        "require-gpu": "pass",
        "allow-mig": "pass",
        "min-gpus": "pass",
        "min-memory-gb": "pass",
        "min-compute-capability": "pass",
        "min-cuda": "pass",
        "gpu-name": "pass",
        "fail-on-ecc-errors": "pass",
    }
    assert got.report == str(tmp_path / "gpuci-gpu-report.json")
    assert json.loads(Path(got.report).read_text())["verdict"] == "pass"
    assert "CUDA_VISIBLE_DEVICES" not in got.result.env  # the API exports nothing itself


def test_a_requirement_not_met_raises_check_failed_or_is_returned(tmp_path: Path) -> None:
    with pytest.raises(CheckFailed, match=r"min-memory-gb \(GPU 0 'NVIDIA L4' has .* GB\)"):
        api.setup(min_memory_gb=80, runtime=runtime(tmp_path), nvml=FakeNvml(["l4"]))
    got = api.setup(min_memory_gb=80, check=False, runtime=runtime(tmp_path), nvml=FakeNvml(["l4"]))
    assert not got.passed and got.gpu_count == 1
    failed = [c for c in got.checks if c.outcome == "fail"]
    assert [c.check for c in failed] == ["min-memory-gb"]


def test_no_driver_is_an_infra_error_unless_cpu_only_is_allowed(tmp_path: Path) -> None:
    with pytest.raises(NvmlUnavailable) as caught:
        api.setup(runtime=runtime(tmp_path, "no-driver"))
    assert isinstance(caught.value, InfraError) and caught.value.hint
    got = api.setup(require_gpu=False, runtime=runtime(tmp_path, "no-driver"))
    assert got.passed and got.gpu_count == 0 and got.visible_devices == []


@pytest.mark.parametrize(
    ("kwargs", "said"),
    [
        ({"min_gpus": -1}, "input 'min-gpus' (argument) is -1, below the minimum 0"),
        ({"min_memory_gb": "lots"}, "min-memory-gb is 'lots', not a number"),
        ({"min_memory_gb": float("nan")}, "expected a finite number"),
        ({"min_cuda": "twelve"}, "input 'min-cuda' (argument) is 'twelve'"),
        ({"gpu_name": "H100("}, "input 'gpu-name' (argument) is 'H100('"),
    ],
)
def test_setup_refuses_bad_arguments_before_reading_a_gpu(
    tmp_path: Path, kwargs: dict, said: str
) -> None:
    with pytest.raises(InputError, match=re.escape(said)):
        api.setup(runtime=runtime(tmp_path, "h200"), **kwargs)
    assert not (tmp_path / "gpuci-gpu-report.json").exists()


def test_smoke_runs_the_health_checks_on_the_fake(tmp_path: Path) -> None:
    got = api.smoke(budget_seconds=20, runtime=runtime(tmp_path, "h200,h200"))
    assert got.passed and got.failed_checks == []
    health = [c for c in got.checks if c["name"] == "health"]
    assert [c["gpu"] for c in health] == [0, 1] and all(c["status"] == "pass" for c in health)
    # fake NVML: no real GPU to load, so the load checks are skipped, and said so
    assert "gpu0:gemm" in got.skipped_checks
    assert got.report == str(tmp_path / "gpuci-smoke-report.json")
    assert json.loads(Path(got.report).read_text())["passed"] is True


def test_a_failed_smoke_check_raises_check_failed_or_is_returned(tmp_path: Path) -> None:
    with pytest.raises(CheckFailed, match="gpu0:health"):
        api.smoke(checks=["health"], runtime=runtime(tmp_path, "h200:ecc+=1"))
    got = api.smoke(checks=["health"], check=False, runtime=runtime(tmp_path, "h200:ecc+=1"))
    assert not got.passed and got.failed_checks == ["gpu0:health"]


def test_smoke_errors_keep_their_kind(tmp_path: Path) -> None:
    with pytest.raises(NvmlUnavailable, match="driver not loaded") as caught:
        api.smoke(runtime=runtime(tmp_path, "no-driver"))
    assert "plan with --dry-run" in (caught.value.hint or "")  # the command's hint, kept
    hidden = runtime(tmp_path, "h200", CUDA_VISIBLE_DEVICES="-1")
    with pytest.raises(InputError, match="no GPU to test"):
        api.smoke(runtime=hidden)


@pytest.mark.parametrize(
    ("kwargs", "said"),
    [
        ({"checks": ["gemm", "burn"]}, "unknown check(s) in checks: burn"),
        ({"memory_fraction": 1.5}, "a fraction of free memory"),
        ({"framework": "jax"}, "input 'framework' (argument) is 'jax', not one of"),
        ({"dcgm_level": 3}, "input 'dcgm-level' (argument) is '3', not one of"),
        ({"budget_seconds": 0}, "below the minimum 1"),
    ],
)
def test_smoke_refuses_bad_arguments(tmp_path: Path, kwargs: dict, said: str) -> None:
    with pytest.raises(InputError, match=re.escape(said)):
        api.smoke(runtime=runtime(tmp_path, "h200"), **kwargs)


_LIBRARY_USER = """
import json, sys
from gpuci.gpu import api
setup = api.setup(min_gpus=2)
smoke = api.smoke(checks=["health"], budget_seconds=20)
print(json.dumps({"gpus": setup.gpu_count, "smoke": smoke.passed, "modules": sorted(sys.modules)}))
"""


def test_the_library_loads_no_command(tmp_path: Path) -> None:
    """The API runs gpu-setup's and gpu-smoke's operations, never a command's module, the
    registry or the CLI (the commands render what the operations return)."""
    env = {
        **clean_env(),
        "PYTHONPATH": str(REPO / "src"),
        "RUNNER_TEMP": str(tmp_path),
        "GPUCI_JOURNAL": str(tmp_path / "journal.jsonl"),
        "GPUCI_FAKE_NVML": "h200,h200",
    }
    proc = run_python("-c", _LIBRARY_USER, env=env)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got["gpus"] == 2 and got["smoke"] is True
    assert commands_loaded(got["modules"]) == []
    assert "gpuci.gpu._setup.operation" in got["modules"]  # the probe saw the operation


def test_a_dry_run_smoke_returns_the_plan(tmp_path: Path) -> None:
    got = api.smoke(checks=["health", "gemm"], runtime=runtime(tmp_path, "no-driver", dry_run=True))
    assert not got.passed  # a plan never claims a pass where no GPU could be checked
    assert got.report == "" and got.checks == [] and got.failed_checks == []
    assert "no GPU here" in got.result.headline
    assert not (tmp_path / "gpuci-smoke-report.json").exists()
