"""Moving a response body from a socket into a file inside the kernel (Linux ``splice``).

A buffered restore used to copy every byte twice: socket to a user buffer (``recv_into``), then
user buffer to the page cache (``pwrite``). Through a pipe, ``splice`` moves the socket's pages
into the pipe without a copy and from the pipe into the page cache with one, so the bytes never
visit user space; the hash then reads them back from the page cache, in pieces small enough to
stay in the CPU cache. On the 2-core VM this cut a 2 GiB restore's kernel CPU by about half
(docs/benchmarks.md, "Big-file write path"), and the files stay warm in the page cache for the
job that reads them next (which ``O_DIRECT`` gives up).

Linux only (``os.splice``, Python 3.10+); everything else keeps the copying path. A filesystem
that refuses ``splice`` into its files (some FUSE mounts) gets the pipe's bytes through a plain
``pwrite`` instead, from then on.
"""

from __future__ import annotations

import errno
import fcntl
import os

# A pipe holds this much at most: one splice moves up to this many bytes. 1 MiB is Linux's
# default /proc/sys/fs/pipe-max-size for unprivileged users.
PIPE_SIZE = 1 << 20
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
_F_GETPIPE_SZ = getattr(fcntl, "F_GETPIPE_SZ", 1032)
_REFUSED = {errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP}


def available() -> bool:
    return hasattr(os, "splice")


class Pipe:
    """A pipe that carries body bytes from a socket to a file; ``held`` bytes sit inside it.

    One per ranged GET, closed after it: a pipe left holding bytes by a failure is never reused.
    """

    def __init__(self) -> None:
        self.r, self.w = os.pipe2(os.O_CLOEXEC)
        try:
            self.size = fcntl.fcntl(self.w, _F_SETPIPE_SZ, PIPE_SIZE)
        except OSError:  # EPERM past the user's pipe-buffer quota: keep the default size
            self.size = fcntl.fcntl(self.w, _F_GETPIPE_SZ)
        self.held = 0
        self.file_splices = True

    def room(self) -> int:
        return self.size - self.held

    def filled(self, n: int) -> None:
        """Record ``n`` bytes a source moved into the pipe (spliced or written into :attr:`w`)."""
        self.held += n

    def drain(self, fd: int, offset: int, limit: int | None = None) -> int:
        """Write what the pipe holds into ``fd`` at ``offset``, at most ``limit`` bytes (what
        is left stays in the pipe); returns the byte count."""
        moved = 0
        limit = self.held if limit is None else min(limit, self.held)
        while moved < limit:
            want = limit - moved
            if self.file_splices:
                try:
                    n = os.splice(self.r, fd, want, offset_dst=offset + moved)
                except OSError as exc:
                    if exc.errno not in _REFUSED:
                        raise
                    self.file_splices = False
                    continue
            else:
                data = memoryview(os.read(self.r, want))
                n = len(data)
                while len(data):
                    done = os.pwrite(fd, data, offset + moved + n - len(data))
                    data = data[done:]
            if n == 0:  # cannot happen while the pipe holds bytes; never spin
                raise OSError(errno.EIO, "splice moved nothing out of a non-empty pipe")
            self.held -= n
            moved += n
        return moved

    def close(self) -> None:
        for attr in ("r", "w"):
            fd = getattr(self, attr, -1)
            if fd >= 0:
                setattr(self, attr, -1)
                os.close(fd)
