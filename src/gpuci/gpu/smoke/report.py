"""The smoke report: one JSON file written atomically, a table per GPU, the outputs."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpuci.errors import InputError
from gpuci.gpu.smoke.checks import Outcome
from gpuci.runtime import markdown_table

REPORT_NAME = "gpuci-smoke-report.json"
SCHEMA = 1
_STATUS = {"pass": "✅ pass", "fail": "❌ fail", "skip": "⏭ skip"}


def report_path(values: Mapping[str, Any], environ: Mapping[str, str]) -> Path:
    if values.get("report"):
        return Path(values["report"])
    return Path(environ.get("RUNNER_TEMP") or os.getcwd()) / REPORT_NAME


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """``path.incomplete`` first, re-read and parsed, then renamed: never half a report."""
    tmp = path.with_name(path.name + ".incomplete")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=2, default=str)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        json.loads(tmp.read_text(encoding="utf-8"))
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise InputError(
            f"cannot write the smoke report to {path}: {exc.strerror or exc}",
            hint="set the report input to a writable path",
        ) from None


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
    machine = [_row(o) for o in outcomes if o.gpu is None]
    if machine:
        blocks.append("#### gpu-smoke: all GPUs\n\n" + markdown_table(headers, machine))
    return blocks
