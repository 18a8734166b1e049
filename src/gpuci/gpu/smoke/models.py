"""Per-model figures: what a healthy GPU of each kind reaches, and the least we accept.

Peaks are the datasheet numbers (memory bandwidth, dense FP16 tensor throughput). Minimums are
60 % of peak for device-memory copy bandwidth: a healthy board measures 75-90 % in a copy, so a
GPU below 60 % has a real problem (a downclocked memory, a throttled board) rather than noise.
Host-device minimums come from the PCIe link NVML reports (60 % of the link's raw rate), so a
Gen4 host under a Gen5 GPU is judged by what it can do. Unknown models report figures and
never fail on them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Usable GB/s per lane after encoding overhead, by PCIe generation.
PCIE_LANE_GBS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}
SHARE_OF_PEAK = 0.6


@dataclass(frozen=True)
class Model:
    key: str
    pattern: str  # regular expression on the NVML/CUDA name
    mem_bw_gbs: float  # datasheet peak device memory bandwidth
    fp16_tflops: float  # datasheet dense FP16 tensor throughput
    pcie: tuple[int, int]  # nominal (generation, width), used when NVML does not say

    @property
    def min_mem_bw_gbs(self) -> float:
        return round(self.mem_bw_gbs * SHARE_OF_PEAK)


# Most specific first: "H100 NVL" before "H100"; \b keeps "GH200" from matching "H200".
MODELS: tuple[Model, ...] = (
    Model("H200", r"\bH200\b", 4800, 989, (5, 16)),
    Model("H100-NVL", r"\bH100 NVL\b", 3900, 835, (5, 16)),
    Model("H100-SXM", r"\bH100\b.*(SXM|HBM3)", 3350, 989, (5, 16)),
    Model("H100-PCIe", r"\bH100\b", 2000, 756, (5, 16)),
    Model("A100-80GB", r"\bA100\b.*80GB", 2039, 312, (4, 16)),
    Model("A100-40GB", r"\bA100\b", 1555, 312, (4, 16)),
    Model("L40S", r"\bL40S\b", 864, 362, (4, 16)),
    Model("A10", r"\bA10G?\b", 600, 125, (4, 16)),
    Model("L4", r"\bL4\b", 300, 121, (4, 16)),
    Model("T4", r"\bT4\b", 320, 65, (3, 16)),
    Model("V100", r"\bV100\b", 900, 125, (3, 16)),
)


def lookup(name: str | None) -> Model | None:
    if not name:
        return None
    for model in MODELS:
        if re.search(model.pattern, name):
            return model
    return None


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
    h2d_gbs: float | None
    d2h_gbs: float | None
    source: str  # how the minimums were chosen, for the report

    def to_dict(self) -> dict[str, object]:
        return {
            "model": self.model,
            "mem_bw_gbs": self.mem_bw_gbs,
            "h2d_gbs": self.h2d_gbs,
            "d2h_gbs": self.d2h_gbs,
            "source": self.source,
        }


def minimums(
    name: str | None,
    link_max: tuple[int | None, int | None] = (None, None),
    override_mem_bw: float | None = None,
) -> Minimums:
    model = lookup(name)
    mem = override_mem_bw if override_mem_bw is not None else None
    sources = ["min-bandwidth-gbs"] if override_mem_bw is not None else []
    if model is None:
        sources.append("unknown model: host-device figures reported, not judged")
        return Minimums(None, mem, None, None, "; ".join(sources))
    if mem is None:
        mem = model.min_mem_bw_gbs
        sources.append(f"{model.key} table ({SHARE_OF_PEAK:.0%} of {model.mem_bw_gbs:g} GB/s)")
    link = pcie_gbs(*link_max)
    if link is None:
        link = pcie_gbs(*model.pcie)
        sources.append(f"PCIe Gen{model.pcie[0]} x{model.pcie[1]} nominal for {model.key}")
    else:
        sources.append(f"PCIe Gen{link_max[0]} x{link_max[1]} link from NVML")
    pcie_min = round(link * SHARE_OF_PEAK, 1) if link else None
    return Minimums(model.key, mem, pcie_min, pcie_min, "; ".join(sources))
