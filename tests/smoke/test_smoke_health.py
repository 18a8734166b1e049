"""Health before and after, against fake NVML: counters that rise, XIDs, links, unsupported."""

from __future__ import annotations

import threading
from typing import Any

from smoke_helpers import backend_with, outcome, run

from gpuci.gpu._nvml import Health
from gpuci.gpu._smoke.backends.numpy_backend import NumpyBackend, NumpyDevice
from gpuci.gpu._smoke.health import LoadSampler, Streaks, judge
from gpuci.gpu.fake.nvml import FakeNvml
from gpuci_testing import wait_until


class SamplesSeen(FakeNvml):
    """A fake NVML that notes which thread read the link and the clock-event reasons, so a
    load can wait until a sampler's thread has read a state it set (a sleep sized for a quiet
    machine let a busy one run no sample in it)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.readers: dict[str, list[int]] = {"link": [], "clocks": []}

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: Any) -> int:
        self.readers["link"].append(threading.get_ident())
        return super().nvmlDeviceGetCurrPcieLinkGeneration(handle)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:
        self.readers["clocks"].append(threading.get_ident())
        return super().nvmlDeviceGetCurrentClocksEventReasons(handle)

    def sampled(self, what: str, since: int, times: int = 1) -> None:
        """Wait until another thread (a sampler) read ``what`` ``times`` times after the
        ``since``-th read."""
        me = threading.get_ident()
        wait_until(
            lambda: sum(ident != me for ident in self.readers[what][since:]) >= times,
            what=f"{times} sample(s) of the {what} by the sampler",
        )


def test_healthy_h200_passes_every_check(tmp_path):
    result = run(tmp_path, "h200", NumpyBackend())
    assert result.exit_code == 0, result.headline
    assert result.outputs == {
        "passed": True,
        "failed-checks": "",
        "skipped-checks": "nccl",  # one GPU: no all-reduce, and the output says so
        "report": str(tmp_path / "smoke.json"),
        "seconds": result.outputs["seconds"],
    }
    health = outcome(result, "gpu0:health")
    assert health["status"] == "pass"
    assert health["figures"]["ecc_uncorrected"] == [0, 0]
    assert health["figures"]["pcie_replays"] == [0, 0]


def test_ecc_count_rising_during_the_run_fails(tmp_path):
    result = run(tmp_path, "h200:ecc+=2", NumpyBackend())
    health = outcome(result, "gpu0:health")
    assert health["status"] == "fail"
    assert "volatile uncorrected ECC errors rose from 0 to 2 during the run" in health["reason"]
    assert result.exit_code == 1
    assert result.outputs["passed"] is False
    assert result.outputs["failed-checks"] == "gpu0:health"


def test_pcie_replays_rising_fail(tmp_path):
    result = run(tmp_path, "h100-sxm:replay+=40", None, framework="none")
    health = outcome(result, "gpu0:health")
    assert health["status"] == "fail"
    assert "PCIe replays rose from 0 to 40" in health["reason"]


def test_row_remap_pending_after_the_load_fails(tmp_path):
    fake = FakeNvml(["h200"])

    class RemapsRow(NumpyDevice):
        def matmul(self, a, b):
            fake.set(0, remapped_rows=(0, 1, True, False))
            return super().matmul(a, b)

    result = run(tmp_path, fake, backend_with(RemapsRow))
    health = outcome(result, "gpu0:health")
    assert health["status"] == "fail"
    assert "row remap pending appeared during the run" in health["reason"]
    assert "rows remapped for uncorrectable errors rose from 0 to 1" in health["reason"]


def test_a_node_that_starts_bad_fails_even_without_load(tmp_path):
    result = run(tmp_path, "ecc-bad", None, framework="none")
    reason = outcome(result, "gpu0:health")["reason"]
    assert "2 volatile uncorrected ECC errors" in reason
    assert "row remapping pending (reset the GPU)" in reason


def test_xid_raised_mid_run_fails(tmp_path):
    fake = FakeNvml(["h200", "h200"])

    class RaisesXid(NumpyDevice):
        def matmul(self, a, b):
            if self.index == 1:
                fake.inject_xid(1, 79)
            return super().matmul(a, b)

    result = run(tmp_path, fake, backend_with(RaisesXid, devices=2))
    assert outcome(result, "gpu0:health")["status"] == "pass"
    bad = outcome(result, "gpu1:health")
    assert bad["status"] == "fail"
    times = len(bad["figures"]["xids"])  # one per product: checked, repeated, warm-up, timed
    assert times > 50 and bad["figures"]["xids"] == [79] * times
    assert f"XID 79 raised {times} times during the run" in bad["reason"]
    assert result.outputs["failed-checks"] == "gpu1:health"


def test_pcie_link_at_x8_under_load_fails_the_pcie_check(tmp_path):
    fake = FakeNvml(["h100-sxm"])
    fake.set(0, pcie_width=(8, 16))
    result = run(tmp_path, fake, NumpyBackend())
    pcie = outcome(result, "gpu0:pcie")
    assert pcie["status"] == "fail"
    assert "PCIe link at x8 under load, x16 possible" in pcie["reason"]
    assert pcie["figures"]["link_under_load"] == "Gen5 x8"


def test_idle_downtrained_link_that_trains_up_under_load_passes(tmp_path):
    fake = SamplesSeen(["t4"])  # idles at Gen1 of Gen3, as real T4s do

    class TrainsUp(NumpyDevice):
        def h2d(self, dst, host):
            fake.set(0, pcie_gen=(3, 3))
            since = len(fake.readers["link"])
            super().h2d(dst, host)
            fake.sampled("link", since)  # a real copy lasts a few of the sampler's periods

        def d2h(self, host, src):
            super().d2h(host, src)
            fake.set(0, pcie_gen=(1, 3))

    result = run(tmp_path, fake, backend_with(TrainsUp))
    pcie = outcome(result, "gpu0:pcie")
    assert pcie["status"] == "pass", pcie
    assert pcie["figures"]["link_under_load"] == "Gen3 x16"


def test_unsupported_counters_never_fail(tmp_path):
    fake = FakeNvml(["t4"])
    fake.set(0, pcie_gen=(3, 3), ecc_enabled=None, clock_events=None, temperature_c=None)
    fake.set(0, pcie_replay=None)
    result = run(tmp_path, fake, NumpyBackend())
    health = outcome(result, "gpu0:health")
    assert health["status"] == "pass", health
    assert "pcie_replay_counter" in health["figures"]["not_supported"]
    assert "ecc_volatile_uncorrected" in health["figures"]["not_supported"]
    assert result.exit_code == 0


def test_thermal_clock_event_during_the_run_fails(tmp_path):
    result = run(tmp_path, "h200:clocks=0x40", None, framework="none")
    reason = outcome(result, "gpu0:health")["reason"]
    assert "clocks held down by hw_thermal_slowdown" in reason


def test_clock_event_held_under_load_fails(tmp_path):
    fake = SamplesSeen(["h200"])

    class Throttles(NumpyDevice):
        def fill(self, buf, byte):
            if fake.devices[0].p.clock_events == 0x1:
                fake.set(0, clock_events=0x8)  # hardware slowdown for the memory test's length
                fake.sampled("clocks", len(fake.readers["clocks"]), times=2)  # in a row
            super().fill(buf, byte)

    result = run(tmp_path, fake, backend_with(Throttles), checks=["health", "memory"])
    health = outcome(result, "gpu0:health")
    assert health["status"] == "fail"
    assert "clocks held down by hw_slowdown (2+ samples in a row)" in health["reason"]
    assert health["figures"]["clock_events_sustained"] == ["hw_slowdown"]


def test_hw_slowdown_in_one_sample_is_a_clock_change_not_a_failure():
    """NVIDIA: HW slowdown may be set during P-state or clock changes; one sample proves nothing."""
    masks = iter([0x1, 0x8, 0x1, 0x8, 0x1, 0x8])
    sampler = LoadSampler(lambda index: Health(clock_event_reasons=next(masks)), [0])
    for _ in range(6):
        sampler.sample()
    assert sampler.seen == {0: 0x9} and sampler.streaks.sustained == {}
    before, after = Health(clock_event_reasons=0x1), Health(clock_event_reasons=0x1)
    reasons, figures = judge(
        before, after, [], sampler.streaks.sustained.get(0), clocks_seen=sampler.seen[0]
    )
    assert reasons == []
    assert figures["clock_events"] == ["gpu_idle", "hw_slowdown"]  # reported, not failed
    held = Streaks()
    for mask in (0x1, 0x8, 0x8):
        held.add(0, mask)
    assert held.sustained == {0: 0x8}


def test_hw_slowdown_in_the_after_read_alone_is_read_again(tmp_path):
    class SlowOnce(FakeNvml):
        calls = 0

        def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
            type(self).calls += 1
            return 0x8 if type(self).calls == 2 else 0x1  # the after-read caught a transition

    result = run(tmp_path, SlowOnce(["h200"]), None, framework="none")
    health = outcome(result, "gpu0:health")
    assert health["status"] == "pass", health
    assert SlowOnce.calls == 3  # snapshot, after, and the confirming read


def test_a_few_pcie_replays_are_a_rate_below_the_threshold(tmp_path):
    result = run(tmp_path, "h100-sxm:replay+=1", None, framework="none")
    health = outcome(result, "gpu0:health")
    assert health["status"] == "pass", health
    assert health["figures"]["pcie_replays"] == [0, 1]
    assert health["figures"]["pcie_replays_allowed"] == 8.0
    before, after = Health(pcie_replay_counter=0), Health(pcie_replay_counter=30)
    assert judge(before, after, [], seconds=240)[0] == []  # 30 in 4 minutes: 7.5 a minute
    assert judge(before, after, [], seconds=180)[0] == [
        "PCIe replays rose from 0 to 30 in 180s: more than 8 a minute (a bad link, riser or slot)"
    ]


def test_event_set_failure_leaves_xids_unwatched_and_the_rest_runs(tmp_path):
    # nvmlEventSetCreate answers NVML_ERROR_UNKNOWN, as some vGPU setups do
    result = run(tmp_path, "h200:events=fail", NumpyBackend())
    assert result.exit_code == 0, result.headline
    health = outcome(result, "gpu0:health")
    assert health["status"] == "pass" and health["figures"]["xids"] == "not watched"
    assert outcome(result, "gpu0:gemm")["status"] == "pass"
    assert (
        "XID events not watched on any GPU: nvmlEventSetCreate failed: Unknown Error"
        in result.report["notes"]
    )


def test_judge_idle_and_power_cap_are_not_problems():
    before = Health(ecc_volatile_uncorrected=0, pcie_replay_counter=5, clock_event_reasons=0x1)
    after = Health(ecc_volatile_uncorrected=0, pcie_replay_counter=5, clock_event_reasons=0x4)
    reasons, figures = judge(before, after, [])
    assert reasons == []
    assert figures["clock_events"] == ["gpu_idle", "sw_power_cap"]
