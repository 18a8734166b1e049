"""A small evaluator for the GitHub Actions expressions our action.yml files use.

Why not a library: none on PyPI evaluates ``${{ }}`` the way the runner does, and the subset we
need is small. Supported: literals (``'text'`` with ``''`` escapes, numbers, ``true``, ``false``,
``null``), context lookups (``inputs.x``, ``steps.id.outputs.y``, ``env.X``, ``a['b']``),
``!``, ``==``, ``!=``, ``<``, ``<=``, ``>``, ``>=``, ``&&``, ``||`` (which return an operand,
as in GitHub), parentheses, the status functions and ``contains``/``startsWith``/``endsWith``.
Anything else raises :class:`ExpressionError`, so a test never silently evaluates what the
harness does not understand. Comparison follows the runner: strings compare case-insensitively;
mixed types are coerced to numbers.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

TOKEN = re.compile(
    r"\s*(?:"
    r"(?P<str>'(?:[^']|'')*')"
    r"|(?P<num>-?(?:0x[0-9a-fA-F]+|\d+(?:\.\d+)?(?:[eE][+-]?\d+)?))"
    r"|(?P<op>==|!=|<=|>=|&&|\|\||[!<>().\[\],])"
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_-]*)"
    r")"
)
STATUS_FUNCTIONS = ("success", "failure", "always", "cancelled")
EMBEDDED = re.compile(r"\$\{\{(.*?)\}\}", re.DOTALL)


class ExpressionError(ValueError):
    """An expression the harness cannot (or GitHub would not) evaluate."""


def tokenize(text: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        match = TOKEN.match(text, pos)
        if not match or match.end() == pos:
            raise ExpressionError(f"cannot parse expression at {text[pos:]!r}")
        kind = match.lastgroup or ""
        tokens.append((kind, match.group(kind)))
        pos = match.end()
    return tokens


def to_number(value: Any) -> float:
    if value is None:
        return 0.0
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        if text == "":
            return 0.0
        try:
            return float(int(text, 16)) if text.lower().startswith("0x") else float(text)
        except ValueError:
            return math.nan
    return math.nan


def truthy(value: Any) -> bool:
    if value is None or value is False or value == "":
        return False
    if isinstance(value, int | float) and not isinstance(value, bool):
        return not (value == 0 or math.isnan(value))
    return True


def equal(left: Any, right: Any) -> bool:
    if isinstance(left, str) and isinstance(right, str):
        return left.casefold() == right.casefold()
    if type(left) is type(right) and not isinstance(left, int | float | bool | type(None)):
        return left is right  # objects and arrays compare by identity
    if left is None and right is None:
        return True
    return to_number(left) == to_number(right)


def to_text(value: Any) -> str:
    """How the runner renders a value inside a string."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, dict | list):
        return json.dumps(value, indent=2)
    return str(value)


class _Parser:
    def __init__(
        self, text: str, contexts: Mapping[str, Any], status: Callable[[str], bool]
    ) -> None:
        self.tokens = tokenize(text)
        self.pos = 0
        self.contexts = contexts
        self.status = status
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

    def parse(self) -> Any:
        value = self.or_()
        if self.pos != len(self.tokens):
            raise ExpressionError(f"unexpected {self.peek()!r} in {self.text!r}")
        return value

    def or_(self) -> Any:
        value = self.and_()
        while self.peek() == "||":
            self.take()
            right = self.and_()
            value = value if truthy(value) else right
        return value

    def and_(self) -> Any:
        value = self.equality()
        while self.peek() == "&&":
            self.take()
            right = self.equality()
            value = right if truthy(value) else value
        return value

    def equality(self) -> Any:
        value = self.comparison()
        while self.peek() in ("==", "!="):
            op = self.take()[1]
            right = self.comparison()
            value = equal(value, right) if op == "==" else not equal(value, right)
        return value

    def comparison(self) -> Any:
        value = self.unary()
        while self.peek() in ("<", "<=", ">", ">="):
            op = self.take()[1]
            right = self.unary()
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
            return not truthy(self.unary())
        return self.postfix()

    def postfix(self) -> Any:
        value = self.primary()
        while self.peek() in (".", "["):
            if self.take()[1] == ".":
                kind, name = self.take()
                if kind != "name":
                    raise ExpressionError(f"expected a property name in {self.text!r}")
                key: Any = name
            else:
                key = self.or_()
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
            value = self.or_()
            self.take(")")
            return value
        if kind != "name":
            raise ExpressionError(f"unexpected {text!r} in {self.text!r}")
        if text in ("true", "false"):
            return text == "true"
        if text == "null":
            return None
        if self.peek() == "(":
            return self.call(text)
        if text not in self.contexts:
            raise ExpressionError(f"unknown context {text!r} in {self.text!r}")
        return self.contexts[text]

    def call(self, name: str) -> Any:
        self.take("(")
        args: list[Any] = []
        while self.peek() != ")":
            args.append(self.or_())
            if self.peek() == ",":
                self.take()
        self.take(")")
        low = name.lower()
        if low in STATUS_FUNCTIONS and not args:
            return self.status(low)
        if low in ("contains", "startswith", "endswith") and len(args) == 2:
            hay, needle = args
            if low == "contains" and isinstance(hay, list):
                return any(equal(item, needle) for item in hay)
            h, n = to_text(hay).casefold(), to_text(needle).casefold()
            if low == "contains":
                return n in h
            return h.startswith(n) if low == "startswith" else h.endswith(n)
        raise ExpressionError(f"function {name}() is not supported by the harness")


def _index(value: Any, key: Any) -> Any:
    if isinstance(value, Mapping):
        if isinstance(key, str):
            for k, v in value.items():  # contexts are case-insensitive
                if k.casefold() == key.casefold():
                    return v
        return None
    if isinstance(value, list) and isinstance(key, int | float) and not isinstance(key, bool):
        index = int(key)
        return value[index] if 0 <= index < len(value) else None
    return None


def evaluate(text: str, contexts: Mapping[str, Any], status: Callable[[str], bool]) -> Any:
    """Evaluate one expression (without the ``${{ }}``)."""
    return _Parser(text, contexts, status).parse()


def interpolate(text: str, contexts: Mapping[str, Any], status: Callable[[str], bool]) -> str:
    """Replace every ``${{ expr }}`` in a string, as the runner does before running a step."""
    return EMBEDDED.sub(lambda m: to_text(evaluate(m.group(1), contexts, status)), text)


def condition(text: str | bool | None, contexts: Mapping[str, Any], status) -> bool:
    """An ``if:``: a bare expression, implicitly ``success() && (...)`` unless it names a
    status function itself."""
    if text is None:
        return status("success")
    if isinstance(text, bool):
        return text and status("success")
    expr = text.strip()
    whole = EMBEDDED.fullmatch(expr)
    if whole:
        expr = whole.group(1)
    elif "${{" in expr:
        raise ExpressionError(f"if: mixes text and expressions: {text!r}")
    names = {tok[1].lower() for tok in tokenize(expr) if tok[0] == "name"}
    if not names & set(STATUS_FUNCTIONS):
        expr = f"success() && ({expr})"
    return truthy(evaluate(expr, contexts, status))
