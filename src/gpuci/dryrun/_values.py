"""Values as GitHub's expressions see them: what a plan knows only in part, and how the runner
reads a value as a truth, a number, a comparison or text.

What a planner cannot know (a secret, a ``vars`` value, the outputs of a ``run:`` step) is an
:class:`Unknown`: it names what it came from, so a plan says *why* it could not decide. A
context the plan knows only some properties of is a :class:`Partial`. The evaluator
(:mod:`gpuci.dryrun._expressions`) computes with these; this module holds no parser.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from gpuci.untrusted_yaml import int32


class ExpressionError(ValueError):
    """An expression we cannot (or GitHub would not) evaluate."""


class Unknown:
    """A value known only at run time; ``why`` names it (``vars.MODEL_URL``)."""

    __slots__ = ("path", "truth", "why")

    def __init__(self, why: str, path: bool = True, truth: bool | None = None) -> None:
        self.why = why
        self.path = path  # ``why`` is a context path that a property access may extend
        self.truth = truth  # known even when the value is not: ``vars.X || 'default'``

    def child(self, key: Any) -> Unknown:
        if self.path and isinstance(key, str):
            return Unknown(f"{self.why}.{key}")
        return Unknown(self.why, path=False)

    def with_truth(self, truth: bool) -> Unknown:
        return Unknown(self.why, path=False, truth=truth)

    def __repr__(self) -> str:
        return f"Unknown({self.why!r})"


class Partial(dict):
    """A context of which only some properties are known; the rest are :class:`Unknown`.

    With ``open`` given, only the properties it names are unknown and any other is null: an
    event's payload carries a fixed set of fields, so ``github.event.pull_request`` on a push is
    null at plan time as it is at run time.
    """

    def __init__(
        self, name: str, known: Mapping[str, Any], open: frozenset[str] | None = None
    ) -> None:
        super().__init__(known)
        self.name = name
        self.open = None if open is None else frozenset(k.casefold() for k in open)

    def missing(self, key: str) -> Unknown | None:
        """What a property this context does not hold is: unknown, or null."""
        if self.open is None or key.casefold() in self.open:
            return Unknown(f"{self.name}.{key}")
        return None


def opaque(why: str) -> Unknown:
    """A value that exists but is never read (a secret named by ``--secret``): truthy and not
    empty, so ``secrets.X != ''`` and ``secrets.X && ...`` decide, while its text stays unknown."""
    return Unknown(why, path=False, truth=True)


def to_number(value: Any) -> float:
    if value is None:
        return 0.0
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        return _parsed_number(value.strip(NET_WHITE))
    return math.nan


# What ``ExpressionUtility.ParseNumber`` reads (on .NET 8, the runner's): the text trimmed of
# .NET's white space (Python's also strips U+001C-U+001F), then Double.TryParse (sign, point,
# exponent, trailing NULs; no ``_``, no ``inf``; ``Infinity``, ``-Infinity`` and ``NaN`` in any
# case, as OrdinalIgnoreCase compares: a dotless i is no i), then ``0x``/``0o`` as an Int32.
NET_WHITE = "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
NET_WHITE += "\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
# one way to match each text: ``[0-9]+\.?[0-9]*`` split a run of digits between its two loops
# every way there is, so 16,000 digits and an ``x`` kept a comparison busy for 12 seconds
_DOUBLE = re.compile(r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")
_INFINITIES = {"INFINITY": math.inf, "+INFINITY": math.inf, "-INFINITY": -math.inf}


def _parsed_number(text: str) -> float:
    """A string as the runner reads it as a number: NaN for anything else (Python's float()
    reads ``1_000``, ``inf`` and ``nan`` too). A NaN spelled out is NaN either way."""
    if text == "":
        return 0.0
    written = text.rstrip("\0")  # .NET reads NULs after a number as its end
    if _DOUBLE.fullmatch(written):
        return float(written)
    number = int32(text)
    if number is not None:
        return number
    return _INFINITIES.get(text.upper(), math.nan) if text.isascii() else math.nan


def truthy(value: Any) -> bool:
    if value is None or value is False or value == "":
        return False
    if isinstance(value, int | float) and not isinstance(value, bool):
        return not (value == 0 or math.isnan(value))
    return True


def truth_of(value: Any) -> bool | None:
    """Whether a value is truthy; None for an :class:`Unknown` whose truth is unknown too."""
    if isinstance(value, Unknown):
        return value.truth
    return truthy(value)


def equal(left: Any, right: Any) -> bool:
    if isinstance(left, str) and isinstance(right, str):
        return left.casefold() == right.casefold()
    if type(left) is type(right) and not isinstance(left, int | float | bool | type(None)):
        return left is right  # objects and arrays compare by identity
    if left is None and right is None:
        return True
    return to_number(left) == to_number(right)


def to_text(value: Any) -> str:
    """How the runner renders a value inside a string (``EvaluationResult.ConvertToString``):
    a number as a double to 15 significant digits, an object or array by its kind's name (its
    JSON is ``toJSON``'s)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return number_text(value)
    if isinstance(value, dict):
        return "Object"
    if isinstance(value, list):
        return "Array"
    return str(value)


