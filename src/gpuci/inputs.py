"""Action inputs: one spec per input, read from a CLI flag, then ``INPUT_<NAME>``, then a default.

Each command declares its inputs once, as the fields of one frozen dataclass made by
:func:`options`, each field given by :func:`inp` (help, kind, default as users type it, choices,
secret...). The field's name in kebab-case is the input's, its Python default is the parsed
default, and :func:`specs_of` reads the specs back for the CLI flags, ``INPUT_*``, every
``action.yml`` and the docs tables; :func:`build` fills the dataclass from resolved values.

The runner names inputs ``INPUT_<NAME>`` upper-cased with hyphens kept (``INPUT_MIN-MEMORY-GB``);
composite actions don't export them, so our ``action.yml`` files pass each through ``env:`` and
we also accept the underscore form (``INPUT_MIN_MEMORY_GB``) that shells can set. An empty
value means "not given" because that is what the runner passes for an unset input.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from typing_extensions import dataclass_transform
else:  # the runtime needs no typing_extensions: the decorator only informs type checkers

    def dataclass_transform(**_: object) -> Callable[[Any], Any]:
        return lambda decorated: decorated


from gpuci.errors import InputError
from gpuci.redact import excerpt

_TRUE = {"true", "yes", "1", "on", "y"}
_FALSE = {"false", "no", "0", "off", "n"}
# Text, compiled by ``re`` on first use: a compile at import is a share of every start-up.
_DURATION = r"(?i)^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*$"
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtp]?)(i?)(b?)\s*$", re.IGNORECASE)
_NO_LIMIT = {"none", "unlimited"}
_DURATION_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_bool(raw: str) -> bool:
    low = raw.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise ValueError("expected true or false")


def parse_int(raw: str) -> int:
    try:
        return int(raw.strip(), 10)
    except ValueError:
        raise ValueError("expected a whole number") from None


def parse_float(raw: str) -> float:
    try:
        value = float(raw.strip())
    except ValueError:
        raise ValueError("expected a number") from None
    if not math.isfinite(value):
        raise ValueError("expected a finite number")
    return value


def parse_list(raw: str) -> list[str]:
    """Multi-line (one per line) or comma-separated; blank lines and ``#`` comments dropped."""
    lines = [line.strip() for line in raw.splitlines()]
    items: list[str] = []
    for line in lines:
        if not line or line.startswith("#"):
            continue
        items.extend(part.strip() for part in line.split(",") if part.strip())
    return items


def parse_lines(raw: str) -> list[str]:
    """One item per line (paths may contain commas)."""
    return [ln.strip() for ln in raw.splitlines() if ln.strip() and not ln.strip().startswith("#")]


MAX_DURATION_S = 100 * 365 * 86400  # a century: past any TTL or period, inside every clock


def parse_duration(raw: str) -> float:
    """``90``, ``90s``, ``45m``, ``2h``, ``14d`` -> seconds (at most :data:`MAX_DURATION_S`).

    The cap keeps "now + duration" a date every clock and ``datetime`` can hold: an expiry
    of ``99999999999999w`` would overflow ``time_t`` far from here, as an internal error.
    """
    match = re.match(_DURATION, raw)
    if not match:
        raise ValueError("expected a duration such as 30s, 45m, 2h or 14d")
    seconds = float(match.group(1)) * _DURATION_UNITS[(match.group(2) or "s").lower()]
    if not seconds <= MAX_DURATION_S:  # also catches inf and nan from a 400-digit number
        raise ValueError("longer than 100 years; expected a duration such as 45m or 14d")
    return seconds


def parse_size(raw: str) -> int | None:
    """``500MB``, ``10GiB``, ``1.5G``, ``123`` (bytes) -> bytes; ``none`` -> None (no limit).

    ``KB``/``MB``/``GB`` are powers of 1000, ``KiB``/``MiB``/``GiB`` (and a bare ``K``/``M``/``G``,
    as in ``du`` and Docker) powers of 1024.
    """
    if raw.strip().lower() in _NO_LIMIT:
        return None
    match = _SIZE.match(raw)
    if not match:
        raise ValueError("expected a size such as 500MB, 10GiB or 1.5G, or none")
    number, prefix, binary, suffix_b = match.groups()
    if binary and not prefix:
        raise ValueError("expected a size such as 500MB, 10GiB or 1.5G, or none")
    power = "kmgtp".find(prefix.lower()) + 1 if prefix else 0
    base = 1000 if prefix and suffix_b and not binary else 1024
    value = float(number) * base**power
    if not math.isfinite(value) or value >= 2**63:
        raise ValueError("that size is larger than any disk")
    return int(value)


