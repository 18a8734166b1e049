"""Verdicts that hold on shared, real fleets: post-load read errors fail, application XIDs and
other MIG instances' events do not, on fake NVML with the codes real drivers return."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from smoke_helpers import GpuLike, backend_with, outcome, run

from gpuci.gpu._nvml import open_nvml
from gpuci.gpu._smoke.backends.numpy_backend import NumpyBackend, NumpyDevice
from gpuci.gpu._smoke.load import Sizes
from gpuci.gpu.fake.nvml import FakeNvml
from gpuci.runtime import Result


def run_env(tmp: Path, fake: FakeNvml, visible: str | None = None, **over) -> Result:
    """gpu-smoke's health checks alone (framework none), ``visible`` as CUDA_VISIBLE_DEVICES."""
    return run(tmp, fake, visible=visible, framework="none", **over)


@pytest.mark.parametrize(("code", "text"), [(16, "GPU requires restart"), (999, "Unknown Error")])
def test_a_counter_unreadable_after_the_load_fails(tmp_path: Path, code: int, text: str) -> None:
    result = run_env(tmp_path, FakeNvml.from_spec(f"h100-sxm:readerr={code}"))
    health = outcome(result, "gpu0:health")
    assert health["status"] == "fail", health
    assert "readable before the load, unreadable after it" in health["reason"]
    assert text in health["reason"]
    assert result.exit_code == 1


@pytest.mark.parametrize(
    ("call", "named"),
    [
        ("ViolationStatus", "power throttle counter"),
        ("FieldValues", "hw_thermal_slowdown throttle counter"),
        ("ViolationStatus+FieldValues", "throttle (violation) counters"),
        ("PowerManagementLimit", "power limit"),
        ("ApplicationsClock", "applications clocks"),
        ("NvLinkState", "NVLink states"),
        ("NvLinkErrorCounter", "NVLink error counters"),
        ("CurrentClocksEventReasons", "clock-event reasons"),
        ("Temperature", "temperature"),
    ],
)
@pytest.mark.parametrize("code", [16, 999])
def test_every_read_unreadable_after_the_load_fails(
    tmp_path: Path, call: str, named: str, code: int
) -> None:
    """One rule for every before/after read, not only the ECC and PCIe counters."""
    result = run_env(tmp_path, FakeNvml.from_spec(f"h100-sxm:readerr={code}@{call}"))
    health = outcome(result, "gpu0:health")
    assert health["status"] == "fail", health
    assert f"{named}" in health["reason"]
    assert "readable before the load, unreadable after it" in health["reason"]
    assert "went down" not in health["reason"]  # unreadable is not "down"
    assert result.exit_code == 1


def test_a_gpu_lost_under_the_load_fails_that_gpu(tmp_path: Path) -> None:
    """GPU_IS_LOST after the load is that GPU's failure (exit 1, named), not an infra stop."""
    result = run_env(tmp_path, FakeNvml.from_spec("h100-sxm,h100-sxm:readerr=15"))
    assert result.exit_code == 1, result.report
    assert outcome(result, "gpu0:health")["status"] == "pass"
    lost = outcome(result, "gpu1:health")
    assert lost["status"] == "fail"
    assert "GPU 1 has fallen off the bus (NVML: GPU is lost)" in lost["reason"]
    assert result.outputs["failed-checks"] == "gpu1:health"


def test_a_link_down_is_not_also_unreadable_counters(tmp_path: Path) -> None:
    """A link that went down loses its error counters: judged as down, once."""
    result = run_env(tmp_path, FakeNvml.from_spec("h100-sxm:nvdown=3"))
    reason = outcome(result, "gpu0:health")["reason"]
    assert "NVLink(s) 3 went down" in reason and "unreadable" not in reason


def test_unreadable_keys_are_named_and_capped() -> None:
    from gpuci.gpu._gpu_info import Health

    before = Health(nvlink_states=tuple((link, True) for link in range(18)))
    after = Health(nvlink_states=((0, True),))
    assert after.unreadable_since(before) == [
        "NVLink 1 state",
        "NVLink 2 state",
        "NVLink 3 state",
        "NVLink 4 state",
        "13 more NVLink states",
    ]
    assert Health().unreadable_since(Health()) == []  # never readable: unsupported


