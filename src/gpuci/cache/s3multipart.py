"""S3 multipart uploads for the store: parts sent from any thread, as bytes the save read and
hashed, or as slices of the file.

With the credentials in the environment (the store's fast path) the upload is S3's REST calls
signed here (:class:`FastMultipart`): each part a presigned PUT of the bytes as they are, not
hashed again to sign them, on the store's connection pool; no boto3 to import. Otherwise they
go through boto3 (:class:`Multipart`: ``upload_part``, ``complete_multipart_upload``). Errors
are worded by the store, naming S3's operation.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from gpuci.cache.s3net import MIN_BODY_RATE
from gpuci.cache.s3rest import Reply
from gpuci.cache.store import SourceChanged
from gpuci.errors import InputError, StoreError

_UPLOAD_ID = re.compile(rb"<UploadId>([^<]{1,1024})</UploadId>")


class S3Caller(Protocol):
    """What a multipart upload needs of its store (:class:`gpuci.cache.s3.S3Store`): named
    here, so this module does not import the store that imports it."""

    prefix: str

    @property
    def client(self) -> Any: ...

    def _call(self, op: str, key: str, fn: Callable[..., Any], **kwargs: Any) -> Any: ...


class _FileSlice:
    """Bytes ``offset..offset+length`` of a file as a seekable body for one part.

    Positions are relative to the slice (botocore seeks to 0 to resend); no ``fileno``, so
    botocore takes the length from ``len()``, not from the whole file. Reads stream from disk:
    a part in flight holds no more than botocore's blocks in memory. With ``hashed_first``
    (plain http: botocore reads the body once to sign its sha256, then seeks back), that first
    pass is not reported as sent."""

    def __init__(
        self,
        path: Path,
        offset: int,
        length: int,
        on_read: Callable[[int], None],
        hashed_first: bool = False,
    ):
        self._file = open(path, "rb")  # noqa: SIM115 - closed by close(), after the request
        self._offset, self._length, self._pos = offset, length, 0
        self._on_read = on_read
        self._quiet = hashed_first  # until the first seek back: the signing pass

    def read(self, size: int = -1) -> bytes:
        left = self._length - self._pos
        size = left if size is None or size < 0 else min(size, left)
        data = os.pread(self._file.fileno(), size, self._offset + self._pos) if size else b""
        self._pos += len(data)
        if not self._quiet:
            self._on_read(len(data))
        return data

    def seek(self, pos: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self._length}[whence]
        target = max(0, min(self._length, base + pos))
        if target < self._pos:
            self._quiet = False  # the pass that goes on the wire starts now
        self._pos = target
        return self._pos

    def tell(self) -> int:
        return self._pos

    def __len__(self) -> int:
        return self._length - self._pos

    def close(self) -> None:
        self._file.close()


class Multipart:
    """One S3 multipart upload (CreateMultipartUpload done); parts may be sent from any thread."""

    def __init__(self, store: S3Caller, key: str, upload_id: str) -> None:
        self._store, self._key, self._id = store, key, upload_id
        self._etags: dict[int, str] = {}
        self._lock = threading.Lock()

    def send(
        self, number: int, path: Path, offset: int, length: int, on_read: Callable[[int], None]
    ) -> None:
        store = self._store
        endpoint = str(getattr(store.client.meta, "endpoint_url", "") or "")
        plain_http = endpoint.lower().startswith("http://")
        body = _FileSlice(path, offset, length, on_read, hashed_first=plain_http)
        try:
            self._upload_part(number, body, length)
        finally:
            body.close()

    def send_bytes(self, number: int, data: bytes, on_read: Callable[[int], None]) -> None:
        """Part ``number`` from bytes already read (and hashed) by the caller: what is sent is
        exactly what was hashed, whatever happens to the file meanwhile."""
        self._upload_part(number, data, len(data))
        on_read(len(data))

    def _upload_part(self, number: int, body: Any, length: int) -> None:
        """UploadPart through boto3, keeping the part's ETag for the completion."""
        store = self._store
        resp = store._call(
            "upload",
            self._key,
            store.client.upload_part,
            Key=store.prefix + self._key,
            UploadId=self._id,
            PartNumber=number,
            Body=body,
            ContentLength=length,
        )
        with self._lock:
            self._etags[number] = str(resp["ETag"])

    def complete(self) -> None:
        with self._lock:
            parts = [{"PartNumber": n, "ETag": e} for n, e in sorted(self._etags.items())]
        store = self._store
        store._call(
            "upload",
            self._key,
            store.client.complete_multipart_upload,
            Key=store.prefix + self._key,
            UploadId=self._id,
            MultipartUpload={"Parts": parts},
        )

    def abort(self) -> None:
        store = self._store
        with contextlib.suppress(StoreError, InputError):
            store._call(
                "abort",
                self._key,
                store.client.abort_multipart_upload,
                Key=store.prefix + self._key,
                UploadId=self._id,
            )


