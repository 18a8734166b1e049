"""Each chart type drawn by Mermaid itself in headless Chromium: it parses, its labels are text.

Skips (saying what to install) without chromium or the npm mermaid package. With
``GPUCI_UPDATE_IMAGES=1`` it also writes the screenshots shown in docs/training.md.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from gpuci import charts
from mermaid_render import REPO, missing, render

pytestmark = pytest.mark.skipif(bool(missing()), reason=missing() or "ready")

IMAGES = REPO / "docs" / "img"
HOSTILE = 'acc" ] %%{init: {"theme": "dark"}}%%\n    line [999] <img src=x onerror=alert(1)> ' + (
    "n" * 500
)


def _metric() -> charts.Chart:
    rows = [
        {
            "kind": "min",
            "metric": "eval.accuracy",
            "value": 0.934,
            "threshold": 0.9,
            "baseline": 0.921,
        },
    ]
    past = [
        {"commit": f"{c}" * 40, "date": "", "metrics": {"eval.accuracy": v}}
        for c, v in zip("abcdef", (0.905, 0.912, 0.918, 0.915, 0.921, 0.925), strict=True)
    ]
    return charts.metric_charts(rows, past)[0]


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
def test_each_chart_type_renders_without_a_parse_error(name, build, tmp_path):
    chart = build()
    shot = _shot(name, tmp_path)
    out = render(charts.mermaid(chart), screenshot=shot)
    assert out.title == "rendered", out.title
    for label in chart.categories:
        assert label in out.texts
    assert sum(c.startswith("line-plot-") for c in out.classes) == len(chart.lines)
    assert shot.is_file() and shot.stat().st_size > 1000


def test_a_hostile_name_renders_as_text_and_adds_nothing(tmp_path):
    rows = [{"kind": "min", "metric": HOSTILE, "value": 1.0, "threshold": 0.5, "baseline": 0.9}]
    past = [{"commit": HOSTILE, "date": "", "metrics": {HOSTILE: 0.8}}]
    built = [
        charts.metric_charts(rows, past)[0],
        charts.spend_chart([(HOSTILE, 1.0), ("ok", 2.0)], [3.0, 4.0], HOSTILE),
        charts.measured_chart(HOSTILE, HOSTILE, [(HOSTILE, 1.0, 2.0)]),
    ]
    plain_style = _style(render(charts.mermaid(_smoke())).svg)
    for i, chart in enumerate(built):
        out = render(
            charts.mermaid(chart), screenshot=_shot("hostile", tmp_path) if i == 0 else None
        )
        assert out.title == "rendered", out.title
        shown = charts.text(HOSTILE)[1:-1]  # what the label says: the name, made inert
        assert shown in out.texts
        ticks = [float(t) for t in out.texts if re.fullmatch(r"-?\d+(\.\d+)?", t)]
        assert ticks and max(ticks) < 10  # the injected `line [999]` moved no axis
        assert sum(c.startswith("line-plot-") for c in out.classes) == len(chart.lines)
        assert "<img" not in out.svg  # the label's tag is a look-alike, not an element
        for text in out.texts:  # "dark", "onerror" only inside the inert label or title
            assert ("dark" not in text and "onerror" not in text) or "%\u200b%" in text
        assert _style(out.svg) == plain_style  # no %%{init}%% theme or config switch
