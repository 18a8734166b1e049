"""The on-disk side of a download: ``<dest>.incomplete``, its sidecar, and a fast writer.

``Partial`` is the resumable state: the bytes plus ``<dest>.incomplete.json``, which names the
URL they came from (its sha256, and the URL without query or password for humans) and the
ETag / Last-Modified they came with. It is hashed as it grows so the final sha256 costs no
second read. :meth:`Partial.sink` moves writing and hashing off the thread that reads the
socket (:class:`gpuci.ranged._sink.HelperSink`, the engine's one sink).

A segmented download (:mod:`gpuci.fetch._segments`) writes several ranges of the file at once,
so the bytes on disk are not one prefix: the sidecar then also lists ``segments``, the
``[start, end)`` ranges that are written, and a resumed run asks only for the holes between
them. The sha256 is a :class:`~gpuci.hashcursor.HashCursor`: bytes that land ahead of it are
read back from the file when it gets there.

The folder may be shared with other jobs, so a partial found on disk is an input, not ours
until checked: both files must be regular files (opened ``O_NOFOLLOW``, so a planted symlink
is never written or read through), owned by the current user, not writable by group or
others, and the sidecar must name this URL. Anything else is deleted (``unlink`` removes a
link, never its target) and the download starts over in a file created ``O_EXCL``, so we
never append to a file someone else made. :func:`gpuci.ownership.current_uid` is the owner check's
notion of "us"; tests replace it to play another user.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuci import ownership, untrusted_json
from gpuci.errors import FetchError
from gpuci.fetch._policy import RangeMismatch
from gpuci.fetch._urls import public_url
from gpuci.files import incomplete_path
from gpuci.hashcursor import HashCursor
from gpuci.ranged._extents import merge
from gpuci.ranged._plan import Segment
from gpuci.ranged._sink import HelperSink

META = ".incomplete.json"  # the URL and validator (ETag / Last-Modified) those bytes came with
_META_MAX = 64 << 10  # a sidecar is a few hundred bytes; a planted huge one is not read
_WRITE_BLOCK = 1 << 20  # network chunks (64 KiB) are batched this big for the writer
_IOV_MAX = 1024
_WRITE_QUEUE = 16  # batches written or hashed meanwhile: ~16 MiB per download at most
_MAX_EXTENTS = 1024  # written ranges a sidecar may list (a segmented run has a few dozen)
_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC


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
    size: int  # bytes on disk worth keeping (all ranges together)
    extents: tuple[tuple[int, int], ...] | None = None  # [start, end) written; None: [0, size)


def _trusted(st: os.stat_result, uid: int) -> bool:
    """Ours alone (:func:`gpuci.ownership.not_ours_alone`): the tier's rule for its blobs."""
    return ownership.not_ours_alone(st, uid) is None


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
    try:  # ours, but in a folder a job can write: read as any untrusted JSON
        return untrusted_json.parse_object(data, _META_MAX)
    except untrusted_json.Unusable:
        return None


def inspect(
    dest: Path, url: str, max_bytes: int | None = None, uid: int | None = None
) -> Found | None:
    """The resumable partial for ``url`` at ``dest``, or None; reads only (the dry run uses it)."""
    uid = ownership.current_uid() if uid is None else uid
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
    if "segments" not in record:
        return Found(validator, total, st.st_size)
    extents = _extents(record.get("segments"), total, st.st_size)
    if extents is None:
        return None
    return Found(validator, total, sum(e - s for s, e in extents), extents)


def _extents(value: object, total: int | None, on_disk: int) -> tuple[tuple[int, int], ...] | None:
    """The sidecar's written ranges, if they make sense: sorted, disjoint, inside the file."""
    if total is None or not isinstance(value, list) or len(value) > _MAX_EXTENTS:
        return None
    out: list[tuple[int, int]] = []
    last = 0
    for item in value:
        if (
            not isinstance(item, list)
            or len(item) != 2
            or not all(isinstance(x, int) and not isinstance(x, bool) for x in item)
        ):
            return None
        start, end = item
        if start < last or end <= start or end > min(total, on_disk):
            return None
        out.append((start, end))
        last = end
    return tuple(out)


