"""Reading the files a save sends: exactly the files the scan saw, each opened once.

The scan and the reads are apart in time, and a job that can write the saved folder may swap a
file for a link to a secret of the same size, or for a FIFO, in between: every read goes through
:func:`open_source`, which opens without waiting, never through a link the scan did not follow,
and checks the device, inode and size the scan recorded (docs/security.md).
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from gpuci import files
from gpuci.cache import _layout as layout
from gpuci.cache._format import manifest as mf
from gpuci.cache._format.tree import Tree, shown
from gpuci.cache._stores.base import SourceChanged
from gpuci.errors import InputError

__all__ = ["Unreadable", "hash_source", "open_source", "read_at", "read_small", "source"]


class Unreadable(InputError):
    """A file of the tree the scan could read failed when read (a ``/proc`` file behind a link
    under ``follow-symlinks: all``, an I/O error, a permission taken away since): one line
    naming it, never an internal error."""

    def __init__(self, path: Path, exc: OSError) -> None:
        super().__init__(
            f"cannot read {shown(path)}, in the tree being saved: {exc.strerror or exc}",
            hint="make it a readable regular file, or leave it out of the saved paths",
        )


@contextlib.contextmanager
def reading(path: Path) -> Iterator[None]:
    """Reads of ``path`` inside: an OSError becomes :class:`Unreadable`."""
    try:
        yield
    except OSError as exc:
        raise Unreadable(path, exc) from None


def open_source(tree: Tree, entry: mf.Entry) -> int:
    """The very file the scan saw at ``entry`` (device, inode, size), open for reading.

    The scan and the reads are apart in time: a job that can write the tree may swap the file
    for a link to a secret of the same size, or for a FIFO, in between. So the file is opened
    without waiting and, unless the scan followed a link there, never through one; then it must
    be the one the scan saw, else it changed while being saved and none of it is sent.

    Raises:
        SourceChanged: another file, a link, a FIFO or a size the scan did not see.
        Unreadable: it cannot be opened at all (gone, permission taken away).
    """
    path, seen = tree.source(entry), tree.seen_at(entry)
    try:
        fd = files.open_regular(path, follow=seen.follow)
    except files.NotRegular:
        raise SourceChanged(path) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a link where the scan saw a file
            raise SourceChanged(path) from None
        raise Unreadable(path, exc) from None
    st = os.fstat(fd)
    if (st.st_dev, st.st_ino, st.st_size) != (seen.dev, seen.ino, entry.size):
        os.close(fd)
        raise SourceChanged(path)
    return fd


@contextlib.contextmanager
def source(tree: Tree, entry: mf.Entry) -> Iterator[int]:
    """:func:`open_source` for the block inside, closed after; read errors are Unreadable."""
    path = tree.source(entry)
    fd = open_source(tree, entry)
    try:
        with reading(path):
            yield fd
    finally:
        os.close(fd)


def read_at(fd: int, offset: int, length: int, path: Path) -> bytes:
    """``length`` bytes from ``offset``; a file that ends sooner changed since it was scanned."""
    data = os.pread(fd, length, offset)
    while len(data) < length:  # a read may return less than asked
        more = os.pread(fd, length - len(data), offset + len(data))
        if not more:
            raise SourceChanged(path)
        data += more
    return data


def hash_source(tree: Tree, entry: mf.Entry, each: Callable[[memoryview, int], object]) -> str:
    """The file's sha256, read once; ``each`` is called with every block hashed (a hasher's
    check of the save's stop flag: a Ctrl-C ends the hash of a model shard at its next block,
    not at its end). A file that reads on past the size the scan saw (a log or checkpoint a
    job still appends to) changed, and is read no further: the hash read on to wherever the
    writer was, without end for a writer that never stops."""
    with source(tree, entry) as fd:
        try:
            hasher, done = files.hash_fd(fd, chunk=layout.IO_CHUNK, each=each, size=entry.size)
        except OSError as exc:
            if exc.errno != errno.EFBIG:
                raise
            done = -1
    if done != entry.size:
        raise SourceChanged(tree.source(entry))
    return hasher.hexdigest()


def read_small(tree: Tree, entry: mf.Entry) -> bytes:
    """A small file's bytes, once, from the file the scan saw (:func:`open_source`), of the
    size it saw."""
    with source(tree, entry) as fd:
        data = read_at(fd, 0, entry.size, tree.source(entry))
        if os.pread(fd, 1, entry.size):
            raise SourceChanged(tree.source(entry))
    return data
