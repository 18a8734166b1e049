"""The S3 store: boto3 for signing and the control plane, a lean HTTP path for the bytes.

boto3 (credentials from the standard AWS chain, botocore's retries for 5xx, SlowDown and dropped
connections) handles refs, manifests, listings, HEADs and uploads. Ranged GETs of blobs and packs
go through presigned URLs on the store's bounded ``http.client`` pool (:mod:`gpuci.cache.s3pool`,
one connection per worker thread), reading straight into the caller's buffers: on a 2-core
runner the client's CPU per byte decides the speed, and boto3's streaming body costs about
twice what this path does.

When the credentials are in the environment, on AWS or a custom endpoint (path-style), refs,
manifests, listings, HEADs, plain PUTs and ranges are signed by :mod:`gpuci.cache.sigv4` and
sent by :mod:`gpuci.cache.s3rest`; boto3 is only imported for what needs it (conditional
writes, uploads, and any answer only boto3 can act on, such as a region redirect). Errors from
either path read the same (:meth:`S3Store._coded_error`) and name S3's operation: a restore
never pays the 0.3-0.6 s boto3 costs to import and set up.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from gpuci.cache import s3net, sigv4
from gpuci.cache.s3client import retry_settings
from gpuci.cache.s3errors import bce
from gpuci.cache.s3fast import FastPath
from gpuci.cache.s3multipart import FastMultipart, Multipart, upload_id_of
from gpuci.cache.s3pool import Pool
from gpuci.cache.s3rest import Reply, RestClient, http_time
from gpuci.cache.store import ObjectInfo, Store
from gpuci.errors import StoreError

__all__ = ["S3Store", "retry_settings"]


class S3Store(FastPath, Store):
    """A store at ``s3://bucket/prefix``: the control plane here; beside it the client
    (:mod:`gpuci.cache.s3client`), the fast path (:mod:`gpuci.cache.s3fast`), the error
    words (:mod:`gpuci.cache.s3errors`) and multipart uploads (:mod:`gpuci.cache.s3multipart`)."""

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
        # The endpoint requests go to, and what chose it: the input, else AWS_ENDPOINT_URL_S3 or
        # AWS_ENDPOINT_URL, as botocore picks; empty for AWS (or a profile's endpoint_url).
        self.endpoint, self.endpoint_source = sigv4.configured_endpoint(endpoint_url, environ)
        self.region = region
        self.environ = environ
        self.mask = mask
        _, self.max_attempts = retry_settings(environ)
        self.limits = s3net.Limits.from_environ(environ)
        self.pool = Pool(environ, self.limits)
        self._urls: dict[str, str] = {}
        self._urls_lock = threading.Lock()
        self._client: Any = None  # a boto3 S3 client (untyped), made on first use
        self._client_lock = threading.Lock()
        self._presigner = (
            None
            if environ.get("AWS_PROFILE")
            else sigv4.Presigner.for_store(bucket, endpoint_url, region, environ)
        )
        self._rest = (
            RestClient(self._presigner, self.max_attempts, self.pool)
            if self._presigner is not None
            else None
        )
        if self._rest is not None:
            self._rest.on_transient = self._heard_transient
        if self._presigner is not None:
            creds = self._presigner.creds
            for secret in (creds.access_key, creds.secret_key, creds.token):
                if secret and mask is not None:
                    mask(secret)
        else:
            self._make_client()  # resolves the credential chain now: fail early, mask early

    # ----- control plane ---------------------------------------------------------------------
    def exists(self) -> bool:
        try:
            self.client.head_bucket(Bucket=self.bucket)
            return True
        except bce().ClientError as exc:
            if str(exc.response.get("Error", {}).get("Code")) in ("404", "NoSuchBucket"):
                return False
            raise self._error(exc, "exists") from None
        except bce().BotoCoreError as exc:
            raise self._error(exc, "exists") from None

    def head(self, key: str) -> ObjectInfo | None:
        reply = self._fast("head", "HEAD", key)
        if reply is not None:
            if reply.status == 200:
                size = reply.headers.get("content-length", "").strip()
                if not size.isdigit():
                    raise self._bad_answer("head", key, "no Content-Length")
                modified = http_time(reply.headers.get("last-modified", ""))
                return ObjectInfo(key, int(size), modified, reply.headers.get("etag", ""))
            if reply.status == 404:
                return None
            raise self._coded_error(reply.code, reply.message, "head", key)
        try:
            resp = self.client.head_object(Bucket=self.bucket, Key=self.prefix + key)
        except bce().ClientError as exc:
            if str(exc.response.get("Error", {}).get("Code")) in ("404", "NoSuchKey", "NotFound"):
                return None
            raise self._error(exc, "head", key) from None
        except bce().BotoCoreError as exc:
            raise self._error(exc, "head", key) from None
        return ObjectInfo(
            key, int(resp["ContentLength"]), resp["LastModified"].timestamp(), resp.get("ETag", "")
        )

    def get(self, key: str, limit: int | None = None) -> tuple[bytes, str] | None:
        reply = self._fast("get", "GET", key, limit=limit)
        if reply is not None:
            if reply.status == 200:
                return reply.body, reply.headers.get("etag", "")
            if reply.code in ("NoSuchKey", "404"):
                return None
            raise self._coded_error(reply.code, reply.message, "get", key)
        try:
            resp = self.client.get_object(Bucket=self.bucket, Key=self.prefix + key)
            body = resp["Body"]
            try:
                data = body.read() if limit is None else body.read(limit + 1)
            finally:
                body.close()  # over the cap: the rest is never read
            return data, resp.get("ETag", "")
        except bce().ClientError as exc:
            if str(exc.response.get("Error", {}).get("Code")) in ("NoSuchKey", "404"):
                return None
            raise self._error(exc, "get", key) from None
        except bce().BotoCoreError as exc:
            raise self._error(exc, "get", key) from None

    def put(self, key: str, data: bytes) -> str:
        reply = self._fast("put", "PUT", key, body=data)  # e.g. restore's usage record
        if reply is not None:
            if reply.status == 200:
                return reply.headers.get("etag", "")
            raise self._coded_error(reply.code, reply.message, "put", key)
        resp = self._call("put", key, self.client.put_object, Key=self.prefix + key, Body=data)
        return resp.get("ETag", "")

    def put_content(self, key: str, data: bytes) -> str:
        """A blob or pack from bytes the save has hashed: on the fast path one presigned PUT,
        payload unsigned (not hashed a second time to sign it) and not copied (a memoryview);
        otherwise as :meth:`put`."""
        until = time.monotonic() + self.limits.operation + len(data) / s3net.MIN_BODY_RATE
        reply = self._fast("put", "PUT", key, body=memoryview(data), unsigned=True, until=until)
        if reply is None:
            return self.put(key, data)
        if reply.status == 200:
            return reply.headers.get("etag", "")
        raise self._coded_error(reply.code, reply.message, "put", key)

    def put_if_absent(self, key: str, data: bytes) -> str:
        reply = self._fast("put", "PUT", key, body=data, headers={"If-None-Match": "*"})
        if reply is not None:
            if reply.status == 200:
                return reply.headers.get("etag", "")
            raise self._coded_error(reply.code, reply.message, "put", key)
        resp = self._call(
            "put", key, self.client.put_object, Key=self.prefix + key, Body=data, IfNoneMatch="*"
        )
        return resp.get("ETag", "")

    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        reply = self._fast("put", "PUT", key, body=data, headers={"If-Match": etag})
        if reply is not None:
            if reply.status == 200:
                return reply.headers.get("etag", "")
            raise self._coded_error(reply.code, reply.message, "put", key)
        resp = self._call(
            "put", key, self.client.put_object, Key=self.prefix + key, Body=data, IfMatch=etag
        )
        return resp.get("ETag", "")

    def multipart(self, key: str) -> Multipart | FastMultipart:
        reply = self._fast("upload", "POST", key, query={"uploads": ""})
        if reply is not None:
            if reply.status != 200:
                raise self._coded_error(
                    reply.code, reply.message, "upload", key, operation="CreateMultipartUpload"
                )
            upload_id = upload_id_of(reply)
            if upload_id is None:
                raise self._bad_answer("upload", key, "no UploadId in the answer")
            return FastMultipart(self, key, upload_id)
        resp = self._call("upload", key, self.client.create_multipart_upload, Key=self.prefix + key)
        return Multipart(self, key, str(resp["UploadId"]))

    def _fast_call(
        self, op: str, method: str, key: str, operation: str, complete: bool = False, **kwargs: Any
    ) -> Reply:
        """One request of an upload already under way on the fast path: its 2xx answer, else
        the failure in the store's words (``complete``: a 200 whose body is an error fails)."""
        reply = self._fast(op, method, key, **kwargs)
        if reply is None:
            raise StoreError(
                f"the S3 endpoint {self._where()} redirected an upload to {self.url}/{key} midway",
                hint="retry the save; set the store's region or endpoint-url if it repeats",
            )
        if not 200 <= reply.status < 300 or (complete and b"<Error>" in reply.body):
            raise self._coded_error(reply.code, reply.message, op, key, operation=operation)
        return reply

    def _heard_transient(self) -> None:
        """A fast-path attempt was refused or dropped: the transfer's controller hears it."""
        listener = self.on_throttle
        if listener is not None:
            listener()

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        if self._rest is not None and (yield from self._fast_list(prefix)):
            return
        paginator = self.client.get_paginator("list_objects_v2")
        strip = len(self.prefix)
        try:
            for page in paginator.paginate(Bucket=self.bucket, Prefix=self.prefix + prefix):
                for item in page.get("Contents", []):
                    yield ObjectInfo(
                        item["Key"][strip:],
                        int(item["Size"]),
                        item["LastModified"].timestamp(),
                        item.get("ETag", ""),
                    )
        except (bce().BotoCoreError, bce().ClientError) as exc:
            raise self._error(exc, "list", prefix) from None

    def delete(self, key: str) -> None:
        reply = self._fast("delete", "DELETE", key)
        if reply is not None:
            if reply.status in (200, 204):
                return
            raise self._coded_error(reply.code, reply.message, "delete", key)
        self._call("delete", key, self.client.delete_object, Key=self.prefix + key)

    def touch(self, key: str) -> None:
        """A server-side copy onto itself (multipart copy above 5 GB): no bytes leave S3."""
        source = {"Bucket": self.bucket, "Key": self.prefix + key}
        try:
            self.client.copy(
                source,
                self.bucket,
                self.prefix + key,
                ExtraArgs={"MetadataDirective": "REPLACE"},
                Config=self._transfer,
            )
        except (bce().BotoCoreError, bce().ClientError) as exc:
            raise self._error(exc, "touch", key) from None
