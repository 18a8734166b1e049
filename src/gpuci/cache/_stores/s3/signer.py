"""S3 requests signed with AWS Signature Version 4 from the standard library: presigned URLs
(query form) for the data path's ranged GETs, the ``Authorization`` header for the control
plane's requests (:mod:`gpuci.cache._stores.s3.client`).

Credentials, region and endpoint come from :mod:`gpuci.cache._stores.s3.config` (the environment, or
botocore's whole chain); this module only signs, with whatever credentials are current at each
signing (role credentials refresh under it). Why not botocore's signer: importing botocore is
slow, serial time before the first byte of a restore with keys in the environment (figure:
docs/benchmarks.md#figures-behind-the-code). The
algorithm is AWS's published one; tests/cache/test_cache_datapath.py checks it against
botocore's signer.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

from gpuci import settings

_ALGORITHM = "AWS4-HMAC-SHA256"
# Where botocore reads a custom endpoint from the environment, most specific first.
ENDPOINT_VARS = (settings.AWS_ENDPOINT_URL_S3, settings.AWS_ENDPOINT_URL)
_REGION = re.compile(r"[a-z]{2}(-[a-z0-9]{1,20}){1,4}")
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


@dataclass(frozen=True)
class EnvCredentials:
    access_key: str
    secret_key: str
    token: str


def env_credentials(environ: Mapping[str, str]) -> EnvCredentials | None:
    """The environment link of the AWS chain, exactly as botocore reads it (it comes first)."""
    access = environ.get(settings.AWS_ACCESS_KEY_ID.name, "")  # unstripped, as botocore
    secret = environ.get(settings.AWS_SECRET_ACCESS_KEY.name, "")
    if not access or not secret:
        return None
    token = environ.get(settings.AWS_SESSION_TOKEN.name, "") or environ.get(
        settings.AWS_SECURITY_TOKEN.name, ""
    )
    return EnvCredentials(access, secret, token)


def configured_endpoint(endpoint_url: str | None, environ: Mapping[str, str]) -> tuple[str, str]:
    """(endpoint, what set it) as botocore picks it: the input, then the environment; ("", "")
    for AWS itself or an endpoint only the AWS config file names (botocore resolves that)."""
    if endpoint_url:
        return endpoint_url, "the endpoint-url input"
    if settings.AWS_IGNORE_CONFIGURED_ENDPOINT_URLS.is_true(environ):
        return "", ""
    for var in ENDPOINT_VARS:
        value = var.value(environ)
        if value:
            return value, var.name
    return "", ""


def is_region(text: str) -> bool:
    """A region name as AWS writes them (``eu-west-1``, ``us-gov-west-1``): safe in a host."""
    return _REGION.fullmatch(text) is not None


@dataclass(frozen=True)
class Address:
    """Where one bucket's requests go and the region they are signed for."""

    base_url: str  # scheme://host[/bucket]: objects are base_url + "/" + key
    region: str
    on_aws: bool = False  # the host is AWS's, computed here from the bucket and the region
    fips: bool = False
    dualstack: bool = False

    @classmethod
    def of(
        cls, bucket: str, endpoint: str, region: str, fips: bool = False, dualstack: bool = False
    ) -> Address:
        """Path-style on a custom endpoint (as boto3 with ``addressing_style: path``; a path in
        it is kept as a prefix, as botocore keeps it); virtual-host on AWS, path-style there for
        a bucket name a host cannot carry (dots, capitals), as botocore does. ValueError for an
        endpoint that is not ``http(s)://host[:port]``."""
        if endpoint:  # user:password@ and ?query play no part in S3 (and are never printed)
            parts = urlsplit(endpoint.strip())
            host = parts.hostname or ""
            if parts.scheme not in ("http", "https") or not host:
                raise ValueError("is not an http(s)://host[:port] URL")
            host = f"[{host}]" if ":" in host else host
            port = f":{parts.port}" if parts.port else ""  # ValueError for a bad port
            base = f"{parts.scheme}://{host}{port}{parts.path.rstrip('/')}"
            return cls(f"{base}/{_uri(bucket)}", region)
        service = "s3-fips" if fips else "s3"
        domain = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
        host = f"{service}.{'dualstack.' if dualstack else ''}{region}.{domain}"
        if "." in bucket or bucket.lower() != bucket:
            return cls(f"https://{host}/{_uri(bucket)}", region, True, fips, dualstack)
        return cls(f"https://{bucket}.{host}", region, True, fips, dualstack)

    def moved(self, bucket: str, region: str) -> Address | None:
        """The same bucket signed for ``region`` (S3 said it lives there): on a custom endpoint
        the same origin, on AWS that region's S3 host for this bucket; None when ``region`` is
        not a region name (a hostile answer: no credentials go anywhere it names)."""
        if not self.on_aws:  # the region only enters the signature: any plain name
            return Address(self.base_url, region) if _NAME.fullmatch(region) else None
        if not is_region(region):
            return None
        return Address.of(bucket, "", region, self.fips, self.dualstack)


