"""The store's ranged GETs of blobs and packs: presigned URLs on its bounded ``http.client``
pool (:mod:`gpuci.cache._stores.s3.pool`), read straight into the caller's buffers.

An answer is checked against the range asked for before a byte of it is read: a ``206`` must
say ``Content-Range: bytes first-last/total`` for exactly that range and carry exactly that
many bytes, and a ``200`` (a server that ignored the Range) is taken only when it is exactly
those bytes (the whole object, from offset 0). Anything else ends the step at once: reading a
body of 10^12 claimed bytes is never started.

The transfer retries a failed range from where it stopped (:class:`~gpuci.cache._stores.base.
TransientError`); every attempt at one range shares one deadline
(:meth:`gpuci.cache._stores.s3.network. Limits.deadline` of its size, from the first attempt), so a
stalled or trickling store ends the step in minutes however many attempts ``AWS_MAX_ATTEMPTS``
allows.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from gpuci import settings
from gpuci.cache._stores.base import RangeReader, TransientError
from gpuci.cache._stores.s3 import network
from gpuci.cache._stores.s3.pool import Ranged
from gpuci.cache._stores.s3.transport import BadResponse, DeadlineExceeded, content_range
from gpuci.errors import StoreError
from gpuci.units import human_bytes

if TYPE_CHECKING:
    from collections.abc import Mapping

    from gpuci.cache._stores.s3.pool import Pool
    from gpuci.cache._stores.s3.signer import Presigner
    from gpuci.cache._stores.splicing import Pipe

    class S3Store(Protocol):
        """What a ranged GET needs of :class:`gpuci.cache._stores.s3.store.S3Store` (named here, so
        this module does not import the store that imports it)."""

        url: str
        prefix: str
        limits: network.Limits
        signer: Presigner
        pool: Pool
        _deadlines: Deadlines

        def _where(self) -> str: ...
        def _too_slow(self, key: str, end: int) -> StoreError: ...
        def _bad_answer(self, op: str, key: str, what: str) -> StoreError: ...
        def _transport_error(self, exc: BaseException) -> TransientError: ...
        def _beyond_end(self, key: str, offset: int, length: int, total: int) -> Exception: ...
        def _status_error(
            self, status: int, body: bytes, key: str, answer: Mapping[str, str] | None = None
        ) -> Exception: ...


# How long a presigned ranged GET's URL stays good (it is used at once).
_URL_FOR = 900


class Deadlines:
    """One deadline per range being fetched, shared by its attempts: (key, end) -> when."""

    def __init__(self) -> None:
        self._due: dict[tuple[str, int], float] = {}
        self._lock = threading.Lock()

    def of(self, key: str, end: int, seconds: float) -> float:
        """The range's deadline: set by its first attempt, shared by the ones after."""
        now = time.monotonic()
        with self._lock:
            if len(self._due) > 4096:  # ranges whose transfer gave up: never finished
                self._due = {k: v for k, v in self._due.items() if v > now}
            due = self._due.get((key, end))
            if due is None:
                due = self._due[(key, end)] = now + seconds
            return due

    def done(self, key: str, end: int) -> None:
        with self._lock:
            self._due.pop((key, end), None)


class _Range:
    """A ranged GET's body for the transfer: a dropped, cut or stalled connection is a
    TransientError the transfer retries; past the range's deadline, a StoreError that ends it."""

    def __init__(self, body: Ranged, store: S3Store, key: str, end: int, due: float) -> None:
        self._body, self._store = body, store
        self._key, self._end, self._due = key, end, due
        if hasattr(body, "splice_into"):
            self.splice_into = self._splice_into

    def readinto(self, buffer: memoryview) -> int:
        return self._step(self._body.readinto, buffer)

    def _splice_into(self, pipe: Pipe, limit: int) -> int:
        """Up to ``limit`` body bytes into ``pipe``, in the kernel (see
        gpuci.cache._stores.splicing)."""
        return self._step(self._body.splice_into, pipe, limit)

    def _step(self, read: Callable[..., int], *args: Any) -> int:
        try:
            n = read(*args)
        except DeadlineExceeded:
            if time.monotonic() >= self._due:
                self._store._deadlines.done(self._key, self._end)
                raise self._store._too_slow(self._key, self._end) from None
            raise TransientError(
                f"the body was slower than the time limit ({settings.S3_TIMEOUT.name}, "
                f"{settings.S3_MIN_RATE.name})"
            ) from None
        except OSError as exc:
            raise TransientError(f"connection dropped mid-body: {exc}") from None
        if self._body.left == 0:
            self._store._deadlines.done(self._key, self._end)
        return n

    def close(self) -> None:
        self._body.close()


def open_range(store: S3Store, key: str, offset: int, length: int) -> RangeReader:
    """Bytes ``offset..offset+length`` of ``key``, checked against what was asked for.

    Raises:
        TransientError: worth another attempt (a dropped connection, 5xx, throttling).
        StoreError: the store answered something no retry will fix, or the range ran out of
            time (one line naming the endpoint and the fix).
        IntegrityError: the object is shorter than the manifest says.
    """
    end = offset + length
    due = store._deadlines.of(key, end, store.limits.deadline(length))
    if time.monotonic() >= due:
        store._deadlines.done(key, end)  # a later fetch of this range starts afresh
        raise store._too_slow(key, end)
    headers = {"Range": f"bytes={offset}-{end - 1}"}
    url = store.signer.url(store.prefix + key, _URL_FOR, until=due)
    try:
        status, answer, got = store.pool.open(url, headers, due)
    except BadResponse as exc:
        raise store._bad_answer("get", key, str(exc)) from None
    except DeadlineExceeded as exc:
        if time.monotonic() >= due:
            store._deadlines.done(key, end)
            raise store._too_slow(key, end) from None
        raise store._transport_error(exc) from None
    except OSError as exc:
        raise store._transport_error(exc) from None
    try:
        if isinstance(got, bytes):
            raise store._status_error(status, got, key, answer)
        try:
            _check(store, status, answer, got.length, key, offset, length)
        except Exception:
            got.close()
            raise
    except TransientError:
        raise
    except Exception:
        store._deadlines.done(key, end)  # no retry follows: a later fetch starts afresh
        raise
    return _Range(got, store, key, end, due)


def _check(
    store: S3Store,
    status: int,
    answer: dict[str, str],
    size: int,
    key: str,
    offset: int,
    length: int,
) -> None:
    """The answer carries exactly the bytes asked for, or the step ends here."""
    if status == 200:
        if offset == 0 and size == length:
            return  # the whole object, which is the range asked for
        if offset == 0 and size < length:
            raise store._beyond_end(key, offset, length, size)
        raise StoreError(
            f"the S3 endpoint {store._where()} ignored a Range request: asked for "
            f"{human_bytes(length)} at offset {offset} of {store.url}/{key}, it sent a "
            f"{size}-byte answer",
            hint="use an S3-compatible endpoint that supports ranged GETs",
        )
    try:
        first, last, total = content_range(answer.get("content-range", ""))
    except ValueError as exc:
        raise store._bad_answer("get", key, str(exc)) from None
    if total is not None and offset + length > total:
        raise store._beyond_end(key, offset, length, total)
    if (first, last) != (offset, offset + length - 1) or size != length:
        raise store._bad_answer(
            "get",
            key,
            f"asked for bytes {offset}-{offset + length - 1}, it sent bytes {first}-{last} "
            f"in {size} bytes",
        )
