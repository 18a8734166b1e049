"""``gpu-setup``: read the GPUs through NVML, judge them against the job's needs, report.

The report is written atomically (``*.incomplete``, verified, renamed) so a later step never
reads half a file; the journal gets a GPU summary so ``provenance`` can name model, driver and
CUDA. In a dry run nothing is written and a missing GPU is described, never failed. The job
summary is an overview, a table per GPU, and the checks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuci import files, journal, settings
from gpuci.errors import CheckFailed, ExitCode, NvmlUnavailable
from gpuci.gpu.checks import (
    CheckOutcome,
    Requirements,
    Unit,
    cuda_units,
    evaluate,
    gb,
    requirements,
    requirements_dict,
    usable_units,
    version_text,
)
from gpuci.gpu.nvml import GpuInfo, Snapshot, open_nvml
from gpuci.gpu.options import SetupInputs
from gpuci.gpu.visible import Visibility, job_view
from gpuci.runtime import OutputValue, Result, Runtime, markdown_table

COMMAND = "gpu-setup"
REPORT_NAME = "gpuci-gpu-report.json"
REPORT_SCHEMA = 1


def read_snapshot(
    environ: Mapping[str, str], nvml: Any = None
) -> tuple[Snapshot | None, NvmlUnavailable | None]:
    """This machine's GPUs, or the reason NVML could not be used."""
    try:
        with open_nvml(environ, nvml) as session:
            return session.snapshot(), None
    except NvmlUnavailable as exc:
        return None, exc


def outputs_for(
    snapshot: Snapshot | None, units: list[Unit], path: Path | None
) -> dict[str, OutputValue]:
    ccs = [u.compute_capability for u in units if u.compute_capability is not None]
    memories = [u.memory_total for u in units if u.memory_total is not None]
    return {
        "gpu-count": len(units),
        "gpu-names": ",".join(u.name for u in units),
        "memory-gb": gb(min(memories)) if memories else 0,
        "cuda-version": snapshot.cuda_text if snapshot else None,
        "driver-version": snapshot.driver_version if snapshot else None,
        "compute-capability": version_text(min(ccs)) if ccs else None,
        "visible-devices": ",".join(u.uuid for u in units),
        "report": str(path) if path else None,
    }


def _journal_gpu(gpu: GpuInfo) -> dict[str, Any]:
    return {
        "index": gpu.index,
        "name": gpu.name,
        "uuid": gpu.uuid,
        "memory_total": gpu.memory_total,
        "compute_capability": gpu.cc_text,
        "architecture": gpu.architecture,
        "mig": gpu.mig_enabled,
    }


def _headline(failed: list[CheckOutcome], units: list[Unit], cpu_only: bool) -> str:
    if failed:
        names = [n for n in dict.fromkeys(c.check for c in failed) if n != "fail-on-ecc-errors"]
        them = "it" if len(names) == 1 else "them"
        fixes = []
        if names:  # a GPU too small, too few or too old
            fixes.append(f"run on a runner whose GPUs meet {', '.join(names)}, or relax {them}")
        if len(names) < len({c.check for c in failed}):  # a sick GPU, not a small one
            fixes.append("reset the GPU or take this node out of the runner pool")
        return (
            f"{len(failed)} check(s) failed: "
            + "; ".join(f"{c.check} ({c.reason})" for c in failed)
            + f" (fix: {'; '.join(fixes)})"
        )
    if cpu_only:
        return "no GPU; CPU-only report (require-gpu is false)"
    names = sorted({u.name for u in units})
    return f"{len(units)} device(s) ready: {', '.join(names)}"


def _visibility_notes(result: Result, host: Snapshot | None, vis: Visibility | None) -> None:
    """Say which GPUs were left out and why: unopenable, or not this job's."""
    for skipped in host.skipped if host else ():
        result.warning(
            f"GPU {skipped.index} could not be opened (NVML: {skipped.reason}): skipped and not "
            "judged, as nvidia-smi does (a device cgroup, e.g. Slurm ConstrainDevices, hides it)",
            "gpu-setup",
        )
    if vis is None or not vis.restricted:
        return
    for note in vis.notes:
        result.warning(note, "gpu-setup: CUDA_VISIBLE_DEVICES")
    if vis.hidden and vis.selected:
        result.notice(
            f"CUDA_VISIBLE_DEVICES={vis.raw}: judging NVML GPU(s) "
            f"{','.join(map(str, vis.selected))}; GPU(s) {','.join(map(str, vis.hidden))} "
            "on this host are not this job's and are not judged",
            "gpu-setup: CUDA_VISIBLE_DEVICES",
        )


@dataclass(frozen=True)
class _Seen:
    """What NVML showed: the host, the job's part of it, and the devices CUDA will see."""

    host: Snapshot | None
    nvml_error: NvmlUnavailable | None
    snapshot: Snapshot | None  # the job's GPUs (CUDA_VISIBLE_DEVICES applied)
    visibility: Visibility | None
    every: list[Unit]  # every usable device, all MIG devices included
    units: list[Unit]  # what one CUDA process sees: at most one MIG device

    @property
    def gpus(self) -> tuple[GpuInfo, ...]:
        return self.snapshot.gpus if self.snapshot else ()

    @property
    def cpu_only(self) -> bool:
        return not self.gpus


