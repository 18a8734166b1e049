"""gpu-setup, the operation: read the GPUs through NVML, judge them, record; a typed outcome.

NVML's snapshot is narrowed to this job's GPUs (``CUDA_VISIBLE_DEVICES`` applied: the host's
others are neither judged, counted nor exported, which would widen the job onto another
tenant's GPUs). A real run writes the JSON report atomically (``*.incomplete``, verified,
renamed) so a later step never reads half a file, and gives the journal a GPU summary so
``provenance`` can name model, driver and CUDA. A dry run writes nothing and never raises for a
missing GPU. This knows nothing of action outputs: :mod:`gpuci.gpu._setup.report` renders a
:class:`Setup` as the step's Result, and :func:`gpuci.gpu.api.setup` returns it typed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuci import files, journal
from gpuci.errors import NvmlUnavailable
from gpuci.gpu._checks import (
    CheckOutcome,
    Unit,
    cuda_units,
    evaluate,
    gb,
    requirements,
    requirements_dict,
    usable_units,
    version_text,
)
from gpuci.gpu._nvml import GpuInfo, Snapshot, open_nvml, within_deadline
from gpuci.gpu._visible import Visibility, job_view
from gpuci.gpu.options import SetupInputs
from gpuci.runtime import OutputValue, Runtime

__all__ = ["Setup", "setup"]

COMMAND = "gpu-setup"
REPORT_NAME = "gpuci-gpu-report.json"
REPORT_SCHEMA = 1


@dataclass
class Setup:
    """What gpu-setup saw and judged: the host, the job's part of it, the devices CUDA will see.

    ``path`` is where the report was written, None in a dry run (nothing written).
    """

    host: Snapshot | None
    nvml_error: NvmlUnavailable | None  # why NVML could not be read (no GPU allowed)
    snapshot: Snapshot | None  # the job's GPUs (CUDA_VISIBLE_DEVICES applied)
    visibility: Visibility | None
    every: list[Unit]  # every usable device, all MIG devices included
    units: list[Unit]  # what one CUDA process sees: at most one MIG device
    checks: list[CheckOutcome]
    path: Path | None
    report: dict[str, Any] = field(default_factory=dict)  # the JSON report

    @property
    def gpus(self) -> tuple[GpuInfo, ...]:
        return self.snapshot.gpus if self.snapshot else ()

    @property
    def cpu_only(self) -> bool:
        return not self.gpus

    @property
    def failed(self) -> list[CheckOutcome]:
        return [c for c in self.checks if c.outcome == "fail"]

    @property
    def passed(self) -> bool:
        """No requirement failed, or a dry run (which fails nothing)."""
        return self.path is None or not self.failed

    @property
    def memory_gb(self) -> float | None:
        """Total memory of the smallest usable device, in GB."""
        memories = [u.memory_total for u in self.units if u.memory_total is not None]
        return gb(min(memories)) if memories else None

    @property
    def compute_capability(self) -> str | None:
        """The lowest among the usable devices."""
        ccs = [u.compute_capability for u in self.units if u.compute_capability is not None]
        return version_text(min(ccs)) if ccs else None

    def outputs(self) -> dict[str, OutputValue]:
        """The action's outputs (the report's ``outputs`` leave out ``report``)."""
        snapshot = self.snapshot
        return {
            "gpu-count": len(self.units),
            "gpu-names": ",".join(u.name for u in self.units),
            "memory-gb": 0 if self.memory_gb is None else self.memory_gb,
            "cuda-version": snapshot.cuda_text if snapshot else None,
            "driver-version": snapshot.driver_version if snapshot else None,
            "compute-capability": self.compute_capability,
            "visible-devices": ",".join(u.uuid for u in self.units),
            "report": str(self.path) if self.path else None,
        }


def setup(inp: SetupInputs, rt: Runtime, *, nvml: Any = None) -> Setup:
    """Read this job's GPUs, judge them against ``inp``; in a real run, write the report and
    the journal entry.

    Args:
        inp: gpu-setup's checked inputs.
        rt: the environment (NVML selection, CUDA_VISIBLE_DEVICES, RUNNER_TEMP); ``rt.dry_run``
            writes nothing and tolerates a missing NVML.
        nvml: an NVML object to read instead of the driver's (a FakeNvml in tests).

    Returns:
        What was seen and judged; a failed requirement is returned, not raised.

    Raises:
        NvmlUnavailable: no driver or NVML in a real run with ``require_gpu``.
        InputError: the report cannot be written.
    """
    req = requirements(inp)
    path = files.report_path(inp.report, rt.environ, REPORT_NAME)
    host, nvml_error = read_snapshot(rt.environ, nvml)
    if nvml_error is not None and req.require_gpu and not rt.dry_run:
        raise nvml_error
    snapshot, visibility = job_view(host, rt.environ) if host else (None, None)
    every = usable_units(snapshot, req.allow_mig)
    done = Setup(
        host, nvml_error, snapshot, visibility, every, cuda_units(every),
        evaluate(req, snapshot, visibility), None if rt.dry_run else path,
    )  # fmt: skip
    done.report = {
        "schema": REPORT_SCHEMA,
        "command": COMMAND,
        "dry_run": rt.dry_run,
        "verdict": "fail" if done.failed else "pass",
        "cpu_only": done.cpu_only,
        "nvml_error": nvml_error.one_line() if nvml_error else None,
        "requirements": requirements_dict(req),
        "checks": [c.to_dict() for c in done.checks],
        "devices": [{**u.to_dict(), "cuda_visible": u in done.units} for u in every],
        "visibility": visibility.to_dict() if visibility else None,
        "nvml": host.to_dict() if host else None,
        "outputs": {k: v for k, v in done.outputs().items() if k != "report"},
    }
    if not rt.dry_run:
        _record(done, path, rt)
    return done


def read_snapshot(
    environ: Mapping[str, str], nvml: Any = None
) -> tuple[Snapshot | None, NvmlUnavailable | None]:
    """This machine's GPUs, or the reason NVML could not be used."""

    def read() -> Snapshot:
        with open_nvml(environ, nvml) as session:
            return session.snapshot()

    try:
        return within_deadline(environ, read, "opening it and reading the GPUs"), None
    except NvmlUnavailable as exc:
        return None, exc


def _record(done: Setup, path: Path, rt: Runtime) -> None:
    """The report file, then the journal's GPU summary."""
    done.report["report_path"] = str(path)
    files.write_report(path, done.report, "GPU report")
    snapshot = done.snapshot
    journal.record(
        COMMAND,
        {
            "source": snapshot.source if snapshot else None,
            "driver_version": snapshot.driver_version if snapshot else None,
            "cuda_version": snapshot.cuda_text if snapshot else None,
            "gpus": [_journal_gpu(g) for g in done.gpus],
            "visible_devices": [u.uuid for u in done.units],
            "verdict": done.report["verdict"],
        },
        rt.environ,
    )


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
