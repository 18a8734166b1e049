"""S3's REST calls for the control plane, signed by :mod:`gpuci.cache.sigv4`, without boto3.

A warm restore asks the store for one ref and one manifest, maybe one listing (restore-keys)
and writes one usage record; building a boto3 client for that costs more than the whole rest
of the restore (0.3-0.6 s, docs/benchmarks.md). Here each call is one request signed in its
``Authorization`` header as boto3 signs its own (payload hashed), on a kept-alive connection:
a raw socket on ``http://`` endpoints (no ``http.client``, ``email`` or ``ssl`` to import),
``http.client`` over TLS otherwise; retried as botocore's standard mode retries (connection
errors, 5xx, throttling; ``AWS_MAX_ATTEMPTS``). What the answers mean (a missing key, a
missing bucket, refused credentials) is decided by :class:`gpuci.cache.s3.S3Store`, in the
same words as for boto3's errors.
"""

from __future__ import annotations

import datetime
import random
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from urllib.parse import unquote_plus, urlsplit

from gpuci.cache.rawhttp import BadResponse, RawConnection
from gpuci.cache.sigv4 import Presigner

# Answers botocore's standard retry mode retries (transient and throttling errors).
_RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
_RETRY_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "RequestTimeout",
        "RequestTimeoutException",
        "InternalError",
        "PriorRequestNotComplete",
    }
)
_CODE_RE = re.compile(rb"<Code>([^<]{1,200})</Code>")
_MESSAGE_RE = re.compile(rb"<Message>([^<]{0,400})</Message>")
# A listing page holds at most 1,000 keys of at most 1 KiB: a bigger answer is hostile.
MAX_LISTING_PAGE = 8 << 20
_S3_NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


@dataclass(frozen=True)
class Reply:
    status: int
    headers: Mapping[str, str]  # names in lower case
    body: bytes

    @property
    def code(self) -> str:
        """S3's error code from an XML error body, else the status (as botocore reports it)."""
        found = _CODE_RE.search(self.body)
        return found.group(1).decode("utf-8", "replace") if found else str(self.status)

    @property
    def message(self) -> str:
        found = _MESSAGE_RE.search(self.body)
        return found.group(1).decode("utf-8", "replace") if found else ""


class Unreachable(Exception):
    """Every attempt failed before an answer (refused, reset, timed out); carries the last."""

    def __init__(self, exc: BaseException) -> None:
        super().__init__(str(exc))
        self.name = type(exc).__name__


class BadAnswer(Exception):
    """An answer no HTTP server may send (not retried); the message says what was wrong."""


