"""A signal's exception raised inside a finalizer, where Python swallows it, is raised again
outside it: a cancelled ``pods up`` ends its pod, a Ctrl-C ends the command."""

from __future__ import annotations

import signal
import sys
import time
import weakref
from collections.abc import Callable

import pytest

from gpuci.lost_signals import interrupt_signum, redelivered
from gpuci.pods._lifecycle import cancel


class _Garbage:
    """An object whose collection runs Python code: a weakref callback, as a WeakSet's."""


def _signal_inside_a_finalizer(signum: int) -> None:
    """Drop an object whose weakref callback is running when ``signum`` arrives, so the
    handler runs (and raises) inside that callback, where Python ignores what it raises."""
    obj = _Garbage()

    def callback(_ref: object) -> None:
        signal.raise_signal(signum)
        sum(range(100))  # a few bytecodes: the handler runs here, inside the callback

    ref = weakref.ref(obj, callback)
    del obj
    assert ref() is None


def _spin() -> None:
    """Bytecodes outside any finalizer, where a signal delivered again is raised."""
    deadline = time.monotonic() + 60  # a hang guard: the signal comes 10 ms on
    while time.monotonic() < deadline:
        sum(range(100))


def test_a_cancel_swallowed_by_a_finalizer_is_raised_again_outside_it():
    guard = cancel.Guard()
    with pytest.raises(cancel.Cancelled) as raised, cancel.guarded(guard):
        _signal_inside_a_finalizer(signal.SIGINT)
        _spin()
    assert raised.value.code == 128 + signal.SIGINT
    assert guard.signum == signal.SIGINT and guard.later == []


def test_a_second_signal_after_the_cancel_landed_is_still_only_noted():
    guard = cancel.Guard()
    with cancel.guarded(guard):
        with pytest.raises(cancel.Cancelled):
            _signal_inside_a_finalizer(signal.SIGINT)
            _spin()
        signal.raise_signal(signal.SIGTERM)  # GitHub's SIGTERM during the cleanup
        sum(range(100))
    assert (guard.signum, guard.later) == (signal.SIGINT, [signal.SIGTERM])


def _ctrl_c_swallowed_then_raised_again() -> None:
    """A Ctrl-C swallowed inside a finalizer, under Python's own SIGINT handler (the CLI's):
    KeyboardInterrupt raised again outside it."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt), redelivered(interrupt_signum):
            _signal_inside_a_finalizer(signal.SIGINT)
            _spin()
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_ctrl_c_swallowed_by_a_finalizer_is_raised_again():
    _ctrl_c_swallowed_then_raised_again()


def test_what_is_not_a_signal_goes_to_the_hook_that_was_there(monkeypatch):
    heard: list[BaseException | None] = []
    hook: Callable[[object], None] = lambda info: heard.append(info.exc_value)  # noqa: E731
    monkeypatch.setattr(sys, "unraisablehook", hook)
    with redelivered(interrupt_signum):
        obj = _Garbage()

        def callback(_ref: object) -> None:
            raise ValueError("a finalizer's own bug")

        ref = weakref.ref(obj, callback)
        del obj
    assert ref() is None
    assert [type(e) for e in heard] == [ValueError]
    assert sys.unraisablehook is hook


def test_a_signal_that_comes_back_while_the_hook_still_sends_it_is_sent_again(monkeypatch):
    """On a busy machine the helper's 10 ms ran out before the hook had seen it start: the
    handler raised inside the hook, where Python swallowed the Ctrl-C once more (fresh62)."""
    from gpuci import lost_signals

    send, delays = lost_signals._send_later, []

    def landing_inside_the_hook(signum: int, delay: float = lost_signals.AGAIN_AFTER_S) -> None:
        delays.append(delay)
        if len(delays) == 1:
            raise KeyboardInterrupt  # the re-sent signal, handled before the hook returned
        send(signum, delay)

    monkeypatch.setattr(lost_signals, "_send_later", landing_inside_the_hook)
    _ctrl_c_swallowed_then_raised_again()
    assert delays == [lost_signals.AGAIN_AFTER_S, 2 * lost_signals.AGAIN_AFTER_S]
