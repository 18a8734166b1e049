"""Progress for long transfers: bytes, throughput and ETA.

A live bar redrawn in place on a terminal; plain periodic lines in CI logs, where carriage
returns turn into noise. Thread-safe, because transfers run in parallel workers that all
report into one meter.
"""

from __future__ import annotations

import threading
import time
from typing import TextIO

from gpuci.units import human_bytes


def format_eta(seconds: float | None) -> str:
    if seconds is None or seconds != seconds or seconds < 0:
        return "--"
    seconds = int(seconds + 0.5)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


class Progress:
    """One meter for one transfer (or one batch of transfers)."""

    def __init__(
        self,
        label: str,
        total: int | None,
        stream: TextIO,
        *,
        live: bool = False,
        interval: float = 5.0,
        clock=time.monotonic,
    ) -> None:
        self.label = label
        self.total = total
        self.done = 0
        self._stream = stream
        self._live = live
        self._interval = 0.1 if live else interval
        self._clock = clock
        self._start = clock()
        self._last_emit = self._start
        self._lock = threading.Lock()
        self._closed = False

    def advance(self, nbytes: int) -> None:
        with self._lock:
            self.done += nbytes
            now = self._clock()
            if now - self._last_emit >= self._interval:
                self._last_emit = now
                self._emit(now)

    def rate(self, now: float | None = None) -> float:
        elapsed = (now or self._clock()) - self._start
        return self.done / elapsed if elapsed > 0 else 0.0

    def line(self, now: float | None = None) -> str:
        now = now or self._clock()
        rate = self.rate(now)
        if self.total:
            pct = min(100.0, 100.0 * self.done / self.total)
            eta = (self.total - self.done) / rate if rate > 0 else None
            return (
                f"{self.label}: {human_bytes(self.done)} / {human_bytes(self.total)} "
                f"({pct:.0f}%), {human_bytes(rate)}/s, ETA {format_eta(eta)}"
            )
        return f"{self.label}: {human_bytes(self.done)}, {human_bytes(rate)}/s"

    def _emit(self, now: float) -> None:
        text = self.line(now)
        if self._live:
            width = 24
            frac = min(1.0, self.done / self.total) if self.total else 0.0
            bar = "#" * int(width * frac) + "-" * (width - int(width * frac))
            self._stream.write(f"\r[{bar}] {text}\033[K")
        else:
            self._stream.write(text + "\n")
        self._stream.flush()

    def close(self, failed: bool = False, note: str | None = None) -> float:
        """Print the final line once; returns elapsed seconds.

        ``failed`` says so on that line: "x: 0 B, 0 B/s in 4.9s" reads like a finished download;
        ``note`` replaces the figures (e.g. "already present") when nothing was transferred.
        """
        with self._lock:
            now = self._clock()
            if not self._closed:
                self._closed = True
                if self._live:
                    self._stream.write("\r\033[K")
                elapsed = now - self._start
                if failed:
                    text = f"{self.label}: failed after {human_bytes(self.done)} in {elapsed:.1f}s"
                elif note:
                    text = f"{self.label}: {note}"
                else:
                    text = f"{self.line(now)} in {elapsed:.1f}s"
                    text = text.replace(", ETA --", "").replace(", ETA 0s", "")
                self._stream.write(text + "\n")
                self._stream.flush()
            return now - self._start
