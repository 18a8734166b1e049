"""Planning gpu-smoke: each check's parameters, the dry-run plan, and the order checks run in.

The dry run says what a real run would do, on which GPUs, against which minimums, and what the
health check reads, without touching a GPU. The run order puts NCCL right after the contexts:
it needs every GPU at once and is the check a long memory test on 8 GPUs would otherwise push
past the budget.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from gpuci.gpu._gpu_info import GpuInfo, Snapshot
from gpuci.gpu._smoke import dcgm, gemm, load, memtest
from gpuci.gpu._smoke.backends import Backend, installed
from gpuci.gpu._smoke.checks import LOAD_CHECKS, CheckFn, Planned
from gpuci.gpu._smoke.load import Rates, Sizes, Target
from gpuci.gpu._smoke.models import minimums
from gpuci.gpu._smoke.report import COMMAND, SCHEMA
from gpuci.gpu._smoke.schedule import SERIAL
from gpuci.gpu.options import SmokeInputs
from gpuci.runtime import Result

# What the health check reads, named for the plan and the report.
HEALTH_READS = {
    "ecc": "volatile uncorrected ECC errors, before and after",
    "memory_repair": "retired pages pending / remapped rows (pending, failed, uncorrectable)",
    "pcie_replays": "PCIe replay counter, judged as a rate (more than 8 a minute fails)",
    "xid_events": "XID critical errors, listened for during the whole run",
    "clock_events": (
        "clock-event reasons polled under load; a hardware, thermal or power-brake slowdown "
        "fails only when seen in consecutive samples"
    ),
    "throttle_counters": (
        "NVML's cumulative violation counters (thermal, power brake), before and after: a "
        "slowdown over max-throttle-percent of the run (and at least 1 s) fails"
    ),
    "power_and_clocks": "enforced power limit and application clocks, before and after",
    "nvlink": "NVLink states and error counters, before and after (a link down fails)",
    "unreadable": "a read that answered before the load and errors after it fails the GPU",
}


# ----- planning --------------------------------------------------------------------------
def params(name: str, inp: SmokeInputs, sizes: Sizes) -> dict[str, Any]:
    table: dict[str, dict[str, Any]] = {
        "health": {"when": "before, under load, after", **HEALTH_READS},
        "context": {"tiny_kernel": "sum 0..65535"},
        "gemm": {"n": sizes.gemm_n, "dtype": "float16", "repeats": sizes.gemm_repeats},
        "membw": {"bytes": sizes.membw_bytes, "repeats": sizes.membw_repeats},
        "pcie": {"bytes": sizes.pcie_bytes, "repeats": sizes.pcie_repeats, "pinned": True},
        "memory": {
            "memory_fraction": inp.memory_fraction,
            "chunk_bytes": sizes.memory_chunk,
            "patterns": "0x00,0xAA,0x55,0xFF",
        },
        "nccl": {
            "elements": sizes.nccl_elements,
            "timeout_s": sizes.nccl_timeout_s,
            "busbw": "nccl-tests' bus bandwidth, median of the timed runs",
            "min_busbw_gbs": inp.min_busbw_gbs,
        },
        "dcgm": {"level": inp.dcgm_level, "command": "dcgmi diag -r N -j"},
    }
    return table[name]


@dataclass(frozen=True)
class Plan:
    """A dry run's outcome: which checks would run, on which GPUs, against which minimums."""

    inp: SmokeInputs
    framework: str
    gpus: list[GpuInfo]  # empty when NVML could not be read or lists none
    checks: list[dict[str, Any]]  # each: would_run (else why not), parameters, estimate_s
    minimums: dict[int, dict[str, Any]]  # by NVML index
    nvml_error: str | None

    @property
    def skipped(self) -> list[str]:
        return [p["check"] for p in self.checks if not p["would_run"]]


def dry_run(
    inp: SmokeInputs,
    checks: list[str],
    framework: str,
    sizes: Sizes,
    snapshot: Snapshot | None,
    nvml_error: str | None,
) -> Plan:
    """Which checks would run, on which GPUs, with which parameters and minimums; runs none."""
    gpus = list(snapshot.gpus) if snapshot else []
    mins = {
        g.index: minimums(
            g.name, (g.pcie_gen_max, g.pcie_width_max), inp.min_bandwidth_gbs, inp.min_gemm_tflops
        ).to_dict()
        for g in gpus
    }
    plan = _dry_plan(inp, checks, framework, sizes, gpus if snapshot else None)
    return Plan(inp, framework, gpus, plan, mins, nvml_error)


