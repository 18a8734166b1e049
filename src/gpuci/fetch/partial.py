"""The on-disk side of a download: ``<dest>.incomplete``, its sidecar, and a fast writer.

``Partial`` is the resumable state: the bytes plus ``<dest>.incomplete.json``, which names the
URL they came from (its sha256, and the URL without query or password for humans) and the
ETag / Last-Modified they came with. It is hashed as it grows so the final sha256 costs no
second read. ``Sink`` moves writing and hashing off the thread that reads the socket.

The folder may be shared with other jobs, so a partial found on disk is an input, not ours
until checked: both files must be regular files (opened ``O_NOFOLLOW``, so a planted symlink
is never written or read through), owned by the current user, not writable by group or
others, and the sidecar must name this URL. Anything else is deleted (``unlink`` removes a
link, never its target) and the download starts over in a file created ``O_EXCL``, so we
never append to a file someone else made. :func:`current_uid` is the owner check's notion of
"us"; tests replace it to play another user.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import queue
import stat
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuci.errors import FetchError
from gpuci.fetch.policy import RangeMismatch
from gpuci.fetch.urls import public_url
from gpuci.files import incomplete_path

META = ".incomplete.json"  # the URL and validator (ETag / Last-Modified) those bytes came with
_META_MAX = 64 << 10  # a sidecar is a few hundred bytes; a planted huge one is not read
_READ_BLOCK = 1 << 20
_WRITE_BLOCK = 1 << 20  # network chunks (64 KiB) are batched this big for the writer
_IOV_MAX = 1024
_WRITE_QUEUE = 8  # batches in flight: bounds memory at ~8 MiB per download
_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC


def current_uid() -> int:
    """Who a reusable partial must belong to."""
    return os.geteuid()


def url_key(url: str) -> str:
    """What the sidecar ties the bytes to: the full URL, hashed (a query may hold a secret)."""
    return hashlib.sha256(url.encode("utf-8")).hexdigest()


def meta_path(dest: Path) -> Path:
    return dest.with_name(dest.name + META)


class PartialInTheWay(FetchError):
    """Something at ``<dest>.incomplete`` that we may not use and cannot remove."""

    title = "gpu-ci: untrusted partial file"


@dataclass(frozen=True)
class Found:
    """A partial on disk that passed every check: what a resume would start from."""

    validator: str
    total: int | None
    size: int


def _trusted(st: os.stat_result, uid: int) -> bool:
    return stat.S_ISREG(st.st_mode) and st.st_uid == uid and not st.st_mode & 0o022


def _read_meta(meta: Path, uid: int) -> dict[str, Any] | None:
    try:  # O_NONBLOCK: a planted FIFO must not hang the open; fstat refuses it right after
        fd = os.open(meta, os.O_RDONLY | os.O_NONBLOCK | _NOFOLLOW)
    except OSError:
        return None
    try:
        if not _trusted(os.fstat(fd), uid):
            return None
        data = os.read(fd, _META_MAX + 1)
    finally:
        os.close(fd)
    try:
        record = json.loads(data) if len(data) <= _META_MAX else None
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def inspect(
    dest: Path, url: str, max_bytes: int | None = None, uid: int | None = None
) -> Found | None:
    """The resumable partial for ``url`` at ``dest``, or None; reads only (the dry run uses it)."""
    uid = current_uid() if uid is None else uid
    try:
        st = os.lstat(incomplete_path(dest))
    except OSError:
        return None
    if not _trusted(st, uid) or st.st_size == 0:
        return None
    record = _read_meta(meta_path(dest), uid)
    if not record or record.get("url_sha256") != url_key(url):
        return None
    validator, total = record.get("validator"), record.get("total")
    if not isinstance(validator, str) or not validator:
        return None
    if total is not None and (not isinstance(total, int) or st.st_size > total):
        return None
    if max_bytes is not None and st.st_size > max_bytes:
        return None
    return Found(validator, total, st.st_size)


def _remove(path: Path) -> None:
    """Delete a name; a symlink goes, its target stays. A folder or a foreign file: one line."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise PartialInTheWay(
            f"cannot remove {path}, which is not a partial file of ours: {exc.strerror or exc}",
            hint="delete it (another job or user may have planted it), or choose another dest",
        ) from None