def test_a_counter_never_supported_still_passes(tmp_path: Path) -> None:
    fake = FakeNvml(["t4"])
    fake.set(0, pcie_replay=None)  # unsupported before and after: not a finding
    assert outcome(run_env(tmp_path, fake), "gpu0:health")["status"] == "pass"


@pytest.mark.parametrize("xid", [13, 31, 43, 45])
def test_application_xids_are_reported_not_failed(tmp_path: Path, xid: int) -> None:
    result = run_env(tmp_path, FakeNvml.from_spec(f"h100-sxm:xid={xid}"))
    health = outcome(result, "gpu0:health")
    assert health["status"] == "pass", health
    assert health["figures"]["application_xids"] == [xid]
    assert health["figures"]["xids"] == []


def test_a_hardware_xid_next_to_an_application_one_fails(tmp_path: Path) -> None:
    fake = FakeNvml(["h100-sxm"])
    fake.inject_xid(0, 31)
    fake.inject_xid(0, 48)  # double-bit ECC error
    health = outcome(run_env(tmp_path, fake), "gpu0:health")
    assert health["status"] == "fail" and health["reason"] == "XID 48 raised during the run"


def test_an_xid_from_another_mig_instance_is_not_this_slices(tmp_path: Path) -> None:
    fake = FakeNvml(["a100-mig"])
    first = fake.devices[0].migs[0]  # GPU instance 1
    fake.inject_xid(0, 79, gpu_instance_id=2)  # the other tenant's slice
    health = outcome(run_env(tmp_path, fake, first.uuid), "gpu0:health")
    assert health["status"] == "pass", health
    assert health["figures"]["other_instance_xids"] == [79]


def test_an_xid_from_the_slice_under_test_fails(tmp_path: Path) -> None:
    fake = FakeNvml(["a100-mig"])
    fake.inject_xid(0, 79, gpu_instance_id=1)
    result = run_env(tmp_path, fake, fake.devices[0].migs[0].uuid)
    assert outcome(result, "gpu0:health")["status"] == "fail"


# ----- 8 GPUs within the budget ------------------------------------------------------------
def test_eight_gpus_run_their_checks_at_once(tmp_path: Path) -> None:
    """Every GPU's context waits for all eight: only a concurrent run gets past the barrier."""
    barrier = threading.Barrier(8, timeout=60)  # a hang guard, not a timing assertion

    class Together(NumpyDevice):
        def tiny_kernel(self, n: int) -> float:
            barrier.wait()
            return super().tiny_kernel(n)

    result = run(tmp_path, FakeNvml(["h200"] * 8), backend_with(Together, devices=8))
    contexts = [c for c in result.report["checks"] if c["name"] == "context"]
    assert [c["status"] for c in contexts] == ["pass"] * 8, contexts


def test_eight_gpus_fit_a_budget_one_gpu_at_a_time_would_not(tmp_path: Path) -> None:
    """Each GPU's checks take 5 s (on a per-thread clock): 8 in a row would need 40 s of 30."""
    local = threading.local()
    # All eight GPUs meet here before their first kernel, so each runs on its own thread: a
    # busy machine cannot let one pool thread finish a GPU and take the next (its per-thread
    # clock would then carry both GPUs' seconds).
    together = threading.Barrier(8, timeout=120)

    def clock() -> float:
        return getattr(local, "t", 0.0)

    class FiveSeconds(NumpyDevice):
        def tiny_kernel(self, n: int) -> float:
            if not getattr(local, "met", False):
                local.met = True
                together.wait()
            local.t = clock() + 5.0
            return super().tiny_kernel(n)

    result = run(
        tmp_path,
        FakeNvml(["h200"] * 8),
        backend_with(FiveSeconds, devices=8),
        clock=clock,
        budget_seconds=30,
    )
    budget = [c["name"] for c in result.report["checks"] if "keep the budget" in c["reason"]]
    assert budget == [], budget
    assert result.outputs["skipped-checks"] == ""


