"""One file's download state, shared by the one-connection path and the segmented one.

:mod:`gpuci.fetch.download` drives attempts over it and hands it to :mod:`gpuci.fetch.segments`
when a response allows several connections; both read and update the same counters, so neither
needs the other's module to know its shape.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

import httpx

from gpuci.fetch.partial import Partial
from gpuci.fetch.policy import FetchPolicy

__all__ = ["DownloadJob", "ProgressLike"]


class ProgressLike(Protocol):
    """What ``fetch_file`` reports into: :class:`gpuci.progress.Progress` fits."""

    total: int | None

    def advance(self, nbytes: int) -> None: ...


class DownloadJob:
    """One file's state across attempts and sources: where it goes, how hard to try, what came.

    ``attempts`` counts HTTP requests, ``resumed_bytes`` the bytes kept from earlier attempts,
    ``one_connection`` is set once a server mishandled a segment's Range (never segment again),
    ``peak_connections`` the most connections used at once.
    """

    def __init__(
        self,
        client: httpx.Client,
        dest: Path,
        policy: FetchPolicy,
        headers: Mapping[str, str],
        progress: ProgressLike | None,
        partial: Partial,
    ) -> None:
        self.client = client
        self.dest = dest
        self.policy = policy
        self.headers = dict(headers)
        self.progress = progress
        self.partial = partial
        self.started = time.monotonic()
        self.attempts = 0
        self.resumed_bytes = 0
        self.one_connection = False
        self.peak_connections = 1

    def remaining(self) -> float:
        """Seconds left of the policy's deadline for the whole download."""
        return self.policy.deadline - (time.monotonic() - self.started)
