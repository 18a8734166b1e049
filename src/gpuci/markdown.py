"""Markdown that gpu-ci writes (job summaries, PR comments, MR notes): text in it stays text.

Much of what lands in a table comes from files a pull request's code wrote (metric names and
values, baselines) or from a store's listing, and the summary becomes a PR comment or MR note.
Markdown there is live: ``<img src=...>`` is a tracking pixel, ``[x](url)`` a link, ``@name`` a
notification, ``#12`` a cross-reference in issue 12 (``GH-12`` too on GitHub; ``!12`` in merge
request 12 and ``&12`` in epic 12 on GitLab). So every cell goes through one function,
:func:`cell`, which renders a value as inert text, or as a code span for :class:`Code` values.

A text over its platform's limit (a PR comment's characters, a job summary's bytes) is cut by
one function, :func:`cut`: at whole lines, with the blocks they leave open closed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from gpuci import redact as _redact

# A zero-width space after ``@``/``#`` and inside ``://``/``www.``: what a reader sees is
# unchanged, but GitHub's and GitLab's mention, reference and bare-link filters no longer match.
_ZWSP = "&#8203;"
# Characters with a meaning in (GitHub/GitLab-flavoured) Markdown or HTML, escaped with a
# backslash: CommonMark lets any ASCII punctuation be escaped, and renders it literally.
# (``*``, ``_`` and ``~`` are left alone: at worst they emphasise, and keys are full of them;
# ``>`` too: it means something only at a line's start, or closing a tag or autolink that an
# escaped ``<`` can no longer open, so ``acc >= 0.9`` reads as written in the raw text too.)
_PUNCT = re.compile(r"([\\`\[\]<|])")
_LIVE = re.compile(r"[@#]|://|(?i:www)\.")
# References that are live only before a number: GitHub's ``GH-12``, GitLab's ``!12`` (a merge
# request) and ``&12`` (an epic; ``&amp;`` is ``&`` to GitLab's filters, which read the HTML's
# text). A zero-width space after the prefix leaves no number right behind it.
_NUMBERED = re.compile(r"(?:!|&amp;|(?i:gh)-)(?=[0-9])")


class Code(str):
    """A cell shown as a code span (names, digests): inside one nothing but backticks and the
    table's ``|`` has a meaning, and both are handled."""


class Link(str):
    """A cell that is a URL gpu-ci chose or the workflow gave (a pod's proxy, a download):
    clickable as an autolink when it is a plain http(s) URL, else shown as a code span."""


_PLAIN_URL = r"https?://[A-Za-z0-9._~:/?#@!$&'()*+,;=%-]+\Z"  # text: compiled on first use


def is_plain_url(value: object) -> bool:
    """Whether ``value`` is one plain http(s) URL: a string of URL characters only (no space,
    no line break, no ``javascript:``), safe as an autolink or a step's output."""
    return isinstance(value, str) and re.match(_PLAIN_URL, value) is not None


def text(value: str) -> str:
    """``value`` as one line of inert Markdown text, shown as written."""
    line = _redact.single_line(value)
    line = line.replace("&", "&amp;")
    line = _PUNCT.sub(r"\\\1", line)
    line = _LIVE.sub(lambda m: m.group(0)[0] + _ZWSP + m.group(0)[1:], line)
    return _NUMBERED.sub(lambda m: m.group(0) + _ZWSP, line)


def code(value: str, *, in_table: bool = True) -> str:
    """``value`` as one code span: fenced by more backticks than any run inside it, ``|``
    escaped in a table (GFM reads ``\\|`` as a pipe inside code spans too; elsewhere the
    backslash would show)."""
    line = _redact.single_line(value)
    if in_table:
        line = line.replace("|", "\\|")
    if not line:
        return ""
    fence = "`" * (max((len(run) for run in re.findall(r"`+", line)), default=0) + 1)
    pad = " " if line.startswith("`") or line.endswith("`") else ""
    return f"{fence}{pad}{line}{pad}{fence}"


def cell(value: Any) -> str:
    """One table cell: :class:`Link` as an autolink, :class:`Code` as a code span, anything
    else as inert text."""
    from gpuci.units import format_output

    if isinstance(value, Link):
        return f"<{value}>" if is_plain_url(value) else code(value)
    if isinstance(value, Code):
        return code(value)
    shown = format_output(value) if isinstance(value, bool | float) or value is None else value
    return text(str(shown))


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table; every row cell through :func:`cell` (headers are gpu-ci's own words,
    written as they are: ``#`` for an index)."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


#: What a cut text ends with, so a reader knows more was there.
TRUNCATED = "_(truncated)_"
_FENCE = "```"
_DETAILS_OPEN, _DETAILS_CLOSE = "<details>", "</details>"


def utf8_size(value: str) -> int:
    """``value``'s size in UTF-8 bytes: what a job summary's limit counts."""
    return len(value.encode("utf-8", "surrogatepass"))


def cut(text: str, limit: int, size: Callable[[str], int] = len) -> str:
    """``text`` as is when ``size`` (characters by default; :func:`utf8_size` for bytes) says
    it is within ``limit``; else the whole lines from its start that fit, what they leave open
    (a code fence, ``<details>``) closed, then :data:`TRUNCATED` ("" when not even that fits).

    Whole lines: a cut inside one could leave a code span open, and the text after it (a PR's
    metric names) would be live Markdown.
    """
    if size(text) <= limit:
        return text
    room = limit - size("\n\n" + TRUNCATED)
    if room < 0:
        return ""
    kept: list[str] = []
    used = fence = opened = 0  # bytes kept (a newline each); fence parity; <details> left open
    for line in text.split("\n"):
        fence_after = fence ^ line.startswith(_FENCE)
        opened_after = opened + line.startswith(_DETAILS_OPEN) - line.startswith(_DETAILS_CLOSE)
        closing = 4 * fence_after + 12 * max(0, opened_after)  # "```\n", "\n</details>\n"
        if used + size(line) + 1 + closing > room:
            break
        kept.append(line)
        used, fence, opened = used + size(line) + 1, fence_after, opened_after
    return "\n".join(kept + _closers(bool(fence), opened)).rstrip("\n") + "\n\n" + TRUNCATED


def _closers(fenced: bool, opened: int) -> list[str]:
    """What closes an open code fence and ``opened`` ``<details>`` blocks, innermost first."""
    return ([_FENCE] if fenced else []) + ["", _DETAILS_CLOSE] * max(0, opened)
