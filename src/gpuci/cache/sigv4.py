"""S3 requests signed with AWS Signature Version 4 from the standard library: presigned URLs
(query form) for the data path's ranged GETs, the ``Authorization`` header for the control
plane's requests (:mod:`gpuci.cache.s3rest`).

Why not botocore: importing botocore costs 0.2-0.3 s and creating a boto3 client 0.1-0.2 s
more, serial time before the first byte of every restore (measured, docs/benchmarks.md). A
restore only needs a few signed requests (GET, HEAD, a listing, one PUT), so when the
credentials are in the environment (the first link of the standard AWS chain, and what
aws-actions/configure-aws-credentials sets), they are signed here and boto3 never loads. That
holds on AWS and on custom endpoints (the endpoint-url input, ``AWS_ENDPOINT_URL_S3``,
``AWS_ENDPOINT_URL``: MinIO, R2, SeaweedFS), which are addressed path-style, as boto3 does.
Anything else (profiles, SSO, instance roles, an endpoint in the AWS config file, FIPS or
dual-stack endpoints) goes through boto3 as before. The algorithm is AWS's published one;
tests/cache/test_cache_datapath.py checks it against botocore's signer.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlsplit

_ALGORITHM = "AWS4-HMAC-SHA256"
# Where botocore reads a custom endpoint from the environment, most specific first.
ENDPOINT_VARS = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
# botocore's other endpoint knobs: when one is set, only botocore knows the URL to use.
_ENDPOINT_ENV = (
    "AWS_USE_FIPS_ENDPOINT",
    "AWS_USE_DUALSTACK_ENDPOINT",
    "AWS_S3_USE_ARN_REGION",
    "AWS_S3_DISABLE_MULTIREGION_ACCESS_POINTS",
)


@dataclass(frozen=True)
class EnvCredentials:
    access_key: str
    secret_key: str
    token: str


def env_credentials(environ: Mapping[str, str]) -> EnvCredentials | None:
    """The environment link of the AWS chain, exactly as botocore reads it (it comes first)."""
    access = environ.get("AWS_ACCESS_KEY_ID", "")
    secret = environ.get("AWS_SECRET_ACCESS_KEY", "")
    if not access or not secret:
        return None
    token = environ.get("AWS_SESSION_TOKEN", "") or environ.get("AWS_SECURITY_TOKEN", "")
    return EnvCredentials(access, secret, token)


def configured_endpoint(endpoint_url: str | None, environ: Mapping[str, str]) -> tuple[str, str]:
    """(endpoint, what set it) as botocore picks it: the input, then the environment; ("", "")
    for AWS itself or an endpoint only the AWS config file names (botocore resolves that)."""
    if endpoint_url:
        return endpoint_url, "the endpoint-url input"
    if environ.get("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "").strip().lower() == "true":
        return "", ""
    for var in ENDPOINT_VARS:
        value = environ.get(var, "").strip()
        if value:
            return value, var
    return "", ""


def _config_mentions(environ: Mapping[str, str], word: str) -> bool:
    """Whether the AWS config file names ``word`` anywhere (any profile or services section)."""
    path = environ.get("AWS_CONFIG_FILE", "").strip()
    if not path:
        home = environ.get("HOME", "").strip()
        path = str(Path(home) / ".aws" / "config") if home else "~/.aws/config"
    try:
        return word in Path(path).expanduser().read_text(errors="replace")
    except OSError:
        return False


class Presigner:
    """Signs requests for one bucket; path-style on a custom endpoint, virtual-host on AWS."""

    def __init__(self, base_url: str, creds: EnvCredentials, region: str) -> None:
        self.base_url = base_url.rstrip("/")
        self.creds = creds
        self.region = region
        self.host = urlsplit(self.base_url).netloc

    @classmethod
    def for_store(
        cls,
        bucket: str,
        endpoint_url: str | None,
        region: str | None,
        environ: Mapping[str, str],
    ) -> Presigner | None:
        """A presigner when the fast path signs exactly as boto3 would; None otherwise.

        ``endpoint_url`` is the input; the environment's endpoint variables count as botocore
        counts them (:func:`configured_endpoint`)."""
        creds = env_credentials(environ)
        endpoint_url, _ = configured_endpoint(endpoint_url, environ)
        region = (
            (region or "").strip()
            or environ.get("AWS_REGION", "").strip()
            or environ.get("AWS_DEFAULT_REGION", "").strip()
        )
        if not region and endpoint_url and not _config_mentions(environ, "region"):
            region = "us-east-1"  # botocore signs for us-east-1 on an endpoint with no region
        if creds is None or not region or any(environ.get(name) for name in _ENDPOINT_ENV):
            return None
        ignore = environ.get("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "").strip().lower() == "true"
        if not endpoint_url and not ignore and _config_mentions(environ, "endpoint_url"):
            return None  # the profile's endpoint_url: botocore resolves it, AWS is not the host
        if endpoint_url:
            parts = urlsplit(endpoint_url)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                return None
            if parts.path.strip("/") or parts.query:
                return None
            return cls(f"{parts.scheme}://{parts.netloc}/{_uri(bucket)}", creds, region)
        if "." in bucket or bucket.lower() != bucket:
            return None  # boto3 switches to path style or another endpoint: let it decide
        return cls(f"https://{bucket}.s3.{region}.amazonaws.com", creds, region)

    def url(
        self,
        key: str,
        expires: int,
        now: datetime.datetime | None = None,
        method: str = "GET",
        query: Mapping[str, str] | None = None,
    ) -> str:
        """A presigned URL for ``key`` (the object key, prefix included; empty for the bucket
        itself, e.g. a listing, with its parameters in ``query``); payload unsigned."""
        now = now or datetime.datetime.now(datetime.timezone.utc)
        stamp, scope = self._scope(now)
        path = self._path(key)
        params = {
            **(query or {}),
            "X-Amz-Algorithm": _ALGORITHM,
            "X-Amz-Credential": f"{self.creds.access_key}/{scope}",
            "X-Amz-Date": stamp,
            "X-Amz-Expires": str(expires),
            "X-Amz-SignedHeaders": "host",
        }
        if self.creds.token:
            params["X-Amz-Security-Token"] = self.creds.token
        signed = _canonical_query(params)
        canonical = f"{method}\n{path}\n{signed}\nhost:{self.host}\n\nhost\nUNSIGNED-PAYLOAD"
        signature = self._signature(now, stamp, scope, canonical)
        scheme = urlsplit(self.base_url).scheme
        return f"{scheme}://{self.host}{path}?{signed}&X-Amz-Signature={signature}"

    def signed(
        self,
        method: str,
        key: str,
        body: bytes = b"",
        query: Mapping[str, str] | None = None,
        now: datetime.datetime | None = None,
    ) -> tuple[str, dict[str, str]]:
        """(URL, headers) of a request signed in its ``Authorization`` header, as boto3 sends
        its own (payload hashed): every S3 server that takes boto3's requests takes these."""
        now = now or datetime.datetime.now(datetime.timezone.utc)
        stamp, scope = self._scope(now)
        path = self._path(key)
        payload = hashlib.sha256(body).hexdigest()
        fields = {"host": self.host, "x-amz-content-sha256": payload, "x-amz-date": stamp}
        if self.creds.token:
            fields["x-amz-security-token"] = self.creds.token
        names = ";".join(sorted(fields))
        lines = "".join(f"{name}:{fields[name]}\n" for name in sorted(fields))
        query_text = _canonical_query(query or {})
        canonical = f"{method}\n{path}\n{query_text}\n{lines}\n{names}\n{payload}"
        signature = self._signature(now, stamp, scope, canonical)
        headers = {name: value for name, value in fields.items() if name != "host"}
        headers["authorization"] = (
            f"{_ALGORITHM} Credential={self.creds.access_key}/{scope}, "
            f"SignedHeaders={names}, Signature={signature}"
        )
        scheme = urlsplit(self.base_url).scheme
        url = f"{scheme}://{self.host}{path}" + (f"?{query_text}" if query_text else "")
        return url, headers

    def _scope(self, now: datetime.datetime) -> tuple[str, str]:
        return now.strftime("%Y%m%dT%H%M%SZ"), f"{now:%Y%m%d}/{self.region}/s3/aws4_request"

    def _path(self, key: str) -> str:
        base_path = urlsplit(self.base_url).path
        return f"{base_path}/{_uri(key)}" if key else (base_path or "/")

    def _signature(self, now: datetime.datetime, stamp: str, scope: str, canonical: str) -> str:
        to_sign = "\n".join(
            (_ALGORITHM, stamp, scope, hashlib.sha256(canonical.encode()).hexdigest())
        )
        key_bytes = ("AWS4" + self.creds.secret_key).encode()
        for part in (f"{now:%Y%m%d}", self.region, "s3", "aws4_request"):
            key_bytes = hmac.new(key_bytes, part.encode(), hashlib.sha256).digest()
        return hmac.new(key_bytes, to_sign.encode(), hashlib.sha256).hexdigest()


def _canonical_query(params: Mapping[str, str]) -> str:
    """SigV4's canonical query string: encoded names and values, sorted by encoded name."""
    pairs = sorted((_q(k), _q(v)) for k, v in params.items())
    return "&".join(f"{k}={v}" for k, v in pairs)


def _uri(text: str) -> str:
    """S3's UriEncode for paths: every byte but unreserved characters and '/'."""
    return quote(text, safe="/~")


def _q(text: str) -> str:
    return quote(text, safe="-_.~")
