"""The typed inputs of ``retry-fetch``: one frozen dataclass, parsed once at the edge.

Field names are the inputs' names in snake_case and their types follow the specs in
:mod:`gpuci.commands.retry_fetch` (``tests/test_typed.py`` keeps them in step); defaults match
the specs'. ``max_bytes`` is ``None`` when the user wrote ``none`` (no limit).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuci.errors import InputError
from gpuci.fetch.policy import DEFAULT_MAX_BYTES, FetchPolicy

__all__ = ["FetchInputs"]

# Longest times a socket or a sleep accepts without overflowing (a week, a year): a
# "99999999999999w" is a typo to report, not a number to hand to the OS.
_TIME_LIMITS = {"timeout": 7 * 86400.0, "max_wait": 7 * 86400.0, "deadline": 366 * 86400.0}


@dataclass(frozen=True)
class FetchInputs:
    """What ``retry-fetch`` is given."""

    url: list[str] = field(default_factory=list)
    dest: str = ""
    sha256: str = ""
    mirrors: list[str] = field(default_factory=list)
    headers: list[str] = field(default_factory=list)
    attempts: int = 5
    timeout: float = 60.0
    deadline: float = 1800.0
    max_wait: float = 60.0
    parallel: int = 4
    connections: int = 16
    max_bytes: int | None = DEFAULT_MAX_BYTES

    def policy(self) -> FetchPolicy:
        """The retry policy these inputs ask for; an absurd duration is bad input (exit 2)."""
        for name, limit in _TIME_LIMITS.items():
            seconds = getattr(self, name)
            if seconds > limit:
                flag = name.replace("_", "-")
                raise InputError(
                    f"input '{flag}' is {seconds:g}s, longer than the {limit:g}s allowed",
                    hint=f"set {flag} to a sensible duration such as 60s, 30m or 2h",
                )
        return FetchPolicy(
            attempts=self.attempts,
            timeout=self.timeout,
            deadline=self.deadline,
            max_wait=self.max_wait,
            initial_wait=min(1.0, self.max_wait),
            max_bytes=self.max_bytes,
            connections=self.connections,
        )
