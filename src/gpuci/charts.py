"""Charts as Mermaid ``xychart-beta`` blocks: drawn by GitHub and GitLab in comments and summaries.

No image hosting and no extra service: a fenced ```` ```mermaid ```` block in a PR comment, an MR
note or a job summary is drawn by the forge itself. ``xychart-beta`` (bars and lines over named
categories) is in Mermaid since 10.5; newer Mermaid also accepts plain ``xychart`` but keeps the
``-beta`` keyword, so the older spelling works on both.

A chart must say at a glance whether this run failed and why, so:

- every series has its own colour, set by one ``%%{init}%%`` directive (``plotColorPalette``, in
  Mermaid since xychart itself) and named in a Markdown legend under the chart, each colour shown
  as the emoji square of that colour (xychart draws no legend before Mermaid 11.10, and the
  forges' Mermaid is older);
- this run is a bar series of its own (red when its rule failed), not one more history bar;
- the y-axis starts at 0 (bars are lengths), unless the values differ too little to be seen
  from 0: then it starts near them and the legend says so (a marked break);
- with many points only every k-th x label is written (the others are invisible but distinct:
  Mermaid merges equal categories), so labels never run into each other.

Chart text (titles, category labels) often comes from files a PR's code wrote (metric names) or
from a store (owners, GPU names), so all of it goes through :func:`text`, the one place that
makes a string inert in Mermaid and in the Markdown fence around it; the legend goes through
:func:`gpuci.markdown.text`. Values are numbers we format ourselves; the data of each chart is
also given as a plain dict for ``--json``.

This module draws; what a feature's chart shows lives with the feature: the gate's metric charts
in :mod:`gpuci.training._charts`, the smoke's per-GPU charts in :mod:`gpuci.gpu._smoke.report`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuci.redact import escape_bidi

MAX_TEXT = 80  # a label or title longer than this is cut (names can be 500 characters)
MAX_CATEGORIES = 60
MAX_LABELS = 9  # x labels written at most (with ``thin``): about 70 px each in a 700 px chart
# A y-axis from 0 unless the values' spread is less than this share of the largest: then the
# differences would be a few pixels high, and the axis starts near the data (marked as a break).
BREAK_BELOW = 0.1
HEIGHT = 400  # px, of Mermaid's default 700 x 500: ten charts in a comment stay scrollable
# The largest magnitude drawn: far above any measurement worth a bar (the FLOPs of the largest
# training runs are about 1e26), far below where the axis arithmetic overflows (the spread of
# -1.7e308 and 1.7e308 is infinite). A value beyond it is no point of a chart (:func:`finite`
# gives None); the gate still judges it and its table still shows it.
MAX_DRAWN = 1e30
# The smallest magnitude drawn as itself; anything nearer 0 is drawn as 0 (a loss that reached
# 5e-324). Below about 1e-308 floats lose precision, and the powers of ten the axis rounds to
# become 0.0, so no round figure is ever reached; no bar shows such a value apart from 0 anyway.
MIN_DRAWN = 1e-300

# What fits in a chart: Mermaid draws it 700 px wide and HEIGHT tall, the title in 20 px type
# across it, the y-axis title in 16 px type along its height (Chromium, as GitHub shows it). A
# longer text runs off both ends, so each is cut to fit, measured in ems by a generous table of
# character widths (:func:`_em`: Arial's and Trebuchet's rounded up, Verdana's wide letters).
TITLE_EM = (700 - 20) / 20
AXIS_TITLE_EM = (HEIGHT - 20) / 16
_NARROW = frozenset("ijlrtfI.,:;|!'` ()[]-")
_WIDE = frozenset("mwMW@%")

# Series colours: each a colour Mermaid draws and the emoji square a legend shows for it.
# Mid-tones, readable on GitHub's and GitLab's light and dark themes.
PALETTE = {
    "blue": ("#4a90d9", "\U0001f7e6"),
    "red": ("#dd2e44", "\U0001f7e5"),
    "green": ("#3fa34d", "\U0001f7e9"),
    "orange": ("#f4900c", "\U0001f7e7"),
    "purple": ("#9b6fd6", "\U0001f7ea"),
    "brown": ("#a0522d", "\U0001f7eb"),
    "yellow": ("#e6b800", "\U0001f7e8"),
}
RULE_COLOURS = ("orange", "brown", "yellow")  # one per rule line of a chart, in order

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
# An x label left out is the number of its place written in these four invisible characters
# (zero-width space, non-joiner, joiner, word joiner): it shows nothing, takes no room, and
# stays distinct (Mermaid merges equal categories) in at most 3 characters for 60 places.
_INVISIBLE = "\u200b\u200c\u200d\u2060"


def _blank(place: int) -> str:
    digits = _INVISIBLE[place % 4]
    while place >= 4:
        place //= 4
        digits = _INVISIBLE[place % 4] + digits
    return digits


def text(value: Any) -> str:
    """Any value as a double-quoted Mermaid string that renders as text and cannot end early:
    line breaks and control characters as spaces, bidi characters as visible ``\\u202e``
    (invisible, they would reorder the label)."""
    one_line = _CONTROL.sub(" ", escape_bidi(str(value))).strip()
    if len(one_line) > MAX_TEXT:
        one_line = one_line[: MAX_TEXT - 1].rstrip() + "\u2026"
    return '"' + (one_line.translate(_INERT) or "-") + '"'


def cut(value: Any, limit: int = MAX_TEXT) -> str:
    """``value`` as text of at most ``limit`` characters (a legend names a rule in one line)."""
    shown = str(value)
    return shown if len(shown) <= limit else shown[: limit - 1].rstrip() + "\u2026"


def _em(char: str) -> float:
    """About how wide ``char`` is drawn, in ems, rounded up (any non-ASCII character: 1)."""
    if not char.isascii() or char in _WIDE:
        return 1.0
    if char in _NARROW:
        return 0.35
    return 0.75 if char.isupper() else 0.6


def fit(value: str, ems: float) -> str:
    """``value`` cut (ending in an ellipsis) to be drawn at most ``ems`` ems wide."""
    if sum(map(_em, value)) <= ems:
        return value
    used, keep = 1.0, 0  # the ellipsis's em
    while keep < len(value) and used + _em(value[keep]) <= ems:
        used += _em(value[keep])
        keep += 1
    return value[:keep].rstrip() + "\u2026"


def number(value: float) -> str:
    """A finite number as Mermaid reads one: no exponent, no ``nan``."""
    if not math.isfinite(value) or abs(value) < MIN_DRAWN:
        return "0"
    shown = f"{value:.6f}".rstrip("0").rstrip(".")
    if shown in ("-0", ""):
        return "0"
    if abs(value) < 1e-3 and value != 0:  # keep small values visible: 4 significant digits
        shown = f"{value:.{4 - math.floor(math.log10(abs(value)))}f}".rstrip("0").rstrip(".")
    return shown


@dataclass
class Series:
    """One bar or line series: its legend label, values (None: no bar at that point; lines
    need every point) and its colour, a key of :data:`PALETTE`."""

    label: str
    values: list[float | None]
    colour: str = "blue"

    def as_dict(self) -> dict[str, Any]:
        return {"label": self.label, "values": self.values, "colour": PALETTE[self.colour][0]}


@dataclass
class Chart:
    """One xychart: categories along x, bar series, and line series (thresholds, baselines)."""

    title: str
    categories: list[str]
    bars: list[Series]
    y_label: str = ""
    lines: list[Series] = field(default_factory=list)
    thin: bool = False  # x labels are a sequence (dates): write every k-th one only

    def as_dict(self) -> dict[str, Any]:
        """The chart's data for ``--json``; ``y_axis`` is None for a chart not drawn."""
        try:
            low, high, broken = y_axis(self)
            axis: dict[str, Any] | None = {"min": low, "max": high, "from_zero": not broken}
        except Exception:  # the backstop, as in fenced(): a chart not drawn, never a traceback
            axis = None
        return {
            "title": self.title,
            "categories": self.categories,
            "bars": [s.as_dict() for s in self.bars],
            "lines": [s.as_dict() for s in self.lines],
            "y_label": self.y_label,
            "y_axis": axis,
        }


