"""The load checks on the CPU: patterns, GEMM against a reference, bandwidth, NCCL, torch."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import threading

import numpy as np
import pytest
from smoke_helpers import (
    PIDFILE_ENV,
    DriftingGemm,
    FlipsBit,
    GpuLike,
    WrongGemm,
    backend_reducing_with,
    backend_with,
    matched,
    outcome,
    run,
)

from gpuci.gpu._nvml import open_nvml
from gpuci.gpu._smoke import allreduce
from gpuci.gpu._smoke.backends.numpy_backend import NumpyBackend, NumpyDevice
from gpuci.gpu._smoke.load import Sizes
from gpuci.gpu._smoke.models import lookup, minimums
from gpuci.gpu._smoke.targets import match_targets
from gpuci.gpu.fake.nvml import FakeNvml


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


@pytest.mark.parametrize(
    ("backend", "reason"),
    [
        # row 3 is not among the sampled rows: the column-sum identity catches it
        (WrongGemm, "GEMM differs from the CPU reference: 1 column sum(s) wrong, max error 4"),
        (DriftingGemm, "GEMM is unstable: repeating the same product changed it by up to 1"),
    ],
)
def test_a_wrong_or_unstable_gemm_fails(tmp_path, backend, reason):
    gemm = outcome(run(tmp_path, "h200", backend_with(backend, calls=0)), "gpu0:gemm")
    assert (gemm["status"], gemm["reason"]) == ("fail", reason)


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
    assert (h200.mem_bw_gbs, h200.h2d_gbs) == (2532, 37.8)  # 80 % of 3165 GB/s measured
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


def test_nccl_wrong_sum_fails(tmp_path):
    fake = ["h100-sxm", "h100-sxm"]
    wrong = run(tmp_path, FakeNvml(fake), backend_reducing_with("wrong_sum"), checks=["nccl"])
    assert outcome(wrong, "nccl")["reason"] == "all-reduce of ones gave a wrong sum on GPU(s) [1]"


# The child's timeout covers its Python start and imports too: 10 s, not 3, so a machine at
# load 15 still reaches the phase each test is about (3 s failed there).
CHILD_TIMEOUT_S = 10


@pytest.mark.timeout(120)  # a hang guard: the child's timeout kills the reducer
def test_a_hung_all_reduce_is_killed_at_its_timeout(tmp_path, monkeypatch):
    pidfile = tmp_path / "reducer.pid"
    monkeypatch.setenv(PIDFILE_ENV, str(pidfile))
    sizes = dataclasses.replace(Sizes.tiny(), nccl_timeout_s=CHILD_TIMEOUT_S)
    fake = FakeNvml(["h100-sxm", "h100-sxm"])
    hung = run(tmp_path, fake, backend_reducing_with("hangs"), checks=["nccl"], sizes=sizes)
    nccl = outcome(hung, "nccl")
    assert (nccl["status"], nccl["reason"]) == (
        "fail",
        f"all-reduce did not finish within {CHILD_TIMEOUT_S}s (hung in the collective; its "
        "process was killed)",
    )
    assert list(nccl["figures"]["phases_s"]) == ["start", "import", "contexts", "collective"]
    pid = int(pidfile.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # gone, not left running behind us


def test_an_all_reduce_that_never_reaches_the_collective_is_a_skip(tmp_path):
    sizes = dataclasses.replace(Sizes.tiny(), nccl_timeout_s=CHILD_TIMEOUT_S)
    fake = FakeNvml(["h100-sxm", "h100-sxm"])
    slow = run(tmp_path, fake, backend_reducing_with("slow_start"), checks=["nccl"], sizes=sizes)
    nccl = outcome(slow, "nccl")
    assert nccl["status"] == "skip", nccl
    assert nccl["reason"].startswith(
        f"all-reduce did not reach the collective within {CHILD_TIMEOUT_S}s (last phase: contexts;"
    )
    assert slow.exit_code == 0


def test_nccl_missing_is_a_skip_with_its_reason(tmp_path):
    fake = FakeNvml(["h100-sxm", "h100-sxm"])
    result = run(tmp_path, fake, backend_reducing_with("no_nccl"), checks=["nccl"])
    nccl = outcome(result, "nccl")
    assert (nccl["status"], nccl["reason"]) == (
        "skip",
        "NCCL not available: torch 2.13.0 was built without NCCL",
    )
    assert result.exit_code == 0


def test_nccl_runs_within_the_budget_on_eight_gpus(tmp_path, monkeypatch):
    """The memory test on 8 GPUs eats the budget; NCCL must have run before it did."""
    # The budget runs on the fake clock below, but the all-reduce child's kill timer is real
    # time (what the fake budget leaves, 5 s): on a busy machine its Python and numpy start
    # took longer and the check was a skip. What is scheduled is this test's subject; the
    # child gets real time enough to start.
    run_child = allreduce.run_child
    monkeypatch.setattr(allreduce, "run_child", lambda *a: run_child(*a[:3], max(a[3], 120.0)))
    # The GPUs' checks run on threads of their own, in parallel: each thread keeps its own
    # time, and "now" is the furthest any of them has got (a shared counter would add the eight
    # GPUs' time together, and how threads interleave would decide the verdict).
    spent: dict[int, float] = {}

    class SlowMemory(NumpyDevice):
        def fill(self, buf, byte):
            me = threading.get_ident()
            spent[me] = spent.get(me, 0.0) + 0.2  # 32 chunks x 4 patterns: ~25 s per GPU
            super().fill(buf, byte)

    fake = FakeNvml(["h100-sxm"] * 8)
    backend = backend_with(SlowMemory, devices=8)
    now = lambda: max(spent.values(), default=0.0)  # noqa: E731
    result = run(tmp_path, fake, backend, clock=now, budget_seconds=30)
    assert outcome(result, "nccl")["status"] == "pass", outcome(result, "nccl")
    # The GPUs' memory tests run together, so the last GPU's is not the one the budget drops.
    assert outcome(result, "gpu7:memory")["status"] == "pass"


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
    from gpuci.gpu._smoke.backends.torch_backend import TorchBackend

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
    assert result.exit_code == 2  # the image, not the node (NVML sees a healthy GPU)
    assert "take this node out" not in result.headline


def test_framework_devices_are_matched_to_nvml_by_uuid():
    fake = FakeNvml(["h100-sxm", "l4", "t4"])
    # CUDA_VISIBLE_DEVICES=2,0: two devices, in that order; torch gives bare UUIDs
    bare = [fake.devices[2].uuid.removeprefix("GPU-"), fake.devices[0].uuid.upper()]
    with open_nvml({}, fake) as session:
        gpus = list(session.snapshot().gpus)
        targets, notes = match_targets(GpuLike(bare), session, gpus)
        assert [(t.backend_index, t.nvml_index, t.name) for t in targets] == [
            (0, 2, "Tesla T4"),
            (1, 0, "NVIDIA H100 80GB HBM3"),
        ]
        assert notes == []
        assert targets[0].minimums.model == "T4"
        assert targets[0].link_max == (3, 16)
        assert targets[0].read_link() == (1, 16)  # idle T4 at Gen1: judged only under load


def test_a_uuid_cut_at_a_zero_byte_is_matched_by_pci_bus_id():
    """cupy's UUID is a C string: cut at 0x00 it names no GPU; the bus id still does."""
    from gpuci.gpu._smoke.backends.cupy_backend import _uuid_text

    raw = bytes.fromhex("5a00c3d2e1f0a1b2c3d4e5f6a7b8c9d0")
    assert _uuid_text(raw[:1]) is None  # what cupy hands over: b"Z"
    assert _uuid_text(raw) == "5a00c3d2-e1f0-a1b2-c3d4-e5f6a7b8c9d0"
    # CUDA_VISIBLE_DEVICES=3,1: no UUIDs, CUDA's spelling of the bus ids
    backend = GpuLike([None, None], ["0000:5d:00.0", "0000:2a:00.0"])
    targets, notes = matched(backend, FakeNvml(["h100-sxm"] * 4))
    assert [t.nvml_index for t in targets] == [3, 1]
    assert notes == []


