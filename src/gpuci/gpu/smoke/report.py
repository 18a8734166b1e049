"""The smoke report: its name, a markdown table per GPU (written by ``gpuci.files``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuci import charts
from gpuci.gpu.smoke.checks import Outcome
from gpuci.runtime import markdown_table

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
    blocks[:0] = [charts.fenced(c) for c in charts.smoke_charts(outcomes, gpus)]  # above tables
    machine = [_row(o) for o in outcomes if o.gpu is None]
    if machine:
        blocks.append("#### gpu-smoke: all GPUs\n\n" + markdown_table(headers, machine))
    return blocks
