"""GitHub Actions expressions (``${{ }}`` and ``if:``), evaluated as the runner does.

One evaluator for the whole project: ``dry-run`` plans a workflow with it, and the tests' action
harness runs our composite actions with it. No library on PyPI evaluates ``${{ }}`` the way
the runner does (actions/runner ``src/Sdk/Expressions``), and the subset is small.

Supported: literals (``'text'`` with ``''`` escapes, numbers as the runner reads them: ``1e3``,
``.5``, ``0x1F``, ``0o17``, ``NaN``, ``Infinity``; ``true``, ``false``, ``null``),
context lookups (``inputs.x``, ``steps.id.outputs.y``, ``env.X``, ``a['b']``), ``!``, ``==``,
``!=``, ``<``, ``<=``, ``>``, ``>=``, ``&&``, ``||`` (which return an operand, as in GitHub),
parentheses, the status functions, ``contains``/``startsWith``/``endsWith``/``format``/``join``/
``toJSON``/``fromJSON``. Comparison follows the runner: strings compare case-insensitively;
mixed types are coerced to numbers; ``NaN`` equals nothing.

What a planner cannot know (a secret, a ``vars`` value, the outputs of a ``run:`` step) is an
:class:`Unknown` (:mod:`._values` holds the values and how the runner reads them): it flows
through operators (``unknown && false`` is still false, ``unknown || 'x'`` still truthy) and
names what it came from, so a plan says *why* it could not decide. Anything else raises
:class:`ExpressionError`: nothing is silently evaluated wrongly.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from gpuci import untrusted_json
from gpuci.dryrun._bounds import KEY_COST, spend
from gpuci.dryrun._embedded import EMBEDDED, OPEN, Span, spans
from gpuci.dryrun._values import (
    NET_WHITE,
    ExpressionError,
    Partial,
    Unknown,
    equal,
    first_unknown,
    is_primitive,
    json_text,
    opaque,
    to_number,
    to_text,
    truth_of,
    truthy,
    walk,
)

__all__ = [
    "EMBEDDED",
    "MAX_TEXT",
    "ExpressionError",
    "Function",
    "Functions",
    "Partial",
    "Status",
    "Unknown",
    "condition",
    "condition_expression",
    "equal",
    "evaluate",
    "first_unknown",
    "interpolate",
    "opaque",
    "to_number",
    "to_text",
    "truth_of",
    "truthy",
]

# A number is read as the runner's LexicalAnalyzer reads one: from a sign or a digit (or a dot
# where no property can follow) up to the next boundary, dots included, then parsed as text is
# (``to_number``: ``.5``, ``1e3``, ``0x1F``, ``0o17``, ``-Infinity``); one that parses to NaN is
# no number (``1.2.3``, ``-0x1``). ``NaN`` and ``Infinity`` are keywords (primary reads them).
# White space is .NET's (``Char.IsWhiteSpace``), not Python's ``\s``: U+001C-U+001F are none,
# so ``1 ==\x1c1`` is a token the runner refuses, not ``1 == 1``.
_WHITE = f"[{NET_WHITE}]"
TOKEN = re.compile(
    rf"{_WHITE}*(?:"
    r"(?P<str>'(?:[^']|'')*')"
    rf"|(?P<num>[-+0-9][^{NET_WHITE}()\[\],!<>=&|]*)"
    r"|(?P<op>==|!=|<=|>=|&&|\|\||[!<>().\[\],*])"
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_-]*)"
    r")"
)
_DOT_NUMBER = re.compile(rf"{_WHITE}*(?P<num>\.[^{NET_WHITE}()\[\],!<>=&|]*)")
# after these (or at the start) a dot begins a number, as in the runner; elsewhere a property
_BEFORE_NUMBER = frozenset({",", "(", "[", "!", "==", "!=", "<", "<=", ">", ">=", "&&", "||"})
KEYWORD_NUMBERS = {"NaN": math.nan, "Infinity": math.inf}
STATUS_FUNCTIONS = ("success", "failure", "always", "cancelled")
_LITERAL = re.compile(r"'((?:[^']|'')*)'")  # one string literal: GitHub reads an if: of its text


Status = Callable[[str], "bool | Unknown"]
# Extra functions by lower-case name: called with the contexts and the arguments. A set of names
# instead makes each of them an Unknown (what only the run can compute, e.g. hashFiles).
Function = Callable[[Mapping[str, Any], list[Any]], Any]
Functions = Mapping[str, Function] | frozenset[str]
# GitHub's own bounds (actions/runner ExpressionConstants): an expression of at most 21,000
# characters, its tree at most 50 levels deep. Here each (, !, [ and call is a level of recursive
# descent (GitHub's parentheses make no level of its tree): past 50 the expression is refused,
# so not evaluated and left to the run, never a RecursionError.
MAX_LENGTH = 21_000
MAX_DEPTH = 50
# GitHub evaluates an expression within 10 MiB (EvaluationOptions.MaxMemory, the template's
# ParseOptions.MaxResultSize), two bytes a character: no string it produces is longer than this.
MAX_TEXT = (10 << 20) // 2


def tokenize(text: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    pos = 0
    text = text.rstrip(NET_WHITE)
    while pos < len(text):
        dot = not tokens or tokens[-1][1] in _BEFORE_NUMBER  # a string keeps its quotes
        match = (dot and _DOT_NUMBER.match(text, pos)) or TOKEN.match(text, pos)
        if not match or match.end() == pos:
            raise ExpressionError(f"cannot parse expression at {text[pos:]!r}")
        kind = match.lastgroup or ""
        token = match.group(kind)
        if kind == "num" and math.isnan(to_number(token)):
            raise ExpressionError(f"cannot parse the number {token!r} in {text!r}")
        tokens.append((kind, token))
        pos = match.end()
    return tokens


def _nonempty_against_empty(left: Any, right: Any) -> bool | None:
    """``x == ''`` (or null) where x is unknown but surely truthy: False, known at plan time."""
    for a, b in ((left, right), (right, left)):
        if isinstance(a, Unknown) and a.truth is True and (b is None or b == ""):
            return False
    return None


def _first_unknown(*values: Any) -> Unknown | None:
    """The first unknown operand, as the unknown result of an operation on it."""
    found = next((v for v in values if isinstance(v, Unknown)), None)
    return None if found is None else Unknown(found.why, path=False)


class _Parser:
    def __init__(
        self,
        text: str,
        contexts: Mapping[str, Any],
        status: Status,
        functions: Functions,
    ) -> None:
        if len(text) > MAX_LENGTH:
            raise ExpressionError(
                f"an expression of {len(text):,} characters (GitHub allows {MAX_LENGTH:,})"
            )
        spend(len(text) + 1)
        self.tokens = tokenize(text)
        self.pos = 0
        self.depth = 0  # how deep the parse is nested: (, !, [ and a call's arguments
        self.contexts = contexts
        self.status = status
        self.functions = functions
        self.text = text

    def peek(self) -> str | None:
        return self.tokens[self.pos][1] if self.pos < len(self.tokens) else None

    def take(self, expected: str | None = None) -> tuple[str, str]:
        if self.pos >= len(self.tokens):
            raise ExpressionError(f"unexpected end of expression {self.text!r}")
        token = self.tokens[self.pos]
        if expected is not None and token[1] != expected:
            raise ExpressionError(f"expected {expected!r}, got {token[1]!r} in {self.text!r}")
        self.pos += 1
        return token

    def nested(self, parse: Callable[[], Any]) -> Any:
        """``parse()`` one level deeper; past :data:`MAX_DEPTH` GitHub refuses it too."""
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ExpressionError(f"an expression nested deeper than {MAX_DEPTH} levels")
        try:
            return parse()
        finally:
            self.depth -= 1

    def parse(self) -> Any:
        value = self.or_()
        if self.pos != len(self.tokens):
            raise ExpressionError(f"unexpected {self.peek()!r} in {self.text!r}")
        return value

    def or_(self) -> Any:
        return self._logical("||", self.and_, decides=True)

    def and_(self) -> Any:
        return self._logical("&&", self.equality, decides=False)

    def _logical(self, op: str, operand: Callable[[], Any], decides: bool) -> Any:
        """``||`` (a truthy left side decides) or ``&&`` (a falsy one does): the deciding
        operand, else the right one, as GitHub returns an operand, not a boolean."""
        value = operand()
        while self.peek() == op:
            self.take()
            right = operand()
            left = truth_of(value)
            if left is None:  # decided either way when the right side decides; else undecided
                value = value.with_truth(decides) if truth_of(right) is decides else value
            else:
                value = value if left is decides else right
        return value

    def equality(self) -> Any:
        value = self.comparison()
        while self.peek() in ("==", "!="):
            op = self.take()[1]
            right = self.comparison()
            _spend_strings(value, right)
            known = _nonempty_against_empty(value, right)
            same = equal(value, right) if known is None else known
            unknown = None if known is not None else _first_unknown(value, right)
            value = unknown or (same if op == "==" else not same)
        return value

    def comparison(self) -> Any:
        value = self.unary()
        while self.peek() in ("<", "<=", ">", ">="):
            op = self.take()[1]
            right = self.unary()
            unknown = _first_unknown(value, right)
            if unknown:
                value = unknown
                continue
            _spend_strings(value, right)
            a: Any
            b: Any
            a, b = (
                (value.casefold(), right.casefold())
                if isinstance(value, str) and isinstance(right, str)
                else (to_number(value), to_number(right))
            )
            value = {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]
        return value

    def unary(self) -> Any:
        if self.peek() == "!":
            self.take()
            value = self.nested(self.unary)
            truth = truth_of(value)
            return value if truth is None else not truth
        return self.postfix()

    def postfix(self) -> Any:
        value = self.primary()
        while self.peek() in (".", "["):
            if self.take()[1] == ".":
                kind, name = self.take()
                if kind != "name" and name != "*":
                    raise ExpressionError(f"expected a property name in {self.text!r}")
                key: Any = name
            else:
                key = self.nested(self.or_)
                self.take("]")
            value = _index(value, key)
        return value

    def primary(self) -> Any:
        kind, text = self.take()
        if kind == "str":
            return text[1:-1].replace("''", "'")
        if kind == "num":
            number = to_number(text)
            return int(number) if number.is_integer() else number
        if text == "(":
            value = self.nested(self.or_)
            self.take(")")
            return value
        if kind != "name":
            raise ExpressionError(f"unexpected {text!r} in {self.text!r}")
        if text in ("true", "false"):
            return text == "true"
        if text == "null":
            return None
        if text in KEYWORD_NUMBERS:
            return KEYWORD_NUMBERS[text]
        if self.peek() == "(":
            return self.call(text)
        found = next((k for k in self.contexts if k.casefold() == text.casefold()), None)
        if found is None:
            raise ExpressionError(f"unknown context {text!r} in {self.text!r}")
        return self.contexts[found]

    def call(self, name: str) -> Any:
        self.take("(")
        args: list[Any] = []
        while self.peek() != ")":
            args.append(self.nested(self.or_))
            if self.peek() == ",":
                self.take()
        self.take(")")
        low = name.lower()
        if low in STATUS_FUNCTIONS and not args:
            return self.status(low)
        if low in self.functions:
            if isinstance(self.functions, frozenset):
                return Unknown(f"{name}()", path=False)
            return self.functions[low](self.contexts, args)
        if low in _RENDERING:
            return self.rendering(low, name, args)
        if low == "fromjson" and len(args) == 1:
            if unknown := _first_unknown(*args):
                return unknown
            spend(len(source := to_text(args[0])))
            try:
                return untrusted_json.loads(source)
            except ValueError:
                message = f"fromJSON of text that is not JSON in {self.text!r}"
                raise ExpressionError(message) from None
        raise ExpressionError(f"function {name}() is not supported here")

    def rendering(self, low: str, name: str, args: list[Any]) -> Any:
        """A function that reads its arguments as text (or, ``contains``, searches a list):
        unknown when any part of them is, else as the runner computes it."""
        unknown, size = walk(args)
        spend(size)
        hay = args[0] if low == "contains" and len(args) == 2 else None
        if isinstance(hay, list) and any(equal(item, args[1]) for item in hay):
            return True  # found: what else the list holds does not matter
        if unknown:
            return unknown
        if low in ("contains", "startswith", "endswith") and len(args) == 2:
            hay, needle = args
            if not (is_primitive(hay) and is_primitive(needle)):
                return False  # the runner searches no object's or array's text
            h, n = to_text(hay).casefold(), to_text(needle).casefold()
            if low == "contains":
                return n in h
            return h.startswith(n) if low == "startswith" else h.endswith(n)
        if low == "format" and args:
            return _format(to_text(args[0]), [to_text(a) for a in args[1:]], self.text)
        if low == "join" and 1 <= len(args) <= 2:
            return _join(args)
        if low == "tojson" and len(args) == 1:
            made = _bounded(json_text(args[0]), "toJSON()")
            spend(len(made))
            return made
        raise ExpressionError(f"function {name}() is not supported here")


_RENDERING = frozenset({"contains", "startswith", "endswith", "format", "join", "tojson"})


def _spend_strings(left: Any, right: Any) -> None:
    """Count a comparison of two strings (both are case-folded: read whole)."""
    if isinstance(left, str) and isinstance(right, str):
        spend(len(left) + len(right))


def _too_long(size: int, what: str) -> ExpressionError:
    return ExpressionError(
        f"{what} makes a string of over {size:,} characters (GitHub evaluates at most {MAX_TEXT:,})"
    )


def _bounded(text: str, what: str) -> str:
    """``text``, unless it is longer than any string GitHub's evaluator makes."""
    if len(text) > MAX_TEXT:
        raise _too_long(len(text), what)
    return text


