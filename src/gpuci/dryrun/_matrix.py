"""A job's ``strategy.matrix``, expanded into its legs as GitHub Actions does.

``dry-run`` judges each leg: ``min-memory-gb: ${{ matrix.mem }}`` with legs 40 and 200 is two
plans, and the 200 leg fails on an H200 as the runner's would. GitHub's rules (actions/runner
``MatrixBuilder``): the product of the matrix's own keys; ``exclude`` removes every combination
that matches all of an entry's keys; each ``include`` entry is added to every combination whose
original values it does not contradict (it may set new keys, and overwrite keys an earlier
include added), and becomes a combination of its own when it fits none. An entry matches as
an expression's ``==`` does, leaf by leaf (:func:`matches`). A matrix built by an expression
(``fromJSON(...)``) can't be expanded here: :func:`expand` returns None and the caller says
so. Past 256 legs GitHub refuses the run ("Strategy expansion exceeded 256 results"), and
:func:`expand` raises :class:`TooManyLegs`, counting from the axes' lengths before it builds
any leg. An axis with no values, or a matrix with neither axes nor ``include``, fails the job
at "Evaluate strategy" ("Matrix vector 'gpu' does not contain any values"), and an empty
include or exclude entry, or an exclude key that is no axis, is refused too: :func:`expand`
raises :class:`BadMatrix`. Each key :func:`matches` scans and each string it compares are
charged to the plan's budget (:func:`gpuci.dryrun._bounds.spend`): past it :func:`expand`
raises ExpressionError and the matrix is left to the run.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from typing import Any

from gpuci.dryrun._bounds import KEY_COST, spend
from gpuci.dryrun._embedded import Span
from gpuci.dryrun._expressions import EMBEDDED, ExpressionError, equal, to_text
from gpuci.errors import InputError

_MATRIX_REF = re.compile(r"\$\{\{\s*matrix\.([A-Za-z_][\w-]*)\s*\}\}")

Leg = dict[str, Any]

MAX_LEGS = 256  # GitHub: "a job matrix can generate a maximum of 256 jobs per workflow run"
# Combinations times exclude entries (legs times include entries) compared to count the legs:
# about a second here. Past it a matrix is refused, not weighed: it would take exclude entries
# by the thousand to cut such a product to GitHub's 256 legs.
MAX_CHECKS = 1 << 21


class BadMatrix(InputError):
    """A literal matrix GitHub refuses (an empty axis, no axes): bad input for its job's plan."""


class TooManyLegs(BadMatrix):
    """A literal matrix of over 256 legs, which GitHub refuses too."""


def _literal(value: Any) -> bool:
    if isinstance(value, str):
        return not EMBEDDED.search(value)
    if isinstance(value, list):
        return all(_literal(v) for v in value)
    if isinstance(value, dict):
        return all(_literal(v) for v in value.values())
    return True


def expand(matrix: Any) -> list[Leg] | None:
    """The legs of a literal matrix ([{}] when there is none); None when not literal.

    Raises TooManyLegs past GitHub's 256 legs: the size is counted from the axes' lengths
    before any leg is built, so ten axes of ten values are refused, not built. Raises BadMatrix
    for an axis with no values, or no axis and no ``include`` entry: GitHub fails such a job.
    """
    if matrix is None:
        return [{}]
    if not isinstance(matrix, dict) or not _literal(matrix):
        return None
    include = matrix.get("include") or []
    exclude = matrix.get("exclude") or []
    axes = {k: v for k, v in matrix.items() if k not in ("include", "exclude")}
    if not isinstance(include, list) or not isinstance(exclude, list):
        return None
    if any(not isinstance(v, list) for v in axes.values()):
        return None
    if any(not isinstance(entry, dict) for entry in include):
        return None
    _refuse_empty(axes, include)
    exclude = [e for e in exclude if isinstance(e, dict)]
    _refuse_filters(axes, include, exclude)
    legs = _combinations(axes, exclude)
    _include(legs, include, {str(key).casefold() for key in axes})
    return legs or [{}]


def _refuse_empty(axes: dict[str, list[Any]], include: list[Leg]) -> None:
    """Raises BadMatrix, as GitHub fails the job at 'Evaluate strategy', for an axis with no
    values (the product would be empty) or a matrix with no axis and no include entry."""
    empty = next((key for key, values in axes.items() if not values), None)
    if empty is not None:
        raise BadMatrix(
            f"strategy.matrix axis '{_short(empty)}' has no values: GitHub fails the job "
            f"(\"Matrix vector '{_short(empty)}' does not contain any values\")",
            hint="give the axis at least one value, or leave the axis out",
        )
    if not axes and not include:
        raise BadMatrix(
            "strategy.matrix has no axis and no include entry: GitHub fails the job "
            '("Matrix must define at least one vector")',
            hint="give the matrix an axis with values, or remove strategy.matrix",
        )


