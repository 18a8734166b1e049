"""The save's small files: read, hashed and packed together (a few requests for thousands of
files); a file whose bytes a pack the store still has already holds is not sent again."""

from __future__ import annotations

import hashlib
import threading
from concurrent.futures import Future, ThreadPoolExecutor

from gpuci.cache import layout
from gpuci.cache import manifest as mf
from gpuci.cache.common import throttle_signals
from gpuci.cache.packs import PackBuilder
from gpuci.cache.save_blobs import put_content
from gpuci.cache.saver import Saver
from gpuci.cache.store import SourceChanged
from gpuci.cache.tree import Tree

# Packs are built in memory (up to PACK_TARGET each): this many may be in flight at once.
PACKS_IN_FLIGHT = 6


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
        self.pool.shutdown(wait=True, cancel_futures=True)

    def _send(self, data: bytes, members: list[mf.Entry]) -> None:
        saver = self.saver
        try:
            digest = hashlib.sha256(data).hexdigest()
            for entry in members:
                entry.pack = digest
            key = layout.pack_key(digest)
            with saver.uploads.slot():
                if saver.head(key) is None:
                    if not self.dry_run:
                        put_content(saver.store, key, data)
                        saver.uploads.record(len(data))
                    saver.stats.add(data_bytes=len(data), packs=1)
        finally:
            self.slots.release()


def read_small(tree: Tree, entry: mf.Entry) -> bytes:
    """A small file's bytes, once; its size must still be the one the scan saw."""
    data = tree.source(entry).read_bytes()
    if len(data) != entry.size:
        raise SourceChanged(tree.source(entry))
    return data


def pack_small(
    saver: Saver, tree: Tree, small: list[mf.Entry], known: dict[str, mf.Entry], dry_run: bool
) -> None:
    """Hash every small file and pack those no known pack holds; packs go up as they fill."""
    packs = _PackUploads(saver, dry_run)
    with throttle_signals(saver.store, saver.uploads):
        try:
            for entry in small:
                data = read_small(tree, entry)
                entry.sha256 = hashlib.sha256(data).hexdigest()
                reuse = known.get(entry.sha256)
                if reuse is not None:
                    entry.pack, entry.offset = reuse.pack, reuse.offset
                    saver.stats.add(reused_files=1)
                    continue
                packs.add(entry, data)
            packs.finish()
        finally:
            packs.close()
