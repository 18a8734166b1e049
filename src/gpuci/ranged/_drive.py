"""The driver loop: a source's chunks into a sink, advancing one
:class:`~gpuci.ranged._plan.Segment`.

retry-fetch's segments and its single connection, and the cache's blob parts (copied through
a worker's two buffers, or spliced by the kernel) all run it. A source is any iterable of
chunks (an HTTP body, a store's range); the sink writes and hashes them in order and moves
``seg.written``, where a retry resumes. The loop never delivers past ``seg.end``, which a
planner may lower meanwhile (work stealing).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from gpuci.ranged._plan import Segment


class Sink(Protocol):
    """Where a segment's bytes go, in order from where it was opened."""

    def write(self, chunk: Any) -> None: ...  # bytes or a memoryview of them

    def close(self) -> None: ...  # flush what arrived (a cut connection keeps it); re-raise


def pump(
    seg: Segment,
    chunks: Iterable[Any],
    sink: Sink,
    *,
    lock: contextlib.AbstractContextManager[Any] | None = None,
    stop: Callable[[], bool] | None = None,
    on_bytes: Callable[[int], None] | None = None,
    check: Callable[[], None] | None = None,
) -> None:
    """Deliver ``chunks`` into ``sink`` until ``seg.end``, the source's end or ``stop()``.

    Args:
        seg: advanced (``pos``) under ``lock`` as each chunk is taken, so a planner that moves
            ``end`` meanwhile sees a consistent segment.
        chunks: the source; leaving the loop early leaves the rest unread (the caller closes
            the connection).
        sink: closed in every case, so the bytes received before a failure are kept.
        lock: shared with the planner (retry-fetch); None for a segment no one else touches.
        stop: the run's stop flag, read as each chunk arrives (one read after it was set is
            dropped unwritten: an abort's shut connection may return anything) and after.
        on_bytes: progress and the controller, told of every byte delivered.
        check: run after each chunk that did not end the segment (a deadline); may raise.
    """
    guard = lock if lock is not None else contextlib.nullcontext()
    try:
        for chunk in chunks:
            if stop is not None and stop():
                break  # read after the run stopped (an abort woke it): not the source's bytes
            with guard:
                take = min(len(chunk), seg.end - seg.pos)
                seg.pos += take
                finished = seg.pos >= seg.end
            if take:
                sink.write(chunk if take == len(chunk) else chunk[:take])
                if on_bytes is not None:
                    on_bytes(take)
            if finished or (stop is not None and stop()):
                break
            if check is not None:
                check()
    finally:
        sink.close()