def parse_version(raw: str) -> tuple[int, ...]:
    """``12.4`` / ``8.0`` / ``535.104.05`` -> a comparable tuple."""
    text = raw.strip()
    if not re.fullmatch(r"\d+(\.\d+)*", text):
        raise ValueError("expected a version such as 8.0 or 12.4")
    try:
        return tuple(int(p) for p in text.split("."))
    except ValueError:  # a part past Python's 4,300-digit limit
        raise ValueError("expected a version such as 8.0 or 12.4") from None


def parse_str(raw: str) -> str:
    return raw.strip()


def resolve_path(raw: str) -> Path:
    """A ``path`` input line: ``~`` expanded, relative to the working directory."""
    return Path(os.path.abspath(os.path.expanduser(raw.strip())))


#: The longest pattern a ``regex`` input takes: a GPU or model name needs tens of characters;
#: a workflow's 5 Mi-character value took seconds to compile on every step of a dry run.
MAX_REGEX = 1000


def parse_regex(raw: str) -> re.Pattern[str]:
    text = raw.strip()
    if len(text) > MAX_REGEX:
        raise ValueError(f"a pattern of {len(text):,} characters; at most {MAX_REGEX:,}")
    try:
        return re.compile(text)
    except RecursionError:  # 500 nested groups fit in MAX_REGEX and go past Python's stack
        raise ValueError("its groups nest too deep") from None
    except OverflowError as exc:  # a{4294967296}
        raise ValueError(str(exc)) from None


PARSERS: dict[str, Callable[[str], Any]] = {
    "str": parse_str,
    "bool": parse_bool,
    "int": parse_int,
    "float": parse_float,
    "list": parse_list,
    "lines": parse_lines,
    "duration": parse_duration,
    "size": parse_size,
    "version": parse_version,
    "regex": parse_regex,
}


@dataclass(frozen=True)
class Input:
    """One action input, which is also a CLI flag of the same name."""

    name: str
    help: str
    kind: str = "str"
    default: str | None = None  # raw text, parsed like user input, so docs show what users type
    required: bool = False
    secret: bool = False
    choices: tuple[str, ...] | None = None
    minimum: float | None = None
    # The action.yml default when it must differ from the command's: an expression only the
    # runner can evaluate, e.g. ``${{ github.token }}`` (composite actions get no GITHUB_TOKEN).
    action_default: str | None = None
    maximum: float | None = None

    @property
    def flag(self) -> str:
        return f"--{self.name}"

    @property
    def dest(self) -> str:
        return self.name.replace("-", "_")

    def env_names(self) -> tuple[str, str]:
        upper = self.name.upper()
        return f"INPUT_{upper}", f"INPUT_{upper.replace('-', '_')}"

    def parse(self, raw: str, source: str) -> Any:
        shown = excerpt(raw.strip(), 200)  # quoted in errors: redacted, cut, on one line
        if self.choices is not None and raw.strip() not in self.choices:
            raise InputError(
                f"input '{self.name}' ({source}) is '{shown}', not one of: "
                + ", ".join(self.choices),
                hint=f"set {self.name} to one of {', '.join(self.choices)}",
            )
        try:
            value = PARSERS[self.kind](raw)
        except (ValueError, re.error) as exc:
            raise InputError(
                f"input '{self.name}' ({source}) is '{shown}': {exc}",
                hint=f"fix the value of {self.name}",
            ) from None
        if self.minimum is not None and isinstance(value, int | float) and value < self.minimum:
            raise InputError(
                f"input '{self.name}' ({source}) is {excerpt(str(value), 40)}, below the minimum "
                f"{self.minimum:g}",
                hint=f"set {self.name} to at least {self.minimum:g}",
            )
        if self.maximum is not None and isinstance(value, int | float) and value > self.maximum:
            raise InputError(
                f"input '{self.name}' ({source}) is {_number(value)}, above the maximum "
                f"{self.maximum:g}",
                hint=f"set {self.name} to at most {self.maximum:g}",
            )
        return value