def _nice(value: float) -> float:
    """``value`` rounded up to a round figure (1, 2, 2.5 or 5 times a power of ten)."""
    if value <= 0:
        return 1.0
    step = 10.0 ** math.floor(math.log10(value))
    multiples = (m * step for m in (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10))
    # a denormal's power of ten is 0.0 (10.0 ** -324), which no multiple lifts to the value
    return next((m for m in multiples if m >= value), value)


def drawable(value: float | None) -> bool:
    """Whether a value is a point of a chart: a finite number within :data:`MAX_DRAWN`."""
    return value is not None and math.isfinite(value) and abs(value) <= MAX_DRAWN


def _values(chart: Chart) -> list[float]:
    """The values the axis spans: the drawable ones, so its arithmetic cannot overflow."""
    found = [v for s in (*chart.bars, *chart.lines) for v in s.values[-MAX_CATEGORIES:]]
    drawn = [v if abs(v) >= MIN_DRAWN else 0.0 for v in found if v is not None and drawable(v)]
    return drawn or [0.0]


def y_axis(chart: Chart) -> tuple[float, float, bool]:
    """``(min, max, broken)``: from 0 when every value is >= 0 and their differences show from
    there; else from just under the data (``broken``: the legend says the axis is cut)."""
    values = _values(chart)
    low, high = min(values), max(values)
    spread = high - low
    if low >= 0 and (high == 0 or spread >= BREAK_BELOW * high):
        top = _nice(high * 1.05)
        return 0.0, (min(top, 1.0) if high <= 1 else top), False
    step = _nice((spread or abs(high) * 0.1 or 1.0) / 5)  # about 5 to 10 ticks over the data
    floor, top = math.floor(low / step - 0.5) * step, math.ceil(high / step + 0.5) * step
    if low >= 0 and floor < 0:
        return 0.0, top, False
    if high <= 0 < top:
        top = 0.0
    return float(number(floor)), float(number(top)), True


