"""Each chart type drawn by Mermaid itself in headless Chromium: it parses, its labels are text.

Skips (saying what to install) without chromium or the npm mermaid package. With
``GPUCI_UPDATE_IMAGES=1`` it also writes the screenshots shown in docs/training.md.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuci import charts
from gpuci.cache._stores.file import LocalStore
from gpuci.training import _ci as ci
from gpuci.training import _history as history
from gpuci.training import _report as report
from gpuci.training._charts import metric_charts
from gpuci_testing import gh_env, run_cli
from mermaid_render import REPO, Browser, missing, missing_markdown, walk_texts

pytestmark = pytest.mark.skipif(bool(missing()), reason=missing() or "ready")

IMAGES = REPO / "docs" / "img"
HOSTILE = (
    'acc" ] %%{init: {"theme": "dark"}}%%\n    line [999] <img src=x onerror=alert(1)> '
    '" 0 --> 999 ' + "n" * 500
)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One Chromium for the module's pages (per xdist worker)."""
    with Browser() as started:
        yield started


def _metric() -> charts.Chart:
    rows = [
        {
            "kind": "min",
            "metric": "eval.accuracy",
            "value": 0.934,
            "threshold": 0.9,
            "baseline": 0.921,
            "rule": "eval.accuracy >= 0.9",
            "passed": True,
        },
    ]
    past = [
        {
            "commit": f"{c}" * 40,
            "date": f"2026-11-{25 + i}T00:00:00Z",
            "metrics": {"eval.accuracy": v},
        }
        for i, (c, v) in enumerate(
            zip("abcdef", (0.905, 0.912, 0.918, 0.915, 0.921, 0.925), strict=True)
        )
    ]
    return metric_charts(rows, past)[0]


def _spend() -> charts.Chart:
    return charts.spend_chart(
        [("team-ml", 312.4), ("alice", 88.1), ("bob", 41.0), ("ci-nightly", 140.0)],
        [400.0, 100.0, 50.0, 150.0],
        "2026-11-01T00:00:00Z",
    )


def _smoke() -> charts.Chart:
    return charts.measured_chart(
        "bf16 matmul TFLOPS per GPU",
        "TFLOPS",
        [(f"{i}: H100 80GB", v, 400.0) for i, v in enumerate((712.0, 705.5, 388.2, 698.0))],
    )


def _style(svg: str) -> str:
    found = re.search(r"<style>(.*?)</style>", svg, flags=re.S)
    return found.group(1) if found else ""


def _shot(name: str, tmp_path: Path) -> Path:
    folder = IMAGES if os.environ.get("GPUCI_UPDATE_IMAGES") == "1" else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"chart-{name}.png"


@pytest.mark.parametrize(
    ("name", "build"), [("metric", _metric), ("spend", _spend), ("smoke", _smoke)]
)
def test_each_chart_type_renders_without_a_parse_error(name, build, browser, tmp_path):
    chart = build()
    shot = _shot(name, tmp_path)
    out = browser.render(charts.mermaid(chart), screenshot=shot)
    assert out.title == "rendered", out.title
    for label in chart.categories:
        assert label in out.texts
    assert sum(c.startswith("line-plot-") for c in out.classes) == len(chart.lines)
    assert shot.is_file() and shot.stat().st_size > 1000


def test_a_hostile_name_renders_as_text_and_adds_nothing(browser, tmp_path):
    rows = [{"kind": "min", "metric": HOSTILE, "value": 1.0, "threshold": 0.5, "baseline": 0.9}]
    past = [{"commit": HOSTILE, "date": "", "metrics": {HOSTILE: 0.8}}]
    built = [
        metric_charts(rows, past)[0],
        charts.spend_chart([(HOSTILE, 1.0), ("ok", 2.0)], [3.0, 4.0], HOSTILE),
        charts.measured_chart(HOSTILE, HOSTILE, [(HOSTILE, 1.0, 2.0)]),
    ]
    plain_style = _style(browser.render(charts.mermaid(_smoke())).svg)
    for i, chart in enumerate(built):
        out = browser.render(
            charts.mermaid(chart), screenshot=_shot("hostile", tmp_path) if i == 0 else None
        )
        assert out.title == "rendered", out.title
        # what a label or the title says: the name, made inert (a title cut shorter, to fit)
        shown = {charts.text(n)[1:-1] for n in (HOSTILE, charts.fit(HOSTILE, charts.TITLE_EM))}
        assert shown & set(out.texts)
        ticks = [float(t) for t in out.texts if re.fullmatch(r"-?\d+(\.\d+)?", t)]
        assert ticks and max(ticks) < 10  # the injected `line [999]` moved no axis
        assert sum(c.startswith("line-plot-") for c in out.classes) == len(chart.lines)
        assert "<img" not in out.svg  # the label's tag is a look-alike, not an element
        for text in out.texts:  # "dark", "onerror" only inside the inert label or title
            assert ("dark" not in text and "onerror" not in text) or "%\u200b%" in text
        assert _style(out.svg) == plain_style  # no %%{init}%% theme or config switch


