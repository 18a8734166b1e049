"""All-reduce bus bandwidth (issue 23 item 9): nccl-tests' busbw per timed run, judged against
a per-interconnect floor only where one is known, reported (saying so) where none is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from smoke_helpers import BUS_BYTES, BUS_SECONDS, GpuLike, backend_reducing_with, outcome, run

from gpuci.gpu._smoke import allreduce, models
from gpuci.gpu._smoke.backends.numpy_backend import NumpyBackend
from gpuci.gpu._smoke.models import GpuLink, all_reduce_bus, gpu_link
from gpuci.gpu.fake.nvml import FakeNvml


def test_bus_bandwidth_is_nccl_tests_formula() -> None:
    algbw, busbw = allreduce.bus_bandwidth(BUS_BYTES, BUS_SECONDS, 8)
    assert algbw == pytest.approx(67.108864)
    assert busbw == pytest.approx(67.108864 * 2 * 7 / 8)
    assert allreduce.bus_bandwidth(BUS_BYTES, BUS_SECONDS, 2)[1] == pytest.approx(67.108864)


def _gpu_like(fake: FakeNvml, reducer: str) -> GpuLike:
    backend = GpuLike([d.uuid for d in fake.devices])
    backend.reducer = f"smoke_helpers:{reducer}"
    return backend


def test_busbw_per_run_is_reported_not_judged_without_a_measurement(tmp_path: Path) -> None:
    fake = FakeNvml(["h100-sxm"] * 4)
    result = run(tmp_path, fake, _gpu_like(fake, "timed_bus"), checks=["nccl"])
    nccl = outcome(result, "nccl")
    assert nccl["status"] == "pass", nccl
    figures = nccl["figures"]
    assert figures["busbw_gbs"] == [round(67.108864 * 1.5, 2)] * allreduce.RUNS
    assert figures["algbw_gbs"] == [67.11] * allreduce.RUNS
    assert figures["bus"] == "NVLink4"
    assert figures["bus_peak_gbs"] == 450.0  # 18 links x 25 GB/s, one direction
    assert figures["bus_min_gbs"] is None
    assert "no measured all-reduce bus bandwidth for NVLink4" in figures["bus_source"]
    assert figures["busbw_of_peak"] == round(100.66 / 450, 3)
    summary = "\n".join(result.summary)  # the job summary reads flat figures, not a dict
    assert "bus=NVLink4 bus_peak_gbs=450.0" in summary and "busbw_gbs=100.66/" in summary


def test_busbw_under_a_measured_floor_fails(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setitem(models.BUSBW_MEASURED, "NVLink4", (300.0, "measured by a test"))
    fake = FakeNvml(["h100-sxm"] * 4)
    nccl = outcome(run(tmp_path, fake, _gpu_like(fake, "timed_bus"), checks=["nccl"]), "nccl")
    assert nccl["status"] == "fail"
    assert nccl["reason"].startswith(
        "all-reduce bus bandwidth 100.7 GB/s (median of 5 runs) is under the 300 GB/s minimum "
        "for NVLink4 (measured by a test)"
    )


def test_min_busbw_gbs_judges_any_bus(tmp_path: Path) -> None:
    fake = FakeNvml(["t4", "t4"])
    backend = _gpu_like(fake, "timed_bus")
    failed = outcome(run(tmp_path, fake, backend, checks=["nccl"], min_busbw_gbs=80), "nccl")
    assert failed["status"] == "fail" and "80 GB/s minimum for PCIe Gen3 x16" in failed["reason"]
    passed = outcome(run(tmp_path, fake, backend, checks=["nccl"], min_busbw_gbs=60), "nccl")
    assert passed["status"] == "pass" and passed["figures"]["bus_source"] == "min-busbw-gbs"


def test_the_cpu_stand_in_is_reported_not_judged(tmp_path: Path) -> None:
    fake = FakeNvml(["h100-sxm", "h100-sxm"])
    nccl = outcome(run(tmp_path, fake, backend_reducing_with("timed_bus"), checks=["nccl"]), "nccl")
    assert nccl["status"] == "pass"
    assert nccl["figures"]["bus_source"] == "the CPU stand-in: reported, not judged"
    # the stock numpy reducer times its runs too, so the whole path runs in CI
    stock = outcome(run(tmp_path, fake, NumpyBackend(devices=2), checks=["nccl"]), "nccl")
    assert len(stock["figures"]["busbw_gbs"]) == allreduce.RUNS


def test_a_reducer_without_timing_says_so(tmp_path: Path) -> None:
    fake = FakeNvml(["h100-sxm"] * 2)
    nccl = outcome(run(tmp_path, fake, _gpu_like(fake, "untimed_bus"), checks=["nccl"]), "nccl")
    assert nccl["status"] == "pass"
    assert nccl["figures"]["busbw_gbs"] is None
    assert nccl["figures"]["bus_source"] == "the all-reduce reported no timing: not judged"


def test_other_processes_make_busbw_report_only(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setitem(models.BUSBW_MEASURED, "NVLink4", (300.0, "measured by a test"))
    fake = FakeNvml(["h100-sxm"] * 2)
    fake.set(1, processes=[(4242, 1 << 30)])
    nccl = outcome(run(tmp_path, fake, _gpu_like(fake, "timed_bus"), checks=["nccl"]), "nccl")
    assert nccl["status"] == "pass"
    assert nccl["figures"]["bus_source"] == "other processes on the GPUs: not judged"


def test_the_bus_is_as_fast_as_its_slowest_gpu() -> None:
    sxm = gpu_link("NVIDIA H100 80GB HBM3", "Hopper", tuple(range(18)), (5, 16))
    fewer = gpu_link("NVIDIA H100 80GB HBM3", "Hopper", tuple(range(9)), (5, 16))
    a100 = gpu_link("NVIDIA A100-SXM4-80GB", "Ampere", tuple(range(12)), (4, 16))
    bridged = gpu_link("NVIDIA H100 NVL", "Hopper", (0, 1, 2), (5, 16))
    t4 = gpu_link("Tesla T4", "Turing", None, (3, 16))
    assert all_reduce_bus([sxm, sxm]).kind == "NVLink4"
    assert all_reduce_bus([sxm, fewer]).peak_gbs == 225.0  # links down: the slowest GPU
    assert all_reduce_bus([a100] * 8).peak_gbs == 300.0
    assert bridged == GpuLink(None, 0, (5, 16))  # a bridge links pairs: PCIe across more
    assert all_reduce_bus([bridged, bridged]).kind == "PCIe Gen5 x16"
    assert all_reduce_bus([sxm, t4]).kind == "PCIe Gen3 x16"  # mixed: PCIe, its slowest link
    assert all_reduce_bus([t4, t4]).peak_gbs == 15.8
    assert all_reduce_bus([sxm, None]).kind == "unknown"


@pytest.mark.parametrize(
    "line",
    [
        '{"timing": {"bytes": 134217728, "per_run": 4, "seconds": [-1.0]}}',
        '{"timing": {"bytes": 0, "per_run": 4, "seconds": [0.01]}}',
        '{"timing": {"bytes": 134217728, "per_run": 0, "seconds": [0.01]}}',
        '{"timing": {"bytes": 134217728, "per_run": 4, "seconds": []}}',
        '{"timing": {"bytes": "x", "per_run": 4, "seconds": [0.01]}}',
        '{"timing": [1, 2]}',
        '{"timing": not json',
        '{"timing": {"bytes": 1e400, "per_run": 4, "seconds": [0.01]}}',  # was OverflowError
        '{"timing": {"bytes": 8, "per_run": 4, "seconds": [' + "9" * 400 + "]}}",
        '{"timing": ' + "[" * 100_000 + "]" * 100_000 + "}",  # was RecursionError
    ],
)
def test_a_malformed_timing_line_is_no_timing(line: str) -> None:
    """The child's output is an input: a bad timing line reads as none, never a crash."""
    assert allreduce._timing(line + "\n") is None


def test_a_timing_line_is_capped() -> None:
    body = {"timing": {"bytes": 8, "per_run": 1, "seconds": [0.5] * 10_000}}
    timing = allreduce._timing(json.dumps(body))
    assert timing is not None and len(timing.seconds) == allreduce.MAX_RUNS
