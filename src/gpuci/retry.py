"""Retries, declared once: how long to wait, when to give up, and what ``Retry-After`` means.

Every client (retry-fetch, the cache's data path and its S3 fast path, the GitHub and GitLab
REST clients, RunPod) declares one :class:`RetryPolicy`: data (attempts, backoff shape, caps),
not a loop. What is worth retrying stays with each client, as its own exception classes or a
predicate, because only the client knows what its failures mean. A server's ``Retry-After``
is read here and only here (:func:`parse_retry_after`): delta-seconds, HTTP dates and
garbage alike, so no header can crash a client, sleep NaN seconds or park a GPU job for a day.
A caller that may be stopped mid-backoff (retry-fetch's workers on Ctrl-C) passes a ``cancel``
event: its waits wait on it and end with :class:`Interrupted` once it is set.

tenacity is imported only when a controller is built (:meth:`RetryPolicy.retrying`), which
:meth:`RetryPolicy.call` does only once a first attempt has failed; ``email.utils``,
``datetime`` and ``random`` only when used. So importing this module, and a request that
succeeds at once (a warm restore's one ref GET), costs next to nothing.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, TypeVar

from gpuci import settings

if TYPE_CHECKING:
    import tenacity

__all__ = [
    "BOTOCORE_STANDARD",
    "MAX_RETRY_AFTER",
    "Interrupted",
    "RetryPolicy",
    "aws_max_attempts",
    "botocore_delay",
    "parse_retry_after",
]

#: The longest a ``Retry-After`` may make any client wait, whatever the server asks for.
MAX_RETRY_AFTER = 300.0

# RFC 9110 10.2.3: delta-seconds is 1*DIGIT. A fraction is tolerated (some servers send one);
# a sign, an exponent, "nan" or "inf" is not a number of seconds.
_DELTA = re.compile(r"[0-9]+(?:\.[0-9]+)?")
# An IMF-fixdate is 29 characters; anything far longer is not a header we will parse.
_MAX_HEADER = 64

Jitter = Literal["full", "additive", "none"]
RetryOn = type[BaseException] | tuple[type[BaseException], ...] | Callable[[BaseException], bool]
T = TypeVar("T")


class Cancel(Protocol):
    """What ends a wait once set: a :class:`threading.Event`, or what answers as one (the S3
    pool's :class:`~gpuci.cache._stores.s3.pool.StopWait`, two flags at once)."""

    def is_set(self) -> bool: ...

    def wait(self, timeout: float | None = None) -> bool: ...


class Interrupted(BaseException):
    """A retry's wait ended because its caller was stopped (Ctrl-C): no attempt follows. A
    BaseException, as KeyboardInterrupt is: no ``except Exception`` on the way holds the
    thread, so a worker ends at once instead of sleeping out its backoff."""


def parse_retry_after(
    value: str | None, now: float | None = None, cap: float = MAX_RETRY_AFTER
) -> float | None:
    """``Retry-After`` as seconds from now, at most ``cap``; None when absent or unreadable.

    Both forms of RFC 9110 are read: delta-seconds (``120``) and an HTTP date (``Wed, 21 Oct
    2015 07:28:00 GMT``, and the obsolete forms ``email.utils`` accepts). A date in the past
    means now (0.0). Anything else (``nan``, ``inf``, ``-5``, an empty or endless value) is
    ignored, so the caller falls back to its own backoff. ``now`` is epoch seconds (tests).
    """
    if value is None:
        return None
    text = value.strip()
    if not text or len(text) > _MAX_HEADER:
        return None
    seconds: float | None
    if _DELTA.fullmatch(text):
        seconds = float(text)  # finite: at most 64 digits
    else:
        seconds = _seconds_until(text, time.time() if now is None else now)
        if seconds is None:
            return None
    return min(max(0.0, seconds), max(0.0, cap))


def _seconds_until(text: str, now: float) -> float | None:
    import email.utils  # email and calendar load slowly (docs/benchmarks.md): only for a date
    from datetime import timezone

    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when is None:  # Python 3.10 returns None for some unparseable values
        return None
    if when.tzinfo is None:  # "-0000": UTC, source unknown (RFC 5322 3.3)
        when = when.replace(tzinfo=timezone.utc)
    try:
        seconds = when.timestamp() - now
    except (OverflowError, OSError, ValueError):
        return None
    return seconds if math.isfinite(seconds) else None


@dataclass(frozen=True)
class RetryPolicy:
    """How hard one client tries: the data every retry in gpu-ci is built from.

    The n-th wait (n from 1) is based on ``initial * 2**(n-1)``, capped by ``max_wait``, then
    jittered: ``full`` draws uniformly from [0, base] (AWS's "full jitter", what botocore's
    standard mode does), ``additive`` adds up to ``initial`` more (tenacity's
    ``wait_exponential_jitter``), ``none`` waits the base. A failure that carries a
    ``retry_after`` (seconds, from :func:`parse_retry_after`) waits that instead, capped by
    ``retry_after_cap``; with ``retry_after_cap=None`` the server's wish is ignored.

    Under a deadline, a wait that would end past it is never started; with ``last_try`` set, it
    shrinks instead to leave ``last_try`` seconds (what one more attempt is worth), and that
    attempt runs: a client throttled near its deadline still makes its last try, as botocore's
    own loop did. Once less than ``last_try`` is left, the controller stops.
    """

    attempts: int = 5
    initial: float = 1.0
    max_wait: float = 20.0
    jitter: Jitter = "full"
    retry_after_cap: float | None = MAX_RETRY_AFTER
    last_try: float | None = None

    def backoff(self, attempt: int, rand: Callable[[], float] | None = None) -> float:
        """The wait after failed attempt number ``attempt`` (1 for the first), no Retry-After;
        ``rand`` draws the jitter from [0, 1) (``random.random`` unless given)."""
        base = min(self.max_wait, self.initial * 2.0 ** min(max(attempt, 1) - 1, 62))
        if self.jitter == "none":
            return base
        if rand is None:
            import random

            rand = random.random
        if self.jitter == "full":
            return rand() * base
        return min(self.max_wait, base + rand() * self.initial)  # additive

    def delay(self, attempt: int, exc: BaseException | None) -> float:
        """The wait after ``exc`` ended attempt ``attempt``: its Retry-After, else backoff."""
        wish = getattr(exc, "retry_after", None)
        if self.retry_after_cap is not None and isinstance(wish, int | float) and wish == wish:
            return min(max(0.0, float(wish)), self.retry_after_cap)
        return self.backoff(attempt)

    def wait(self, retry_state: tenacity.RetryCallState) -> float:
        """A tenacity ``wait=``: :meth:`delay` for the attempt that just failed."""
        outcome = retry_state.outcome
        exc = outcome.exception() if outcome is not None and outcome.failed else None
        return self.delay(retry_state.attempt_number, exc)

    def retrying(
        self,
        retry_on: RetryOn,
        *,
        deadline: float | None = None,
        sleep: Callable[[float], None] | None = None,
        on_retry: Callable[[BaseException | None], None] | None = None,
        now: Callable[[], float] | None = None,
        cancel: Cancel | None = None,
    ) -> tenacity.Retrying:
        """A fresh tenacity controller that retries what ``retry_on`` names (exception classes
        or a predicate), ``attempts`` times at most and, with ``deadline``, never starts a wait
        that would end more than ``deadline`` seconds after the first attempt began. The last
        failure is raised as it is. ``on_retry`` hears of each failure before its wait.
        ``now`` is the clock the deadline is read on when it is not tenacity's own monotonic
        one (a caller whose ``sleep`` is a fake clock's); the deadline then counts from this
        call. ``cancel``, once set, ends a wait at once (:func:`_cancellable`) and raises
        :class:`Interrupted` instead of the next attempt."""
        import tenacity

        if isinstance(retry_on, type | tuple):
            retry: tenacity.retry_base = tenacity.retry_if_exception_type(retry_on)
        else:
            retry = tenacity.retry_if_exception(retry_on)
        stop: tenacity.stop.stop_base = tenacity.stop_after_attempt(max(1, self.attempts))
        wait: Callable[[tenacity.RetryCallState], float] = self.wait
        if deadline is not None and self.last_try is not None:
            clock = now if now is not None else time.monotonic
            end = clock() + max(0.0, deadline) - max(0.0, self.last_try)
            stop = stop | _stop_before(clock, end, shrunk=True)
            wait = _shrinking(self.wait, clock, end)
        elif deadline is not None and now is not None:
            stop = stop | _stop_before(now, now() + max(0.0, deadline))
        elif deadline is not None:
            stop = stop | tenacity.stop_before_delay(max(0.0, deadline))
        before_sleep = None
        if on_retry is not None:
            hear = on_retry

            def before_sleep(state: tenacity.RetryCallState) -> None:
                outcome = state.outcome
                hear(outcome.exception() if outcome is not None and outcome.failed else None)

        return tenacity.Retrying(
            retry=retry,
            stop=stop,
            wait=wait,
            sleep=_cancellable(sleep, cancel),
            before_sleep=before_sleep,
            reraise=True,
        )

    def call(
        self,
        fn: Callable[[], T],
        retry_on: RetryOn,
        *,
        deadline: float | None = None,
        sleep: Callable[[float], None] | None = None,
        on_retry: Callable[[BaseException | None], None] | None = None,
        now: Callable[[], float] | None = None,
        cancel: Cancel | None = None,
    ) -> T:
        """``fn()`` under this policy, as ``self.retrying(...)(fn)`` runs it, but the first
        attempt runs before tenacity is imported: a call that succeeds at once (or fails with
        what ``retry_on`` does not name) never loads it. Only after a retryable failure is the
        controller built, and it replays that failure as its own first attempt, so its waits,
        ``on_retry`` and attempt count are those of :meth:`retrying`; ``deadline`` still counts
        from the first attempt. Arguments as :meth:`retrying`; the last failure is raised.
        """
        clock = now if now is not None else time.monotonic
        started = clock()
        try:
            return fn()
        except BaseException as exc:
            if self.attempts <= 1 or not _names(retry_on, exc):
                raise
            first: list[BaseException] = [exc]
        left = None if deadline is None else deadline - (clock() - started)

        def attempt() -> T:
            if first:
                raise first.pop()
            return fn()

        controller = self.retrying(
            retry_on, deadline=left, sleep=sleep, on_retry=on_retry, now=now, cancel=cancel
        )
        return controller(attempt)


def _cancellable(
    sleep: Callable[[float], None] | None, cancel: Cancel | None
) -> Callable[[float], None]:
    """The controller's wait: ``sleep`` (``time.sleep`` when None); with ``cancel``, a wait on
    that event instead (or after ``sleep``, a fake clock's), raising :class:`Interrupted` once
    it is set, so a worker stopped mid-backoff neither sleeps it out nor tries again."""
    if cancel is None:
        return sleep if sleep is not None else time.sleep
    stopped = cancel

    def wait(seconds: float) -> None:
        if sleep is None:
            stopped.wait(seconds)
        else:
            sleep(seconds)
        if stopped.is_set():
            raise Interrupted("stopped during a retry's wait")

    return wait


def _names(retry_on: RetryOn, exc: BaseException) -> bool:
    """Whether ``retry_on`` (classes or a predicate) retries ``exc``, as tenacity decides."""
    if isinstance(retry_on, type | tuple):
        return isinstance(exc, retry_on)
    return bool(retry_on(exc))


def _stop_before(
    now: Callable[[], float], end: float, shrunk: bool = False
) -> tenacity.stop.stop_base:
    """tenacity's ``stop_before_delay``, on the caller's clock: no wait that ends at ``end``
    or later is started. ``shrunk``: the waits were cut to end by ``end`` already
    (:func:`_shrinking`), so only a clock at or past ``end`` stops."""
    import tenacity

    class StopBefore(tenacity.stop.stop_base):
        def __call__(self, retry_state: tenacity.RetryCallState) -> bool:
            if shrunk:
                return now() >= end
            return now() + retry_state.upcoming_sleep >= end

    return StopBefore()


def _shrinking(
    wait: Callable[[tenacity.RetryCallState], float], now: Callable[[], float], end: float
) -> Callable[[tenacity.RetryCallState], float]:
    """``wait``, cut to end by ``end`` (the deadline less what a last attempt is worth)."""

    def shrunk(retry_state: tenacity.RetryCallState) -> float:
        return max(0.0, min(wait(retry_state), end - now()))

    return shrunk


#: botocore's "standard" retry mode: full jitter, doubling from 1 s, at most 20 s a wait; near
#: the deadline the last wait shrinks to leave a second for one more attempt.
BOTOCORE_STANDARD = RetryPolicy(attempts=3, initial=1.0, max_wait=20.0, jitter="full", last_try=1.0)


def botocore_delay(attempt: int, rand: Callable[[], float] | None = None) -> float:
    """The wait after failed attempt ``attempt`` (1 for the first) as botocore's standard mode
    computes it: ``rand() * min(20, 2**(attempt-1))``. A drop-in for a hand-written loop."""
    return BOTOCORE_STANDARD.backoff(attempt, rand)


def aws_max_attempts(environ: Mapping[str, str], default: int = 8) -> int:
    """``AWS_MAX_ATTEMPTS`` as botocore reads it (total attempts, at least 1); ``default``
    when unset or not a whole number (gpu-ci's sturdier default than botocore's 3)."""
    raw = settings.AWS_MAX_ATTEMPTS.value(environ)
    return max(1, int(raw)) if raw.isdigit() else default
