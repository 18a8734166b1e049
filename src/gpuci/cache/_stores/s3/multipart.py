"""S3 multipart uploads for the store: parts sent from any thread, each exactly the bytes the
save read and hashed, as S3's REST calls on the store's one client (a presigned PUT per part,
its bytes not hashed again to sign them). Also the copy of an object over 5 GiB onto itself, in
parts (UploadPartCopy), for :meth:`gpuci.cache._stores.s3.store.S3Store.touch`. Errors are worded by
the store, naming S3's operation.
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

from gpuci.cache._stores.base import SourceChanged
from gpuci.cache._stores.s3.client import Reply
from gpuci.errors import InputError, StoreError
from gpuci.retry import Interrupted

_UPLOAD_ID = re.compile(rb"<UploadId>([^<]{1,1024})</UploadId>")
_ETAG = re.compile(rb"<ETag>([^<]{1,200})</ETag>")
# A server-side copy in parts: at least 1 GiB each, at most 10,000 parts (S3's limits).
_COPY_PART = 1 << 30


class Caller(Protocol):
    """What a multipart upload needs of its store (:class:`gpuci.cache._stores.s3.store.S3Store`):
    named here, so this module does not import the store that imports it."""

    prefix: str
    limits: Any

    def _ok(self, op: str, method: str, key: str, operation: str = "", **kwargs: Any) -> Reply:
        """One signed request; the 2xx answer, else the failure worded as the store words it."""
        ...

    def _bad_answer(self, op: str, key: str, what: str) -> StoreError: ...


def upload_id_of(reply: Reply) -> str | None:
    found = _UPLOAD_ID.search(reply.body)
    return found.group(1).decode("utf-8", "replace") if found else None


class Multipart:
    """One S3 multipart upload (CreateMultipartUpload done); parts may be sent from any thread."""

    def __init__(self, store: Caller, key: str, upload_id: str) -> None:
        self._store, self._key, self._id = store, key, upload_id
        self._etags: dict[int, str] = {}
        self._lock = threading.Lock()

    def send_bytes(self, number: int, data: bytes, on_read: Callable[[int], None]) -> None:
        """Part ``number``: exactly these bytes (a presigned PUT, payload not hashed again).
        A memoryview, so http.client sends the bytes as they are instead of joining a copy
        of them to the request's head."""
        query = {"partNumber": str(number), "uploadId": self._id}
        store = self._store
        until = time.monotonic() + store.limits.deadline(len(data))
        reply = store._ok(
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
        # S3 may answer 200 and put the error in the body: _ok reads it as a failure.
        self._store._ok(
            "upload", "POST", self._key, "CompleteMultipartUpload",
            body=xml, query={"uploadId": self._id}, complete=True,
        )  # fmt: skip

    def abort(self) -> None:
        """Best effort: a store stopped by a Ctrl-C sends nothing (the upload stays open)."""
        with contextlib.suppress(StoreError, InputError, Interrupted):
            self._store._ok(
                "abort", "DELETE", self._key, "AbortMultipartUpload", query={"uploadId": self._id}
            )


def copy_in_parts(store: Any, key: str, source: str, size: int) -> None:
    """``key`` copied onto itself in parts (UploadPartCopy), for an object over CopyObject's
    5 GiB: a new modified time, no bytes leaving S3."""
    reply = store._ok("touch", "POST", key, "CreateMultipartUpload", query={"uploads": ""})
    upload_id = upload_id_of(reply)
    if upload_id is None:
        raise store._bad_answer("touch", key, "no UploadId in the answer")
    upload = Multipart(store, key, upload_id)
    part = max(_COPY_PART, -(-size // 10_000))
    try:
        for number, start in enumerate(range(0, size, part), 1):
            last = min(size, start + part) - 1
            amz = {"x-amz-copy-source": source, "x-amz-copy-source-range": f"bytes={start}-{last}"}
            query = {"partNumber": str(number), "uploadId": upload_id}
            got = store._ok(
                "touch", "PUT", key, "UploadPartCopy", amz=amz, query=query, complete=True
            )
            found = _ETAG.search(got.body)
            if found is None:
                raise store._bad_answer("touch", key, "a copied part without an ETag")
            etag = found.group(1).decode("utf-8", "replace")
            upload._etags[number] = etag.replace("&quot;", '"').replace("&#34;", '"')
        upload.complete()
    except BaseException:
        upload.abort()
        raise


def _escape(text: str) -> str:
    """XML text (xml.sax.saxutils would import urllib.request on a restore's path)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
