"""Read a step's log as the GitHub runner does, to see which workflow commands it would run.

The runner (actions/runner, ``ActionCommand.TryParseV2`` and ``TryParse``) splits the output
into lines at CR, LF or CRLF; a line is a command when, after leading whitespace, it starts
with ``::name ...::``, or when it holds ``##[name ...]`` ANYWHERE (the older syntax, still
parsed). Injected text proves itself by starting a command's data with a marker: gpu-ci's own
annotations always start with gpu-ci's words, never with the attacker's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_LINES = re.compile(r"\r\n|\r|\n")
_V2 = re.compile(r"^::([^\s:]+)(?: ([^:]*))?::(.*)$")
_V1 = re.compile(r"##\[([^\s\]]+)[^\]]*\](.*)$")


@dataclass(frozen=True)
class Command:
    name: str
    data: str
    line: str
    old_syntax: bool = False  # ``##[name]``, found anywhere in a line


def _unescape(data: str) -> str:
    return data.replace("%0D", "\r").replace("%0A", "\n").replace("%25", "%")


def commands(text: str) -> list[Command]:
    """Every workflow command the runner would run in ``text``."""
    found = []
    for line in _LINES.split(text):
        stripped = line.lstrip()
        v2 = _V2.match(stripped)
        if v2:
            found.append(Command(v2.group(1), _unescape(v2.group(3)), line))
            continue
        v1 = _V1.search(line)
        if v1:
            found.append(Command(v1.group(1), v1.group(2), line, old_syntax=True))
    return found


def injected(text: str, marker: str = "INJ") -> list[Command]:
    """Commands the attacker's value started: data beginning with the marker, any ``##[``
    command (gpu-ci never writes one), or ``stop-commands`` (which would hide ours)."""
    return [
        c
        for c in commands(text)
        if c.data.lstrip().startswith(marker)
        or c.name == "stop-commands"
        or c.old_syntax
        or marker in c.name
    ]


# One value trying every way to start a command: LF, CR, CRLF, leading spaces, the old syntax.
PAYLOAD = (
    "innocent\n::error::INJ-lf\r::add-mask::INJ-cr\r\n   ::warning::INJ-crlf"
    "\n::stop-commands::INJ-stop\n text ##[error]INJ-v1 \x1b[31m"
)