def _format(template: str, args: list[str], where: str) -> str:
    """``format()``, measured as it is built: each placeholder may repeat a long argument, so a
    chain of them (through ``env``) would grow 16-fold a step without this."""
    size = len(template)

    def put(match: re.Match[str]) -> str:
        nonlocal size
        token = match.group(0)
        if token in ("{{", "}}"):
            return token[0]
        if match.group(1) is None:  # a lone brace, a {0:spec}: the runner throws
            raise ExpressionError(f"format() string is invalid (a lone {token!r}) in {where!r}")
        index = int(match.group(1))
        if index >= len(args):
            raise ExpressionError(f"format() has no argument {index} in {where!r}")
        size += len(args[index])
        if size > MAX_TEXT:
            raise _too_long(size, "format()")
        return args[index]

    return re.sub(r"\{\{|\}\}|\{(\d+)\}|[{}]", put, template)


def _join(args: list[Any]) -> str:
    """``join(items, sep)``, measured before it is built."""
    sep = to_text(args[1]) if len(args) == 2 and is_primitive(args[1]) else ","
    items = args[0] if isinstance(args[0], list) else [args[0]] if is_primitive(args[0]) else []
    texts = [to_text(i) for i in items]
    size = sum(map(len, texts)) + len(sep) * max(len(texts) - 1, 0)
    if size > MAX_TEXT:
        raise _too_long(size, "join()")
    return sep.join(texts)


