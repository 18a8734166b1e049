"""The on-disk side of a download: ``<dest>.incomplete``, its validator, and a fast writer.

``Partial`` is the resumable state (bytes plus the ETag / Last-Modified they came with, in
``<dest>.incomplete.json``), hashed as it grows so the final sha256 costs no second read.
``Sink`` moves writing and hashing off the thread that reads the socket.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import queue
import threading
from collections.abc import Callable
from pathlib import Path

from gpuci.files import hash_file, incomplete_path

META = ".incomplete.json"  # the validator (ETag / Last-Modified) those bytes came with
_WRITE_BLOCK = 1 << 20  # network chunks (64 KiB) are batched this big for the writer
_IOV_MAX = 1024
_WRITE_QUEUE = 8  # batches in flight: bounds memory at ~8 MiB per download


class Partial:
    """``<dest>.incomplete`` plus its validator, hashed as it grows (resumable across runs)."""

    def __init__(self, dest: Path) -> None:
        self.path = incomplete_path(dest)
        self.meta = dest.with_name(dest.name + META)
        self.validator: str | None = None
        self.total: int | None = None
        self._fd: int | None = None
        self._hasher = hashlib.sha256()
        self.size = 0
        self._load()

    def _load(self) -> None:
        """Keep bytes from an earlier run only when we know which version they belong to."""
        try:
            meta = json.loads(self.meta.read_text(encoding="utf-8"))
            self.validator, self.total = meta.get("validator"), meta.get("total")
            self.size = self.path.stat().st_size
        except (OSError, ValueError, AttributeError):
            self.validator, self.total, self.size = None, None, 0
        if not self.validator or (self.total is not None and self.size > self.total):
            self.reset()
        elif self.size:
            self._hasher, self.size = hash_file(self.path)

    def reset(self) -> None:
        """Start over: the bytes on disk belong to no version we can name."""
        self.discard()
        self.validator, self.total, self.size = None, None, 0
        self._hasher = hashlib.sha256()

    def adopt(self, validator: str | None, total: int | None) -> None:
        self.validator, self.total = validator, total
        if validator:
            self.meta.write_text(json.dumps({"validator": validator, "total": total}))
        else:
            with contextlib.suppress(FileNotFoundError):
                self.meta.unlink()

    def write_block(self, chunks: list[bytes]) -> None:
        """Append chunks with as few syscalls as possible (``writev``, no joining copy)."""
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        view = [memoryview(c) for c in chunks]
        while view:
            done = os.writev(self._fd, view[:_IOV_MAX])
            self.size += done
            while view and done >= len(view[0]):
                done -= len(view[0])
                view.pop(0)
            if view and done:
                view[0] = view[0][done:]

    def hash_block(self, chunks: list[bytes]) -> None:
        for chunk in chunks:
            self._hasher.update(chunk)

    def digest(self) -> str:
        return self._hasher.hexdigest()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def discard(self) -> None:
        self.close()
        for path in (self.path, self.meta):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


class Sink:
    """Writes on one helper thread and hashes on another while the caller reads the socket.

    Measured on loopback (scripts/bench_fetch.py, docs/benchmarks.md): reading, hashing and
    writing 64 KiB chunks in one thread ran at about half of curl's rate, and write+hash on one
    helper still bound the pipeline. Handing 1 MiB batches of chunks to a writer (``writev``)
    and a hasher (both release the GIL) overlaps disk, hash and network. ``close``
    flushes what arrived, so bytes received before a dropped connection are kept.
    """

    def __init__(self, partial: Partial) -> None:
        self._partial = partial
        self._pending: list[bytes] = []
        self._pending_size = 0
        self._error: BaseException | None = None
        self._queues: list[queue.Queue[list[bytes] | None]] = []
        self._threads: list[threading.Thread] = []
        for name, step in (("writer", partial.write_block), ("hasher", partial.hash_block)):
            q: queue.Queue[list[bytes] | None] = queue.Queue(_WRITE_QUEUE)
            thread = threading.Thread(
                target=self._drain, args=(q, step), name=f"fetch-{name}", daemon=True
            )
            thread.start()
            self._queues.append(q)
            self._threads.append(thread)

    def _drain(
        self, q: queue.Queue[list[bytes] | None], step: Callable[[list[bytes]], None]
    ) -> None:
        while (block := q.get()) is not None:
            if self._error is None:
                try:
                    step(block)
                except BaseException as exc:  # handed to the reading thread in write/close
                    self._error = exc

    def write(self, chunk: bytes) -> None:
        self._pending.append(chunk)
        self._pending_size += len(chunk)
        if self._pending_size >= _WRITE_BLOCK:
            self._flush()

    def _flush(self) -> None:
        if self._error is not None:
            raise self._error
        if self._pending:
            block, self._pending, self._pending_size = self._pending, [], 0
            for q in self._queues:
                q.put(block)

    def close(self) -> None:
        """Write everything received so far; re-raise a write error (disk full, say)."""
        try:
            self._flush()
        finally:
            for q in self._queues:
                q.put(None)
            for thread in self._threads:
                thread.join()
            self._partial.close()
        if self._error is not None:
            raise self._error
