"""``gpu-smoke``: catch a bad GPU node in seconds, before the expensive job starts.

The run: read NVML (health before), listen for XIDs, drive a load through torch or cupy
(context, GEMM, device bandwidth, host-device bandwidth with the PCIe link read under load,
memory patterns, NCCL), optionally ``dcgmi diag``, read NVML again (health after). Every check
ends pass, fail or skip-with-reason inside one time budget. Nothing here imports boto3,
tenacity or httpx, so it runs on a plain GPU image. :func:`examine` returns the typed outcome
(:class:`~gpuci.gpu._smoke.report.Smoke`, or a dry run's :class:`~gpuci.gpu._smoke.plan.Plan`);
:func:`smoke` renders it as the step's Result.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

from gpuci import files
from gpuci.errors import GpuciError, InputError, NvmlUnavailable
from gpuci.gpu._gpu_info import Snapshot
from gpuci.gpu._nvml import NvmlSession, NvmlStuck, open_nvml, within_deadline
from gpuci.gpu._smoke import dcgm
from gpuci.gpu._smoke.backends import Backend, BackendUnavailable, installed, resolve_framework
from gpuci.gpu._smoke.checks import (
    CHECK_NAMES,
    ENVIRONMENT_REASON,
    LOAD_CHECKS,
    Budget,
    Outcome,
    Planned,
)
from gpuci.gpu._smoke.health import LoadSampler, XidListener
from gpuci.gpu._smoke.health_judge import health_checks, watch
from gpuci.gpu._smoke.load import Sizes, Target
from gpuci.gpu._smoke.plan import Plan, dry_run, params, plan_load, render_plan
from gpuci.gpu._smoke.report import COMMAND, SCHEMA, Smoke, judge, render, report_path
from gpuci.gpu._smoke.schedule import Watchdog, run_plan, watched_check
from gpuci.gpu._smoke.targets import match_targets
from gpuci.gpu._visible import Visibility, job_view
from gpuci.gpu.options import SmokeInputs
from gpuci.redact import excerpt
from gpuci.runtime import Result, Runtime

__all__ = ["Plan", "Smoke", "examine", "selected_checks", "smoke"]

NO_GPU_HINT = (
    "run gpu-smoke on a GPU runner (containers need the NVIDIA container toolkit, e.g. "
    "--gpus all); use --dry-run to plan without one"
)


def selected_checks(inp: SmokeInputs) -> list[str]:
    """The checks to run: the ``checks`` input, validated; empty means every check.

    Args:
        inp: the smoke's inputs (``checks`` and ``dcgm_level`` are read).

    Returns:
        Check names in run order; ``dcgm`` only when ``dcgm_level`` is set.

    Raises:
        InputError: an unknown check, or ``dcgm`` listed with ``dcgm_level`` 0.
    """
    asked = [c.strip().lower() for c in inp.checks]
    unknown = [c for c in asked if c not in CHECK_NAMES]
    if unknown:
        raise InputError(
            f"unknown check(s) in checks: {', '.join(unknown)}",
            hint="use any of: " + ", ".join(CHECK_NAMES),
        )
    chosen = [c for c in CHECK_NAMES if c in asked] if asked else list(CHECK_NAMES)
    if inp.dcgm_level == 0 and "dcgm" in chosen:
        chosen.remove("dcgm")
        if "dcgm" in asked:
            raise InputError(
                "checks lists dcgm but dcgm-level is 0", hint="set dcgm-level to 1 or 2"
            )
    return chosen


def smoke(
    inp: SmokeInputs,
    rt: Runtime,
    *,
    nvml: Any = None,
    backend: Backend | None = None,
    sizes: Sizes | None = None,
    clock: Callable[[], float] = time.monotonic,
    after_hang: Callable[[Result], Result] | None = None,
) -> Result:
    """The smoke as a step reports it: :func:`examine`, rendered.

    ``gpu-smoke``'s target, :func:`gpuci.gpu._smoke.command.run`, adds the health record and the
    quarantine around it; ``runners release`` runs it alone first.

    Args:
        inp, rt, nvml, backend, sizes, clock: as :func:`examine`'s.
        after_hang: when a check hangs, the smoke renders its Result and ends the process
            itself (:class:`~gpuci.gpu._smoke.schedule.Watchdog`), so this never returns; the
            steps a caller would take after it (the health record, the quarantine) go here.

    Returns:
        The command's Result; a lost GPU or missing NVML is a Result with exit 3 (and a report
        saying ``passed: false``), not raised.

    Raises:
        InputError: an unknown check or a memory fraction outside (0, 1].
    """
    ready = _Ready.of(inp, backend, sizes, clock)
    ready.after_hang = after_hang
    try:
        done = ready.examine(inp, rt, nvml)
    except (NvmlUnavailable, InputError) as exc:  # no GPU, or one fell off the bus mid-run
        return _infra_failure(inp, rt, ready.budget, exc)
    return render_plan(done) if isinstance(done, Plan) else render(done)


def examine(
    inp: SmokeInputs,
    rt: Runtime,
    *,
    nvml: Any = None,
    backend: Backend | None = None,
    sizes: Sizes | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Smoke | Plan:
    """The whole run: plan the checks, read the GPUs, run each check within the budget.

    Args:
        inp: the smoke's inputs.
        rt: the environment, output streams and masks; ``rt.dry_run`` plans only.
        nvml: an NVML object to read instead of the driver's.
        backend: the load generator to use instead of ``inp.framework``'s (tests).
        sizes: the GEMM, bandwidth and memory sizes (tests use tiny ones).
        clock: the budget's clock (tests use a fake one).

    Returns:
        Every check's outcome, the report written (a failed check is returned, not raised);
        in a dry run, the plan.

    Raises:
        InputError: an unknown check, a memory fraction outside (0, 1], or no GPU given to
            this job (CUDA_VISIBLE_DEVICES hides them all).
        NvmlUnavailable: no driver or NVML, no GPU, or a GPU lost mid-run.
    """
    return _Ready.of(inp, backend, sizes, clock).examine(inp, rt, nvml)


@dataclass
class _Ready:
    """The inputs checked and the budget started: what a run needs before it reads a GPU."""

    budget: Budget
    checks: list[str]
    framework: str
    backend: Backend | None
    sizes: Sizes
    after_hang: Callable[[Result], Result] | None = None  # smoke's, for a hung check

    @classmethod
    def of(
        cls,
        inp: SmokeInputs,
        backend: Backend | None,
        sizes: Sizes | None,
        clock: Callable[[], float],
    ) -> _Ready:
        budget = Budget(inp.budget_seconds, clock)
        checks = selected_checks(inp)
        if not 0 < inp.memory_fraction <= 1:
            raise InputError(
                f"input 'memory-fraction' is {inp.memory_fraction:g}: a fraction of free memory",
                hint="set memory-fraction between 0 (exclusive) and 1, e.g. 0.9",
            )
        framework = backend.name if backend is not None else resolve_framework(inp.framework)
        sizes = sizes or (Sizes() if backend is None or backend.is_gpu else Sizes.tiny())
        return cls(budget, checks, framework, backend, sizes)

    def examine(self, inp: SmokeInputs, rt: Runtime, nvml: Any) -> Smoke | Plan:
        """Open NVML, take the job's GPUs, then plan (a dry run) or run the checks."""
        checks, framework, sizes = self.checks, self.framework, self.sizes
        try:
            session = within_deadline(rt.environ, lambda: open_nvml(rt.environ, nvml), "opening it")
        except NvmlUnavailable as exc:
            if rt.dry_run:
                return dry_run(inp, checks, framework, sizes, None, exc.message)
            hint = (exc.hint or "").split(", or set require-gpu")[0]  # gpu-setup's, not ours
            raise NvmlUnavailable(exc.message, f"{hint}; or plan with --dry-run") from exc
        if self.backend is None and inp.framework == "auto" and session.source.startswith("fake:"):
            framework = "none"  # fake NVML: there is no real GPU for torch or cupy to load
        try:
            try:
                host = within_deadline(rt.environ, session.snapshot, "reading the GPUs")
            except NvmlStuck:
                session.abandon()  # closing would wait behind the stuck call
                raise
            # The job's GPUs only: CUDA_VISIBLE_DEVICES applied (another tenant's is not ours).
            snapshot, visibility = job_view(host, rt.environ)
            if not snapshot.gpus and not rt.dry_run:
                raise _no_gpu(host, visibility)
            if rt.dry_run:
                return dry_run(inp, checks, framework, sizes, snapshot, None)
            return _run(
                inp, rt, session, snapshot, checks, framework, self.backend, sizes, self.budget,
                host, visibility, self.after_hang,
            )  # fmt: skip
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


