"""The save's large files: hashed, then the blobs the store lacks sent (big ones in parts),
every request under the save's concurrency controller."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable

from gpuci.cache import layout
from gpuci.cache import manifest as mf
from gpuci.cache.common import throttle_signals
from gpuci.cache.saver import Saver
from gpuci.cache.store import MultipartUpload
from gpuci.cache.transfer import WorkPool, laneless, parallel
from gpuci.cache.tree import Tree
from gpuci.errors import InputError


def _hash_file(path, size: int) -> str:
    hasher = hashlib.sha256()
    buf = memoryview(bytearray(layout.IO_CHUNK))
    done = 0
    with open(path, "rb", buffering=0) as handle:
        while True:
            n = handle.readinto(buf)
            if not n:
                break
            hasher.update(buf[:n])
            done += n
    if done != size:
        raise InputError(
            f"{path} changed size while it was being saved",
            hint="save after the step that writes the tree has finished",
        )
    return hasher.hexdigest()


def hash_large(saver: Saver, tree: Tree, large: list[mf.Entry]) -> None:
    meter = saver.rt.progress("hash", sum(e.size for e in large)) if large else None

    def one(entry: mf.Entry) -> None:
        entry.sha256 = _hash_file(tree.source(entry), entry.size)
        if meter:
            meter.advance(entry.size)

    parallel(one, large, min(saver.workers, 4))
    if meter:
        meter.close()


def upload_large(saver: Saver, tree: Tree, large: list[mf.Entry], dry_run: bool) -> None:
    """Send the blobs the store lacks: big ones in parts, all under the controller."""
    unique = {e.sha256: e for e in large}
    missing: list[mf.Entry] = []
    lock = threading.Lock()

    def check(entry: mf.Entry) -> None:
        info = saver.store.head(layout.blob_key(entry.sha256))
        if info is None:
            with lock:
                missing.append(entry)
        elif not dry_run:
            saver.refresh(info)

    parallel(check, list(unique.values()), saver.workers)
    total = sum(e.size for e in missing)
    if dry_run or not missing:
        saver.stats.add(data_bytes=total, blobs=len(missing))
        return
    meter = saver.rt.progress("upload", total)
    try:
        with throttle_signals(saver.store, saver.uploads):
            _BlobUploads(saver, tree, meter.advance).run(missing)
    finally:
        meter.close()


class _BlobUploads:
    """The blobs a save sends, one task per small blob and per part of a big one, all in one
    pool under the save's controller; a multipart upload completes when its last part lands,
    and every upload still open when the save fails is aborted."""

    def __init__(self, saver: Saver, tree: Tree, on_bytes: Callable[[int], None]) -> None:
        self.saver = saver
        self.store = saver.store
        self.tree = tree
        self.on_bytes = on_bytes
        self.pool = WorkPool(saver.uploads)
        self.open: dict[str, MultipartUpload] = {}  # blob key -> upload not yet complete
        self.left: dict[str, int] = {}  # blob key -> parts still to send
        self.lock = threading.Lock()

    def run(self, missing: list[mf.Entry]) -> None:
        for entry in missing:
            task = self._start if entry.size >= self.saver.threshold else self._whole
            self.pool.submit(laneless(task, entry))
        try:
            self.pool.run()
        finally:
            for upload in self.open.values():
                upload.abort()

    def _sent(self, n: int) -> None:
        self.saver.uploads.record(n)
        self.on_bytes(n)

    def _whole(self, entry: mf.Entry) -> None:
        key = layout.blob_key(entry.sha256)
        self.store.upload_file(key, self.tree.source(entry), entry.size, self._sent)
        self.saver.stats.add(data_bytes=entry.size, blobs=1)

    def _start(self, entry: mf.Entry) -> None:
        key = layout.blob_key(entry.sha256)
        upload = self.store.multipart(key)
        if upload is None:
            return self._whole(entry)
        parts = layout.upload_parts(entry.size, self.saver.uploads.ceiling, self.saver.threshold)
        with self.lock:
            self.open[key], self.left[key] = upload, len(parts)
        for number, offset, length in parts:
            self.pool.submit(laneless(self._part, entry, key, number, offset, length))
        return None

    def _part(self, entry: mf.Entry, key: str, number: int, offset: int, length: int) -> None:
        upload = self.open[key]
        upload.send(number, self.tree.source(entry), offset, length, self.saver.uploads.record)
        self.on_bytes(length)
        with self.lock:
            self.left[key] -= 1
            last = self.left[key] == 0
        if last:
            upload.complete()
            with self.lock:
                del self.open[key]
            self.saver.stats.add(data_bytes=entry.size, blobs=1)
