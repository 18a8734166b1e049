"""Charts as Mermaid ``xychart-beta`` blocks: drawn by GitHub and GitLab in comments and summaries.

No image hosting and no extra service: a fenced ```` ```mermaid ```` block in a PR comment, an MR
note or a job summary is drawn by the forge itself. ``xychart-beta`` (bars and lines over named
categories) is in Mermaid since 10.5; newer Mermaid also accepts plain ``xychart`` but keeps the
``-beta`` keyword, so the older spelling works on both.

Chart text (titles, category labels) often comes from files a PR's code wrote (metric names) or
from a store (owners, GPU names), so all of it goes through :func:`text`, the one place that
makes a string inert in Mermaid and in the Markdown fence around it. Values are numbers we
format ourselves; the data of each chart is also given as a plain dict for ``--json``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

MAX_TEXT = 80  # a label or title longer than this is cut (names can be 500 characters)
MAX_CATEGORIES = 60

# What each character that means something to Mermaid or to the Markdown fence becomes:
# ``"`` ends a quoted string; ``%`` begins ``%%`` comments and ``%%{init: ...}%%`` directives
# (anywhere in the text); ``#name;`` is an entity code; a backtick could close the fence or open
# a Markdown string; ``<``/``>`` are HTML to the sanitizer. Each becomes a look-alike (or gets a
# zero-width space after it) so a name still reads as written, in fonts a browser has.
_INERT = str.maketrans(
    {
        '"': "\u201d",  # right double quote
        "`": "\u2019",  # right single quote
        "%": "%\u200b",  # a zero-width space after: no ``%%`` is left, and it reads the same
        "#": "#\u200b",  # the same: no ``#name;`` entity code is left
        "<": "\u2039",  # single left angle quote
        ">": "\u203a",  # single right angle quote
        "\\": "\u29f5",  # reverse solidus operator
        "{": "\u2774",  # medium left curly bracket ornament
        "}": "\u2775",  # medium right curly bracket ornament
    }
)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]+")


def text(value: Any) -> str:
    """Any value as a double-quoted Mermaid string that renders as text and cannot end early."""
    one_line = _CONTROL.sub(" ", str(value)).strip()
    if len(one_line) > MAX_TEXT:
        one_line = one_line[: MAX_TEXT - 1].rstrip() + "\u2026"
    return '"' + (one_line.translate(_INERT) or "-") + '"'


def number(value: float) -> str:
    """A finite number as Mermaid reads one: no exponent, no ``nan``."""
    if not math.isfinite(value):
        return "0"
    shown = f"{value:.6f}".rstrip("0").rstrip(".")
    if shown in ("-0", ""):
        return "0"
    if abs(value) < 1e-3 and value != 0:  # keep small values visible: 4 significant digits
        shown = f"{value:.{4 - math.floor(math.log10(abs(value)))}f}".rstrip("0").rstrip(".")
    return shown


@dataclass
class Chart:
    """One xychart: categories along x, bars of values, and lines (thresholds, baselines)."""

    title: str
    categories: list[str]
    bars: list[float]
    y_label: str = ""
    lines: list[tuple[str, list[float]]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "categories": self.categories,
            "bars": self.bars,
            "y_label": self.y_label,
            "lines": [{"label": label, "values": values} for label, values in self.lines],
        }


def _range(values: Sequence[float]) -> tuple[float, float]:
    """A y range that shows the differences (0.91 against 0.93), with a little room."""
    finite = [v for v in values if math.isfinite(v)] or [0.0]
    low, high = min(finite), max(finite)
    pad = (high - low) * 0.1 or abs(high) * 0.1 or 1.0
    low = 0.0 if low >= 0 and low - pad < 0 else low - pad
    return low, high + pad


def mermaid(chart: Chart) -> str:
    """The chart's Mermaid source (without the fence)."""
    cats = chart.categories[-MAX_CATEGORIES:]
    keep = len(cats)
    bars = chart.bars[-keep:]
    lines = [(label, values[-keep:]) for label, values in chart.lines]
    low, high = _range([*bars, *(v for _, vs in lines for v in vs)])
    out = [
        "xychart-beta",
        f"    title {text(chart.title)}",
        "    x-axis [" + ", ".join(text(c) for c in cats) + "]",
        f"    y-axis {text(chart.y_label or 'value')} {number(low)} --> {number(high)}",
        "    bar [" + ", ".join(number(v) for v in bars) + "]",
    ]
    out += ["    line [" + ", ".join(number(v) for v in values) + "]" for _, values in lines]
    return "\n".join(out)