class RestClient:
    """Presigned requests to one bucket; one kept-alive connection per thread."""

    def __init__(
        self,
        presigner: Presigner,
        attempts: int,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.presigner = presigner
        self.attempts = max(1, attempts)
        self._sleep = sleep
        self._local = threading.local()

    def call(
        self,
        method: str,
        key: str,
        *,
        body: bytes = b"",
        limit: int | None = None,
        query: Mapping[str, str] | None = None,
    ) -> Reply:
        """The final answer after retries (any status); Unreachable when none came back.

        With ``limit``, at most ``limit + 1`` bytes of the body are read."""
        for attempt in range(1, self.attempts + 1):
            url, headers = self.presigner.signed(method, key, body, query)
            try:
                reply = self._once(url, headers, method, body, limit)
            except (OSError, _http_errors()) as exc:
                if attempt == self.attempts:
                    raise Unreachable(exc) from None
            else:
                if not _transient(reply) or attempt == self.attempts:
                    return reply
            # botocore's standard mode: full jitter, doubling, at most 20 s.
            self._sleep(random.random() * min(20.0, 2.0 ** (attempt - 1)))
        raise AssertionError("unreachable")  # the loop always returns or raises

    def _once(
        self, url: str, headers: dict[str, str], method: str, body: bytes, limit: int | None
    ) -> Reply:
        parts = urlsplit(url)
        target = f"{parts.path}?{parts.query}" if parts.query else parts.path
        if parts.scheme == "http":
            return self._raw(parts.netloc, target, headers, method, body, limit)
        return self._tls(parts.netloc, target, headers, method, body, limit)

    def _raw(
        self,
        netloc: str,
        target: str,
        headers: dict[str, str],
        method: str,
        body: bytes,
        limit: int | None,
    ) -> Reply:
        conn: RawConnection | None = getattr(self._local, "raw", None)
        reused = conn is not None
        if conn is None:
            host, port = netloc, "80"
            if not netloc.endswith("]") and ":" in netloc:
                host, _, port = netloc.rpartition(":")
            conn = self._local.raw = RawConnection(host.strip("[]"), int(port), netloc)
        for attempt in (1, 2):
            try:
                cap = (1 << 62) if limit is None else limit
                status, answer, data = conn.exchange(method, target, headers, body, cap)
                return Reply(status, answer, data)
            except BadResponse as exc:
                conn.close()
                raise BadAnswer(str(exc)) from None
            except OSError:
                conn.close()
                if attempt == 1 and reused:
                    continue  # the server closed an idle keep-alive connection: reconnect once
                raise
        raise AssertionError("unreachable")

    def _tls(
        self,
        netloc: str,
        target: str,
        headers: dict[str, str],
        method: str,
        body: bytes,
        limit: int | None,
    ) -> Reply:
        import http.client
        import ssl

        conn = getattr(self._local, "tls", None)
        if conn is None:
            conn = http.client.HTTPSConnection(
                netloc, timeout=60, context=ssl.create_default_context()
            )
        self._local.tls = None
        try:
            # The Host header exactly as signed (http.client would drop a default port).
            sent = {"Host": netloc, **headers}
            conn.request(method, target, body if body or method == "PUT" else None, sent)
            resp = conn.getresponse()
            data = resp.read() if limit is None else resp.read(limit + 1)
            answer = {k.lower(): v for k, v in resp.getheaders()}
        except BaseException:
            conn.close()
            raise
        if resp.isclosed() and not resp.will_close:  # read to its end: keep it for the next
            self._local.tls = conn
        else:
            conn.close()
        return Reply(resp.status, answer, b"" if method == "HEAD" else data)

    # ----- answers ------------------------------------------------------------------------------

    def list_pages(self, prefix: str) -> Iterator[tuple[Reply, list[Listed]]]:
        """ListObjectsV2 under ``prefix`` (the full key prefix), page by page.

        A page that is not 200 is yielded with no entries and ends the listing: the caller
        words the error."""
        token = ""
        seen: set[str] = set()
        while True:
            query = {"list-type": "2", "prefix": prefix, "encoding-type": "url"}
            if token:
                query["continuation-token"] = token
            reply = self.call("GET", "", query=query, limit=MAX_LISTING_PAGE)
            if reply.status != 200:
                yield reply, []
                return
            if len(reply.body) > MAX_LISTING_PAGE:
                raise BadAnswer(f"a listing page is over {MAX_LISTING_PAGE >> 20} MiB")
            entries, token = parse_listing(reply.body)
            yield reply, entries
            if not token:
                return
            if token in seen:
                raise BadAnswer("the listing repeats a continuation token")
            seen.add(token)


@dataclass(frozen=True)
class Listed:
    key: str  # the full object key, prefix included
    size: int
    modified: float
    etag: str


def parse_listing(body: bytes) -> tuple[list[Listed], str]:
    """(entries, next continuation token or "") from a ListObjectsV2 answer."""
    import xml.etree.ElementTree as ET  # only listings (restore-keys, ls, prune) pay for it

    try:
        root = ET.fromstring(body)
    except ET.ParseError as exc:
        raise BadAnswer(f"a listing is not valid XML ({exc})") from None

    def text(node: ET.Element, name: str) -> str:
        child = node.find(_S3_NS + name)
        if child is None:
            child = node.find(name)
        return (child.text or "") if child is not None else ""

    encoded = text(root, "EncodingType") == "url"
    entries: list[Listed] = []
    contents = root.findall(_S3_NS + "Contents") or root.findall("Contents")
    for item in contents:
        key = text(item, "Key")
        try:
            size = int(text(item, "Size"))
            modified = _iso_time(text(item, "LastModified"))
        except ValueError:
            raise BadAnswer(
                f"a listing entry has a bad Size or LastModified ({key[:80]!r})"
            ) from None
        entries.append(
            Listed(unquote_plus(key) if encoded else key, size, modified, text(item, "ETag"))
        )
    truncated = text(root, "IsTruncated").strip().lower() == "true"
    token = text(root, "NextContinuationToken") if truncated else ""
    if truncated and not token:
        raise BadAnswer("a truncated listing names no continuation token")
    return entries, token


def _iso_time(value: str) -> float:
    """``2026-11-30T15:20:00.000Z`` as seconds since the epoch."""
    stamp = datetime.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=datetime.UTC)
    return stamp.timestamp()


def http_time(value: str) -> float:
    """An HTTP date (``Last-Modified: Mon, 30 Nov 2026 15:20:00 GMT``) as epoch seconds; 0.0
    when unreadable (the caller only orders objects by it)."""
    try:
        stamp = datetime.datetime.strptime(value.strip(), "%a, %d %b %Y %H:%M:%S GMT")
    except ValueError:
        return 0.0
    return stamp.replace(tzinfo=datetime.UTC).timestamp()


def _transient(reply: Reply) -> bool:
    return reply.status in _RETRY_STATUS or (reply.status >= 400 and reply.code in _RETRY_CODES)


def _http_errors() -> type[Exception]:
    """http.client's exception base, when the TLS path loaded it (never on http://)."""
    import sys

    module = sys.modules.get("http.client")
    return module.HTTPException if module is not None else OSError  # type: ignore[no-any-return]
