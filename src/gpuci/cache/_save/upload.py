"""The save's uploads: every byte of the tree read once, hashed as it is read, and sent
from the bytes read; large files one by one (in parts), small files in packs.

A blob may appear under ``blobs/sha256/<hex>`` only once the bytes it holds hash to ``<hex>``
(docs/cache-format.md). Reading a file to hash it and again to send it leaves a window in
which a job still writing the tree puts other bytes under that name; here the bytes that were
hashed are the bytes sent. A file that fits the memory budget (:data:`HELD_BYTES`, what is
left of it) is read into memory in parts, hashed, looked up (a blob the store has is not
sent) and sent part by part, each part's memory freed as it lands. A larger file, or one
met while the budget is taken (hashing does not wait: the link stays busy), is hashed first
(its name is needed to look it up) and, when the store lacks it, read again in order (from
the page cache, usually), hashed again and sent part by part; its upload completes only when
that second hash is its name, else it is aborted and never seen.

Hashing runs on threads of its own and hands each file to the upload pool the moment its
name is known, so uploads start while the rest of the tree is still being read; HEADs, whole
PUTs and parts all run in the save's one pool, under its one concurrency controller.

Every read is of the very file the scan saw (:mod:`gpuci.cache._save.sources`: its device and
inode, never a link or a FIFO swapped in since by a job that can write the tree).

The save's small files: read, hashed and packed together (a few requests for thousands of
files); a file whose bytes a pack the store still has already holds is not sent again.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Protocol, cast

from gpuci.cache import _layout as layout
from gpuci.cache._common import throttle_signals
from gpuci.cache._format import manifest as mf
from gpuci.cache._format.packs import PackBuilder
from gpuci.cache._format.tree import Tree
from gpuci.cache._save import sources
from gpuci.cache._save.state import Saver
from gpuci.cache._stores.base import SourceChanged, Store
from gpuci.cache._stores.tier import LocalTier
from gpuci.errors import StoreError
from gpuci.ranged._pool import WorkPool, laneless

# File bytes held in memory at once (read, hashed, waiting for or on the wire). A file up to
# this size is read once; a larger one is hashed first and read again to send (see above).
HELD_BYTES = 128 << 20
# Threads reading and hashing files (sha256 runs without the GIL: two cores' worth).
HASHERS = 2


class _Parts(Protocol):
    """A multipart upload that takes parts as bytes
    (:class:`gpuci.cache._stores.s3.multipart.Multipart`)."""

    def send_bytes(self, number: int, data: bytes, on_read: Callable[[int], None]) -> None: ...

    def complete(self) -> None: ...

    def abort(self) -> None: ...


class _Stopped(Exception):
    """The pool was cancelled (another task failed): a hasher stops where it is."""


class _Budget:
    """Bytes of file data in memory at once; a chunk larger than the whole budget passes alone."""

    def __init__(self, total: int, cancelled: threading.Event) -> None:
        self.total, self.used = total, 0
        self.cancelled = cancelled
        self.cond = threading.Condition()

    def take(self, n: int) -> None:
        with self.cond:
            while self.used and self.used + n > self.total:
                if self.cancelled.is_set():
                    raise _Stopped
                self.cond.wait(0.2)
            self.used += n

    def try_take(self, n: int) -> bool:
        """Take ``n`` bytes if they fit now (a hasher that cannot hold a file does not wait)."""
        with self.cond:
            if self.used and self.used + n > self.total:
                return False
            self.used += n
            return True

    def give(self, n: int) -> None:
        with self.cond:
            self.used -= n
            self.cond.notify_all()


def put_content(store: Store, key: str, data: bytes) -> None:
    """A blob or pack the caller has hashed: the store's cheapest way to take bytes as they are
    (:meth:`gpuci.cache._stores.s3.store.S3Store.put_content`), else its plain put."""
    getattr(store, "put_content", store.put)(key, data)


class BlobUploads:
    """Every large file of one save, hashed and (when the store lacks it) sent; start() returns
    at once, finish() waits for the last upload and raises the first failure."""

    def __init__(
        self,
        saver: Saver,
        tree: Tree,
        large: list[mf.Entry],
        dry_run: bool,
        stop: threading.Event | None = None,
    ) -> None:
        self.saver, self.store, self.tree = saver, saver.store, tree
        self.large, self.dry_run = large, dry_run
        self.uploads = saver.uploads
        # The store's stop flag for this save (``stop``, else a fresh one): a Ctrl-C or an
        # upload failed for good ends every request of the save in flight (the packs' and the
        # conditional-writes question's too) and their retries at once.
        cancelled = stop if stop is not None else saver.store.stop_flag()
        self.pool = WorkPool(saver.uploads, cancelled=cancelled)
        self.budget = _Budget(HELD_BYTES, self.pool.cancelled)
        self.in_parts = type(saver.store).multipart is not Store.multipart
        self.lock = threading.Lock()
        self.claimed: set[str] = set()  # names this save has looked up (one file per content)
        self.open: dict[str, _Parts] = {}  # blob key -> multipart upload not yet complete
        self.left: dict[str, int] = {}  # blob key -> parts still to land
        self.todo: Iterator[mf.Entry] = iter(large)
        total = sum(e.size for e in large)
        self.meter = saver.rt.progress("hash and upload", total) if large else None
        self.stack = contextlib.ExitStack()
        self.hold = self.pool.hold()
        self.left_hashers = HASHERS
        self.runner: threading.Thread | None = None
        self.hashers: list[threading.Thread] = []
        self.error: BaseException | None = None

    # ----- the save's view --------------------------------------------------------------------
    def start(self) -> None:
        if not self.large:
            return
        self.stack.enter_context(throttle_signals(self.store, self.uploads))
        self.hold.__enter__()  # run() waits for the hashers: the last one lets it go
        for index in range(HASHERS):
            thread = threading.Thread(target=self._hasher, name=f"gpuci-hash-{index}", daemon=True)
            self.hashers.append(thread)
            thread.start()
        self.runner = threading.Thread(target=self._run, name="gpuci-uploads", daemon=True)
        self.runner.start()

    def cancel(self) -> None:
        """Stop the uploads: the store's requests in flight end now, none is sent after."""
        self.pool.cancelled.set()

    def read(self) -> bool:
        """Wait until every large file is read and hashed (its last parts may still be on the
        wire): whether all went well so far, so that what needs only the names may start."""
        for thread in self.hashers:
            thread.join()
        return not self.pool.cancelled.is_set()

    def finish(self, interrupted: bool = False) -> None:
        """Wait for the last upload and raise the first failure. ``interrupted`` (Ctrl-C, or
        one landing here; the caller raises it): the uploads left open are not aborted, which
        would wait on a store that may never answer; prune aborts them once past its grace."""
        if self.runner is None:
            return
        try:
            try:
                self.runner.join()
                for thread in self.hashers:
                    thread.join()
            except BaseException:
                interrupted = True
                self.cancel()
                raise
        finally:
            self._abort_open(interrupted)
            self.stack.close()
            if self.meter:
                self.meter.close()
        if self.error is not None and not interrupted:  # else the caller raises the interrupt
            raise self.error

    def _abort_open(self, interrupted: bool) -> None:
        """Drop the multipart uploads a failed save left open (best effort), on a fresh stop
        flag: the save's own was set when it failed, and refuses every request."""
        if interrupted:
            return
        if self.pool.cancelled.is_set():
            self.store.stop_flag()
        for upload in self.open.values():
            upload.abort()

    def _run(self) -> None:
        try:
            self.pool.run()
        except BaseException as exc:
            self.error = exc

    # ----- hashing, on threads of its own -----------------------------------------------------
    def _hasher(self) -> None:
        try:
            while not self.pool.cancelled.is_set():
                with self.lock:
                    entry = next(self.todo, None)
                if entry is None:
                    break
                self._one(entry)
        except _Stopped:
            pass
        except BaseException as exc:
            self.pool.fail(exc)
        finally:
            with self.lock:
                self.left_hashers -= 1
                last = self.left_hashers == 0
            if last:
                self.hold.__exit__(None, None, None)

    def _one(self, entry: mf.Entry) -> None:
        if not self._hold(entry.size):
            entry.sha256 = sources.hash_source(self.tree, entry, self._go_on)
            self._go_on()  # stopped since: nothing is sent (a file store copies it whole)
            if self.dry_run:
                self.pool.submit(laneless(self._look_up, entry))
            else:
                self._streamed(entry)
            return
        parts = self._parts(entry.size)
        try:
            chunks, entry.sha256 = self._read_hashed(entry, parts)
        except BaseException:
            self.budget.give(entry.size)
            raise
        self.pool.submit(laneless(self._send_held, entry, chunks))
        if self.saver.tier is not None:  # the tier's copy from the very bytes just hashed,
            self.saver.tier.keep(entry.sha256, chunks)  # while they go up (bytes: immutable)

    def _go_on(self, *_block: object) -> None:
        """A hasher goes on only while the pool is not cancelled (a Ctrl-C, a failure)."""
        if self.pool.cancelled.is_set():
            raise _Stopped

    def _hold(self, size: int) -> bool:
        """Whether a file is read once into memory (and its room taken): one PUT waits for the
        room; a file in parts does not: it is hashed now and read again to send, so the link
        stays busy. A dry run sends nothing and holds nothing."""
        if self.dry_run or size > HELD_BYTES:
            return False
        if self._whole(size):
            self.budget.take(size)
            return True
        return self.budget.try_take(size)

    def _whole(self, size: int) -> bool:
        """Sent in one PUT: below the multipart threshold, or to a store without parts."""
        return size < self.saver.threshold or not self.in_parts

    def _parts(self, size: int) -> list[tuple[int, int, int]]:
        """Whole below the multipart threshold; else parts sized from the file and the most
        connections the controller may allow (its ceiling), not the few it allows now: parts
        cut at a start of 8 were twice as large, so the held-bytes budget kept only 8 of them in
        flight after the limit had grown, and a file outlives the climb (issue 28, round 5)."""
        if self._whole(size):
            return [(0, 0, size)]
        return self._cut(size)

    def _cut(self, size: int) -> list[tuple[int, int, int]]:
        return layout.upload_parts(size, max(1, self.uploads.ceiling), self.saver.threshold)

    def _read_hashed(
        self, entry: mf.Entry, parts: list[tuple[int, int, int]]
    ) -> tuple[list[bytes], str]:
        path = self.tree.source(entry)
        hasher = hashlib.sha256()
        chunks: list[bytes] = []
        with sources.source(self.tree, entry) as fd:
            for _number, offset, length in parts:
                data = sources.read_at(fd, offset, length, path)
                hasher.update(data)
                chunks.append(data)
            if os.pread(fd, 1, entry.size):
                raise SourceChanged(path)
        return chunks, hasher.hexdigest()

    def _streamed(self, entry: mf.Entry) -> None:
        """A file over the budget: its name is known (hashed), now send it if the store lacks it,
        reading it again in order; the upload completes only if these bytes hash to the name."""
        key = layout.blob_key(entry.sha256)
        with self.uploads.slot():
            if not self._claim(entry) or self._present(entry, key):
                return
            # In parts even below the multipart threshold: a whole PUT of bytes we cannot hold
            # would be visible before they could be hashed again. A store without parts (the
            # file store) checks the bytes it copied in against the name before publishing.
            upload = self.store.multipart(key) if self.in_parts else None
            if upload is None:
                self._upload_whole(entry, key)
                return
        path = self.tree.source(entry)
        parts = self._cut(entry.size)
        self._open(key, cast(_Parts, upload), len(parts))
        hasher = hashlib.sha256()
        with sources.source(self.tree, entry) as fd:
            for number, offset, length in parts:
                self.budget.take(length)
                data = sources.read_at(fd, offset, length, path)
                hasher.update(data)
                last = number == len(parts)
                if last and (os.pread(fd, 1, entry.size) or hasher.hexdigest() != entry.sha256):
                    self.budget.give(length)
                    raise SourceChanged(path)
                self.pool.submit(laneless(self._part, entry, key, number, data))

    def _upload_whole(self, entry: mf.Entry, key: str) -> None:
        """A store without parts copies the file in: from the descriptor checked to be the
        file the scan saw where the store takes one (the file store's ``upload_fd``)."""
        path = self.tree.source(entry)
        upload_fd = getattr(self.store, "upload_fd", None)
        if upload_fd is None:
            self.store.upload_file(key, path, entry.size, self._sent, entry.sha256)
        else:
            with sources.source(self.tree, entry) as fd:
                upload_fd(key, fd, path, entry.size, self._sent, entry.sha256)
        self.saver.stats.add(data_bytes=entry.size, blobs=1)

    # ----- uploads, in the pool under the controller ------------------------------------------
    def _claim(self, entry: mf.Entry) -> bool:
        """First file with this content: look it up and send it; later ones ride along."""
        with self.lock:
            if entry.sha256 in self.claimed:
                return False
            self.claimed.add(entry.sha256)
            return True

    def _present(self, entry: mf.Entry, key: str) -> bool:
        info = self.saver.head(key, entry.size)
        if info is None:
            return False
        if not self.dry_run:
            self.saver.refresh(info)
        if self.meter:
            self.meter.advance(entry.size)
        return True

    def _look_up(self, entry: mf.Entry) -> None:
        """A dry run: what a real save would send."""
        if self._claim(entry) and not self._present(entry, layout.blob_key(entry.sha256)):
            self.saver.stats.add(data_bytes=entry.size, blobs=1)

    def _send_held(self, entry: mf.Entry, chunks: list[bytes]) -> None:
        key = layout.blob_key(entry.sha256)
        if not self._claim(entry) or self._present(entry, key):
            self.budget.give(entry.size)
            return
        if len(chunks) == 1:
            self._put_whole(entry, key, chunks[0])
            return
        upload = cast("_Parts | None", self.store.multipart(key))
        if upload is None:
            self._put_whole(entry, key, b"".join(chunks))
            return
        self._open(key, upload, len(chunks))
        for number, data in enumerate(chunks, start=1):
            self.pool.submit(laneless(self._part, entry, key, number, data))

    def _put_whole(self, entry: mf.Entry, key: str, data: bytes) -> None:
        try:
            put_content(self.store, key, data)
        except StoreError as exc:
            if "too large" in exc.message:
                exc.message += f" ({entry.size:,} bytes in one PUT)"
            raise
        finally:
            self.budget.give(entry.size)
        self._sent(len(data))
        self.saver.stats.add(data_bytes=entry.size, blobs=1)

    def _open(self, key: str, upload: _Parts, parts: int) -> None:
        with self.lock:
            self.open[key], self.left[key] = upload, parts

    def _part(self, entry: mf.Entry, key: str, number: int, data: bytes) -> None:
        try:
            self.open[key].send_bytes(number, data, self.uploads.record)
        finally:
            self.budget.give(len(data))
        if self.meter:
            self.meter.advance(len(data))
        with self.lock:
            self.left[key] -= 1
            last = self.left[key] == 0
        if last:
            self.open[key].complete()
            with self.lock:
                del self.open[key]
            self.saver.stats.add(data_bytes=entry.size, blobs=1)

    def _sent(self, n: int) -> None:
        self.uploads.record(n)
        if self.meter:
            self.meter.advance(n)


