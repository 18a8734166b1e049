"""A cancelled CI job, as ``pods up`` must hear it: SIGINT or SIGTERM becomes one exception, once.

GitHub cancels a step with SIGINT, then SIGTERM about 7.5 s later, then SIGKILL; GitLab sends
SIGTERM. Whatever ``up`` was doing when the first signal came (creating the pod, polling it,
registering its runner), :class:`Cancelled` is raised there, and ``up`` ends what it made.
While that cleanup runs (:meth:`Guard.hold`), a later signal is noted, never raised: the
cleanup is bounded (:data:`CLEANUP_DEADLINE_S`) and finishes; SIGKILL stays the backstop,
with the pod's TTL and ``pods reap`` behind it. A :class:`Cancelled` that Python swallowed
(the signal came while a finalizer ran) is raised again (:mod:`gpuci.lost_signals`).

``Cancelled`` is a ``SystemExit`` whose code is what a shell reports for the signal (130 for
SIGINT, 143 for SIGTERM), so the process ends with it after the cleanup has said its one line.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from gpuci.lost_signals import redelivered

__all__ = ["CLEANUP_DEADLINE_S", "Cancelled", "Guard", "guarded"]

#: The whole cleanup after a cancel: inside GitHub's 7.5 s between SIGINT and SIGTERM. The pod
#: is terminated first; the ledger writes run beside it and are waited for only within this
#: (a store that does not answer never holds the terminate: up_cleanup).
CLEANUP_DEADLINE_S = 6.0
#: One request of the cleanup (find, terminate, unregister): short, one quick retry, so finding
#: and terminating the pod take at most about 6.4 s, the part of the grace that matters most.
CLEANUP_REQUEST_S = 1.5
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Cancelled(SystemExit):
    """The job was cancelled by ``signum``; the exit status is 128 + signum."""

    def __init__(self, signum: int) -> None:
        super().__init__(128 + signum)
        self.signum = signum

    @property
    def signame(self) -> str:
        try:
            return signal.Signals(self.signum).name
        except ValueError:
            return f"signal {self.signum}"


class Guard:
    """Turns the first SIGINT/SIGTERM into :class:`Cancelled`; holds later ones."""

    def __init__(self) -> None:
        self.signum: int | None = None  # the first signal received
        self.later: list[int] = []  # signals received after it, or during a hold
        self._holding = 0
        self._raised: Cancelled | None = None  # the one raised, until Python swallows it
        self._lost = False  # it was swallowed: the signal, sent again, raises it again

    def deliver(self, signum: int, frame: FrameType | None = None) -> None:
        """The signal handler: raise once, outside a hold; otherwise note it and return."""
        if self._lost and not self._holding:
            self._lost = False  # the first signal, delivered again (:meth:`lost`)
            self._raised = Cancelled(self.signum or signum)
            raise self._raised
        if self.signum is not None or self._holding:
            if self.signum is None:
                self.signum = signum
            elif not self._lost:
                self.later.append(signum)
            return
        self.signum = signum
        self._raised = Cancelled(signum)
        raise self._raised

    def lost(self, exc: BaseException) -> int | None:
        """``exc`` was swallowed by a finalizer: if it is the cancel raised, its signal (sent
        again, so :meth:`deliver` raises it again); None when it is not this guard's."""
        if exc is not self._raised or self.signum is None:
            return None
        self._raised, self._lost = None, True
        return self.signum

    @contextmanager
    def hold(self) -> Iterator[None]:
        """Cleanup runs here: a signal is noted, and raised (as Cancelled) only after it."""
        self._holding += 1
        try:
            yield
        finally:
            self._holding -= 1

    def cancelled(self) -> Cancelled | None:
        """The cancel to raise once cleanup is over, if a signal came."""
        return None if self.signum is None else Cancelled(self.signum)


@contextmanager
def guarded(guard: Guard) -> Iterator[Guard]:
    """Install ``guard`` for SIGINT and SIGTERM (main thread only), restoring what was there;
    a cancel swallowed by a finalizer meanwhile is raised again."""
    if threading.current_thread() is not threading.main_thread():
        yield guard
        return
    previous = {sig: signal.signal(sig, guard.deliver) for sig in SIGNALS}
    try:
        with redelivered(guard.lost):
            yield guard
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
