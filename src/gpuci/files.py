"""Files that are never seen half-written, named once for every command.

A later step (or a reader racing this one) must find either the old file or the whole new one:
bytes go to ``<name>.incomplete``, are fsynced, read back and checked against their sha256,
and only then renamed over the final name. Reports land in ``RUNNER_TEMP`` (or the current
folder) unless the user names a path. Logs shared by parallel steps (the journal, the pods
ledger) are JSON lines, each appended in one ``write``.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import stat
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from gpuci import settings
from gpuci.errors import InfraError, InputError, IntegrityError

INCOMPLETE = ".incomplete"
_BLOCK = 1 << 20
FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
# Deeper than any path gpu-ci names (a manifest's 256 folders, a key of 512 characters): a
# descent past it is refused before anything is opened, and a walk holds at most this many.
MAX_DEPTH = 512
_MAKE_TRIES = 8  # a folder made, then gone before it was opened, this often: one error, no loop


def incomplete_path(path: Path) -> Path:
    """Where ``path``'s bytes live until they are whole."""
    return path.with_name(path.name + INCOMPLETE)


def hash_fd(
    fd: int,
    hasher: hashlib._Hash | None = None,
    *,
    chunk: int = _BLOCK,
    each: Callable[[memoryview, int], object] | None = None,
    size: int | None = None,
) -> tuple[hashlib._Hash, int]:
    """The one loop in gpu-ci that hashes a file: from offset 0 to its end, ``chunk`` bytes a
    ``pread`` into one reused buffer (the file position is neither used nor moved).

    Args:
        fd: an open file descriptor, readable.
        hasher: a hash to go on with (a resumed download's); a new sha256 when None.
        chunk: bytes per read (1 MiB; the cache reads in its own sizes).
        each: called with every block and its offset after it is hashed, before the buffer is
            reused (a copy that writes exactly the bytes it hashed).
        size: the most bytes to read (the ``st_size`` of a file someone else put there); a
            file that reads on past it is refused, so ``/proc/self/pagemap`` (0 bytes, read
            for hundreds of GiB) is no endless read.

    Returns:
        The hasher and the number of bytes hashed.

    Raises:
        OSError: a read failed, or (``EFBIG``) the file reads on past ``size``.
    """
    hasher = hasher if hasher is not None else hashlib.sha256()
    buffer = bytearray(chunk)
    view = memoryview(buffer)
    offset = 0
    while n := os.preadv(fd, [_room(view, offset, size)], offset):
        block = view[:n]
        hasher.update(block)
        if each is not None:
            each(block, offset)
        offset += n
    if size is not None and os.preadv(fd, [bytearray(8)], offset):  # 8: pagemap reads in 8s
        raise OSError(errno.EFBIG, f"it reads on past the {size:,} bytes it states")
    return hasher, offset


def _room(view: memoryview, offset: int, size: int | None) -> memoryview:
    """The buffer to read into at ``offset``: the whole of it, or what is left of ``size``
    (empty when it is reached, so the loop ends)."""
    return view if size is None else view[: max(0, min(len(view), size - offset))]


def hash_file(path: Path, chunk: int = _BLOCK) -> tuple[hashlib._Hash, int]:
    """Hash a file (:func:`hash_fd`); returns the hasher and the byte count."""
    with open(path, "rb", buffering=0) as handle:
        return hash_fd(handle.fileno(), chunk=chunk)


def json_bytes(data: Any, *, sort_keys: bool = True) -> bytes:
    """Indented JSON plus a newline; sorted keys make the same record the same bytes."""
    return (json.dumps(data, indent=2, sort_keys=sort_keys, default=str) + "\n").encode()


def write_all(fd: int, data: bytes | memoryview) -> None:
    """``os.write`` until every byte is written (a write may take fewer)."""
    view = memoryview(data)
    while len(view):
        view = view[os.write(fd, view) :]


def atomic_write_bytes(path: Path, payload: bytes) -> str:
    """Write ``path.incomplete``, fsync, verify its sha256 on disk, rename; returns the sha256.

    Raises ``OSError`` (the caller names the fix: a user's path or the runner's disk) with the
    temporary file removed, or ``IntegrityError`` when the disk returns other bytes.

    The temporary is made anew (``O_EXCL``, no link followed) once whatever is at its name is
    removed: the folder may be the PR's, and a link planted there had the bytes written through
    it into its target, a FIFO held ``open`` for ever.
    """
    expected = hashlib.sha256(payload).hexdigest()
    temp = incomplete_path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temp.unlink(missing_ok=True)  # a stale temporary, or a link or FIFO put there
        made = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(temp, made, 0o666)
        try:
            write_all(fd, payload)
            os.fsync(fd)
            same = _same_file(fd, temp)  # read back through it: no name opened again
            if hash_fd(fd)[0].hexdigest() != expected or not same:
                raise IntegrityError(
                    f"{temp} does not read back as written", hint="check the disk and rerun"
                )
        finally:
            os.close(fd)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temp.unlink(missing_ok=True)
        raise
    return expected