class _Filtered(list):
    """The array an object filter (``labels.*``) makes: a property of it is that property of
    each item (``labels.*.name`` is every label's name), as in GitHub's expressions."""


def _index(value: Any, key: Any) -> Any:
    if isinstance(value, Unknown):
        return value.child(key)
    if isinstance(key, Unknown):
        return key
    if isinstance(value, _Filtered):
        spend(len(value) * KEY_COST)
        picked = (_index(item, key) for item in value)
        return _Filtered(v for v in picked if v is not None)
    if key == "*":
        if isinstance(value, Mapping):
            return _Filtered(value.values())
        return _Filtered(value) if isinstance(value, list) else _Filtered()
    if isinstance(value, Mapping):
        if isinstance(key, str):
            spend(len(value) * KEY_COST)
            for k, v in value.items():  # contexts are case-insensitive
                if k.casefold() == key.casefold():
                    return v
            if isinstance(value, Partial):
                return value.missing(key)
        return None
    if isinstance(value, list) and isinstance(key, int | float) and not isinstance(key, bool):
        if not math.isfinite(key):
            return None  # NaN or infinity names no item (the runner: null)
        index = int(key)
        return value[index] if 0 <= index < len(value) else None
    return None


def evaluate(
    text: str,
    contexts: Mapping[str, Any],
    status: Status,
    functions: Functions = frozenset(),
) -> Any:
    """Evaluate one expression (without the ``${{ }}``).

    Raises ExpressionError for one this evaluator cannot (or GitHub would not) evaluate: a
    value of a shape no rule here foresaw (a TypeError, an OverflowError) is one too, so a
    plan leaves it to the run instead of ending in an internal error."""
    try:
        return _Parser(text, contexts, status, functions).parse()
    except RecursionError:  # MAX_DEPTH keeps it shallow; this, when the caller is deep already
        raise ExpressionError(f"an expression nested deeper than {MAX_DEPTH} levels") from None
    except ExpressionError:
        raise
    except (ArithmeticError, TypeError, ValueError) as exc:
        raise ExpressionError(f"{type(exc).__name__} evaluating {text[:80]!r}") from None


