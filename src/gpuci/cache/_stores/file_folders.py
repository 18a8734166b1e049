"""Reaching a file store's folders: by descriptors, never by a path checked then used again.

The store's folder is untrusted like any store (docs/security.md): another job that can write it
may plant a link where a folder goes, or swap one in between a check and a write. So every
folder on the way to an object is opened ``O_NOFOLLOW`` inside the one above (made first when
asked), and every write, rename and delete happens relative to the last descriptor; objects are
opened without following a link or waiting on a FIFO, and served only as regular files.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

from gpuci import files

__all__ = ["FOLDER", "NotAnObject", "open_object", "walk_down"]

FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_MAKE_TRIES = 8


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
    each: Callable[[int, int], None] | None = None,
) -> Iterator[int | None]:
    """The store's folder ``root/names...``, open: walked from the root one folder at a
    time, each opened ``O_NOFOLLOW`` in the one above (made first when ``create``), so a
    link planted or swapped in anywhere on the way is met, never followed; every write,
    rename and delete then happens relative to this descriptor, not by its path again.
    None when a folder is missing (and not ``create``). ``each(folder, i)`` is called in
    every folder before going down into ``names[i]`` (the store records long names).

    Raises:
        NotAnObject: a link (or a file) where the store keeps a folder.
    """
    fd = _open_root(root, create)
    try:
        at = root
        for index, name in enumerate(names):
            if fd is None:
                break
            if each is not None:
                each(fd, index)
            at = at / name
            inner = _step(fd, name, at, create)
            os.close(fd)
            fd = inner
        yield fd
    finally:
        if fd is not None:
            os.close(fd)


def _open_root(root: Path, create: bool) -> int | None:
    """The store's root folder, open (a link there is the user's own choice of place)."""
    if create:
        root.mkdir(parents=True, exist_ok=True)
    try:
        return os.open(root, FOLDER)
    except FileNotFoundError:
        return None


def _step(folder: int, name: str, at: Path, create: bool) -> int | None:
    """The folder ``name`` in ``folder``, opened without following a link; made first when
    missing and ``create`` (by whoever gets there first); None when missing otherwise."""
    for _ in range(_MAKE_TRIES):
        try:
            return os.open(name, FOLDER | os.O_NOFOLLOW, dir_fd=folder)
        except FileNotFoundError:
            if not create:
                return None
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o777, dir_fd=folder)
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            mode = os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode
            why = "a link" if stat.S_ISLNK(mode) else "not a folder"
            raise NotAnObject(
                errno.ENOTDIR, f"{why} where the store keeps a folder", str(at)
            ) from None
    raise FileNotFoundError(errno.ENOENT, "removed each time it was made", str(at))
