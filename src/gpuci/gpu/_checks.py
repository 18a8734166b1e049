"""Requirement checks: a job's GPU needs against an NVML snapshot, as data.

Kept apart from the command so ``dry-run`` and the all-in-one action judge a machine the same
way ``gpu-setup`` does. Each check ends pass, fail or unsupported; unsupported (the GPU or
driver does not report the value) is never a failure.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

from gpuci.gpu._nvml import GpuInfo, Snapshot
from gpuci.gpu._visible import Visibility
from gpuci.gpu.options import Requirements, SetupInputs

Outcome = Literal["pass", "fail", "unsupported"]
GB = 1e9


def version_text(version: tuple[int, ...] | None) -> str | None:
    return None if version is None else ".".join(str(p) for p in version)


def version_ge(found: tuple[int, ...], required: tuple[int, ...]) -> bool:
    width = max(len(found), len(required))
    return tuple(found) + (0,) * (width - len(found)) >= tuple(required) + (0,) * (
        width - len(required)
    )


def gb(n_bytes: int | None) -> float | None:
    return None if n_bytes is None else round(n_bytes / GB, 1)


def requirements(inp: SetupInputs) -> Requirements:
    """The requirements part of gpu-setup's inputs (not where to report or what to export)."""
    return Requirements(**{f.name: getattr(inp, f.name) for f in fields(Requirements)})


def requirements_dict(req: Requirements) -> dict[str, Any]:
    """The requirements as the report shows them (input names, versions as text)."""
    return {
        "min-gpus": req.min_gpus,
        "min-memory-gb": req.min_memory_gb,
        "min-compute-capability": version_text(req.min_compute_capability),
        "min-cuda": version_text(req.min_cuda),
        "gpu-name": req.gpu_name.pattern if req.gpu_name else None,
        "require-gpu": req.require_gpu,
        "allow-mig": req.allow_mig,
        "fail-on-ecc-errors": req.fail_on_ecc_errors,
    }


@dataclass(frozen=True)
class Unit:
    """A device a CUDA program would see: a whole GPU, or one MIG device of a GPU in MIG mode."""

    uuid: str
    name: str
    memory_total: int | None
    compute_capability: tuple[int, int] | None
    gpu_index: int
    mig_index: int | None = None  # the MIG device's slot on its GPU, None for a whole GPU

    @property
    def mig(self) -> bool:
        return self.mig_index is not None

    def label(self) -> str:
        slot = "" if self.mig_index is None else f"/MIG {self.mig_index}"
        return f"GPU {self.gpu_index}{slot} '{self.name}'"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["compute_capability"] = version_text(self.compute_capability)
        data["memory_gb"] = gb(self.memory_total)
        data["mig"] = self.mig
        return data


@dataclass(frozen=True)
class CheckOutcome:
    check: str  # the input's name, so a failure points at the line to change
    required: str
    outcome: Outcome
    reason: str

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


def usable_units(snapshot: Snapshot | None, allow_mig: bool) -> list[Unit]:
    """Whole GPUs, with a MIG-mode GPU replaced by its MIG devices (or dropped without MIG)."""
    units: list[Unit] = []
    for gpu in snapshot.gpus if snapshot else ():
        if gpu.mig_enabled:
            if allow_mig:
                units += [
                    Unit(
                        uuid=m.uuid,
                        name=m.name or f"{gpu.name} MIG",
                        memory_total=m.memory_total,
                        compute_capability=gpu.compute_capability,
                        gpu_index=gpu.index,
                        mig_index=m.index,
                    )
                    for m in gpu.mig_devices
                ]
            continue
        units.append(Unit(gpu.uuid, gpu.name, gpu.memory_total, gpu.compute_capability, gpu.index))
    return units


def cuda_units(units: list[Unit]) -> list[Unit]:
    """The devices one CUDA process sees: every whole GPU, and at most one MIG device.

    CUDA enumerates a single MIG instance per process (NVIDIA's MIG user guide, CUDA 11 and
    12): with several MIG devices in ``CUDA_VISIBLE_DEVICES`` a process gets the first one only.
    The others serve other processes (one ``CUDA_VISIBLE_DEVICES=MIG-...`` each), so they do not
    count toward ``min-gpus`` and are not exported.
    """
    migs = [u for u in units if u.mig]
    return [u for u in units if not u.mig] + migs[:1]


