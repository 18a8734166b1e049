"""Per-SKU minimums: vGPU profiles and nameless MIG devices are not whole GPUs, a board without
a measured sustained figure is reported not judged, the H200 NVL has its own row, the overrides
work, and the docs table says what the code does.

Then end to end on fake NVML GPUs, whose stand-in device reports the rate each test sets
(``RatedGpus``): a T4 at its real sustained 24 TFLOP/s, an H200 copying at 2700 GB/s (a healthy
board's figure that 60 % of the 4800 GB/s datasheet peak, 2880, used to fail), an H100 NVL with
nothing measured. A row with a measured figure judges GEMM and copy bandwidth at their shares of
it and names the source in the report; a row without one reports the figure, saying why.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from smoke_helpers import GpuLike, RatedGpus, run

from gpuci.gpu._nvml import open_nvml
from gpuci.gpu._smoke.load import Sizes
from gpuci.gpu._smoke.models import is_vgpu, minimums
from gpuci.gpu._smoke.targets import match_targets
from gpuci.gpu.fake.nvml import FakeNvml


@pytest.mark.parametrize(
    "name", ["NVIDIA A10-24Q", "GRID A100-40C", "NVIDIA L4-24Q", "GRID A100-3-20C", "GRID T4-16Q"]
)
def test_a_vgpu_profile_is_not_held_to_the_whole_boards_minimums(name: str) -> None:
    assert is_vgpu(name)
    mins = minimums(name, (4, 16))
    assert (mins.model, mins.mem_bw_gbs, mins.gemm_tflops, mins.h2d_gbs) == (None,) * 4
    assert "vGPU profile" in mins.source


@pytest.mark.parametrize(
    "name",
    ["NVIDIA A100-SXM4-40GB", "Tesla V100-SXM2-16GB", "NVIDIA H100 80GB HBM3", "NVIDIA A10G"],
)
def test_board_names_are_not_vgpu_profiles(name: str) -> None:
    assert not is_vgpu(name) and minimums(name).model is not None


@pytest.mark.parametrize("name", ["NVIDIA L4", "NVIDIA A10G", "NVIDIA L40S"])
def test_power_capped_boards_without_a_measurement_report_without_judging(name: str) -> None:
    # their datasheet peak is not sustained under the cap, and no sustained figure is recorded
    mins = minimums(name)
    assert mins.gemm_tflops is None and "power-capped" in mins.source
    assert mins.mem_bw_gbs is None and "no measured sustained figure" in mins.source
    assert minimums(name, override_gemm=20).gemm_tflops == 20
    assert minimums(name, override_mem_bw=150).mem_bw_gbs == 150


def test_a_t4_is_judged_from_its_measured_sustained_rate() -> None:
    # ~24 TFLOP/s sustained under the 70 W cap: 70 % of it, not 50 % of the 65 peak (32)
    mins = minimums("Tesla T4")
    assert mins.gemm_tflops == 17 and "forum topic 264462" in mins.source


def test_h200_nvl_has_its_own_row() -> None:
    nvl = minimums("NVIDIA H200 NVL")
    assert nvl.model == "H200-NVL" and nvl.gemm_tflops is None  # nothing measured on the NVL
    assert minimums("NVIDIA H200").gemm_tflops == 556  # 70 % of 794.5 measured


def test_a_mig_device_without_a_name_is_not_its_parent() -> None:
    fake = FakeNvml(["a100-mig"])
    with open_nvml({}, fake) as session:
        (gpu,) = session.snapshot().gpus
        nameless = replace(gpu, mig_devices=tuple(replace(m, name=None) for m in gpu.mig_devices))
        targets, _ = match_targets(GpuLike([fake.devices[0].migs[0].uuid]), session, [nameless], {})
    (t,) = targets
    assert t.name == "NVIDIA A100-SXM4-40GB MIG"
    assert t.minimums.gemm_tflops is None and t.minimums.mem_bw_gbs is None  # reported only


# ----- every figure has a source, and the docs table says the same as the code -------------
def _docs_rows() -> dict[str, list[str]]:
    from pathlib import Path

    text = (Path(__file__).parents[2] / "docs" / "gpu-smoke.md").read_text()
    section = text.split("## Per-model minimums", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[0] not in ("key", "---"):
            rows[cells[0]] = cells
    return rows


def test_every_model_row_is_in_the_docs_table_with_its_figures_and_source() -> None:
    from gpuci.gpu._smoke.models import MODELS

    rows = _docs_rows()
    assert sorted(rows) == sorted(m.key for m in MODELS)
    for m in MODELS:
        _, bandwidth, gemm, memory, source, measured = rows[m.key]
        unjudged = "none (reported, not judged)"
        copy = unjudged if m.copy is None else f"{m.copy.value:g} ({m.min_mem_bw_gbs:g})"
        assert bandwidth == f"{m.mem_bw_gbs:g} / {copy}", m.key
        fast = unjudged if m.gemm is None else f"{m.gemm.value:g} ({m.min_gemm_tflops:g})"
        assert gemm == f"{m.fp16_tflops:g} / {fast}", m.key
        assert memory == f"{m.memory_gb:g}", m.key
        assert "datasheet" in source, m.key
        if m.copy is None and m.gemm is None:
            assert measured.startswith("none found"), m.key
        for figure in (m.copy, m.gemm):
            if figure is not None:  # who measured it, with a reference to the sources list
                assert "[" in measured and f"{figure.value:g}" in measured, (m.key, measured)


def test_every_model_row_names_its_source_in_a_comment() -> None:
    """A row without a comment above it naming the datasheet is a figure of unknown origin."""
    import inspect

    from gpuci.gpu._smoke import models

    lines = inspect.getsource(models).splitlines()
    rows = [i for i, line in enumerate(lines) if line.strip().startswith("Model(")]
    assert len(rows) == len(models.MODELS)
    for i in rows:
        block = []  # the comment lines right above the row
        while lines[i - 1 - len(block)].strip().startswith("#"):
            block.append(lines[i - 1 - len(block)])
        assert any("NVIDIA" in c and "datasheet" in c for c in block), lines[i]
    for m in models.MODELS:  # every measured figure is named, with its value, in a comment
        for figure in (m.copy, m.gemm):
            if figure is not None:
                assert f"{figure.value:g}" in "\n".join(lines), (m.key, figure)


@pytest.mark.parametrize("name", ["NVIDIA L4", "NVIDIA A10G", "NVIDIA L40S"])
def test_capped_boards_say_they_are_report_only(name: str) -> None:
    mins = minimums(name, (4, 16))
    assert mins.gemm_tflops is None and "reported only" in mins.source
    assert mins.h2d_gbs is not None  # the host link is still judged


# ----- end to end: the gemm and membw checks judged by the rows --------------------------
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
