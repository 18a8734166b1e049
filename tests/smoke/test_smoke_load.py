"""The load checks on the CPU: patterns, GEMM against a reference, bandwidth, NCCL, torch."""

from __future__ import annotations

import dataclasses
import importlib.util
import time

import numpy as np
import pytest
from smoke_helpers import DriftingGemm, FlipsBit, WrongGemm, backend_with, outcome, run

from gpuci.gpu.fake_nvml import FakeNvml
from gpuci.gpu.smoke.backends.numpy_backend import NumpyBackend
from gpuci.gpu.smoke.load import Sizes
from gpuci.gpu.smoke.models import lookup, minimums


def test_memory_patterns_cover_the_asked_fraction(tmp_path):
    result = run(tmp_path, "h200", NumpyBackend(mem_bytes=64 << 20), memory_fraction=0.25)
    memory = outcome(result, "gpu0:memory")
    assert memory["status"] == "pass"
    assert memory["figures"]["tested_bytes"] == 16 << 20
    assert memory["figures"]["patterns"] == 4
    assert memory["params"]["patterns"] == "0x00,0xAA,0x55,0xFF"


def test_a_stuck_bit_fails_the_memory_check(tmp_path):
    result = run(tmp_path, "h200", backend_with(FlipsBit))
    memory = outcome(result, "gpu0:memory")
    assert memory["status"] == "fail"
    assert memory["reason"].startswith("memory pattern mismatch: 0xAA: 32 byte(s) wrong")
    assert result.outputs["failed-checks"] == "gpu0:memory"
    assert result.exit_code == 1


def test_gemm_checked_against_the_cpu_reference(tmp_path):
    result = run(tmp_path, "h200", NumpyBackend())
    gemm = outcome(result, "gpu0:gemm")
    assert gemm["status"] == "pass"
    assert gemm["figures"]["max_abs_error"] == 0
    assert gemm["figures"]["repeat_max_diff"] == 0
    assert gemm["figures"]["tflops"] > 0


def test_a_wrong_gemm_element_fails(tmp_path):
    result = run(tmp_path, "h200", backend_with(WrongGemm))
    gemm = outcome(result, "gpu0:gemm")
    assert gemm["status"] == "fail"
    # row 3 is not among the sampled rows: the column-sum identity catches it
    assert (
        gemm["reason"] == "GEMM differs from the CPU reference: 1 column sum(s) wrong, max error 4"
    )


def test_an_unstable_gemm_fails(tmp_path):
    result = run(tmp_path, "h200", backend_with(DriftingGemm, calls=0))
    gemm = outcome(result, "gpu0:gemm")
    assert gemm["status"] == "fail"
    assert gemm["reason"] == "GEMM is unstable: repeating the same product changed it by up to 1"


def test_bandwidth_below_the_minimum_fails_and_names_the_minimum(tmp_path):
    result = run(tmp_path, "h200", NumpyBackend(), min_bandwidth_gbs=1e6)
    membw = outcome(result, "gpu0:membw")
    assert membw["status"] == "fail"
    assert "is below the 1e+06 GB/s minimum (min-bandwidth-gbs" in membw["reason"]
    assert membw["figures"]["copy_gbs"] > 0


def test_cpu_stand_in_figures_are_reported_not_judged(tmp_path):
    result = run(tmp_path, "h200", NumpyBackend())
    assert outcome(result, "gpu0:membw")["figures"]["min_gbs"] is None
    assert outcome(result, "gpu0:pcie")["figures"]["h2d_gbs"] > 0


def test_model_table_and_link_minimums():
    assert lookup("NVIDIA H200").key == "H200"
    assert lookup("NVIDIA GH200 480GB") is None  # not an H200: C2C, different figures
    assert lookup("NVIDIA H100 80GB HBM3").key == "H100-SXM"
    assert lookup("NVIDIA H100 PCIe").key == "H100-PCIe"
    assert lookup("NVIDIA A100-SXM4-80GB").key == "A100-80GB"
    assert lookup("NVIDIA L4").key == "L4"
    assert lookup("Tesla T4").key == "T4"
    h200 = minimums("NVIDIA H200", (5, 16))
    assert (h200.mem_bw_gbs, h200.h2d_gbs) == (2880, 37.8)
    gen4_host = minimums("NVIDIA H200", (4, 16))  # a Gen5 GPU in a Gen4 host: judged as Gen4
    assert gen4_host.h2d_gbs == pytest.approx(18.9)
    unknown = minimums("NVIDIA RTX PRO 6000", (5, 16))
    assert (unknown.mem_bw_gbs, unknown.h2d_gbs) == (None, None)
    assert minimums("NVIDIA RTX PRO 6000", override_mem_bw=1000).mem_bw_gbs == 1000


def test_nccl_all_reduce_of_ones_on_two_devices(tmp_path):
    result = run(tmp_path, FakeNvml(["h100-sxm", "h100-sxm"]), NumpyBackend(devices=2))
    nccl = outcome(result, "nccl")
    assert nccl["status"] == "pass"
    assert nccl["figures"]["gpus"] == 2


