"""The store interface: plain object storage (get, put, conditional put, list,
ranged read, upload a file), so save, restore, prune and the tier are written once above it.
Backends: :mod:`gpuci.cache._stores.file` and :mod:`gpuci.cache._stores.s3`;
:func:`gpuci.cache._stores.open_store` picks one from a URL."""

from __future__ import annotations

import builtins
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol
from urllib.parse import urlsplit, urlunsplit

from gpuci.errors import InputError

if TYPE_CHECKING:  # a warm file-store restore starts no thread: threading loads on first use
    import threading


class SourceChanged(InputError):
    """A file being saved no longer hashes to the name it was given: a job is still writing it."""

    def __init__(self, path: Path | str) -> None:
        super().__init__(
            f"{path} changed while it was being saved",
            hint="save after the step that writes the tree has finished",
        )


# An object's modified time when the store does not say it in a form that can be read (a HEAD
# without a readable Last-Modified): the newest time there is, so every "older than" test is
# false and prune keeps the object. Read as 0.0 (1970), it made anything look ancient.
UNKNOWN_MODIFIED = math.inf


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """What a store says of one object: its key, size, age and tag (as read, untrusted)."""

    key: str  # relative to the store's root
    size: int
    modified: float  # seconds since the epoch; UNKNOWN_MODIFIED when the store did not say
    etag: str = ""


class RangeReader(Protocol):
    def readinto(self, buffer: memoryview) -> int: ...
    def close(self) -> None: ...


class MultipartUpload(Protocol):
    """One object uploaded in parts; it appears only once :meth:`complete` succeeds."""

    def send(
        self, number: int, path: Path, offset: int, length: int, on_read: Callable[[int], None]
    ) -> None:
        """Upload bytes ``offset..offset+length`` of ``path`` as part ``number`` (from 1)."""

    def complete(self) -> None: ...

    def abort(self) -> None:
        """Drop the parts sent so far (best effort: a failed save must not fail twice)."""


class TransientError(Exception):
    """A failure worth retrying (5xx, SlowDown, a dropped connection); never shown as is."""


class Store(ABC):
    """Object storage as the cache needs it; keys are the layout's ``blobs/...`` and so on."""

    url: str
    # The longest object name (UTF-8 bytes, after the layout's quoting) the store can hold;
    # None when there is no limit (a file store hashes long names).
    name_limit: int | None = None
    # Told of every refusal (503 SlowDown, 429) while a transfer runs, so its concurrency
    # controller backs off; None when nobody listens (see gpuci.cache._common.throttle_signals).
    on_throttle: Callable[[], None] | None = None
    # Whether put_if_absent/put_if_match really refuse (gpuci.cache._format.refs); None: ask the
    # server once. A file store knows: its conditions are a hard link and a lock.
    honours_conditional_writes: bool | None = None
    # Whether reads come off a disk of this machine (a folder) rather than a network: a restore
    # filling the runner-local tier then writes each large file into the tier and copies it
    # (the disk, not the CPU, is the limit), else it mirrors the hashed bytes there past the
    # page cache (gpuci.cache._stores.tier_fill).
    local_disk: bool = False

    @abstractmethod
    def exists(self) -> bool:
        """Whether the store itself (bucket, folder) exists; a missing one is an empty cache."""

    @abstractmethod
    def head(self, key: str) -> ObjectInfo | None: ...

    @abstractmethod
    def get(self, key: str, limit: int | None = None) -> tuple[bytes, str] | None:
        """(bytes, etag), or None when the object does not exist.

        With ``limit``, at most ``limit + 1`` bytes are read: a longer answer means the object
        is over the caller's cap, and a hostile store cannot make us hold all of it.
        """

    @abstractmethod
    def put(self, key: str, data: bytes) -> str:
        """Write unconditionally (immutable, content-addressed objects); returns the etag."""

    @abstractmethod
    def put_if_absent(self, key: str, data: bytes) -> str:
        """Create only if absent (``If-None-Match: *``); ConflictError otherwise."""

    @abstractmethod
    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        """Replace only if unchanged since read (``If-Match``); ConflictError otherwise."""

    def upload_file(
        self, key: str, path: Path, size: int, on_bytes: Callable[[int], None], sha256: str
    ) -> None:
        """A store without parts (:meth:`multipart` is None) copies a local file in whole; the
        object appears only if the bytes copied in hash to ``sha256`` (else
        :class:`SourceChanged`, nothing stored): the file was hashed earlier and a job may
        still be writing it. A store with parts never gets here: the save sends those bytes
        in parts and completes the upload only when they hash to the name."""
        raise NotImplementedError(f"{type(self).__name__} sends files with multipart()")

    def multipart(self, key: str) -> MultipartUpload | None:
        """A multipart upload whose parts the caller sends in parallel, each on its own
        connection under the save's concurrency control; None: send with upload_file."""
        return None

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

    def leftovers(self, older_than: float) -> builtins.list[ObjectInfo]:
        """What killed saves left behind, older than ``older_than`` seconds (a running save's
        is younger), for prune to remove: a file store's temp files, an S3 store's open
        multipart uploads; none by default."""
        return []

    def remove_leftover(self, rel: str) -> None:  # noqa: B027 (a store with none has none to remove)
        """Remove one of :meth:`leftovers` (one gone already is fine)."""

    def stop_flag(self) -> threading.Event:
        """A transfer's stop flag (its WorkPool's ``cancelled``, set on Ctrl-C or a failure for
        good). A network store ends its requests in flight the moment it is set and sends none
        after (:meth:`gpuci.cache._stores.s3.pool.Pool.stop_flag`); here a plain event: a
        folder's reads and writes end on their own."""
        import threading

        return threading.Event()


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
