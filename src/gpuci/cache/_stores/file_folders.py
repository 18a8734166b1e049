"""Reaching a file store's folders: by descriptors, never by a path checked then used again.

The store's folder is untrusted like any store (docs/security.md): another job that can write it
may plant a link where a folder goes, or swap one in between a check and a use. So every
folder on the way to an object is opened ``O_NOFOLLOW`` inside the one above
(:func:`gpuci.files.open_below`, made first when asked), and every read, listing, write, rename
and delete happens relative to the last descriptor; objects are opened without following a link
or waiting on a FIFO, and served only as regular files.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

from gpuci import files

__all__ = ["NotAnObject", "open_object", "walk_down"]


class NotAnObject(OSError):
    """A store entry that is no file gpu-ci wrote: a link, a FIFO, a device, a folder."""


def open_object(path: Path | str, dir_fd: int | None = None) -> int:
    """An open regular file at ``path`` (:func:`gpuci.files.open_regular`, never a link),
    relative to the folder ``dir_fd`` when given.

    Raises:
        FileNotFoundError: nothing there (or a folder above it is missing).
        NotAnObject: something there that is not a regular file (planted).
    """
    try:
        return files.open_regular(path, follow=False, dir_fd=dir_fd)
    except files.NotRegular as exc:
        if stat.S_ISDIR(exc.st_mode):  # a folder of longer keys (``a/b`` beside ``a``)
            raise FileNotFoundError(errno.EISDIR, "a folder", str(path)) from None
        raise NotAnObject(errno.EINVAL, "not a regular file", str(path)) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotAnObject(
                errno.ELOOP, "a link, which the file store never writes", str(path)
            ) from None
        if exc.errno in (errno.ENOTDIR, errno.EISDIR):
            raise FileNotFoundError(exc.errno, exc.strerror, str(path)) from None
        raise


@contextlib.contextmanager
def walk_down(
    root: Path,
    names: list[str],
    *,
    create: bool,
    each: Callable[[int, int], object] | None = None,
) -> Iterator[int | None]:
    """The store's folder ``root/names...``, open (:func:`gpuci.files.open_below`: made as
    needed when ``create``, never through a link): every read, write, rename and delete then
    happens relative to it, not by its path again. None when a folder is missing (and not
    ``create``). ``each`` is called in every folder on the way (the store records long names).

    Raises:
        NotAnObject: a link (or a file) where the store keeps a folder.
    """
    try:
        fd: int | None = files.open_below(root, names, create=create, each=each)
    except FileNotFoundError:
        if create:  # the root cannot be made (``/proc/x``): the store's error, not a miss
            raise
        fd = None
    except files.Blocked as exc:
        why = f"{exc.strerror} where the store keeps a folder"
        raise NotAnObject(errno.ENOTDIR, why, exc.filename) from None
    try:
        yield fd
    finally:
        if fd is not None:
            os.close(fd)
