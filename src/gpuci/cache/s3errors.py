"""How the S3 store words its failures: one line naming the cause and the fix, whichever
client met them (boto3's exceptions, the fast path's status codes, a ranged GET's transport).

A mixin of :class:`gpuci.cache.s3.S3Store`: the words need the store's URL, bucket and
endpoint, and live here so the store's module reads as what it does, not how it complains.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from gpuci.cache import layout, s3net
from gpuci.cache.s3http import DeadlineExceeded
from gpuci.cache.store import TransientError
from gpuci.errors import ConflictError, InputError, IntegrityError, StoreError

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


def bce() -> Any:
    """botocore's exception classes; botocore is loaded by then (only its calls raise them)."""
    import botocore.exceptions

    return botocore.exceptions


def upload_failed() -> type[Exception]:
    """boto3's upload error class; boto3 is loaded by then (only uploads raise it)."""
    from boto3.exceptions import S3UploadFailedError

    return S3UploadFailedError


def is_certificate_error(exc: BaseException) -> bool:
    return "CERTIFICATE" in str(exc).upper() or type(exc).__name__ == "SSLCertVerificationError"


class S3Errors:
    """The store's error words (mixed into :class:`gpuci.cache.s3.S3Store`)."""

    url: str
    bucket: str
    endpoint: str
    endpoint_source: str
    environ: Mapping[str, str]
    limits: s3net.Limits
    _client: Any

    def _config_error(self, exc: Exception) -> Exception:
        """AWS configuration botocore cannot use (a missing profile, an unreadable config file):
        bad input, one line, not an internal error."""
        errors = bce()
        if isinstance(exc, errors.ProfileNotFound):
            profile = getattr(exc, "kwargs", {}).get("profile") or self.environ.get("AWS_PROFILE")
            return InputError(
                f"AWS profile '{profile}' (AWS_PROFILE) is not in the AWS config files",
                hint="fix AWS_PROFILE or add that profile to ~/.aws/config "
                "(AWS_CONFIG_FILE), or unset AWS_PROFILE to use the environment's credentials",
            )
        config_errors = (
            errors.ConfigParseError,
            errors.ConfigNotFound,
            errors.InvalidConfigError,
            errors.UnknownCredentialError,
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
        errors = bce()
        if isinstance(exc, errors.NoCredentialsError | errors.PartialCredentialsError):
            return StoreError(
                f"no usable AWS credentials for {self.url}",
                hint="configure credentials (aws-actions/configure-aws-credentials or "
                "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)",
            )
        if isinstance(
            exc,
            errors.EndpointConnectionError
            | errors.ConnectTimeoutError
            | errors.ConnectionClosedError
            | errors.ReadTimeoutError,
        ):
            return self._unreachable(type(exc).__name__)
        if isinstance(exc, errors.SSLError):
            return self._unreachable(type(exc).__name__, str(exc))
        code, message, operation = "", str(exc), ""
        if isinstance(exc, upload_failed()):
            inner = exc.__cause__ or exc.__context__  # the ClientError it words
            exc = inner if isinstance(inner, errors.ClientError) else exc
        if isinstance(exc, errors.ClientError):
            err = exc.response.get("Error", {})
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", "")
            code = str(err.get("Code", "")) or str(status)  # a non-XML answer has no code
            message = str(err.get("Message", "")) or code
            operation = str(getattr(exc, "operation_name", "") or "")
        elif isinstance(exc, upload_failed()):
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