class Partial:
    """``<dest>.incomplete`` plus its sidecar, hashed as it grows (resumable across runs)."""

    def __init__(
        self, dest: Path, url: str, *, max_bytes: int | None = None, uid: int | None = None
    ) -> None:
        self.dest = dest
        self.path = incomplete_path(dest)
        self.meta = meta_path(dest)
        self.url = url
        self.uid = current_uid() if uid is None else uid
        self.validator: str | None = None
        self.total: int | None = None
        self._fd: int | None = None
        self._identity: tuple[int, int] | None = None  # (st_dev, st_ino) of the file we trust
        self._hasher = hashlib.sha256()
        self.size = 0
        self._load(max_bytes)

    def _load(self, max_bytes: int | None) -> None:
        """Keep bytes from an earlier run only when every check passes; else start over."""
        found = inspect(self.dest, self.url, max_bytes, self.uid)
        if found is None:
            self.reset()
            return
        try:  # the name may have changed since lstat: check what we actually opened
            fd = os.open(self.path, os.O_RDONLY | _NOFOLLOW)
        except OSError:
            self.reset()
            return
        with os.fdopen(fd, "rb", buffering=0) as handle:
            st = os.fstat(fd)
            if _trusted(st, self.uid) and st.st_size == found.size:
                while block := handle.read(_READ_BLOCK):
                    self._hasher.update(block)
                    self.size += len(block)
                self.validator, self.total = found.validator, found.total
                self._identity = (st.st_dev, st.st_ino)
        if self._identity is None:
            self.reset()

    def bind(self, url: str) -> None:
        """Switch to another source (a mirror): bytes from one URL never continue another's."""
        if url_key(url) != url_key(self.url):
            self.reset()
            self.url = url

    def reset(self) -> None:
        """Start over: the bytes on disk belong to no version of this URL we can name."""
        self.discard()
        self.validator, self.total, self.size = None, None, 0
        self._hasher = hashlib.sha256()
        self._identity = None

    def adopt(self, validator: str | None, total: int | None) -> None:
        self.validator, self.total = validator, total
        if validator:
            record = {
                "url": public_url(self.url),
                "url_sha256": url_key(self.url),
                "validator": validator,
                "total": total,
            }
            self._write_meta(json.dumps(record).encode())
        else:
            _remove(self.meta)

    def _write_meta(self, payload: bytes) -> None:
        """A fresh file (``mkstemp``: ``O_EXCL``, mode 0600) renamed over the name: a planted
        link at the name is replaced, never written through."""
        fd, temp = tempfile.mkstemp(prefix=self.meta.name + ".", dir=self.meta.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(payload)
            os.replace(temp, self.meta)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise

    def open_for_append(self) -> None:
        """Open the bytes for this attempt: our own file, continued, or a new one (``O_EXCL``)."""
        if self._fd is not None:
            return
        if self.size == 0:
            _remove(self.path)  # whatever sits there is not ours to append to
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o644)
            st = os.fstat(self._fd)
            self._identity = (st.st_dev, st.st_ino)
            return
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | _NOFOLLOW)
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != self._identity or st.st_size != self.size:
            os.close(fd)
            self.reset()
            raise RangeMismatch(f"{self.path} changed on disk between attempts; starting over")
        self._fd = fd

    def place(self) -> None:
        """Rename the verified bytes to ``dest``; what lands there must be the file we wrote."""
        if self._identity is None:  # an empty body never opened the file
            self.open_for_append()
        self.close()
        os.replace(self.path, self.dest)
        st = os.lstat(self.dest)
        if (st.st_dev, st.st_ino) != self._identity:
            _remove(self.dest)
            raise PartialInTheWay(
                f"{self.path} was replaced by another file before it was renamed; removed "
                f"{self.dest}",
                hint="download into a folder that only this job can write to",
            )
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.meta)

    def write_block(self, chunks: list[bytes]) -> None:
        """Append chunks with as few syscalls as possible (``writev``, no joining copy)."""
        if self._fd is None:
            raise RuntimeError("write_block before open_for_append")
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
        _remove(self.path)
        _remove(self.meta)


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
