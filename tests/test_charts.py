"""Mermaid chart text: each chart type's source, and hostile names that stay text."""

from __future__ import annotations

import re

import pytest

from gpuci import charts
from gpuci.training._charts import metric_charts
from gpuci.training._ci import RunContext
from gpuci.training._report import render

HOSTILE = [
    'acc" ] \n bar [1e9]',
    "x]\n    line [999]",
    "%%{init: {'theme': 'dark', 'securityLevel': 'loose'}}%%",
    "a %% comment",
    "line1\nline2\r\nline3\u2028four",
    "```\n# closed the fence",
    "<img src=x onerror=alert(1)>",
    "#quot; #35; &amp; {curly}",
    "back\\slash; `tick`",
    "n" * 500,
    "",
    'acc" 0 --> 999',  # the y-axis's own arrow, after a closed quote
    'x]\n    x-axis ["a"] --> [1]\n<script>alert(1)</script>',
]

# The whole grammar gpu-ci writes: a name can change what a string says, never the lines.
_STR = '"(?:[^"\n`%#<>{}\\\\]|[%#]\u200b){1,160}"'
_NUM = r"-?\d+(\.\d+)?"
_HEX = "#[0-9a-f]{6}"
_LINE = re.compile(
    rf'^(%%{{init: {{"xyChart": {{"height": \d+}}, "themeVariables": {{"xyChart": '
    rf'{{"plotColorPalette": "{_HEX}(, {_HEX})*"}}}}}}}}%%'
    rf"|xychart-beta"
    rf"|    title {_STR}"
    rf"|    x-axis \[{_STR}(, {_STR})*\]"
    rf"|    y-axis {_STR} {_NUM} --> {_NUM}"
    rf"|    (bar|line) \[{_NUM}(, {_NUM})*\])$"
)


def assert_grammar(source: str) -> None:
    lines = source.split("\n")
    assert lines[0].startswith("%%{init:") and lines[1] == "xychart-beta"  # one directive: ours
    for line in lines:
        assert _LINE.match(line), line


@pytest.mark.parametrize("name", HOSTILE)
def test_text_is_one_quoted_string_whatever_the_name(name):
    out = charts.text(name)
    assert re.fullmatch(_STR, out), out
    assert len(out.replace("\u200b", "")) <= charts.MAX_TEXT + 2
    assert "%%" not in out and not re.search(r"#\w", out)


def test_text_keeps_plain_names_as_written_and_cuts_long_ones():
    assert charts.text("eval.accuracy") == '"eval.accuracy"'
    assert charts.text("n" * 500) == '"' + "n" * 79 + '\u2026"'
    assert charts.text('say "hi"') == '"say \u201dhi\u201d"'


@pytest.mark.parametrize(
    ("value", "shown"),
    [(0.93, "0.93"), (1e-07, "0.0000001"), (-0.0, "0"), (12345678.5, "12345678.5"), (0, "0")],
)
def test_numbers_have_no_exponent(value, shown):
    assert charts.number(value) == shown
    assert charts.number(float("nan")) == "0"


def _past(values, day=1):
    return [
        {"commit": f"{i}" * 40, "date": f"2026-11-{day + i:02d}T00:00:00Z", "metrics": {"acc": v}}
        for i, v in enumerate(values)
    ]


def _rows(value, *, baseline=0.92, passed=True):
    """A min rule that passes and a max-regression rule (failing unless ``passed``)."""
    limit = baseline - 0.01
    return [
        {"kind": "min", "metric": "acc", "value": value, "threshold": 0.9, "limit": 0.9,
         "baseline": baseline, "rule": "acc >= 0.9", "passed": True},
        {"kind": "max-regression", "metric": "acc", "value": value, "threshold": None,
         "limit": limit, "baseline": baseline, "rule": "acc drop <= 0.01 vs baseline",
         "passed": passed},
    ]  # fmt: skip


