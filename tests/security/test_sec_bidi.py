"""Bidi control characters ("Trojan Source") in a name a PR's code wrote are shown, never obeyed.

U+202E (right-to-left override) and its kin are invisible and reorder the text after them, so
a metric line ``acc is 0.1`` could render as ``acc is 1.0``. Every printed value (one line,
Markdown text and code, chart labels) shows each one as a visible ``\\u202e`` instead.
"""

from __future__ import annotations

import json
import re

import pytest

from gpuci import charts, markdown, redact
from gpuci_testing import clean_env, run_cli

BIDI = ["\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069"]
BIDI += ["\u200e", "\u200f", "\u061c"]
ANY_BIDI = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


@pytest.mark.parametrize("char", BIDI, ids=[f"U+{ord(c):04X}" for c in BIDI])
def test_every_printed_form_shows_a_bidi_character_as_an_escape(char):
    escape = f"\\u{ord(char):04x}"
    assert redact.single_line(f"acc{char} is 0.1") == f"acc{escape} is 0.1"
    assert markdown.code(f"acc{char}") == f"`acc{escape}`"
    assert markdown.text(f"acc{char}") == "acc\\" + escape  # Markdown's own \\ for a backslash
    label = charts.text(f"acc{char}")
    assert not ANY_BIDI.search(label) and label == f'"acc\u29f5{escape[1:]}"'


def test_the_other_escapes_are_unchanged():
    assert redact.single_line("a\nb\r\x1b\x07\tc") == "a\\nb\\r\\e\\x07 c"
    assert redact.escape_bidi("a\n\u202e") == "a\n\\u202e"


def test_a_bidi_metric_name_cannot_reorder_the_gate_summary(tmp_path):
    """The reviewer's case: ``{"\\u202e": {"accuracy": 0.1}}`` failing ``accuracy >= 0.9``."""
    metrics = tmp_path / "m.json"
    metrics.write_text(json.dumps({"\u202e": {"accuracy": 0.1}}))
    args = ("--metrics", str(metrics), "--min", "accuracy=0.9", "--output-dir", str(tmp_path / "o"))
    proc = run_cli("gate", *args, "--json", env=clean_env(GPUCI_JOURNAL=str(tmp_path / "j")))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    answer = json.loads(proc.stdout)
    summary = answer["summary_markdown"]
    assert not ANY_BIDI.search(summary), ascii(summary)
    assert "`\\u202e.accuracy` is 0.1, below 0.9" in summary
    assert not ANY_BIDI.search(json.dumps(answer["annotations"], ensure_ascii=False))
