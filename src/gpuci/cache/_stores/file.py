"""The file store: ``file:///dir``, the embedded default. Writes go to a temporary
name and are renamed into place; conditional puts hold a lock on the folder.

The folder is untrusted like any store (docs/security.md): another job that can write it may
plant anything there. So an object is opened without blocking and without following a link,
and served only when it is a regular file (a FIFO planted as a ref would hang every restore);
the store's own folders are real folders, never links (a planted ``blobs -> ~/x`` would make a
save write, prune delete, or a restore read, outside the store): every read, listing, write and
delete walks down from the root by descriptors, one ``O_NOFOLLOW`` folder at a time, and acts
in the folder it reached (:meth:`LocalStore._place`), so a folder swapped for a link after it
was reached is never gone through; walks are iterative (a planted tree a thousand levels deep
is just deep).
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import fcntl
import functools
import hashlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from gpuci import files
from gpuci.cache import _layout as layout
from gpuci.cache._stores import copying
from gpuci.cache._stores.base import ObjectInfo, RangeReader, SourceChanged, Store
from gpuci.cache._stores.file_folders import NotAnObject, open_object, walk_down
from gpuci.errors import ConflictError, IntegrityError, StoreError

# ----- the local store -------------------------------------------------------------------------

#: How long a conditional write waits for its key's lock. A write holds it for one link or
#: rename (and reading the small ref it replaces): well under a second. Anyone who can open
#: the lock file (a hung or stopped job, any job that can read the store) can hold it for
#: ever, so the wait is bounded and the write gives up (:class:`LockBusy`).
LOCK_WAIT_S = 10.0
#: The lock is asked for again after this pause, doubled each time up to ``_LOCK_PAUSE_MAX_S``.
_LOCK_PAUSE_S = 0.002
_LOCK_PAUSE_MAX_S = 0.25


class LockBusy(ConflictError):
    """A key's lock stayed held past :data:`LOCK_WAIT_S`: the write was not made. A conflict,
    as another job's write is: a save ends with the key naming what it named (the save goes
    on, with a warning), never waiting for ever."""


def _take_lock(fd: int) -> bool:
    """Take the exclusive ``flock`` on ``fd`` within :data:`LOCK_WAIT_S`; False if not."""
    deadline = time.monotonic() + LOCK_WAIT_S
    pause = _LOCK_PAUSE_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
        _pause(min(pause, left))
        pause = min(2 * pause, _LOCK_PAUSE_MAX_S)


def _pause(seconds: float) -> None:
    """Wait between two asks for a lock (tests stage a release here)."""
    time.sleep(seconds)


class _FileRange:
    def __init__(self, fd: int, path: Path, offset: int, length: int) -> None:
        self._fd = fd
        self._path = path
        self._pos = offset
        self._left = length

    def readinto(self, buffer: memoryview) -> int:
        want = min(len(buffer), self._left)
        if want <= 0:
            return 0
        n = os.preadv(self._fd, [buffer[:want]], self._pos)
        if n == 0:  # a local file cannot be cut short by a network: it is shorter than named
            raise IntegrityError(
                f"{self._path} ends before byte {self._pos + self._left}, which the manifest names",
                hint="the store holds a corrupt object or a hostile manifest; save the key again",
            )
        self._pos += n
        self._left -= n
        return n

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _etag(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


# A file name holds at most 255 bytes, and the temp name adds about 25 to the final one; a
# quoted key can be far longer (200 x "é" quotes to 1,200 bytes). A path component above
# LONG_NAME bytes is stored as LONG_MARK + its sha256, a name quoting never produces (a quoted
# "%" is always followed by two hex digits), with the whole component in a file beside it
# named LONG_MARK + sha256 + NAME_SUFFIX, so a listing can give the key back.
LONG_NAME = 200
LONG_MARK = "%%"
NAME_SUFFIX = ".name"

_F = TypeVar("_F")


def _component(part: str) -> str:
    if len(part.encode()) <= LONG_NAME:
        return part
    return LONG_MARK + hashlib.sha256(part.encode()).hexdigest()


def _os_errors(method: _F) -> _F:
    """A file store's OSError (full disk, no permission, a path that cannot exist) becomes one
    line naming the store, never a traceback."""

    @functools.wraps(method)  # type: ignore[arg-type]
    def wrapper(self: LocalStore, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)  # type: ignore[operator]
        except OSError as exc:
            raise self.os_error(exc) from None

    return wrapper  # type: ignore[return-value]


class LocalStore(Store):
    """A folder: objects are files, writes are temp-file-then-rename, refs move under a lock."""

    honours_conditional_writes = True  # checked by tests/cache/test_cache_conditional.py
    local_disk = True

    def __init__(self, root: Path) -> None:
        self.root = root
        self.url = root.as_uri()

    def os_error(self, exc: OSError) -> StoreError:
        if isinstance(exc, NotAnObject):
            return StoreError(
                f"the cache store {self.url} holds {exc.filename}, {exc.strerror}: something "
                "another job put there, not an object gpu-ci wrote",
                hint="delete that entry from the store folder (or use a store only trusted "
                "jobs can write) and save the key again",
            )
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return StoreError(
                f"disk full while writing to the cache store {self.url}",
                hint="free disk space where the store lives, prune it, or point store at a "
                "larger volume",
            )
        where = f" ({exc.filename})" if exc.filename else ""
        return StoreError(
            f"cannot use the cache store {self.url}: {exc.strerror or exc}{where}",
            hint="point store at a folder this user can create and write (file:///absolute/path)",
        )

    def _path(self, key: str) -> Path:
        parts = key.split("/")
        if any(part in ("", ".", "..") for part in parts):  # a backstop: keys are ours or listed
            raise StoreError(
                f"refusing the object key {key!r} in the cache store {self.url}: it would "
                "name a file outside its place",
                hint="delete the file in the store that names it; it is no object gpu-ci wrote",
            )
        return self.root.joinpath(*(_component(p) for p in parts))

    @contextlib.contextmanager
    def _place(self, key: str, *, create: bool = False) -> Iterator[tuple[int | None, str]]:
        """The folder ``key``'s object is in, open (never through a link: :func:`walk_down`;
        None when missing, made when ``create``, the names of long components then recorded on
        the way), and the object's name in it."""
        self._path(key)  # refuses a key that would name a file outside its place
        parts = key.split("/")
        names = [_component(p) for p in parts]

        def record(folder: int, index: int) -> None:
            if names[index] != parts[index]:
                self._record_name(folder, names[index] + NAME_SUFFIX, parts[index])

        with walk_down(self.root, names[:-1], create=create, each=record if create else None) as fd:
            if fd is not None and create:
                record(fd, len(parts) - 1)
            yield fd, names[-1]

    @contextlib.contextmanager
    def _target(self, key: str) -> Iterator[tuple[int, str]]:
        """The folder a write of ``key`` goes in (:meth:`_place`, made as needed)."""
        with self._place(key, create=True) as (folder, name):
            assert folder is not None  # made, when missing
            yield folder, name

    def _open(self, key: str) -> int | None:
        """The object ``key``, open (:func:`open_object` in the folder :meth:`_place` reached);
        None when there is none."""
        with self._place(key) as (folder, name):
            if folder is None:
                return None
            try:
                return open_object(name, dir_fd=folder)
            except FileNotFoundError:
                return None

    def _record_name(self, folder: int, record: str, part: str) -> None:
        try:
            os.stat(record, dir_fd=folder, follow_symlinks=False)
            return
        except FileNotFoundError:
            pass
        temp = self._write_temp(folder, record, part.encode())
        os.replace(temp, record, src_dir_fd=folder, dst_dir_fd=folder)

    @staticmethod
    def _temp(name: str) -> str:
        return f"{name}{layout.INCOMPLETE}-{os.urandom(6).hex()}"

    @contextlib.contextmanager
    def _lock(self, key: str) -> Iterator[None]:
        """Hold ``key``'s lock file; :class:`LockBusy` once :data:`LOCK_WAIT_S` went by."""
        name = f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.lock"
        # Read-only: flock needs no more, and another user's lock file (0644) opens so too;
        # O_NONBLOCK: a FIFO planted there does not hold the open (it is only a lock).
        flags = os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        with walk_down(self.root, ["locks"], create=True) as locks:
            fd = os.open(name, flags, 0o644, dir_fd=locks)
        try:
            if not _take_lock(fd):
                raise LockBusy(
                    f"{key} was not written: another process held its lock "
                    f"{self.root / 'locks' / name} for over {LOCK_WAIT_S:g} s",
                    hint="end the job that holds it (a hung or stopped save; `fuser` names it), "
                    "or use a store only trusted jobs can open",
                )
            yield
        finally:
            os.close(fd)

    def _write_temp(self, folder: int, name: str, data: bytes, *, durable: bool = True) -> str:
        """``data`` in a temporary file beside ``name`` in ``folder`` (its name returned),
        flushed to disk when ``durable``."""
        temp = self._temp(name)
        fd = os.open(temp, _NEW_FILE, 0o666, dir_fd=folder)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                if durable:
                    os.fsync(handle.fileno())
        except BaseException:
            _unlink_quietly(temp, folder)  # a full disk leaves no partial temp file behind
            raise
        return temp

    def exists(self) -> bool:
        return self.root.is_dir()

    @_os_errors
    def head(self, key: str) -> ObjectInfo | None:
        fd = self._open(key)
        if fd is None:
            return None
        try:
            st = os.fstat(fd)
        finally:
            os.close(fd)
        return ObjectInfo(key, st.st_size, st.st_mtime)

    @_os_errors
    def get(self, key: str, limit: int | None = None) -> tuple[bytes, str] | None:
        fd = self._open(key)
        if fd is None:
            return None
        with os.fdopen(fd, "rb") as handle:
            data = handle.read() if limit is None else handle.read(limit + 1)
        return data, _etag(data)

    @_os_errors
    def put(self, key: str, data: bytes) -> str:
        # A last-use record (uses/) is only a date that prune and ls read from the listing's
        # mtime: losing it in a crash costs nothing, so it skips the fsync (a visible share of
        # every warm restore: docs/benchmarks.md, "Issue 28 on main, retaken in a quiet
        # window"). It is still renamed into place: never seen half-written.
        durable = not key.startswith(layout.USES + "/")
        with self._target(key) as (folder, name):
            temp = self._write_temp(folder, name, data, durable=durable)
            os.replace(temp, name, src_dir_fd=folder, dst_dir_fd=folder)
        return _etag(data)

    @_os_errors
    def put_if_absent(self, key: str, data: bytes) -> str:
        with self._target(key) as (folder, name):
            temp = self._write_temp(folder, name, data)
            try:
                with self._lock(key):  # atomic create-if-absent, like If-None-Match: *
                    os.link(temp, name, src_dir_fd=folder, dst_dir_fd=folder, follow_symlinks=False)
            except FileExistsError:
                raise ConflictError(f"{key} was created by someone else first") from None
            finally:
                _unlink_quietly(temp, folder)
        return _etag(data)

    @_os_errors
    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        with self._target(key) as (folder, name):
            temp = self._write_temp(folder, name, data)
            try:
                with self._lock(key):
                    if _etag_in(folder, name) != etag:
                        raise ConflictError(f"{key} was changed by someone else since it was read")
                    os.replace(temp, name, src_dir_fd=folder, dst_dir_fd=folder)
            finally:
                _unlink_quietly(temp, folder)
        return _etag(data)

    def upload_file(
        self, key: str, path: Path, size: int, on_bytes: Callable[[int], None], sha256: str
    ) -> None:
        """:meth:`upload_fd` of the regular file at ``path``, never through a link, never
        waiting on a FIFO (either is a file that changed since it was hashed)."""
        try:
            src = files.open_regular(path, follow=False)
        except files.NotRegular:
            raise SourceChanged(path) from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise SourceChanged(path) from None
            raise self.os_error(exc) from None
        try:
            self.upload_fd(key, src, path, size, on_bytes, sha256)
        finally:
            os.close(src)

    @_os_errors
    def upload_fd(
        self,
        key: str,
        src: int,
        path: Path,
        size: int,
        on_bytes: Callable[[int], None],
        sha256: str,
    ) -> None:
        """Copy the open file ``src`` (the save checked it is the file it scanned at ``path``)
        in whole; published only when the bytes copied in hash to ``sha256``."""
        with self._target(key) as (folder, name):
            temp = self._temp(name)
            try:
                self._copy_in(folder, temp, src, path, size, sha256)
                on_bytes(size)
                os.replace(temp, name, src_dir_fd=folder, dst_dir_fd=folder)
            finally:
                _unlink_quietly(temp, folder)

    @staticmethod
    def _copy_in(folder: int, temp: str, src: int, path: Path, size: int, sha256: str) -> None:
        """``src`` copied to a new ``temp`` in ``folder``; SourceChanged unless the bytes copied
        in are ``size`` long and hash to ``sha256``."""
        dst = os.open(temp, _NEW_FILE, 0o666, dir_fd=folder)
        try:
            # In the kernel where it can (reflinks on btrfs/xfs), else read/write: no
            # buffer of ours between the bytes copied and the bytes hashed below.
            try:
                copying.copy_fd(src, dst, size)
            except copying.Mismatch:  # shorter than when it was hashed
                raise SourceChanged(path) from None
            if os.pread(src, 1, size):  # longer
                raise SourceChanged(path)
            # What is published is what was copied in: hash that, not the source again.
            if copying.hash_fd(dst) != sha256:
                raise SourceChanged(path)
        finally:
            os.close(dst)

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        try:
            yield from self._list(prefix)
        except OSError as exc:
            raise self.os_error(exc) from None

    def _list(self, prefix: str) -> Iterator[ObjectInfo]:
        folder, _, _ = prefix.rpartition("/")
        above = folder.split("/") if folder else []
        if folder:
            self._path(folder)  # refuses a prefix that would name a folder outside the store
        start = [_component(p) for p in above]
        with walk_down(self.root, start, create=False) as top:
            for folders, names, found in files.walk(top) if top is not None else ():
                for entry in found:
                    if not _is_object(entry) or _is_name_record(entry.name):
                        continue
                    below = _key_of(folders, [*names, entry.name])
                    key = "/".join([*above, *below]) if below is not None else ""
                    if below is not None and key.startswith(prefix):
                        try:
                            st = entry.stat(follow_symlinks=False)
                        except FileNotFoundError:
                            continue
                        yield ObjectInfo(key, st.st_size, st.st_mtime)

    def leftovers(self, older_than: float) -> builtins.list[ObjectInfo]:
        """Temp files (``*.incomplete-*``) a killed save left, older than ``older_than`` s.

        Keys are relative to the store's root; a running save's temp files are younger.
        """
        now, found = time.time(), []
        try:
            with walk_down(self.root, [], create=False) as top:
                for _, names, entries in files.walk(top) if top is not None else ():
                    for entry in entries:
                        if f"{layout.INCOMPLETE}-" not in entry.name or not _is_file(entry):
                            continue
                        try:
                            st = entry.stat(follow_symlinks=False)
                        except FileNotFoundError:
                            continue
                        if now - st.st_mtime > older_than:
                            rel = "/".join([*names, entry.name])
                            found.append(ObjectInfo(rel, st.st_size, st.st_mtime))
        except OSError as exc:
            raise self.os_error(exc) from None
        return sorted(found, key=lambda o: o.key)

    @_os_errors
    def remove_leftover(self, rel: str) -> None:
        self._unlink(_names_under(self.root, self.root / rel))

    @_os_errors
    def delete(self, key: str) -> None:
        self._unlink(_names_under(self.root, self._path(key)))

    def _unlink(self, names: builtins.list[str]) -> None:
        """Remove ``root/names...`` in the folder :func:`walk_down` reached; gone is fine."""
        with walk_down(self.root, names[:-1], create=False) as folder:
            if folder is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(names[-1], dir_fd=folder)

    @_os_errors
    def touch(self, key: str) -> None:
        with self._place(key) as (folder, name):
            if folder is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.utime(name, dir_fd=folder, follow_symlinks=False)

    @_os_errors
    def open_range(self, key: str, offset: int, length: int) -> RangeReader:
        fd = self._open(key)
        if fd is not None:
            return _FileRange(fd, self._path(key), offset, length)
        raise StoreError(
            f"{self.url}/{key} is missing from the cache store",
            hint="the store was pruned or damaged; save the key again",
        )