def number_text(value: int | float) -> str:
    """A number as .NET prints a double with ``G15``: ``1E+20``, ``1.23456789012346``."""
    try:
        number = float(value)
    except OverflowError:  # an integer past a double's range
        return "Infinity" if value > 0 else "-Infinity"
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "Infinity" if number > 0 else "-Infinity"
    return format(number, ".15g").replace("e", "E")


def json_text(value: Any, level: int = 0) -> str:
    """``toJSON`` as the runner writes it (``ToJson``): two spaces a level, each number as its
    text (``1``, not Python's ``1.0``; ``1E+20``), a string's characters as they are."""
    pad = "\n" + "  " * (level + 1)
    if isinstance(value, dict):
        pairs = [f"{pad}{_quoted(to_text(k))}: {json_text(v, level + 1)}" for k, v in value.items()]
        return "{" + ",".join(pairs) + "\n" + "  " * level + "}" if pairs else "{}"
    if isinstance(value, list):
        items = [pad + json_text(item, level + 1) for item in value]
        return "[" + ",".join(items) + "\n" + "  " * level + "]" if items else "[]"
    if isinstance(value, str):
        return _quoted(value)
    return "null" if value is None else to_text(value)


def _quoted(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def is_primitive(value: Any) -> bool:
    """Whether the runner reads ``value`` as a primitive (null, boolean, number, string):
    ``contains``, ``startsWith`` and ``endsWith`` of anything else are false."""
    return not isinstance(value, dict | list)


def first_unknown(value: Any) -> Unknown | None:
    """The first :class:`Unknown` anywhere inside ``value`` (a :class:`Partial` that lacks
    properties is one: ``toJSON(github)`` holds what only the run knows); None when all is
    known. What renders a value whole (``toJSON``, ``format``, text with ``${{ steps }}`` in
    it) asks this first: the rendering of an unknown is unknown, never an error."""
    return walk(value)[0]


def walk(value: Any) -> tuple[Unknown | None, int]:
    """:func:`first_unknown`, and how much of ``value`` the walk read to find it: one for each
    value and key, and each string's length (what rendering all of it would scan)."""
    stack = [value]
    size = 0
    while stack:
        item = stack.pop()
        size += 1 + (len(item) if isinstance(item, str) else 0)
        if isinstance(item, Unknown):
            return Unknown(item.why, path=False), size
        if isinstance(item, Partial) and item.open != frozenset():
            return Unknown(item.name, path=False), size
        if isinstance(item, dict):
            size += sum(len(k) if isinstance(k, str) else 1 for k in item)
            stack.extend(reversed(list(item.values())))
        elif isinstance(item, list):
            stack.extend(reversed(item))
    return None, size


def text_of(value: Any) -> str:
    """A YAML scalar as the runner reads it (``true`` for a YAML boolean, a number as its
    NumberToken prints a double: ``12.0`` is ``12``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return number_text(value)
    return "" if value is None else str(value)