def test_this_run_is_a_series_of_its_own_red_when_it_fails_and_the_failed_rule_is_drawn():
    (chart,) = metric_charts(_rows(0.905, passed=False), _past([0.91, 0.92]))
    assert charts.mermaid(chart) == "\n".join(
        [
            '%%{init: {"xyChart": {"height": 400}, "themeVariables": {"xyChart": '
            '{"plotColorPalette": "#4a90d9, #dd2e44, #f4900c, #a0522d, #9b6fd6"}}}}%%',
            "xychart-beta",
            '    title "acc: default branch, last 2 runs, then this run"',
            '    x-axis ["Nov 1", "Nov 2", "this run"]',
            '    y-axis "acc (axis cut at 0.895)" 0.895 --> 0.925',
            "    bar [0.91, 0.92, 0.865]",  # history; under the axis at this run: no bar
            "    bar [0.865, 0.865, 0.905]",  # this run, in red
            "    line [0.91, 0.91, 0.91]",  # the failed rule's limit first, in orange
            "    line [0.9, 0.9, 0.9]",
            "    line [0.92, 0.92, 0.92]",  # the baseline
        ]
    )
    assert charts.legend(chart) == (
        "\U0001f7e6 default branch, last 2 runs \u00b7 \U0001f7e5 this run: 0.905, fails \u00b7 "
        "\U0001f7e7 failed rule acc drop \\<= 0.01 vs baseline: limit 0.91 \u00b7 "
        "\U0001f7eb rule acc >= 0.9: limit 0.9 \u00b7 \U0001f7ea baseline: 0.92 \u00b7 "
        "\u2702\ufe0f y-axis cut: starts at 0.895, not 0"
    )
    data = chart.as_dict()
    assert data["bars"][1] == {
        "label": "this run: 0.905, fails",
        "values": [None, None, 0.905],
        "colour": "#dd2e44",
    }
    assert data["y_axis"] == {"min": 0.895, "max": 0.925, "from_zero": False}


def test_a_passing_run_is_green_and_the_legend_colours_follow_the_palette_order():
    (chart,) = metric_charts(_rows(0.93), _past([0.91]))
    palette = re.search(r'plotColorPalette": "([^"]+)"', charts.mermaid(chart)).group(1)
    squares = re.findall("[\U0001f7e5-\U0001f7eb]", charts.legend(chart))
    by_square = {square: hex_ for hex_, square in charts.PALETTE.values()}
    assert [by_square[q] for q in squares] == palette.split(", ")
    assert chart.bars[1].colour == "green" and "this run: 0.93, passes" in charts.legend(chart)


def test_failing_metrics_are_charted_first():
    rows = [
        {"kind": "min", "metric": "ok", "value": 1.0, "limit": 0.5, "passed": True},
        {"kind": "min", "metric": "bad", "value": 0.1, "limit": 0.5, "passed": False},
    ]
    assert [c.y_label for c in metric_charts(rows, None)] == ["bad", "ok"]


def test_y_axis_starts_at_zero_unless_the_differences_would_not_show():
    (wide,) = metric_charts(_rows(0.3, baseline=0.5, passed=False), _past([0.6]))
    assert charts.y_axis(wide) == (0.0, 1.0, False)  # 0.3 .. 0.9 (the min rule): from 0
    assert "axis cut" not in charts.mermaid(wide) + charts.legend(wide)
    (tight,) = metric_charts(_rows(0.905, passed=False), _past([0.91]))
    low, high, broken = charts.y_axis(tight)
    assert broken and 0.85 < low < 0.9 and high < 1  # marked: in the y title and the legend
    assert f"axis cut at {charts.number(low)}" in charts.mermaid(tight)
    assert f"y-axis cut: starts at {charts.number(low)}, not 0" in charts.legend(tight)
    loss = charts.Chart("t", ["a"], [charts.Series("x", [2.31])], lines=[])
    assert charts.y_axis(loss)[2] is True  # one value far from 0: a cut, marked too


def test_labels_are_days_thinned_distinct_and_this_run_is_always_written():
    values = [0.9 + i / 1000 for i in range(50)]
    past = [
        {"commit": f"{i:040x}", "date": f"2026-11-{1 + i // 2:02d}T{i % 2:02d}:00:00Z",
         "metrics": {"acc": v}}
        for i, v in enumerate(values)
    ]  # fmt: skip
    (chart,) = metric_charts(_rows(0.95), past)
    axis = charts.mermaid(chart).splitlines()[3]
    labels = re.findall(r'"([^"]*)"', axis)
    assert len(labels) == 51 and len(set(labels)) == 51  # Mermaid merges equal categories
    shown = [label for label in labels if label.strip("\u200b\u200c\u200d\u2060")]
    assert 2 <= len(shown) <= charts.MAX_LABELS and shown[-1] == "this run"
    assert all(re.fullmatch(r"(Nov|Dec) \d{1,2}", label) for label in shown[:-1]), shown
    assert max(len(label) for label in labels) <= 8  # no hash, no label longer than "this run"
    assert len(axis) < 700  # the left-out labels cost at most 3 characters each
    few = charts.mermaid(metric_charts(_rows(0.95), past[:6])[0]).splitlines()[3]
    days = ["Nov 1", "Nov 1\u200b", "Nov 2", "Nov 2\u200b", "Nov 3", "Nov 3\u200b", "this run"]
    assert few == "    x-axis [" + ", ".join(f'"{d}"' for d in days) + "]"  # two runs a day


