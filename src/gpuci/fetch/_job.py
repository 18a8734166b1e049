"""One file's download state across attempts and sources.

:mod:`gpuci.fetch._download` drives attempts over it and hands each response to the engine
(:mod:`gpuci.fetch._segments`, one connection or several); both read and update the same
counters, so neither needs the other's module to know its shape.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Protocol

import httpx

from gpuci import httpclients, settings
from gpuci.errors import FetchError
from gpuci.fetch._partial import Partial
from gpuci.fetch._policy import FetchPolicy, TooSlow
from gpuci.fetch._urls import shown_url
from gpuci.ranged._pace import body_due
from gpuci.retry import Interrupted
from gpuci.units import human_bytes

__all__ = ["BodyWatch", "DownloadJob", "Meter", "ProgressLike"]


class ProgressLike(Protocol):
    """What ``fetch_file`` reports into: :class:`gpuci.progress.Progress` fits."""

    total: int | None

    def advance(self, nbytes: int) -> None: ...


class Meter:
    """The progress a user sees, kept truthful across restarts and overlapping ranges.

    ``done`` is the bytes fetched in this run that the partial still holds; ``total`` is those
    plus what is still missing, so it is never above the file's size. A restart (the file
    changed, a server ignored ``Range``) takes back the bytes it threw away instead of counting
    them again, and an advance never takes ``done`` past ``total``.
    """

    def __init__(self, progress: ProgressLike | None) -> None:
        self.progress = progress
        self.counted = 0
        self.cap: int | None = None
        self._lock = threading.Lock()

    def advance(self, nbytes: int) -> None:
        if self.progress is None:
            return
        with self._lock:
            if self.cap is not None:
                nbytes = min(nbytes, self.cap - self.counted)
            if nbytes:
                self.counted += nbytes
                self.progress.advance(nbytes)

    def sync(self, held: int, total: int | None) -> None:
        """Say what this run holds (``held``) out of what it must fetch (``total``)."""
        if self.progress is None:
            return
        with self._lock:
            if total is not None:
                held = min(held, total)
            self.progress.total = total
            if held != self.counted:
                self.progress.advance(held - self.counted)
                self.counted = held
            self.cap = total


class DownloadJob:
    """One file's state across attempts and sources: where it goes, how hard to try, what came.

    ``attempts`` counts tries: the first request, plus one each time a failure was answered by
    a request actually sent again (the whole file from where it stopped, or one segment's rest;
    a segment's retry is counted when it goes out, so one cut short by another failure is
    none). Requests a segmented download plans (one per range) are not attempts: one cut
    connection and its retry read 2, however many segments ran. ``resumed_bytes`` counts the
    bytes retries went on from instead of fetching again (:attr:`Partial.resumed`: each byte
    once, never above the file, forgotten when thrown away), ``one_connection`` is set once a
    server mishandled a segment's Range (never segment again), ``peak_connections`` the most
    connections used at once, ``first_byte_s`` how long the latest whole-file request waited
    for its headers (connect included).
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
        self.meter = Meter(progress)
        self.partial = partial
        self.started = time.monotonic()
        self.attempts = 0
        self.one_connection = False
        self.peak_connections = 1
        self.first_byte_s: float | None = None  # the last response's headers took this long
        self.base = partial.held()  # bytes an earlier run left: not this run's progress
        # Set when the client is aborted (Ctrl-C with several files): waits end, nothing placed.
        self.cancel = httpclients.stopped(client)

    def check_cancel(self) -> None:
        """Raise :class:`Interrupted` once the downloads were stopped: a worker that gets here
        after the interrupt (its retry's wait cut short, its last bytes in) places nothing."""
        if self.cancel is not None and self.cancel.is_set():
            raise Interrupted("the downloads were stopped")

    @property
    def resumed_bytes(self) -> int:
        """Bytes kept from earlier attempts (and runs) instead of fetched again, each once."""
        return self.partial.resumed

    def remaining(self) -> float:
        """Seconds left of the policy's deadline for the whole download."""
        return self.policy.deadline - (time.monotonic() - self.started)

    def deadline_check(self, url: str) -> Callable[[], None]:
        """The driver's check after each chunk: past the deadline, one line saying how much
        of the file is whole. ``url`` may be a redirect's target (a presigned query the
        command never masked): shown without query or userinfo."""
        deadline = self.started + self.policy.deadline

        def check() -> None:
            if time.monotonic() > deadline:
                raise FetchError(
                    f"{shown_url(url)}: deadline of {self.policy.deadline:g}s passed with "
                    f"{self.partial.cursor.position} bytes whole after {self.attempts} attempt(s)",
                    hint="raise the deadline input, or add a closer mirror",
                )

        return check

    def sync_progress(self) -> None:
        """Re-align the meter with the partial after it changed under it (a reset, a drop)."""
        part = self.partial
        held = part.held()
        self.base = min(self.base, held)
        total = None if part.total is None else part.total - self.base
        self.meter.sync(held - self.base, total)


class BodyWatch:
    """One response body's limits, checked after each chunk (the driver's ``check``): the
    job's deadline, then the slowest rate accepted (:func:`gpuci.ranged._pace.body_due`: the
    S3 store's rule), counted on the bytes that came from the moment its headers did.

    Why: each read has its own timeout, so a server sending a byte just inside it would hold
    the attempt until the job's deadline; under the rate the attempt fails instead
    (:class:`TooSlow`, retried as any cut connection, resuming from what was written). A
    checksum file's body keeps the same rate (:func:`gpuci.fetch._client.read_capped`)."""

    def __init__(
        self, policy: FetchPolicy, deadline_check: Callable[[], None] | None = None
    ) -> None:
        self.policy = policy
        self.deadline_check = deadline_check  # None: the request's Deadline bounds it already
        self.start = time.monotonic()
        self.got = 0

    def counted(self, chunks: Iterable[bytes]) -> Iterator[bytes]:
        """``chunks`` as they come, each one counted."""
        for chunk in chunks:
            self.got += len(chunk)
            yield chunk

    def check(self) -> None:
        if self.deadline_check is not None:
            self.deadline_check()
        policy = self.policy
        now = time.monotonic()
        if now > body_due(self.start, policy.timeout, self.got, policy.min_rate):
            raise TooSlow(
                f"the body fell under min-rate, {human_bytes(policy.min_rate)}/s after the "
                f"first {policy.timeout:g}s: {self.got} bytes in {now - self.start:.1f}s",
                hint="the server trickles; add a faster mirror, or lower min-rate (the input, "
                f"or {settings.FETCH_MIN_RATE.name} in bytes a second; 0 turns the check off)",
            )
