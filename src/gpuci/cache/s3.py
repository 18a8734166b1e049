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

import re
import socket
import threading
from collections.abc import Callable, Generator, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from gpuci.cache import layout, s3net, sigv4
from gpuci.cache.s3http import BadResponse, DeadlineExceeded
from gpuci.cache.s3multipart import Multipart
from gpuci.cache.s3pool import Pool, Ranged
from gpuci.cache.s3rest import BadAnswer, Reply, RestClient, Unreachable, http_time
from gpuci.cache.store import ObjectInfo, RangeReader, Store, TransientError
from gpuci.errors import ConflictError, InputError, IntegrityError, StoreError
from gpuci.retry import aws_max_attempts

if TYPE_CHECKING:
    from gpuci.cache.splicing import Pipe

_CRED_CODES = {
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "InvalidToken",
    "AccessDenied",
    "TokenRefreshRequired",
    "InvalidClientTokenId",
    "AuthorizationHeaderMalformed",
}
_CONFLICT_CODES = {"PreconditionFailed", "ConditionalRequestConflict", "412", "409"}
# Answers that mean "slow down": the concurrency controller halves on each burst of them.
_THROTTLE_CODES = {"SlowDown", "TooManyRequests", "Throttling", "RequestLimitExceeded"}
# Answers only boto3 can act on (it follows a bucket to its region): the fast path hands over.
_HAND_OVER_CODES = {
    "PermanentRedirect",
    "TemporaryRedirect",
    "AuthorizationHeaderMalformed",
    "IllegalLocationConstraintException",
}
_CODE_RE = re.compile(r"<Code>([^<]+)</Code>")
_OPERATION_IN_TEXT = re.compile(r"when calling the ([A-Za-z0-9]+) operation")
_TOO_LARGE = {"413", "EntityTooLarge", "RequestEntityTooLarge"}
# S3's names for what the store does (errors name them, as the AWS CLI does).
_OPERATIONS = {
    "get": "GetObject",
    "put": "PutObject",
    "head": "HeadObject",
    "list": "ListObjectsV2",
    "delete": "DeleteObject",
    "exists": "HeadBucket",
    "upload": "PutObject",
    "touch": "CopyObject",
    "abort": "AbortMultipartUpload",
}
_CODE_IN_TEXT = re.compile(r"\(([A-Za-z0-9]+)\)")


def retry_settings(environ: Mapping[str, str]) -> tuple[str, int]:
    """botocore's own knobs (AWS_RETRY_MODE, AWS_MAX_ATTEMPTS), with sturdier defaults."""
    mode = environ.get("AWS_RETRY_MODE", "").strip() or "standard"
    return mode, aws_max_attempts(environ)


def _bce() -> Any:
    """botocore's exception classes; botocore is loaded by then (only its calls raise them)."""
    import botocore.exceptions

    return botocore.exceptions


def _upload_failed() -> type[Exception]:
    """boto3's upload error class; boto3 is loaded by then (only uploads raise it)."""
    from boto3.exceptions import S3UploadFailedError

    return S3UploadFailedError


def _is_certificate_error(exc: BaseException) -> bool:
    return "CERTIFICATE" in str(exc).upper() or type(exc).__name__ == "SSLCertVerificationError"


def _total_size(content_range: str) -> int | None:
    """The object's size from ``Content-Range: bytes a-b/total`` (None when absent or ``*``)."""
    _, _, total = content_range.rpartition("/")
    return int(total) if total.strip().isdigit() else None


class _Range:
    """A ranged GET's body (:class:`gpuci.cache.s3pool.Ranged`) for the transfer: a dropped,
    cut or stalled connection is a TransientError the transfer retries."""

    def __init__(self, body: Ranged, store: S3Store) -> None:
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