# The PR comment and the job summary of a failing gate, as a reader sees them, at each history
# length a reader meets: the first default-branch run, a few, the default 20, and 50.
POINTS = (1, 6, 20, 50)
pages = pytest.mark.skipif(bool(missing_markdown()), reason=missing_markdown() or "ready")


def _gate_with_history(tmp_path: Path, points: int) -> tuple[dict, list, str]:
    """Run ``gate`` as a job does (a history of ``points`` default-branch runs, a PR whose
    accuracy dropped 0.016 under a 0.01 allowance): its gate.json, the history it read and
    the job summary it wrote."""
    store = LocalStore(tmp_path / "hist")
    for i in range(points):  # about two runs a day, the last on Nov 30
        day = 1_764_460_800 - (points - 1 - i) * 43_200  # 2025-11-30T00:00Z, back in half days
        values = {
            "eval.accuracy": 0.915 + 0.01 * math.sin(i / 2),
            "eval.loss": 0.3 + 0.02 * math.cos(i / 3),
        }
        rows = [{"metric": name, "value": value} for name, value in values.items()]
        ctx = ci.RunContext(platform="github", commit=f"{i:040x}")
        history.append(store, "training", history.entry({"rows": rows}, None, ctx, now=day))
    (tmp_path / "m.json").write_text(json.dumps({"eval": {"accuracy": 0.905, "loss": 0.31}}))
    (tmp_path / "base.json").write_text(json.dumps({"eval": {"accuracy": 0.921, "loss": 0.31}}))
    env = gh_env(tmp_path)
    proc = run_cli(
        "gate", "--metrics", str(tmp_path / "m.json"), "--baseline", str(tmp_path / "base.json"),
        "--min", "eval.accuracy=0.9", "--max-regression", "eval.accuracy=0.01",
        "--max", "eval.loss=0.4", "--history", (tmp_path / "hist").as_uri(),
        "--history-points", str(points), "--output-dir", str(tmp_path / "o"), env=env,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the gate failed, as meant
    record = json.loads((tmp_path / "o" / "gate.json").read_text())
    past, _ = history.last(store, "training", points)
    return record, past, (tmp_path / "summary").read_text()


def _visible_rects(svg: str, colour: str) -> int:
    """Bars of ``colour`` a reader sees (a bar under the axis has a negative height: none)."""
    rects = re.findall(rf'<rect[^>]*fill="{colour}"[^>]*>', svg)
    return sum(float(re.search(r'height="(-?[\d.]+)', r).group(1)) > 0 for r in rects)


@pages
@pytest.mark.parametrize("points", POINTS)
@pytest.mark.parametrize("where", ["comment", "summary"])
def test_the_comment_and_the_summary_say_at_a_glance_that_the_run_failed_and_why(
    where, points, browser, tmp_path
):
    record, past, summary = _gate_with_history(tmp_path, points)
    ctx = ci.RunContext(platform="github", commit="c" * 40, run_url="https://github.invalid/r/1")
    minutes = report.gpu_minutes({}, 0.08)
    body = report.render("training", record, None, minutes, ctx, past)
    page = body if where == "comment" else summary
    # The verdict and its reason first, then the charts, each with its legend under it.
    assert page.index("Failed:") < page.index("```mermaid") < page.index("| metric |")
    shot = _shot(f"{where}-{points}", tmp_path)
    out = browser.render_markdown(page, screenshot=shot)
    assert out.title.startswith("rendered"), out.title
    charts_drawn = re.findall(r"<svg.*?</svg>", out.svg, flags=re.S)
    assert len(charts_drawn) == 2  # eval.accuracy (failing, first), then eval.loss
    accuracy, loss = charts_drawn
    # This run stands apart: one red bar where the rule failed, one green bar where none did.
    assert _visible_rects(accuracy, "#dd2e44") == 1 and _visible_rects(accuracy, "#3fa34d") == 0
    assert _visible_rects(loss, "#3fa34d") == 1 and _visible_rects(loss, "#dd2e44") == 0
    assert _visible_rects(accuracy, "#4a90d9") == points  # every default-branch run
    # The failed rule's limit (the baseline 0.921 minus 0.01) is drawn (orange) and named.
    assert 'stroke="#f4900c"' in accuracy
    assert "failed rule eval.accuracy drop \\<= 0.01 vs baseline: limit 0.911" in page
    # Short labels, never more than MAX_LABELS a chart, this run always named.
    for chart in charts_drawn:
        walk = walk_texts(chart)
        days = [t for t in walk if re.fullmatch(r"(Nov|Dec) \d{1,2}", t)]
        assert 1 <= len(days) <= charts.MAX_LABELS - 1 and "this run" in walk
        assert not [t for t in walk if re.fullmatch(r"[0-9a-f]{7,}", t)]  # no commit hashes
    assert shot.is_file() and shot.stat().st_size < 200_000  # a small PNG


@pages
def test_a_comment_with_hostile_metric_and_rule_names_renders_as_text(browser, tmp_path):
    rows = [
        {"kind": "min", "metric": HOSTILE, "value": 0.4, "limit": 0.5, "threshold": 0.5,
         "rule": f"{HOSTILE} >= 0.5", "passed": False, "verdict": f"FAIL: below 0.5 {HOSTILE}"},
        {"kind": "max", "metric": "loss", "value": 0.2, "limit": 0.3, "threshold": 0.3,
         "rule": HOSTILE, "passed": True, "verdict": "pass"},
    ]  # fmt: skip
    past = [{"date": HOSTILE, "commit": HOSTILE, "metrics": {HOSTILE: 0.45, "loss": 0.25}}]
    gate = {"passed": False, "rows": rows, "failed_rules": [rows[0]["rule"]]}
    body = report.render("training", gate, None, (None, "n/a"), ci.RunContext("github"), past)
    out = browser.render_markdown(body, screenshot=_shot("hostile-comment", tmp_path))
    assert out.title.startswith("rendered"), out.title
    assert len(re.findall(r"<svg.*?</svg>", out.svg, flags=re.S)) == 2
    main = out.dom.split("<main>", 1)[1].split("</main>", 1)[0]
    assert not re.search(r"<(img|script|iframe|a )", main), "a name became an element"
    assert _visible_rects(out.svg, "#dd2e44") == 1  # the names moved no bar


# Where each text of a drawn chart lies against the chart's own box: (class of its group, text,
# px left over on the left, right, top, bottom); a negative figure is text cut off there.
_MARGINS = """(() => {
  const svg = document.querySelector('svg'); const box = svg.getBoundingClientRect();
  return JSON.stringify(Array.from(svg.querySelectorAll('.chart-title text, .title text'))
    .map(t => { const r = t.getBoundingClientRect();
      return [t.closest('g').getAttribute('class'), t.textContent,
              r.left - box.left, box.right - r.right, r.top - box.top, box.bottom - r.bottom]; }));
})()"""


@pytest.mark.parametrize(
    "name", ["eval/mmlu_pro/accuracy_5shot_chain_of_thought_strict", "MMLU_WMT_" * 12]
)
def test_a_long_metric_name_leaves_the_titles_whole_inside_the_chart(name, browser, tmp_path):
    """The chart's title and its y-axis title stay inside the chart, however long the metric's
    name: a 52-character name cut the title off on both sides and the y-axis title at both ends
    (seen in a screenshot at the default 20 runs)."""
    rows = [{"kind": "min", "metric": name, "value": 0.61, "limit": 0.6, "threshold": 0.6,
             "baseline": 0.63, "rule": "r", "passed": True}]  # fmt: skip
    past = [
        {"commit": f"{i:040x}", "date": f"2026-11-{1 + i // 2:02d}T00:00:00Z",
         "metrics": {name: 0.6 + 0.0075 * (i % 5)}}
        for i in range(20)
    ]  # fmt: skip
    chart = metric_charts(rows, past)[0]
    out = browser.render(charts.mermaid(chart), screenshot=_shot("long-name", tmp_path))
    assert out.title == "rendered", out.title
    texts = json.loads(browser._evaluate(_MARGINS))  # the page Mermaid just drew
    assert {group for group, *_ in texts} == {"chart-title", "title"}
    for group, shown, *margins in texts:
        assert shown.startswith(name[:12]), shown  # the name's start is what a reader needs
        assert min(margins) >= 0, f"{group} {shown!r} cut off: {margins}"