def test_no_uuid_and_no_bus_id_falls_back_to_index_loudly():
    targets, notes = matched(GpuLike([None, None]), FakeNvml(["h100-sxm", "h100-sxm"]))
    assert [t.nvml_index for t in targets] == [0, 1]
    assert notes == [
        "numpy gave neither UUIDs nor PCI bus ids: devices matched to NVML GPUs by index "
        "(wrong if CUDA_VISIBLE_DEVICES reorders them)"
    ]


def test_a_mig_device_is_matched_by_its_mig_uuid_and_held_to_its_slice():
    fake = FakeNvml(["a100-mig"])
    cuda_uuid = fake.devices[0].migs[1].uuid.removeprefix("MIG-")  # torch and cupy give it bare
    targets, notes = matched(GpuLike([cuda_uuid]), fake)
    (t,) = targets
    assert (t.nvml_index, t.name, notes) == (0, "NVIDIA A100-SXM4-40GB MIG 3g.20gb", [])
    assert t.minimums.model == "A100-40GB MIG 3g.20gb"
    assert t.minimums.mem_bw_gbs == 552  # half of the A100 40GB's 1105: half its memory
    assert t.minimums.gemm_tflops == 76  # 3 of 7 compute slices of 177
    assert (t.minimums.h2d_gbs, t.minimums.d2h_gbs) == (None, None)


