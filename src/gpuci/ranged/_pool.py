"""The engine's workers: threads over one queue, each holding one of a concurrency
controller's slots and a lane of two preallocated buffers; the first error stops everything.

Ranged downloads (the cache's blob parts in :mod:`gpuci.cache._transfer.download`, retry-fetch's
segments in :mod:`gpuci.fetch._segments`), the cache's uploads and its listings all run on it,
so one controller decides how many connections any of them keeps busy.
"""

from __future__ import annotations

import contextlib
import mmap
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from gpuci.adaptive import Concurrency

#: A lane's buffer size unless the pool is told otherwise (the cache's IO_CHUNK).
CHUNK = 4 << 20

T = TypeVar("T")
R = TypeVar("R")


class Cancelled(Exception):
    """A task saw the pool's cancel flag and stopped; not an error of its own."""


@dataclass
class Lane:
    """A worker's two buffers and its helper thread.

    The helper writes and hashes one chunk while the worker receives the next, so the socket
    keeps draining (the server never waits on our disk or our hash); a single helper per
    worker keeps each worker's chunks in order.
    """

    buffers: tuple[memoryview, memoryview]
    helper: ThreadPoolExecutor


class WorkPool:
    """Threads over one queue; tasks may enqueue more; the first error stops everything.

    Each task runs holding one of the controller's slots, so no more than ``limit`` requests
    are in flight. Threads (each with its lane's buffers) start only as the limit grows and
    while work is queued: memory follows the connections actually used, never the ceiling.
    """

    def __init__(
        self,
        workers: int | Concurrency,
        chunk: Callable[[int], int] | None = None,
        cancelled: threading.Event | None = None,
    ) -> None:
        self.concurrency = (
            workers if isinstance(workers, Concurrency) else Concurrency.fixed(workers)
        )
        self.workers = self.concurrency.ceiling  # the most threads this pool may start
        self.chunk = chunk or (lambda _index: CHUNK)  # lane buffer size per thread
        self._queue: queue.Queue[Any] = queue.Queue()
        self._lock = threading.Lock()
        self._pending = 0
        self._idle = threading.Condition(self._lock)
        self._threads: list[threading.Thread] = []
        self.error: BaseException | None = None
        self.cancelled = cancelled or threading.Event()  # a driver may share its stop flag

    def submit(self, fn: Callable[[Lane], None]) -> None:
        with self._lock:
            self._pending += 1
        self._queue.put(fn)

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """Keep :meth:`run` going while threads outside the pool may still submit work (a save
        hashes files on its own threads and submits their uploads as each hash is known)."""
        with self._lock:
            self._pending += 1
        try:
            yield
        finally:
            self._task_done()

    def fail(self, exc: BaseException) -> None:
        """Stop the pool as a failed task would: ``exc`` is raised by :meth:`run`."""
        with self._lock:
            if self.error is None and not isinstance(exc, Cancelled):
                self.error = exc
        self.cancelled.set()

    def _worker(self, chunk: int) -> None:
        # Anonymous memory: page-aligned (O_DIRECT takes it), and resident only once touched.
        memory = memoryview(mmap.mmap(-1, 2 * chunk) if chunk else bytearray())
        helper = ThreadPoolExecutor(1)
        lane = Lane((memory[:chunk], memory[chunk:]), helper)
        while True:
            fn = self._queue.get()
            if fn is None:
                lane.helper.shutdown()
                return
            try:
                if not self.cancelled.is_set():
                    with self.concurrency.slot():
                        fn(lane)
            except BaseException as exc:
                self.fail(exc)
            finally:
                self._task_done()

    def _task_done(self) -> None:
        """One task (or :meth:`hold`) less; the last one wakes :meth:`run`."""
        with self._lock:
            self._pending -= 1
            if self._pending == 0:
                self._idle.notify_all()

    def _grow(self) -> None:
        """Start threads up to the current limit, never more than the tasks waiting."""
        want = min(self.concurrency.limit, self.workers, self._pending)
        while len(self._threads) < want:
            index = len(self._threads)
            thread = threading.Thread(
                target=self._worker,
                args=(self.chunk(index),),
                name=f"gpuci-io-{index}",
                daemon=True,
            )
            self._threads.append(thread)
            thread.start()

    def run(self, feed: Callable[[], bool] | None = None, tick: float | None = None) -> None:
        """Run until no task is left; re-raise the first failure.

        ``feed`` lets a driver plan work as connections free up (retry-fetch steals the tail
        of a segment for each new one): it is called every ``tick`` seconds, may submit tasks,
        and returns whether more may come; the pool runs while it does or tasks are pending.
        """
        try:
            while True:
                more = feed() if feed is not None else False
                with self._lock:
                    if not self._pending and not more:
                        break
                    self._grow()
                    # Short waits: a limit raised by the controller gets its threads quickly.
                    self._idle.wait(tick or (0.05 if len(self._threads) < self.workers else 0.5))
        except BaseException:  # Ctrl-C or a kill: stop the workers at their next chunk
            self.cancelled.set()
            raise
        finally:
            for _ in self._threads:
                self._queue.put(None)
            for thread in self._threads:
                # A Ctrl-C inside _grow's start() can leave a thread not started (join would
                # raise, hiding the interrupt): it ends on its None if it starts after all.
                if thread.is_alive():
                    thread.join()
        if self.error is not None:
            raise self.error

    def waiting(self) -> bool:
        """Whether tasks wait for a thread: a worker that frees up takes those first, before it
        steals part of a range another one is fetching."""
        return not self._queue.empty()

    @property
    def threads(self) -> int:
        return len(self._threads)


def laneless(fn: Callable[..., None], *args: Any) -> Callable[[Lane], None]:
    """A pool task calling ``fn(*args)``, for work that needs no lane's buffers."""
    return lambda _lane: fn(*args)


def parallel(fn: Callable[[T], R], items: Iterable[T], workers: int | Concurrency) -> list[R]:
    """Run ``fn(item)`` for every item, ``workers`` at once (a count or a controller);
    re-raise the first failure, else return what each call returned, in the items' order
    (the callers then need no lock of their own to gather them)."""
    todo = list(items)
    results: list[Any] = [None] * len(todo)

    def one(index: int) -> None:
        results[index] = fn(todo[index])

    pool = WorkPool(workers)
    for index in range(len(todo)):
        pool.submit(laneless(one, index))
    pool.run()
    return results
