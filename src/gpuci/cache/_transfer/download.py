"""Moving bytes: parallel ranged GETs streamed into place, sha256 checked on the way.

The cache's source and sinks for the ranged-download engine (:mod:`gpuci.ranged`). Each large
file is a :class:`~gpuci.ranged._plan.Plan` of aligned parts written at their offsets (a worker
that frees up while no task waits steals the far half of a part still coming); a per-file hash
cursor consumes the bytes in order (parts that land early are re-read when their turn comes),
so a file is verified the moment its last byte is written, before it gets its final name. On
plain-http stores the body goes socket -> pipe -> page cache with ``splice``
(:mod:`gpuci.cache._stores.splicing`) and the hash reads it back; elsewhere each worker receives
chunk n+1 into one of its lane's two preallocated buffers while the lane's helper writes and
hashes chunk n (``O_DIRECT`` when opted in: :mod:`gpuci.cache._transfer.directio`), so memory
stays flat whatever the file size. With the runner-local tier filling, each piece the hash eats
is also written into the tier's temp file, ``O_DIRECT`` (:meth:`BlobTarget._mirror`). Packed
small files come in runs of neighbours, one GET per run, split into files while streaming.

Transient failures (5xx, SlowDown, dropped connections) are retried under :data:`DATA_PATH`
from the last written byte (:func:`gpuci.ranged._retry.retry_segment`); a file whose bytes do
not match their hash is fetched once more, then fails with IntegrityError. Nothing here ever
writes outside the staging paths it is given.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import itertools
import os
import threading
import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuci import files
from gpuci.adaptive import Concurrency
from gpuci.cache import _layout as layout
from gpuci.cache._format.manifest import Entry, placed_mode
from gpuci.cache._format.packs import Run, plan_runs
from gpuci.cache._stores import splicing
from gpuci.cache._stores.base import RangeReader, Store, TransientError
from gpuci.cache._stores.tier_fill import TierFill
from gpuci.cache._transfer import directio
from gpuci.cache._transfer.blob_target import BlobTarget, Corrupt
from gpuci.cache._transfer.receive import OnDisk, filled, scratch, spliced
from gpuci.errors import IntegrityError, StoreError
from gpuci.ranged import _extents as extents
from gpuci.ranged._drive import pump
from gpuci.ranged._plan import Plan, Segment
from gpuci.ranged._pool import Lane, WorkPool
from gpuci.ranged._retry import retry_segment, work_through
from gpuci.ranged._sink import HelperSink
from gpuci.retry import RetryPolicy

if TYPE_CHECKING:
    from gpuci.cache._stores.tier import LocalTier

# Plain-http bodies go socket -> pipe -> file in the kernel where the OS allows (tests turn it off
# to cover the copying path).
SPLICE = splicing.available()


#: The data path's waits: short (a store on the same network answers fast), full jitter, so
#: parallel workers that failed together do not retry together.
DATA_PATH = RetryPolicy(initial=0.2, max_wait=5.0, jitter="full", retry_after_cap=None)
# A write that found its disk full.
_DISK_FULL = {errno.ENOSPC, errno.EDQUOT}


# The first connections keep IO_CHUNK buffers (today's fixed count: a CPU-bound loopback store
# sees no change); connections beyond share what is left of the memory budget, down to this.
FULL_LANES = 8
MIN_LANE_CHUNK = 512 << 10


def download_concurrency(environ: Mapping[str, str]) -> Concurrency:
    """The controller for a restore's ranged GETs: adaptive, or the user's fixed count."""
    return layout.concurrency(environ, layout.DOWNLOAD_CONNECTIONS)


def lane_chunk(index: int, connections: int) -> int:
    """The buffer size of connection ``index`` of at most ``connections``, so that all of them
    together fit the memory budget.

    A connection touches its lane's two buffers of this size and its helper's WRITE_SLICE
    scratch (re-reading spliced bytes and parts that landed early); the budget counts three
    buffers per connection, so it holds whatever the scratch size. The first FULL_LANES get
    IO_CHUNK; the others split the rest: 1.3 MiB each at 32 connections, 0.5 MiB at 64, plenty
    over a remote link where each connection moves tens of MB/s."""
    if index < FULL_LANES:
        return layout.IO_CHUNK
    rest = layout.MEMORY_BUDGET - FULL_LANES * 3 * layout.IO_CHUNK
    chunk = min(layout.IO_CHUNK, rest // (3 * max(1, connections - FULL_LANES)))
    return max(MIN_LANE_CHUNK, chunk // directio.ALIGN * directio.ALIGN)


class Downloader:
    """Fetch a manifest's file contents into staging paths."""

    def __init__(
        self,
        store: Store,
        workers: int | Concurrency,
        on_bytes: Callable[[int], None],
        attempts: int = 5,
        tier: LocalTier | None = None,
    ) -> None:
        self.store = store
        self.tier = tier  # filled as the files are hashed (cache._stores.tier_fill)
        self._filling: set[str] = set()
        self._placed: set[Path] = set()  # files whose bytes are whole and verified
        self._fills = False  # the tier's disk has room for this fetch's files (set by fetch)
        self.concurrency = (
            workers if isinstance(workers, Concurrency) else Concurrency.fixed(workers)
        )
        # Parts are cut for the ceiling, so one big file can keep every allowed connection busy
        # whatever the limit becomes.
        self.workers = self.concurrency.ceiling
        self.on_bytes = on_bytes
        self.attempts = attempts
        self.direct = directio.enabled()
        self.bytes = 0
        self._count_lock = threading.Lock()
        self._pool: WorkPool | None = None
        self._part_bytes = layout.MIN_PART  # the part size of this fetch (set by fetch)

    def _count(self, n: int) -> None:
        with self._count_lock:
            self.bytes += n
        self.on_bytes(n)

    def fetch(self, files: list[tuple[Entry, Path]]) -> None:
        """Download every entry to its path (entries of size 0 are the caller's job).

        A disk that fills while the tier takes files (after its room check: another process
        wrote meanwhile) does not fail the restore: the files not placed yet are fetched once
        more, straight into the job's folder; a full disk then is the job's own and fails it.
        """
        self._fills = self._tier_has_room(files)
        try:
            try:
                self._fetch(files)
            except OSError as exc:
                if not (self._fills and exc.errno in _DISK_FULL):
                    raise
                assert self.tier is not None
                self.tier.filled_up, self._fills = True, False
                self._fetch([(e, p) for e, p in files if p not in self._placed])
        except Exception:
            # The failure stopped the store's requests (its stop flag): the restore words it
            # and may go on with the store; an interrupt leaves it stopped.
            self.store.stop_flag()
            raise

    def _fetch(self, files: list[tuple[Entry, Path]]) -> None:
        # The store's stop flag: a Ctrl-C (or a part failed for good) ends the GETs in flight
        # and their retries at once, so the pool's workers end instead of waiting them out.
        pool = self._pool = WorkPool(
            self.concurrency,
            functools.partial(lane_chunk, connections=self.workers),
            cancelled=self.store.stop_flag(),
        )
        blobs = [
            BlobTarget(e, p, fill=self._fill_for(e)) for e, p in files if not e.pack and e.size
        ]
        packed = [(e, p) for e, p in files if e.pack and e.size]
        try:
            for target in blobs:
                target.open(self.direct, mirror=not self.store.local_disk)
            # Round-robin across files: each file's parts then arrive roughly in order, so its
            # hash cursor consumes them from the buffer instead of re-reading them from disk.
            self._part_bytes = self._part_size(sum(target.entry.size for target in blobs))
            queues = [self._parts(target) for target in blobs]
            packed_entries = [e for e, _ in packed]
            runs = list(plan_runs(packed_entries, layout.PACK_RUN))
            self.concurrency.expect(
                sum(e.size for e, _ in files), sum(map(len, queues)) + len(runs)
            )
            for row in itertools.zip_longest(*queues):
                for task in row:
                    if task is not None:
                        pool.submit(task)
            for run in runs:
                members = [packed[i] for i in run.members]
                pool.submit(functools.partial(self._run, run, members))
            pool.run()
        except TransientError as exc:
            raise StoreError(
                f"{self.store.url}: {exc}, still after {self.attempts} attempts",
                hint="the store or the network is failing; retry the job later",
            ) from None
        except Corrupt as exc:
            raise IntegrityError(
                f"{exc.what}: the store's bytes hash to {exc.got[:12]}..., the manifest says "
                f"{exc.expected[:12]}... (fetched twice)",
                hint="the store holds a corrupt object; delete it and save the key again",
            ) from None
        finally:
            for target in blobs:
                if target.fill is not None:  # never finished: a later fetch may fill it again
                    self._filling.discard(target.entry.sha256)
                target.close()
                full = target.mirror_error is not None and target.mirror_error.errno in _DISK_FULL
                if full and self.tier is not None:  # the tier's disk filled: copy in no more
                    self.tier.filled_up = True

    def _tier_has_room(self, files: list[tuple[Entry, Path]]) -> bool:
        """Whether the tier's disk takes the files this fetch would land there (a cache never
        fails a job: on a full tier disk they go straight to the job's folder)."""
        tier = self.tier
        if tier is None or not files:
            return False
        sizes = {e.sha256: e.size for e, _ in files if not tier.links(e.size, e.mode)}
        kept = sum(sizes.values())
        if tier.keeps_runs:  # packed files land as whole runs, the bytes between them too
            packed = [e for e, _ in files if e.pack and e.size]
            blobs = {e.sha256: e.size for e, _ in files if not e.pack}
            kept = sum(blobs.values()) + sum(run.length for run in plan_runs(packed))
        try:  # every folder the files go to (a tree may span disks): one stat per folder
            devices = {os.stat(folder).st_dev for folder in {path.parent for _, path in files}}
        except OSError:
            return False
        return tier.room_for(kept, devices, job_bytes=sum(sizes.values()))

    def _fill_for(self, entry: Entry) -> TierFill | None:
        """The tier's temp file this file lands in; None when the tier is off or has no room,
        has it, will hardlink it (``link`` mode) or is filling it for an identical file."""
        tier = self.tier
        if (
            tier is None
            or not self._fills
            or tier.filled_up
            or tier.links(entry.size, entry.mode)
            or entry.sha256 in self._filling
        ):
            return None
        self._filling.add(entry.sha256)
        return tier.start_fill(entry.sha256, entry.size)

    def _run_fill(self, pack: str, start: int, end: int) -> TierFill | None:
        """The tier's temp file that bytes ``start`` to ``end`` of ``pack`` land in as they come,
        in the modes that keep packed files as runs; None otherwise."""
        tier = self.tier
        if tier is None or not self._fills or not tier.keeps_runs or tier.filled_up:
            return None
        return tier.runs.start(pack, start, end)

    @property
    def fills_tier(self) -> bool:
        """Whether the tier's disk had room for the files, which then landed in the tier."""
        return self._fills

    @property
    def cancelled(self) -> threading.Event:
        assert self._pool is not None
        return self._pool.cancelled

    def _open_range(self, key: str, offset: int, length: int) -> RangeReader:
        """A ranged GET (its reads are counted by :func:`~gpuci.cache._transfer.receive.filled` and
        :func:`~gpuci.cache._transfer.receive.spliced`); its
        wait for the response (the first byte) tells the controller how far the store is."""
        started = time.monotonic()
        reader = self.store.open_range(key, offset, length)
        self.concurrency.first_byte(time.monotonic() - started)
        return reader

    # ----- large files --------------------------------------------------------------------------
    def _part_size(self, total: int) -> int:
        """One part size for every large file: the bytes of all of them spread over the ceiling
        of connections (a lone big file still uses every connection), within
        [MIN_PART, PART_SIZE]. Cutting each file for the ceiling on its own made 4 x 128 MiB
        into 128 GETs of 4 MiB: each paid a first byte (tens of ms on a remote store), a
        signature, a response parse and the server's own per-request work, where 32 of
        16 MiB keep the same 32 connections busy."""
        # Aligned parts: every chunk then starts at an offset O_DIRECT accepts.
        return extents.part_size(
            total, self.workers, layout.MIN_PART, layout.PART_SIZE, directio.ALIGN
        )

    def _parts(self, target: BlobTarget) -> list[Callable[[Lane], None]]:
        """A fresh plan of the file's parts, and one task per part to work through it."""
        steal = max(layout.MIN_PART, self._part_bytes // 4)
        target.plan = Plan.parts(target.entry.size, self._part_bytes, steal)
        return [functools.partial(self._part, target)] * len(target.plan.pending)

    def _take(self, target: BlobTarget) -> Segment | None:
        """The plan's next part; with none left and no other task waiting for a thread, the far
        half of the largest part still coming (a near store's only well ahead of its reads)."""
        assert target.plan is not None and self._pool is not None
        if self._pool.cancelled.is_set():
            return None
        with target.lock:
            return target.plan.take(not self._pool.waiting(), not self.concurrency.far)

    def _part(self, target: BlobTarget, lane: Lane) -> None:
        """Parts, then stolen tails, on the engine's loop (:func:`work_through`); the worker whose
        part completed the file verifies it (fetched once more if it does not hash to its name)."""
        assert target.plan is not None and self._pool is not None
        key, take = layout.blob_key(target.entry.sha256), functools.partial(self._take, target)
        attempt = functools.partial(self._stream_part, target, key, lane=lane)
        retried, stop = functools.partial(self._retried, lock=target.lock), self._pool.cancelled
        if not work_through(target.plan, take(), attempt, retried, target.lock, stop, take):
            return
        try:
            target.finish()
            self._placed.add(target.path)
        except Corrupt:
            if target.refetched:
                raise
            target.refetched = True
            target.reset()
            for task in self._parts(target):
                self._pool.submit(task)

    def _stream_part(self, target: BlobTarget, key: str, seg: Segment, lane: Lane) -> bool:
        """Receive chunk n+1 while the helper writes (or, spliced, hashes) chunk n, on the
        engine's driver (:func:`gpuci.ranged._drive.pump`); True when it completed the file.

        On plain-http stores the part moves socket -> pipe -> file in the kernel, and the
        helper hashes each chunk back from the page cache."""
        assert self._pool is not None and target.file is not None
        with target.lock:
            start, seg.asked = seg.pos, seg.end
        reader = self._open_range(key, start, seg.asked - start)
        splice_into = getattr(reader, "splice_into", None)
        chunks: Generator[Any, None, None]
        if SPLICE and splice_into is not None and target.file.buffered:
            chunks = spliced(
                splice_into,
                target.file.fd,
                seg,
                target.lock,
                self.cancelled,
                self.concurrency.record,
            )
            land = functools.partial(self._hash_spliced, target)
        else:
            chunks = filled(reader, lane, seg, self.cancelled, self.concurrency.record)
            land = functools.partial(self._land, target)
        # The lane's helper writes and hashes chunk n while this worker receives chunk n+1.
        sink = HelperSink(seg, land, helpers=(lane.helper,))
        try:
            with contextlib.closing(chunks):
                pump(seg, chunks, sink, lock=target.lock)
        finally:
            reader.close()
        return sink.completed

    def _retried(
        self, seg: Segment, attempt: Callable[[Segment], Any], lock: threading.Lock | None = None
    ) -> Any:
        """``attempt(seg)`` on the engine's retry wrapper: :data:`DATA_PATH`, transient failures
        only, each retry telling the controller to back off (the store tells it of a SlowDown
        or a 429 as well); a wait ends when the pool stops (the next attempt, refused by the
        store's stop flag, sends nothing)."""
        assert self._pool is not None
        policy, backoff = replace(DATA_PATH, attempts=max(1, self.attempts)), self.concurrency
        return retry_segment(
            seg,
            attempt,
            policy,
            TransientError,
            throttle=lambda _: backoff.throttled(),
            lock=lock,
            stop=self._pool.cancelled,
        )

    def _hash_spliced(self, target: BlobTarget, chunk: OnDisk, pos: int) -> bool:
        self._count(len(chunk))
        return target.advance(pos, len(chunk), None, scratch())

    def _land(self, target: BlobTarget, chunk: memoryview, pos: int) -> bool:
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
            completed = target.advance(pos + at, len(piece), piece, scratch()) or completed
        self._count(len(chunk))
        return completed

    # ----- packed small files -------------------------------------------------------------------
    def _run(self, run: Run, members: list[tuple[Entry, Path]], lane: Lane) -> None:
        """One GET for the run, split into its files as it streams (the engine's driver and its
        retry wrapper; a retry writes the whole run again: its files are written in one go);
        fetched once more when a file's bytes do not hash to its name."""
        key = layout.pack_key(run.pack)

        def attempt(seg: Segment) -> None:
            reader = self._open_range(key, seg.pos, seg.end - seg.pos)
            fill = self._run_fill(run.pack, seg.pos, seg.end)
            sink = _RunSink(self, members, seg.pos, fill, seg.end - seg.pos)
            try:
                pump(seg, filled(reader, lane, seg, self.cancelled, self.concurrency.record), sink)
            finally:
                reader.close()

        for attempt_round in (0, 1):
            seg = Segment(run.start, run.start, run.start + run.length, run.start)
            try:
                self._retried(seg, attempt)
                return
            except Corrupt:
                if attempt_round == 1:
                    raise


class _RunSink:
    """A packed run's bytes split into its files, each hashed on the way; the gaps between them
    (files this tree does not use) are skipped. With ``run`` (the tier keeps runs), every byte
    received also goes into the tier's temp file for the run, one write per chunk, published
    once the run is whole and each file in it hashed to its name; else each file's tier copy is
    its own blob (``link`` mode)."""

    def __init__(
        self,
        down: Downloader,
        members: list[tuple[Entry, Path]],
        pos: int,
        run: TierFill | None = None,
        run_size: int = 0,
    ) -> None:
        self._down, self._members, self._pos = down, members, pos
        self._index, self._fd = 0, -1
        self._hasher: Any = None
        self._fill: TierFill | None = None
        self._run, self._run_size = run, run_size
        self._run_bytes = 0
        # Where the tier keeps runs, a packed file never gets a blob of its own: not when the
        # run's temp file could not be made, nor once a full disk dropped it.
        self._runs = down.tier is not None and down.tier.keeps_runs

    def _keep(self, data: memoryview) -> None:
        """The received bytes into the run's temp file; a failure there (a full tier disk)
        drops the run, never the restore (a cache never fails a job)."""
        assert self._run is not None
        try:
            files.write_all(self._run.fd, data)
            self._run_bytes += len(data)
        except OSError as exc:
            self._run.discard()
            self._run = None
            if exc.errno in _DISK_FULL and self._down.tier is not None:
                self._down.tier.filled_up = True

    def write(self, data: memoryview) -> None:
        self._down._count(len(data))
        if self._run is not None:
            self._keep(data)
        pos = self._pos
        while len(data) and self._index < len(self._members):
            entry, path = self._members[self._index]
            if pos < entry.offset:  # a gap
                skip = min(entry.offset - pos, len(data))
                data, pos = data[skip:], pos + skip
                continue
            if self._fd < 0:  # the tier's temp file when the tier takes it, else the job's
                self._down._placed.discard(path)  # a retried run writes its files again
                fill = None if self._runs else self._down._fill_for(entry)
                self._hasher, self._fill = hashlib.sha256(), fill
                self._fd = (
                    os.dup(self._fill.fd)
                    if self._fill is not None
                    else os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                )
            take = min(entry.offset + entry.size - pos, len(data))
            files.write_all(self._fd, data[:take])
            self._hasher.update(data[:take])
            data, pos = data[take:], pos + take
            if pos == entry.offset + entry.size:
                digest = self._hasher.hexdigest()
                if digest != entry.sha256:
                    raise Corrupt(entry.path or path.name, entry.sha256, digest)
                if self._fill is None:
                    os.fchmod(self._fd, placed_mode(entry.mode))
                os.close(self._fd)
                self._fd, self._index = -1, self._index + 1
                if self._fill is not None:
                    fill, self._fill = self._fill, None
                    fill.finish(digest, path, placed_mode(entry.mode))
                self._down._placed.add(path)
        self._pos = pos + len(data)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if self._fill is not None:  # cut short: a retry writes it again from its start
            self._fill.discard()
            self._fill = None
            self._down._filling.discard(self._members[self._index][0].sha256)
        if self._run is not None:  # whole, every file hashed to its name: publish, else drop
            run, self._run = self._run, None
            if self._index == len(self._members) and self._run_bytes == self._run_size:
                run.publish(run.name)
            else:
                run.discard()