def render_plan(done: Plan) -> Result:
    """A dry run's Result: the headline, the plan table, each GPU's minimums, the report.

    Args:
        done: what :func:`gpuci.gpu._smoke.examine` returned in a dry run.

    Returns:
        Exit 0; ``passed`` false when there is no GPU here to check.
    """
    inp, plan, gpus, mins = done.inp, done.checks, done.gpus, done.minimums
    total = sum(p["estimate_s"] for p in plan)
    headline = _dry_headline(inp, plan, gpus, done.nvml_error, total)
    result = Result(command=COMMAND, headline=headline)
    result.summary.append(_plan_table(inp, plan, done.framework, total))
    result.summary += [_minimums_line(g, mins[g.index]) for g in gpus]
    result.report = {
        "schema": SCHEMA,
        "command": COMMAND,
        "dry_run": True,
        "framework": done.framework,
        "framework_installed": {n: installed(n) for n in ("torch", "cupy")},
        "budget_seconds": inp.budget_seconds,
        "gpus": [{"index": g.index, "name": g.name, "uuid": g.uuid} for g in gpus],
        "minimums": mins,
        "nvml_error": done.nvml_error,
        "plan": plan,
        # dry-run marks the step "would fail here" on a fail; a plan never claims a pass
        # where no GPU could be checked.
        "verdict": "plan" if gpus else "fail",
    }
    skipped = ",".join(done.skipped)
    result.outputs = {"passed": bool(gpus), "failed-checks": "", "skipped-checks": skipped,
                      "report": "", "seconds": 0}  # fmt: skip
    return result


def _dry_plan(
    inp: SmokeInputs,
    checks: list[str],
    framework: str,
    sizes: Sizes,
    gpus: list[GpuInfo] | None,
) -> list[dict[str, Any]]:
    """Each check: would it run here (else why not), its parameters and its estimate.

    ``gpus`` is None when NVML could not be read (the GPU count is unknown).
    """
    here = gpus or []
    plan: list[dict[str, Any]] = []
    for name in checks:
        why = None
        if name in LOAD_CHECKS and framework == "none":
            why = (
                "framework none: health only"
                if inp.framework == "none"
                else "framework auto found no torch or cupy to drive a real GPU here: health only"
            )
        elif name == "nccl" and len(here) < 2:
            why = f"needs 2 or more GPUs, {len(here) if gpus is not None else 'unknown'} here"
        elif name == "dcgm":
            why = dcgm.absent_reason()
        plan.append({"check": name, "would_run": why is None, "reason": why,
                     "params": params(name, inp, sizes)})  # fmt: skip
    estimates = _dry_estimates(here, sizes, inp.memory_fraction)
    for p in plan:
        p["estimate_s"] = round(estimates.get(p["check"], 0.0), 2) if p["would_run"] else 0.0
    return plan


def _dry_headline(
    inp: SmokeInputs,
    plan: list[dict[str, Any]],
    gpus: list[GpuInfo],
    nvml_error: str | None,
    total: float,
) -> str:
    where = (
        ", ".join(f"GPU {g.index} {g.name}" for g in gpus)
        if gpus
        else f"no GPU here ({nvml_error or 'NVML reports 0 devices'})"
    )
    running = sum(1 for p in plan if p["would_run"])
    budget_text = f"~{total:.0f}s of the {inp.budget_seconds:g}s budget"
    if gpus:
        return f"dry run: would run {running} of {len(plan)} check(s) on {where}, {budget_text}"
    # nothing can run here: say so, and what a GPU runner would do
    return (
        f"dry run: {where}, so a real run here would fail (exit 3); on a GPU runner it "
        f"would run {running} of {len(plan)} check(s), {budget_text}"
    )


def _plan_table(inp: SmokeInputs, plan: list[dict[str, Any]], framework: str, total: float) -> str:
    from gpuci.runtime import markdown_table

    rows = [
        [
            p["check"],
            "yes" if p["would_run"] else f"no: {p['reason']}",
            f"~{p['estimate_s']:g}s" if p["would_run"] else "-",
            _kv(p["params"]),
        ]
        for p in plan
    ]
    return (
        f"#### gpu-smoke plan (framework {framework}, budget {inp.budget_seconds:g}s)\n\n"
        + markdown_table(("check", "would run", "estimate", "parameters"), rows)
        + f"\n\nEstimated total ~{total:.0f}s of the {inp.budget_seconds:g}s budget "
        "(from the model table; checks that would overrun at run time are skipped and reported)."
    )