def test_mig_names_never_get_the_full_gpu_row():
    assert lookup("NVIDIA A100-SXM4-40GB MIG 1g.5gb") is None
    one = minimums("NVIDIA A100-SXM4-40GB MIG 1g.5gb", (4, 16))
    assert (one.mem_bw_gbs, one.gemm_tflops) == (138, 25)  # 1/8 of memory, 1/7 of compute
    h200 = minimums("NVIDIA H200 MIG 1g.18gb")
    assert h200.model == "H200 MIG 1g.18gb" and h200.mem_bw_gbs == 323
    odd = minimums("NVIDIA A100-SXM4-40GB MIG something")
    assert (odd.mem_bw_gbs, odd.gemm_tflops, odd.h2d_gbs) == (None, None, None)
    assert "not judged" in odd.source


def test_gemm_below_the_model_minimum_fails(tmp_path):
    """A GPU with a low power cap passes every correctness check; its speed must be judged."""
    fake = FakeNvml(["h200"])
    backend = GpuLike([fake.devices[0].uuid])  # the CPU's TFLOP/s, held to the H200's minimum
    result = run(tmp_path, fake, backend, checks=["gemm"], sizes=Sizes.tiny())
    gemm = outcome(result, "gpu0:gemm")
    assert gemm["status"] == "fail"
    assert gemm["figures"]["min_tflops"] == 556
    assert gemm["figures"]["repeats"] >= 50
    assert gemm["reason"].startswith("FP16 GEMM 0 TFLOP/s is below the 556 TFLOP/s minimum")


def test_cpu_stand_in_gemm_is_not_judged(tmp_path):
    gemm = outcome(run(tmp_path, "h200", NumpyBackend(), checks=["gemm"]), "gpu0:gemm")
    assert gemm["status"] == "pass" and gemm["figures"]["min_tflops"] is None


def test_pcie_runs_on_the_gpus_numa_node(tmp_path):
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.skip("this process may use one CPU only: binding to a node changes nothing")
    seen = {}

    class RecordsCpus(NumpyDevice):
        def pinned(self, nbytes):
            seen[self.index] = os.sched_getaffinity(0)
            return super().pinned(nbytes)

    fake = FakeNvml(["h100-sxm", "h100-sxm"])
    fake.devices[0].cpus = (allowed[0],)
    fake.devices[1].cpus = (1000,)  # a CPU this process may not use
    result = run(tmp_path, fake, backend_with(RecordsCpus, devices=2), checks=["pcie"])
    near, far = outcome(result, "gpu0:pcie"), outcome(result, "gpu1:pcie")
    assert seen[0] == {allowed[0]}
    assert seen[1] == set(allowed)
    assert os.sched_getaffinity(0) == set(allowed)  # restored afterwards
    assert near["figures"]["numa_binding"] == "applied"
    assert near["figures"]["near_cpus"] == str(allowed[0])
    assert near["figures"]["numa_node"] == 0
    assert far["figures"]["numa_binding"] == (
        "not applied: none of the GPU's CPUs (1000) is available to this process"
    )


def test_d2h_minimum_keeps_a_margin():
    h200 = minimums("NVIDIA H200", (5, 16))
    assert (h200.h2d_gbs, h200.d2h_gbs, h200.gemm_tflops) == (37.8, 31.5, 556)


class CountsTraffic(NumpyDevice):
    """Counts the bytes the memory check writes and reads, as a GPU's memory would see them."""

    moved = 0

    def fill(self, buf, byte):
        type(self).moved += buf.nbytes
        super().fill(buf, byte)

    def pattern_errors(self, buf, byte):
        type(self).moved += buf.nbytes * self.pattern_reads
        return super().pattern_errors(buf, byte)


@pytest.mark.parametrize("pattern_reads", [1, 2])  # torch's fused min/max; cupy's min, then max
def test_the_memory_pass_rate_counts_the_bytes_the_device_moved(
    tmp_path, monkeypatch, pattern_reads
):
    from gpuci.gpu._smoke import memtest

    ticks = iter([0.0, 1e-6])  # the check's start and end: the bytes moved in a microsecond
    monkeypatch.setattr(memtest, "time", type("Clock", (), {"perf_counter": lambda: next(ticks)}))
    backend = backend_with(CountsTraffic, pattern_reads=pattern_reads, moved=0)
    result = run(tmp_path, "h200", backend, checks=["memory"])
    memory = outcome(result, "gpu0:memory")
    assert memory["status"] == "pass"
    moved = backend.device_class.moved
    assert moved == (1 + pattern_reads) * 4 * memory["figures"]["tested_bytes"]
    assert memory["figures"]["pass_gbs"] == round(moved / 1e-6 / 1e9, 1)