def interpolate(
    text: str,
    contexts: Mapping[str, Any],
    status: Status,
    functions: Functions = frozenset(),
) -> str | Unknown:
    """Replace every ``${{ expr }}`` in a string, as the runner does before running a step.

    An :class:`Unknown` when any part is known only at run time."""
    unknown: list[Unknown] = []
    size = len(text)
    spend(size)

    def put(match: Span) -> str:
        nonlocal size
        value = evaluate(match.group(1), contexts, status, functions)
        found, walked = walk(value) if isinstance(value, dict | list | Unknown) else (None, 0)
        spend(walked)
        if found is not None:
            unknown.append(value if isinstance(value, Unknown) else found)
            return ""
        size += len(shown := to_text(value))
        spend(len(shown))
        if size > MAX_TEXT:
            raise _too_long(size, "the text with its ${{ }} put in")
        return shown

    whole = EMBEDDED.sub(put, text)
    return unknown[0] if unknown else whole


def condition_expression(text: str | bool | None) -> str:
    """The expression an ``if:`` evaluates: ``${{ }}`` optional, and ``success() && (...)``
    unless it names a status function itself."""
    if text is None:
        return "success()"
    if isinstance(text, bool):
        return "success() && true" if text else "success() && false"
    if isinstance(text, int | float):
        text = to_text(text)
    expr = str(text)
    expr = _template(expr) if OPEN in expr else _blank(expr.strip(NET_WHITE))
    names = {tok[1].lower() for tok in tokenize(expr) if tok[0] == "name"}
    if not names & set(STATUS_FUNCTIONS):
        expr = f"success() && ({expr})"
    return expr


