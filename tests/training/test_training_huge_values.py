"""A finite but huge number (``1.7e308``) in a metrics file or the history is judged, never drawn.

Judging compares it with its rule like any number; charting it would overflow the axis
arithmetic (the spread of two values near the float's limit is infinite), so charts draw only
values within ``charts.MAX_DRAWN``, and a chart that still cannot be drawn is replaced by a
line saying so: never an internal error after gate.json was written, which would skip the
provenance, the history and the PR comment (leaving an old "passed" comment up).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from training_cli import REPO, marked, run_gate

from forges.fake_github import FakeGitHub
from gpuci import charts
from gpuci.runtime import Result
from gpuci.training import _history as history
from gpuci.training._charts import metric_charts
from gpuci.training._metrics import as_number
from gpuci.training._report import charts_markdown, gate_markdown
from gpuci.training._rules import fmt, numeric_deltas
from gpuci_testing import clean_env, run_cli_here

HUGE = 1.7e308
BIG_INT = 10**350  # valid JSON (untrusted_json allows 400 digits), beyond any float


def _no_internal_error(proc) -> None:
    text = proc.stdout + proc.stderr
    assert "internal error" not in text and "Traceback" not in text, text


@pytest.mark.parametrize(
    ("rule", "rc", "verdict"),
    [(("--min", "accuracy=0.9"), 0, "✅ pass"), (("--max", "accuracy=1"), 1, "❌ FAIL: above 1")],
    ids=["min-passes", "max-fails"],
)
def test_a_huge_metric_is_judged_by_its_rule_and_the_gate_finishes(tmp_path, rule, rc, verdict):
    proc = run_gate(tmp_path, {"accuracy": HUGE}, *rule, "--json")
    _no_internal_error(proc)
    assert proc.returncode == rc, proc.stdout + proc.stderr
    answer = json.loads(proc.stdout)
    assert verdict in answer["summary_markdown"]
    assert "1.7e+308" in answer["summary_markdown"]  # the table still shows the value
    assert answer["report"]["charts"] == []  # not drawable: no chart, and no crash


def test_a_huge_metric_updates_the_pr_comment_it_fails(tmp_path):
    """Push 1 passes; push 2 writes 1.7e308 and fails ``--max``: the comment must say so."""
    with FakeGitHub() as github:
        env = github.pull_request_env(tmp_path, REPO, 7)
        for value, rc in ((0.95, 0), (HUGE, 1)):
            flags = ("--min", "accuracy=0.9", "--max", "accuracy=1", "--comment")
            proc = run_gate(tmp_path, {"accuracy": value}, *flags, env=env)
            _no_internal_error(proc)
            assert proc.returncode == rc, proc.stdout + proc.stderr
        (body,) = marked(github)
    assert "❌ Model gate failed" in body and "above 1" in body


def test_an_integer_beyond_a_float_fails_its_row_and_the_gate_finishes(tmp_path):
    """float(10**350) raises OverflowError: the gate judged it an internal error (exit 3)."""
    metrics = {"accuracy": BIG_INT, "tokens": BIG_INT}
    baseline = {"accuracy": 0.4, "tokens": 1}
    proc = run_gate(tmp_path, metrics, "--min", "accuracy=0.5", "--json", baseline=baseline)
    _no_internal_error(proc)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (row,) = json.loads(proc.stdout)["report"]["gate"]["rows"]
    assert row["verdict"] == "FAIL: too large (beyond a float's range)"
    assert "| (too large) |" in json.loads(proc.stdout)["summary_markdown"]


def test_an_integer_beyond_a_float_is_no_number_anywhere_it_is_shown():
    assert as_number(BIG_INT) == (None, "too large (beyond a float's range)")
    assert as_number(-BIG_INT)[0] is None
    assert as_number(10**300) == (1e300, "")
    assert fmt(BIG_INT) == fmt(-BIG_INT) == "(too large)"
    assert numeric_deltas({"t": BIG_INT, "a": 2}, {"t": 1, "a": 1}) == [("a", 2.0, 1.0)]
    # an edited gate.json given to ``report``: its rows and deltas are input
    gate = {"passed": True, "rows": [{"metric": "t", "value": BIG_INT, "rule": "t >= 0"}],
            "deltas": [["t", BIG_INT, 1.5], ["a", 2, 1]]}  # fmt: skip
    shown = gate_markdown(gate, None)
    assert "(too large)" in shown and "All metrics vs baseline" in shown


def _history_with(store: Path, value: float) -> None:
    folder = store / history.prefix("training")
    folder.mkdir(parents=True)
    item = {"format": 1, "epoch": 1.7e9, "date": "2026-12-01T00:00:00Z", "metrics": {"acc": value}}
    (folder / "8235000000000-abc-0123abcd.json").write_text(json.dumps(item))


def test_a_huge_value_in_the_history_is_dropped_and_report_goes_on(tmp_path):
    _history_with(tmp_path / "hist", HUGE)
    gate = {"passed": True, "rows": [
        {"kind": "min", "metric": "acc", "value": 0.95, "limit": 0.9, "passed": True,
         "rule": "acc >= 0.9"}]}  # fmt: skip
    (tmp_path / "gate.json").write_text(json.dumps(gate))
    args = ("--gate-report", str(tmp_path / "gate.json"), "--history", (tmp_path / "hist").as_uri())
    proc = run_cli_here("report", *args, "--json", env=clean_env(), cwd=tmp_path)
    _no_internal_error(proc)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (chart,) = json.loads(proc.stdout)["report"]["charts"]
    assert chart["categories"] == ["this run"]  # the history's huge point is no point


@pytest.mark.parametrize(
    "value",
    [HUGE, -HUGE, 10**400, 1e31, float("inf")],
    ids=["1.7e308", "-1.7e308", "400-digit-int", "1e31", "inf"],
)
def test_finite_gives_none_beyond_what_a_chart_draws(value):
    assert charts.finite(value) is None


@pytest.mark.parametrize("value", [0.93, -5, 3e26, 1e30])
def test_finite_keeps_every_drawable_number(value):
    assert charts.finite(value) == float(value)


def test_a_chart_holding_huge_values_draws_them_as_no_bar():
    """Values put into a chart directly (not through ``finite``) never reach the axis maths."""
    chart = charts.Chart("t", ["a", "b", "c"], [charts.Series("s", [HUGE, -HUGE, 0.5])])
    chart.lines.append(charts.Series("limit", [1.0, 1.0, 1.0], "orange"))
    assert charts.y_axis(chart) == (0.0, 1.0, False)
    source = charts.mermaid(chart)
    assert "    bar [-1, -1, 0.5]" in source  # under the axis: no bar
    assert chart.as_dict()["y_axis"] == {"min": 0.0, "max": 1.0, "from_zero": True}


def _overflow(_chart: charts.Chart) -> tuple[float, float, bool]:
    """The axis maths failing as a value beyond a float makes them fail."""
    raise OverflowError("int too large to convert to float")


def test_a_chart_that_cannot_be_drawn_is_a_warning_line(monkeypatch):
    """The backstop: whatever the axis maths raise, the chart is dropped for a line."""
    (chart,) = metric_charts([{"metric": "acc", "value": 0.5, "passed": True}], None)
    monkeypatch.setattr(charts, "y_axis", _overflow)
    shown = charts.fenced(chart)
    warning = "\u26a0\ufe0f Chart not drawn, its values are beyond what a chart shows: "
    assert shown == warning + "acc: this run"
    assert chart.as_dict()["y_axis"] is None


def test_a_chart_left_out_is_also_a_warning_annotation_said_once(monkeypatch):
    """In Actions the reader sees a left-out chart without opening the summary; the report
    renders its charts for the body and again for ``--json``, and says it once."""
    gate = {"rows": [{"metric": "acc", "value": 0.5, "passed": True}]}
    monkeypatch.setattr(charts, "y_axis", _overflow)
    result = Result(command="report")
    shown = charts_markdown(gate, None, result)
    charts_markdown(gate, None, result)
    assert "Chart not drawn" in shown
    (note,) = result.annotations
    assert note.level == "warning" and note.title == "gpu-ci report"
    assert note.message.endswith("values are beyond what a chart shows: acc: this run")
