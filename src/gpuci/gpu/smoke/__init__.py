"""``gpu-smoke``: catch a bad GPU node in seconds, before the expensive job starts.

The run: read NVML (health before), listen for XIDs, drive a load through torch or cupy
(context, GEMM, device bandwidth, host-device bandwidth with the PCIe link read under load,
memory patterns, NCCL), optionally ``dcgmi diag``, read NVML again (health after). Every check
ends pass, fail or skip-with-reason inside one time budget. Nothing here imports boto3,
tenacity or httpx, so it runs on a plain GPU image.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpuci import files
from gpuci.errors import ExitCode, GpuciError, InputError, NvmlUnavailable
from gpuci.gpu.gpu_info import Snapshot, XidEvent
from gpuci.gpu.nvml import NvmlSession, open_nvml
from gpuci.gpu.smoke import dcgm
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
from gpuci.gpu.smoke.health import (
    LoadSampler,
    XidListener,
    confirm_clocks,
    judge,
    judge_nvlink,
    read_after,
    throttle_share,
)
from gpuci.gpu.smoke.load import Sizes, Target
from gpuci.gpu.smoke.plan import dry_run, params, plan_load
from gpuci.gpu.smoke.report import REPORT_NAME, SCHEMA, summary_tables
from gpuci.gpu.smoke.schedule import run_plan
from gpuci.gpu.smoke.targets import match_targets
from gpuci.gpu.visible import Visibility, job_view
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
            return dry_run(values, checks, framework, sizes, None, exc.message)
        hint = (exc.hint or "").split(", or set require-gpu")[0]  # gpu-setup's input, not ours
        return _infra_failure(
            values, rt, budget, NvmlUnavailable(exc.message, f"{hint}; or plan with --dry-run")
        )
    if backend is None and values["framework"] == "auto" and session.source.startswith("fake:"):
        framework = "none"  # fake NVML: there is no real GPU for torch or cupy to load
    try:
        host = session.snapshot()
        # The job's GPUs only: CUDA_VISIBLE_DEVICES applied (another tenant's GPU is not ours).
        snapshot, visibility = job_view(host, rt.environ)
        if not snapshot.gpus and not rt.dry_run:
            raise _no_gpu(host, visibility)
        if rt.dry_run:
            return dry_run(values, checks, framework, sizes, snapshot, None)
        return _run(
            values, rt, session, snapshot, checks, framework, backend, sizes, budget,
            host, visibility,
        )  # fmt: skip
    except (NvmlUnavailable, InputError) as exc:  # no GPU, or one fell off the bus mid-run
        return _infra_failure(values, rt, budget, exc)
    finally:
        session.close()


def _no_gpu(host: Snapshot, vis: Visibility) -> GpuciError:
    """Why there is nothing to test: no GPU, none openable, or none given to this job."""
    if vis.restricted and vis.hidden:
        return InputError(
            "no GPU to test: " + vis.describe_none(),
            hint="name this job's GPUs in CUDA_VISIBLE_DEVICES (indices, GPU-/MIG- UUIDs), "
            "or unset it",
        )
    if host.skipped:
        return NvmlUnavailable(
            f"no GPU to test: NVML lists {len(host.skipped)} GPU(s) but this process may open "
            f"none ({host.skipped[0].reason})",
            "give the job its GPUs (Slurm --gres=gpu:N, docker --gpus) or run as a user allowed "
            "to open /dev/nvidia*",
        )
    return NvmlUnavailable("no NVIDIA GPU found: NVML reports 0 devices", NO_GPU_HINT)


def _infra_failure(values: dict[str, Any], rt: Runtime, budget: Budget, exc: GpuciError) -> Result:
    """Exit 3 in one line, and still ``passed: false`` and a report, so workflows can branch."""
    result = Result.from_error(COMMAND, exc)
    path = files.report_path(values, rt.environ, REPORT_NAME)
    seconds = round(budget.elapsed(), 2)
    result.report.update({"schema": SCHEMA, "command": COMMAND, "passed": False,
                          "seconds": seconds, "checks": [], "failed_checks": []})  # fmt: skip
    files.write_report(path, result.report, "smoke report", sort_keys=False)
    result.outputs = {"passed": False, "failed-checks": "", "skipped-checks": "",
                      "report": str(path), "seconds": seconds}  # fmt: skip
    return result


# ----- the run ---------------------------------------------------------------------------
def _load_backend(framework: str, asked: str) -> tuple[Backend, str]:
    """Start the framework; with ``auto``, a torch that cannot use CUDA gives way to cupy."""
    from gpuci.gpu.smoke.backends import load_backend

    try:
        return load_backend(framework), framework
    except BackendUnavailable:
        if asked != "auto" or framework != "torch" or not installed("cupy"):
            raise
        return load_backend("cupy"), "cupy"


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
    host: Snapshot | None = None,
    visibility: Visibility | None = None,
) -> Result:
    """Scope (which GPUs, which framework) -> watch (XIDs, clocks) -> checks -> result."""
    gpus = list(snapshot.gpus)
    outcomes: list[Outcome] = []
    notes: list[str] = []  # warnings: the run tested less than asked
    info: dict[str, Any] = {}  # report-only facts
    for skipped in host.skipped if host else ():
        notes.append(
            f"GPU {skipped.index} could not be opened (NVML: {skipped.reason}): skipped, not "
            "tested (a device cgroup such as Slurm ConstrainDevices hides it)"
        )
    if visibility is not None and visibility.restricted:
        notes += list(visibility.notes)
        info["visibility"] = visibility.to_dict()
    load = _Load(backend, framework)
    if any(c in LOAD_CHECKS for c in checks):
        _prepare_load(load, values, session, snapshot, notes, info)
    if load.skip:
        notes.append(load.skip)
    watched = sorted({t.nvml_index for t in load.targets if t.nvml_index is not None}) or [
        g.index for g in gpus
    ]
    names = {g.index: g.name for g in gpus if g.index in watched}
    # Health before: the snapshot's read; then XIDs and clock events for the run's length.
    xids, sampler = _watch(session, checks, watched, load.targets, sizes, notes)
    with rt.group(f"gpu-smoke: {len(watched)} GPU(s), framework {load.framework}"):
        _run_checks(values, rt, session, snapshot, checks, load, sizes, budget, watched,
                    (xids, sampler), outcomes, notes)  # fmt: skip
    environment = _environment_problem(
        outcomes, load.broken, load.framework, load.built_cuda, snapshot, rt.environ
    )
    return _result(
        values, rt, snapshot, outcomes, notes, info, load.framework, load.backend, budget, names,
        environment,
    )  # fmt: skip


@dataclass
class _Load:
    """What the load checks can drive: the framework, its GPUs, or why none (skip or broken)."""

    backend: Backend | None
    framework: str
    targets: list[Target] = field(default_factory=list)
    skip: str | None = None  # why no load ran (a warning: the smoke tested less)
    broken: str | None = None  # why the framework cannot drive the GPUs (a failure)
    built_cuda: str | None = None  # the CUDA the framework was built for, when it said


def _prepare_load(
    load: _Load,
    values: dict[str, Any],
    session: NvmlSession,
    snapshot: Snapshot,
    notes: list[str],
    info: dict[str, Any],
) -> None:
    """Which GPUs a load runs on: the framework's devices matched to NVML's (or why none)."""
    gpus = list(snapshot.gpus)
    if load.framework == "none":
        if values["framework"] == "none":
            load.skip = "framework none: health checks only, no load"
        elif snapshot.source.startswith("fake:"):
            load.skip = "fake NVML (GPUCI_FAKE_NVML): no real GPU to load; health checks only"
        else:
            load.skip = "neither torch nor cupy is installed: health checks only, no load"
        return
    started = time.perf_counter()
    try:
        if load.backend is None:
            load.backend, load.framework = _load_backend(load.framework, values["framework"])
        load.targets, match_notes = match_targets(load.backend, session, gpus, values)
        notes += match_notes
        notes += [
            f"GPU {t.label}: {t.others} other process(es) on it: GEMM and bandwidth "
            "reported, not judged; memory test capped at half the free memory"
            for t in load.targets
            if t.others
        ]
        if not load.targets:
            load.broken = f"{load.framework} sees no CUDA device although NVML lists {len(gpus)}"
    except BackendUnavailable as exc:
        load.broken = str(exc)
        load.built_cuda = exc.built_cuda
    except ImportError as exc:
        load.broken = f"{load.framework} failed to import: {excerpt(str(exc), 200)}"
    info["framework_load_s"] = round(time.perf_counter() - started, 3)


def _run_checks(
    values: dict[str, Any],
    rt: Runtime,
    session: NvmlSession,
    snapshot: Snapshot,
    checks: list[str],
    load: _Load,
    sizes: Sizes,
    budget: Budget,
    watched: list[int],
    watching: tuple[XidListener | None, LoadSampler | None],
    outcomes: list[Outcome],
    notes: list[str],
) -> None:
    """The load, dcgm and health checks while XIDs and clock events are watched; each outcome
    logged as it lands."""
    xids, sampler = watching
    lock = threading.Lock()

    def record(outcome: Outcome) -> None:
        with lock:
            outcomes.append(outcome)
            figures = " ".join(
                f"{k}={v}" for k, v in outcome.figures.items() if v not in (None, [])
            )
            text = f"{outcome.label}: {outcome.status} in {outcome.seconds:.2f}s"
            rt.log(
                text + (f": {outcome.reason}" if outcome.reason else "") + f" {figures}".rstrip()
            )

    if load.targets and load.backend is not None:
        # Each GPU's own checks on its own thread; NCCL and PCIe one at a time.
        run_plan(plan_load(load.backend, load.targets, checks, values, sizes), budget, record)
    if load.broken:  # a GPU the framework cannot use is a finding about this node
        for index in watched:
            record(Outcome("context", index, "fail", f"no CUDA context: {load.broken}"))
    for name in (c for c in checks if c in LOAD_CHECKS and (load.skip or load.broken)):
        if name == "context" and load.broken:
            continue
        why = load.skip or f"no CUDA context ({load.framework} cannot use the GPU)"
        where: list[int | None] = [None] if name == "nccl" else list(watched)
        for gpu in where:
            record(Outcome(name, gpu, "skip", why))
    if "dcgm" in checks:
        level = int(values["dcgm-level"])
        record(
            run_check(
                Planned(
                    "dcgm",
                    None,
                    params("dcgm", values, sizes),
                    lambda: dcgm.estimate(level),
                    lambda ctx: dcgm.run(level, ctx, watched),
                    skip_reason=dcgm.absent_reason(),
                ),
                budget,
            )
        )
    if sampler is not None:
        sampler.stop()
    if "health" in checks and xids is not None:
        for item in _health_checks(
            session, snapshot, watched, xids, sampler, values, sizes, budget
        ):
            record(run_check(item, budget))
        if xids.error:
            notes.append(f"XID listening stopped early: {xids.error}")


def _watch(
    session: NvmlSession,
    checks: list[str],
    watched: list[int],
    targets: list[Target],
    sizes: Sizes,
    notes: list[str],
) -> tuple[XidListener | None, LoadSampler | None]:
    """Start listening for XIDs (and sampling clocks under load) for the run's length."""
    if "health" not in checks:
        return None, None
    xids = XidListener(session, watched).start()
    if xids.setup_error:
        notes.append(f"XID events not watched on any GPU: {xids.setup_error}")
    elif xids.unsupported:
        notes.append(
            "XID events not reported for GPU(s) "
            + ",".join(map(str, xids.unsupported))
            + " (e.g. vGPU): not watched"
        )
    sampler = None
    if targets:
        sampler = LoadSampler(
            lambda i: session.health(i, counters=False), watched, sizes.sample_interval_s
        ).start()
    return xids, sampler


