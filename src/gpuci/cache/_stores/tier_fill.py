"""Filling the runner-local tier on a cold restore: a private temp file per blob, published
under its digest.

A large file fetched across a network is written into the job's folder as with the tier off;
each piece its hash eats is then written from the same buffer into the tier's temp file, past the
page cache (:class:`gpuci.cache._transfer.blob_target.BlobTarget`), and
:meth:`TierFill.publish` names it once the digest is the manifest's. A large file from a store on
this machine's disk, and every small packed file, is written into the temp file (``0700``
``tmp/``, ours alone), hashed on its way in, and :meth:`TierFill.finish` makes the job's own
file from that inode, a reflink where the filesystem clones (btrfs, XFS) else an in-kernel copy
(``copy_file_range``). docs/cache-format.md says why both keep the tier's rule, and why each.

The tier's rule (a blob is only the bytes hashed on their way in, published under the digest
of what was hashed) holds either way: the temp file gets exactly the bytes hashed and nothing
but this process writes there. On any error, or when the digest is not the manifest's, the temp
file is removed and the job goes on (a cache never fails a job); only failing to make the job's
own file fails the restore, as a failed write would.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from gpuci import files
from gpuci.cache._stores import copying

__all__ = ["TierFill"]

_JOB_FILE = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC


class TierFill:
    """One file a cold restore writes into the tier's ``tmp/`` in place of the job's file.

    ``fd`` is the temp file, open for reading and writing; ``publish(temp, digest)`` makes it
    visible (:meth:`LocalTier.publish_temp`), with its mtime frozen at ``mtime`` first (the
    tier's tripwire).
    """

    def __init__(
        self, publish: Callable[[str, str], None], mtime: int, digest: str, fd: int, temp: str
    ) -> None:
        self._publish = publish
        self._mtime = mtime
        self._digest = digest
        self.fd = fd
        self.temp = temp

    @property
    def name(self) -> str:
        """The name it is published under: a blob's digest, or a run's name."""
        return self._digest

    def finish(self, digest: str, dest: Path, mode: int) -> str:
        """The file is whole and hashed to ``digest``: make the job's file at ``dest`` (with
        ``mode``) from it, then publish the blob when ``digest`` is the one asked for.

        Returns how the job's file was made: ``reflink`` or ``copy``.

        Raises:
            OSError: the job's file could not be made (a full disk, say); the blob is dropped.
        """
        try:
            how = self._place(dest, mode)
        except BaseException:
            self.discard()
            raise
        self.publish(digest)
        return how

    def keep(self, chunks: Sequence[bytes], digest: str) -> bool:
        """Write bytes the caller holds and has just hashed to ``digest`` (a save: ``bytes``
        are immutable, so what is written is what was hashed), then publish them. A Ctrl-C
        landing here (a save writes the runs it reused on its own thread, up to 128 MiB)
        removes the temp file before it is raised."""
        try:
            for chunk in chunks:
                files.write_all(self.fd, chunk)
        except OSError:
            self.discard()
            return False
        except BaseException:
            self.discard()
            raise
        return self.publish(digest)

    def publish(self, digest: str) -> bool:
        """Freeze the temp file and publish it, when ``digest`` (of exactly its bytes) is the
        one asked for; else, or on any error, drop it. Returns whether a blob was published."""
        try:
            if digest != self._digest:
                raise OSError("not the digest asked for")
            os.fchmod(self.fd, 0o444)
            os.utime(self.fd, (time.time(), self._mtime))
            self._close()
            self._publish(self.temp, digest)
            return True
        except OSError:
            self.discard()
            return False

    def _place(self, dest: Path, mode: int) -> str:
        size = os.fstat(self.fd).st_size
        out = os.open(dest, _JOB_FILE, 0o600)
        try:
            reflinked = copying.reflink(self.fd, out)
            if not reflinked:
                copying.copy_fd(self.fd, out, size)
            os.fchmod(out, mode & 0o777)
        finally:
            os.close(out)
        return "reflink" if reflinked else "copy"

    def discard(self) -> None:
        """Drop the temp file (a failed or cut-short fetch: a later one may fill it again)."""
        self._close()
        with contextlib.suppress(OSError):
            os.unlink(self.temp)

    def _close(self) -> None:
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1
