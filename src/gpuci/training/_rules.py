"""Gate rules as data: parse ``name=value`` lines, then judge metrics against them.

Three kinds: ``min`` (value >= threshold), ``max`` (value <= threshold) and ``max-regression``
(no worse than the baseline by more than an absolute amount, or a relative one written ``1%``).
Whether "worse" means lower or higher is decided once per metric (:func:`lower_is_better`), so a
loss and an accuracy are both guarded by the same rule. Every rule yields one row; a missing
metric, NaN or a non-number is a failing row, never a silent pass.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuci.errors import InputError
from gpuci.redact import json_kind
from gpuci.training._metrics import AmbiguousName, Metrics, as_number, lookup

_NAME = re.compile(r"^[^\s=]+$")
MAX_CELL = 200  # a name, rule or verdict in the gate table: a PR names its metrics
# Words that mark a metric where smaller is better, matched as whole dotted/underscored parts.
LOWER_BETTER_WORDS = frozenset(
    {"loss", "error", "err", "errors", "perplexity", "ppl", "latency", "time", "seconds", "secs"}
    | {"ms", "wer", "cer", "mse", "mae", "rmse", "mape", "nll", "bpb", "bpc"}
)


@dataclass(frozen=True)
class Rule:
    kind: str  # "min" | "max" | "max-regression"
    metric: str
    value: float
    relative: bool = False  # max-regression only: value is a fraction of the baseline

    def describe(self, lower_better: bool = False) -> str:
        if self.kind == "min":
            return f"{self.metric} >= {self.value:g}"
        if self.kind == "max":
            return f"{self.metric} <= {self.value:g}"
        amount = f"{self.value * 100:g}%" if self.relative else f"{self.value:g}"
        way = "rise" if lower_better else "drop"
        return f"{self.metric} {way} <= {amount} vs baseline"


@dataclass
class Row:
    """One judged rule: what the summary table, the outputs and the report show."""

    rule: Rule
    rule_text: str
    metric: str  # the full dotted name found (or the name asked for, when missing)
    value: Any = None
    baseline: float | None = None
    delta: float | None = None
    limit: float | None = None  # the value the rule draws the line at (the charts draw it)
    passed: bool = False
    skipped: bool = False
    verdict: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.rule.kind,
            "rule": self.rule_text,
            "threshold": self.rule.value if self.rule.kind in ("min", "max") else None,
            "metric": self.metric,
            "value": self.value,
            "baseline": self.baseline,
            "delta": self.delta,
            "limit": self.limit,
            "passed": self.passed,
            "skipped": self.skipped,
            "verdict": self.verdict,
        }


@dataclass
class Verdict:
    rows: list[Row] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(row.passed for row in self.rows)

    @property
    def failed(self) -> list[Row]:
        return [row for row in self.rows if not row.passed]


def _parse_number(kind: str, line: str, raw: str, allow_percent: bool) -> tuple[float, bool]:
    text = raw.strip()
    relative = allow_percent and text.endswith("%")
    if relative:
        text = text[:-1].strip()
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if value != value or value in (float("inf"), float("-inf")):
        example = "accuracy=0.01 or accuracy=1%" if allow_percent else "eval.accuracy=0.92"
        raise InputError(
            f"{kind} rule '{line}': '{raw.strip()}' is not a finite number",
            hint=f"write one name=value per line, e.g. {example}",
        )
    if allow_percent and value < 0:
        raise InputError(
            f"{kind} rule '{line}': a regression allowance cannot be negative",
            hint="write how much worse than the baseline is still fine, e.g. accuracy=0.01",
        )
    return (value / 100 if relative else value), relative


def parse_rules(kind: str, lines: list[str] | None) -> list[Rule]:
    """``["eval.accuracy=0.92", ...]`` -> rules; any malformed line is bad input (exit 2)."""
    rules: list[Rule] = []
    seen: set[str] = set()
    for line in lines or []:
        name, sep, raw = line.partition("=")
        name = name.strip()
        if not sep or not name or not _NAME.match(name):
            raise InputError(
                f"{kind} rule '{line}' is not name=value",
                hint=f"write one rule per line, e.g. {kind}: eval.accuracy=0.92",
            )
        if name in seen:
            raise InputError(
                f"{kind} rule for '{name}' given twice", hint="keep one rule per metric and kind"
            )
        seen.add(name)
        value, relative = _parse_number(kind, line, raw, allow_percent=kind == "max-regression")
        rules.append(Rule(kind, name, value, relative))
    return rules


def lower_is_better(name: str, rules: list[Rule], declared: list[str] | None) -> bool:
    """Declared names win; then a lone ``max`` rule says lower is better, a lone ``min`` rule
    higher; then the name's words (bounds on both sides, ``min: loss=0`` and ``max: loss=2``,
    say nothing of which way is worse: the min made a rising loss pass its regression rule)."""
    if declared and (name in declared or name.rsplit(".", 1)[-1] in declared):
        return True
    kinds = {r.kind for r in rules if r.metric == name} & {"min", "max"}
    if len(kinds) == 1:
        return kinds == {"max"}
    words = set(re.split(r"[._\-/]", name.lower()))
    return bool(words & LOWER_BETTER_WORDS)


def _baseline_number(
    baseline: Metrics | None, full_name: str, asked: str
) -> tuple[float | None, str]:
    """The baseline's number for a metric, else None and why there is none: no file, no such
    metric, or a value that is no number (NaN, a string: said so, not "not in baseline")."""
    if baseline is None:
        return None, "no baseline"
    found = lookup(baseline, full_name) or lookup(baseline, asked)
    if found is None:
        return None, "not in baseline"
    number, why = as_number(found[1])
    return number, f"baseline value is {why}" if why else ""


def judge(
    metrics: Metrics,
    rules: list[Rule],
    baseline: Metrics | None,
    *,
    lower_better_names: list[str] | None = None,
    require_baseline: bool = False,
) -> Verdict:
    """Judge every rule; the verdict passes only when every row passes."""
    verdict = Verdict()
    for rule in rules:
        lower = lower_is_better(rule.metric, rules, lower_better_names)
        row = Row(rule=rule, rule_text=rule.describe(lower), metric=rule.metric)
        verdict.rows.append(row)
        found, missing = None, ""  # missing: why there is no baseline number
        try:  # the files are the PR's: a name they make ambiguous fails its row
            found = lookup(metrics, rule.metric)
            if found is not None:
                row.metric, row.value = found
                row.baseline, missing = _baseline_number(baseline, row.metric, rule.metric)
        except AmbiguousName as exc:
            where = " in the baseline" if found is not None else ""
            row.verdict = f"FAIL: {exc.message}{where}; name it in full"
            continue
        if found is None:
            row.verdict = "FAIL: metric missing"
            continue
        number, why = as_number(row.value)
        if number is not None and row.baseline is not None:
            row.delta = number - row.baseline
        if number is None:
            row.verdict = f"FAIL: {why}"
            continue
        if rule.kind in ("min", "max"):
            row.limit = rule.value
        if rule.kind == "min":
            row.passed = number >= rule.value
            row.verdict = "pass" if row.passed else f"FAIL: below {rule.value:g}"
        elif rule.kind == "max":
            row.passed = number <= rule.value
            row.verdict = "pass" if row.passed else f"FAIL: above {rule.value:g}"
        else:
            _judge_regression(row, number, lower, require_baseline, missing)
    return verdict


def _judge_regression(
    row: Row, number: float, lower: bool, require_baseline: bool, missing: str
) -> None:
    """``missing``: why there is no baseline number, should there be none."""
    rule = row.rule
    if row.baseline is None:
        row.skipped = not require_baseline
        row.passed = not require_baseline
        row.verdict = f"skipped: {missing}" if row.passed else f"FAIL: {missing}"
        return
    worse_by = (number - row.baseline) if lower else (row.baseline - number)
    allowed = rule.value * abs(row.baseline) if rule.relative else rule.value
    row.limit = row.baseline + allowed if lower else row.baseline - allowed
    # A tiny epsilon: 0.93 - 0.92 must not fail a 0.01 allowance on float rounding.
    row.passed = worse_by <= allowed + 1e-12 * max(1.0, abs(row.baseline))
    row.verdict = "pass" if row.passed else f"FAIL: worse by {worse_by:.4g} > {allowed:.4g}"


def numeric_deltas(metrics: Metrics, baseline: Metrics | None) -> list[tuple[str, float, float]]:
    """``(name, value, baseline)`` for every finite metric present in both files."""
    if baseline is None:
        return []
    out: list[tuple[str, float, float]] = []
    for name, value in metrics.items():
        number, _ = as_number(value)
        base, _ = as_number(baseline.get(name))
        if number is not None and base is not None:
            out.append((name, number, base))
    return out


def fmt(value: Any, signed: bool = False) -> str:
    """Numbers to 4 significant digits (``+``/``-`` for deltas); anything else by its JSON type
    only: a value is the PR's own text, and the table becomes a PR comment."""
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "true" if value else "false"
    if not isinstance(value, int | float):
        return f"({json_kind(value)})"
    if isinstance(value, int) and abs(value) > sys.float_info.max:  # .4g would raise
        return "(too large)"
    return f"{value:+.4g}" if signed else f"{value:.4g}"