def _sync_folder(folder: Path) -> None:
    """Flush a rename in ``folder`` to disk (best effort: some filesystems refuse it)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


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
        self.uid = ownership.current_uid() if uid is None else uid
        self.validator: str | None = None
        self.total: int | None = None
        self._fd: int | None = None
        self._identity: tuple[int, int] | None = None  # (st_dev, st_ino) of the file we trust
        self.cursor = HashCursor(self._read_into)
        self.size = 0  # the written prefix [0, size): where a single connection continues
        self.extents: list[tuple[int, int]] = []  # written ranges beyond it (segmented runs)
        # Ranges a retry (or this run, from an earlier one) went on from instead of fetching
        # again: what ``resumed-bytes`` reports, each byte once, forgotten with the bytes.
        self._kept: list[tuple[int, int]] = []
        self._kept_lock = threading.Lock()
        self._load(max_bytes)

    def _load(self, max_bytes: int | None) -> None:
        """Keep bytes from an earlier run only when every check passes; else start over.

        The written prefix is hashed now (read back through the cursor), a segmented run's
        ranges further on when the cursor reaches them."""
        found = inspect(self.dest, self.url, max_bytes, self.uid)
        if found is None:
            self.reset()
            return
        try:  # the name may have changed since lstat (a FIFO swapped in must not hang the
            # open: O_NONBLOCK), so check what we actually opened
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | _NOFOLLOW)
        except OSError:
            self.reset()
            return
        st = os.fstat(fd)
        extents = found.extents if found.extents is not None else ((0, found.size),)
        if not _trusted(st, self.uid) or (extents and st.st_size < extents[-1][1]):
            os.close(fd)
            self.reset()
            return
        self._fd = fd  # read-only until open_for_append: the cursor reads through it
        self._identity = (st.st_dev, st.st_ino)
        self.validator, self.total = found.validator, found.total
        for start, end in extents:
            self.cursor.landed_on_disk(start, end - start)
        self.size = self.cursor.position
        self.extents = [(s, e) for s, e in extents if e > self.size]
        self.close()

    def _read_into(self, buffer: memoryview, offset: int, length: int) -> int:
        """The cursor reads back bytes that landed ahead of it (from the page cache)."""
        if self._fd is None:
            return 0
        return os.preadv(self._fd, [buffer[:length]], offset)

    def bind(self, url: str) -> None:
        """Switch to another source (a mirror): bytes from one URL never continue another's."""
        if url_key(url) != url_key(self.url):
            self.reset()
            self.url = url

    def reset(self) -> None:
        """Start over: the bytes on disk belong to no version of this URL we can name."""
        self.discard()
        self.validator, self.total, self.size = None, None, 0
        self.extents = []
        self.forget_kept(0)
        self.cursor = HashCursor(self._read_into)
        self._identity = None

    def adopt(self, validator: str | None, total: int | None) -> None:
        self.validator, self.total = validator, total
        if validator:
            self.save(self.written() if self.extents else None)
        else:
            _remove(self.meta)

    def keep(self, ranges: list[tuple[int, int]]) -> None:
        """A retry goes on from these ``[start, end)`` ranges on disk instead of fetching them
        again (a byte kept by two retries counts once)."""
        with self._kept_lock:
            self._kept = merge([*self._kept, *ranges])

    def forget_kept(self, end: int) -> None:
        """Bytes from ``end`` on were thrown away (a reset, a drop): they were not kept."""
        with self._kept_lock:
            self._kept = [(s, min(e, end)) for s, e in self._kept if s < end]

    @property
    def resumed(self) -> int:
        """Bytes of this file kept across retries and runs, each once, at most the file."""
        with self._kept_lock:
            kept = sum(e - s for s, e in self._kept)
        return kept if self.total is None else min(kept, self.total)

    def held(self) -> int:
        """Bytes on disk worth keeping: the prefix and the segments beyond it."""
        return self.size + sum(e - s for s, e in self.extents)

    def written(self) -> list[tuple[int, int]]:
        """Every range on disk worth keeping: the prefix and the segments beyond it."""
        return merge([(0, self.size), *self.extents])

    def drop_extents(self) -> None:
        """Keep only the prefix: one connection continues from it and rewrites the rest in
        order (the file is cut back first, so a sidecar without segments stays truthful)."""
        if not self.extents:
            return
        self.extents = []
        self.forget_kept(self.size)
        self.cursor.forget_ahead()
        self.open_for_append()
        assert self._fd is not None
        os.ftruncate(self._fd, self.size)
        self.save()

    def save(self, extents: list[tuple[int, int]] | None = None, *, durable: bool = False) -> None:
        """Write the sidecar; ``extents`` (a segmented run) lists every written range.

        Every range it claims was written (``pwritev`` returned) before this call, so a killed
        process (the page cache outlives it) resumes from the truth. ``durable`` also survives
        a crash of the machine: the data is flushed (``fdatasync``) before the record that
        claims it, and the record itself before its rename; otherwise a power cut could leave
        a sidecar claiming ranges that never reached the disk (read back as zeros)."""
        record: dict[str, Any] = {
            "url": public_url(self.url),
            "url_sha256": url_key(self.url),
            "validator": self.validator,
            "total": self.total,
        }
        if extents is not None:
            record["segments"] = [list(e) for e in merge(extents)]
        if durable and self._fd is not None:
            os.fdatasync(self._fd)
        self._write_meta(json.dumps(record).encode(), durable)

    def _write_meta(self, payload: bytes, durable: bool = False) -> None:
        """A fresh file (``mkstemp``: ``O_EXCL``, mode 0600) renamed over the name: a planted
        link at the name is replaced, never written through, and a reader (or a kill at any
        moment) sees the old record or the new one, never half of one."""
        fd, temp = tempfile.mkstemp(prefix=self.meta.name + ".", dir=self.meta.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(payload)
                if durable:
                    handle.flush()
                    os.fsync(handle.fileno())
            os.replace(temp, self.meta)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise
        if durable:
            _sync_folder(self.meta.parent)

    def open_for_append(self) -> None:
        """Open the bytes for this attempt: our own file, continued, or a new one (``O_EXCL``).

        Writes go to explicit offsets (``pwritev``), so several segments can share the file."""
        if self._fd is not None:
            return
        if self.size == 0 and not self.extents:
            _remove(self.path)  # whatever sits there is not ours to append to
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o644)
            st = os.fstat(self._fd)
            self._identity = (st.st_dev, st.st_ino)
            return
        fd = os.open(self.path, os.O_RDWR | _NOFOLLOW)
        st = os.fstat(fd)
        on_disk = max([self.size, *(e for _, e in self.extents)])
        if (st.st_dev, st.st_ino) != self._identity or st.st_size < on_disk:
            os.close(fd)
            self.reset()
            raise RangeMismatch(f"{self.path} changed on disk between attempts; starting over")
        self._fd = fd

    def place(self) -> None:
        """Rename the verified bytes to ``dest``; what lands there must be the file we wrote."""
        self.open_for_append()  # reopened (identity-checked) when closed: the cut must run
        if self._fd is not None and os.fstat(self._fd).st_size != self.cursor.position:
            os.ftruncate(self._fd, self.cursor.position)  # only hashed bytes get the name
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

    def write_at(self, offset: int, chunks: list[bytes]) -> int:
        """Write chunks at ``offset`` with as few syscalls as possible (``pwritev``, no join)."""
        if self._fd is None:
            raise RuntimeError("write_at before open_for_append")
        view = [memoryview(c) for c in chunks]
        written = 0
        while view:
            done = os.pwritev(self._fd, view[:_IOV_MAX], offset + written)
            written += done
            while view and done >= len(view[0]):
                done -= len(view[0])
                view.pop(0)
            if view and done:
                view[0] = view[0][done:]
        return written

    def sink(self, seg: Segment, depth: int = _WRITE_QUEUE) -> HelperSink:
        """Where ``seg``'s bytes go: network chunks batched to ``_WRITE_BLOCK`` for one
        ``pwritev`` on a writer thread, each batch then hashed on a hasher thread (the cursor
        may read it back from the file, so only once written); ``depth`` batches in flight."""
        return HelperSink(
            seg,
            lambda block, offset: self.write_at(offset, block),
            then=lambda block, offset: self.cursor.landed(offset, block),
            depth=depth,
            batch=_WRITE_BLOCK,
        )

    def digest(self) -> str:
        return self.cursor.hexdigest()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def discard(self) -> None:
        self.close()
        _remove(self.path)
        _remove(self.meta)
