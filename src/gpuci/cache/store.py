"""Stores: where blobs, packs, manifests and refs live. One interface, two backends.

The interface is plain object storage (get, put, conditional put, list, ranged read, upload a
file), so everything above it (save, restore, listing, a later runner-local tier or prune) is
written once. ``file:///dir`` is :class:`LocalStore`, the embedded default; ``s3://bucket/prefix``
is :class:`gpuci.cache.s3.S3Store`, imported only when used so boto3 never loads otherwise.

A later tier (a runner-local blob store consulted before the remote) wraps a Store and answers
``open_range`` from disk when it can; prune builds on ``list`` (with ``modified``) and ``delete``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import unquote, urlparse, urlsplit, urlunsplit

from gpuci.cache import layout
from gpuci.errors import ConflictError, InputError, StoreError


@dataclass(frozen=True)
class ObjectInfo:
    key: str  # relative to the store's root
    size: int
    modified: float  # seconds since the epoch
    etag: str = ""


class RangeReader(Protocol):
    def readinto(self, buffer: memoryview) -> int: ...
    def close(self) -> None: ...


class TransientError(Exception):
    """A failure worth retrying (5xx, SlowDown, a dropped connection); never shown as is."""


class Store(ABC):
    """Object storage as the cache needs it; keys are the layout's ``blobs/...`` and so on."""

    url: str

    @abstractmethod
    def exists(self) -> bool:
        """Whether the store itself (bucket, folder) exists; a missing one is an empty cache."""

    @abstractmethod
    def head(self, key: str) -> ObjectInfo | None: ...

    @abstractmethod
    def get(self, key: str) -> tuple[bytes, str] | None:
        """(bytes, etag), or None when the object does not exist."""

    @abstractmethod
    def put(self, key: str, data: bytes) -> str:
        """Write unconditionally (immutable, content-addressed objects); returns the etag."""

    @abstractmethod
    def put_if_absent(self, key: str, data: bytes) -> str:
        """Create only if absent (``If-None-Match: *``); ConflictError otherwise."""

    @abstractmethod
    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        """Replace only if unchanged since read (``If-Match``); ConflictError otherwise."""

    @abstractmethod
    def upload_file(self, key: str, path: Path, size: int, on_bytes: Callable[[int], None]) -> None:
        """Copy a local file in (multipart when large); the object appears whole or not at all."""

    @abstractmethod
    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        """Every object whose key starts with ``prefix``, across all pages."""

    @abstractmethod
    def delete(self, key: str) -> None: ...

    @abstractmethod
    def touch(self, key: str) -> None:
        """Make an existing object's modified time now: a save reusing an old blob keeps it
        younger than prune's grace period, so a prune racing the save leaves it alone."""

    @abstractmethod
    def open_range(self, key: str, offset: int, length: int) -> RangeReader:
        """A reader over ``length`` bytes from ``offset``; raises TransientError to retry."""


# ----- the local store -------------------------------------------------------------------------


