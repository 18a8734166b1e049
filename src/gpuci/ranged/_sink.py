"""The engine's sink: a segment's chunks written (and hashed) on helper threads, in order,
while the connection's thread receives the next ones, so the socket keeps draining.

Both features write through it (:func:`gpuci.ranged._drive.pump` takes any
:class:`~gpuci.ranged._drive.Sink`): the cache's lanes hand each whole buffer to their one
helper, which writes and hashes it slice by slice, one buffer at a time (the worker fills the
other meanwhile); retry-fetch batches its network chunks to 1 MiB for one ``pwritev`` and
hashes each batch on a second helper once written (both release the GIL, so disk, hash and
network overlap: reading, hashing and writing on one thread ran at half of curl's rate).

``seg.written`` moves past a chunk only once its write returned, so a retry resumes there and
a sidecar claims only bytes on disk. ``close`` waits for everything received (a cut
connection keeps it) and re-raises a helper's failure, once; after a failure nothing further
is written.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import Any

from gpuci.ranged._plan import Segment

Stage = Callable[[Any, int], Any]  # (a chunk or a batch of chunks, its offset) -> result


class HelperSink:
    """Chunks of ``seg`` through ``write`` (then ``then``) on helper threads, in order.

    Args:
        seg: its ``written`` moves past each chunk once ``write`` returned.
        write: writes a chunk (or, with ``batch``, a list of chunks) at its offset.
        then: a second stage on a second helper, after the write (retry-fetch's hash).
        helpers: the threads to run on (a cache lane's own); None: new ones, ended by close.
        depth: chunks handed on and not yet through every stage, at most.
        batch: gather chunks until this many bytes before handing them on (0: each alone).
    """

    def __init__(
        self,
        seg: Segment,
        write: Stage,
        *,
        then: Stage | None = None,
        helpers: tuple[Executor, ...] | None = None,
        depth: int = 1,
        batch: int = 0,
    ) -> None:
        self._seg, self._write, self._then = seg, write, then
        self._own = helpers is None
        stages = 1 if then is None else 2
        self._helpers = helpers or tuple(
            ThreadPoolExecutor(1, thread_name_prefix="gpuci-sink") for _ in range(stages)
        )
        self._depth, self._batch = max(1, depth), batch
        self._pos = seg.pos  # where the next chunk goes
        self._pending: deque[Future[Any]] = deque()
        self._held: list[Any] = []
        self._held_size = 0
        self._broken = False  # a stage failed: nothing further is written or hashed
        self.completed = False  # the last stage returned something true (a file made whole)

    def write(self, chunk: Any) -> None:
        if not self._batch:
            self._send(chunk, len(chunk))
            return
        self._held.append(chunk)
        self._held_size += len(chunk)
        if self._held_size >= self._batch:
            self._flush()

    def _flush(self) -> None:
        if self._held:
            held, size = self._held, self._held_size
            self._held, self._held_size = [], 0
            self._send(held, size)

    def _send(self, payload: Any, size: int) -> None:
        while len(self._pending) >= self._depth:
            self._settle()
        pos, self._pos = self._pos, self._pos + size
        done = self._helpers[0].submit(self._first, payload, pos, size)
        if self._then is not None:
            done = self._helpers[1].submit(self._second, done, payload, pos)
        self._pending.append(done)

    def _first(self, payload: Any, pos: int, size: int) -> Any:
        if self._broken:
            return None
        try:
            result = self._write(payload, pos)
        except BaseException:
            self._broken = True
            raise
        self._seg.written = pos + size
        return result

    def _second(self, first: Future[Any], payload: Any, pos: int) -> Any:
        first.result()  # the write's failure is this chunk's
        if self._broken:
            return None
        assert self._then is not None
        try:
            return self._then(payload, pos)
        except BaseException:
            self._broken = True
            raise

    def _settle(self) -> None:
        self.completed = bool(self._pending.popleft().result()) or self.completed

    def close(self) -> None:
        """Hand on what is held, wait for every stage; re-raise a failure not raised yet."""
        try:
            self._flush()
            while self._pending:
                self._settle()
        finally:
            while self._pending:  # after a failure: the rest were skipped, let them end
                self._pending.popleft().exception()
            if self._own:
                for helper in self._helpers:
                    helper.shutdown()
