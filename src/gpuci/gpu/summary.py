"""Job-summary markdown for gpu-setup: an overview, a table per GPU, and the checks."""

from __future__ import annotations

from gpuci.gpu.checks import CheckOutcome, gb
from gpuci.gpu.nvml import GpuInfo, Snapshot
from gpuci.runtime import markdown_table

_MARK = {"pass": "✅ pass", "fail": "❌ fail", "unsupported": "⚪ unsupported"}


def _or_dash(value: object) -> str:
    return "—" if value is None or value == "" else str(value)


def _pcie(gpu: GpuInfo) -> str:
    if gpu.pcie_gen_current is None and gpu.pcie_width_current is None:
        return "—"
    return (
        f"Gen{_or_dash(gpu.pcie_gen_current)}/{_or_dash(gpu.pcie_gen_max)} "
        f"x{_or_dash(gpu.pcie_width_current)}/{_or_dash(gpu.pcie_width_max)}"
    )


def _ecc(gpu: GpuInfo) -> str:
    h = gpu.health
    if h.ecc_enabled is False:
        return "off"
    problems = h.memory_problems()
    if problems:
        return "; ".join(problems)
    return "ok" if h.memory_counters_supported() else "—"


def overview(snapshot: Snapshot) -> str:
    head = (
        f"**GPUs** ({snapshot.source}): driver {_or_dash(snapshot.driver_version)}, "
        f"CUDA {_or_dash(snapshot.cuda_text)}"
    )
    rows = [
        [
            g.index,
            g.name,
            f"{gb(g.memory_total)} GB" if g.memory_total is not None else "—",
            _or_dash(g.cc_text),
            _or_dash(g.architecture),
            "on" if g.mig_enabled else ("off" if g.mig_enabled is False else "—"),
            _ecc(g),
        ]
        for g in snapshot.gpus
    ]
    table = markdown_table(["#", "GPU", "Memory", "CC", "Arch", "MIG", "ECC"], rows)
    return f"{head}\n\n{table}"


def gpu_table(gpu: GpuInfo) -> str:
    """Every field for one GPU; folded, because eight GPUs would drown the checks."""
    h = gpu.health
    rows: list[list[object]] = [
        ["UUID", gpu.uuid],
        ["Memory total / free", f"{gb(gpu.memory_total)} GB / {gb(gpu.memory_free)} GB"],
        ["Compute capability", _or_dash(gpu.cc_text)],
        ["Architecture", _or_dash(gpu.architecture)],
        ["PCIe (current/max)", _pcie(gpu)],
        ["Power limit", "—" if gpu.power_limit_w is None else f"{gpu.power_limit_w:g} W"],
        ["Temperature", "—" if h.temperature_c is None else f"{h.temperature_c} °C"],
        ["ECC volatile uncorrected", _or_dash(h.ecc_volatile_uncorrected)],
        ["Retired pages pending", _or_dash(h.retired_pages_pending)],
        ["Remapped rows pending", _or_dash(h.remapped_rows_pending)],
        ["Remapped rows failed", _or_dash(h.remapped_rows_failure)],
        ["PCIe replays", _or_dash(h.pcie_replay_counter)],
        ["Clock events", ", ".join(h.clock_events) or "none"],
        ["Processes", "—" if gpu.processes is None else len(gpu.processes)],
    ]
    for mig in gpu.mig_devices:
        rows.append([f"MIG {mig.index}: {mig.name}", f"{mig.uuid} ({gb(mig.memory_total)} GB)"])
    table = markdown_table(["Field", "Value"], [[k, _or_dash(v)] for k, v in rows])
    return f"<details><summary>GPU {gpu.index}: {gpu.name}</summary>\n\n{table}\n\n</details>"


def checks_table(checks: list[CheckOutcome]) -> str:
    rows = [[c.check, c.required, _MARK[c.outcome], c.reason] for c in checks]
    return "**Checks**\n\n" + markdown_table(["Check", "Required", "Outcome", "Reason"], rows)
