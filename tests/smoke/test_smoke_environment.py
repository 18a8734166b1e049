"""An image that cannot start CUDA on a healthy node is an environment error (exit 2), never
"take this node out": CPU-only torch, NVML without libcuda, torch newer than the driver."""

from __future__ import annotations

from pathlib import Path

import pytest
from smoke_helpers import outcome, run

from gpuci.gpu import _smoke as smoke
from gpuci.gpu._smoke import environment
from gpuci.gpu._smoke.backends import BackendUnavailable
from gpuci.gpu.fake.nvml import FakeNvml


def broken_framework(monkeypatch, why: str, built: str | None, libcuda: bool = True) -> None:
    def load(framework: str, asked: str):
        raise BackendUnavailable(why, built_cuda=built)

    monkeypatch.setattr(smoke, "resolve_framework", lambda name: "torch")
    monkeypatch.setattr(smoke, "_load_backend", load)
    monkeypatch.setattr(environment, "libcuda_loads", lambda: libcuda)


def test_cpu_only_torch_is_an_environment_error_not_a_bad_node(tmp_path: Path, monkeypatch):
    broken_framework(monkeypatch, "torch 2.13.0+cpu is a CPU-only build", None)
    result = run(tmp_path, FakeNvml(["h100-sxm", "h100-sxm"]), framework="torch")
    assert result.exit_code == 2, result.headline
    assert result.headline.startswith("environment problem, not the node:")
    assert "install a CUDA build of torch" in result.headline
    assert "take this node out" not in result.headline
    assert result.outputs["passed"] is False
    assert outcome(result, "gpu1:health")["status"] == "pass"


def test_nvml_without_libcuda_names_the_container_capability(tmp_path: Path, monkeypatch):
    broken_framework(
        monkeypatch, "torch 2.5.1 (CUDA 12.4) cannot initialise CUDA here", "12.4", False
    )
    result = run(tmp_path, "h200", framework="torch")
    assert result.exit_code == 2
    assert "libcuda.so.1" in result.headline
    assert "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in result.headline


def test_torch_built_for_a_newer_cuda_than_the_driver(tmp_path: Path, monkeypatch):
    broken_framework(monkeypatch, "torch 2.7.0 (CUDA 12.8) cannot initialise CUDA here", "12.8")
    result = run(tmp_path, "h100-sxm", framework="torch")  # driver 535: CUDA 12.2
    assert result.exit_code == 2
    assert "built for CUDA 12.8 but this driver supports CUDA up to 12.2" in result.headline


def test_a_sick_gpu_still_blames_the_node(tmp_path: Path, monkeypatch):
    broken_framework(monkeypatch, "torch 2.13.0+cpu is a CPU-only build", None)
    result = run(tmp_path, "h100-sxm:xid=79", framework="torch")
    assert result.exit_code == 1
    assert "take this node out" in result.headline


@pytest.mark.parametrize(
    ("why", "built", "driver", "libcuda", "expect"),
    [
        ("torch 2.5.0 (CUDA 12.1) cannot initialise CUDA here", "12.1", (12, 4), True, "match"),
        ("cupy 13.3.0 cannot initialise CUDA: x", "12.6", (12, 2), True, "CUDA 12.6"),
    ],
)
def test_diagnose(why, built, driver, libcuda, expect) -> None:
    text = environment.diagnose(why, "torch", built, driver, {}, lambda: libcuda)
    assert expect in text and "(fix: " in text
