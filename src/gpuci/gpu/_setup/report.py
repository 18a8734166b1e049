"""gpu-setup's Result, rendered from its typed outcome: the headline, outputs, annotations and
the job summary (an overview, a table per GPU, and the checks). Nothing here reads NVML or
writes a file: :mod:`gpuci.gpu._setup.operation` did. A dry run says what this machine lacks
and fails nothing.
"""

from __future__ import annotations

from gpuci.errors import CheckFailed, ExitCode
from gpuci.gpu._checks import CheckOutcome, Unit, gb
from gpuci.gpu._nvml import GpuInfo, Snapshot
from gpuci.gpu._setup.operation import COMMAND, Setup
from gpuci.gpu._visible import Visibility
from gpuci.redact import clip
from gpuci.runtime import Result, markdown_table

__all__ = ["render"]

# Characters of each requirement and reason a dry run's headline quotes: an input such as
# gpu-name (``matches /<pattern>/``) is a with: value, of up to 5 Mi characters in a plan.
MAX_QUOTED = 120


def render(done: Setup) -> Result:
    """The Result gpu-setup reports (``CUDA_VISIBLE_DEVICES`` is the command's to export).

    Args:
        done: what :func:`gpuci.gpu._setup.operation.setup` returned.

    Returns:
        The step's headline, summary, annotations and report; in a real run also its outputs,
        and exit 1 when a requirement is not met.
    """
    result = Result(command=COMMAND)
    result.report = done.report
    _describe(result, done)
    if done.path is None:
        return _plan_only(result, done)
    return _verdict(result, done)


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
            COMMAND,
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


def _describe(result: Result, seen: Setup) -> None:
    """The step summary (GPUs, checks) and the notes a real run and a dry run both give."""
    if seen.snapshot and seen.gpus:
        result.summary.append(overview(seen.snapshot))
        result.summary += [gpu_table(g) for g in seen.gpus]
    elif seen.nvml_error:
        result.summary.append(f"**GPUs**: none ({seen.nvml_error.message})")
    else:
        result.summary.append("**GPUs**: none found by NVML")
    result.summary.append(checks_table(seen.checks))
    if len(seen.every) > len(seen.units):
        result.notice(
            f"{len(seen.every) - len(seen.units) + 1} MIG devices here, but CUDA shows one MIG "
            f"device per process: {seen.units[-1].uuid} is exported; run one process per MIG "
            "device (CUDA_VISIBLE_DEVICES=MIG-...) to use the others",
            "gpu-setup: MIG",
        )
    for note in [n for g in seen.gpus for n in g.notes]:
        result.warning(f"unexpected NVML answer: {note}", COMMAND)
    _visibility_notes(result, seen.host, seen.visibility)
    for g in seen.gpus:
        for finding in g.mode_findings():
            result.warning(f"GPU {g.index}: {finding}", "gpu-setup: modes")


def _plan_only(result: Result, seen: Setup) -> Result:
    """Dry run: say what this machine lacks, write nothing, fail nothing."""
    failed = seen.failed
    lacking = "; ".join(
        f"{c.check} ({clip(c.required, MAX_QUOTED)}): {clip(c.reason, MAX_QUOTED)}" for c in failed
    )
    result.headline = (
        f"dry run: this machine lacks what the job needs: {lacking}"
        if failed
        else "dry run: " + _headline([], seen.units, seen.cpu_only)
    )
    if seen.nvml_error:
        result.notice(f"no usable NVML here: {seen.nvml_error.message}", "gpu-setup dry run")
    return result


def _verdict(result: Result, done: Setup) -> Result:
    """A real run: outputs, the verdict, an error per failed check, the ECC warnings."""
    failed = done.failed
    result.outputs = done.outputs()
    result.headline = _headline(failed, done.units, done.cpu_only)
    for check in failed:
        result.error(f"{check.check}: {check.reason} (required {check.required})", COMMAND)
    if not failed:
        for g in done.gpus:
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