def _environment_problem(
    outcomes: list[Outcome],
    load_broken: str | None,
    framework: str,
    built_cuda: str | None,
    snapshot: Snapshot,
    environ: Any,
) -> str | None:
    """The image's fault, not the node's: no GPU started a context, yet NVML finds no fault.

    Then every context failure is the same one, and draining the node would not fix it.
    """
    from gpuci.gpu.smoke import environment

    contexts = [o for o in outcomes if o.name == "context"]
    if not contexts or any(o.status != "fail" for o in contexts):
        return None  # some GPU started: a per-GPU failure is about that GPU
    if any(o.status == "fail" and o.name in ("health", "dcgm") for o in outcomes):
        return None  # NVML (or DCGM) found a fault: the node is suspect after all
    why = load_broken or contexts[0].reason
    return environment.diagnose(
        why, framework, built_cuda, snapshot.cuda_version, environ, _has_libcuda
    )


def _has_libcuda() -> bool:
    from gpuci.gpu.smoke.environment import libcuda_loads

    return libcuda_loads()


def _health_checks(
    session: NvmlSession,
    snapshot: Snapshot,
    watched: list[int],
    xids: XidListener,
    sampler: LoadSampler | None,
    values: dict[str, Any],
    sizes: Sizes,
    budget: Budget,
) -> list[Planned]:
    """One ``health`` check per watched GPU: NVML after the load, judged against before."""
    events = xids.stop()
    before = {g.index: g.health for g in snapshot.gpus}
    links_before = {g.index: g.nvlink_active for g in snapshot.gpus}
    names = {g.index: g.name for g in snapshot.gpus}
    peers: dict[str, int] = {}  # model -> most NVLinks active on one GPU of it (judged GPUs)
    for g in snapshot.gpus:
        if g.index in watched and g.nvlink_active is not None:
            peers[g.name] = max(peers.get(g.name, 0), len(g.nvlink_active))
    slices = {  # the MIG GPU instances under test, per GPU in MIG mode
        g.index: {m.gpu_instance_id for m in g.mig_devices if m.gpu_instance_id is not None}
        for g in snapshot.gpus
        if g.mig_enabled
    }
    planned = []
    for index in watched:

        def health_check(ctx: Context, index: int = index) -> dict[str, Any]:
            after = read_after(session, index)
            sustained = sampler.streaks.sustained.get(index, 0) if sampler else 0
            if not sustained:  # a harmful reason in the last read alone: read again first
                sustained = confirm_clocks(
                    lambda: session.health(index, counters=False),
                    after.clock_event_reasons,
                    sizes.sample_interval_s,
                )
            ours = [e for e in events if e.gpu_index in (index, None)]
            # On a MIG GPU, an event from another GPU instance is another tenant's slice.
            others = [e.xid for e in ours if not _our_slice(e, slices.get(index))]
            mine = [e.xid for e in ours if _our_slice(e, slices.get(index))]
            reasons, figures = judge(
                before[index],
                after,
                mine,
                sustained,
                clocks_seen=sampler.seen.get(index) if sampler else None,
                seconds=budget.elapsed(),
                throttle_share=throttle_share(values),
            )
            if others:
                figures["other_instance_xids"] = others
            if xids.setup_error:
                figures["xids"] = "not watched"
            elif index in xids.unsupported:
                figures["xids"] = "not supported"
            link_reasons, link_figures = judge_nvlink(
                links_before.get(index),
                after.nvlink_active,
                peers.get(names[index]),
                bridged_board=bool(re.search(r"PCIe|NVL\b", names[index])),
            )
            reasons += link_reasons
            figures.update(link_figures)
            if reasons:
                raise CheckError("; ".join(reasons), figures)
            return figures

        planned.append(
            Planned(
                "health",
                index,
                params("health", values, sizes),
                lambda: 0.1,
                health_check,
                always=True,
            )
        )
    return planned


def _our_slice(event: XidEvent, slices: set[int] | None) -> bool:
    """Whether an XID concerns the slices under test (a whole-GPU event concerns them all)."""
    return not slices or event.gpu_instance_id is None or event.gpu_instance_id in slices


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
    environment: str | None = None,
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
    if environment:
        # exit 2: the job's image or container cannot start CUDA on a healthy node
        result.exit_code = ExitCode.BAD_INPUT
        result.headline = (
            f"environment problem, not the node: no GPU could start a CUDA context while NVML "
            f"sees {len(names)} healthy GPU(s): {environment}"
        )
    elif failed:
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
        "skipped-checks": ",".join(o.label for o in skipped),
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
        "gpus": [
            {"index": g.index, "name": g.name, "uuid": g.uuid, "serial": g.serial}
            for g in snapshot.gpus
        ],
        "failed_checks": [o.label for o in failed],
        "skipped_checks": [o.label for o in skipped],
        "environment_problem": environment,
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
