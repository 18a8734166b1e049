"""Moving bytes: parallel ranged GETs streamed into place, sha256 checked on the way.

Large files are cut into aligned parts fetched in parallel and written at their offsets; a
per-file hash cursor consumes the bytes in order as they arrive (parts that land early are
re-read when their turn comes), so a file is verified the moment its last byte is written,
before it gets its final name. On plain-http stores the body goes socket -> pipe -> page cache
with ``splice`` (:mod:`gpuci.cache.splicing`: no copy through user space) and the hash reads
it back from the page cache; elsewhere each worker receives chunk n+1 into a buffer while its
helper thread writes and hashes chunk n, slice by slice (``O_DIRECT`` when opted in, see
:mod:`gpuci.cache.directio`). Packed small files come in runs of neighbours, one GET per run,
split into files while streaming. Every worker owns two preallocated buffers (touched only by
the copying path), so memory stays flat whatever the file size.

Transient failures (5xx, SlowDown, dropped connections) are retried by one policy declared
once (:func:`retrying`); a file whose bytes do not match their hash is fetched once more, then
fails with IntegrityError. Nothing here ever writes outside the staging paths it is given.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import os
import queue
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tenacity import (
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_random_exponential,
)

from gpuci.cache import directio, layout, splicing
from gpuci.cache.manifest import Entry, placed_mode
from gpuci.cache.packs import Run, plan_runs
from gpuci.cache.store import Store, TransientError
from gpuci.errors import IntegrityError, StoreError

# Plain-http bodies go socket -> pipe -> file in the kernel where the OS allows (tests turn it off
# to cover the copying path).
SPLICE = splicing.available()


def retrying(attempts: int) -> Retrying:
    """The retry policy for the data path: exponential backoff with jitter, transient only."""
    return Retrying(
        stop=stop_after_attempt(max(1, attempts)),
        wait=wait_random_exponential(multiplier=0.2, max=5.0),
        retry=retry_if_exception_type(TransientError),
        reraise=True,
    )


class _Cancelled(Exception):
    pass


class _Corrupt(Exception):
    def __init__(self, what: str, expected: str, got: str) -> None:
        super().__init__(what)
        self.what, self.expected, self.got = what, expected, got


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
    """N threads over one queue; tasks may enqueue more; the first error stops everything."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._queue: queue.Queue[Any] = queue.Queue()
        self._lock = threading.Lock()
        self._pending = 0
        self._idle = threading.Condition(self._lock)
        self.error: BaseException | None = None
        self.cancelled = threading.Event()

    def submit(self, fn: Callable[[Lane], None]) -> None:
        with self._lock:
            self._pending += 1
        self._queue.put(fn)

    def _worker(self) -> None:
        memory = directio.aligned_buffer(2 * layout.IO_CHUNK)
        lane = Lane((memory[: layout.IO_CHUNK], memory[layout.IO_CHUNK :]), ThreadPoolExecutor(1))
        while True:
            fn = self._queue.get()
            if fn is None:
                lane.helper.shutdown()
                return
            try:
                if not self.cancelled.is_set():
                    fn(lane)
            except BaseException as exc:
                with self._lock:
                    if self.error is None and not isinstance(exc, _Cancelled):
                        self.error = exc
                self.cancelled.set()
            finally:
                with self._lock:
                    self._pending -= 1
                    if self._pending == 0:
                        self._idle.notify_all()

    def run(self) -> None:
        threads = [
            threading.Thread(target=self._worker, name=f"gpuci-io-{i}", daemon=True)
            for i in range(self.workers)
        ]
        for thread in threads:
            thread.start()
        try:
            with self._lock:
                while self._pending:
                    self._idle.wait(0.5)
        except BaseException:  # Ctrl-C or a kill: stop the workers at their next chunk
            self.cancelled.set()
            raise
        finally:
            for _ in threads:
                self._queue.put(None)
            for thread in threads:
                thread.join()
        if self.error is not None:
            raise self.error


def parallel(fn: Callable[[Any], None], items: Iterable[Any], workers: int) -> None:
    """Run ``fn(item)`` for every item on ``workers`` threads; re-raise the first failure."""
    pool = WorkPool(workers)
    for item in items:
        pool.submit(lambda _buf, item=item: fn(item))
    pool.run()