def test_metric_chart_without_history_is_baseline_then_this_run():
    rows = [
        {
            "kind": "max",
            "metric": "loss",
            "value": 0.2,
            "threshold": 0.3,
            "baseline": 0.25,
            "rule": "loss <= 0.3",
            "passed": True,
        },
        {"kind": "min", "metric": "missing", "value": None},
        {"kind": "min", "metric": "nan", "value": float("nan")},
        "not a row",
    ]  # fmt: skip  (a record from before "limit": the threshold is the min/max limit)
    (chart,) = metric_charts(rows, None)
    assert chart.categories == ["baseline", "this run"]
    assert charts.mermaid(chart).splitlines()[4:] == [
        '    y-axis "loss" 0 --> 0.4',
        "    bar [0.25, -0.4]",
        "    bar [-0.4, 0.2]",
        "    line [0.3, 0.3]",
    ]
    assert charts.legend(chart).startswith("\U0001f7e6 baseline \u00b7 \U0001f7e9 this run: 0.2")


def test_spend_chart_has_budget_line():
    chart = charts.spend_chart([("alice", 12.5), ("bob", 3.0)], [100.0, 50.0], "2026-11-01")
    assert charts.mermaid(chart).splitlines()[1:] == [
        "xychart-beta",
        '    title "GPU spend per person since 2026-11-01"',
        '    x-axis ["alice", "bob"]',
        '    y-axis "USD" 0 --> 120',
        "    bar [12.5, 3]",
        "    line [100, 50]",
    ]
    assert charts.legend(chart) == "\U0001f7e6 spend USD \u00b7 \U0001f7e7 budget USD"
    no_budget = charts.spend_chart([("alice", 1.0), ("bob", 3.0)], [100.0, None], "x")
    assert no_budget.lines == []


def test_measured_chart_has_minimum_line_and_a_gpu_under_it_in_red():
    chart = charts.measured_chart(
        "matmul TFLOPS per GPU", "TFLOPS", [("0: H100", 700.0, 400.0), ("1: H100", 390.0, 400.0)]
    )
    source = charts.mermaid(chart)
    assert '    x-axis ["0: H100", "1: H100"]' in source
    assert source.endswith("    bar [700, -800]\n    bar [-800, 390]\n    line [400, 400]")
    assert "\U0001f7e5 under the minimum TFLOPS" in charts.legend(chart)


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_names_in_every_chart_type_keep_the_grammar(name):
    rows = [{"kind": "min", "metric": name, "value": 1.0, "threshold": 0.5, "baseline": 0.9}]
    past = [{"commit": name, "date": name, "metrics": {name: 0.8}}]
    built = [
        *metric_charts(rows, past),
        *metric_charts(rows, None),
        charts.spend_chart([(name, 1.0), ("ok", 2.0)], [3.0, 4.0], name),
        charts.measured_chart(name, name, [(name, 1.0, 2.0)]),
    ]
    assert len(built) == 4
    for chart in built:
        source = charts.mermaid(chart)
        assert_grammar(source)
        assert len(source.split("\n")) == 5 + len(chart.bars) + len(chart.lines)
        assert_inert_markdown(charts.legend(chart))


@pytest.mark.parametrize("name", HOSTILE)
def test_report_comment_fences_stay_closed_with_hostile_names(name):
    gate = {
        "passed": False,
        "rows": [
            {"kind": "min", "metric": name, "value": 1.0, "threshold": 0.5, "rule": name,
             "passed": True, "verdict": "pass"},
            {"kind": "max", "metric": name, "value": 1.0, "limit": 0.8, "rule": f"{name} <= 0.8",
             "passed": False, "verdict": f"FAIL: above 0.8 {name}"},
        ],
    }  # fmt: skip
    body = render("training", gate, None, (None, "n/a"), RunContext(platform="local"))
    blocks = re.findall(r"```mermaid\n(.*?)\n```", body, flags=re.S)
    assert len(blocks) == 1
    assert len(re.findall(r"^\s*(```|~~~)", body, flags=re.M)) == 2  # open and close only
    assert_grammar(blocks[0])
    legend = body.split("```\n\n", 1)[1].split("\n", 1)[0]
    assert legend.startswith("\U0001f7e5 this run: 1, fails")
    assert_inert_markdown(legend)
    # The verdict and why first, then the chart, then the table.
    assert body.index("**Failed:** 1 of 2 rule(s)") < body.index("```mermaid")
    assert body.index("```mermaid") < body.index("| metric |")


