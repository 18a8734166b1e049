"""Retrying one ranged piece: the engine's one wrapper, for retry-fetch's segments and the
cache's blob parts and packed runs, and the loop of a worker through a plan (:func:`work_through`).

A piece cut mid-way keeps what reached its sink: the segment is rewound to ``written`` (the
next request asks from there, and progress takes back what was delivered but never written)
and marked ``failed``, so the request that retries it counts as an attempt when it is sent
(:meth:`~gpuci.ranged._plan.Segment.resend`; one never sent is no attempt). Before the policy's
wait the controller hears of the failure (``throttle``), so it backs off while a server sheds
load (:func:`throttles`: a 429 or a 503).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from gpuci.ranged._plan import Plan, Segment
from gpuci.retry import RetryOn, RetryPolicy

T = TypeVar("T")

#: Statuses by which a server asks for fewer connections (S3's SlowDown is a 503).
THROTTLING = frozenset({429, 503})


def throttles(exc: BaseException | None) -> bool:
    """Whether a failure is a server shedding load (its ``status`` is 429 or 503)."""
    return getattr(exc, "status", None) in THROTTLING


def retry_segment(
    seg: Segment,
    attempt: Callable[[Segment], T],
    policy: RetryPolicy,
    retry_on: RetryOn,
    *,
    throttle: Callable[[BaseException | None], None] | None = None,
    lock: contextlib.AbstractContextManager[Any] | None = None,
    on_lost: Callable[[int], None] | None = None,
    stop: threading.Event | None = None,
    deadline: float | None = None,
) -> T:
    """Run ``attempt(seg)`` under ``policy`` until it returns (its result); raise the last
    failure.

    Args:
        seg: rewound (under ``lock``) after every failure to what reached the sink.
        attempt: one try; it asks for ``[seg.pos, seg.end)`` and delivers through the driver.
        policy: attempts and waits; ``retry_on`` names what a later attempt may cure.
        throttle: hears of each failure that will be retried, before the wait (the controller
            backs off: :func:`throttles` is the rule retry-fetch applies).
        on_lost: told of the bytes delivered but never written, which progress takes back.
        stop: the driver's stop flag, which cuts a wait short (the next attempt then ends).
        deadline: seconds from now after which no retry starts (the job's deadline).
    """
    guard = lock if lock is not None else contextlib.nullcontext()

    def once() -> T:
        try:
            return attempt(seg)
        except BaseException:
            with guard:
                lost = seg.rewind()
                seg.failed = True
            if lost and on_lost is not None:
                on_lost(lost)
            raise

    def pause(seconds: float) -> None:
        if stop is not None:
            stop.wait(seconds)

    sleep = pause if stop is not None else None
    return policy.call(once, retry_on, sleep=sleep, on_retry=throttle, deadline=deadline)


def work_through(
    plan: Plan,
    seg: Segment | None,
    attempt: Callable[[Segment], bool | None],
    retried: Callable[[Segment, Callable[[Segment], bool | None]], bool | None],
    lock: contextlib.AbstractContextManager[Any],
    stop: threading.Event,
    take: Callable[[], Segment | None] = lambda: None,
) -> bool:
    """``seg``, then each range ``take`` hands out (:meth:`Plan.take`), fetched by ``attempt``
    under ``retried`` and let go; one given back unfinished (the controller backed off) waits
    for the next worker unless the run stops. True: an attempt completed the file (the end)."""
    while seg is not None:
        fetched = completed = False
        try:
            completed, fetched = bool(retried(seg, attempt)), True
        finally:
            with lock:
                seg.owned = False
                if fetched and seg.pos < seg.end and not stop.is_set():
                    seg.rewind()
                    plan.pending.append(seg)
        if completed:
            return True
        seg = take()
    return False
