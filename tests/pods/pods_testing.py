"""Plain helpers of the pods tests, imported by name (never ``from conftest import``: that
picks whichever folder's conftest pytest loaded last)."""

from __future__ import annotations

from gpuci.commands import pods as spec

SUBS = {c.name: c for c in spec.COMMAND.subcommands}


class FakeClock:
    def __init__(self, start: float = 1_795_000_000.0) -> None:
        self.t = start
        self.sleeps: list[float] = []

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.t += max(0.0, seconds)

    def advance(self, seconds: float) -> None:
        self.t += seconds
