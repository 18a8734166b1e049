"""Throttling judged on NVML's cumulative violation counters, and NVLink error counters read
before and after the load, on fake NVML with the values and codes real drivers return."""

from __future__ import annotations

from pathlib import Path

import pytest
from smoke_helpers import outcome, run

from gpuci.gpu._nvml import NvmlSession
from gpuci.gpu.fake.nvml import FakeNvml
from gpuci.runtime import Result


def run_env(tmp: Path, fake: FakeNvml | str) -> Result:
    """gpu-smoke's health checks alone (framework none)."""
    return run(tmp, fake, framework="none")


# ----- throttling: cumulative counters -----------------------------------------------------
@pytest.mark.parametrize("reason", ["hw_thermal_slowdown", "hw_power_brake_slowdown", "thermal"])
def test_throttle_time_accrued_during_the_run_fails(tmp_path: Path, reason: str) -> None:
    # The sampled bits never show it (a slowdown between samples); the counter does.
    health = outcome(run_env(tmp_path, f"h200:throttle={reason}+12"), "gpu0:health")
    assert health["status"] == "fail", health
    assert f"clocks held down by {reason} for 12.0s" in health["reason"]
    assert "cumulative counters" in health["reason"]
    assert health["figures"]["throttle_judged_on"] == "counters"


def test_a_brief_slowdown_caught_by_two_samples_passes_on_the_counters(tmp_path: Path) -> None:
    # The bit shows in every read (so the old two-sample rule failed it), but the counter says
    # the clocks were held down for 0.2 s of the run: a step at the idle-to-load change.
    fake = FakeNvml.from_spec("h200:throttle=hw_thermal_slowdown+0.2")
    fake.set(0, clock_events=0x40)
    health = outcome(run_env(tmp_path, fake), "gpu0:health")
    assert health["status"] == "pass", health
    assert health["figures"]["throttle_s"]["hw_thermal_slowdown"] == pytest.approx(0.2)
    assert "hw_thermal_slowdown" in health["figures"]["clock_events_sustained"]


def test_power_cap_time_is_reported_not_failed(tmp_path: Path) -> None:
    health = outcome(run_env(tmp_path, "t4:throttle=power+30"), "gpu0:health")
    assert health["status"] == "pass", health
    assert health["figures"]["throttle_s"]["power"] == 30.0


def test_without_slowdown_fields_the_sampled_streak_still_decides(tmp_path: Path) -> None:
    # Driver 470: no NVML_FI_DEV_CLOCKS_EVENT_REASON_* fields; the thermal policy counter has
    # not moved (no time passed for it), so the held bit is judged on the samples.
    fake = FakeNvml(["old-driver"])
    fake.set(0, clock_events=0x40)
    health = outcome(run_env(tmp_path, fake), "gpu0:health")
    assert health["status"] == "fail", health
    assert "hw_thermal_slowdown (2+ samples in a row)" in health["reason"]
    assert "hw_thermal_slowdown" not in health["figures"]["throttle_s"]


def test_throttle_counters_unsupported_are_reported_never_failed(tmp_path: Path) -> None:
    fake = FakeNvml(["a100-mig"])  # MIG (and vGPU) answer NotSupported
    fake.set(0, throttle_ns=None, nvlink_counters=False)
    health = outcome(run_env(tmp_path, fake), "gpu0:health")
    assert health["status"] == "pass", health
    assert {"throttle_ns", "nvlink_errors"} <= set(health["figures"]["not_supported"])
    assert health["figures"]["throttle_judged_on"] == "samples"


# ----- NVLink error counters ---------------------------------------------------------------
@pytest.mark.parametrize(
    ("counter", "text"),
    [("crc_flit", "CRC FLIT errors"), ("crc_data", "CRC data errors"), ("recovery", "recoveries")],
)
def test_nvlink_errors_during_the_run_fail_the_link(tmp_path: Path, counter: str, text: str):
    result = run_env(tmp_path, f"h100-sxm:nverr={counter}@3+12,h100-sxm")
    health = outcome(result, "gpu0:health")
    assert health["status"] == "fail", health
    assert f"NVLink 3 {text} rose from 0 to 12 during the run" in health["reason"]
    assert outcome(result, "gpu1:health")["status"] == "pass"
    assert result.exit_code == 1


def test_nvlink_replays_are_reported_not_failed(tmp_path: Path) -> None:
    health = outcome(run_env(tmp_path, "h100-sxm:nverr=replay@5+3"), "gpu0:health")
    assert health["status"] == "pass", health
    assert health["figures"]["nvlink_replays"] == {"5": 3}


def test_no_nvlink_is_reported_as_unsupported(tmp_path: Path) -> None:
    health = outcome(run_env(tmp_path, "t4"), "gpu0:health")  # T4: no NVLink at all
    assert health["status"] == "pass", health
    assert "nvlink_errors" in health["figures"]["not_supported"]


def test_the_session_reads_counters_only_on_the_links_up() -> None:
    fake = FakeNvml(["h100-sxm"])
    fake.set(0, nvlinks_down=(0,))
    with NvmlSession(fake, "fake").open() as session:
        health = session.health(0)
        assert health.nvlink_errors is not None
        assert {link for link, _, _ in health.nvlink_errors} == set(range(1, 18))
        assert dict(health.throttle_ns or ())["low_util"] > 0
        quick = session.health(0, counters=False)  # the sampler's read: no counters
        assert quick.throttle_ns is None and quick.nvlink_errors is None


# ----- the threshold is an input -----------------------------------------------------------
def _long_run(tmp: Path, spec: str, **over: object) -> Result:
    """A 100 s run (the clock reads 0 once, for the budget's start, then 100)."""
    reads = iter([0.0])
    return run(
        tmp, spec, clock=lambda: next(reads, 100.0), framework="none", budget_seconds=1000, **over
    )


def test_max_throttle_percent_sets_the_share_of_the_run(tmp_path: Path) -> None:
    spec = "h200:throttle=hw_thermal_slowdown+12"
    default = outcome(_long_run(tmp_path, spec), "gpu0:health")  # 10 % of 100 s: 10 s allowed
    assert default["status"] == "fail", default
    assert "10.0s allowed" in default["reason"]
    assert default["figures"]["throttle_allowed_s"] == 10.0
    wider = outcome(_long_run(tmp_path, spec, max_throttle_percent=20), "gpu0:health")
    assert wider["status"] == "pass", wider
    assert wider["figures"]["throttle_allowed_s"] == 20.0
    # 0 % still allows the 1 s floor (a slowdown at the idle-to-load step)
    strict = outcome(
        _long_run(tmp_path, "h200:throttle=thermal+0.5", max_throttle_percent=0), "gpu0:health"
    )
    assert strict["status"] == "pass" and strict["figures"]["throttle_allowed_s"] == 1.0


def test_max_throttle_percent_is_a_flag(tmp_path: Path) -> None:
    from gpuci.gpu.options import SmokeInputs
    from gpuci.inputs import specs_of

    (spec,) = [i for i in specs_of(SmokeInputs) if i.name == "max-throttle-percent"]
    assert spec.default == "10" and spec.kind == "float" and spec.minimum == 0