def _minimums_line(g: GpuInfo, m: dict[str, Any]) -> str:
    return (
        f"GPU {g.index} {g.name}: least device copy bandwidth "
        f"{_gbs(m['mem_bw_gbs'])}, least FP16 GEMM {_unit(m['gemm_tflops'], 'TFLOP/s')}, "
        f"least host-to-device {_gbs(m['h2d_gbs'])}, device-to-host {_gbs(m['d2h_gbs'])} "
        f"({m['source']})"
    )


def _gbs(value: Any) -> str:
    return _unit(value, "GB/s")


def _unit(value: Any, unit: str) -> str:
    return "not judged" if value is None else f"{value:g} {unit}"


def _dry_estimates(gpus: list[GpuInfo], sizes: Sizes, fraction: float) -> dict[str, float]:
    """Seconds each check would take on these GPUs, from the model table (all GPUs together)."""
    totals: dict[str, float] = {"health": 0.3}
    each: list[GpuInfo | None] = list(gpus) or [None]  # no GPU: one of an unknown model
    for g in each:
        name = g.name if g else None
        t = Target(0, None, name or "unknown", minimums(name), Rates.for_name(name))
        free = (g.memory_free or 0) if g else 0
        parts = {
            "context": sizes.context_estimate_s,
            "gemm": gemm.gemm_estimate(t, sizes),
            "membw": load.membw_estimate(t, sizes),
            "pcie": load.pcie_estimate(t, sizes),
            "memory": memtest.memory_seconds(free * fraction, t.rates),
        }
        for key, value in parts.items():
            # GPUs run their own checks at once (schedule.py): a wave costs its slowest GPU;
            # PCIe runs one GPU at a time (a shared host link), so it adds up.
            if key in SERIAL:
                totals[key] = totals.get(key, 0.0) + value
            else:
                totals[key] = max(totals.get(key, 0.0), value)
    totals["nccl"] = sizes.nccl_timeout_s / 3
    totals["dcgm"] = dcgm.estimate(1)
    return totals


def _kv(params: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items())


def plan_load(
    backend: Backend, targets: list[Target], checks: list[str], inp: SmokeInputs, sizes: Sizes
) -> list[Planned]:
    fraction = inp.memory_fraction
    plan: list[Planned] = []
    per_gpu: dict[str, tuple[Callable[[Target], float], Callable[[Target], CheckFn]]] = {
        "context": (
            lambda t: sizes.context_estimate_s,
            lambda t: partial(load.context, backend, t),
        ),
        "gemm": (
            lambda t: gemm.gemm_estimate(t, sizes),
            lambda t: lambda ctx: gemm.gemm(t, ctx, sizes),
        ),
        "membw": (
            lambda t: load.membw_estimate(t, sizes),
            lambda t: lambda ctx: load.membw(t, ctx, sizes),
        ),
        "pcie": (
            lambda t: load.pcie_estimate(t, sizes),
            lambda t: lambda ctx: load.pcie(t, ctx, sizes),
        ),
        "memory": (
            lambda t: memtest.memory_estimate(t, sizes, t.memory_fraction(fraction)),
            lambda t: lambda ctx: memtest.memory(t, ctx, sizes, t.memory_fraction(fraction)),
        ),
    }

    def add(name: str) -> None:
        est, fn = per_gpu[name]
        for t in targets:
            plan.append(Planned(name, t.label, params(name, inp, sizes), partial(est, t), fn(t)))

    add("context")  # what every load check stands on
    if "nccl" in checks:  # next: it needs all GPUs at once, and must not lose the budget race
        skip = None if len(targets) >= 2 else f"needs 2 or more GPUs, {len(targets)} here"
        plan.append(
            Planned(
                "nccl",
                None,
                params("nccl", inp, sizes),
                lambda: sizes.nccl_timeout_s / 3,
                lambda ctx: load.nccl(backend, targets, ctx, sizes),
                skip_reason=skip,
            )
        )
    for name in ("gemm", "membw", "pcie", "memory"):
        if name in checks:
            add(name)
    return plan