def _refuse_filters(axes: dict[str, list[Any]], include: list[Leg], exclude: list[Leg]) -> None:
    """Raises BadMatrix for an include or exclude entry GitHub's matrix builder refuses: an
    empty one, or an exclude key that is no axis (actions/runner#2111)."""
    named = {str(key).casefold() for key in axes}
    for what, entries in (("include", include), ("exclude", exclude)):
        if any(not entry for entry in entries):
            said = "mapping does not contain any values" if what == "include" else "filter"
            raise BadMatrix(
                f"strategy.matrix has an empty {what} entry: GitHub refuses it "
                f'("Matrix {what} {said}{"" if what == "include" else " must not be empty"}")',
                hint=f"give the {what} entry a key, or remove it",
            )
    for key in (k for entry in exclude for k in entry if str(k).casefold() not in named):
        raise BadMatrix(
            f"strategy.matrix exclude key '{_short(key)}' is no axis of the matrix: GitHub "
            f"refuses it (\"Matrix exclude key '{_short(key)}' does not match any key within "
            'the matrix")',
            hint="exclude by the matrix's own keys (include entries are added after exclude)",
        )


def matches(value: Any, entry: Any) -> bool:
    """Whether a leg (``value``) matches an include or exclude entry as GitHub's matrix builder
    decides: each leaf of the entry ``==`` the leg's value at its path, as an expression
    compares (strings case-blind, numbers coerced, null equal to ''; keys case-blind), so a
    nested mapping or list matches in part."""
    if isinstance(entry, dict):
        return all(matches(_at(value, str(k)), v) for k, v in entry.items())
    if isinstance(entry, list):
        items = value if isinstance(value, list) else []
        return all(matches(items[i] if i < len(items) else None, v) for i, v in enumerate(entry))
    if isinstance(value, str) and isinstance(entry, str):
        spend(len(value) + len(entry))  # both folded to compare, as an expression's == is
    return equal(value, entry)


def _at(value: Any, key: str) -> Any:
    """``value[key]`` as an expression reads it: a mapping's key case-blind, else null. The
    scan is charged to the plan's budget as an expression's lookup is: a leg's value may be a
    mapping of 50,000 keys that each of thousands of entries looks into (ExpressionError past
    the budget)."""
    if not isinstance(value, dict):
        return None
    spend(len(value) * KEY_COST)
    return next((v for k, v in value.items() if str(k).casefold() == key.casefold()), None)


def _combinations(axes: dict[str, list[Any]], exclude: list[Leg]) -> list[Leg]:
    """The product of the axes less every combination an exclude entry matches (all its keys).

    Built only when it can come to 256 legs or fewer: a larger product with no exclude is
    refused from its size, and the walk stops at the 257th leg kept.
    """
    if not axes:
        return []
    size = math.prod(len(values) for values in axes.values())
    if size > MAX_LEGS and not exclude:
        lengths = " x ".join(str(len(values)) for values in axes.values())
        raise _too_many(f"{size:,} legs ({lengths} values)")
    if size * _weight(exclude) > MAX_CHECKS:
        raise _too_many(
            f"{size:,} combinations to weigh against {len(exclude):,} exclude entries "
            f"(over {MAX_CHECKS:,} comparisons)"
        )
    kept: list[Leg] = []
    for combo in itertools.product(*axes.values()):
        leg = dict(zip(axes, combo, strict=True))
        if not any(matches(leg, e) for e in exclude):
            kept.append(leg)
            if len(kept) > MAX_LEGS:
                raise _too_many(f"more than {MAX_LEGS} legs after its exclude entries")
    return kept


def _include(legs: list[Leg], include: list[Leg], named: set[str]) -> None:
    """Put each include entry into ``legs``: into every combination whose original values it
    does not contradict (judged by the product's values, never by one an earlier include
    added; those values stay as they are), else as a leg of its own."""
    product = [(leg, dict(leg)) for leg in legs]
    if len(product) * _weight(include) > MAX_CHECKS:
        raise _too_many(
            f"{len(product):,} legs to weigh against {len(include):,} include entries "
            f"(over {MAX_CHECKS:,} comparisons)"
        )
    for entry in include:
        fitted = False
        for leg, original in product:
            axes = {k: v for k, v in entry.items() if str(k).casefold() in named}
            if matches(original, axes):
                leg.update({k: v for k, v in entry.items() if k not in axes})
                fitted = True
        if not fitted:
            legs.append(dict(entry))
            if len(legs) > MAX_LEGS:
                raise _too_many(f"more than {MAX_LEGS} legs with its include entries")