# A long name's record holds one stored component: at most 512 characters of a key, each
# quoted to at most 12 bytes (a 4-byte character as %XX%XX%XX%XX).
_MAX_RECORD = 8192
# A conditional write's object (a ref, a record: 64 KiB at most) is read this far at most.
_MAX_MATCHED = 1 << 20
# A new file in a store folder: never through a link.
_NEW_FILE = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _names_under(root: Path, path: Path) -> list[str]:
    """The names from ``root`` down to ``path``; a ``..`` or ``.`` on the way is refused (a
    backstop: keys are checked by ``_path``, leftovers are ours or listed)."""
    names = list(path.relative_to(root).parts)
    if any(name in (".", "..") for name in names):
        raise NotAnObject(errno.EINVAL, "a name that leaves its folder", str(path))
    return names


def _unlink_quietly(name: str, folder: int) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=folder)


def _etag_in(folder: int, name: str) -> str | None:
    """The etag of the object ``name`` in ``folder``, None when there is none. One over
    :data:`_MAX_MATCHED` (a planted sparse file) is read no further: no writer read it whole."""
    try:
        fd = open_object(name, dir_fd=folder)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(_MAX_MATCHED + 1)
    return _etag(data) if len(data) <= _MAX_MATCHED else "over the cap"


def _key_of(folders: list[int], names: list[str]) -> list[str] | None:
    """The key's parts that ``names`` stand for (each in the open folder ``folders[i]``), long
    components read back from their name records; None when it is no object gpu-ci wrote.

    A name must map back to this very file: text (a name that is not UTF-8 is not ours), no
    longer than a plain component may be, or the mark and sha256 of its record's text. A
    record is the store's input like any file in it: read only as a small regular file (never
    a link, never waiting on a FIFO), and it counts only as exactly one component naming the
    file beside it, so a planted record cannot name another object (``../../blobs/...``) nor a
    file outside the store.
    """
    parts: list[str] = []
    for folder, name in zip(folders, names, strict=True):
        part = _record(folder, name) if name.startswith(LONG_MARK) else name
        try:
            if part is None or "/" in part or _component(part) != name:
                return None
        except UnicodeEncodeError:
            return None
        parts.append(part)
    return parts


def _record(folder: int, name: str) -> str | None:
    """The text of the record beside the long name ``name``; None without a usable one."""
    try:
        with os.fdopen(open_object(name + NAME_SUFFIX, dir_fd=folder), "rb") as handle:
            return handle.read(_MAX_RECORD).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _is_file(entry: os.DirEntry[str]) -> bool:
    """A regular file (links, FIFOs and the like are no objects); False when gone."""
    try:
        return entry.is_file(follow_symlinks=False)
    except OSError:
        return False


def _is_object(entry: os.DirEntry[str]) -> bool:
    """A regular file that is no save's temporary file."""
    return layout.INCOMPLETE not in entry.name and _is_file(entry)


def _is_name_record(name: str) -> bool:
    return name.startswith(LONG_MARK) and name.endswith(NAME_SUFFIX)