def _write_all(fd: int, data: memoryview, offset: int | None = None) -> None:
    while len(data):
        n = os.write(fd, data) if offset is None else os.pwrite(fd, data, offset)
        data = data[n:]
        if offset is not None:
            offset += n


@dataclass
class _BlobTarget:
    """One large file assembled from parts, with an in-order hash cursor."""

    entry: Entry
    path: Path
    file: directio.TargetFile | None = None
    hasher: Any = field(default_factory=hashlib.sha256)
    next: int = 0
    done: dict[int, int] = field(default_factory=dict)
    hashing: bool = False
    refetched: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def open(self, direct: bool) -> None:
        self.file = directio.TargetFile(self.path, self.entry.size, direct)

    def close(self) -> None:
        if self.file is not None:
            self.file.close()

    def reset(self) -> None:
        self.hasher, self.next, self.done, self.hashing = hashlib.sha256(), 0, {}, False

    def advance(self, pos: int, length: int, data: memoryview | None, scratch: memoryview) -> bool:
        """Record ``length`` bytes written at ``pos``; True when this call completed the file.

        ``data`` holds those bytes, or is None when they never passed through user space
        (spliced): the hash then reads them back from the file, as it does for parts that
        arrived before their turn.
        """
        with self.lock:
            if self.hashing or pos != self.next or data is None:
                self.done[pos] = length
                if self.hashing or pos != self.next:
                    return False
            self.hashing = True
        position = pos
        if data is not None:
            self.hasher.update(data)
            position += length
        while True:
            with self.lock:
                self.next = position
                length = self.done.pop(position, None)
                if length is None:
                    self.hashing = False
                    return position == self.entry.size
            position = self._hash_back(position, length, scratch)

    def _hash_back(self, position: int, length: int, scratch: memoryview) -> int:
        """Hash ``length`` written bytes from ``position``, read back a scratch buffer at a time."""
        assert self.file is not None
        end = position + length
        while position < end:
            got = self.file.read_into(scratch, position, min(len(scratch), end - position))
            if got == 0:
                raise IntegrityError(
                    f"{self.path}: ends before byte {end}, which was written; something else "
                    "truncated the staging file",
                    hint="make sure no other process writes into the restore's target folder",
                )
            self.hasher.update(scratch[:got])
            position += got
        return position

    def finish(self) -> None:
        digest = self.hasher.hexdigest()
        if digest != self.entry.sha256:
            raise _Corrupt(self.entry.path or self.path.name, self.entry.sha256, digest)
        assert self.file is not None
        self.file.chmod(placed_mode(self.entry.mode))
        self.file.close()


