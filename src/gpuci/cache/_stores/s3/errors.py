"""How the S3 store words its failures: one line naming the cause and the fix (S3's error
codes, a transport that failed, an answer no server may send, a redirect, a range too slow).

A mixin of :class:`gpuci.cache._stores.s3.store.S3Store`: the words need the store's URL, bucket and
endpoint, and live here so the store's module reads as what it does, not how it complains.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from typing import TYPE_CHECKING

from gpuci import settings
from gpuci.cache._stores.base import TransientError
from gpuci.cache._stores.s3 import network
from gpuci.cache._stores.s3.transport import DeadlineExceeded
from gpuci.errors import ConflictError, IntegrityError, StoreError

if TYPE_CHECKING:
    from gpuci.cache._stores.s3.client import Redirected

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


def is_certificate_error(exc: BaseException) -> bool:
    return "CERTIFICATE" in str(exc).upper() or type(exc).__name__ == "SSLCertVerificationError"


class S3Errors:
    """The store's error words (mixed into :class:`gpuci.cache._stores.s3.store.S3Store`)."""

    url: str
    bucket: str
    endpoint: str
    endpoint_source: str
    environ: Mapping[str, str]
    limits: network.Limits

    def _endpoint(self) -> tuple[str, str]:
        """The endpoint in use and what chose it (input, variable, profile), for messages."""
        if self.endpoint:
            return self.endpoint, self.endpoint_source
        return "AWS S3", ""

    def _where(self) -> str:
        url, source = self._endpoint()
        return f"{url} (set by {source})" if source else url

    def _redirected(self, exc: Redirected, op: str, key: str, operation: str) -> StoreError:
        """S3 sent a request elsewhere: the region or endpoint to set, in one line."""
        target = f"{self.url}/{key}" if key else self.url
        what = f"{exc.status} {exc.code}".strip()
        operation = operation or _OPERATIONS.get(op, op)
        if exc.region:
            return StoreError(
                f"the S3 endpoint {self._where()} says {target} is in region {exc.region} "
                f"({operation}: {what}), and signing for that region did not help",
                hint=f"set the region input (or AWS_REGION) to {exc.region}, or endpoint-url "
                "to the bucket's own endpoint",
            )
        where = f" to {exc.host}" if exc.host else ""
        return StoreError(
            f"the S3 endpoint {self._where()} redirected {operation} of {target}{where} "
            f"({what}) without naming a region; gpu-ci follows no other redirect",
            hint="set endpoint-url (or AWS_ENDPOINT_URL) to the endpoint that serves the "
            "bucket, and the region input to its region",
        )

    def _too_slow(self, key: str, end: int) -> StoreError:
        """A ranged GET ran out of its operation's time, every attempt included."""
        limits = self.limits
        return StoreError(
            f"the S3 endpoint {self._where()} did not deliver {self.url}/{key} (to byte {end}) "
            f"in time: no answer within {limits.timeout:g} s, or a body under "
            f"{limits.min_rate / 1024:g} KiB/s, until the operation's limit",
            hint=f"the server stalled or trickled; {settings.S3_TIMEOUT.name} (seconds) and "
            f"{settings.S3_MIN_RATE.name} (bytes a second) set the limits",
        )

    def _unreachable(self, what: str, detail: str = "") -> StoreError:
        source = self._endpoint()[1] or "endpoint-url"
        if what == "DeadlineExceeded":
            return StoreError(
                f"the S3 endpoint {self._where()} did not answer in time ({detail or what})",
                hint=f"the server stalled or trickled; {settings.S3_TIMEOUT.name} (seconds, now "
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
        """S3's error ``code`` as one line:
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
                hint="the server takes smaller bodies: set "
                f"{settings.MULTIPART_THRESHOLD.name} (bytes, e.g. 8MiB) below its limit, so "
                "larger files go up in parts",
            )
        return StoreError(
            f"S3 {operation} of {target} failed: {code or what} {message}".strip(),
            hint="check the store, its permissions and the endpoint; retry if S3 was down",
        )

    def _bad_answer(self, op: str, key: str, what: str) -> StoreError:
        return StoreError(
            f"the S3 endpoint {self._where()} answered a {op} of {self.url}/{key} with an "
            f"invalid response: {what}",
            hint="check endpoint-url points at an S3-compatible server, not a proxy "
            "that rewrites answers",
        )

    def _transport_error(self, exc: BaseException) -> TransientError:
        """A failed ranged GET: retried by the caller, named when it gives up."""
        if isinstance(exc, ConnectionRefusedError | socket.gaierror):
            return TransientError(f"cannot reach the S3 endpoint {self._where()}")
        if isinstance(exc, DeadlineExceeded):
            return TransientError(f"no answer within {self.limits.timeout:g} s")
        if is_certificate_error(exc):
            return TransientError(f"TLS certificate problem: {exc}")
        return TransientError(f"request failed: {type(exc).__name__}")

    def _beyond_end(self, key: str, offset: int, length: int, total: int) -> IntegrityError:
        """The manifest names bytes the object does not have: no retry will ever find them."""
        return IntegrityError(
            f"{self.url}/{key} is {total} bytes, but the manifest names bytes "
            f"{offset}-{offset + length - 1}",
            hint="the store holds a truncated object or a hostile manifest; save the key again",
        )

    def _status_error(
        self, status: int, body: bytes, key: str, answer: Mapping[str, str] | None = None
    ) -> Exception:
        from gpuci.cache._stores.s3.client import Redirected, Reply  # the store loaded it

        reply = Reply(status, dict(answer or {}), body)
        code = reply.code  # S3's code in the error body, else the status
        if 300 <= status < 400:  # a ranged GET's redirect: the region or endpoint to set
            from gpuci.cache._stores.s3.signer import is_region

            region = reply.region if is_region(reply.region) else ""
            return self._redirected(Redirected(reply, region), "get", key, "")
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