class S3Store(Store):
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
        if self._presigner is not None:
            creds = self._presigner.creds
            for secret in (creds.access_key, creds.secret_key, creds.token):
                if secret and mask is not None:
                    mask(secret)
        else:
            self._make_client()  # resolves the credential chain now: fail early, mask early

    @property
    def client(self):  # -> botocore's S3 client, created on first use
        if self._client is None:
            with self._client_lock:
                if self._client is None:
                    self._make_client()
        return self._client

    def _make_client(self) -> None:
        import boto3  # 0.3 s: only when a listing, an upload or a fallback needs it
        from boto3.s3.transfer import TransferConfig
        from botocore.config import Config

        mode, attempts = retry_settings(self.environ)
        try:
            session = boto3.session.Session(region_name=self.region)
            creds = session.get_credentials()
        except _bce().BotoCoreError as exc:
            raise self._config_error(exc) from None
        if creds is None:
            raise StoreError(
                f"no AWS credentials found for {self.url}",
                hint="configure credentials (aws-actions/configure-aws-credentials, "
                "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or a profile)",
            )
        frozen = creds.get_frozen_credentials()
        if self.mask is not None:
            for secret in (frozen.access_key, frozen.secret_key, frozen.token):
                if secret:
                    self.mask(secret)
        config = Config(
            signature_version="s3v4",
            retries={"mode": mode, "max_attempts": attempts},
            max_pool_connections=2 * layout.MAX_CONNECTIONS,  # the controller decides
            connect_timeout=min(10.0, self.limits.timeout),
            read_timeout=self.limits.timeout,
            s3={"addressing_style": "path"} if self.endpoint else {},
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        )
        # upload_file sends whole blobs below the multipart threshold (parts go through
        # multipart()): on the caller's thread, inside its slot, so the controller hears of a
        # refusal from the request that holds the slot and one burst halves the limit once.
        self._transfer = TransferConfig(
            multipart_threshold=layout.MULTIPART_THRESHOLD,
            multipart_chunksize=layout.MULTIPART_CHUNK,
            use_threads=False,
        )
        try:
            self._client = session.client("s3", endpoint_url=self.endpoint or None, config=config)
        except _bce().BotoCoreError as exc:
            raise self._config_error(exc) from None
        # botocore retries throttling itself; the controller hears of each refusal too.
        self._client.meta.events.register("needs-retry.s3", self._heard_answer)

    def _heard_answer(self, response=None, caught_exception=None, **_: object) -> None:
        """A botocore attempt ended: pass refusals (429, 503 SlowDown, 5xx) and dropped
        connections on to the listening controller. Returns None: retries stay botocore's."""
        listener = self.on_throttle
        if listener is None:
            return None
        if response is not None:
            status = getattr(response[0], "status_code", 200)
            code = str(response[1].get("Error", {}).get("Code", "")) if response[1] else ""
            if status == 429 or status >= 500 or code in _THROTTLE_CODES:
                listener()
        elif caught_exception is not None:
            listener()
        return None

    # ----- errors ----------------------------------------------------------------------------
    def _config_error(self, exc: Exception) -> Exception:
        """AWS configuration botocore cannot use (a missing profile, an unreadable config file):
        bad input, one line, not an internal error."""
        bce = _bce()
        if isinstance(exc, bce.ProfileNotFound):
            profile = getattr(exc, "kwargs", {}).get("profile") or self.environ.get("AWS_PROFILE")
            return InputError(
                f"AWS profile '{profile}' (AWS_PROFILE) is not in the AWS config files",
                hint="fix AWS_PROFILE or add that profile to ~/.aws/config "
                "(AWS_CONFIG_FILE), or unset AWS_PROFILE to use the environment's credentials",
            )
        config_errors = (
            bce.ConfigParseError,
            bce.ConfigNotFound,
            bce.InvalidConfigError,
            bce.UnknownCredentialError,
        )
        if isinstance(exc, config_errors):
            return InputError(
                f"the AWS configuration cannot be used: {exc}",
                hint="fix ~/.aws/config or the AWS_* variables",
            )
        return self._error(exc, "open")

    def _endpoint(self) -> tuple[str, str]:
        """The endpoint in use and what chose it (input, variable, profile), for messages."""
        if self.endpoint:
            return self.endpoint, self.endpoint_source
        client = self._client
        actual = str(getattr(getattr(client, "meta", None), "endpoint_url", "") or "")
        if actual and not (urlsplit(actual).hostname or "").endswith(".amazonaws.com"):
            profile = self.environ.get("AWS_PROFILE", "").strip() or "default"
            return actual, f"endpoint_url of AWS profile '{profile}'"
        return "AWS S3", ""

    def _where(self) -> str:
        url, source = self._endpoint()
        return f"{url} (set by {source})" if source else url

    def _error(self, exc: Exception, op: str, key: str = "") -> Exception:
        """One line naming the cause and the fix, for every way boto3 can fail."""
        bce = _bce()
        if isinstance(exc, bce.NoCredentialsError | bce.PartialCredentialsError):
            return StoreError(
                f"no usable AWS credentials for {self.url}",
                hint="configure credentials (aws-actions/configure-aws-credentials or "
                "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)",
            )
        if isinstance(
            exc,
            bce.EndpointConnectionError
            | bce.ConnectTimeoutError
            | bce.ConnectionClosedError
            | bce.ReadTimeoutError,
        ):
            return self._unreachable(type(exc).__name__)
        if isinstance(exc, bce.SSLError):
            return self._unreachable(type(exc).__name__, str(exc))
        code, message, operation = "", str(exc), ""
        if isinstance(exc, _upload_failed()):
            inner = exc.__cause__ or exc.__context__  # the ClientError it words
            exc = inner if isinstance(inner, bce.ClientError) else exc
        if isinstance(exc, bce.ClientError):
            err = exc.response.get("Error", {})
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", "")
            code = str(err.get("Code", "")) or str(status)  # a non-XML answer has no code
            message = str(err.get("Message", "")) or code
            operation = str(getattr(exc, "operation_name", "") or "")
        elif isinstance(exc, _upload_failed()):
            found = _CODE_IN_TEXT.findall(str(exc))
            code = found[-1] if found else ""
            named = _OPERATION_IN_TEXT.search(str(exc))
            operation = named.group(1) if named else ""
        return self._coded_error(code, message, op, key, type(exc).__name__, operation)

    def _unreachable(self, what: str, detail: str = "") -> StoreError:
        source = self._endpoint()[1] or "endpoint-url"
        if what == "DeadlineExceeded":
            return StoreError(
                f"the S3 endpoint {self._where()} did not answer in time ({detail or what})",
                hint=f"the server stalled or trickled; {s3net.TIMEOUT_VARIABLE} (seconds, now "
                f"{self.limits.timeout:g}) sets how long a request may go without progress",
            )
        if "CERTIFICATE" in detail.upper() or what == "SSLCertVerificationError":
            return StoreError(
                f"the TLS certificate of the S3 endpoint {self._where()} cannot be verified "
                f"({detail[:200] or what})",
                hint="set AWS_CA_BUNDLE (or ca_bundle in the AWS config profile) to the PEM "
                "file of the CA that signed it",
            )
        because = f"{what}: {detail[:120]}" if detail and detail != what else what
        return StoreError(
            f"cannot reach the S3 endpoint {self._where()} ({because})",
            hint=f"check {source}, the network and any proxy settings "
            "(HTTP_PROXY, HTTPS_PROXY, NO_PROXY)",
        )

    def _coded_error(
        self,
        code: str,
        message: str,
        op: str,
        key: str = "",
        what: str = "",
        operation: str = "",
    ) -> Exception:
        """S3's error ``code`` as one line, whichever client got it (boto3 or the fast path);
        ``operation`` is S3's name for the call (else the usual one for ``op``)."""
        target = f"{self.url}/{key}" if key else self.url
        operation = operation or _OPERATIONS.get(op, op)
        if code in ("404", "NotFound") and op in ("list", "exists"):
            code = "NoSuchBucket"
        if code == "NoSuchBucket":
            return StoreError(
                f"bucket '{self.bucket}' does not exist at {self._where()}",
                hint="create the bucket or fix the store input",
            )
        if code in _CRED_CODES or code == "403":
            return StoreError(
                f"S3 refused the credentials for {self.url} ({code})",
                hint="check the AWS credentials and that they may read and write this bucket",
            )
        if code in _CONFLICT_CODES:
            return ConflictError(f"{key} was changed by someone else ({code})")
        if code in _TOO_LARGE:
            return StoreError(
                f"S3 {operation} of {target} was refused as too large ({code})",
                hint=f"the server takes smaller bodies: set {layout.MULTIPART_ENV} (bytes, e.g. "
                "8MiB) below its limit, so larger files go up in parts",
            )
        return StoreError(
            f"S3 {operation} of {target} failed: {code or what} {message}".strip(),
            hint="check the store, its permissions and the endpoint; retry if S3 was down",
        )

    def _call(self, op: str, key: str, fn: Callable, **kwargs):
        try:
            return fn(Bucket=self.bucket, **kwargs)
        except (_bce().BotoCoreError, _bce().ClientError) as exc:
            raise self._error(exc, op, key) from None
        except _upload_failed() as exc:
            raise self._error(exc, op, key) from None

    # ----- control plane ---------------------------------------------------------------------
    def exists(self) -> bool:
        try:
            self.client.head_bucket(Bucket=self.bucket)
            return True
        except _bce().ClientError as exc:
            if str(exc.response.get("Error", {}).get("Code")) in ("404", "NoSuchBucket"):
                return False
            raise self._error(exc, "exists") from None
        except _bce().BotoCoreError as exc:
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
        except _bce().ClientError as exc:
            if str(exc.response.get("Error", {}).get("Code")) in ("404", "NoSuchKey", "NotFound"):
                return None
            raise self._error(exc, "head", key) from None
        except _bce().BotoCoreError as exc:
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
        except _bce().ClientError as exc:
            if str(exc.response.get("Error", {}).get("Code")) in ("NoSuchKey", "404"):
                return None
            raise self._error(exc, "get", key) from None
        except _bce().BotoCoreError as exc:
            raise self._error(exc, "get", key) from None

    def put(self, key: str, data: bytes) -> str:
        reply = self._fast("put", "PUT", key, body=data)  # e.g. restore's usage record
        if reply is not None:
            if reply.status == 200:
                return reply.headers.get("etag", "")
            raise self._coded_error(reply.code, reply.message, "put", key)
        resp = self._call("put", key, self.client.put_object, Key=self.prefix + key, Body=data)
        return resp.get("ETag", "")

    def put_if_absent(self, key: str, data: bytes) -> str:
        resp = self._call(
            "put", key, self.client.put_object, Key=self.prefix + key, Body=data, IfNoneMatch="*"
        )
        return resp.get("ETag", "")

    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        resp = self._call(
            "put", key, self.client.put_object, Key=self.prefix + key, Body=data, IfMatch=etag
        )
        return resp.get("ETag", "")

    def upload_file(self, key: str, path: Path, size: int, on_bytes: Callable[[int], None]) -> None:
        try:
            self.client.upload_file(
                str(path), self.bucket, self.prefix + key, Config=self._transfer, Callback=on_bytes
            )
        except (_bce().BotoCoreError, _bce().ClientError, _upload_failed()) as exc:
            error = self._error(exc, "upload", key)
            if isinstance(error, StoreError) and "too large" in error.message:
                error.message += f" ({size:,} bytes in one PUT)"
            raise error from None

    def multipart(self, key: str) -> Multipart:
        resp = self._call("upload", key, self.client.create_multipart_upload, Key=self.prefix + key)
        return Multipart(self, key, str(resp["UploadId"]))

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
        except (_bce().BotoCoreError, _bce().ClientError) as exc:
            raise self._error(exc, "list", prefix) from None

    def delete(self, key: str) -> None:
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
        except (_bce().BotoCoreError, _bce().ClientError) as exc:
            raise self._error(exc, "touch", key) from None

    # ----- the fast path: requests signed here, no boto3 -----------------------------------
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

    def _bad_answer(self, op: str, key: str, what: str) -> StoreError:
        return StoreError(
            f"the S3 endpoint {self._where()} answered a {op} of {self.url}/{key} with an "
            f"invalid response: {what}",
            hint="check endpoint-url points at an S3-compatible server, not a proxy "
            "that rewrites answers",
        )

    def _slow_path(self) -> None:
        """Presign through boto3 from now on."""
        self._presigner = None
        self._rest = None
        with self._urls_lock:
            self._urls.clear()

    # ----- data plane: presigned ranged GETs over pooled connections ---------------------------
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

    def _transport_error(self, exc: BaseException) -> TransientError:
        """A failed ranged GET: retried by the caller, named when it gives up."""
        if isinstance(exc, ConnectionRefusedError | socket.gaierror):
            return TransientError(f"cannot reach the S3 endpoint {self._where()}")
        if isinstance(exc, DeadlineExceeded):
            return TransientError(f"no answer within {self.limits.timeout:g} s")
        if _is_certificate_error(exc):
            return TransientError(f"TLS certificate problem: {exc}")
        return TransientError(f"request failed: {type(exc).__name__}")

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

    def _beyond_end(self, key: str, offset: int, length: int, total: int) -> IntegrityError:
        """The manifest names bytes the object does not have: no retry will ever find them."""
        return IntegrityError(
            f"{self.url}/{key} is {total} bytes, but the manifest names bytes "
            f"{offset}-{offset + length - 1}",
            hint="the store holds a truncated object or a hostile manifest; save the key again",
        )

    def _status_error(self, status: int, body: bytes, key: str) -> Exception:
        found = _CODE_RE.search(body.decode("utf-8", "replace"))
        code = found.group(1) if found else str(status)
        if status == 416 or code == "InvalidRange":
            return IntegrityError(
                f"{self.url}/{key} ends before the bytes the manifest names ({status} {code})",
                hint="the store holds a truncated object or a hostile manifest; save the key again",
            )
        if status >= 500 or status == 429 or code in {"RequestTimeout", *_THROTTLE_CODES}:
            return TransientError(f"S3 answered {status} {code}")
        if code == "NoSuchKey" or (status == 404 and code == "404"):
            return StoreError(
                f"{self.url}/{key} is missing from the cache store",
                hint="the store was pruned or damaged; save the key again",
            )
        if code == "NoSuchBucket":
            return StoreError(
                f"bucket '{self.bucket}' does not exist at {self._where()}",
                hint="create the bucket or fix the store input",
            )
        if status == 403:
            return StoreError(
                f"S3 refused the credentials for {self.url} ({code})",
                hint="check the AWS credentials and that they may read this bucket",
            )
        return StoreError(
            f"S3 GET of {self.url}/{key} failed: {status} {code}",
            hint="check the store and its permissions",
        )
