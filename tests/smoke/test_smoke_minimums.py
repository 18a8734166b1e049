"""Per-SKU minimums from published sustained measurements, on fake NVML GPUs.

A row with a measured figure judges GEMM and copy bandwidth at their shares of it and names the
source in the report; a row without one reports the figure and never fails on it, saying why.
The stand-in device reports the rate each test sets (``RatedGpus``): a T4 at its real
sustained 24 TFLOP/s, an H200 copying at 2700 GB/s (a healthy board's figure that 60 % of the
4800 GB/s datasheet peak, 2880, used to fail), an H100 NVL with nothing measured.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from smoke_helpers import RatedGpus, run

from gpuci.gpu._smoke.load import Sizes
from gpuci.gpu.fake.nvml import FakeNvml


def _run(tmp: Path, fake: FakeNvml, *, tflops: float = 1.0, gbs: float = 1.0,
         **inputs: Any) -> dict[str, dict[str, Any]]:  # fmt: skip
    """gpu-smoke's gemm and membw checks on ``fake``'s one GPU: ``{check: report entry}``."""
    backend = RatedGpus([fake.devices[0].uuid], tflops=tflops, gbs=gbs)
    result = run(tmp, fake, backend, sizes=Sizes.tiny(), checks=["gemm", "membw"], **inputs)
    return {c["name"]: c for c in result.report["checks"] if c["name"] in ("gemm", "membw")}


def test_a_t4_at_its_real_sustained_rate_is_judged_and_passes(tmp_path: Path) -> None:
    got = _run(tmp_path, FakeNvml(["t4"]), tflops=24.0, gbs=200.0)
    assert got["gemm"]["status"] == "pass"
    assert got["gemm"]["figures"]["min_tflops"] == 17  # 70 % of the ~24 measured under 70 W
    assert got["gemm"]["figures"]["min_basis"].startswith(
        "70% of 24 TFLOP/s measured (NVIDIA developer forum topic 264462"
    )
    # nothing measured for a T4's copy: reported, and the report says why
    membw = got["membw"]["figures"]
    assert got["membw"]["status"] == "pass" and membw["min_gbs"] is None
    assert membw["min_basis"] == "no measured sustained figure recorded for T4: reported only"


def test_a_t4_under_its_share_of_the_measured_rate_fails_naming_the_source(tmp_path):
    got = _run(tmp_path, FakeNvml(["t4"]), tflops=12.0, gbs=200.0)
    assert got["gemm"]["status"] == "fail"
    reason = got["gemm"]["reason"]
    assert reason.startswith("FP16 GEMM 12 TFLOP/s is below the 17 TFLOP/s minimum")
    assert "forum topic 264462" in reason and "cuBLAS FP16 4096^3, 70 W" in reason


def test_an_h200_is_judged_at_its_share_of_the_measured_copy_figure(tmp_path: Path) -> None:
    healthy = _run(tmp_path / "a", FakeNvml(["h200"]), tflops=700.0, gbs=2700.0)
    assert healthy["membw"]["status"] == "pass", healthy["membw"].get("reason")
    assert healthy["membw"]["figures"]["min_gbs"] == 2532  # 80 % of 3165 measured
    assert "gpu-benches gpu-stream" in healthy["membw"]["figures"]["min_basis"]
    assert healthy["gemm"]["status"] == "pass" and healthy["gemm"]["figures"]["min_tflops"] == 556

    slow = _run(tmp_path / "b", FakeNvml(["h200"]), tflops=700.0, gbs=2400.0)
    assert slow["membw"]["status"] == "fail"
    assert slow["membw"]["reason"].startswith(
        "device memory bandwidth 2400 GB/s is below the 2532 GB/s minimum (copy 80% of 3165 "
        "GB/s measured (gpu-benches gpu-stream scale kernel, D. Ernst (FAU), H200, 2023-12)"
    )


def test_a_row_without_a_measurement_reports_and_never_fails(tmp_path: Path) -> None:
    fake = FakeNvml(["h100-sxm"])
    fake.devices[0].p.name = "NVIDIA H100 NVL"  # its own row, with nothing measured on it
    got = _run(tmp_path, fake, tflops=1.0, gbs=10.0)  # far below any healthy board
    gemm, membw = got["gemm"], got["membw"]
    assert gemm["status"] == "pass" and gemm["figures"]["min_tflops"] is None
    assert membw["status"] == "pass" and membw["figures"]["min_gbs"] is None
    why = "no measured sustained figure recorded for H100-NVL: reported only"
    assert gemm["figures"]["min_basis"] == membw["figures"]["min_basis"] == why


def test_the_overrides_judge_a_row_without_a_measurement(tmp_path: Path) -> None:
    got = _run(tmp_path, FakeNvml(["l4"]), tflops=20.0, gbs=150.0,
               min_gemm_tflops=25.0, min_bandwidth_gbs=200.0)  # fmt: skip
    assert got["gemm"]["status"] == "fail" and got["gemm"]["figures"]["min_tflops"] == 25
    assert got["membw"]["status"] == "fail" and got["membw"]["figures"]["min_gbs"] == 200
    assert got["gemm"]["figures"]["min_basis"] == "min-gemm-tflops"
    assert got["membw"]["figures"]["min_basis"] == "min-bandwidth-gbs"