def table_markdown(rows: list[dict[str, Any]]) -> str:
    """The gate table from row dicts (as stored in the journal): one line per rule."""
    from gpuci.charts import cut
    from gpuci.markdown import Code
    from gpuci.runtime import markdown_table

    body = []
    # a gate report given to ``report`` may have been edited: objects only, .get, str()
    for r in (row for row in rows if isinstance(row, dict)):
        passed = bool(r.get("passed"))
        mark = "✅ " if passed and not r.get("skipped") else "⏭️ " if passed else "❌ "
        body.append(
            (
                Code(cut(r.get("metric", ""), MAX_CELL)),
                fmt(r.get("value")),
                cut(r.get("rule", ""), MAX_CELL),
                fmt(r.get("baseline")),
                fmt(r.get("delta"), signed=True),
                mark + cut(r.get("verdict", ""), MAX_CELL),
            )
        )
    return markdown_table(["metric", "value", "rule", "baseline", "delta", "verdict"], body)


def row_dicts(gate: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A gate report's rows that are objects: the report is a file, so input (``"rows":
    "abc"`` or ``[1, 2]`` is left out, not a traceback)."""
    rows = gate.get("rows")
    return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []


def gate_passed(gate: Mapping[str, Any]) -> bool:
    """Whether a gate report says it passed: ``passed`` is ``true`` and so is every row's. The
    report is a file or a journal record (input): ``"false"``, ``1`` or ``[0]`` is no pass."""
    return gate.get("passed") is True and all(r.get("passed") is True for r in row_dicts(gate))