def _infra_failure(inp: SmokeInputs, rt: Runtime, budget: Budget, exc: GpuciError) -> Result:
    """Exit 3 in one line, and still ``passed: false`` and a report, so workflows can branch."""
    result = Result.from_error(COMMAND, exc)
    path = report_path(inp, rt)
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
    from gpuci.gpu._smoke.backends import load_backend

    try:
        return load_backend(framework), framework
    except BackendUnavailable:
        if asked != "auto" or framework != "torch" or not installed("cupy"):
            raise
        return load_backend("cupy"), "cupy"


def _run(
    inp: SmokeInputs,
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
    after_hang: Callable[[Result], Result] | None = None,
) -> Smoke:
    """Scope (which GPUs, which framework) -> watch (XIDs, clocks) -> checks -> result."""
    gpus = list(snapshot.gpus)
    outcomes: list[Outcome] = []
    notes: list[str] = []  # warnings: the run tested less than asked
    info: dict[str, Any] = {}  # report-only facts
    _scope_notes(host, visibility, notes, info)
    load = _Load(backend, framework)
    watched = [g.index for g in gpus]
    record = _recorder(rt, outcomes)
    group: Any = None  # the log section, once the framework has started

    def finish(ended: list[Outcome]) -> int:
        """A check hung: report it now, the step's way (the process ends after this)."""
        for outcome in ended:
            record(outcome)
        if group is not None:  # the log section ends here: this thread ends the run
            group.__exit__(None, None, None)
        notes.append("a check hung: the smoke ended there, health after the load not read")
        names = {g.index: g.name for g in gpus if g.index in watched}
        done = judge(inp, rt, snapshot, list(outcomes), notes, info, load.framework,
                     load.backend, budget, names)  # fmt: skip
        result = render(done)
        return rt.render(after_hang(result) if after_hang is not None else result)

    # A hang is reported by the watchdog's thread, which ends the process; this one waits.
    with Watchdog(budget, finish) as watchdog:
        if any(c in LOAD_CHECKS for c in checks):  # import, CUDA's init, the device query
            with watchdog.starting(_STARTING, _starting_hung(load.framework)):
                _prepare_load(load, inp, session, snapshot, notes, info)
        watched = (
            sorted({t.nvml_index for t in load.targets if t.nvml_index is not None}) or watched
        )
        # Health before: the snapshot's read; then XIDs and clock events for the run's length.
        with watchdog.running(_WATCHING):  # NVML's event set, made on this thread
            xids, sampler = watch(session, checks, watched, load.targets, sizes, notes)
        group = rt.group(f"gpu-smoke: {len(watched)} GPU(s), framework {load.framework}")
        with group:
            _run_checks(inp, session, snapshot, checks, load, sizes, budget, watched,
                        (xids, sampler), record, notes, watchdog)  # fmt: skip
    names = {g.index: g.name for g in gpus if g.index in watched}
    environment = _environment_problem(
        outcomes, load.broken, load.framework, load.built_cuda, snapshot, rt.environ
    )
    return judge(
        inp, rt, snapshot, outcomes, notes, info, load.framework, load.backend, budget, names,
        environment,
    )  # fmt: skip