def _labels(categories: Sequence[str], thin: bool) -> list[str]:
    """The x labels as drawn: each made inert; with ``thin``, only every k-th (counted back from
    the last, which is always written); blanks are distinct invisible strings."""
    count = len(categories)
    step = math.ceil(count / MAX_LABELS) if thin else 1
    out = []
    for i, label in enumerate(categories):
        keep = (count - 1 - i) % step == 0
        out.append(text(label) if keep else f'"{_blank(i)}"')
    seen: set[str] = set()
    for i, label in enumerate(out):  # Mermaid merges equal categories: make each one distinct
        while label in seen:
            label = label[:-1] + _INVISIBLE[0] + '"'
        seen.add(label)
        out[i] = label
    return out


def mermaid(chart: Chart) -> str:
    """The chart's Mermaid source (without the fence): the colour directive first."""
    cats = chart.categories[-MAX_CATEGORIES:]
    keep = len(cats)
    low, high, broken = y_axis(chart)
    note = f" (axis cut at {number(low)})" if broken else ""
    y_title = fit(chart.y_label or "value", AXIS_TITLE_EM - sum(map(_em, note))) + note
    palette = ", ".join(PALETTE[s.colour][0] for s in (*chart.bars, *chart.lines))

    # No bar: a value under the axis. Mermaid draws a bar from the plot's bottom edge, which
    # is a few pixels under the axis minimum, so a bar *at* the minimum would show as a strip;
    # one under it has a negative height, which browsers do not draw.
    none = number(low - (high - low))

    def values(series: Series) -> str:
        # A value beyond MAX_DRAWN is no bar either: the axis does not reach it.
        return ", ".join(
            none if v is None or abs(v) > MAX_DRAWN else number(v) for v in series.values[-keep:]
        )

    out = [
        '%%{init: {"xyChart": {"height": '
        + str(HEIGHT)
        + '}, "themeVariables": {"xyChart": {"plotColorPalette": "'
        + palette
        + '"}}}}%%',
        "xychart-beta",
        f"    title {text(fit(chart.title, TITLE_EM))}",
        "    x-axis [" + ", ".join(_labels(cats, chart.thin)) + "]",
        f"    y-axis {text(y_title)} {number(low)} --> {number(high)}",
    ]
    out += [f"    bar [{values(s)}]" for s in chart.bars]
    out += [f"    line [{values(s)}]" for s in chart.lines]
    return "\n".join(out)