class _FileRange:
    def __init__(self, path: Path, offset: int, length: int) -> None:
        self._fd = os.open(path, os.O_RDONLY)
        self._pos = offset
        self._left = length

    def readinto(self, buffer: memoryview) -> int:
        want = min(len(buffer), self._left)
        if want <= 0:
            return 0
        n = os.preadv(self._fd, [buffer[:want]], self._pos)
        self._pos += n
        self._left -= n
        return n

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _etag(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


class LocalStore(Store):
    """A folder: objects are files, writes are temp-file-then-rename, refs move under a lock."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.url = root.as_uri()

    def _path(self, key: str) -> Path:
        return self.root / key

    def _temp(self, final: Path) -> Path:
        final.parent.mkdir(parents=True, exist_ok=True)
        return final.with_name(f"{final.name}{layout.INCOMPLETE}-{uuid.uuid4().hex[:12]}")

    @contextlib.contextmanager
    def _lock(self, key: str) -> Iterator[None]:
        locks = self.root / "locks"
        locks.mkdir(parents=True, exist_ok=True)
        name = hashlib.sha256(key.encode()).hexdigest()[:32]
        fd = os.open(locks / f"{name}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _write_temp(self, final: Path, data: bytes) -> Path:
        temp = self._temp(final)
        with open(temp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        return temp

    def exists(self) -> bool:
        return self.root.is_dir()

    def head(self, key: str) -> ObjectInfo | None:
        try:
            st = self._path(key).stat()
        except (FileNotFoundError, NotADirectoryError):
            return None
        return ObjectInfo(key, st.st_size, st.st_mtime)

    def get(self, key: str) -> tuple[bytes, str] | None:
        try:
            data = self._path(key).read_bytes()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None
        return data, _etag(data)

    def put(self, key: str, data: bytes) -> str:
        final = self._path(key)
        os.replace(self._write_temp(final, data), final)
        return _etag(data)

    def put_if_absent(self, key: str, data: bytes) -> str:
        final = self._path(key)
        temp = self._write_temp(final, data)
        try:
            with self._lock(key):
                os.link(temp, final)  # atomic create-if-absent, like If-None-Match: *
        except FileExistsError:
            raise ConflictError(f"{key} was created by someone else first") from None
        finally:
            temp.unlink(missing_ok=True)
        return _etag(data)

    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        final = self._path(key)
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

    def upload_file(self, key: str, path: Path, size: int, on_bytes: Callable[[int], None]) -> None:
        final = self._path(key)
        temp = self._temp(final)
        try:
            with open(path, "rb") as src, open(temp, "wb") as dst:
                left = size
                while left > 0:
                    try:  # in-kernel copy (reflinks on btrfs/xfs), no bytes through Python
                        n = os.copy_file_range(src.fileno(), dst.fileno(), min(left, 64 << 20))
                    except OSError as exc:
                        if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL):
                            raise
                        n = dst.write(src.read(min(left, layout.IO_CHUNK)))
                    if n == 0:
                        raise StoreError(
                            f"{path} shrank while it was being saved",
                            hint="do not modify the tree while saving it",
                        )
                    left -= n
                    on_bytes(n)
            os.replace(temp, final)
        finally:
            temp.unlink(missing_ok=True)

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        folder, _, _ = prefix.rpartition("/")
        base = self.root / folder if folder else self.root
        if not base.is_dir():
            return
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames.sort()
            for name in sorted(filenames):
                if layout.INCOMPLETE in name:
                    continue
                full = Path(dirpath) / name
                key = full.relative_to(self.root).as_posix()
                if key.startswith(prefix):
                    try:
                        st = full.stat()
                    except FileNotFoundError:
                        continue
                    yield ObjectInfo(key, st.st_size, st.st_mtime)

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)

    def touch(self, key: str) -> None:
        try:
            os.utime(self._path(key))
        except FileNotFoundError:
            pass

    def open_range(self, key: str, offset: int, length: int) -> RangeReader:
        path = self._path(key)
        try:
            return _FileRange(path, offset, length)
        except FileNotFoundError:
            raise StoreError(
                f"{self.url}/{key} is missing from the cache store",
                hint="the store was pruned or damaged; save the key again",
            ) from None


# ----- opening a store from its URL ------------------------------------------------------------


def redact_url(text: str) -> str:
    """A URL fit to print: user, password and query string replaced by ``***``."""
    try:
        parts = urlsplit(text)
    except ValueError:
        return "***"
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rpartition("@")[2]
    query = "***" if parts.query else ""
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def describe(store: Store) -> str:
    """Where a store is, for messages: its URL, and for S3 the endpoint when not AWS."""
    endpoint = getattr(store, "endpoint_url", None)
    where = redact_url(store.url)
    return f"{where} at {redact_url(endpoint)}" if endpoint else where


def _refuse_secrets_in_url(text: str, mask: Callable[[str], None] | None) -> None:
    """An S3 URL names a bucket; credentials in it would be printed and are never used."""
    parsed = urlsplit(text)
    secrets = [s for s in (parsed.username, parsed.password, parsed.query) if s]
    if mask is not None:
        for secret in secrets:
            mask(secret)
            if unquote(secret) != secret:
                mask(unquote(secret))
    if parsed.username or parsed.password:
        raise InputError(
            f"store '{redact_url(text)}' carries credentials in the URL",
            hint="write it as s3://bucket/prefix and give S3 credentials through the "
            "environment (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY from secrets)",
        )


def open_store(
    url: str | None,
    *,
    endpoint_url: str | None = None,
    region: str | None = None,
    environ: Mapping[str, str] | None = None,
    mask: Callable[[str], None] | None = None,
) -> Store:
    """``s3://bucket/prefix`` or ``file:///dir``; empty means the embedded local store."""
    env = os.environ if environ is None else environ
    text = (url or "").strip() or layout.default_store_url(env)
    parsed = urlparse(text)
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise InputError(
                f"store '{text}' names a host; a file store is a local folder",
                hint="write it as file:///absolute/path",
            )
        return LocalStore(Path(unquote(parsed.path)))
    if parsed.scheme == "s3":
        _refuse_secrets_in_url(text, mask)
        if not parsed.netloc:
            raise InputError(
                f"store '{redact_url(text)}' has no bucket", hint="write it as s3://bucket/prefix"
            )
        from gpuci.cache.s3 import S3Store

        return S3Store(
            parsed.netloc,
            parsed.path.strip("/"),
            endpoint_url=(endpoint_url or "").strip() or None,
            region=(region or "").strip() or None,
            environ=env,
            mask=mask,
        )
    if not parsed.scheme and text.startswith("/"):
        return LocalStore(Path(text))
    raise InputError(
        f"store '{redact_url(text)}' is neither s3://bucket/prefix nor file:///dir",
        hint="set store to s3://bucket/prefix or file:///absolute/path",
    )
