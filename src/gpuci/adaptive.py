"""How many connections to keep busy: a hill climb on aggregate throughput.

Why: against real S3 each connection gets roughly 50-100 MB/s and the first byte takes tens of
milliseconds, so speed comes from how many connections are busy at once; on a loopback store
the CPU is the limit and more connections only add kernel work. No fixed count fits both (a
remote-like link measured 5.5 s with 8 connections, 2.8 s with 32), and nobody tunes a hidden
variable. So transfers start with a few connections and let :class:`Concurrency` decide:

- every window (``window_s`` of transfer with every allowed slot busy) it compares the bytes
  per second with the rate of the last limit that paid (the mean of its windows); the first
  half window after a step up is not counted (new connections wait for their first byte);
- while a step up raised throughput by at least ``gain`` (25%), it doubles the limit (slow
  start), never above the ceiling (the memory cap: each connection owns its buffers);
- a step that does not pay for ``patience`` windows in a row (one slow window on a busy
  machine is noise) goes back to the best limit seen and settles there;
- throttling (503 SlowDown, 429) or an error halves the limit and settles: the server asked
  for less, and growing again would only earn more refusals. As in TCP, one burst of refusals
  halves once: a request that began before the last cut does not cut again (32 connections
  answered 503 at once leave 16, not 1).

Workers take a :meth:`Concurrency.slot` around each request; threads beyond the limit wait.
A fixed count (``GPUCI_CACHE_WORKERS``) is the same object with ``start == ceiling``. The
controller is thread-safe and takes its clock as a parameter, so tests drive it without sleeping.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

DEFAULT_START = 8  # today's fixed count: a CPU-bound loopback store never does worse
DEFAULT_CEILING = 32
DEFAULT_WINDOW_S = 0.3
DEFAULT_GAIN = 1.25  # doubling over a link-bound store gains ~2x; on a CPU-bound one, noise
DEFAULT_PATIENCE = 2


class Concurrency:
    """The number of requests allowed in flight, adapted to measured throughput."""

    def __init__(
        self,
        start: int = DEFAULT_START,
        ceiling: int = DEFAULT_CEILING,
        *,
        floor: int = 1,
        window_s: float = DEFAULT_WINDOW_S,
        gain: float = DEFAULT_GAIN,
        patience: int = DEFAULT_PATIENCE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ceiling = max(1, ceiling)
        self.floor = max(1, min(floor, self.ceiling))
        self.limit = max(self.floor, min(start, self.ceiling))
        self.peak = self.limit
        self.window_s = window_s
        self.gain = gain
        self.patience = max(1, patience)
        self.settled = self.limit >= self.ceiling
        self.throttles = 0
        self.user_chosen = False  # a count the user chose, not one this controller found
        self._clock = clock
        self._cond = threading.Condition()
        self._active = 0
        self._window_start: float | None = None
        self._window_bytes = 0
        self._best_rate = 0.0
        self._best_limit = self.limit
        self._warming = False  # just stepped up: the first half window is not counted
        self._level: list[float] = []  # rates of the windows judged at the current limit
        self._epoch = 0  # bumped by each cut; a slot remembers the epoch it began in
        self._local = threading.local()

    @classmethod
    def fixed(cls, count: int) -> Concurrency:
        """A constant limit (the user chose one); never grows, shrinks only on throttling."""
        control = cls(start=count, ceiling=count)
        control.user_chosen = True
        return control

    # ----- slots ---------------------------------------------------------------------------------
    @contextmanager
    def slot(self) -> Iterator[None]:
        """Hold one of the ``limit`` connections for the duration of one request."""
        with self._cond:
            while self._active >= self.limit:
                self._cond.wait(0.5)
            self._active += 1
            if self._active >= self.limit and self._window_start is None:
                self._open_window()
            self._local.epoch = self._epoch
        try:
            yield
        finally:
            self._local.epoch = None
            with self._cond:
                self._active -= 1
                self._cond.notify()

    @property
    def active(self) -> int:
        with self._cond:
            return self._active

    # ----- measurements --------------------------------------------------------------------------
    def record(self, nbytes: int) -> None:
        """Count bytes moved; closes a window and adapts the limit when one is full."""
        with self._cond:
            if self.settled:
                return
            if self._window_start is None:
                if self._active >= self.limit:
                    self._open_window()
                return
            self._window_bytes += nbytes
            elapsed = self._clock() - self._window_start
            if self._warming:  # half a window for the new connections' first bytes
                if elapsed >= self.window_s / 2:
                    self._warming = False
                    self._open_window()
                return
            if elapsed < self.window_s:
                return
            if self._active < self.limit:  # not enough work to fill the slots: no verdict
                self._window_start = None
                return
            self._judge(self._window_bytes / elapsed)

    def throttled(self) -> None:
        """The server pushed back (503 SlowDown, 429) or a request failed: halve and settle.

        Called from inside a slot that began before the last cut, it only counts: that cut
        already answered the burst this request belonged to.
        """
        with self._cond:
            self.throttles += 1
            began = getattr(self._local, "epoch", None)
            if began is not None and began != self._epoch:
                return
            self._epoch += 1
            if began is not None:
                self._local.epoch = self._epoch  # this request's next refusal is news again
            self.limit = max(self.floor, self.limit // 2)
            self.settled = True
            self._window_start = None
            self._cond.notify_all()

    # ----- internals -----------------------------------------------------------------------------
    def _open_window(self) -> None:
        self._window_start = self._clock()
        self._window_bytes = 0

    def _judge(self, rate: float) -> None:
        """One window's rate at the current limit: step up, wait, or settle."""
        self._window_start = None
        self._level.append(rate)
        if rate >= self._best_rate * self.gain:
            # The bar for the next step is this level's mean, not its luckiest window.
            self._best_rate = sum(self._level) / len(self._level)
            self._best_limit, self._level = self.limit, []
            if self.limit >= self.ceiling:
                self.settled = True
            else:
                self.limit = min(self.ceiling, self.limit * 2)
                self.peak = max(self.peak, self.limit)
                self._warming = True
                self._cond.notify_all()
            return
        if len(self._level) >= self.patience:
            self.limit = max(self.floor, self._best_limit)
            self.settled = True
