"""Filling the runner-local tier from the bytes a restore hashes, as it hashes them.

A cold restore with the tier on used to write each file, hash it, then read it back, copy it
into the tier and hash it again (:meth:`LocalTier.copy_in`): about as much work as the transfer
itself. Here the tier's copy is written from the very buffers the restore's sha256 consumes,
in the order it consumes them (:class:`TeeHasher` stands in for the hasher), so the blob holds
exactly the bytes that were hashed: the tier's rule (a blob is made only by hashing the bytes
as they are copied in, and published under the digest of what was copied) holds with no second
read and no second hash. It is published only when that digest is the manifest's (the restore
verified it); otherwise, or on any error, the temp file is removed and the job goes on (a cache
never fails a job).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from typing import Any

__all__ = ["TeeHasher", "TierFill"]


class TierFill:
    """One blob being written into the tier's ``tmp/`` while the restore hashes it.

    ``publish(temp, digest)`` makes it visible (:meth:`LocalTier.publish_temp`), with its
    mtime frozen at ``mtime`` first (the tier's tripwire).
    """

    def __init__(
        self, publish: Callable[[str, str], None], mtime: int, digest: str, fd: int, temp: str
    ) -> None:
        self._publish = publish
        self._mtime = mtime
        self._digest = digest
        self._fd = fd
        self._temp = temp
        self._failed = False

    def write(self, data: bytes | memoryview) -> None:
        """Append bytes the hash just consumed; a failed write only stops the fill."""
        if self._failed:
            return
        view = memoryview(data)
        try:
            while len(view):
                view = view[os.write(self._fd, view) :]
        except OSError:
            self._failed = True

    def restart(self) -> None:
        """The restore hashes the file again from byte 0 (a refetch): start the copy over."""
        if self._failed:
            return
        try:
            os.ftruncate(self._fd, 0)
            os.lseek(self._fd, 0, os.SEEK_SET)
        except OSError:
            self._failed = True

    def finish(self, digest: str) -> bool:
        """Publish the copy when ``digest`` (of exactly what was written) is the one asked
        for; else drop it. Returns whether a blob was published."""
        ok = not self._failed and digest == self._digest
        try:
            if ok:
                os.fchmod(self._fd, 0o444)
                os.utime(self._fd, (time.time(), self._mtime))
        except OSError:
            ok = False
        finally:
            self._close()
        if ok:
            try:
                self._publish(self._temp, digest)
                return True
            except OSError:
                pass
        self.discard()
        return False

    def discard(self) -> None:
        self._close()
        with contextlib.suppress(OSError):
            os.unlink(self._temp)

    def _close(self) -> None:
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = -1


class TeeHasher:
    """A sha256 that also appends every byte it eats to a :class:`TierFill` (same buffer)."""

    def __init__(self, hasher: Any, fill: TierFill) -> None:
        self._hasher = hasher
        self.fill = fill

    def update(self, data: bytes | memoryview) -> None:
        self._hasher.update(data)
        self.fill.write(data)

    def hexdigest(self) -> str:
        return str(self._hasher.hexdigest())
