"""The smoke's verdict and report: the Result (headline, annotations, outputs), the JSON
report (written by ``gpuci.files``), a markdown table per GPU and a chart per figure across
GPUs, the journal record."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gpuci import charts, files
from gpuci.errors import ExitCode
from gpuci.gpu.gpu_info import Snapshot
from gpuci.gpu.options import SmokeInputs
from gpuci.gpu.smoke.backends import Backend
from gpuci.gpu.smoke.checks import CHECK_NAMES, Budget, Outcome
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


def verdict(
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
) -> Result:
    """The run's Result: exit code and headline, annotations, outputs; the report written and
    the journal appended."""
    seconds = round(budget.elapsed(), 2)
    order = {n: i for i, n in enumerate(CHECK_NAMES)}
    outcomes.sort(key=lambda o: (o.gpu if o.gpu is not None else 1 << 30, order[o.name]))
    failed = [o for o in outcomes if o.status == "fail"]
    skipped = [o for o in outcomes if o.status == "skip"]
    path = report_path(inp, rt)
    result = Result(command=COMMAND)
    result.exit_code = ExitCode.CHECK_FAILED if failed else ExitCode.OK
    if environment:  # exit 2: the job's image or container cannot start CUDA on a healthy node
        result.exit_code = ExitCode.BAD_INPUT
    result.headline = _headline(outcomes, names, seconds, path, environment)
    _annotate(result, failed, skipped, notes, budget)
    result.summary = summary_tables(outcomes, names)
    result.outputs = {
        "passed": not failed,
        "failed-checks": ",".join(o.label for o in failed),
        "skipped-checks": ",".join(o.label for o in skipped),
        "report": str(path),
        "seconds": seconds,
    }
    result.report = _report(
        snapshot,
        outcomes,
        failed,
        skipped,
        notes,
        info,
        framework=framework,
        backend=backend,
        budget=budget,
        seconds=seconds,
        environment=environment,
        path=path,
    )
    files.write_report(path, result.report, "smoke report", sort_keys=False)
    _journal(result, rt)
    return result


def _report(
    snapshot: Snapshot,
    outcomes: list[Outcome],
    failed: list[Outcome],
    skipped: list[Outcome],
    notes: list[str],
    info: dict[str, Any],
    *,
    framework: str,
    backend: Backend | None,
    budget: Budget,
    seconds: float,
    environment: str | None,
    path: Path,
) -> dict[str, Any]:
    """The JSON report: the run, the GPUs, every check's outcome (in the order written)."""
    return {
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


def report_path(inp: SmokeInputs, rt: Runtime) -> Path:
    """The ``report`` input, else gpuci-smoke-report.json in RUNNER_TEMP or the current folder."""
    return files.report_path(inp.report, rt.environ, REPORT_NAME)


def _headline(
    outcomes: list[Outcome],
    names: dict[int, str],
    seconds: float,
    path: Path,
    environment: str | None,
) -> str:
    """One line: the image's fault, the node's failed checks (and the fix), or the pass."""
    failed = [o for o in outcomes if o.status == "fail"]
    if environment:
        return (
            f"environment problem, not the node: no GPU could start a CUDA context while NVML "
            f"sees {len(names)} healthy GPU(s): {environment}"
        )
    if failed:
        return (
            f"{len(failed)} check(s) failed: "
            + "; ".join(f"{o.label} ({o.reason})" for o in failed)
            + " (fix: take this node out of the runner pool and rerun elsewhere; "
            f"the figures are in {path})"
        )
    passed = sum(1 for o in outcomes if o.status == "pass")
    skipped = sum(1 for o in outcomes if o.status == "skip")
    gpu_text = ", ".join(f"GPU {i} {n}" for i, n in sorted(names.items()))
    return f"{passed} check(s) passed, {skipped} skipped on {gpu_text} in {seconds:g}s"


def _annotate(
    result: Result,
    failed: list[Outcome],
    skipped: list[Outcome],
    notes: list[str],
    budget: Budget,
) -> None:
    """An error per failed check, a warning per note, one for the checks the budget cut."""
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