def run(inp: SetupInputs, rt: Runtime, *, nvml: Any = None) -> Result:
    """The gpu-setup command: read, judge, describe; then (not in a dry run) write and export.

    ``nvml`` injects an NVML object (e.g. a FakeNvml) in-process.
    """
    req = requirements(inp)
    path = files.report_path(inp.report, rt.environ, REPORT_NAME)
    seen = _read(req, rt, nvml)
    checks = evaluate(req, seen.snapshot, seen.visibility)
    failed = [c for c in checks if c.outcome == "fail"]
    outputs = outputs_for(seen.snapshot, seen.units, None if rt.dry_run else path)
    result = Result(command=COMMAND)
    result.report = _report(req, seen, checks, outputs, rt.dry_run)
    _describe(result, seen, checks)
    if rt.dry_run:
        return _plan_only(result, seen, failed)
    return _publish(result, inp, rt, seen, failed, outputs, path)


def _read(req: Requirements, rt: Runtime, nvml: Any) -> _Seen:
    """NVML's snapshot narrowed to this job's GPUs; no NVML fails only a real run that needs one."""
    host, nvml_error = read_snapshot(rt.environ, nvml)
    if nvml_error is not None and req.require_gpu and not rt.dry_run:
        raise nvml_error
    # The job's GPUs: CUDA_VISIBLE_DEVICES applied; the host's others are neither judged,
    # counted nor exported (that would widen the job onto another tenant's GPUs).
    snapshot, visibility = job_view(host, rt.environ) if host else (None, None)
    every = usable_units(snapshot, req.allow_mig)
    return _Seen(host, nvml_error, snapshot, visibility, every, cuda_units(every))


def _report(
    req: Requirements,
    seen: _Seen,
    checks: list[CheckOutcome],
    outputs: dict[str, OutputValue],
    dry_run: bool,
) -> dict[str, Any]:
    failed = any(c.outcome == "fail" for c in checks)
    return {
        "schema": REPORT_SCHEMA,
        "command": COMMAND,
        "dry_run": dry_run,
        "verdict": "fail" if failed else "pass",
        "cpu_only": seen.cpu_only,
        "nvml_error": seen.nvml_error.one_line() if seen.nvml_error else None,
        "requirements": requirements_dict(req),
        "checks": [c.to_dict() for c in checks],
        "devices": [{**u.to_dict(), "cuda_visible": u in seen.units} for u in seen.every],
        "visibility": seen.visibility.to_dict() if seen.visibility else None,
        "nvml": seen.host.to_dict() if seen.host else None,
        "outputs": {k: v for k, v in outputs.items() if k != "report"},
    }


def _describe(result: Result, seen: _Seen, checks: list[CheckOutcome]) -> None:
    """The step summary (GPUs, checks) and the notes a real run and a dry run both give."""
    if seen.snapshot and seen.gpus:
        result.summary.append(overview(seen.snapshot))
        result.summary += [gpu_table(g) for g in seen.gpus]
    elif seen.nvml_error:
        result.summary.append(f"**GPUs**: none ({seen.nvml_error.message})")
    else:
        result.summary.append("**GPUs**: none found by NVML")
    result.summary.append(checks_table(checks))
    if len(seen.every) > len(seen.units):
        result.notice(
            f"{len(seen.every) - len(seen.units) + 1} MIG devices here, but CUDA shows one MIG "
            f"device per process: {seen.units[-1].uuid} is exported; run one process per MIG "
            "device (CUDA_VISIBLE_DEVICES=MIG-...) to use the others",
            "gpu-setup: MIG",
        )
    for note in [n for g in seen.gpus for n in g.notes]:
        result.warning(f"unexpected NVML answer: {note}", "gpu-setup")
    _visibility_notes(result, seen.host, seen.visibility)
    for g in seen.gpus:
        for finding in g.mode_findings():
            result.warning(f"GPU {g.index}: {finding}", "gpu-setup: modes")


def _plan_only(result: Result, seen: _Seen, failed: list[CheckOutcome]) -> Result:
    """Dry run: say what this machine lacks, write nothing, fail nothing."""
    lacking = "; ".join(f"{c.check} ({c.required}): {c.reason}" for c in failed)
    result.headline = (
        f"dry run: this machine lacks what the job needs: {lacking}"
        if failed
        else "dry run: " + _headline([], seen.units, seen.cpu_only)
    )
    if seen.nvml_error:
        result.notice(f"no usable NVML here: {seen.nvml_error.message}", "gpu-setup dry run")
    return result


def _publish(
    result: Result,
    inp: SetupInputs,
    rt: Runtime,
    seen: _Seen,
    failed: list[CheckOutcome],
    outputs: dict[str, OutputValue],
    path: Path,
) -> Result:
    """A real run: outputs, the report file, the journal, the export, the verdict."""
    result.outputs = outputs
    result.report["report_path"] = str(path)
    files.write_report(path, result.report, "GPU report")
    snapshot = seen.snapshot
    journal.record(
        COMMAND,
        {
            "source": snapshot.source if snapshot else None,
            "driver_version": snapshot.driver_version if snapshot else None,
            "cuda_version": snapshot.cuda_text if snapshot else None,
            "gpus": [_journal_gpu(g) for g in seen.gpus],
            "visible_devices": [u.uuid for u in seen.units],
            "verdict": result.report["verdict"],
        },
        rt.environ,
    )
    if inp.export_visible_devices and seen.units:
        result.env[settings.CUDA_VISIBLE_DEVICES.name] = ",".join(u.uuid for u in seen.units)
    result.headline = _headline(failed, seen.units, seen.cpu_only)
    for check in failed:
        result.error(f"{check.check}: {check.reason} (required {check.required})", "gpu-setup")
    if not failed:
        for g in seen.gpus:
            if g.health.memory_problems():
                result.warning(
                    f"GPU {g.index}: {', '.join(g.health.memory_problems())}", "gpu-setup: ECC"
                )
    if failed:
        result.exit_code = ExitCode(CheckFailed.exit_code)
    return result


# ----- the job summary: an overview, a table per GPU, and the checks ---------------------------
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