def legend(chart: Chart) -> str:
    """The key under a chart: each series' colour square and name, and the axis break if any."""
    from gpuci.markdown import text as md_text

    items = [f"{PALETTE[s.colour][1]} {md_text(s.label)}" for s in (*chart.bars, *chart.lines)]
    low, _, broken = y_axis(chart)
    if broken:
        items.append(f"\u2702\ufe0f y-axis cut: starts at {number(low)}, not 0")
    return " \u00b7 ".join(items)


def fenced(chart: Chart, left_out: Callable[[str], None] | None = None) -> str:
    """The chart as a Markdown block, its legend right under it (xychart draws none); a chart
    whose numbers cannot be drawn is dropped for a line saying so, never an internal error,
    and the line also goes to ``left_out`` (a command's warning annotation: in Actions the
    reader sees it without opening the summary)."""
    try:
        return f"```mermaid\n{mermaid(chart)}\n```\n\n{legend(chart)}"
    except Exception:  # any: the chart is a courtesy, and its values are input (a PR's metrics)
        line = not_drawn(chart)
        if left_out is not None:
            left_out(line)
        return line


def not_drawn(chart: Chart) -> str:
    """The warning in place of a chart that cannot be drawn: which one, and why."""
    from gpuci.markdown import text as md_text

    return (
        f"\u26a0\ufe0f Chart not drawn, its values are beyond what a chart shows: "
        f"{md_text(cut(chart.title))}"
    )


def finite(value: Any) -> float | None:
    """A number from a record (input) to draw: None unless an int or float (never a bool),
    finite and within :data:`MAX_DRAWN` (``1.7e308`` is finite, and overflows any axis)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or abs(value) > MAX_DRAWN:
        return None  # compared before float(): a 400-digit int would overflow it
    number = float(value)
    return number if math.isfinite(number) else None


def spend_chart(
    spent: Sequence[tuple[str, float]], budgets: Sequence[float | None], period: str
) -> Chart:
    """``pods cost``: spend per person over the period, each one's budget as a line (drawn when
    everyone shown has one: a person without a budget is not a person with a budget of 0)."""
    chart = Chart(
        f"GPU spend per person since {period}",
        [owner for owner, _ in spent],
        [Series("spend USD", [amount for _, amount in spent])],
        "USD",
    )
    limits = [b for b in budgets if b is not None]
    if limits and len(limits) == len(spent):  # a line cannot skip a point: all or none
        chart.lines.append(Series("budget USD", list(limits), "orange"))
    return chart


def measured_chart(title: str, unit: str, rows: Sequence[tuple[str, float, float]]) -> Chart:
    """``gpu-smoke`` on several GPUs: measured per GPU as bars (red: under the minimum), the
    minimum as a line."""
    under = [measured < minimum for _, measured, minimum in rows]
    bars = [
        Series(
            f"measured {unit}", [None if u else m for u, (_, m, _) in zip(under, rows, strict=True)]
        )
    ]
    if any(under):
        low = [m if u else None for u, (_, m, _) in zip(under, rows, strict=True)]
        bars.append(Series(f"under the minimum {unit}", low, "red"))
    return Chart(
        title,
        [name for name, _, _ in rows],
        bars,
        unit,
        [Series(f"minimum {unit}", [minimum for _, _, minimum in rows], "orange")],
    )
