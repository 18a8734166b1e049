"""``gpu-setup``: read the GPUs through NVML, judge them against the job's needs, report.

The report is written atomically (``*.incomplete``, verified, renamed) so a later step never
reads half a file; the journal gets a GPU summary so ``provenance`` can name model, driver and
CUDA. In a dry run nothing is written and a missing GPU is described, never failed.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpuci import files, journal
from gpuci.errors import CheckFailed, ExitCode, NvmlUnavailable
from gpuci.gpu import summary
from gpuci.gpu.checks import (
    CheckOutcome,
    Requirements,
    Unit,
    cuda_units,
    evaluate,
    gb,
    usable_units,
    version_text,
)
from gpuci.gpu.nvml import GpuInfo, Snapshot, open_nvml
from gpuci.gpu.visible import Visibility, job_view
from gpuci.runtime import OutputValue, Result, Runtime

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


def run(values: dict[str, Any], rt: Runtime, *, nvml: Any = None) -> Result:
    """The gpu-setup command. ``nvml`` injects an NVML object (e.g. a FakeNvml) in-process."""
    req = Requirements.from_values(values)
    path = files.report_path(values, rt.environ, REPORT_NAME)
    host, nvml_error = read_snapshot(rt.environ, nvml)
    if nvml_error is not None and req.require_gpu and not rt.dry_run:
        raise nvml_error
    # The job's GPUs: CUDA_VISIBLE_DEVICES applied; the host's others are neither judged,
    # counted nor exported (that would widen the job onto another tenant's GPUs).
    snapshot, visibility = job_view(host, rt.environ) if host else (None, None)
    every = usable_units(snapshot, req.allow_mig)
    units = cuda_units(every)  # what one CUDA process sees: at most one MIG device
    checks = evaluate(req, snapshot, visibility)
    failed = [c for c in checks if c.outcome == "fail"]
    cpu_only = not (snapshot and snapshot.gpus)
    outputs = outputs_for(snapshot, units, None if rt.dry_run else path)

    result = Result(command=COMMAND)
    result.report = {
        "schema": REPORT_SCHEMA,
        "command": COMMAND,
        "dry_run": rt.dry_run,
        "verdict": "fail" if failed else "pass",
        "cpu_only": cpu_only,
        "nvml_error": nvml_error.one_line() if nvml_error else None,
        "requirements": req.to_dict(),
        "checks": [c.to_dict() for c in checks],
        "devices": [{**u.to_dict(), "cuda_visible": u in units} for u in every],
        "visibility": visibility.to_dict() if visibility else None,
        "nvml": host.to_dict() if host else None,
        "outputs": {k: v for k, v in outputs.items() if k != "report"},
    }
    if snapshot and snapshot.gpus:
        result.summary.append(summary.overview(snapshot))
        result.summary += [summary.gpu_table(g) for g in snapshot.gpus]
    elif nvml_error:
        result.summary.append(f"**GPUs**: none ({nvml_error.message})")
    else:
        result.summary.append("**GPUs**: none found by NVML")
    result.summary.append(summary.checks_table(checks))
    if len(every) > len(units):
        result.notice(
            f"{len(every) - len(units) + 1} MIG devices here, but CUDA shows one MIG device per "
            f"process: {units[-1].uuid} is exported; run one process per MIG device "
            "(CUDA_VISIBLE_DEVICES=MIG-...) to use the others",
            "gpu-setup: MIG",
        )
    for note in [n for g in (snapshot.gpus if snapshot else ()) for n in g.notes]:
        result.warning(f"unexpected NVML answer: {note}", "gpu-setup")
    _visibility_notes(result, host, visibility)
    for g in snapshot.gpus if snapshot else ():
        for finding in g.mode_findings():
            result.warning(f"GPU {g.index}: {finding}", "gpu-setup: modes")

    if rt.dry_run:
        # Plan only: say what this machine lacks, write nothing, fail nothing.
        lacking = "; ".join(f"{c.check} ({c.required}): {c.reason}" for c in failed)
        result.headline = (
            f"dry run: this machine lacks what the job needs: {lacking}"
            if failed
            else "dry run: " + _headline([], units, cpu_only)
        )
        if nvml_error:
            result.notice(f"no usable NVML here: {nvml_error.message}", "gpu-setup dry run")
        return result

    result.outputs = outputs
    result.report["report_path"] = str(path)
    files.write_report(path, result.report, "GPU report")
    journal.record(
        COMMAND,
        {
            "source": snapshot.source if snapshot else None,
            "driver_version": snapshot.driver_version if snapshot else None,
            "cuda_version": snapshot.cuda_text if snapshot else None,
            "gpus": [_journal_gpu(g) for g in (snapshot.gpus if snapshot else ())],
            "visible_devices": [u.uuid for u in units],
            "verdict": result.report["verdict"],
        },
        rt.environ,
    )
    if values.get("export-visible-devices") and units:
        result.env["CUDA_VISIBLE_DEVICES"] = ",".join(u.uuid for u in units)
    result.headline = _headline(failed, units, cpu_only)
    for check in failed:
        result.error(f"{check.check}: {check.reason} (required {check.required})", "gpu-setup")
    if not failed:
        for g in snapshot.gpus if snapshot else ():
            if g.health.memory_problems():
                result.warning(
                    f"GPU {g.index}: {', '.join(g.health.memory_problems())}", "gpu-setup: ECC"
                )
    if failed:
        result.exit_code = ExitCode(CheckFailed.exit_code)
    return result
