"""The file store: ``file:///dir``, the embedded default. Writes go to a temporary
name and are renamed into place; conditional puts hold a lock on the folder.

The folder is untrusted like any store (docs/security.md): another job that can write it may
plant anything there. So an object is opened without blocking and without following a link,
and served only when it is a regular file (a FIFO planted as a ref would hang every restore);
the store's own folders are real folders, never links (a planted ``blobs -> ~/x`` would make a
save write, and prune delete, outside the store); walks are iterative (a planted tree a
thousand levels deep is just deep).
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import fcntl
import functools
import hashlib
import os
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from gpuci import files
from gpuci.cache import _layout as layout
from gpuci.cache._stores import copying
from gpuci.cache._stores.base import ObjectInfo, RangeReader, SourceChanged, Store
from gpuci.errors import ConflictError, IntegrityError, StoreError

# ----- the local store -------------------------------------------------------------------------


class NotAnObject(OSError):
    """A store entry that is no file gpu-ci wrote: a link, a FIFO, a device, a folder."""


def open_object(path: Path) -> int:
    """An open regular file at ``path`` (:func:`gpuci.files.open_regular`, never a link).

    Raises:
        FileNotFoundError: nothing there (or a folder above it is missing).
        NotAnObject: something there that is not a regular file (planted).
    """
    try:
        return files.open_regular(path, follow=False)
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


class _FileRange:
    def __init__(self, path: Path, offset: int, length: int) -> None:
        self._fd = open_object(path)
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

    def _target(self, key: str) -> Path:
        """Where ``key`` is written: its folders made, the names of long components recorded."""
        final = self._path(key)
        self._real_folders(final.parent)
        final.parent.mkdir(parents=True, exist_ok=True)
        folder = self.root
        for part in key.split("/"):
            name = _component(part)
            if name != part:
                self._record_name(folder / (name + NAME_SUFFIX), part)
            folder = folder / name
        return final

    def _real_folders(self, folder: Path) -> None:
        """Refuse a link (or a file) where the store has a folder, from the root down to
        ``folder``; what does not exist yet is made by us, as folders.

        Raises:
            NotAnObject: a link planted in the store's own tree.
        """
        at = self.root
        for name in folder.relative_to(self.root).parts:
            at = at / name
            try:
                mode = os.lstat(at).st_mode
            except FileNotFoundError:
                return
            if not stat.S_ISDIR(mode):
                why = "a link" if stat.S_ISLNK(mode) else "not a folder"
                raise NotAnObject(errno.ENOTDIR, f"{why} where the store keeps a folder", str(at))

    def _record_name(self, path: Path, part: str) -> None:
        if path.exists():
            return
        temp = self._write_temp(path, part.encode())
        os.replace(temp, path)

    def _temp(self, final: Path) -> Path:
        return final.with_name(f"{final.name}{layout.INCOMPLETE}-{os.urandom(6).hex()}")

    @contextlib.contextmanager
    def _lock(self, key: str) -> Iterator[None]:
        locks = self.root / "locks"
        self._real_folders(locks)
        locks.mkdir(parents=True, exist_ok=True)
        name = hashlib.sha256(key.encode()).hexdigest()[:32]
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(locks / f"{name}.lock", flags, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _write_temp(self, final: Path, data: bytes, *, durable: bool = True) -> Path:
        """``data`` in a temporary file beside ``final``, flushed to disk when ``durable``."""
        temp = self._temp(final)
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                if durable:
                    os.fsync(handle.fileno())
        except BaseException:
            temp.unlink(missing_ok=True)  # a full disk leaves no partial temp file behind
            raise
        return temp

    def exists(self) -> bool:
        return self.root.is_dir()

    @_os_errors
    def head(self, key: str) -> ObjectInfo | None:
        try:
            st = self._path(key).stat()
        except (FileNotFoundError, NotADirectoryError):
            return None
        return ObjectInfo(key, st.st_size, st.st_mtime)

    @_os_errors
    def get(self, key: str, limit: int | None = None) -> tuple[bytes, str] | None:
        try:
            fd = open_object(self._path(key))
        except FileNotFoundError:
            return None
        with os.fdopen(fd, "rb") as handle:
            data = handle.read() if limit is None else handle.read(limit + 1)
        return data, _etag(data)

    @_os_errors
    def put(self, key: str, data: bytes) -> str:
        final = self._target(key)
        # A last-use record (uses/) is only a date that prune and ls read from the listing's
        # mtime: losing it in a crash costs nothing, so it skips the fsync (a visible share of
        # every warm restore: docs/benchmarks.md, "Issue 28 on main, retaken in a quiet
        # window"). It is still renamed into place: never seen half-written.
        durable = not key.startswith(layout.USES + "/")
        os.replace(self._write_temp(final, data, durable=durable), final)
        return _etag(data)

    @_os_errors
    def put_if_absent(self, key: str, data: bytes) -> str:
        final = self._target(key)
        temp = self._write_temp(final, data)
        try:
            with self._lock(key):
                os.link(temp, final)  # atomic create-if-absent, like If-None-Match: *
        except FileExistsError:
            raise ConflictError(f"{key} was created by someone else first") from None
        finally:
            temp.unlink(missing_ok=True)
        return _etag(data)

    @_os_errors
    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        final = self._target(key)
        temp = self._write_temp(final, data)
        try:
            with self._lock(key):
                current = self.get(key)
                if current is None or current[1] != etag:
                    raise ConflictError(f"{key} was changed by someone else since it was read")
                os.replace(temp, final)
        finally:
            temp.unlink(missing_ok=True)
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
        final = self._target(key)
        temp = self._temp(final)
        try:
            dst = os.open(temp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
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
            on_bytes(size)
            os.replace(temp, final)
        finally:
            temp.unlink(missing_ok=True)

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        try:
            yield from self._list(prefix)
        except OSError as exc:
            raise self.os_error(exc) from None

    def _list(self, prefix: str) -> Iterator[ObjectInfo]:
        folder, _, _ = prefix.rpartition("/")
        base = self._path(folder) if folder else self.root
        self._real_folders(base)
        for dirpath, filenames in _walk(base):
            for name in filenames:
                if layout.INCOMPLETE in name or _is_name_record(name):
                    continue
                full = Path(dirpath) / name
                key = self._key_of(full)
                if key is not None and key.startswith(prefix) and self._names(key, full):
                    try:
                        st = full.stat()
                    except FileNotFoundError:
                        continue
                    yield ObjectInfo(key, st.st_size, st.st_mtime)

    def _key_of(self, full: Path) -> str | None:
        """The object key a file holds, long components read back from their name records.

        A record is the store's input like any file in it: it counts only when the name it
        sits beside is the mark and sha256 of exactly its text, one component, so a planted
        record cannot name another object (``../../blobs/...``) nor a file outside the store.
        """
        parts: list[str] = []
        folder = self.root
        for name in full.relative_to(self.root).parts:
            if name.startswith(LONG_MARK):
                try:
                    part = (folder / (name + NAME_SUFFIX)).read_text(encoding="utf-8")
                except (OSError, UnicodeDecodeError):
                    return None  # no record (or a damaged one): not an object we wrote
                if "/" in part or _component(part) != name:
                    return None  # a record that does not name this file: planted
                parts.append(part)
            else:
                parts.append(name)
            folder = folder / name
        return "/".join(parts)

    def _names(self, key: str, full: Path) -> bool:
        """Whether ``key`` is the name this file is stored under: a key is text (a file name
        that is not UTF-8 is no object gpu-ci wrote) and maps back to this very file."""
        try:
            key.encode()
            return self._path(key) == full
        except (UnicodeEncodeError, StoreError):
            return False

    def leftovers(self, older_than: float) -> builtins.list[ObjectInfo]:
        """Temp files (``*.incomplete-*``) a killed save left, older than ``older_than`` s.

        Keys are relative to the store's root; a running save's temp files are younger.
        """
        now, found = time.time(), []
        try:
            for dirpath, filenames in _walk(self.root):
                for name in filenames:
                    if f"{layout.INCOMPLETE}-" not in name:
                        continue
                    full = Path(dirpath) / name
                    try:
                        st = full.lstat()
                    except FileNotFoundError:
                        continue
                    if now - st.st_mtime > older_than:
                        rel = full.relative_to(self.root).as_posix()
                        found.append(ObjectInfo(rel, st.st_size, st.st_mtime))
        except OSError as exc:
            raise self.os_error(exc) from None
        return sorted(found, key=lambda o: o.key)

    @_os_errors
    def remove_leftover(self, rel: str) -> None:
        (self.root / rel).unlink(missing_ok=True)

    @_os_errors
    def delete(self, key: str) -> None:
        path = self._path(key)
        self._real_folders(path.parent)
        path.unlink(missing_ok=True)

    @_os_errors
    def touch(self, key: str) -> None:
        try:
            os.utime(self._path(key), follow_symlinks=False)
        except FileNotFoundError:
            pass

    @_os_errors
    def open_range(self, key: str, offset: int, length: int) -> RangeReader:
        path = self._path(key)
        try:
            return _FileRange(path, offset, length)
        except FileNotFoundError:
            raise StoreError(
                f"{self.url}/{key} is missing from the cache store",
                hint="the store was pruned or damaged; save the key again",
            ) from None


def _is_name_record(name: str) -> bool:
    return name.startswith(LONG_MARK) and name.endswith(NAME_SUFFIX)


def _walk(top: Path) -> Iterator[tuple[str, list[str]]]:
    """(folder, its regular files' names) under ``top``, in sorted order, top first.

    Iterative (a planted tree a thousand levels deep would overflow a recursive walk), never
    through a link; links, FIFOs and the like are no objects and are not listed; a folder that
    cannot be listed is passed over, as ``os.walk`` does.
    """
    stack = [str(top)]
    while stack:
        folder = stack.pop()
        try:
            with os.scandir(folder) as listed:
                entries = sorted(listed, key=lambda entry: entry.name)
        except OSError:
            continue
        names, below = [], []
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    below.append(entry)
                elif entry.is_file(follow_symlinks=False):
                    names.append(entry.name)
            except OSError:
                continue
        yield folder, names
        stack.extend(entry.path for entry in reversed(below))