class Downloader:
    """Fetch a manifest's file contents into staging paths."""

    def __init__(
        self,
        store: Store,
        workers: int,
        on_bytes: Callable[[int], None],
        attempts: int = 5,
    ) -> None:
        self.store = store
        self.workers = workers
        self.on_bytes = on_bytes
        self.attempts = attempts
        self.direct = directio.enabled()
        self.bytes = 0
        self._count_lock = threading.Lock()
        self._pool: WorkPool | None = None

    def _count(self, n: int) -> None:
        with self._count_lock:
            self.bytes += n
        self.on_bytes(n)

    def fetch(self, files: list[tuple[Entry, Path]]) -> None:
        """Download every entry to its path (entries of size 0 are the caller's job)."""
        pool = self._pool = WorkPool(self.workers)
        blobs = [_BlobTarget(e, p) for e, p in files if not e.pack and e.size]
        packed = [(e, p) for e, p in files if e.pack and e.size]
        try:
            for target in blobs:
                target.open(self.direct)
            # Round-robin across files: each file's parts then arrive roughly in order, so its
            # hash cursor consumes them from the buffer instead of re-reading them from disk.
            queues = [self._parts(target) for target in blobs]
            for row in itertools.zip_longest(*queues):
                for task in row:
                    if task is not None:
                        pool.submit(task)
            packed_entries = [e for e, _ in packed]
            for run in plan_runs(packed_entries, layout.PACK_RUN):
                members = [packed[i] for i in run.members]
                pool.submit(lambda lane, run=run, members=members: self._run(run, members, lane))
            pool.run()
        except TransientError as exc:
            raise StoreError(
                f"{self.store.url}: {exc}, still after {self.attempts} attempts",
                hint="the store or the network is failing; retry the job later",
            ) from None
        except _Corrupt as exc:
            raise IntegrityError(
                f"{exc.what}: the store's bytes hash to {exc.got[:12]}..., the manifest says "
                f"{exc.expected[:12]}... (fetched twice)",
                hint="the store holds a corrupt object; delete it and save the key again",
            ) from None
        finally:
            for target in blobs:
                target.close()

    # ----- large files --------------------------------------------------------------------------
    def _parts(self, target: _BlobTarget) -> list[Callable[[Lane], None]]:
        size = target.entry.size
        # Spread a lone big file across the workers, but keep parts large enough to amortise.
        part = max(min(layout.PART_SIZE, -(-size // self.workers)), layout.MIN_PART)
        # Aligned parts: every chunk then starts at an offset O_DIRECT accepts.
        part = -(-part // directio.ALIGN) * directio.ALIGN
        return [
            functools.partial(self._part, target, offset, min(part, size - offset))
            for offset in range(0, size, part)
        ]

    def _submit_parts(self, target: _BlobTarget) -> None:
        assert self._pool is not None
        for task in self._parts(target):
            self._pool.submit(task)

    def _part(self, target: _BlobTarget, offset: int, length: int, lane: Lane) -> None:
        key = layout.blob_key(target.entry.sha256)
        state = {"pos": offset}
        end = offset + length
        completed = False
        for attempt in retrying(self.attempts):
            with attempt:
                completed = self._stream_part(target, key, state, end, lane)
        if completed:
            try:
                target.finish()
            except _Corrupt:
                if target.refetched:
                    raise
                target.refetched = True
                target.reset()
                self._submit_parts(target)

    def _stream_part(
        self,
        target: _BlobTarget,
        key: str,
        state: dict[str, int],
        end: int,
        lane: Lane,
    ) -> bool:
        """Receive chunk n+1 while the helper writes and hashes chunk n.

        ``state["pos"]`` only moves past bytes that are written and handed to the hash, so a
        retry resumes exactly there.
        """
        assert self._pool is not None and target.file is not None
        reader = self.store.open_range(key, state["pos"], end - state["pos"])
        splice_into = getattr(reader, "splice_into", None)
        if SPLICE and splice_into is not None and target.file.buffered:
            return self._splice_part(target, reader, splice_into, state, end, lane)
        completed = False
        pending: tuple[Future[bool], int] | None = None
        pos, turn = state["pos"], 0
        try:
            while pos < end:
                if self._pool.cancelled.is_set():
                    raise _Cancelled()
                buf = lane.buffers[turn % 2]
                turn += 1
                want = min(len(buf), end - pos)
                got = 0
                while got < want:  # fill the buffer: writes stay whole and aligned
                    n = reader.readinto(buf[got:want])
                    if n == 0:
                        raise TransientError("the store closed the stream early")
                    got += n
                if pending is not None:  # the other buffer is free again once this returns
                    completed = pending[0].result() or completed
                    state["pos"], pending = pending[1], None
                future = lane.helper.submit(self._land, target, buf[:want], pos)
                pending, pos = (future, pos + want), pos + want
        finally:
            reader.close()
            if pending is not None:
                completed = pending[0].result() or completed
                state["pos"] = pending[1]
        return completed

    def _splice_part(
        self,
        target: _BlobTarget,
        reader: Any,
        splice_into: Callable[[splicing.Pipe, int], int],
        state: dict[str, int],
        end: int,
        lane: Lane,
    ) -> bool:
        """Move the part socket -> pipe -> file in the kernel; the helper hashes chunk n from
        the page cache while chunk n+1 arrives. ``state["pos"]`` moves as in the copying path.
        """
        assert self._pool is not None and target.file is not None
        fd = target.file.fd
        completed = False
        pending: tuple[Future[bool], int] | None = None
        pos = state["pos"]
        pipe: splicing.Pipe | None = None
        try:
            pipe = splicing.Pipe()
            while pos < end:
                start, stop = pos, min(end, pos + layout.IO_CHUNK)
                while pos < stop:
                    if self._pool.cancelled.is_set():
                        raise _Cancelled()
                    if splice_into(pipe, stop - pos) == 0:
                        raise TransientError("the store closed the stream early")
                    pos += pipe.drain(fd, pos)
                if pending is not None:
                    completed = pending[0].result() or completed
                    state["pos"], pending = pending[1], None
                pending = (lane.helper.submit(self._hash_spliced, target, start, pos), pos)
        finally:
            if pipe is not None:
                pipe.close()
            reader.close()
            if pending is not None:
                completed = pending[0].result() or completed
                state["pos"] = pending[1]
        return completed

    def _hash_spliced(self, target: _BlobTarget, start: int, stop: int) -> bool:
        self._count(stop - start)
        return target.advance(start, stop - start, None, _scratch())

    def _land(self, target: _BlobTarget, chunk: memoryview, pos: int) -> bool:
        """Write one chunk in place and feed the file's hash; True when it completed the file.

        Buffered writes go a slice at a time, each hashed right after it is written while it is
        still in the CPU cache; ``O_DIRECT`` writes stay whole (they skip the page cache).
        """
        assert target.file is not None
        step = layout.WRITE_SLICE if target.file.buffered else len(chunk)
        completed = False
        for at in range(0, len(chunk), step):
            piece = chunk[at : at + step]
            target.file.write(piece, pos + at)
            # The hash cursor may re-read earlier parts into a scratch buffer.
            completed = target.advance(pos + at, len(piece), piece, _scratch()) or completed
        self._count(len(chunk))
        return completed

    # ----- packed small files -------------------------------------------------------------------
    def _run(self, run: Run, members: list[tuple[Entry, Path]], lane: Lane) -> None:
        for attempt_round in (0, 1):
            try:
                for attempt in retrying(self.attempts):
                    with attempt:
                        self._stream_run(run, members, lane.buffers[0])
                return
            except _Corrupt:
                if attempt_round == 1:
                    raise

    def _stream_run(self, run: Run, members: list[tuple[Entry, Path]], buf: memoryview) -> None:
        assert self._pool is not None
        key = layout.pack_key(run.pack)
        reader = self.store.open_range(key, run.start, run.length)
        pos, end = run.start, run.start + run.length
        index, fd, hasher = 0, -1, hashlib.sha256()
        try:
            while pos < end:
                if self._pool.cancelled.is_set():
                    raise _Cancelled()
                n = reader.readinto(buf[: min(len(buf), end - pos)])
                if n == 0:
                    raise TransientError("the store closed the stream early")
                self._count(n)
                data = buf[:n]
                while len(data) and index < len(members):
                    entry, path = members[index]
                    if pos < entry.offset:  # a gap: bytes of files this tree doesn't use
                        skip = min(entry.offset - pos, len(data))
                        data, pos = data[skip:], pos + skip
                        continue
                    if fd < 0:
                        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                        hasher = hashlib.sha256()
                    take = min(entry.offset + entry.size - pos, len(data))
                    _write_all(fd, data[:take])
                    hasher.update(data[:take])
                    data, pos = data[take:], pos + take
                    if pos == entry.offset + entry.size:
                        digest = hasher.hexdigest()
                        if digest != entry.sha256:
                            raise _Corrupt(entry.path or path.name, entry.sha256, digest)
                        os.fchmod(fd, placed_mode(entry.mode))
                        os.close(fd)
                        fd, index = -1, index + 1
                pos += len(data)
        finally:
            reader.close()
            if fd >= 0:
                os.close(fd)


_SCRATCH = threading.local()


def _scratch() -> memoryview:
    """A per-thread buffer for reading back bytes to hash (spliced, or early parts): small, so
    each piece is hashed while it is still in the CPU cache."""
    buf = getattr(_SCRATCH, "buf", None)
    if buf is None:
        buf = _SCRATCH.buf = directio.aligned_buffer(layout.WRITE_SLICE)
    return buf