def _scope_notes(
    host: Snapshot | None, visibility: Visibility | None, notes: list[str], info: dict[str, Any]
) -> None:
    """What the run leaves out before it starts: GPUs it may not open, GPUs the job was not
    given (CUDA_VISIBLE_DEVICES)."""
    for skipped in host.skipped if host else ():
        notes.append(
            f"GPU {skipped.index} could not be opened (NVML: {skipped.reason}): skipped, not "
            "tested (a device cgroup such as Slurm ConstrainDevices hides it)"
        )
    if visibility is not None and visibility.restricted:
        notes += list(visibility.notes)
        info["visibility"] = visibility.to_dict()


# The framework starting (``import torch``, CUDA's init, the device query): not yet a check.
_STARTING = Planned("context", None, {}, lambda: 0.0, lambda ctx: {})
# The XID event set and the clock sampler being set up: the health checks' first NVML calls.
_WATCHING = Planned("health", None, {}, lambda: 0.0, lambda ctx: {})


def _starting_hung(framework: str) -> str:
    """Why a framework that never finished starting fails ``context``: not judged a GPU
    fault (:data:`ENVIRONMENT_REASON`; no quarantine), as an import from a stuck filesystem
    hangs the same way as a driver's init."""
    return (
        f"{ENVIRONMENT_REASON} {framework} never finished starting (its import, CUDA's "
        "init or the device query hung: a stuck driver or GPU, or a stuck filesystem); "
        "check nvidia-smi and dmesg on this node"
    )


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
    inp: SmokeInputs,
    session: NvmlSession,
    snapshot: Snapshot,
    notes: list[str],
    info: dict[str, Any],
) -> None:
    """Which GPUs a load runs on: the framework's devices matched to NVML's (or why none)."""
    gpus = list(snapshot.gpus)
    if load.framework == "none":
        if inp.framework == "none":
            load.skip = "framework none: health checks only, no load"
        elif snapshot.source.startswith("fake:"):
            load.skip = "fake NVML (GPUCI_FAKE_NVML): no real GPU to load; health checks only"
        else:
            load.skip = "neither torch nor cupy is installed: health checks only, no load"
        notes.append(load.skip)  # a warning: the smoke tested less than asked
        return
    started = time.perf_counter()
    try:
        if load.backend is None:
            load.backend, load.framework = _load_backend(load.framework, inp.framework)
        load.targets, match_notes = match_targets(load.backend, session, gpus, inp)
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
    inp: SmokeInputs,
    session: NvmlSession,
    snapshot: Snapshot,
    checks: list[str],
    load: _Load,
    sizes: Sizes,
    budget: Budget,
    watched: list[int],
    watching: tuple[XidListener | None, LoadSampler | None],
    record: Callable[[Outcome], None],
    notes: list[str],
    watchdog: Watchdog | None = None,
) -> None:
    """The load, dcgm and health checks while XIDs and clock events are watched; each outcome
    goes to ``record`` as it lands. ``watchdog`` ends the process if the load hangs."""
    xids, sampler = watching
    if load.targets and load.backend is not None:
        # Each GPU's own checks on its own thread; NCCL and PCIe one at a time.
        plan = plan_load(load.backend, load.targets, checks, inp, sizes)
        run_plan(plan, budget, record, watchdog=watchdog)
    _record_no_load(load, checks, watched, record)
    if "dcgm" in checks:
        record(watched_check(_dcgm_check(inp, sizes, watched), budget, watchdog))
    if sampler is not None:  # its last read is on this thread: watched
        with watchdog.running(_WATCHING) if watchdog else nullcontext():
            if not sampler.stop():  # a read stuck on its thread: never shut NVML down behind it
                session.abandon()
                notes.append("clock sampling stuck in an NVML read: its samples end there")
    if "health" in checks and xids is not None:
        # The XID set's last drain and its free are NVML calls on this thread: watched
        with watchdog.running(_WATCHING) if watchdog else nullcontext():
            items = health_checks(session, snapshot, watched, xids, sampler, inp, sizes, budget)
        for item in items:
            record(watched_check(item, budget, watchdog))  # a stuck NVML read ends the run
        if xids.error:
            notes.append(f"XID listening stopped early: {xids.error}")