def _per_unit(
    check: str,
    required: str,
    units: list[Unit],
    value: Any,
    ok: Any,
    show: Any,
) -> CheckOutcome:
    """Fail naming every unit that misses; unsupported when no unit reports the value."""
    if not units:
        return CheckOutcome(check, required, "fail", "no usable GPU")
    known = [(u, value(u)) for u in units if value(u) is not None]
    if not known:
        return CheckOutcome(check, required, "unsupported", "not reported by this GPU/driver")
    bad = [f"{u.label()} has {show(v)}" for u, v in known if not ok(v)]
    if bad:
        return CheckOutcome(check, required, "fail", "; ".join(bad))
    lowest = min(known, key=lambda uv: uv[1])
    note = "" if len(known) == len(units) else f" ({len(units) - len(known)} not reported)"
    return CheckOutcome(
        check, required, "pass", f"lowest: {lowest[0].label()} has {show(lowest[1])}{note}"
    )


def _ecc_check(req: Requirements, gpus: tuple[GpuInfo, ...]) -> CheckOutcome:
    check, fail = "fail-on-ecc-errors", req.fail_on_ecc_errors
    required = "no uncorrected ECC errors or pending remaps" if fail else "report only"
    if not any(g.health.memory_counters_supported() for g in gpus):
        return CheckOutcome(check, required, "unsupported", "ECC counters not reported (ECC off?)")
    found = [f"GPU {g.index}: {', '.join(p)}" for g in gpus if (p := g.health.memory_problems())]
    if not found:
        return CheckOutcome(check, required, "pass", "no ECC errors, no pending remaps")
    if fail:
        return CheckOutcome(check, required, "fail", "; ".join(found))
    why = "; ".join(found) + f" (not failing: {check} is false)"
    return CheckOutcome(check, required, "pass", why)


def _name_check(pattern: re.Pattern[str], units: list[Unit]) -> CheckOutcome:
    required = f"matches /{pattern.pattern}/"
    if not units:
        return CheckOutcome("gpu-name", required, "fail", "no usable GPU")
    bad = [u.label() for u in units if not pattern.search(u.name)]
    if bad:
        return CheckOutcome("gpu-name", required, "fail", f"{', '.join(bad)}: name does not match")
    names = sorted({u.name for u in units})
    return CheckOutcome("gpu-name", required, "pass", f"all match: {', '.join(names)}")


def evaluate(
    req: Requirements, snapshot: Snapshot | None, visibility: Visibility | None = None
) -> list[CheckOutcome]:
    """Every requirement against ``snapshot`` (``None``: no NVML on this machine).

    ``snapshot`` holds the job's GPUs (``CUDA_VISIBLE_DEVICES`` applied, see
    :mod:`gpuci.gpu._visible`); ``visibility`` says how they were chosen, for the reasons.
    """
    gpus = snapshot.gpus if snapshot else ()
    if not gpus and not req.require_gpu:
        need = "none (CPU-only allowed)"
        return [CheckOutcome("require-gpu", need, "pass", "no GPU here; continuing CPU-only")]
    every = usable_units(snapshot, req.allow_mig)
    units = cuda_units(every)
    checks = [
        _presence_check(snapshot, visibility),
        _mig_check(req, gpus),
        _count_check(req, gpus, every, units),
    ]
    if req.min_memory_gb is not None:
        checks.append(_memory_check(req.min_memory_gb, units))
    if req.min_compute_capability is not None:
        checks.append(_capability_check(req.min_compute_capability, units))
    if req.min_cuda is not None:
        checks.append(_cuda_check(req.min_cuda, snapshot))
    if req.gpu_name is not None:
        checks.append(_name_check(req.gpu_name, units))
    if gpus:
        checks.append(_ecc_check(req, gpus))
    return checks