# Packs are built in memory (up to PACK_TARGET each): this many may be in flight at once.
PACKS_IN_FLIGHT = 6
# The most a failed save waits for its packs in flight once its stop flag is set (their
# requests then end at once; a file store's local copy of one pack is what may take a while).
PACK_GRACE_S = 5.0


class _PackUploads:
    """Packs sent as they fill, at most PACKS_IN_FLIGHT held in memory at once."""

    def __init__(self, saver: Saver, dry_run: bool) -> None:
        self.saver, self.dry_run = saver, dry_run
        self.builder = PackBuilder()
        self.pool = ThreadPoolExecutor(max_workers=PACKS_IN_FLIGHT, thread_name_prefix="gpuci-pack")
        self.slots = threading.Semaphore(PACKS_IN_FLIGHT)
        self.futures: list[Future] = []

    def add(self, entry: mf.Entry, data: bytes) -> None:
        if self.builder.add(entry, data):
            self.flush()

    def flush(self) -> None:
        data, members = self.builder.take()
        self.slots.acquire()
        self.futures.append(self.pool.submit(self._send, data, members))

    def finish(self) -> None:
        if self.builder:
            self.flush()
        for future in self.futures:
            future.result()

    def close(self) -> None:
        self.pool.shutdown()

    def stop(self, stop: threading.Event) -> None:
        """A failed or interrupted save: set its stop flag (the packs' requests in flight end
        at once, none is sent after), drop the packs not started and wait for those in flight,
        :data:`PACK_GRACE_S` at most. Left running, a pack between its checks sent its PUT
        after the save had failed, once :meth:`BlobUploads._abort_open` made a fresh, unset
        flag the store's current one."""
        stop.set()
        self.pool.shutdown(wait=False, cancel_futures=True)
        wait(self.futures, timeout=PACK_GRACE_S)

    def _send(self, data: bytes, members: list[mf.Entry]) -> None:
        saver = self.saver
        try:
            digest = hashlib.sha256(data).hexdigest()
            for entry in members:
                entry.pack = digest
            key = layout.pack_key(digest)
            with saver.uploads.slot():
                info = saver.head(key, len(data))
                if info is None:
                    if not self.dry_run:
                        put_content(saver.store, key, data)
                        saver.uploads.record(len(data))
                    saver.stats.add(data_bytes=len(data), packs=1)
                elif not self.dry_run:
                    saver.refresh(info)  # an old pack this save now names: keep it from prune
            if saver.tier is not None and saver.tier.keeps_runs and not self.dry_run:
                saver.tier.runs.keep(digest, data)  # the pack as one run: one file, not one each
        finally:
            self.slots.release()