def test_nccl_wrong_sum_and_hang_fail(tmp_path):
    class WrongSum(NumpyBackend):
        def all_reduce_ones(self, indices, n):
            return [(2.0, 2.0), (1.0, 2.0)]

    class Hangs(NumpyBackend):
        def all_reduce_ones(self, indices, n):
            time.sleep(3)
            return []

    fake = ["h100-sxm", "h100-sxm"]
    wrong = run(tmp_path, FakeNvml(fake), WrongSum(devices=2), checks=["nccl"])
    assert outcome(wrong, "nccl")["reason"] == "all-reduce of ones gave a wrong sum on GPU(s) [1]"
    sizes = dataclasses.replace(Sizes.tiny(), nccl_timeout_s=0.3)  # raised to the 0.5 s floor
    hung = run(tmp_path, FakeNvml(fake), Hangs(devices=2), checks=["nccl"], sizes=sizes)
    assert outcome(hung, "nccl")["reason"] == "all-reduce did not finish within 0.5s (hung)"


def test_single_gpu_skips_nccl_with_a_reason(tmp_path):
    result = run(tmp_path, "h200", NumpyBackend())
    nccl = outcome(result, "nccl")
    assert (nccl["status"], nccl["reason"]) == ("skip", "needs 2 or more GPUs, 1 here")


def test_checks_input_limits_what_runs(tmp_path):
    result = run(tmp_path, "h200", NumpyBackend(), checks=["gemm"])
    names = sorted(c["name"] for c in result.report["checks"])
    assert names == ["context", "gemm"]  # a context is what any load check stands on


@pytest.mark.skipif(
    importlib.util.find_spec("torch") is None,
    reason="torch is not installed here (pip install torch==2.13.0 for the CPU wheel)",
)
def test_torch_backend_cpu_smoke(tmp_path):
    from gpuci.gpu.smoke.backends.torch_backend import TorchBackend

    backend = TorchBackend("cpu", cpu_mem=16 << 20)
    result = run(tmp_path, "h200", backend, sizes=Sizes.tiny())
    statuses = {c["name"]: c["status"] for c in result.report["checks"]}
    assert statuses == {
        "context": "pass",
        "gemm": "pass",
        "membw": "pass",
        "pcie": "pass",
        "memory": "pass",
        "nccl": "skip",
        "health": "pass",
    }, result.report["checks"]
    device = backend.open(0)
    buf = device.empty(1024)
    device.fill(buf, 0x55)
    assert device.pattern_errors(buf, 0x55) == 0
    buf[17] = 0x54
    assert device.pattern_errors(buf, 0x55) == 1
    a = device.randint((32, 32), -2, 3, seed=1)
    assert np.array_equal(
        device.to_host(device.matmul(a, a)), device.to_host(a) @ device.to_host(a)
    )


@pytest.mark.skipif(
    importlib.util.find_spec("torch") is None
    or (importlib.util.find_spec("torch") is not None and __import__("torch").cuda.is_available()),
    reason="needs a torch that cannot use CUDA here (a CPU-only build on a GPU node)",
)
def test_framework_that_cannot_use_the_gpu_fails_context_and_skips_the_rest(tmp_path):
    result = run(tmp_path, "h200", None, framework="torch")
    context = outcome(result, "gpu0:context")
    assert context["status"] == "fail"
    assert context["reason"].startswith("no CUDA context: torch ")
    assert "CPU-only build" in context["reason"] or "cannot initialise CUDA" in context["reason"]
    memory = outcome(result, "gpu0:memory")
    assert (memory["status"], memory["reason"]) == (
        "skip",
        "no CUDA context (torch cannot use the GPU)",
    )
    assert outcome(result, "gpu0:health")["status"] == "pass"
    assert result.outputs["failed-checks"] == "gpu0:context"


def test_framework_devices_are_matched_to_nvml_by_uuid():
    from gpuci.gpu.nvml import open_nvml
    from gpuci.gpu.smoke import _targets

    fake = FakeNvml(["h100-sxm", "l4", "t4"])

    class Visible(NumpyBackend):  # CUDA_VISIBLE_DEVICES=2,0: two devices, in that order
        is_gpu = True

        def device_uuid(self, index):
            return [fake.devices[2].uuid, fake.devices[0].uuid][index]

    with open_nvml({}, fake) as session:
        gpus = list(session.snapshot().gpus)
        targets = _targets(Visible(devices=2), session, gpus, {"min-bandwidth-gbs": None})
        assert [(t.backend_index, t.nvml_index, t.name) for t in targets] == [
            (0, 2, "Tesla T4"),
            (1, 0, "NVIDIA H100 80GB HBM3"),
        ]
        assert targets[0].minimums.model == "T4"
        assert targets[0].link_max == (3, 16)
        assert targets[0].read_link() == (1, 16)  # idle T4 at Gen1: judged only under load
