"""The check framework: statuses, reasons, and a budget that skips loudly instead of overrunning."""

from __future__ import annotations

from smoke_helpers import backend_with, outcome, run

from gpuci.gpu._smoke.backends.numpy_backend import NumpyDevice
from gpuci.gpu._smoke.checks import Budget, CheckError, CheckSkipped, Planned, run_check
from gpuci.gpu._smoke.load import Sizes
from gpuci.gpu.fake.nvml import FakeNvml


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_check_that_would_overrun_is_skipped_with_its_numbers():
    clock = Clock()
    budget = Budget(10, clock)
    clock.now += 8
    item = Planned("gemm", 0, {"n": 64}, lambda: 5.0, lambda ctx: {"tflops": 1})
    got = run_check(item, budget)
    assert got.status == "skip"
    assert "needs ~5.0s, 2.0s of 10s left" in got.reason
    assert "raise budget-seconds" in got.reason
    assert got.params["estimate_s"] == 5.0


def test_always_checks_run_past_the_budget():
    clock = Clock()
    budget = Budget(1, clock)
    clock.now += 5
    got = run_check(
        Planned("health", 0, {}, lambda: 0.1, lambda ctx: {"ok": 1}, always=True), budget
    )
    assert got.status == "pass" and got.figures == {"ok": 1}


def test_statuses_from_errors_skips_and_crashes():
    budget = Budget(30)

    def fails(ctx):
        raise CheckError("GEMM differs", {"max_abs_error": 4.0})

    def skips(ctx):
        raise CheckSkipped("needs 2 GPUs")

    def crashes(ctx):
        raise RuntimeError("CUDA error: an illegal memory access\nwas encountered")

    f = run_check(Planned("gemm", 0, {}, lambda: 0, fails), budget)
    s = run_check(Planned("nccl", None, {}, lambda: 0, skips), budget)
    c = run_check(Planned("memory", 1, {}, lambda: 0, crashes), budget)
    assert (f.status, f.reason, f.figures) == ("fail", "GEMM differs", {"max_abs_error": 4.0})
    assert (s.status, s.reason) == ("skip", "needs 2 GPUs")
    assert c.status == "fail" and c.label == "gpu1:memory"
    assert c.reason.startswith("RuntimeError: CUDA error: an illegal memory access was encountered")
    assert "\n" not in c.reason


def test_budget_overrun_mid_run_skips_later_checks_and_still_reads_health(tmp_path):
    clock = Clock()

    class SlowGemm(NumpyDevice):
        def matmul(self, a, b):
            clock.now += 20  # each GEMM "takes" 20 s of a 30 s budget
            return super().matmul(a, b)

    result = run(
        tmp_path,
        FakeNvml(["h200"]),
        backend_with(SlowGemm),
        clock=clock,
        sizes=Sizes.tiny(),
    )
    statuses = {c["name"]: c["status"] for c in result.report["checks"]}
    assert statuses["context"] == "pass"
    assert statuses["gemm"] == "pass"
    for name in ("membw", "pcie", "memory"):
        entry = outcome(result, f"gpu0:{name}")
        assert entry["status"] == "skip", entry
        assert entry["reason"].startswith("skipped to keep the budget: needs ~"), entry
    assert statuses["health"] == "pass"
    assert result.outputs["passed"] is True
    assert any("skipped to keep the 30s budget" in a.message for a in result.annotations)
    assert "skip" in "\n".join(result.summary)
