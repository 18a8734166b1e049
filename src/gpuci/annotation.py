"""One annotation of a step's result: an error, warning or notice.

Apart from :mod:`gpuci.runtime`, so a command that raises none (a clean warm restore, whose
start-up is its whole cost) never builds the class: a dataclass's methods are compiled anew in
every process (docs/benchmarks.md, "Figures behind the code").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["Annotation", "Level"]

Level = Literal["error", "warning", "notice"]


@dataclass(frozen=True)
class Annotation:
    """One annotation of a step's result: an error, warning or notice, with its title."""

    level: Level
    message: str
    title: str = ""