def _number(value: float) -> str:
    """A number for a message: ``:g`` overflows on an int past a float (a 400-digit input)."""
    return f"{value:g}" if isinstance(value, float) else excerpt(str(value), 40)


def resolve(
    specs: tuple[Input, ...],
    flags: Mapping[str, str | None],
    environ: Mapping[str, str] | None = None,
    on_secret: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Flags beat ``INPUT_*`` env, env beats defaults. Keys are input names (hyphenated).

    ``on_secret`` is called with every secret value the moment it is read, so it is masked
    before anything could print it.
    """
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for spec in specs:
        raw: str | None = flags.get(spec.name)
        source = f"flag {spec.flag}"
        if raw is None or raw == "":
            raw, source = None, ""
            for env_name in spec.env_names():
                if env.get(env_name, "") != "":
                    raw, source = env[env_name], f"env {env_name}"
                    break
        if raw is None:
            if spec.default is None:
                if spec.required:
                    raise InputError(
                        f"input '{spec.name}' is required",
                        hint=f"pass {spec.flag} VALUE or set INPUT_{spec.name.upper()}",
                    )
                values[spec.name] = None
                continue
            raw, source = spec.default, "default"
        if spec.secret and on_secret is not None:
            on_secret(raw)
        values[spec.name] = spec.parse(raw, source)
    return values


T = TypeVar("T")

# The Python type each kind parses to (a field's annotation, less ``| None``), and the kind an
# annotation implies when :func:`inp` names none (``lines``, ``duration`` and ``size`` must).
KIND_TYPES = {
    "str": "str",
    "bool": "bool",
    "int": "int",
    "float": "float",
    "list": "list[str]",
    "lines": "list[str]",
    "duration": "float",
    "size": "int",
    "version": "tuple[int, ...]",
    "regex": "re.Pattern[str]",
}
_IMPLIED = {"str", "bool", "int", "float", "list", "version", "regex"}
_KIND_OF = {KIND_TYPES[kind]: kind for kind in _IMPLIED}
# A field's value when its input has no default and its type admits no None.
_EMPTY: dict[str, object] = {"str": "", "bool": False, "int": 0, "float": 0.0, "duration": 0.0}


def inp(
    help: str,
    *,
    kind: str = "",
    default: str | None = None,
    required: bool = False,
    secret: bool = False,
    choices: tuple[str, ...] | None = None,
    minimum: float | None = None,
    maximum: float | None = None,
    action_default: str | None = None,
) -> Any:
    """One input, as the default of a field in an :func:`options` class (which names it).

    Args:
        help: the text of ``--help``, the action's ``description`` and the docs tables.
        kind: how the text is parsed (:data:`PARSERS`); implied by the field's type when empty.
        default: the default as users type it (``"6h"``, ``"false"``); the field's Python
            default is this, parsed.
        required: refused when given nowhere.
        secret: masked the moment it is read.
        choices: the only values accepted.
        minimum: the least number accepted.
        maximum: the most accepted, where more would be absurd or switch a check off.
        action_default: the ``action.yml`` default, when only the runner can evaluate it.

    Returns:
        A nameless :class:`Input`; typed ``Any`` so the field's annotation is its type.
    """
    return Input(
        "", help, kind, default, required, secret, choices, minimum, action_default, maximum
    )


@dataclass_transform(frozen_default=True)
def options(cls: type[T]) -> type[T]:
    """Make ``cls`` a frozen dataclass whose fields are its inputs, each declared by :func:`inp`.

    Args:
        cls: a class whose every annotated attribute is set to :func:`inp`'s result.

    Returns:
        The dataclass; each field's ``metadata["input"]`` holds its named :class:`Input`.

    Raises:
        TypeError: an attribute is not an :func:`inp`, or its kind and type disagree.
    """
    own = cls.__dict__.get("__annotations__", {})  # noqa: RUF063 - inspect is slow to import
    for attr, annotation in own.items():
        spec = cls.__dict__.get(attr)
        if not isinstance(spec, Input):
            raise TypeError(f"{cls.__name__}.{attr} is not declared with inp()")
        parts = [part.strip() for part in str(annotation).split("|")]
        nullable = "None" in parts
        base = " | ".join(part for part in parts if part != "None")
        spec = replace(spec, name=attr.replace("_", "-"), kind=spec.kind or _KIND_OF.get(base, ""))
        if KIND_TYPES.get(spec.kind) != base:
            raise TypeError(f"{cls.__name__}.{attr} is {annotation}, its input kind {spec.kind}")
        setattr(cls, attr, _field(spec, nullable))
    return dataclass(frozen=True)(cls)


def _field(spec: Input, nullable: bool) -> Any:
    if spec.default is not None:
        value = spec.parse(spec.default, "default")
    else:
        value = None if nullable else _EMPTY.get(spec.kind, [])
    if isinstance(value, list):
        return field(default_factory=value.copy, metadata={"input": spec})
    return field(default=value, metadata={"input": spec})


def specs_of(cls: type) -> tuple[Input, ...]:
    """The inputs of an :func:`options` class, in field order.

    Args:
        cls: a class made by :func:`options`.

    Returns:
        One :class:`Input` per field.
    """
    return tuple(f.metadata["input"] for f in fields(cls))


def build(cls: type[T], values: Mapping[str, Any]) -> T:
    """The :func:`options` class ``cls`` filled from :func:`resolve`'s values.

    Args:
        cls: the command's options class.
        values: input name (hyphenated) to parsed value; None where nothing was given.

    Returns:
        The instance. An input given nowhere keeps the field's default; a None that a field
        admits is kept (a size of ``none``: no limit).
    """
    kwargs: dict[str, Any] = {}
    for f in fields(cls):  # type: ignore[arg-type]
        value = values.get(f.metadata["input"].name)
        if value is not None or "None" in str(f.type):
            kwargs[f.name] = value
    return cls(**kwargs)


# What a Python argument must be for each kind :func:`checked` holds to the CLI's rules.
_PYTHON_TYPES: dict[str, tuple[type, str]] = {
    "str": (str, "text"),
    "bool": (bool, "true or false"),
    "int": (int, "a number"),
    "float": (float, "a number"),
    "duration": (float, "a number"),
}


def checked(given: T) -> T:
    """``given`` held to its inputs' rules as the CLI holds their text: the Python API's check.

    Args:
        given: an :func:`options` instance built from Python values.

    Returns:
        ``given`` unchanged.

    Raises:
        InputError: a value of another type than its field's, outside its input's choices,
            below its minimum, above its maximum or not a finite number; the message names the
            input as the CLI does.
    """
    for f in fields(given):  # type: ignore[arg-type]
        spec: Input = f.metadata["input"]
        value = getattr(given, f.name)
        want, said = _PYTHON_TYPES.get(spec.kind, (object, KIND_TYPES[spec.kind]))
        if value is None and "None" not in str(f.type):  # read as its type further on
            raise InputError(f"{spec.name} is None, not {said}", hint=f"pass {said} as {spec.name}")
        _no_nul(spec, value)
        if value is None or spec.kind not in _PYTHON_TYPES:
            continue
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not (number if want in (int, float) else isinstance(value, want)):
            raise InputError(
                f"{spec.name} is {excerpt(repr(value), 200)}, not {said}",
                hint=f"pass {said} as {spec.name}",
            )
        if spec.kind != "bool":
            spec.parse(_text_of(spec.name, value), "argument")
    return given


def _text_of(name: str, value: object) -> str:
    """A Python value as the CLI's text; an int past Python's 4,300-digit string limit has
    none (``str`` raises ValueError), so it is refused here as input, not left to escape."""
    try:
        return str(value)
    except ValueError:
        raise InputError(
            f"{name} is a number of more than 4,300 digits", hint=f"fix {name}"
        ) from None


def _no_nul(spec: Input, value: object) -> None:
    """A list input is a list of strings, and no text holds a NUL: no flag or ``INPUT_*`` can
    carry one, and a path or URL with one ends in ValueError far off (an internal error)."""
    items = value if isinstance(value, list) else [value]
    if spec.kind in ("list", "lines") and not (
        isinstance(value, list) and all(isinstance(item, str) for item in value)
    ):
        raise InputError(
            f"{spec.name} is not a list of strings", hint=f"pass {spec.name} as a list"
        )
    if any(isinstance(item, str) and "\0" in item for item in items):
        raise InputError(f"{spec.name} holds a NUL character", hint=f"fix {spec.name}")
