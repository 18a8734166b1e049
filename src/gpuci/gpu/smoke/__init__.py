"""``gpu-smoke``: catch a bad GPU node in seconds, before the expensive job starts.

The run: read NVML (health before), listen for XIDs, drive a load through torch or cupy
(context, GEMM, device bandwidth, host-device bandwidth with the PCIe link read under load,
memory patterns, NCCL), optionally ``dcgmi diag``, read NVML again (health after). Every check
ends pass, fail or skip-with-reason inside one time budget. Nothing here imports boto3,
tenacity or httpx, so it runs on a plain GPU image.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any

from gpuci import files
from gpuci.errors import ExitCode, InputError, NvmlUnavailable
from gpuci.gpu.nvml import GpuInfo, NvmlSession, Snapshot, open_nvml
from gpuci.gpu.smoke import dcgm, load
from gpuci.gpu.smoke.backends import Backend, BackendUnavailable, installed, resolve_framework
from gpuci.gpu.smoke.checks import (
    CHECK_NAMES,
    LOAD_CHECKS,
    Budget,
    CheckError,
    Context,
    Outcome,
    Planned,
    run_check,
)
from gpuci.gpu.smoke.health import LoadSampler, XidListener, judge
from gpuci.gpu.smoke.load import Rates, Sizes, Target
from gpuci.gpu.smoke.models import Minimums, minimums
from gpuci.gpu.smoke.report import REPORT_NAME, SCHEMA, summary_tables
from gpuci.redact import excerpt
from gpuci.runtime import Result, Runtime

COMMAND = "gpu-smoke"

NO_GPU_HINT = (
    "run gpu-smoke on a GPU runner (containers need the NVIDIA container toolkit, e.g. "
    "--gpus all); use --dry-run to plan without one"
)


def selected_checks(values: dict[str, Any]) -> list[str]:
    """The ``checks`` input, validated; empty means all. ``dcgm`` joins when a level is set."""
    asked = [c.strip().lower() for c in values.get("checks") or []]
    unknown = [c for c in asked if c not in CHECK_NAMES]
    if unknown:
        raise InputError(
            f"unknown check(s) in checks: {', '.join(unknown)}",
            hint="use any of: " + ", ".join(CHECK_NAMES),
        )
    chosen = [c for c in CHECK_NAMES if c in asked] if asked else list(CHECK_NAMES)
    if int(values.get("dcgm-level") or 0) == 0 and "dcgm" in chosen:
        chosen.remove("dcgm")
        if "dcgm" in asked:
            raise InputError(
                "checks lists dcgm but dcgm-level is 0", hint="set dcgm-level to 1 or 2"
            )
    return chosen


def run(values: dict[str, Any], rt: Runtime) -> Result:
    """The command entry point (registry target ``gpuci.gpu.smoke:run``)."""
    return smoke(values, rt)


def smoke(
    values: dict[str, Any],
    rt: Runtime,
    *,
    nvml: Any = None,
    backend: Backend | None = None,
    sizes: Sizes | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Result:
    """The whole run; ``nvml``, ``backend``, ``sizes`` and ``clock`` are injected by tests."""
    budget = Budget(float(values.get("budget-seconds") or 30), clock)
    checks = selected_checks(values)
    if not 0 < float(values["memory-fraction"]) <= 1:
        raise InputError(
            f"input 'memory-fraction' is {values['memory-fraction']:g}: a fraction of free memory",
            hint="set memory-fraction between 0 (exclusive) and 1, e.g. 0.9",
        )
    framework = backend.name if backend is not None else resolve_framework(values["framework"])
    sizes = sizes or (Sizes() if backend is None or backend.is_gpu else Sizes.tiny())
    try:
        session = open_nvml(rt.environ, nvml)
    except NvmlUnavailable as exc:
        if rt.dry_run:
            return _dry_run(values, checks, framework, sizes, None, exc.message)
        hint = (exc.hint or "").split(", or set require-gpu")[0]  # gpu-setup's input, not ours
        return _infra_failure(
            values, rt, budget, NvmlUnavailable(exc.message, f"{hint}; or plan with --dry-run")
        )
    if backend is None and values["framework"] == "auto" and session.source.startswith("fake:"):
        framework = "none"  # fake NVML: there is no real GPU for torch or cupy to load
    try:
        snapshot = session.snapshot()
        if not snapshot.gpus and not rt.dry_run:
            raise NvmlUnavailable("no NVIDIA GPU found: NVML reports 0 devices", NO_GPU_HINT)
        if rt.dry_run:
            return _dry_run(values, checks, framework, sizes, snapshot, None)
        return _run(values, rt, session, snapshot, checks, framework, backend, sizes, budget)
    except NvmlUnavailable as exc:  # no GPU, or one fell off the bus mid-run
        return _infra_failure(values, rt, budget, exc)
    finally:
        session.close()


def _infra_failure(
    values: dict[str, Any], rt: Runtime, budget: Budget, exc: NvmlUnavailable
) -> Result:
    """Exit 3 in one line, and still ``passed: false`` and a report, so workflows can branch."""
    result = Result.from_error(COMMAND, exc)
    path = files.report_path(values, rt.environ, REPORT_NAME)
    seconds = round(budget.elapsed(), 2)
    result.report.update({"schema": SCHEMA, "command": COMMAND, "passed": False,
                          "seconds": seconds, "checks": [], "failed_checks": []})  # fmt: skip
    files.write_report(path, result.report, "smoke report", sort_keys=False)
    result.outputs = {"passed": False, "failed-checks": "", "report": str(path), "seconds": seconds}
    return result


# ----- planning --------------------------------------------------------------------------
def _params(name: str, values: dict[str, Any], sizes: Sizes) -> dict[str, Any]:
    return {
        "health": {"reads": "before, under load, after", "xid_events": "watched"},
        "context": {"tiny_kernel": "sum 0..65535"},
        "gemm": {"n": sizes.gemm_n, "dtype": "float16", "repeats": sizes.gemm_repeats},
        "membw": {"bytes": sizes.membw_bytes, "repeats": sizes.membw_repeats},
        "pcie": {"bytes": sizes.pcie_bytes, "repeats": sizes.pcie_repeats, "pinned": True},
        "memory": {
            "memory_fraction": values["memory-fraction"],
            "chunk_bytes": sizes.memory_chunk,
            "patterns": "0x00,0xAA,0x55,0xFF",
        },
        "nccl": {"elements": sizes.nccl_elements, "timeout_s": sizes.nccl_timeout_s},
        "dcgm": {"level": values.get("dcgm-level"), "command": "dcgmi diag -r N -j"},
    }[name]


def _dry_run(
    values: dict[str, Any],
    checks: list[str],
    framework: str,
    sizes: Sizes,
    snapshot: Snapshot | None,
    nvml_error: str | None,
) -> Result:
    """Which checks would run, on which GPUs, with which parameters and minimums; runs none."""
    gpus = list(snapshot.gpus) if snapshot else []
    plan = []
    for name in checks:
        why = None
        if name in LOAD_CHECKS and framework == "none":
            why = (
                "framework none: health only"
                if values["framework"] == "none"
                else "framework auto found no torch or cupy to drive a real GPU here: health only"
            )
        elif name == "nccl" and len(gpus) < 2:
            why = f"needs 2 or more GPUs, {len(gpus) if snapshot else 'unknown'} here"
        elif name == "dcgm":
            why = dcgm.absent_reason()
        plan.append({"check": name, "would_run": why is None, "reason": why,
                     "params": _params(name, values, sizes)})  # fmt: skip
    mins = {
        g.index: minimums(
            g.name, (g.pcie_gen_max, g.pcie_width_max), values.get("min-bandwidth-gbs")
        ).to_dict()
        for g in gpus
    }
    estimates = _dry_estimates(gpus, sizes, float(values["memory-fraction"]))
    for p in plan:
        p["estimate_s"] = round(estimates.get(p["check"], 0.0), 2) if p["would_run"] else 0.0
    total = sum(p["estimate_s"] for p in plan)
    rows = [
        [
            p["check"],
            "yes" if p["would_run"] else f"no: {p['reason']}",
            f"~{p['estimate_s']:g}s" if p["would_run"] else "-",
            _kv(p["params"]),
        ]
        for p in plan
    ]
    from gpuci.runtime import markdown_table

    where = (
        ", ".join(f"GPU {g.index} {g.name}" for g in gpus)
        if gpus
        else f"no GPU here ({nvml_error or 'NVML reports 0 devices'})"
    )
    running = sum(1 for p in plan if p["would_run"])
    budget_text = f"~{total:.0f}s of the {values['budget-seconds']:g}s budget"
    if gpus:
        headline = f"dry run: would run {running} of {len(plan)} check(s) on {where}, {budget_text}"
    else:  # nothing can run here: say so, and what a GPU runner would do
        headline = (
            f"dry run: {where}, so a real run here would fail (exit 3); on a GPU runner it "
            f"would run {running} of {len(plan)} check(s), {budget_text}"
        )
    result = Result(command=COMMAND, headline=headline)
    result.summary.append(
        f"#### gpu-smoke plan (framework {framework}, budget {values['budget-seconds']:g}s)\n\n"
        + markdown_table(("check", "would run", "estimate", "parameters"), rows)
        + f"\n\nEstimated total ~{total:.0f}s of the {values['budget-seconds']:g}s budget "
        "(from the model table; checks that would overrun at run time are skipped and reported)."
    )
    for g in gpus:
        m = mins[g.index]
        result.summary.append(
            f"GPU {g.index} {g.name}: least device copy bandwidth "
            f"{_gbs(m['mem_bw_gbs'])}, least host-device bandwidth {_gbs(m['h2d_gbs'])} "
            f"({m['source']})"
        )
    result.report = {
        "schema": SCHEMA,
        "command": COMMAND,
        "dry_run": True,
        "framework": framework,
        "framework_installed": {n: installed(n) for n in ("torch", "cupy")},
        "budget_seconds": values["budget-seconds"],
        "gpus": [{"index": g.index, "name": g.name, "uuid": g.uuid} for g in gpus],
        "minimums": mins,
        "nvml_error": nvml_error,
        "plan": plan,
        # dry-run marks the step "would fail here" on a fail; a plan never claims a pass
        # where no GPU could be checked.
        "verdict": "plan" if gpus else "fail",
    }
    result.outputs = {"passed": bool(gpus), "failed-checks": "", "report": "", "seconds": 0}
    return result


def _gbs(value: Any) -> str:
    return "not judged" if value is None else f"{value:g} GB/s"


def _dry_estimates(gpus: list[GpuInfo], sizes: Sizes, fraction: float) -> dict[str, float]:
    """Seconds each check would take on these GPUs, from the model table (all GPUs together)."""
    totals: dict[str, float] = {"health": 0.3}
    for g in gpus or [None]:
        name = g.name if g else None
        t = Target(0, None, name or "unknown", minimums(name), Rates.for_name(name))
        free = (g.memory_free or 0) if g else 0
        parts = {
            "context": sizes.context_estimate_s,
            "gemm": load.gemm_estimate(t, sizes),
            "membw": load.membw_estimate(t, sizes),
            "pcie": load.pcie_estimate(t, sizes),
            "memory": 3 * len(load.PATTERNS) * free * fraction / (t.rates.mem_bw_gbs * 1e9) + 0.5,
        }
        for key, value in parts.items():
            totals[key] = totals.get(key, 0.0) + value
    totals["nccl"] = sizes.nccl_timeout_s / 3
    totals["dcgm"] = dcgm.estimate(1)
    return totals


def _kv(params: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items())


# ----- the run ---------------------------------------------------------------------------
def _targets(
    backend: Backend, session: NvmlSession, gpus: list[GpuInfo], values: dict[str, Any]
) -> list[Target]:
    """Pair each framework device with its NVML GPU (by UUID, else by index when counts match)."""
    by_uuid: dict[str, GpuInfo] = {}
    for g in gpus:
        by_uuid[g.uuid] = g
        for m in g.mig_devices:
            by_uuid[m.uuid] = g
    count = backend.device_count()
    targets = []
    for i in range(count):
        uuid = backend.device_uuid(i)
        gpu = by_uuid.get(uuid) if uuid else None
        if (
            gpu is None
            and backend.is_gpu
            and count == len(gpus)
            and not any(backend.device_uuid(j) in by_uuid for j in range(count))
        ):
            gpu = gpus[i]  # no UUIDs to go by: same count, same (PCI bus) order
        if gpu is None and not backend.is_gpu and i < len(gpus):
            gpu = gpus[i]  # the CPU stand-in plays NVML GPU i (tests)
        name = gpu.name if gpu else f"device {i}"
        link_max = (gpu.pcie_gen_max, gpu.pcie_width_max) if gpu else (None, None)
        reader = None
        if gpu is not None:
            index = gpu.index

            def reader(index: int = index) -> tuple[int | None, int | None]:
                info = session.gpu(index)
                return info.pcie_gen_current, info.pcie_width_current

        override = values.get("min-bandwidth-gbs")
        if backend.is_gpu:
            mins = minimums(name, link_max, override)
        else:  # a CPU stand-in is not the GPU NVML names: judge only what the user set
            why = "min-bandwidth-gbs" if override else f"{backend.name} on the CPU: not judged"
            mins = Minimums(None, override, None, None, why)
        targets.append(
            Target(
                backend_index=i,
                nvml_index=gpu.index if gpu else None,
                name=name,
                minimums=mins,
                rates=Rates.for_name(name, backend.is_gpu),
                read_link=reader,
                link_max=link_max,
            )
        )
    return targets


def _plan_load(
    backend: Backend, targets: list[Target], checks: list[str], values: dict[str, Any], sizes: Sizes
) -> list[Planned]:
    fraction = float(values["memory-fraction"])
    plan: list[Planned] = []
    per_gpu = {
        "context": (
            lambda t: sizes.context_estimate_s,
            lambda t: partial(load.context, backend, t),
        ),
        "gemm": (
            lambda t: load.gemm_estimate(t, sizes),
            lambda t: lambda ctx: load.gemm(t, ctx, sizes),
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
            lambda t: load.memory_estimate(t, sizes, fraction),
            lambda t: lambda ctx: load.memory(t, ctx, sizes, fraction),
        ),
    }
    for name in ("context", "gemm", "membw", "pcie", "memory"):
        if name not in checks and name != "context":
            continue
        est, fn = per_gpu[name]
        for t in targets:
            plan.append(
                Planned(name, t.label, _params(name, values, sizes), partial(est, t), fn(t))
            )
    if "nccl" in checks:
        skip = None if len(targets) >= 2 else f"needs 2 or more GPUs, {len(targets)} here"
        plan.append(
            Planned(
                "nccl",
                None,
                _params("nccl", values, sizes),
                lambda: sizes.nccl_timeout_s / 3,
                lambda ctx: load.nccl(backend, targets, ctx, sizes),
                skip_reason=skip,
            )
        )
    return plan


def _run(
    values: dict[str, Any],
    rt: Runtime,
    session: NvmlSession,
    snapshot: Snapshot,
    checks: list[str],
    framework: str,
    backend: Backend | None,
    sizes: Sizes,
    budget: Budget,
) -> Result:
    gpus = list(snapshot.gpus)
    outcomes: list[Outcome] = []
    notes: list[str] = []  # warnings: the run tested less than asked
    info: dict[str, Any] = {}  # report-only facts
    wants_load = any(c in LOAD_CHECKS for c in checks)

    def record(outcome: Outcome) -> None:
        outcomes.append(outcome)
        figures = " ".join(f"{k}={v}" for k, v in outcome.figures.items() if v not in (None, []))
        text = f"{outcome.label}: {outcome.status} in {outcome.seconds:.2f}s"
        rt.log(text + (f": {outcome.reason}" if outcome.reason else "") + f" {figures}".rstrip())

    # Which GPUs: the framework's devices when a load runs, else every GPU NVML sees.
    targets: list[Target] = []
    load_skip: str | None = None  # why no load ran (a warning: the smoke tested less)
    load_broken: str | None = None  # why the framework cannot drive the GPUs (a failure)
    if wants_load and framework == "none":
        if values["framework"] == "none":
            load_skip = "framework none: health checks only, no load"
        elif snapshot.source.startswith("fake:"):
            load_skip = "fake NVML (GPUCI_FAKE_NVML): no real GPU to load; health checks only"
        else:
            load_skip = "neither torch nor cupy is installed: health checks only, no load"
    elif wants_load:
        started = time.perf_counter()
        try:
            if backend is None:
                from gpuci.gpu.smoke.backends import load_backend

                backend = load_backend(framework)
            targets = _targets(backend, session, gpus, values)
            if not targets:
                load_broken = f"{framework} sees no CUDA device although NVML lists {len(gpus)}"
        except BackendUnavailable as exc:
            load_broken = str(exc)
        except ImportError as exc:
            load_broken = f"{framework} failed to import: {excerpt(str(exc), 200)}"
        info["framework_load_s"] = round(time.perf_counter() - started, 3)
    if load_skip:
        notes.append(load_skip)
    watched = sorted({t.nvml_index for t in targets if t.nvml_index is not None}) or [
        g.index for g in gpus
    ]
    names = {g.index: g.name for g in gpus if g.index in watched}

    # Health before: the snapshot's read; then XIDs and clock events for the run's length.
    xids: XidListener | None = None
    sampler: LoadSampler | None = None
    if "health" in checks:
        xids = XidListener(session, watched).start()
        if xids.unsupported:
            notes.append(
                "XID events not reported for GPU(s) "
                + ",".join(map(str, xids.unsupported))
                + " (e.g. MIG or vGPU): not watched"
            )
        if targets:
            sampler = LoadSampler(session.health, watched, sizes.sample_interval_s).start()

    with rt.group(f"gpu-smoke: {len(watched)} GPU(s), framework {framework}"):
        for item in _plan_load(backend, targets, checks, values, sizes) if targets else []:
            record(run_check(item, budget))
        if load_broken:  # a GPU the framework cannot use is a finding about this node
            for index in watched:
                record(Outcome("context", index, "fail", f"no CUDA context: {load_broken}"))
        for name in (c for c in checks if c in LOAD_CHECKS and (load_skip or load_broken)):
            if name == "context" and load_broken:
                continue
            why = load_skip or f"no CUDA context ({framework} cannot use the GPU)"
            for index in watched if name != "nccl" else [None]:
                record(Outcome(name, index, "skip", why))
        if "dcgm" in checks:
            level = int(values["dcgm-level"])
            record(
                run_check(
                    Planned(
                        "dcgm",
                        None,
                        _params("dcgm", values, sizes),
                        lambda: dcgm.estimate(level),
                        lambda ctx: dcgm.run(level, ctx),
                        skip_reason=dcgm.absent_reason(),
                    ),
                    budget,
                )
            )
        if sampler is not None:
            sampler.stop()
        if "health" in checks and xids is not None:
            events = xids.stop()
            before = {g.index: g.health for g in gpus}
            for index in watched:
                clocks = sampler.seen.get(index) if sampler else None

                def health_check(ctx: Context, index: int = index, clocks: Any = clocks) -> dict:
                    after = session.health(index)
                    mine = [e.xid for e in events if e.gpu_index in (index, None)]
                    reasons, figures = judge(before[index], after, mine, clocks)
                    if index in xids.unsupported:
                        figures["xids"] = "not supported"
                    if reasons:
                        raise CheckError("; ".join(reasons), figures)
                    return figures

                record(
                    run_check(
                        Planned(
                            "health",
                            index,
                            _params("health", values, sizes),
                            lambda: 0.1,
                            health_check,
                            always=True,
                        ),
                        budget,
                    )
                )
            if xids.error:
                notes.append(f"XID listening stopped early: {xids.error}")
    return _result(values, rt, snapshot, outcomes, notes, info, framework, backend, budget, names)


def _result(
    values: dict[str, Any],
    rt: Runtime,
    snapshot: Snapshot,
    outcomes: list[Outcome],
    notes: list[str],
    info: dict[str, Any],
    framework: str,
    backend: Backend | None,
    budget: Budget,
    names: dict[int, str],
) -> Result:
    seconds = round(budget.elapsed(), 2)
    order = {n: i for i, n in enumerate(CHECK_NAMES)}
    outcomes.sort(key=lambda o: (o.gpu if o.gpu is not None else 1 << 30, order[o.name]))
    failed = [o for o in outcomes if o.status == "fail"]
    skipped = [o for o in outcomes if o.status == "skip"]
    passed = [o for o in outcomes if o.status == "pass"]
    path = files.report_path(values, rt.environ, REPORT_NAME)
    result = Result(command=COMMAND)
    result.exit_code = ExitCode.CHECK_FAILED if failed else ExitCode.OK
    gpu_text = ", ".join(f"GPU {i} {n}" for i, n in sorted(names.items()))
    if failed:
        result.headline = (
            f"{len(failed)} check(s) failed: "
            + "; ".join(f"{o.label} ({o.reason})" for o in failed)
            + " (fix: take this node out of the runner pool and rerun elsewhere; "
            f"the figures are in {path})"
        )
    else:
        result.headline = (
            f"{len(passed)} check(s) passed, {len(skipped)} skipped on {gpu_text} in {seconds:g}s"
        )
    for o in failed:
        result.error(f"{o.label}: {o.reason}", "gpu-smoke")
    for note in notes:
        result.warning(note, "gpu-smoke")
    budget_skips = [o for o in skipped if o.reason.startswith("skipped to keep the budget")]
    if budget_skips:
        result.warning(
            f"{len(budget_skips)} check(s) skipped to keep the {budget.total:g}s budget: "
            + ", ".join(o.label for o in budget_skips),
            "gpu-smoke",
        )
    result.summary = summary_tables(outcomes, names)
    result.outputs = {
        "passed": not failed,
        "failed-checks": ",".join(o.label for o in failed),
        "report": str(path),
        "seconds": seconds,
    }
    result.report = {
        "schema": SCHEMA,
        "command": COMMAND,
        "passed": not failed,
        "seconds": seconds,
        "budget_seconds": budget.total,
        "framework": framework,
        "backend": {"name": backend.name, "version": backend.version} if backend else None,
        "nvml_source": snapshot.source,
        "driver_version": snapshot.driver_version,
        "cuda_version": snapshot.cuda_text,
        "gpus": [{"index": g.index, "name": g.name, "uuid": g.uuid} for g in snapshot.gpus],
        "failed_checks": [o.label for o in failed],
        "notes": notes,
        **info,
        "checks": [o.to_dict() for o in outcomes],
        "report_path": str(path),
    }
    files.write_report(path, result.report, "smoke report", sort_keys=False)
    _journal(result, rt)
    return result


def _journal(result: Result, rt: Runtime) -> None:
    from gpuci import journal

    try:
        journal.record(
            COMMAND,
            {
                "passed": result.report["passed"],
                "failed_checks": result.report["failed_checks"],
                "seconds": result.report["seconds"],
                "gpus": result.report["gpus"],
            },
            rt.environ,
        )
    except OSError as exc:
        result.warning(f"could not append to the job journal: {exc}", "gpu-smoke")
