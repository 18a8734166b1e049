"""Per-model figures: what a healthy GPU of each kind sustains, and the least we accept.

Peaks are the datasheet numbers (memory bandwidth, dense FP16 tensor throughput, memory size);
they size the checks' time estimates and are reported, never judged against. Minimums rest on
**published measurements of sustained throughput** on that board (each row names them, and
docs/gpu-smoke.md keeps the table with who measured, when and how), all in this one table:

- device-memory copy bandwidth: 80 % of the lowest measured copy figure (STREAM convention:
  bytes read plus bytes written, buffers far larger than the L2);
- FP16 GEMM: 70 % of the lowest measured large dense FP16/BF16 product;
- a row without a measurement reports that figure and never fails on it, saying so
  ("no measured sustained figure recorded"); ``min-bandwidth-gbs`` / ``min-gemm-tflops`` set a
  minimum for any GPU (the figure measured on your own fleet);
- host-device: 60 % of the raw rate of the PCIe link NVML reports (so a Gen4 host under a Gen5
  GPU is judged by what it can do), and 50 % for device-to-host, which suffers most when the
  pinned buffer sits on the far socket of a dual-socket host.

Why those shares: a healthy board's copy figure moves a few percent run to run, but copy
methods differ (a copy-engine memcpy, BabelStream's copy, a one-double-per-thread kernel: one
H200 was measured at 3.2 and 4.0 TB/s), so the base is the lowest published figure and 20 %
more is left below it. GEMM on a power-limited board moves with the data (an A100 at 8192^3:
257 TFLOP/s on random inputs, 295 on zeros), the temperature and the shape (best shape vs
8192^3: 6 % on an A100), so 30 % is left; our small-integer inputs draw less power than random
ones, which errs on the passing side. A GPU with its power limit halved, its clocks held low or
a memory clock stepped down still falls below.

A MIG slice owns part of its GPU: its bandwidth minimum is scaled by its share of the memory
(``3g.20gb`` of an A100 40GB: half), its GEMM minimum by its share of the 7 compute slices,
and its host-device copies (copy engines shared with other slices) are reported, not judged.
Unknown models, and MIG slices whose profile cannot be read, report figures and never fail.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, replace

# Usable GB/s per lane after encoding overhead, by PCIe generation (PCI-SIG's transfer rates:
# 2.5/5 GT/s with 8b/10b, 8/16/32 GT/s with 128b/130b; Gen6 64 GT/s PAM4 with FLIT overhead).
PCIE_LANE_GBS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}
# Shares of the measured sustained figures (see the module docstring for why these).
COPY_SHARE_OF_MEASURED = 0.8
GEMM_SHARE_OF_MEASURED = 0.7
SHARE_OF_PEAK = 0.6  # host-to-device, of the PCIe link's raw rate (a choice, issue 15)
D2H_SHARE_OF_LINK = 0.5  # a margin for a far-socket pinned buffer
MIG_COMPUTE_SLICES = 7  # A100, H100 and H200 split into at most 7 compute slices
MIG_PROFILE = re.compile(r"\bMIG\s+(?P<g>\d+)g\.(?P<gb>\d+)gb\b", re.IGNORECASE)
# A vGPU guest's NVML name carries the profile after the board: "NVIDIA A10-24Q", "GRID
# A100-40C", "NVIDIA L4-24Q", "GRID A100-3-20C" (MIG-backed). The letter is the vGPU series
# (A apps, B vPC, C compute, Q workstation); the guest gets a time slice or a partition of the
# board, so whole-GPU minimums do not apply.
VGPU_PROFILE = re.compile(r"\b[A-Z]+\d+[A-Z]*(?:-\d+)+[ABCQ]\b")
UNMEASURED = "no measured sustained figure recorded"


@dataclass(frozen=True)
class Measured:
    """A sustained figure someone measured and published: the value and, for the report, who."""

    value: float  # GB/s (copy, read + write counted) or TFLOP/s (dense FP16/BF16 GEMM)
    source: str  # who measured, on what, when: short, for the report


@dataclass(frozen=True)
class Model:
    key: str
    pattern: str  # regular expression on the NVML/CUDA name
    mem_bw_gbs: float  # datasheet peak device memory bandwidth (estimates, report)
    fp16_tflops: float  # datasheet dense FP16 tensor throughput (estimates, report)
    pcie: tuple[int, int]  # nominal (generation, width), used when NVML does not say
    memory_gb: float = 0.0  # datasheet memory size, to size a MIG slice's share
    copy: Measured | None = None  # lowest published sustained copy figure (None: report only)
    gemm: Measured | None = None  # lowest published sustained GEMM figure (None: report only)
    capped: bool = False  # a power-capped PCIe board: its datasheet GEMM peak is not sustained

    @property
    def min_mem_bw_gbs(self) -> float | None:
        return None if self.copy is None else round(self.copy.value * COPY_SHARE_OF_MEASURED)

    @property
    def min_gemm_tflops(self) -> float | None:
        return None if self.gemm is None else round(self.gemm.value * GEMM_SHARE_OF_MEASURED)

    @property
    def gemm_report_only(self) -> str | None:
        """Why GEMM is reported, not judged, on this model (None: judged)."""
        if self.gemm is not None:
            return None
        why = f"{UNMEASURED} for {self.key}"
        return why + (f", a {_CAPPED}" if self.capped else "") + ": reported only"

    @property
    def copy_report_only(self) -> str | None:
        return None if self.copy is not None else f"{UNMEASURED} for {self.key}: reported only"


# Power-capped PCIe boards: the datasheet peak is a boost-clock figure the card cannot hold
# under its cap (a T4 sustains about 24 of its 65 TFLOP/s at 70 W, which NVIDIA calls
# expected). Our small-integer inputs also draw less power than real data, so a capped card
# looks faster on them than in use; only a measured sustained figure can judge one.
_CAPPED = "power-capped board whose datasheet peak is not sustained"

# ----- published sustained measurements (full references: docs/gpu-smoke.md) -------------
# gpu-benches: github.com/te42kyfo/gpu-benches (Dominik Ernst, FAU Erlangen), commit
# 1c36d509ee717dca9215c27135fa1e611bb03ed1, gpu-stream/<gpu>.txt: the "scale" kernel
# (A[i] = B[i] * c, one load and one store stream, 1 GiB double arrays, read + write counted),
# last row (100 % occupancy). Files committed 2023-01-23 (V100, A100, H100 PCIe), 2023-12-13
# (H200). The files do not name the board variant (SXM or PCIe) unless the name says it.
_STREAM = "gpu-benches gpu-stream scale kernel, D. Ernst (FAU)"
# Azure AI-benchmarking-guide: github.com/Azure/AI-benchmarking-guide (Microsoft Azure),
# commit 8fd0c6e1bd0f853ef8f0500a3640a7d80a2a92ef, Azure_Results/ND_*_results.md (2024-09):
# "HBM Bandwidth" (BabelStream's CUDA copy, read + write counted) and "GEMM CuBLASLt" (random
# initialization, 10,000 warm-up iterations; FP16 on the A100, FP8 only on H100/H200).
_AZURE = "Azure AI-benchmarking-guide"
# MAMF: github.com/stas00/ml-engineering (Stas Bekman and contributors), commit
# 744d01e18b79512572f64a6bbd8b5f4a725203a7, compute/accelerator/README.md, "Maximum Achievable
# Matmul FLOPS comparison table": torch.mm in BF16, the best of a search over shapes, mean of
# 100 iterations after 50 warm-up, rows dated 2026-07-30 in git blame.
_MAMF = "ml-engineering MAMF table, S. Bekman, BF16 torch.mm best shape"

# Most specific first: "H100 NVL" before "H100"; \b keeps "GH200" from matching "H200".
# Peaks: NVIDIA's product datasheet for the board (memory bandwidth, dense FP16 tensor TFLOP/s,
# i.e. half the "with sparsity" figure, memory size), as the comment on each row says.
# Measured: the lowest of the published sustained figures read for that board (the others
# read are in the comment and the docs); none means the row reports that figure only.
# Each row: Model(key, pattern, peak GB/s, peak FP16 TFLOP/s, PCIe (gen, width), GB, ...).
# fmt: off
MODELS: tuple[Model, ...] = (
    # NVIDIA H200 NVL datasheet: 4.8 TB/s HBM3e, FP16 tensor 1,671 sparse / 835 dense, 141 GB,
    # up to 600 W (PCIe card, NVLink bridge 2- or 4-way). Measured: none found.
    Model("H200-NVL", r"\bH200 NVL\b", 4800, 835, (5, 16), 141),
    # NVIDIA H200 (SXM) datasheet: 4.8 TB/s, FP16 tensor 1,979 sparse / 989 dense, 141 GB, 700 W.
    # Copy: gpu-stream h200.txt 3165 GB/s (2023-12: an SXM board, we infer, as the NVL card was
    # announced in November 2024; the file names no variant); Azure ND H200
    # v5 (8x H200 SXM) BabelStream copy 4.01 TB/s. GEMM: the MAMF table's H100 SXM row (794.5)
    # notes "H200 is the same" (its FP8 rows: H200 1453.4, H100 1402.6).
    Model("H200", r"\bH200\b", 4800, 989, (5, 16), 141,
          copy=Measured(3165, f"{_STREAM}, H200, 2023-12"),
          gemm=Measured(794.5, f"{_MAMF}, H100 SXM row: 'H200 is the same'")),
    # NVIDIA H100 NVL datasheet: 3.9 TB/s, FP16 tensor 1,671 sparse / 835 dense, 94 GB.
    # Measured: none found.
    Model("H100-NVL", r"\bH100 NVL\b", 3900, 835, (5, 16), 94),
    # NVIDIA H100 SXM5 datasheet: 3.35 TB/s, FP16 tensor 1,979 sparse / 989 dense, 80 GB.
    # Copy: Azure ND H100 v5 (H100 80GB HBM3) BabelStream copy 2.90 TB/s. GEMM: MAMF H100 SXM
    # 794.5 TFLOP/s (torch 2.7.0+cu126, best shape 2048x2048x13312).
    Model("H100-SXM", r"\bH100\b.*(SXM|HBM3)", 3350, 989, (5, 16), 80,
          copy=Measured(2900, f"{_AZURE}, ND H100 v5 BabelStream copy, 2024-09"),
          gemm=Measured(794.5, f"{_MAMF}, H100 SXM")),
    # NVIDIA H100 PCIe datasheet: 2.0 TB/s, FP16 tensor 1,513 sparse / 756 dense, 80 GB.
    # Copy: gpu-stream h100_pcie.txt 1704 GB/s (CUDA 11.7). GEMM: none found.
    Model("H100-PCIe", r"\bH100\b", 2000, 756, (5, 16), 80,
          copy=Measured(1704, f"{_STREAM}, H100 PCIe, 2023-01")),
    # NVIDIA A100 datasheet, 80GB SXM: 2,039 GB/s (the 80GB PCIe card: 1,935), FP16 tensor 312
    # dense (624 sparse). Copy: Azure ND A100 v4 (A100-SXM4-80GB) BabelStream copy 1.61 TB/s;
    # gpu-stream a100_80.txt 1732. GEMM: MAMF A100 PCIe 252.9 (torch 2.5.1+cu124, memory size
    # not stated; the PCIe card shares this row); Azure A100-SXM4-80GB cuBLASLt FP16 8192^3
    # 253.7; MAMF A100 SXM 271.2.
    Model("A100-80GB", r"\bA100\b.*80GB", 2039, 312, (4, 16), 80,
          copy=Measured(1610, f"{_AZURE}, ND A100 v4 BabelStream copy, 2024-09"),
          gemm=Measured(252.9, f"{_MAMF}, A100 PCIe")),
    # NVIDIA A100 datasheet, 40GB: 1,555 GB/s, FP16 tensor 312 dense. Copy: gpu-stream
    # a100_40.txt 1381 GB/s. GEMM: MAMF A100 PCIe 252.9 (the lowest of it, A100 SXM 271.2, and
    # H. He's A100 8192^3 cuBLAS on random inputs, 257, thonking.ai 2024).
    Model("A100-40GB", r"\bA100\b", 1555, 312, (4, 16), 40,
          copy=Measured(1381, f"{_STREAM}, A100 40GB, 2023-01"),
          gemm=Measured(252.9, f"{_MAMF}, A100 PCIe")),
    # NVIDIA L40S datasheet: 864 GB/s GDDR6, FP16 tensor 362 dense (733 sparse), 48 GB, 350 W.
    # Measured: none found (gpu-stream's L40, 770 GB/s, is another board).
    Model("L40S", r"\bL40S\b", 864, 362, (4, 16), 48, capped=True),
    # NVIDIA A10 datasheet: 600 GB/s, FP16 tensor 125 dense (250 sparse), 24 GB, 150 W. The A10G
    # (AWS G5) shares the row: AWS publishes its memory, not a tensor figure. Measured: none.
    Model("A10", r"\bA10G?\b", 600, 125, (4, 16), 24, capped=True),
    # NVIDIA L4 datasheet: 300 GB/s, FP16 tensor 242 sparse / 121 dense, 24 GB, 72 W.
    # Measured: none found.
    Model("L4", r"\bL4\b", 300, 121, (4, 16), 24, capped=True),
    # NVIDIA T4 datasheet: 320 GB/s, 65 TFLOP/s mixed-precision FP16, 16 GB, 70 W. GEMM: about
    # 24 TFLOP/s sustained (cuBLAS FP16 4096^3, mean of 100 products), which NVIDIA's forum
    # moderator calls expected under the 70 W cap (forums.developer.nvidia.com/t/264462).
    # Copy: none found.
    Model("T4", r"\bT4\b", 320, 65, (3, 16), 16, capped=True,
          gemm=Measured(24, "NVIDIA developer forum topic 264462, T4 cuBLAS FP16 4096^3, 70 W")),
    # NVIDIA V100 datasheet, SXM2: 900 GB/s, 125 TFLOP/s tensor, 16 GB (32 GB boards share the
    # row; the PCIe card's tensor figure is 112). Copy: gpu-stream v100.txt 802 GB/s (the
    # variant is not named). GEMM: none found.
    Model("V100", r"\bV100\b", 900, 125, (3, 16), 16,
          copy=Measured(802, f"{_STREAM}, V100, 2023-01")),
)
# fmt: on


def lookup(name: str | None) -> Model | None:
    """The table row of a whole GPU; a MIG slice's or a vGPU's name finds none."""
    if not name or is_mig(name) or is_vgpu(name):
        return None
    return _row(name)


def _row(name: str) -> Model | None:
    for model in MODELS:
        if re.search(model.pattern, name):
            return model
    return None


def is_vgpu(name: str | None) -> bool:
    """A vGPU profile name (``NVIDIA A10-24Q``): a share of a board, not the board."""
    return bool(name) and VGPU_PROFILE.search(name or "") is not None


def is_mig(name: str | None) -> bool:
    return bool(name) and re.search(r"\bMIG\b", name or "") is not None


def pcie_gbs(gen: int | None, width: int | None) -> float | None:
    """Raw one-direction rate of a PCIe link in GB/s, or None when either side is unknown."""
    if not gen or not width or gen not in PCIE_LANE_GBS:
        return None
    return PCIE_LANE_GBS[gen] * width


@dataclass(frozen=True)
class Minimums:
    """The figures one GPU is held to; ``None`` means "report, don't judge"."""

    model: str | None
    mem_bw_gbs: float | None
    gemm_tflops: float | None
    h2d_gbs: float | None
    d2h_gbs: float | None
    source: str  # how the minimums were chosen, for the report
    # What each of the two speed minimums rests on (the measured figure and who measured it,
    # an input, or why it is not judged), shown beside the figure in the check's report.
    mem_bw_basis: str | None = None
    gemm_basis: str | None = None

    def to_dict(self) -> dict[str, object]:
        return asdict(self)  # the report's keys, in the order of the fields


def minimums(
    name: str | None,
    link_max: tuple[int | None, int | None] = (None, None),
    override_mem_bw: float | None = None,
    override_gemm: float | None = None,
) -> Minimums:
    found = _minimums(name, link_max, override_mem_bw)
    if override_gemm is None:
        return found
    source = found.source + "; min-gemm-tflops"
    return replace(found, source=source, gemm_tflops=override_gemm, gemm_basis="min-gemm-tflops")


def _minimums(
    name: str | None,
    link_max: tuple[int | None, int | None],
    override_mem_bw: float | None,
) -> Minimums:
    if is_mig(name):
        return _mig_minimums(name or "", override_mem_bw)
    model = lookup(name)
    mem = override_mem_bw if override_mem_bw is not None else None
    copy_basis = "min-bandwidth-gbs" if override_mem_bw is not None else None
    sources = ["min-bandwidth-gbs"] if override_mem_bw is not None else []
    if model is None:
        what = "vGPU profile (a share of a board)" if is_vgpu(name) else "unknown model"
        sources.append(f"{what}: GEMM and host-device figures reported, not judged")
        return Minimums(None, mem, None, None, None, "; ".join(sources), mem_bw_basis=copy_basis)
    if mem is None:
        mem = model.min_mem_bw_gbs
        copy_basis = _basis(COPY_SHARE_OF_MEASURED, model.copy, "GB/s", model.copy_report_only)
        sources.append(("copy " if model.copy else "copy bandwidth not judged: ") + copy_basis)
    gemm_basis = _basis(GEMM_SHARE_OF_MEASURED, model.gemm, "TFLOP/s", model.gemm_report_only)
    sources.append(("GEMM " if model.gemm else "GEMM not judged: ") + gemm_basis)
    link = pcie_gbs(*link_max)
    if link is None:
        link = pcie_gbs(*model.pcie)
        sources.append(f"PCIe Gen{model.pcie[0]} x{model.pcie[1]} nominal for {model.key}")
    else:
        sources.append(f"PCIe Gen{link_max[0]} x{link_max[1]} link from NVML")
    h2d = round(link * SHARE_OF_PEAK, 1) if link else None
    d2h = round(link * D2H_SHARE_OF_LINK, 1) if link else None
    return Minimums(model.key, mem, model.min_gemm_tflops, h2d, d2h, "; ".join(sources),
                    copy_basis, gemm_basis)  # fmt: skip


def _basis(share: float, measured: Measured | None, unit: str, unmeasured: str | None) -> str:
    """``80% of 3165 GB/s measured (who, on what, when)``, or why the figure is not judged."""
    if measured is None:
        return unmeasured or UNMEASURED
    return f"{share:.0%} of {measured.value:g} {unit} measured ({measured.source})"


def _mig_minimums(name: str, override_mem_bw: float | None) -> Minimums:
    """A slice's share of its GPU's minimums, or none when the profile cannot be read."""
    parent = _row(name)
    profile = MIG_PROFILE.search(name)
    if parent is None or profile is None or not parent.memory_gb:
        why = "MIG slice of an unknown model or profile: figures reported, not judged"
        if override_mem_bw is not None:
            why = "min-bandwidth-gbs; " + why
        basis = "min-bandwidth-gbs" if override_mem_bw is not None else None
        return Minimums(None, override_mem_bw, None, None, None, why, mem_bw_basis=basis)
    slices = int(profile["g"])
    memory_share = min(1.0, int(profile["gb"]) / parent.memory_gb)
    compute_share = min(1.0, slices / MIG_COMPUTE_SLICES)
    key = f"{parent.key} MIG {slices}g.{profile['gb']}gb"
    whole_copy = _basis(COPY_SHARE_OF_MEASURED, parent.copy, "GB/s", parent.copy_report_only)
    if override_mem_bw is not None:
        mem, copy_basis = override_mem_bw, "min-bandwidth-gbs"
    elif parent.min_mem_bw_gbs is not None:
        mem = round(parent.min_mem_bw_gbs * memory_share)
        copy_basis = f"{whole_copy}, scaled to the slice's {memory_share:.0%} of memory"
    else:
        mem, copy_basis = None, whole_copy
    whole = parent.min_gemm_tflops
    gemm = None if whole is None else round(whole * compute_share)
    gemm_basis = _basis(GEMM_SHARE_OF_MEASURED, parent.gemm, "TFLOP/s", parent.gemm_report_only)
    if whole is not None:
        gemm_basis += f", scaled to {slices} of {MIG_COMPUTE_SLICES} compute slices"
    sources = [
        ("copy " if mem is not None else "copy bandwidth not judged: ") + copy_basis,
        ("GEMM " if gemm is not None else "GEMM not judged: ") + gemm_basis,
        "host-device not judged on a MIG slice (copy engines are shared)",
    ]
    return Minimums(key, mem, gemm, None, None, "; ".join(sources), copy_basis, gemm_basis)


# ----- all-reduce bus bandwidth ----------------------------------------------------------
# NVLink: data rate per link, one direction, GB/s (NVIDIA's datasheets: V100 SXM2 300 GB/s over
# 6 links, A100 SXM 600 over 12, H100/H200 SXM 900 over 18, B200 1.8 TB/s over 18, all counted
# both directions), and the generation each architecture carries.
NVLINK_LINK_GBS = {2: 25.0, 3: 25.0, 4: 25.0, 5: 50.0}
NVLINK_GENERATION = {"Volta": 2, "Ampere": 3, "Hopper": 4, "Blackwell": 5}
# Measured all-reduce bus bandwidth floors (GB/s) per interconnect, at the nccl check's buffer
# (32 Mi float32 = 128 MiB), with who measured them and when: ``{"NVLink4": (floor, "source")}``.
# Empty: no GPU has run the check yet (scripts/gpu-check.sh records the figure), and the
# published nccl-tests figures are for multi-GB messages, above the plateau a 128 MiB
# all-reduce reaches, so none of them is a floor here. Until then busbw is reported, with the
# link's datasheet peak beside it, and judged only against ``min-busbw-gbs``.
BUSBW_MEASURED: dict[str, tuple[float, str]] = {}


@dataclass(frozen=True)
class GpuLink:
    """What one GPU's all-reduce traffic can run over: its NVLinks (when it counts them) or PCIe.

    A bridged PCIe board (``H100 NVL``, an A100 PCIe pair) links only its bridge partner, so
    across more GPUs the traffic crosses PCIe: its NVLinks are not counted.
    """

    nvlink_generation: int | None  # None: no NVLink counted
    nvlinks: int  # links up
    pcie: tuple[int | None, int | None]  # (generation, width) of its PCIe link


def gpu_link(
    name: str,
    architecture: str | None,
    nvlinks_active: tuple[int, ...] | None,
    pcie: tuple[int | None, int | None],
) -> GpuLink:
    bridged = re.search(r"PCIe|NVL\b", name) is not None
    generation = NVLINK_GENERATION.get(architecture or "")
    if bridged or not nvlinks_active or generation is None:
        return GpuLink(None, 0, pcie)
    return GpuLink(generation, len(nvlinks_active), pcie)


@dataclass(frozen=True)
class Bus:
    """The interconnect an all-reduce runs over, and what its bus bandwidth is held to."""

    kind: str  # "NVLink4", "PCIe Gen5 x16", "unknown"
    peak_gbs: float | None  # datasheet one-direction rate of the slowest GPU's links
    min_gbs: float | None  # None: reported, not judged
    source: str

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def all_reduce_bus(links: list[GpuLink | None], override: float | None = None) -> Bus:
    """The bus of an all-reduce over GPUs with ``links``: as fast as the slowest GPU's links.

    Every GPU on NVLink of one generation: NVLink, its peak the fewest links up times the link
    rate. Anything else (one GPU without NVLink, a bridged board, mixed generations): PCIe, its
    peak the slowest PCIe link. ``override`` (``min-busbw-gbs``) is the floor when given.
    """
    known = [link for link in links if link is not None]
    generations = {link.nvlink_generation for link in known}
    if not known or len(known) < len(links):
        kind, peak = "unknown", None
    elif len(generations) == 1 and None not in generations:
        generation = generations.pop()
        assert generation is not None
        kind = f"NVLink{generation}"
        peak = min(link.nvlinks for link in known) * NVLINK_LINK_GBS[generation]
    else:
        rates = [pcie_gbs(*link.pcie) for link in known]
        slowest = min(known, key=lambda link: pcie_gbs(*link.pcie) or 0.0)
        gen, width = slowest.pcie
        kind = f"PCIe Gen{gen if gen else '?'} x{width if width else '?'}"
        peak = None if None in rates else min(r for r in rates if r is not None)
    peak = None if peak is None else round(peak, 1)
    if override is not None:
        return Bus(kind, peak, override, "min-busbw-gbs")
    if kind in BUSBW_MEASURED:
        floor, source = BUSBW_MEASURED[kind]
        return Bus(kind, peak, floor, source)
    return Bus(
        kind,
        peak,
        None,
        f"no measured all-reduce bus bandwidth for {kind} at this buffer size: reported, not "
        "judged (set min-busbw-gbs to judge)",
    )