def _presence_check(snapshot: Snapshot | None, visibility: Visibility | None) -> CheckOutcome:
    """``require-gpu`` (true here): the job has GPUs, or why it has none."""
    need = "a GPU"
    gpus = snapshot.gpus if snapshot else ()
    if not gpus:
        why = "no GPU found"
        if visibility is not None and visibility.hidden:
            why = visibility.describe_none()
        elif snapshot is not None and snapshot.skipped:
            why = (
                f"NVML lists {len(snapshot.skipped)} GPU(s) but this process may open none of "
                f"them ({snapshot.skipped[0].reason}): the job was given no GPU"
            )
        return CheckOutcome("require-gpu", need, "fail", why)
    found = f"{len(gpus)} GPU(s) found"
    if visibility is not None and visibility.restricted:
        found = (
            f"{len(gpus)} GPU(s) visible to this job through CUDA_VISIBLE_DEVICES "
            f"({len(visibility.hidden)} other(s) on the host not judged)"
        )
    return CheckOutcome("require-gpu", need, "pass", found)


def _mig_check(req: Requirements, gpus: tuple[GpuInfo, ...]) -> CheckOutcome:
    """``allow-mig``: a GPU in MIG mode is usable only as its MIG devices."""
    mig_gpus = [g for g in gpus if g.mig_enabled]
    required = "MIG devices allowed" if req.allow_mig else "no GPU in MIG mode"
    if not mig_gpus:
        return CheckOutcome("allow-mig", required, "pass", "no GPU in MIG mode")
    if not req.allow_mig:
        names = ", ".join(f"GPU {g.index} '{g.name}'" for g in mig_gpus)
        return CheckOutcome("allow-mig", required, "fail", f"{names} in MIG mode: not usable whole")
    empty = [f"GPU {g.index}" for g in mig_gpus if not g.mig_devices]
    count = sum(len(g.mig_devices) for g in mig_gpus)
    reason = (
        f"{count} MIG device(s) on {len(mig_gpus)} GPU(s); CUDA shows one MIG device per "
        "process, so one is counted and exported"
    )
    if empty:
        reason += f"; {', '.join(empty)} in MIG mode with no instances"
    return CheckOutcome("allow-mig", required, "pass", reason)


def _count_check(
    req: Requirements, gpus: tuple[GpuInfo, ...], every: list[Unit], units: list[Unit]
) -> CheckOutcome:
    """``min-gpus``: the devices one CUDA process can use (MIG devices past the first don't)."""
    outcome: Outcome = "pass" if len(units) >= req.min_gpus else "fail"
    mig = any(g.mig_enabled for g in gpus) and req.allow_mig
    kind = "GPU(s)/MIG device(s)" if mig else "usable GPU(s)"
    found = f"{len(units)} {kind} found"
    if len(every) > len(units):
        found = (
            f"{len(units)} {kind} one CUDA process can use ({len(every) - len(units)} more MIG "
            "device(s) need a process each: CUDA shows one MIG device per process)"
        )
    return CheckOutcome("min-gpus", f">= {req.min_gpus}", outcome, found)


def _memory_check(need_gb: float, units: list[Unit]) -> CheckOutcome:
    return _per_unit(
        "min-memory-gb",
        f">= {need_gb:g} GB per GPU",
        units,
        lambda u: u.memory_total,
        lambda v: v >= need_gb * GB,
        lambda v: f"{v / GB:.1f} GB",
    )


def _capability_check(need_cc: tuple[int, ...], units: list[Unit]) -> CheckOutcome:
    return _per_unit(
        "min-compute-capability",
        f">= {version_text(need_cc)}",
        units,
        lambda u: u.compute_capability,
        lambda v: version_ge(v, need_cc),
        lambda v: f"compute capability {version_text(v)}",
    )


def _cuda_check(need: tuple[int, ...], snapshot: Snapshot | None) -> CheckOutcome:
    """``min-cuda``: the highest CUDA the driver supports; unknown is unsupported, not a fail."""
    text = f">= {version_text(need)}"
    if snapshot is None or not snapshot.gpus:
        why = "no NVIDIA driver here" if snapshot is None else "no GPU visible to this job"
        return CheckOutcome("min-cuda", text, "fail", why)
    cuda = snapshot.cuda_version
    if cuda is None:
        return CheckOutcome("min-cuda", text, "unsupported", "driver's CUDA unknown")
    ok = version_ge(cuda, need)
    reason = f"driver {snapshot.driver_version} supports CUDA up to {version_text(cuda)}"
    if not ok:
        reason += "; upgrade the driver"
    return CheckOutcome("min-cuda", text, "pass" if ok else "fail", reason)
