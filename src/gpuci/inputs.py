"""Action inputs: one spec per input, read from a CLI flag, then ``INPUT_<NAME>``, then a default.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuci.errors import InputError
from gpuci.redact import excerpt

_TRUE = {"true", "yes", "1", "on", "y"}
_FALSE = {"false", "no", "0", "off", "n"}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*$", re.IGNORECASE)
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
    match = _DURATION.match(raw)
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
    return tuple(int(p) for p in text.split("."))


def parse_str(raw: str) -> str:
    return raw.strip()


def resolve_path(raw: str) -> Path:
    """A ``path`` input line: ``~`` expanded, relative to the working directory."""
    return Path(os.path.abspath(os.path.expanduser(raw.strip())))


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
    "regex": lambda raw: re.compile(raw.strip()),
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
                f"input '{self.name}' ({source}) is {value}, below the minimum {self.minimum:g}",
                hint=f"set {self.name} to at least {self.minimum:g}",
            )
        return value


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