def fenced(chart: Chart) -> str:
    """The chart as a Markdown block, with a one-line key (xychart draws no legend)."""
    key = "bars: " + (chart.y_label or "value")
    if chart.lines:
        key += "; lines: " + ", ".join(label for label, _ in chart.lines)
    from gpuci.markdown import cell

    return f"```mermaid\n{mermaid(chart)}\n```\n\n<sub>{cell(key)}</sub>"


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def metric_charts(
    rows: Sequence[Any], past: Sequence[dict[str, Any]] | None, limit: int = 10
) -> list[Chart]:
    """Per gated metric: the default branch's history (or the baseline) then this run as bars,
    the threshold(s) and the baseline as lines. Rows are a gate record's (input: type-checked)."""
    by_metric: dict[str, dict[str, Any]] = {}
    for row in rows:
        if not isinstance(row, dict) or not isinstance(row.get("metric"), str):
            continue
        value = _finite(row.get("value"))
        if value is None:
            continue
        item = by_metric.setdefault(row["metric"], {"value": value, "baseline": None, "lines": []})
        if (base := _finite(row.get("baseline"))) is not None:
            item["baseline"] = base
        threshold = _finite(row.get("threshold"))
        if threshold is not None and row.get("kind") in ("min", "max"):
            item["lines"].append((f"{row['kind']} {number(threshold)}", threshold))
    charts = []
    for name, item in list(by_metric.items())[:limit]:
        points = [
            (run.get("commit", "")[:7] or run.get("date", "")[:10], run["metrics"][name])
            for run in past or []
            if name in run.get("metrics", {})
        ]
        if not points and item["baseline"] is not None:
            points = [("baseline", item["baseline"])]
        categories = [label or f"run {i + 1}" for i, (label, _) in enumerate(points)]
        categories.append("this run")
        bars = [v for _, v in points] + [item["value"]]
        lines = [(label, [v] * len(bars)) for label, v in item["lines"]]
        if item["baseline"] is not None and past:
            lines.append((f"baseline {number(item['baseline'])}", [item["baseline"]] * len(bars)))
        where = "default branch, then this run" if past else "this run"
        charts.append(Chart(f"{name}: {where}", categories, bars, name, lines))
    return charts


def spend_chart(
    spent: Sequence[tuple[str, float]], budgets: Sequence[float | None], period: str
) -> Chart:
    """``pods cost``: spend per person over the period, each one's budget as a line (drawn when
    everyone shown has one: a person without a budget is not a person with a budget of 0)."""
    chart = Chart(
        f"GPU spend per person since {period}",
        [owner for owner, _ in spent],
        [amount for _, amount in spent],
        "USD",
    )
    limits = [b for b in budgets if b is not None]
    if limits and len(limits) == len(spent):  # a line cannot skip a point: all or none
        chart.lines.append(("budget USD", limits))
    return chart


def measured_chart(title: str, unit: str, rows: Sequence[tuple[str, float, float]]) -> Chart:
    """``gpu-smoke`` on several GPUs: measured per GPU as bars, the minimum as a line."""
    return Chart(
        title,
        [name for name, _, _ in rows],
        [measured for _, measured, _ in rows],
        unit,
        [("minimum", [minimum for _, _, minimum in rows])],
    )


# gpu-smoke figures with a minimum: (measured key, minimum key, unit, what was measured).
SMOKE_FIGURES = (
    ("tflops", "min_tflops", "TFLOP/s", "FP16 GEMM"),
    ("copy_gbs", "min_gbs", "GB/s", "device memory bandwidth"),
)


def smoke_charts(outcomes: Sequence[Any], gpus: Any) -> list[Chart]:
    """``gpu-smoke`` on several GPUs: per figure with a minimum, measured per GPU against it.

    ``outcomes`` are the smoke's (``.gpu``, ``.figures``); one GPU gets no chart (its table says
    it all). ``gpus`` maps an index to its name."""
    found = []
    for key, min_key, unit, what in SMOKE_FIGURES:
        rows = []
        for outcome in outcomes:
            figures = getattr(outcome, "figures", None) or {}
            index = getattr(outcome, "gpu", None)
            value, minimum = _finite(figures.get(key)), _finite(figures.get(min_key))
            if index is not None and value is not None and minimum is not None:
                rows.append((f"{index}: {gpus.get(index, '')}".strip(), value, minimum))
        if len(rows) >= 2:
            found.append(measured_chart(f"{what} per GPU ({unit})", unit, rows))
    return found