def _weight(entries: list[Leg]) -> int:
    """The values each leg is compared with (every leaf of every entry, at least one an
    entry), counted only up to past :data:`MAX_CHECKS`: an entry may nest a large value, an
    alias of one a thousand times, and :func:`matches` walks all of it for every leg."""
    count, stack = 0, list(entries)
    while stack and count <= MAX_CHECKS:
        value = stack.pop()
        inner = list(value.values()) if isinstance(value, dict) else value
        if isinstance(inner, list) and inner:
            stack += inner
        else:
            count += 1
    return max(count, len(entries), 1)


def _too_many(what: str) -> TooManyLegs:
    return TooManyLegs(
        f"strategy.matrix makes {what}: GitHub runs at most {MAX_LEGS} legs per matrix "
        "('Strategy expansion exceeded 256 results')",
        hint="cut its axes, or split the job",
    )


def label(leg: Leg, keys: list[str] | None = None) -> str:
    """``mem=40, os=linux``: how a leg is named in the report (GitHub shows the values); a key
    the leg leaves empty (``extras:`` with no value) is left out, as it names nothing. ``keys``
    (see :func:`naming_keys`) keeps the name short where the legs differ in a few keys."""
    shown = [k for k in leg if keys is None or k in keys]
    return ", ".join(f"{k}={_short(leg[k])}" for k in shown if leg[k] is not None and leg[k] != "")


MAX_SHOWN = 40  # a value longer than this is cut in a leg's name (the plan shows it whole)


def _short(value: Any) -> str:
    """A value as a name shows it: an object or array as compact JSON, cut when long."""
    if isinstance(value, dict | list):  # encoded only as far as is shown: a value may be huge
        encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
        text = ""
        for chunk in encoder.iterencode(value):
            text += chunk
            if len(text) > MAX_SHOWN:
                break
    else:
        text = to_text(value)
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 3] + "..."


def naming_keys(legs: list[Leg]) -> list[str]:
    """The fewest keys, in the matrix's order, that tell the legs apart: a key is taken when
    it splits legs the keys before it do not (ao's legs differ by ``name`` alone, so its five
    keys are not all repeated in every job name)."""
    if len(legs) < 2:
        return list(dict.fromkeys(k for leg in legs for k in leg))  # one leg: all it has
    keys: list[str] = []
    groups = 1
    for key in dict.fromkeys(k for leg in legs for k in leg):
        more = len({label(leg, [*keys, key]) for leg in legs})
        if more > groups:
            keys.append(key)
            groups = more
        if groups == len(legs):
            break
    return keys


def named(job: str, legs: list[Leg]) -> list[tuple[str, Leg]]:
    """Each leg with its job's name as GitHub shows it: ``train (mem=40)``; numbered too when
    values cut alike would name two legs the same."""
    keys = naming_keys(legs)
    labels = [label(leg, keys) for leg in legs]
    if len(set(labels)) < len(labels):  # cut values alike: number the legs too
        labels = [f"{index}: {text}" for index, text in enumerate(labels, 1)]
    return [
        (f"{job} ({text or index})", leg)
        for index, (text, leg) in enumerate(zip(labels, legs, strict=True), 1)
    ]


def whole_reference(text: str) -> str | None:
    """The key when ``text`` is one whole ``${{ matrix.<key> }}``, else None."""
    match = _MATRIX_REF.fullmatch(text.strip())
    return match.group(1) if match else None


def substitute(text: str, leg: Leg) -> str:
    """Replace each whole ``${{ matrix.<key> }}`` the leg defines; leave anything else, and
    what a quoted string holds (``${{ format('${{ matrix.x }}') }}`` is that text, as in
    GitHub: the expressions are found as its reader finds them)."""

    def one(span: Span) -> str:
        match = _MATRIX_REF.fullmatch(span.group(0))
        key = match.group(1) if match else ""
        return (
            to_text(leg[key])
            if key in leg and not isinstance(leg[key], dict | list)
            else span.group(0)
        )

    try:
        return EMBEDDED.sub(one, text)
    except ExpressionError:  # not closed: the file was refused when read (GitHub refuses it)
        return text
