"""Where each ``${{ expr }}`` in a text begins and ends, found as GitHub finds it.

GitHub's template reader (actions/runner ``TemplateReader.ParseScalar``, the same loop in
actions/languageservices ``template-reader.ts``) reads from a ``${{`` to the first ``}}`` that
is outside a ``'...'`` string: each ``'`` toggles "in a string" (``''``, an escaped quote,
toggles twice), so ``${{ format('}}') }}`` is one expression, where a search for the first
``}}`` cut it at the quoted one. A ``${{`` with no such ``}}`` after it fails the whole file
("The expression is not closed"). The next expression is looked for after the end of the
last, so the scan reads each character once: linear in the text, whatever it holds.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import NamedTuple

from gpuci.dryrun._values import ExpressionError

OPEN = "${{"
NOT_CLOSED = (
    "holds an expression that is not closed (a ${{ with no }} after it; "
    "a }} inside a '...' string does not close one)"
)
_QUOTE_OR_CLOSE = re.compile(r"'|\}\}")


class Span(NamedTuple):
    """One ``${{ }}`` in ``text``: ``group(0)`` the whole, ``group(1)`` what is inside."""

    start: int
    end: int
    text: str

    def group(self, index: int = 0) -> str:
        if index == 0:
            return self.text[self.start : self.end]
        return self.text[self.start + len(OPEN) : self.end - 2]


def _end(text: str, start: int) -> int:
    """Where the expression opened at ``start`` ends (after its ``}}``); -1 if it never does."""
    pos = start + len(OPEN)
    while found := _QUOTE_OR_CLOSE.search(text, pos):
        if found.group() == "}}":
            return found.end()
        closing = text.find("'", found.end())  # the string's end ('' toggles twice)
        if closing < 0:
            return -1
        pos = closing + 1
    return -1


def spans(text: str) -> Iterator[Span]:
    """Each ``${{ }}`` in ``text`` in order; ExpressionError at one that is not closed."""
    start = text.find(OPEN)
    while start >= 0:
        end = _end(text, start)
        if end < 0:
            raise ExpressionError(f"the text {NOT_CLOSED}")
        yield Span(start, end, text)
        start = text.find(OPEN, end)


def unclosed(text: str) -> bool:
    """Whether GitHub refuses ``text`` (a YAML value or key) for a ``${{`` it never closes."""
    try:
        for _ in spans(text):
            pass
    except ExpressionError:
        return True
    return False


class _Embedded:
    """The ``${{ }}`` of a text, with the calls a search pattern offered."""

    def search(self, text: str) -> bool:
        """Whether ``text`` holds a closed ``${{ }}`` (before any that is not closed)."""
        try:
            return next(spans(text), None) is not None
        except ExpressionError:
            return False

    def fullmatch(self, text: str) -> Span | None:
        """The one ``${{ }}`` that is all of ``text``, else None."""
        try:
            first = next(spans(text), None)
        except ExpressionError:
            return None
        return first if first and first.start == 0 and first.end == len(text) else None

    def sub(self, put: Callable[[Span], str], text: str) -> str:
        """``text`` with each ``${{ }}`` replaced; ExpressionError at one not closed."""
        parts: list[str] = []
        pos = 0
        for span in spans(text):
            parts += (text[pos : span.start], put(span))
            pos = span.end
        return "".join(parts) + text[pos:]


EMBEDDED = _Embedded()
