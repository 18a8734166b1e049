"""The training gate's charts: per gated metric, the default branch's history against this run.

Drawn with :mod:`gpuci.charts` (Mermaid ``xychart-beta``, inert text, the palette); what a
metric's chart shows is decided here: failing metrics first, this run as a bar of its own colour
(red: a rule on it failed), each rule's limit and the baseline as named lines, days as labels.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuci.charts import MAX_CATEGORIES, RULE_COLOURS, Chart, Series, cut, finite, number

__all__ = ["metric_charts"]

_MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]


def _day(run: dict[str, Any], index: int) -> str:
    """A history run's x label: its day (``Nov 30``), else its commit's first 7 characters."""
    date = str(run.get("date") or "")
    found = re.match(r"\d{4}-(\d\d)-(\d\d)", date)
    if found and 1 <= int(found.group(1)) <= 12:
        return f"{_MONTHS[int(found.group(1)) - 1]} {int(found.group(2))}"
    return str(run.get("commit") or "")[:7] or f"run {index + 1}"


@dataclass
class _Metric:
    """What one gated metric's chart needs, gathered from its rows."""

    value: float
    baseline: float | None = None
    passed: bool = True
    rules: list[tuple[str, float, bool]] = field(default_factory=list)  # (rule, limit, passed)


def _gather(rows: Sequence[Any]) -> dict[str, _Metric]:
    """Rows (a gate record's, so input: type-checked) by metric, in their order."""
    found: dict[str, _Metric] = {}
    for row in rows:
        if not isinstance(row, dict) or not isinstance(row.get("metric"), str):
            continue
        value = finite(row.get("value"))
        if value is None:
            continue
        item = found.setdefault(row["metric"], _Metric(value))
        if (base := finite(row.get("baseline"))) is not None:
            item.baseline = base
        passed = row.get("passed") is True
        item.passed = item.passed and passed
        limit = finite(row.get("limit"))
        if limit is None and row.get("kind") in ("min", "max"):  # a record from before "limit"
            limit = finite(row.get("threshold"))
        if limit is not None:
            rule = row.get("rule") if isinstance(row.get("rule"), str) else row.get("kind")
            item.rules.append((str(rule), limit, passed))
    return found


def metric_charts(
    rows: Sequence[Any], past: Sequence[dict[str, Any]] | None, limit: int = 10
) -> list[Chart]:
    """Per gated metric, failing ones first: the default branch's history (or the baseline) as
    bars, this run as a bar of its own colour (red: a rule on it failed), each rule's limit and
    the baseline as named lines."""
    gathered = _gather(rows)
    order = sorted(gathered, key=lambda name: gathered[name].passed)  # stable: failed first
    charts = []
    for name in order[:limit]:
        item = gathered[name]
        runs = [run for run in past or [] if name in run.get("metrics", {})][-MAX_CATEGORIES + 1 :]
        points = [(_day(run, i), run["metrics"][name]) for i, run in enumerate(runs)]
        count = len(points)
        history = "default branch, " + ("last run" if count == 1 else f"last {count} runs")
        if not points and item.baseline is not None:
            points, history = [("baseline", item.baseline)], "baseline"
        verdict = "passes" if item.passed else "fails"
        bars = []
        if points:
            bars.append(Series(history, [v for _, v in points] + [None], "blue"))
        mine = [None] * len(points) + [item.value]
        bars.append(
            Series(
                f"this run: {number(item.value)}, {verdict}",
                mine,
                "red" if not item.passed else "green",
            )
        )
        width = len(points) + 1
        rules = sorted(item.rules, key=lambda r: r[2])  # a failed rule first: in orange
        lines = [
            Series(
                f"{'failed ' if not ok else ''}rule {cut(rule)}: limit {number(value)}",
                [value] * width,
                RULE_COLOURS[i % len(RULE_COLOURS)],
            )
            for i, (rule, value, ok) in enumerate(rules)
        ]
        if item.baseline is not None and past:
            lines.append(
                Series(f"baseline: {number(item.baseline)}", [item.baseline] * width, "purple")
            )
        where = f"{history}, then this run" if points else "this run"
        categories = [label for label, _ in points] + ["this run"]
        charts.append(Chart(f"{name}: {where}", categories, bars, name, lines, thin=True))
    return charts