def test_a_budget_skip_is_named_in_skipped_checks(tmp_path: Path) -> None:
    clock = [0.0]

    def tick() -> float:
        clock[0] += 0.6
        return clock[0]

    result = run(tmp_path, "h200", NumpyBackend(), clock=tick, budget_seconds=1)
    skipped = result.outputs["skipped-checks"].split(",")
    assert "nccl" in skipped and any(s.startswith("gpu0:") for s in skipped), skipped
    assert any("skipped to keep the" in a.message for a in result.annotations)


def test_the_dry_run_estimate_for_eight_h200_fits_the_default_budget() -> None:
    from gpuci.gpu._smoke.plan import _dry_estimates

    with open_nvml({}, FakeNvml(["h200"] * 8)) as session:
        gpus = list(session.snapshot().gpus)
    estimates = _dry_estimates(gpus, Sizes(), 0.9)
    estimates.pop("dcgm")  # off by default
    assert sum(estimates.values()) < 30, estimates  # was ~53 s check by check


# ----- another process on the GPU ----------------------------------------------------------
def test_another_process_makes_speed_report_only_and_caps_the_memory_test(tmp_path: Path):
    fake = FakeNvml(["h200"])
    fake.set(0, processes=[(4242, 20 << 30)])  # someone else's training run
    backend = GpuLike([fake.devices[0].uuid])  # the CPU stand-in, matched as the H200
    result = run(tmp_path, fake, backend, sizes=Sizes.tiny(), memory_fraction=0.9)
    gemm = outcome(result, "gpu0:gemm")
    assert gemm["status"] == "pass", gemm  # a CPU's TFLOP/s, judged as an H200's, would fail
    assert gemm["figures"]["min_tflops"] is None
    memory = outcome(result, "gpu0:memory")
    assert memory["figures"]["fraction_of_free"] <= 0.5


def test_without_other_processes_the_h200_minimums_hold(tmp_path: Path):
    fake = FakeNvml(["h200"])
    result = run(tmp_path, fake, GpuLike([fake.devices[0].uuid]), sizes=Sizes.tiny())
    assert outcome(result, "gpu0:gemm")["status"] == "fail"  # the control: judged


# ----- NVLink ------------------------------------------------------------------------------
def test_a_gpu_with_nvlinks_down_fails_against_its_peers(tmp_path: Path) -> None:
    fake = FakeNvml(["h100-sxm"] * 4)
    fake.set(2, nvlinks_down=(4, 5))
    result = run_env(tmp_path, fake)
    bad = outcome(result, "gpu2:health")
    assert bad["status"] == "fail"
    assert "16 NVLink(s) active where this model's other GPUs here have 18" in bad["reason"]
    assert outcome(result, "gpu1:health")["figures"]["nvlinks_active"] == [18, 18]


def test_an_nvlink_going_down_under_the_load_fails(tmp_path: Path) -> None:
    result = run_env(tmp_path, FakeNvml.from_spec("h100-sxm:nvdown=7,h100-sxm"))
    assert outcome(result, "gpu0:health")["reason"] == "NVLink(s) 7 went down during the run"


def test_boards_without_nvlink_are_not_judged_on_it(tmp_path: Path) -> None:
    result = run_env(tmp_path, FakeNvml(["l4", "l4"]))
    assert outcome(result, "gpu0:health")["status"] == "pass"
    assert "nvlinks_active" not in outcome(result, "gpu0:health")["figures"]


def test_an_unbridged_pcie_board_is_not_failed_against_bridged_peers() -> None:
    from gpuci.gpu._smoke.health import judge_nvlink

    assert judge_nvlink((), (), 12, bridged_board=True)[0] == []
    assert judge_nvlink((0, 1), (0, 1), 12, bridged_board=True)[0]  # a bridge with links down
    assert judge_nvlink((), (), 18)[0]  # an SXM board with every link down
