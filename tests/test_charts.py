"""Mermaid chart text: each chart type's source, and hostile names that stay text."""

from __future__ import annotations

import re

import pytest

from gpuci import charts
from gpuci.training.ci import RunContext
from gpuci.training.report import render

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
]

# The whole grammar gpu-ci writes: a name can change what a string says, never the lines.
_STR = '"(?:[^"\n`%#<>{}\\\\]|[%#]\u200b){1,160}"'
_NUM = r"-?\d+(\.\d+)?"
_LINE = re.compile(
    rf"^(xychart-beta"
    rf"|    title {_STR}"
    rf"|    x-axis \[{_STR}(, {_STR})*\]"
    rf"|    y-axis {_STR} {_NUM} --> {_NUM}"
    rf"|    (bar|line) \[{_NUM}(, {_NUM})*\])$"
)


def assert_grammar(source: str) -> None:
    for line in source.split("\n"):
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


def test_metric_chart_with_history_is_history_then_this_run():
    rows = [
        {
            "kind": "min",
            "metric": "eval.accuracy",
            "value": 0.93,
            "threshold": 0.9,
            "baseline": 0.92,
        },
    ]
    past = [
        {"commit": "a" * 40, "date": "2026-11-30T00:00:00Z", "metrics": {"eval.accuracy": 0.91}},
        {"commit": "b" * 40, "date": "2026-12-01T00:00:00Z", "metrics": {"eval.accuracy": 0.92}},
    ]
    (chart,) = charts.metric_charts(rows, past)
    assert charts.mermaid(chart) == "\n".join(
        [
            "xychart-beta",
            '    title "eval.accuracy: default branch, then this run"',
            '    x-axis ["aaaaaaa", "bbbbbbb", "this run"]',
            '    y-axis "eval.accuracy" 0.897 --> 0.933',
            "    bar [0.91, 0.92, 0.93]",
            "    line [0.9, 0.9, 0.9]",
            "    line [0.92, 0.92, 0.92]",
        ]
    )
    assert chart.as_dict()["lines"][0] == {"label": "min 0.9", "values": [0.9, 0.9, 0.9]}


def test_metric_chart_without_history_is_baseline_then_this_run():
    rows = [
        {"kind": "max", "metric": "loss", "value": 0.2, "threshold": 0.3, "baseline": 0.25},
        {"kind": "min", "metric": "missing", "value": None},
        {"kind": "min", "metric": "nan", "value": float("nan")},
        "not a row",
    ]
    (chart,) = charts.metric_charts(rows, None)
    assert chart.categories == ["baseline", "this run"]
    assert charts.mermaid(chart).splitlines()[3:] == [
        '    y-axis "loss" 0.19 --> 0.31',
        "    bar [0.25, 0.2]",
        "    line [0.3, 0.3]",
    ]


def test_spend_chart_has_budget_line():
    chart = charts.spend_chart([("alice", 12.5), ("bob", 3.0)], [100.0, 50.0], "2026-11-01")
    assert charts.mermaid(chart) == "\n".join(
        [
            "xychart-beta",
            '    title "GPU spend per person since 2026-11-01"',
            '    x-axis ["alice", "bob"]',
            '    y-axis "USD" 0 --> 109.7',
            "    bar [12.5, 3]",
            "    line [100, 50]",
        ]
    )
    no_budget = charts.spend_chart([("alice", 1.0), ("bob", 3.0)], [100.0, None], "x")
    assert no_budget.lines == []


def test_measured_chart_has_minimum_line():
    chart = charts.measured_chart(
        "matmul TFLOPS per GPU", "TFLOPS", [("0: H100", 700.0, 400.0), ("1: H100", 690.0, 400.0)]
    )
    source = charts.mermaid(chart)
    assert '    x-axis ["0: H100", "1: H100"]' in source
    assert source.endswith("    bar [700, 690]\n    line [400, 400]")


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_names_in_every_chart_type_keep_the_grammar(name):
    rows = [{"kind": "min", "metric": name, "value": 1.0, "threshold": 0.5, "baseline": 0.9}]
    past = [{"commit": name, "date": name, "metrics": {name: 0.8}}]
    built = [
        *charts.metric_charts(rows, past),
        *charts.metric_charts(rows, None),
        charts.spend_chart([(name, 1.0), ("ok", 2.0)], [3.0, 4.0], name),
        charts.measured_chart(name, name, [(name, 1.0, 2.0)]),
    ]
    assert len(built) == 4
    for chart in built:
        source = charts.mermaid(chart)
        assert_grammar(source)
        assert len(source.split("\n")) == 5 + len(chart.lines)


@pytest.mark.parametrize("name", HOSTILE)
def test_report_comment_fences_stay_closed_with_hostile_names(name):
    gate = {
        "passed": True,
        "rows": [{"kind": "min", "metric": name, "value": 1.0, "threshold": 0.5, "rule": "r"}],
    }
    body = render("training", gate, None, (None, "n/a"), RunContext(platform="local"))
    blocks = re.findall(r"```mermaid\n(.*?)\n```", body, flags=re.S)
    assert len(blocks) == 1
    assert len(re.findall(r"^\s*(```|~~~)", body, flags=re.M)) == 2  # open and close only
    assert_grammar(blocks[0])
    assert body.index("```mermaid") < body.index("| metric |")  # the table under the chart


def test_pods_cost_chart_draws_each_owner_budget_from_the_budgets_file(tmp_path, monkeypatch):
    from gpuci.pods import cost

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
    from gpuci.gpu.smoke.checks import Outcome
    from gpuci.gpu.smoke.report import summary_tables

    outcomes = [
        Outcome("load", i, "pass", figures={"tflops": t, "min_tflops": 400.0, "copy_gbs": 2900.0})
        for i, t in enumerate((712.0, 388.2))
    ]
    blocks = summary_tables(outcomes, {0: "H100", 1: 'H100"]\n%%'})
    (source,) = re.findall(r"```mermaid\n(.*?)\n```", blocks[0], flags=re.S)
    assert_grammar(source)
    assert source.splitlines()[2] == '    x-axis ["0: H100", "1: H100\u201d] %\u200b%\u200b"]'
    assert source.endswith("    bar [712, 388.2]\n    line [400, 400]")
    assert len(blocks) == 3  # the chart (no min_gbs: no bandwidth chart), then the two tables
    one_gpu = summary_tables(outcomes[:1], {0: "H100"})
    assert "```mermaid" not in "".join(one_gpu)
