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
from urllib.parse import unquote_plus

from gpuci.cache._stores.base import UNKNOWN_MODIFIED, ObjectInfo, SourceChanged
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
        """Best effort: a store stopped by a Ctrl-C sends nothing (prune aborts it later)."""
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


# ----- uploads a killed save left open (prune) ----------------------------------------------------

#: The most open uploads one prune aborts (a later prune goes on); pages of at most 1,000.
MAX_OPEN_UPLOADS = 10_000
_UPLOADS_PAGE = 1_000
# An UploadId as S3 and compatible servers write it; anything else is left alone, never sent.
_SAFE_ID = re.compile(r"[A-Za-z0-9._~+/=-]{1,1024}")
_LEFTOVER = "?uploadId="


def open_uploads(store: Caller, older_than: float) -> list[ObjectInfo]:
    """The multipart uploads under the store's ``blobs/`` a killed save left open, started over
    ``older_than`` seconds ago (a running save's are younger): ListMultipartUploads, page by
    page, at most :data:`MAX_OPEN_UPLOADS` uploads and one operation's time limit. Each is an
    ObjectInfo whose key is ``<key>?uploadId=<id>`` (:func:`abort_open`), of size 0: the
    parts are not listed. An upload outside ``blobs/``, or whose id or time cannot be read,
    is not gpu-ci's and is left alone."""
    from gpuci.cache._stores.s3.client import MAX_LISTING_PAGE
    from gpuci.cache._stores.s3.transport import BadResponse

    found: dict[str, ObjectInfo] = {}  # a server repeating a page lists an upload once
    markers = ("", "")
    seen: set[tuple[str, str]] = set()
    until = time.monotonic() + store.limits.operation
    now = time.time()
    while len(found) < MAX_OPEN_UPLOADS:
        query = {"uploads": "", "prefix": store.prefix + "blobs/", "encoding-type": "url"}
        query["max-uploads"] = str(_UPLOADS_PAGE)
        if markers[0]:
            query["key-marker"], query["upload-id-marker"] = markers
        reply = store._ok(
            "prune", "GET", "", "ListMultipartUploads",
            query=query, limit=MAX_LISTING_PAGE, until=until,
        )  # fmt: skip
        if len(reply.body) > MAX_LISTING_PAGE:
            raise store._bad_answer("prune", "", "a multipart listing page is over 8 MiB")
        try:
            uploads, markers = parse_uploads(reply.body)
        except BadResponse as exc:  # bad XML, a DTD: worded as the store words any bad answer
            raise store._bad_answer("prune", "", str(exc)) from None
        for key, upload_id, started in uploads:
            rel = key.removeprefix(store.prefix)
            ours = key.startswith(store.prefix + "blobs/") and _SAFE_ID.fullmatch(upload_id)
            if ours and now - started > older_than:
                name = f"{rel}{_LEFTOVER}{upload_id}"
                found[name] = ObjectInfo(name, 0, started)
        if not markers[0] or markers in seen:
            break  # the last page, or a server repeating its markers
        seen.add(markers)
    return sorted(found.values(), key=lambda o: o.key)[:MAX_OPEN_UPLOADS]


def abort_open(store: Caller, leftover: str) -> None:
    """AbortMultipartUpload for one of :func:`open_uploads`' keys; one already gone is fine."""
    key, _, upload_id = leftover.partition(_LEFTOVER)
    if not upload_id or not _SAFE_ID.fullmatch(upload_id):
        return
    try:
        store._ok("prune", "DELETE", key, "AbortMultipartUpload", query={"uploadId": upload_id})
    except StoreError as exc:
        if "NoSuchUpload" not in exc.message:
            raise


def parse_uploads(body: bytes) -> tuple[list[tuple[str, str, float]], tuple[str, str]]:
    """((key, upload id, started) per upload, (next key marker, next upload id marker)) from a
    ListMultipartUploads answer; markers empty on the last page. Parsed as listings are:
    expat, DTDs and entities refused, at most :data:`MAX_PAGE_ENTRIES` uploads a page; an
    upload whose time cannot be read gets UNKNOWN_MODIFIED (never old enough)."""
    from gpuci.cache._stores.s3.client import MAX_PAGE_ENTRIES, _iso_time, parse_xml
    from gpuci.cache._stores.s3.transport import BadResponse

    top: dict[str, str] = {}
    items: list[dict[str, str]] = []
    path: list[str] = []
    text: list[str] = []

    def start(name: str, _attrs: object) -> None:
        path.append(name.rpartition("}")[2])
        text.clear()
        if path == ["ListMultipartUploadsResult", "Upload"]:
            if len(items) >= MAX_PAGE_ENTRIES:
                raise BadResponse(f"a multipart listing page has over {MAX_PAGE_ENTRIES:,} uploads")
            items.append({})

    def end(_name: str) -> None:
        local = path.pop()
        if len(path) == 2 and path[1] == "Upload" and items:
            items[-1][local] = "".join(text)
        elif len(path) == 1:
            top[local] = "".join(text)
        text.clear()

    def chars(data: str) -> None:
        if len(path) in (2, 3):
            text.append(data)

    parse_xml(body, "a multipart listing", start, end, chars)
    decode = unquote_plus if top.get("EncodingType", "") == "url" else (lambda k: k)
    uploads = []
    for item in items:
        try:
            started = _iso_time(item.get("Initiated", ""))
        except ValueError:
            started = UNKNOWN_MODIFIED
        uploads.append((decode(item.get("Key", "")), item.get("UploadId", ""), started))
    if top.get("IsTruncated", "").strip().lower() != "true":
        return uploads, ("", "")
    return uploads, (decode(top.get("NextKeyMarker", "")), top.get("NextUploadIdMarker", ""))