def _template(text: str) -> str:
    """An ``if:`` holding ``${{``, as GitHub's TemplateReader makes it (``ParseScalar``; the
    workflow converter then reads the result as the condition): one ``${{ }}`` that is all of it
    is its expression, or the text of a ``'...'`` literal it holds (``${{ 'false' }}`` is the
    condition ``false``); with any text around, untrimmed (``|`` adds a newline), it is
    ``format()`` of the text and each expression: a string, true when not empty, so
    ``${{ false }} && false`` holds after success. ExpressionError for a ``${{`` not closed."""
    found = list(spans(text))
    if len(found) == 1 and found[0].start == 0 and found[0].end == len(text):
        inner = found[0].group(1)
        literal = _LITERAL.fullmatch(inner.strip(NET_WHITE))
        return _blank(literal.group(1).replace("''", "'")) if literal else inner
    pieces: list[str] = []
    args: list[str] = []
    start = 0
    for span in found:
        pieces += (_format_text(text[start : span.start]), f"{{{len(args)}}}")
        args.append(f", {span.group(1)}")
        start = span.end
    return f"format('{''.join(pieces)}{_format_text(text[start:])}'{''.join(args)})"


def _blank(condition: str) -> str:
    """A condition GitHub reads as ``success()`` when it is blank (``if: ''``)."""
    return condition if condition.strip(NET_WHITE) else "success()"


def _format_text(text: str) -> str:
    """``text`` inside a format() string: quotes doubled, braces escaped, as GitHub does."""
    return text.replace("'", "''").replace("{", "{{").replace("}", "}}")


def condition(
    text: str | bool | None,
    contexts: Mapping[str, Any],
    status: Status,
    functions: Functions = frozenset(),
) -> bool | Unknown:
    """Whether an ``if:`` holds; an :class:`Unknown` when that is known only at run time."""
    value = evaluate(condition_expression(text), contexts, status, functions)
    truth = truth_of(value)
    return value if truth is None else truth