def _recorder(rt: Runtime, outcomes: list[Outcome]) -> Callable[[Outcome], None]:
    """Collect each outcome (from any check's thread) and log it on one line as it lands."""
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

    return record


def _record_no_load(
    load: _Load, checks: list[str], watched: list[int], record: Callable[[Outcome], None]
) -> None:
    """No load ran: a framework that cannot use the GPUs fails ``context``; the rest skip."""
    if load.broken:  # a GPU the framework cannot use is a finding about this node
        for index in watched:
            record(Outcome("context", index, "fail", f"{ENVIRONMENT_REASON} {load.broken}"))
    for name in (c for c in checks if c in LOAD_CHECKS and (load.skip or load.broken)):
        if name == "context" and load.broken:
            continue
        why = load.skip or f"no CUDA context ({load.framework} cannot use the GPU)"
        where: list[int | None] = [None] if name == "nccl" else list(watched)
        for gpu in where:
            record(Outcome(name, gpu, "skip", why))


def _dcgm_check(inp: SmokeInputs, sizes: Sizes, watched: list[int]) -> Planned:
    level = inp.dcgm_level
    return Planned(
        "dcgm",
        None,
        params("dcgm", inp, sizes),
        lambda: dcgm.estimate(level),
        lambda ctx: dcgm.run(level, ctx, watched),
        skip_reason=dcgm.absent_reason(),
    )


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
    from gpuci.gpu._smoke import environment

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
    from gpuci.gpu._smoke.environment import libcuda_loads

    return libcuda_loads()
