"""Writing large restored files with ``O_DIRECT``: the bytes skip the page cache.

On the 2-core runners this cache is built for, a buffered write of 4 MiB chunks cost many
times the kernel CPU (page allocation, a cache-cold copy, dirty accounting) of an ``O_DIRECT``
write of the same GiB (`dd`: docs/benchmarks.md, "cache-weights (2026-11-29, ..."). The
default buffered path has since become much cheaper (spliced, or written in 256 KiB slices:
"cache-weights: big-file write path" in docs/benchmarks.md), so ``O_DIRECT`` now saves far less.
The price: the restored files are not left warm in the page cache, and a job usually reads its
weights right after restoring them: restore then ``cat`` of every file took longer with
``O_DIRECT`` than buffered (same section). So it is OFF by default:
``GPUCI_CACHE_DIRECT_IO=on`` turns it on for restores whose files are not read soon (a dataset
staged for a later job). Filesystems that refuse ``O_DIRECT`` (tmpfs on older kernels, some
FUSE mounts) fall back to buffered writes on their own.

``O_DIRECT`` wants the buffer address, the file offset and the length aligned to the logical
block size: buffers come from anonymous ``mmap`` (page-aligned), callers write at offsets that
are multiples of :data:`ALIGN`, and the unaligned tail of a file goes through a plain fd.
"""

from __future__ import annotations

import errno
import mmap
import os
import threading
from collections.abc import Mapping
from pathlib import Path

from gpuci import settings

ALIGN = 4096  # a multiple of every logical block size in use (512 B or 4 KiB)
_ON = {"1", "on", "true", "yes"}
_O_DIRECT = getattr(os, "O_DIRECT", 0)


def enabled(environ: Mapping[str, str] | None = None) -> bool:
    return bool(_O_DIRECT) and settings.CACHE_DIRECT_IO.value(environ).lower() in _ON


def aligned_buffer(size: int) -> memoryview:
    """A page-aligned, writable buffer (anonymous memory), usable for ``O_DIRECT`` I/O."""
    return memoryview(mmap.mmap(-1, size))


class TargetFile:
    """One file being assembled at random offsets: ``O_DIRECT`` where it can, buffered elsewhere.

    Thread-safe for writes and reads at distinct offsets (``pwrite``/``preadv`` only).
    """

    def __init__(self, path: Path, size: int, direct: bool, fd: int = -1) -> None:
        """Open (create, truncate) ``path``, or write through ``fd`` (kept open by its owner:
        the tier's temp file) when one is given; ``path`` is then that file's name."""
        self.size = size
        self.fd = (
            os.dup(fd) if fd >= 0 else os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        )
        self.dfd = -1
        try:
            # Sparse, not fallocated: converting fallocated extents cost more than it saved,
            # and restore checks free space before it starts.
            os.ftruncate(self.fd, size)
            if direct:
                try:
                    self.dfd = os.open(path, os.O_RDWR | _O_DIRECT)
                except OSError as exc:
                    if exc.errno not in (errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP):
                        raise
        except BaseException:
            self.close()
            raise
        self._lock = threading.Lock()

    def _drop_direct(self) -> None:
        """The filesystem took the open but refuses the I/O: go buffered from now on."""
        with self._lock:
            if self.dfd >= 0:
                os.close(self.dfd)
                self.dfd = -1

    def write(self, data: memoryview, offset: int) -> None:
        """Write all of ``data`` at ``offset``; the aligned head direct, the tail buffered."""
        dfd = self.dfd
        if dfd >= 0 and offset % ALIGN == 0:
            head = len(data) - len(data) % ALIGN
            try:
                _pwrite_all(dfd, data[:head], offset)
                data, offset = data[head:], offset + head
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                self._drop_direct()
        _pwrite_all(self.fd, data, offset)

    def read_into(self, view: memoryview, offset: int, length: int) -> int:
        """Read ``length`` bytes at ``offset`` into ``view`` (which holds them rounded up)."""
        dfd = self.dfd
        if dfd >= 0 and offset % ALIGN == 0:
            rounded = min(-(-length // ALIGN) * ALIGN, len(view) - len(view) % ALIGN)
            if rounded >= length:
                try:
                    return min(os.preadv(dfd, [view[:rounded]], offset), length)
                except OSError as exc:
                    if exc.errno != errno.EINVAL:
                        raise
                    self._drop_direct()
        return os.preadv(self.fd, [view[:length]], offset)

    @property
    def buffered(self) -> bool:
        """True when writes go through the page cache (``O_DIRECT`` is off or was refused)."""
        return self.dfd < 0

    def chmod(self, mode: int) -> None:
        os.fchmod(self.fd, mode)

    def close(self) -> None:
        for attr in ("dfd", "fd"):
            fd = getattr(self, attr, -1)
            if fd >= 0:
                setattr(self, attr, -1)
                os.close(fd)

    @property
    def closed(self) -> bool:
        return self.fd < 0


def _pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    while len(data):
        n = os.pwrite(fd, data, offset)
        data, offset = data[n:], offset + n
