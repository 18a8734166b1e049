"""How the local tier moves bytes: the kernel's copy chain (reflink, ``copy_file_range``,
``sendfile``, then read/write), each method handing over to the next where the filesystem
refuses it, and the one-pass copy-and-hash that fills the tier with only what was hashed.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

from gpuci import files
from gpuci.cache import _layout as layout

if TYPE_CHECKING:
    from threading import Event

# A new file of ours, never through a link, never over an existing name.
CREATE_NEW = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
FICLONE = 0x40049409  # linux/fs.h: _IOW(0x94, 9, int)
# Bytes per read when hashing: small enough that a chunk is still in the CPU cache when it is
# written out: several times faster than 4 MiB reads (docs/benchmarks.md, "cache-weights:
# trust modes of the runner-local tier"; the figure: docs/benchmarks.md#figures-behind-the-code).
HASH_CHUNK = 64 << 10


class Mismatch(Exception):
    """verify mode: the placed bytes did not hash to the blob's name."""


def reflink(src: int, dst: int) -> bool:
    """Copy-on-write clone (btrfs, XFS, bcachefs): an independent file; False where unsupported."""
    try:
        fcntl.ioctl(dst, FICLONE, src)
        return True
    except OSError:
        return False


# One kernel copy call moves up to this many bytes (Linux caps a call near 2 GiB): a model
# shard in one or two calls, as ``cp`` does, instead of a call per 4 MiB.
COPY_CALL = 1 << 30
# A copy method that the filesystem pair cannot do answers with one of these (cross-device
# before Linux 5.3 or between some filesystems, no such call, FUSE or overlayfs refusing): the
# next method takes over at the same offset. Anything else (EIO, ENOSPC) is a real failure.
_NEXT_METHOD = {errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP}


def copy_file_range(src: int, dst: int, offset: int, count: int) -> int:
    """In-kernel copy (a server-side or reflink copy where the filesystem offers one)."""
    return os.copy_file_range(src, dst, count, offset, offset)


def sendfile(src: int, dst: int, offset: int, count: int) -> int:
    """In-kernel copy through the page cache; writes at ``dst``'s position (set by the caller)."""
    return os.sendfile(dst, src, offset, count)


def copy_fd(src: int, dst: int, size: int) -> str:
    """Copy bytes ``[0, size)`` without passing them through Python; returns the method used.

    ``copy_file_range``, else ``sendfile``, else a plain read/write loop, each taking over where
    the last one stopped (also when a kernel call reports the end early, as some filesystems'
    copy_file_range did). Raises :class:`Mismatch` when even read() finds the source short: a
    short file is never left where a whole one is expected.
    """
    offset = 0
    for how, step in (("copy_file_range", copy_file_range), ("sendfile", sendfile)):
        try:
            if how == "sendfile":
                os.lseek(dst, offset, os.SEEK_SET)
            while offset < size:
                n = step(src, dst, offset, min(COPY_CALL, size - offset))
                if n == 0:
                    break
                offset += n
        except OSError as exc:
            if exc.errno not in _NEXT_METHOD:
                raise
            continue
        if offset == size:
            return how
    buf = bytearray(min(size - offset, layout.IO_CHUNK) or 1)
    view = memoryview(buf)
    while offset < size:
        n = os.preadv(src, [view[: min(len(buf), size - offset)]], offset)
        if n == 0:
            break
        done = 0
        while done < n:
            done += os.pwrite(dst, view[done:n], offset + done)
        offset += n
    if offset != size:
        raise Mismatch(f"ends after {offset} of {size} bytes")
    return "read-write"


def copy_hashing(src: int, dst: int, stop: Event | None = None, size: int | None = None) -> str:
    """Copy from offset 0 and hash the same bytes in one pass: the digest of what was written.
    ``stop`` set ends it at the next chunk (:func:`_check`); ``size``: at most that many bytes,
    an OSError (EFBIG) when the file reads on past them (:func:`gpuci.files.hash_fd`)."""

    def write(block: memoryview, offset: int) -> None:
        _check(stop)
        done = 0
        while done < len(block):
            done += os.pwrite(dst, block[done:], offset + done)

    return files.hash_fd(src, chunk=HASH_CHUNK, each=write, size=size)[0].hexdigest()


def hash_fd(fd: int, stop: Event | None = None, size: int | None = None) -> str:
    each = None if stop is None else lambda _block, _offset: _check(stop)
    return files.hash_fd(fd, chunk=HASH_CHUNK, each=each, size=size)[0].hexdigest()


def _check(stop: Event | None) -> None:
    """A failed or interrupted save's copy into the tier ends here, a chunk from where it
    was: an OSError, so the caller drops its temp file as for any failed copy (a cache never
    fails)."""
    if stop is not None and stop.is_set():
        raise InterruptedError(errno.EINTR, "the copy was stopped")


def cut_hashed(run: int, at: int, size: int, digest: str, dest: Path, mode: int) -> str | None:
    """Write ``size`` bytes of the open run from ``at`` to a new file ``dest`` (``mode``),
    hashing them on the way. Returns None when placed; else why the run is not to be served
    (bytes that do not hash to ``digest``, or a read that failed: the store's copy is used, a
    cache never fails a job), with nothing left at ``dest``. Writing ``dest`` may fail: that is
    the job's disk. A slice at a time: a manifest may call a file of any size packed."""
    hasher = hashlib.sha256()
    out = os.open(dest, CREATE_NEW, 0o600)
    why = "bytes that do not hash to the manifest's"
    try:
        done = 0
        while done < size:
            try:
                data = os.pread(run, min(layout.IO_CHUNK, size - done), at + done)
            except OSError as exc:
                why = f"it cannot be read: {exc.strerror or exc}"
                break
            if not data:  # the run shrank since its size was checked
                break
            hasher.update(data)
            files.write_all(out, data)
            done += len(data)
        if done == size and hasher.hexdigest() == digest:
            os.fchmod(out, mode & 0o777)
            return None
    finally:
        os.close(out)
    os.unlink(dest)
    return why
