"""The S3 store: one bounded client for every operation, whatever the credentials.

Credentials, region and endpoint come from the whole AWS chain
(:mod:`gpuci.cache._stores.s3.config`: the environment without botocore, anything else through
botocore's session). Every request is signed by :mod:`gpuci.cache._stores.s3.signer` and sent by
:mod:`gpuci.cache._stores.s3.client` on the store's bounded ``http.client`` pool
(:mod:`gpuci.cache._stores.s3.pool`): refs, manifests, listings, HEADs, PUTs, conditional writes,
multipart uploads, server-side copies; ranged GETs of blobs and packs read straight into the
caller's buffers (:mod:`gpuci.cache._stores.s3.ranged`). Each operation has one path, one deadline
and one set of words for its failures (:class:`gpuci.cache._stores.s3.errors.S3Errors`).
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any
from urllib.parse import quote

from gpuci.cache._stores.base import ObjectInfo, RangeReader, Store
from gpuci.cache._stores.s3 import config, network, ranged, signer
from gpuci.cache._stores.s3.client import (
    ListingRefused,
    Redirected,
    Reply,
    RestClient,
    Unreachable,
    http_time,
)
from gpuci.cache._stores.s3.errors import S3Errors
from gpuci.cache._stores.s3.multipart import (
    Multipart,
    abort_open,
    copy_in_parts,
    open_uploads,
    upload_id_of,
)
from gpuci.cache._stores.s3.pool import Pool, Stop
from gpuci.cache._stores.s3.transport import BadResponse, count

__all__ = ["S3Store"]

# CopyObject copies up to 5 GiB; above, the copy goes in parts (UploadPartCopy).
COPY_LIMIT = 5 << 30


class S3Store(S3Errors, Store):
    """A store at ``s3://bucket/prefix``."""

    def __init__(
        self,
        bucket: str,
        prefix: str,
        *,
        endpoint_url: str | None,
        region: str | None,
        environ: Mapping[str, str],
        mask: Callable[[str], None] | None,
    ) -> None:
        self.bucket = bucket
        self.prefix = f"{prefix}/" if prefix else ""
        self.url = f"s3://{bucket}/{prefix}".rstrip("/")
        self.name_limit = 1024 - len(self.prefix.encode())  # S3's limit on an object's name
        self.endpoint_url = endpoint_url  # the input, as given (messages, the journal)
        self.environ = environ
        self.mask = mask
        self.limits = network.Limits.from_environ(environ)
        settings = config.resolve(bucket, endpoint_url, region, environ, mask, self.limits)
        # The endpoint requests go to, and what chose it (input, variable, profile); "" for AWS.
        self.endpoint, self.endpoint_source = settings.endpoint, settings.endpoint_source
        self.signer = signer.Presigner(settings.address, settings.creds)
        self.region = self.signer.region
        _, self.max_attempts = config.retry_settings(environ)
        self.pool = Pool(environ, self.limits)
        self._rest = RestClient(self.signer, self.max_attempts, self.pool, bucket)
        self._rest.on_transient = self._heard_transient
        self._deadlines = ranged.Deadlines()

    # ----- one request ---------------------------------------------------------------------------
    def _call(self, op: str, method: str, key: str, operation: str = "", **kwargs: Any) -> Reply:
        """One operation's final answer (after retries and a region redirect); a failure to get
        one, in the store's words."""
        try:
            return self._rest.call(method, self.prefix + key if key else "", **kwargs)
        except Unreachable as exc:
            raise self._unreachable(exc.name, exc.detail) from None
        except BadResponse as exc:
            raise self._bad_answer(op, key, str(exc)) from None
        except Redirected as exc:
            raise self._redirected(exc, op, key, operation) from None

    def _ok(self, op: str, method: str, key: str, operation: str = "", **kwargs: Any) -> Reply:
        """As :meth:`_call`, for an answer that must be 2xx (``complete``: a 200 whose body is
        an error, as CompleteMultipartUpload and CopyObject may send, fails too)."""
        complete = kwargs.pop("complete", False)
        reply = self._call(op, method, key, operation, **kwargs)
        if not 200 <= reply.status < 300 or (complete and reply.error_body):
            raise self._coded_error(reply.code, reply.message, op, key, operation=operation)
        return reply

    def stop_flag(self) -> Stop:
        """A transfer's stop flag (its WorkPool's ``cancelled``): once set, the store's requests
        in flight end at once, none is sent after and no retry waits on (:mod:`.pool`)."""
        return self.pool.stop_flag()

    def _heard_transient(self) -> None:
        """An attempt was refused or dropped: the transfer's controller hears it."""
        listener = self.on_throttle
        if listener is not None:
            listener()

    # ----- the operations ------------------------------------------------------------------------
    def exists(self) -> bool:
        reply = self._call("exists", "HEAD", "")
        if reply.status == 200:
            return True
        if reply.status == 404:
            return False
        raise self._coded_error(reply.code, reply.message, "exists")

    def head(self, key: str) -> ObjectInfo | None:
        reply = self._call("head", "HEAD", key)
        if reply.status == 404:
            return None
        if reply.status != 200:
            raise self._coded_error(reply.code, reply.message, "head", key)
        try:
            size = count(reply.headers.get("content-length", ""))
        except ValueError as exc:
            raise self._bad_answer("head", key, f"Content-Length: {exc}") from None
        modified = http_time(reply.headers.get("last-modified", ""))
        return ObjectInfo(key, size, modified, reply.headers.get("etag", ""))

    def get(self, key: str, limit: int | None = None) -> tuple[bytes, str] | None:
        reply = self._call("get", "GET", key, limit=limit)
        if reply.status == 200:
            return reply.body, reply.headers.get("etag", "")
        if reply.code in ("NoSuchKey", "404"):
            return None
        raise self._coded_error(reply.code, reply.message, "get", key)

    def put(self, key: str, data: bytes) -> str:
        return self._ok("put", "PUT", key, body=data).headers.get("etag", "")

    def put_content(self, key: str, data: bytes) -> str:
        """A blob or pack from bytes the save has hashed: one presigned PUT, payload unsigned
        (not hashed a second time to sign it) and not copied (a memoryview)."""
        until = time.monotonic() + self.limits.deadline(len(data))
        reply = self._ok("put", "PUT", key, body=memoryview(data), unsigned=True, until=until)
        return reply.headers.get("etag", "")

    def put_if_absent(self, key: str, data: bytes) -> str:
        reply = self._ok("put", "PUT", key, body=data, headers={"If-None-Match": "*"})
        return reply.headers.get("etag", "")

    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        reply = self._ok("put", "PUT", key, body=data, headers={"If-Match": etag})
        return reply.headers.get("etag", "")

    def multipart(self, key: str) -> Multipart:
        reply = self._ok("upload", "POST", key, "CreateMultipartUpload", query={"uploads": ""})
        upload_id = upload_id_of(reply)
        if upload_id is None:
            raise self._bad_answer("upload", key, "no UploadId in the answer")
        return Multipart(self, key, upload_id)

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        """Every object under ``prefix``, a page at a time: nothing beyond one page is held
        here (the listing's caps: :mod:`gpuci.cache._stores.s3.client`). A key outside the
        prefix asked for is a bad answer (a server or proxy that ignores ``prefix=``): prune
        would take it for data nothing names, restore-keys for a match. A file store lists
        only under the prefix by construction."""
        strip, asked = len(self.prefix), self.prefix + prefix
        try:
            for entries in self._rest.list_pages(asked):
                for item in entries:
                    if not item.key.startswith(asked):
                        raise self._bad_answer("list", prefix, f"a key outside {asked!r}")
                    yield ObjectInfo(item.key[strip:], item.size, item.modified, item.etag)
        except ListingRefused as exc:
            raise self._coded_error(exc.reply.code, exc.reply.message, "list", prefix) from None
        except Unreachable as exc:
            raise self._unreachable(exc.name, exc.detail) from None
        except BadResponse as exc:
            raise self._bad_answer("list", prefix, str(exc)) from None
        except Redirected as exc:
            raise self._redirected(exc, "list", prefix, "") from None

    def delete(self, key: str) -> None:
        self._ok("delete", "DELETE", key)

    def leftovers(self, older_than: float) -> builtins.list[ObjectInfo]:
        """The multipart uploads killed saves left open under ``blobs/``, older than
        ``older_than`` s (their parts are billed until aborted): :func:`.multipart.open_uploads`."""
        return open_uploads(self, older_than)

    def remove_leftover(self, rel: str) -> None:
        abort_open(self, rel)

    def touch(self, key: str) -> None:
        """A server-side copy onto itself: no bytes leave S3 (in parts above 5 GiB)."""
        source = quote(f"/{self.bucket}/{self.prefix}{key}", safe="/~")
        amz = {"x-amz-copy-source": source, "x-amz-metadata-directive": "REPLACE"}
        reply = self._call("touch", "PUT", key, "CopyObject", amz=amz)
        if 200 <= reply.status < 300 and not reply.error_body:
            return
        if reply.code in ("InvalidRequest", "EntityTooLarge"):
            info = self.head(key)
            if info is not None and info.size > COPY_LIMIT:
                copy_in_parts(self, key, source, info.size)
                return
        raise self._coded_error(reply.code, reply.message, "touch", key, operation="CopyObject")

    def open_range(self, key: str, offset: int, length: int) -> RangeReader:
        return ranged.open_range(self, key, offset, length)