def _same_file(fd: int, path: Path) -> bool:
    """Whether ``path`` (not followed) is still the file open as ``fd``."""
    here, there = os.fstat(fd), os.lstat(path)
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def report_path(report: str | None, environ: Mapping[str, str], name: str) -> Path:
    """The ``report`` input when given, else ``name`` in ``RUNNER_TEMP`` or the current folder."""
    if report:
        return Path(report)
    return Path(settings.RUNNER_TEMP.value(environ) or os.getcwd()) / name


def write_report(path: Path, data: Any, what: str, *, sort_keys: bool = True) -> None:
    """A JSON report, atomically; an unwritable path is the user's input to fix."""
    try:
        atomic_write_bytes(path, json_bytes(data, sort_keys=sort_keys))
    except OSError as exc:
        raise InputError(
            f"cannot write the {what} to {path}: {exc.strerror or exc}",
            hint="set the report input to a writable path",
        ) from None


def write_file(path: Path, payload: bytes) -> str:
    """``atomic_write_bytes`` for files the job itself places: a failure is the runner's disk."""
    try:
        return atomic_write_bytes(path, payload)
    except OSError as exc:
        raise InfraError(
            f"cannot write {path}: {exc.strerror or exc}", hint="check the folder and free space"
        ) from None


def append_json_line(path: Path, record: Mapping[str, Any]) -> None:
    """One line, one ``write`` under ``O_APPEND``: parallel writers never interleave records.

    Opened without waiting. A regular file gets the line; a character device (``/dev/null``,
    the usual way to turn a log off) gets it written as before, still without waiting; anything
    else is refused: a FIFO planted where the log lives would hold ``open`` (or the ``write``)
    for ever, or pass the line to whoever reads it instead of the later steps.

    Raises:
        NotRegular: something there that is neither a regular file nor a character device (a
            FIFO, a socket, a folder, a block device).
        OSError: it cannot be made, opened or written (a device that would wait: ``EAGAIN``).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(dict(record), sort_keys=True) + "\n"
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        if exc.errno != errno.ENXIO:  # a FIFO no one reads, a socket: no regular file
            raise
        raise NotRegular(str(path), _mode(path)) from None
    try:
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISCHR(mode)):
            raise NotRegular(str(path), mode)
        if stat.S_ISREG(mode):  # a device stays non-blocking: a terminal held never waits
            os.set_blocking(fd, True)
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _mode(path: Path) -> int:
    """What ``path`` is (its ``st_mode``, not following a link); 0 when it is gone."""
    try:
        return os.lstat(path).st_mode
    except OSError:
        return 0


class NotRegular(OSError):
    """What :func:`open_regular` found is no regular file (a FIFO, a device, a folder,
    a socket); ``st_mode`` says which."""

    def __init__(self, path: str, st_mode: int) -> None:
        super().__init__(errno.EINVAL, "not a regular file", path)
        self.st_mode = st_mode


def open_regular(path: str | Path, *, follow: bool = True, dir_fd: int | None = None) -> int:
    """A descriptor of the regular file at ``path``, opened for reading without waiting (a FIFO
    planted where a file is expected would hold ``open`` and every read for ever; a device
    never ends) and, unless ``follow``, never through a link (``ELOOP`` then); its blocking
    mode restored. The one way gpu-ci opens a file someone else may have put there.

    Raises:
        NotRegular: something there that is not a regular file.
        OSError: it cannot be opened (missing, a link when not ``follow``, no permission).
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    fd = os.open(path, flags, dir_fd=dir_fd)
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise NotRegular(str(path), mode)
    os.set_blocking(fd, True)
    return fd


class Blocked(OSError):
    """What stands where :func:`open_below` goes down: a link (``link``; errno ``ELOOP``),
    anything else that is no folder (``ENOTDIR``), a name that leaves its folder (``EINVAL``)."""

    def __init__(self, code: int, why: str, path: str, *, link: bool = False) -> None:
        super().__init__(code, why, path)
        self.link = link


