"""One call on a daemon thread, waited for with a deadline: work that talks to a store (a
ledger write, a last-use record) goes on beside what the caller does next, and the caller
waits for it only as long as it has. A thread still running at the process's exit ends with
it; an exception it raised is raised where it is waited for, so a bug stays visible.

Importing this module imports :mod:`threading`: a caller that may need no thread at all (a
restore from a file store) imports it only where it starts one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar, cast

__all__ = ["Background"]

T = TypeVar("T")


class Background(Generic[T]):
    """``work()`` on a daemon thread named ``name``, started now."""

    def __init__(self, work: Callable[[], T], name: str) -> None:
        self._work = work
        self._value: T | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._value = self._work()
        except BaseException as exc:  # handed to whoever waits, who raises it
            self._error = exc

    def wait(self, deadline: float | None = None) -> bool:
        """Wait until the call is over or ``deadline`` (``time.monotonic()``; None: no limit
        but the call's own).

        Returns:
            True once the call is over; False at ``deadline`` while it still runs.

        Raises:
            BaseException: whatever the call raised.
        """
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        self._thread.join(left)
        if self._thread.is_alive():
            return False
        if self._error is not None:
            raise self._error
        return True

    def result(self) -> T:
        """What the call returned, once it is over (its own limits bound the wait).

        Raises:
            BaseException: whatever the call raised.
        """
        self.wait()
        return cast(T, self._value)  # set: the call is over
