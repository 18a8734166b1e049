"""The typed inputs of ``retry-fetch``: one frozen dataclass, parsed once at the edge.

Each field declares one input (:func:`gpuci.inputs.inp`). ``max_bytes`` is ``None`` when the
user wrote ``none`` (no limit). ``min_rate`` stays text until :meth:`FetchInputs.policy`: ``""``
(not given, so ``GPUCI_FETCH_MIN_RATE`` decides) must differ from ``none`` (the check off), and a
size input reads both as ``None``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from gpuci import settings
from gpuci.errors import InputError
from gpuci.inputs import inp, options, parse_size
from gpuci.redact import excerpt

if TYPE_CHECKING:  # the policy's module loads httpx: only a run needs it, never --help
    from gpuci.fetch._policy import FetchPolicy

__all__ = ["FetchInputs"]

# Longest times a socket or a sleep accepts without overflowing (a week, a year): a
# "99999999999999w" is a typo to report, not a number to hand to the OS.
_TIME_LIMITS = {"timeout": 7 * 86400.0, "max_wait": 7 * 86400.0, "deadline": 366 * 86400.0}
# The min-rate words that turn the check off, as 0 does (the docs' "0 turns the check off").
_RATE_OFF = frozenset({"none", "off"})
_RATE_WANTED = "a rate in bytes a second such as 256KiB or 1MB, or 0, none or off (no check)"


@options
class FetchInputs:
    """What ``retry-fetch`` is given."""

    url: list[str] = inp(
        "URL(s) to fetch, one per line as 'URL [SHA256|-] [DEST]'; or @FILE naming a file of "
        "such lines.",
        kind="lines",
        required=True,
    )
    dest: str = inp(
        "Destination file (one URL) or folder (several URLs, an existing folder, or a path "
        "ending in /); default: the current folder."
    )
    sha256: str = inp(
        "Expected sha256 (hex), or the URL of a .sha256 / SHA256SUMS file (matched by name)."
    )
    mirrors: list[str] = inp(
        "Fallback URLs tried in order after the main URL fails, one per line; one ending in "
        "'/' is a base the file name is appended to.",
        kind="lines",
    )
    headers: list[str] = inp(
        "Extra request headers, 'Name: value' one per line (values masked).",
        kind="lines",
        secret=True,
    )
    attempts: int = inp(
        "Attempts per URL before moving to the next mirror.", default="5", minimum=1
    )
    timeout: float = inp(
        "Per-attempt timeout for connecting and for each read.", kind="duration", default="60s"
    )
    deadline: float = inp(
        "Total time allowed for the whole download.", kind="duration", default="30m"
    )
    max_wait: float = inp(
        "Longest backoff between attempts (Retry-After is capped by it too).",
        kind="duration",
        default="60s",
    )
    min_rate: str = inp(
        "Slowest body accepted, in bytes a second (e.g. 256KiB, 1MB): once a response's first "
        "timeout has passed, one that delivered less than this rate fails its attempt, which "
        "is retried and resumes. 0, none or off turn the check off; default "
        "GPUCI_FETCH_MIN_RATE, else 256KiB."
    )
    parallel: int = inp("How many files to download at once.", default="4", minimum=1)
    connections: int = inp(
        "Most ranged connections for one file. A large file from a server that names it with "
        "a strong ETag and honours Range is fetched in segments over several connections at "
        "once, as many as keep raising the throughput; 1 turns this off.",
        default="16",
        minimum=1,
    )
    max_bytes: int | None = inp(
        "Largest file accepted, e.g. 500MB or 100GiB, or 'none': a larger Content-Length is "
        "refused before writing and a longer body is cut off and deleted. The default fits "
        "any single Hugging Face Hub file (50 GB cap) yet stops an endless body long before "
        "it fills a runner's disk.",
        kind="size",
        default="64GiB",
        minimum=1,
    )

    def policy(self, environ: Mapping[str, str] | None = None) -> FetchPolicy:
        """The retry policy these inputs ask for; an absurd duration is bad input (exit 2).
        ``environ`` (the process's when None) holds ``GPUCI_FETCH_MIN_RATE``, read when the
        min-rate input is not given."""
        for name, limit in _TIME_LIMITS.items():
            seconds = getattr(self, name)
            if seconds > limit:
                flag = name.replace("_", "-")
                raise InputError(
                    f"input '{flag}' is {seconds:g}s, longer than the {limit:g}s allowed",
                    hint=f"set {flag} to a sensible duration such as 60s, 30m or 2h",
                )
        from gpuci.fetch._policy import FetchPolicy

        return FetchPolicy(
            attempts=self.attempts,
            timeout=self.timeout,
            deadline=self.deadline,
            max_wait=self.max_wait,
            initial_wait=min(1.0, self.max_wait),
            max_bytes=self.max_bytes,
            connections=self.connections,
            min_rate=self._min_rate(environ),
        )

    def _min_rate(self, environ: Mapping[str, str] | None) -> float:
        """The min-rate input, else ``GPUCI_FETCH_MIN_RATE`` (bytes a second; 0: off), both
        read by one rule."""
        if self.min_rate.strip():
            return _rate(self.min_rate, "input 'min-rate'", "min-rate")
        variable = settings.FETCH_MIN_RATE
        return _rate(variable.value(environ), variable.name, f"{variable.name} (or unset it)")


def _rate(text: str, where: str, what: str) -> float:
    """``text`` as bytes a second, 0 for the words that turn the check off (and a zero), never
    for a rate under 1 B/s, which a byte count would silently round to "off".

    Raises:
        InputError: not a rate, in one line naming ``where`` and the values accepted.
    """
    if text.strip().lower() in _RATE_OFF:
        return 0.0
    shown = excerpt(text.strip(), 40)
    try:
        rate = parse_size(text) or 0
    except ValueError:
        raise InputError(
            f"{where} is '{shown}', not {_RATE_WANTED}", hint=f"set {what} to one of those"
        ) from None
    if rate == 0 and any(digit in text for digit in "123456789"):  # 0.5 B/s: not "off"
        raise InputError(
            f"{where} is '{shown}', under 1 byte a second, not {_RATE_WANTED}",
            hint=f"set {what} to one of those",
        )
    return float(rate)