def open_below(
    base: Path | int,
    names: Sequence[str],
    *,
    create: bool = False,
    each: Callable[[int, int], object] | None = None,
) -> int:
    """The folder ``base/names...``, open: the one way gpu-ci goes down from a base folder
    without following a link on the way. Each name is opened ``O_NOFOLLOW`` in the folder
    above (two descriptors at a time, whatever the depth), so a link planted or swapped in
    below ``base`` is met, never followed; the caller then acts relative to the descriptor.
    ``base`` is the caller's own place: a path is opened as given (made first when
    ``create``), a descriptor is used and left open. ``each(folder, i)`` runs in every folder
    before going down into ``names[i]``.

    One set of rules for every caller (each says them in its own words): a link on the way is
    :class:`Blocked` with ``link`` set; anything else that is no folder, or a name that is
    empty, ``.``, ``..`` or holds a ``/``, :class:`Blocked`; a missing folder FileNotFoundError
    naming it (made instead when ``create``, by whoever gets there first); more than
    :data:`MAX_DEPTH` names OSError ``ENAMETOOLONG``, before anything is opened.

    Returns:
        A new descriptor of the folder reached, for the caller to close.
    """
    at = Path(".") if isinstance(base, int) else Path(base)
    if len(names) > MAX_DEPTH:
        raise OSError(errno.ENAMETOOLONG, f"more than {MAX_DEPTH} folders deep", str(at))
    if isinstance(base, int):
        fd = os.dup(base)
    else:
        if create:
            base.mkdir(parents=True, exist_ok=True)
        fd = os.open(base, FOLDER)
    try:
        for index, name in enumerate(names):
            if each is not None:
                each(fd, index)
            at = at / name
            inner = _step(fd, name, at, create)
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def _step(folder: int, name: str, at: Path, create: bool) -> int:
    """The folder ``name`` in ``folder``, opened without following a link (:func:`open_below`)."""
    if name in ("", ".", "..") or "/" in name:
        raise Blocked(errno.EINVAL, "a name that leaves its folder", str(at))
    for _ in range(_MAKE_TRIES):
        try:
            return os.open(name, FOLDER | os.O_NOFOLLOW, dir_fd=folder)
        except FileNotFoundError:
            if not create:
                raise FileNotFoundError(errno.ENOENT, "no such folder", str(at)) from None
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o777, dir_fd=folder)
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            if stat.S_ISLNK(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode):
                raise Blocked(errno.ELOOP, "a link", str(at), link=True) from None
            raise Blocked(errno.ENOTDIR, "not a folder", str(at)) from None
    raise FileNotFoundError(errno.ENOENT, "removed each time it was made", str(at))


class TooMany(OSError):
    """A :func:`walk` listed more entries than its ``limit`` (errno ``E2BIG``)."""

    def __init__(self, limit: int) -> None:
        super().__init__(errno.E2BIG, f"more than {limit:,} entries to walk")
        self.limit = limit


def walk(
    top: int, *, strict: bool = False, limit: int | None = None
) -> Iterator[tuple[list[int], list[str], list[os.DirEntry[str]]]]:
    """For every folder under the open folder ``top``, top first, in sorted order: the open
    folders from ``top`` down to it, their names below ``top``, and its entries that are no
    folder (files, links, FIFOs: the caller picks).

    Iterative (a planted tree a thousand levels deep is just deep, where ``os.walk`` before
    Python 3.12 recursed past the interpreter's limit), each folder opened by
    :func:`open_below` in the one above and held while its own are walked, so no link is
    followed. A folder that cannot be opened or listed (gone, or swapped for a link since it
    was listed) or lies deeper than :data:`MAX_DEPTH` is passed over, as ``os.walk`` does;
    OSError instead when ``strict``.

    ``limit``: the most entries (files, links, folders: every name listed) the whole walk may
    list; past it :class:`TooMany`, strict or not. Each name is counted as it is listed, before
    any sort, so a tree of millions of empty folders (nothing a caller's count of files sees)
    or one folder of millions of names is bounded in time and memory both.
    """
    folders, names, todo = [top], [], []  # type: list[int], list[str], list[list[str]]
    room = _Room(limit)
    try:
        while True:
            found, below = _listed(folders[-1], strict, room)
            yield folders, names, found
            if below and len(names) >= MAX_DEPTH:
                if strict:
                    raise OSError(errno.ENAMETOOLONG, f"more than {MAX_DEPTH} folders deep")
                below = []
            todo.append(below[::-1])
            while not _go_into_next(folders, names, todo[-1], strict):
                if len(folders) == 1:
                    return
                os.close(folders.pop())
                names.pop()
                todo.pop()
    finally:
        for fd in folders[1:]:
            os.close(fd)


def _go_into_next(folders: list[int], names: list[str], todo: list[str], strict: bool) -> bool:
    """Open the next folder of ``todo`` in the deepest open folder; False when none is left."""
    while todo:
        name = todo.pop()
        try:
            folders.append(open_below(folders[-1], [name]))
        except OSError:
            if strict:
                raise
            continue
        names.append(name)
        return True
    return False


def _listed(folder: int, strict: bool, room: _Room) -> tuple[list[os.DirEntry[str]], list[str]]:
    """The open folder's entries that are no folder, and its folders' names, sorted by name;
    each counted in ``room`` as it is listed (:class:`TooMany` past its limit)."""
    try:
        with os.scandir(folder) as listed:
            entries = [room.take(entry) for entry in listed]
    except TooMany:
        raise
    except OSError:
        if strict:
            raise
        return [], []
    entries.sort(key=lambda entry: entry.name)
    found, below = [], []
    for entry in entries:
        try:
            is_folder = entry.is_dir(follow_symlinks=False)
        except OSError:  # gone since it was listed
            continue
        if is_folder:
            below.append(entry.name)
        else:
            found.append(entry)
    return found, below


class _Room:
    """How many entries a :func:`walk` has listed, against its ``limit`` (None: no limit)."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.listed = 0

    def take(self, entry: os.DirEntry[str]) -> os.DirEntry[str]:
        """``entry``, counted; :class:`TooMany` when it is one past the limit."""
        self.listed += 1
        if self.limit is not None and self.listed > self.limit:
            raise TooMany(self.limit)
        return entry
