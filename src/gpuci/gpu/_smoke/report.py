"""The smoke's verdict and report: the Result (headline, annotations, outputs), the JSON
report (written by ``gpuci.files``), a markdown table per GPU and a chart per figure across
GPUs, the journal record."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuci import charts, files
from gpuci.errors import ExitCode
from gpuci.gpu._gpu_info import Snapshot
from gpuci.gpu._smoke.backends import Backend
from gpuci.gpu._smoke.checks import CHECK_NAMES, OWN_ERROR_REASON, Budget, Outcome
from gpuci.gpu.options import SmokeInputs
from gpuci.runtime import Result, Runtime, markdown_table

COMMAND = "gpu-smoke"

REPORT_NAME = "gpuci-smoke-report.json"
SCHEMA = 1
_STATUS = {"pass": "✅ pass", "fail": "❌ fail", "skip": "⏭ skip"}


def figures_text(figures: Mapping[str, Any]) -> str:
    parts = []
    for key, value in figures.items():
        if value is None or value == [] or key == "not_supported":
            continue
        if isinstance(value, list):
            value = "/".join("-" if v is None else str(v) for v in value)
        parts.append(f"{key}={value}")
    if figures.get("not_supported"):
        parts.append("not supported: " + ",".join(figures["not_supported"]))
    return " ".join(parts)


def _row(o: Outcome) -> list[Any]:
    detail = figures_text(o.figures)
    if o.reason:
        detail = f"{o.reason}" + (f" ({detail})" if detail else "")
    return [o.name, _STATUS[o.status], detail or "-", f"{o.seconds:.2f}"]


def summary_tables(outcomes: list[Outcome], gpus: Mapping[int, str]) -> list[str]:
    """One markdown table per GPU, then one for machine-wide checks (NCCL, DCGM)."""
    blocks = []
    headers = ("check", "status", "figures / reason", "seconds")
    for index in sorted({o.gpu for o in outcomes if o.gpu is not None}):
        rows = [_row(o) for o in outcomes if o.gpu == index]
        blocks.append(f"#### gpu-smoke: GPU {index} {gpus.get(index, '')}\n\n"
                      + markdown_table(headers, rows))  # fmt: skip
    blocks[:0] = [charts.fenced(c) for c in smoke_charts(outcomes, gpus)]  # above tables
    machine = [_row(o) for o in outcomes if o.gpu is None]
    if machine:
        blocks.append("#### gpu-smoke: all GPUs\n\n" + markdown_table(headers, machine))
    return blocks


@dataclass
class Smoke:
    """What one smoke found, typed: every check's outcome (GPU by GPU, in run order) and the run.

    ``environment`` names the image's fault when no GPU could start CUDA on a node NVML finds
    healthy (exit 2: the job's container, not the node); ``warnings`` are what went wrong
    beside the checks (the journal could not be appended to).
    """

    outcomes: list[Outcome]
    names: dict[int, str]  # the GPUs the smoke watched, by NVML index
    notes: list[str]  # where the run tested less than asked (warnings)
    budget: Budget
    seconds: float
    environment: str | None
    path: Path  # the JSON report, written
    report: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status == "fail"]

    @property
    def skipped(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status == "skip"]


def judge(
    inp: SmokeInputs,
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
) -> Smoke:
    """The run's outcome: the checks in report order, the report written, the journal appended."""
    order = {n: i for i, n in enumerate(CHECK_NAMES)}
    outcomes.sort(key=lambda o: (o.gpu if o.gpu is not None else 1 << 30, order[o.name]))
    seconds = round(budget.elapsed(), 2)
    done = Smoke(outcomes, names, notes, budget, seconds, environment, report_path(inp, rt))
    done.report = _report(snapshot, done, info, framework=framework, backend=backend)
    files.write_report(done.path, done.report, "smoke report", sort_keys=False)
    _journal(done, rt)
    return done


def render(done: Smoke) -> Result:
    """The Result a smoke reports: exit code and headline, annotations, tables, outputs.

    Args:
        done: what :func:`gpuci.gpu._smoke.examine` returned for a real run.

    Returns:
        Exit 0, 1 with the failed checks named, or 2 for the image's fault.
    """
    failed, skipped = done.failed, done.skipped
    result = Result(command=COMMAND)
    result.exit_code = ExitCode.CHECK_FAILED if failed else ExitCode.OK
    if done.environment:  # exit 2: the job's image or container cannot start CUDA on a healthy node
        result.exit_code = ExitCode.BAD_INPUT
    result.headline = _headline(done)
    _annotate(result, failed, skipped, done.notes, done.budget)
    result.summary = summary_tables(done.outcomes, done.names)
    result.outputs = {
        "passed": not failed,
        "failed-checks": ",".join(o.label for o in failed),
        "skipped-checks": ",".join(o.label for o in skipped),
        "report": str(done.path),
        "seconds": done.seconds,
    }
    result.report = done.report
    for warning in done.warnings:
        result.warning(warning, COMMAND)
    return result


def _report(
    snapshot: Snapshot,
    done: Smoke,
    info: dict[str, Any],
    *,
    framework: str,
    backend: Backend | None,
) -> dict[str, Any]:
    """The JSON report: the run, the GPUs, every check's outcome (in the order written)."""
    return {
        "schema": SCHEMA,
        "command": COMMAND,
        "passed": not done.failed,
        "seconds": done.seconds,
        "budget_seconds": done.budget.total,
        "framework": framework,
        "backend": {"name": backend.name, "version": backend.version} if backend else None,
        "nvml_source": snapshot.source,
        "driver_version": snapshot.driver_version,
        "cuda_version": snapshot.cuda_text,
        "gpus": [
            {"index": g.index, "name": g.name, "uuid": g.uuid, "serial": g.serial}
            for g in snapshot.gpus
        ],
        "failed_checks": [o.label for o in done.failed],
        "skipped_checks": [o.label for o in done.skipped],
        "environment_problem": done.environment,
        "notes": done.notes,
        **info,
        "checks": [o.to_dict() for o in done.outcomes],
        "report_path": str(done.path),
    }


def report_path(inp: SmokeInputs, rt: Runtime) -> Path:
    """The ``report`` input, else gpuci-smoke-report.json in RUNNER_TEMP or the current folder."""
    return files.report_path(inp.report, rt.environ, REPORT_NAME)


def _headline(done: Smoke) -> str:
    """One line: the image's fault, the node's failed checks (and the fix), or the pass."""
    failed, names = done.failed, done.names
    if done.environment:
        return (
            f"environment problem, not the node: no GPU could start a CUDA context while NVML "
            f"sees {len(names)} healthy GPU(s): {done.environment}"
        )
    if failed:
        fix = "take this node out of the runner pool and rerun elsewhere"
        if all(o.reason.startswith(OWN_ERROR_REASON) for o in failed):
            fix = "rerun; gpu-ci failed, the node is not suspected"
        return (
            f"{len(failed)} check(s) failed: "
            + "; ".join(f"{o.label} ({o.reason})" for o in failed)
            + f" (fix: {fix}; the figures are in {done.path})"
        )
    passed = sum(1 for o in done.outcomes if o.status == "pass")
    gpu_text = ", ".join(f"GPU {i} {n}" for i, n in sorted(names.items()))
    return (
        f"{passed} check(s) passed, {len(done.skipped)} skipped on {gpu_text} in {done.seconds:g}s"
    )


def _annotate(
    result: Result,
    failed: list[Outcome],
    skipped: list[Outcome],
    notes: list[str],
    budget: Budget,
) -> None:
    """An error per failed check, a warning per note, one for the checks the budget cut."""
    for o in failed:
        result.error(f"{o.label}: {o.reason}", COMMAND)
    for note in notes:
        result.warning(note, COMMAND)
    budget_skips = [o for o in skipped if o.reason.startswith("skipped to keep the budget")]
    if budget_skips:
        result.warning(
            f"{len(budget_skips)} check(s) skipped to keep the {budget.total:g}s budget: "
            + ", ".join(o.label for o in budget_skips),
            COMMAND,
        )


def _journal(done: Smoke, rt: Runtime) -> None:
    from gpuci import journal

    try:
        journal.record(
            COMMAND,
            {
                "passed": done.report["passed"],
                "failed_checks": done.report["failed_checks"],
                "seconds": done.report["seconds"],
                "gpus": done.report["gpus"],
            },
            rt.environ,
        )
    except OSError as exc:
        done.warnings.append(f"could not append to the job journal: {exc}")


# gpu-smoke figures with a minimum: (measured key, minimum key, unit, what was measured).
SMOKE_FIGURES = (
    ("tflops", "min_tflops", "TFLOP/s", "FP16 GEMM"),
    ("copy_gbs", "min_gbs", "GB/s", "device memory bandwidth"),
)


def smoke_charts(outcomes: Sequence[Any], gpus: Any) -> list[charts.Chart]:
    """``gpu-smoke`` on several GPUs: per figure with a minimum, measured per GPU against it.

    ``outcomes`` are the smoke's (``.gpu``, ``.figures``); one GPU gets no chart (its table says
    it all). ``gpus`` maps an index to its name."""
    found = []
    for key, min_key, unit, what in SMOKE_FIGURES:
        rows = []
        for outcome in outcomes:
            figures = getattr(outcome, "figures", None) or {}
            index = getattr(outcome, "gpu", None)
            value, minimum = charts.finite(figures.get(key)), charts.finite(figures.get(min_key))
            if index is not None and value is not None and minimum is not None:
                rows.append((f"{index}: {gpus.get(index, '')}".strip(), value, minimum))
        if len(rows) >= 2:
            found.append(charts.measured_chart(f"{what} per GPU ({unit})", unit, rows))
    return found