def pack_small(
    saver: Saver,
    tree: Tree,
    small: list[mf.Entry],
    known: dict[str, mf.Entry],
    dry_run: bool,
    stop: threading.Event,
) -> None:
    """Hash every small file and pack those no known pack holds; packs go up as they fill.
    Where the tier keeps runs, the files found in stored packs go in as runs of those packs.
    ``stop`` is the save's stop flag (its uploads' own), set here when the packs fail."""
    packs = _PackUploads(saver, dry_run)
    tier = None if dry_run else saver.tier
    reused = _ReusedRuns(tier) if tier is not None and tier.keeps_runs else None
    with throttle_signals(saver.store, saver.uploads):
        try:
            for entry in small:
                data = sources.read_small(tree, entry)
                entry.sha256 = hashlib.sha256(data).hexdigest()
                if tier is not None and not tier.keeps_runs:
                    tier.keep(entry.sha256, (data,))  # link mode: a blob per file
                reuse = known.get(entry.sha256)
                if reuse is not None:
                    entry.pack, entry.offset = reuse.pack, reuse.offset
                    saver.stats.add(reused_files=1)
                    if reused is not None:
                        reused.add(entry, data)
                    continue
                packs.add(entry, data)
            packs.finish()
            if reused is not None:
                reused.flush()
        except BaseException:
            packs.stop(stop)
            raise
        packs.close()


class _ReusedRuns:
    """The small files a save found in packs already stored, kept in the tier as runs of
    those packs: each file's bytes, just hashed to its digest, at its offset; neighbours in one
    run. At most :data:`HELD_BYTES` wait at a time (then the runs so far are written)."""

    def __init__(self, tier: LocalTier) -> None:
        self.tier = tier
        self.waiting: dict[str, dict[int, bytes]] = {}
        self.held = 0

    def add(self, entry: mf.Entry, data: bytes) -> None:
        self.waiting.setdefault(entry.pack, {})[entry.offset] = data
        self.held += len(data)
        if self.held >= HELD_BYTES:
            self.flush()

    def flush(self) -> None:
        for pack, by_offset in self.waiting.items():
            start, run = -1, bytearray()
            for offset, data in sorted(by_offset.items()):
                if offset != start + len(run):  # not the next neighbour: the run so far is done
                    self._keep(pack, start, run)
                    start, run = offset, bytearray()
                run += data
            self._keep(pack, start, run)
        self.waiting, self.held = {}, 0

    def _keep(self, pack: str, start: int, run: bytearray) -> None:
        if run:
            self.tier.runs.keep(pack, bytes(run), start)
