"""How many connections to keep busy: a hill climb on aggregate throughput.

Why: against real S3 each connection's rate is capped and the first byte takes tens of
milliseconds, so speed comes from how many connections are busy at once; on a loopback store
the CPU is the limit and more connections only add kernel work. No fixed count fits both (the
figures: docs/benchmarks.md, "Figures behind the code"), and nobody tunes a hidden variable.
So transfers start with a few connections and let :class:`Concurrency` decide:

- it starts from what the transfer knows: never more connections than requests
  (:meth:`Concurrency.expect`), and once the first responses have answered
  (:meth:`Concurrency.first_byte`), a link whose first byte takes ``far_latency_s`` or more
  is far away (real S3: tens of ms) and latency-bound, so the limit jumps straight to as many
  connections as there are requests, up to the ceiling, instead of doubling from 8 (each
  doubling costs a window; on a short restore the climb was most of the transfer);
- every window (``window_s`` of transfer with every allowed slot busy) it compares the bytes
  per second with the rate of the last limit that paid (the median of its windows); the first
  half window after a step up is not counted (new connections wait for their first byte);
- while a step up raised throughput by at least ``gain`` (25%), it doubles the limit (slow
  start), never above the ceiling (the memory cap: each connection owns its buffers);
- a step that does not pay for ``patience`` windows in a row (three: another process's burst
  of CPU on a busy runner slows a window or two, and must not read as "more connections do
  not pay") goes back to the best limit seen and settles there;
- settled below the ceiling, it probes again after ``reprobe_s`` (doubling after each probe
  that did not pay): it re-measures the current limit and tries one step up, so a verdict taken
  during someone else's burst is not kept for the rest of the transfer;
- throttling (503 SlowDown, 429) or an error halves the limit and settles for good: the server
  asked for less, and growing again would only earn more refusals. As in TCP, one burst of
  refusals halves once: a request that began before the last cut does not cut again (32
  connections answered 503 at once leave 16, not 1).

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
DEFAULT_PATIENCE = 3
DEFAULT_REPROBE_S = 2.0  # first re-probe after settling below the ceiling; doubles when unpaid
# A first byte this late is a remote store; loopback and in-cluster stores answer sooner, even
# on a loaded machine (the latencies behind this line: docs/benchmarks.md).
DEFAULT_FAR_LATENCY_S = 0.015
LATENCY_SAMPLES = 4  # first responses timed before judging the distance (their fastest)


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
        reprobe_s: float | None = DEFAULT_REPROBE_S,
        far_latency_s: float | None = DEFAULT_FAR_LATENCY_S,
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
        self._settled_at = self.limit
        self.expected_bytes = 0
        self._warming = False  # just stepped up: the first half window is not counted
        self._level: list[float] = []  # rates of the windows judged at the current limit
        self._epoch = 0  # bumped by each cut; a slot remembers the epoch it began in
        self._local = threading.local()
        self.reprobe_s = reprobe_s  # None: settle for good (tests, fixed counts)
        self.far_latency_s = far_latency_s  # None: never jump on latency
        self.reprobes = 0  # probes started after settling (for reports and tests)
        self.far: bool | None = None  # None until LATENCY_SAMPLES first bytes were timed
        self._requests: int | None = None  # the transfer's request count, when it said
        self._latencies: list[float] = []
        self._reprobe_at: float | None = None
        self._reprobe_wait = reprobe_s or 0.0

    @classmethod
    def fixed(cls, count: int) -> Concurrency:
        """A constant limit (the user chose one); never grows, shrinks only on throttling."""
        control = cls(start=count, ceiling=count, reprobe_s=None, far_latency_s=None)
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
                if self._reprobe_at is not None and self._clock() >= self._reprobe_at:
                    self._reprobe()
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

    def expect(self, total_bytes: int, requests: int) -> None:
        """What the transfer knows before it starts: its bytes and its request count.

        Never more connections than requests (each would idle); the count also bounds the jump
        a far link earns (:meth:`first_byte`). ``total_bytes`` is kept for reports.
        """
        with self._cond:
            self.expected_bytes = max(0, total_bytes)
            self._requests = max(1, requests)
            if not self.user_chosen and self.limit > self._requests:
                self.limit = max(self.floor, self._requests)
                self._best_limit = self.limit
                if not self._best_rate:  # nothing judged yet: the start was never in use
                    self.peak = self.limit

    def first_byte(self, seconds: float) -> None:
        """One request's wait for its response (headers: the first byte of the answer).

        After LATENCY_SAMPLES of them: a far link (the fastest at least ``far_latency_s``) jumps to
        as many connections as there are requests, up to the ceiling; a near one keeps
        climbing from where it is, window by window.
        """
        with self._cond:
            if self.far is not None or self.far_latency_s is None:
                return
            self._latencies.append(seconds)
            if len(self._latencies) < LATENCY_SAMPLES:
                return
            # The fastest of them: the first requests go out together and a single-threaded
            # server answers them one after another, so the others include its queue.
            self.far = min(self._latencies) >= self.far_latency_s
            if not self.far or self.throttles or self.user_chosen:
                return
            target = min(self.ceiling, self._requests or self.ceiling)
            if target <= self.limit:
                return
            self.limit = target
            self.peak = max(self.peak, target)
            # The climb goes on from here (when below the ceiling), judged afresh.
            self._best_rate, self._best_limit, self._level = 0.0, target, []
            self.settled = target >= self.ceiling
            self._warming = True
            self._window_start = None
            self._cond.notify_all()

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
            self._reprobe_at = None  # for good: the server asked for less
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
            # The bar for the next step is this level's median, not its luckiest window.
            self._best_rate = _median(self._level)
            self._best_limit, self._level = self.limit, []
            if self._best_rate and self.reprobes and self.limit > self._settled_at:
                self._reprobe_wait = self.reprobe_s or 0.0  # a probe paid: probe soon again
            if self.limit >= self.ceiling:
                self._settle()
            else:
                self.limit = min(self.ceiling, self.limit * 2)
                self.peak = max(self.peak, self.limit)
                self._warming = True
                self._cond.notify_all()
            return
        if len(self._level) >= self.patience:
            self.limit = max(self.floor, self._best_limit)
            self._settle()

    def _settle(self) -> None:
        self.settled = True
        self._settled_at = self.limit
        self._level = []
        if self.reprobe_s is None or self.throttles or self.limit >= self.ceiling:
            self._reprobe_at = None
            return
        self._reprobe_at = self._clock() + self._reprobe_wait
        self._reprobe_wait *= 2  # reset when a probe pays

    def _reprobe(self) -> None:
        """Settled below the ceiling a while ago: measure this limit again, then try one step."""
        self._reprobe_at = None
        self.reprobes += 1
        self.settled = False
        self._best_rate, self._best_limit, self._level = 0.0, self.limit, []
        self._warming = False
        self._window_start = None


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]
