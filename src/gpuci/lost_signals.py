"""A signal's exception that Python swallowed is raised again, outside what swallowed it.

A Python signal handler runs at the main thread's next bytecode, wherever that is, and that
can be inside a finalizer or a weakref callback: a ``WeakSet`` dropping a dead entry
(:mod:`gpuci.httpclients`' connection gates, :mod:`threading`'s own records) runs Python code
whenever the garbage goes. Python ignores an exception raised there ("Exception ignored in
..."), so a Ctrl-C, or the cancel that ``pods up`` raises on SIGINT/SIGTERM, was lost: ``up``
went on polling a pod it should have ended (seen in CI; reproduced in
tests/test_lost_signals.py).

:func:`redelivered` installs a :data:`sys.unraisablehook` that, for such an exception, has
its signal sent to the main thread again :data:`AGAIN_AFTER_S` later, from a helper thread:
sent from the hook itself, the handler would run inside the hook, where Python swallows it
once more. Once the main thread has left the finalizer, the handler raises where it can be
heard (in another finalizer, it is sent again, until one lands; one that lands while the hook
is still starting its helper, on a busy machine, is sent again later, the delay doubling).
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["AGAIN_AFTER_S", "interrupt_signum", "redelivered"]

#: How long after the swallowed exception its signal comes again: the main thread is long out
#: of the finalizer and the hook by then.
AGAIN_AFTER_S = 0.01


def interrupt_signum(exc: BaseException) -> int | None:
    """SIGINT for the KeyboardInterrupt of Python's own SIGINT handler; None for the rest."""
    ours = signal.getsignal(signal.SIGINT) is signal.default_int_handler
    return signal.SIGINT if ours and isinstance(exc, KeyboardInterrupt) else None


@contextmanager
def redelivered(signum_of: Callable[[BaseException], int | None]) -> Iterator[None]:
    """While inside, an exception that Python swallowed and ``signum_of`` names a signal for
    is delivered again as that signal; everything else goes to the hook that was there.

    Args:
        signum_of: the signal that raised this exception, or None when it is not one of the
            caller's (it may note that its exception was lost, to raise it again).
    """
    previous = sys.unraisablehook

    def hook(info: Any) -> None:
        exc = info.exc_value
        signum = signum_of(exc) if exc is not None else None
        if signum is None:
            previous(info)
            return
        delay = AGAIN_AFTER_S
        while True:
            try:
                _send_later(signum, delay)
                return
            except BaseException as again:
                # it came back while this hook still waited for its helper to start (a busy
                # machine), and raised here, where Python would swallow it once more
                if signum_of(again) != signum:
                    raise
                delay = min(2 * delay, 1.0)

    sys.unraisablehook = hook
    try:
        yield
    finally:
        sys.unraisablehook = previous


def _send_later(signum: int, delay: float = AGAIN_AFTER_S) -> None:
    """Send ``signum`` to the main thread from a helper thread, ``delay`` seconds from now."""
    import threading

    main = threading.main_thread().ident
    if main is None:
        return
    again = threading.Timer(delay, signal.pthread_kill, (main, signum))
    again.daemon = True
    again.name = "gpuci-signal-again"
    again.start()
