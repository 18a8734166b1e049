"""The store's fast path: requests signed by :mod:`gpuci.cache.sigv4`, no boto3.

Refs, manifests, listings, HEADs and plain PUTs go through :mod:`gpuci.cache.s3rest` when the
credentials are in the environment; ranged GETs of blobs and packs go through presigned URLs
on the store's bounded ``http.client`` pool (:mod:`gpuci.cache.s3pool`), reading straight into
the caller's buffers. An answer only boto3 can act on (a region redirect) hands the store over
to boto3 for the rest of the run.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

from gpuci.cache import s3net, sigv4
from gpuci.cache.s3client import BotoClient
from gpuci.cache.s3errors import _HAND_OVER_CODES
from gpuci.cache.s3http import BadResponse, DeadlineExceeded
from gpuci.cache.s3pool import Pool, Ranged
from gpuci.cache.s3rest import BadAnswer, Reply, RestClient, Unreachable
from gpuci.cache.store import ObjectInfo, RangeReader, TransientError
from gpuci.errors import StoreError

if TYPE_CHECKING:
    from gpuci.cache.splicing import Pipe


def _total_size(content_range: str) -> int | None:
    """The object's size from ``Content-Range: bytes a-b/total`` (None when absent or ``*``)."""
    _, _, total = content_range.rpartition("/")
    return int(total) if total.strip().isdigit() else None


class _Range:
    """A ranged GET's body (:class:`gpuci.cache.s3pool.Ranged`) for the transfer: a dropped,
    cut or stalled connection is a TransientError the transfer retries."""

    def __init__(self, body: Ranged, store: FastPath) -> None:
        self._body, self._store = body, store
        if hasattr(body, "splice_into"):
            self.splice_into = self._splice_into

    def readinto(self, buffer: memoryview) -> int:
        return self._step(self._body.readinto, buffer)

    def _splice_into(self, pipe: Pipe, limit: int) -> int:
        """Up to ``limit`` body bytes into ``pipe``, in the kernel (see gpuci.cache.splicing)."""
        return self._step(self._body.splice_into, pipe, limit)

    def _step(self, read: Callable[..., int], *args: Any) -> int:
        try:
            return read(*args)
        except DeadlineExceeded:
            raise TransientError(
                f"the body was slower than the time limit ({s3net.TIMEOUT_VARIABLE})"
            ) from None
        except OSError as exc:
            raise TransientError(f"connection dropped mid-body: {exc}") from None

    def close(self) -> None:
        self._body.close()


class FastPath(BotoClient):
    """Signed requests without boto3 (mixed into :class:`gpuci.cache.s3.S3Store`)."""

    prefix: str
    pool: Pool
    _rest: RestClient | None
    _presigner: sigv4.Presigner | None
    _urls: dict[str, str]
    _urls_lock: threading.Lock

    def _fast(self, op: str, method: str, key: str, **kwargs: Any) -> Reply | None:
        """One request signed by :mod:`gpuci.cache.sigv4`: its final answer (after retries),
        or None when boto3 must answer instead (no fast path here, or an answer only boto3
        can act on: a redirect to the bucket's region); a hand-over lasts for the run."""
        rest = self._rest
        if rest is None:
            return None
        try:
            reply = rest.call(method, self.prefix + key, **kwargs)
        except Unreachable as exc:
            raise self._unreachable(exc.name, exc.detail) from None
        except BadAnswer as exc:
            raise self._bad_answer(op, key, str(exc)) from None
        if self._hand_over(reply):
            return None
        return reply

    def _hand_over(self, reply: Reply) -> bool:
        if 300 <= reply.status < 400 or reply.code in _HAND_OVER_CODES:
            self._slow_path()
            return True
        return False

    def _fast_list(self, prefix: str) -> Generator[ObjectInfo, None, bool]:
        """The listing through the fast path; returns False when boto3 must list instead."""
        assert self._rest is not None
        strip, first = len(self.prefix), True
        try:
            for reply, entries in self._rest.list_pages(self.prefix + prefix):
                if reply.status != 200:
                    if first and self._hand_over(reply):
                        return False
                    raise self._coded_error(reply.code, reply.message, "list", prefix)
                first = False
                for item in entries:
                    if not item.key.startswith(self.prefix):
                        raise self._bad_answer("list", prefix, f"a key outside {self.prefix!r}")
                    yield ObjectInfo(item.key[strip:], item.size, item.modified, item.etag)
        except Unreachable as exc:
            raise self._unreachable(exc.name, exc.detail) from None
        except BadAnswer as exc:
            raise self._bad_answer("list", prefix, str(exc)) from None
        return True

    def _slow_path(self) -> None:
        """Presign through boto3 from now on."""
        self._presigner = None
        self._rest = None
        with self._urls_lock:
            self._urls.clear()

    def _url(self, key: str) -> str:
        with self._urls_lock:
            url = self._urls.get(key)
        if url is None:
            presigner = self._presigner
            if presigner is not None:
                url = presigner.url(self.prefix + key, 6 * 3600)
            else:
                url = self.client.generate_presigned_url(
                    "get_object",
                    Params={"Bucket": self.bucket, "Key": self.prefix + key},
                    ExpiresIn=6 * 3600,
                )
            with self._urls_lock:
                self._urls[key] = url
        return url

    def open_range(self, key: str, offset: int, length: int) -> RangeReader:
        headers = {"Range": f"bytes={offset}-{offset + length - 1}"}
        try:
            status, answer, got = self.pool.open(self._url(key), headers)
        except BadResponse as exc:
            raise self._bad_answer("get", key, str(exc)) from None
        except OSError as exc:
            raise self._transport_error(exc) from None
        if isinstance(got, bytes):
            raise self._status_error(status, got, key)
        total = _total_size(answer.get("content-range", ""))
        try:
            self._check_ok(status, got.length, key, offset, length, total)
        except Exception:
            got.close()
            raise
        return _Range(got, self)

    def _check_ok(
        self,
        status: int,
        size: int | None,
        key: str,
        offset: int,
        length: int,
        total: int | None = None,
    ) -> None:
        if total is not None and offset + length > total:
            raise self._beyond_end(key, offset, length, total)
        if status == 206 and size is not None and size != length:
            raise TransientError(f"server sent {size} bytes for a {length}-byte range")
        if status == 200 and offset:
            raise StoreError(
                f"the S3 endpoint {self._where()} ignored a Range request",
                hint="use an S3-compatible endpoint that supports ranged GETs",
            )