class FastCaller(Protocol):
    """What a fast-path multipart upload needs of its store (:class:`gpuci.cache.s3.S3Store`)."""

    prefix: str

    def _fast_call(self, op: str, method: str, key: str, operation: str, **kwargs: Any) -> Reply:
        """One signed request; the 2xx answer, else the failure worded as the store words it."""
        ...

    def _bad_answer(self, op: str, key: str, what: str) -> StoreError: ...


def upload_id_of(reply: Reply) -> str | None:
    found = _UPLOAD_ID.search(reply.body)
    return found.group(1).decode("utf-8", "replace") if found else None


class FastMultipart:
    """One S3 multipart upload over the store's fast path; parts may be sent from any thread."""

    def __init__(self, store: FastCaller, key: str, upload_id: str) -> None:
        self._store, self._key, self._id = store, key, upload_id
        self._etags: dict[int, str] = {}
        self._lock = threading.Lock()

    def send_bytes(self, number: int, data: bytes, on_read: Callable[[int], None]) -> None:
        """Part ``number``: exactly these bytes (a presigned PUT, payload not hashed again).
        A memoryview, so http.client sends the bytes as they are instead of joining a copy
        of them to the request's head."""
        query = {"partNumber": str(number), "uploadId": self._id}
        store = self._store
        until = time.monotonic() + _part_time(store, len(data))
        reply = store._fast_call(
            "upload", "PUT", self._key, "UploadPart",
            body=memoryview(data), query=query, unsigned=True, until=until,
        )  # fmt: skip
        etag = reply.headers.get("etag", "").strip()
        if not etag:
            raise store._bad_answer("upload", self._key, "a part stored without an ETag")
        on_read(len(data))
        with self._lock:
            self._etags[number] = etag

    def send(
        self, number: int, path: Path, offset: int, length: int, on_read: Callable[[int], None]
    ) -> None:
        with open(path, "rb", buffering=0) as handle:
            data = os.pread(handle.fileno(), length, offset)
        if len(data) != length:
            raise SourceChanged(path)
        self.send_bytes(number, data, on_read)

    def complete(self) -> None:
        with self._lock:
            parts = sorted(self._etags.items())
        body = "".join(
            f"<Part><PartNumber>{n}</PartNumber><ETag>{_escape(e)}</ETag></Part>" for n, e in parts
        )
        xml = f"<CompleteMultipartUpload>{body}</CompleteMultipartUpload>".encode()
        # S3 may answer 200 and put the error in the body: _fast_call reads it as a failure.
        self._store._fast_call(
            "upload", "POST", self._key, "CompleteMultipartUpload",
            body=xml, query={"uploadId": self._id}, complete=True,
        )  # fmt: skip

    def abort(self) -> None:
        with contextlib.suppress(StoreError, InputError):
            self._store._fast_call(
                "abort", "DELETE", self._key, "AbortMultipartUpload", query={"uploadId": self._id}
            )


def _escape(text: str) -> str:
    """XML text (xml.sax.saxutils would import urllib.request on a restore's path)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _part_time(store: Any, size: int) -> float:
    """An operation's time for one part: the usual bound plus the slowest body rate allowed."""
    limits = getattr(getattr(store, "pool", None), "limits", None)
    base = limits.operation if limits is not None else 240.0
    return base + size / MIN_BODY_RATE