class Presigner:
    """Signs requests for one bucket with the current credentials (``creds(until)``, called
    once per signing with the operation's deadline: refreshable role credentials stay fresh, and
    a refresh ends by that deadline); the address can move to the bucket's region once S3 names
    it."""

    def __init__(self, address: Address, creds: Callable[[float | None], EnvCredentials]) -> None:
        self._address = address
        self._creds = creds
        self._lock = threading.Lock()

    @property
    def address(self) -> Address:
        return self._address

    @property
    def region(self) -> str:
        return self._address.region

    @property
    def base_url(self) -> str:
        return self._address.base_url

    def move(self, address: Address) -> None:
        with self._lock:
            self._address = address

    def _now(self, until: float | None) -> tuple[Address, EnvCredentials, str]:
        address = self._address  # one read: a concurrent move signs wholly old or wholly new
        return address, self._creds(until), urlsplit(address.base_url).netloc

    def url(
        self,
        key: str,
        expires: int,
        now: datetime.datetime | None = None,
        method: str = "GET",
        query: Mapping[str, str] | None = None,
        until: float | None = None,
    ) -> str:
        """A presigned URL for ``key`` (the object key, prefix included; empty for the bucket
        itself, e.g. a listing, with its parameters in ``query``); payload unsigned. ``until``:
        the operation's deadline (monotonic), which a credential refresh keeps."""
        now = now or datetime.datetime.now(datetime.timezone.utc)
        address, creds, host = self._now(until)
        stamp, scope = _scope(now, address.region)
        path = _path(address, key)
        params = {
            **(query or {}),
            "X-Amz-Algorithm": _ALGORITHM,
            "X-Amz-Credential": f"{creds.access_key}/{scope}",
            "X-Amz-Date": stamp,
            "X-Amz-Expires": str(expires),
            "X-Amz-SignedHeaders": "host",
        }
        if creds.token:
            params["X-Amz-Security-Token"] = creds.token
        signed = _canonical_query(params)
        canonical = f"{method}\n{path}\n{signed}\nhost:{host}\n\nhost\nUNSIGNED-PAYLOAD"
        signature = _signature(creds, address.region, now, stamp, scope, canonical)
        scheme = urlsplit(address.base_url).scheme
        return f"{scheme}://{host}{path}?{signed}&X-Amz-Signature={signature}"

    def signed(
        self,
        method: str,
        key: str,
        body: bytes = b"",
        query: Mapping[str, str] | None = None,
        now: datetime.datetime | None = None,
        amz: Mapping[str, str] | None = None,
        until: float | None = None,
    ) -> tuple[str, dict[str, str]]:
        """(URL, headers) of a request signed in its ``Authorization`` header, as boto3 sends
        its own (payload hashed): every S3 server that takes boto3's requests takes these.
        ``amz``: ``x-amz-*`` headers to send, signed (S3 refuses them unsigned); ``until`` as
        :meth:`url`."""
        now = now or datetime.datetime.now(datetime.timezone.utc)
        address, creds, host = self._now(until)
        stamp, scope = _scope(now, address.region)
        path = _path(address, key)
        payload = hashlib.sha256(body).hexdigest()
        fields = {"host": host, "x-amz-content-sha256": payload, "x-amz-date": stamp}
        fields.update({name.lower(): value.strip() for name, value in (amz or {}).items()})
        if creds.token:
            fields["x-amz-security-token"] = creds.token
        names = ";".join(sorted(fields))
        lines = "".join(f"{name}:{fields[name]}\n" for name in sorted(fields))
        query_text = _canonical_query(query or {})
        canonical = f"{method}\n{path}\n{query_text}\n{lines}\n{names}\n{payload}"
        signature = _signature(creds, address.region, now, stamp, scope, canonical)
        headers = {name: value for name, value in fields.items() if name != "host"}
        headers["authorization"] = (
            f"{_ALGORITHM} Credential={creds.access_key}/{scope}, "
            f"SignedHeaders={names}, Signature={signature}"
        )
        scheme = urlsplit(address.base_url).scheme
        url = f"{scheme}://{host}{path}" + (f"?{query_text}" if query_text else "")
        return url, headers


def _scope(now: datetime.datetime, region: str) -> tuple[str, str]:
    return now.strftime("%Y%m%dT%H%M%SZ"), f"{now:%Y%m%d}/{region}/s3/aws4_request"


def _path(address: Address, key: str) -> str:
    base_path = urlsplit(address.base_url).path
    return f"{base_path}/{_uri(key)}" if key else (base_path or "/")


def _signature(
    creds: EnvCredentials,
    region: str,
    now: datetime.datetime,
    stamp: str,
    scope: str,
    canonical: str,
) -> str:
    to_sign = "\n".join((_ALGORITHM, stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()))
    key_bytes = ("AWS4" + creds.secret_key).encode()
    for part in (f"{now:%Y%m%d}", region, "s3", "aws4_request"):
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