def assert_inert_markdown(line: str) -> None:
    """No HTML tag, link, mention, reference or second line in a legend, whatever the names."""
    assert "\n" not in line
    outside = re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", "", line)
    outside = outside.replace("&#8203;", "\u200b")  # a zero-width space breaks what it is in
    live_constructs = (r"(?<!\\)<[A-Za-z!/]", r"(?<!\\)\]\(", r"@[A-Za-z0-9]", r"#[0-9]", "://")
    for live in (*live_constructs, "&#[0-9]"):
        assert not re.search(live, outside), (live, line)


def test_pods_cost_chart_draws_each_owner_budget_from_the_budgets_file(tmp_path, monkeypatch):
    from gpuci.pods._budgets import cost

    monkeypatch.chdir(tmp_path)
    spend = cost.Spend()
    spend.billed_by_owner.update({"alice": 12.5, 'x"]\n%%{init:{}}%%': 3.0})
    owners = spend.owners()
    block = cost.spend_chart(spend, owners, "2026-11-01")
    source = re.findall(r"```mermaid\n(.*?)\n```", block, flags=re.S)[0]
    assert_grammar(source)
    assert "line [" not in source  # no budgets file: no line
    (tmp_path / ".gpuci").mkdir()
    (tmp_path / ".gpuci" / "budgets.yml").write_text("default: 50\nowners:\n  alice: 100\n")
    source = re.findall(r"```mermaid\n(.*?)\n```", cost.spend_chart(spend, owners, "x"), re.S)[0]
    assert_grammar(source)
    assert source.endswith("    bar [12.5, 3]\n    line [100, 50]")


def test_gpu_smoke_on_several_gpus_charts_measured_against_minimum():
    from gpuci.gpu._smoke.checks import Outcome
    from gpuci.gpu._smoke.report import summary_tables

    outcomes = [
        Outcome("load", i, "pass", figures={"tflops": t, "min_tflops": 400.0, "copy_gbs": 2900.0})
        for i, t in enumerate((712.0, 388.2))
    ]
    blocks = summary_tables(outcomes, {0: "H100", 1: 'H100"]\n%%'})
    (source,) = re.findall(r"```mermaid\n(.*?)\n```", blocks[0], flags=re.S)
    assert_grammar(source)
    assert source.splitlines()[3] == '    x-axis ["0: H100", "1: H100\u201d] %\u200b%\u200b"]'
    assert source.endswith("    bar [712, -800]\n    bar [-800, 388.2]\n    line [400, 400]")
    assert len(blocks) == 3  # the chart (no min_gbs: no bandwidth chart), then the two tables
    one_gpu = summary_tables(outcomes[:1], {0: "H100"})
    assert "```mermaid" not in "".join(one_gpu)


@pytest.mark.parametrize("value", [5e-324, 1e-310, 1e-300, 3e-7, 0.93, 1e30])
def test_nice_reaches_a_round_figure_from_any_positive_value(value):
    """10.0 ** -324 is 0.0: no multiple of it reached a denormal (StopIteration)."""
    assert value <= charts._nice(value) < float("inf")


def test_a_denormal_value_is_drawn_as_zero():
    """A loss that reached 5e-324 is a bar of 0 on an axis from 0, not an internal error
    after gate.json was written."""
    chart = charts.Chart("t", ["a", "b"], [charts.Series("s", [5e-324, 1e-310])])
    chart.lines.append(charts.Series("limit", [0.0, 0.0], "orange"))
    assert charts.y_axis(chart) == (0.0, 1.0, False)
    assert "    bar [0, 0]" in charts.mermaid(chart)
    assert charts.fenced(chart).startswith("```mermaid\n")
    assert charts.number(-5e-324) == "0"


def test_the_backstop_drops_a_chart_whatever_its_maths_raise(monkeypatch):
    """Not only ArithmeticError/ValueError: a StopIteration from the axis maths once ended the
    gate in an internal error; any exception is the same warning line."""
    chart = charts.Chart("acc: this run", ["this run"], [charts.Series("s", [0.5])])

    def stop(_chart: charts.Chart) -> tuple[float, float, bool]:
        raise StopIteration

    monkeypatch.setattr(charts, "y_axis", stop)
    said: list[str] = []
    assert charts.fenced(chart, said.append) == charts.not_drawn(chart)
    assert said == [charts.not_drawn(chart)]
    assert chart.as_dict()["y_axis"] is None
