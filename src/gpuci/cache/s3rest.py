"""S3's REST calls for the control plane, signed by :mod:`gpuci.cache.sigv4`, without boto3.

A warm restore asks the store for one ref and one manifest, maybe one listing (restore-keys)
and writes one usage record; building a boto3 client for that costs more than the whole rest
of the restore (0.3-0.6 s, docs/benchmarks.md). Here each call is one request signed in its
``Authorization`` header as boto3 signs its own (payload hashed), on a kept-alive connection
of the store's bounded ``http.client`` pool (:mod:`gpuci.cache.s3pool`); retried as botocore's
standard mode retries (connection errors, 5xx, throttling; ``AWS_MAX_ATTEMPTS``). What the
answers mean (a missing key, a missing bucket, refused credentials) is decided by
:class:`gpuci.cache.s3.S3Store`, in the same words as for boto3's errors.
"""

from __future__ import annotations

import datetime
import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from urllib.parse import unquote_plus

from gpuci.cache.s3http import CONTROL_CAP, BadResponse
from gpuci.cache.s3pool import Pool
from gpuci.cache.sigv4 import Presigner
from gpuci.retry import botocore_delay

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
# Far beyond any cache's refs (a store of 1,000,000 keys is 1,000 pages): a server handing out
# fresh continuation tokens for ever ends here.
MAX_LISTING_PAGES = 2_000
MAX_LISTING_KEYS = 2_000_000
# How long a presigned request's URL stays good (it is used at once; retries sign anew).
PRESIGNED_FOR = 900


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
        self.detail = str(exc)[:300]


class BadAnswer(Exception):
    """An answer no HTTP server may send (not retried); the message says what was wrong."""


class RestClient:
    """Presigned requests to one bucket over the store's :class:`~gpuci.cache.s3pool.Pool`."""

    def __init__(
        self,
        presigner: Presigner,
        attempts: int,
        pool: Pool,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.presigner = presigner
        self.attempts = max(1, attempts)
        self.pool = pool
        self._sleep = sleep
        # Told of each attempt that failed for a reason worth slowing down for (a dropped
        # connection, 5xx, 429, SlowDown), as botocore's retry hook tells the store's.
        self.on_transient: Callable[[], None] | None = None

    def call(
        self,
        method: str,
        key: str,
        *,
        body: bytes | memoryview = b"",
        limit: int | None = None,
        query: Mapping[str, str] | None = None,
        until: float | None = None,
        headers: Mapping[str, str] | None = None,
        unsigned: bool = False,
    ) -> Reply:
        """The final answer after retries (any status); Unreachable when none came back.

        With ``limit``, at most ``limit + 1`` bytes of the body are read (the caller words a
        longer one); without, an answer over :data:`CONTROL_CAP` is a BadAnswer. The whole call,
        retries included, ends by ``until`` (default: the operation limit from now).
        ``headers`` go out unsigned (``If-None-Match``); ``unsigned`` sends a presigned URL
        with an unsigned payload, as boto3 does over HTTPS: a part's bytes are not hashed
        again to sign them (the save hashes every byte it sends already)."""
        cap = CONTROL_CAP if limit is None else limit + 1
        if until is None:
            until = time.monotonic() + self.pool.limits.operation

        def once() -> Reply:
            signed: dict[str, str] = {}
            if unsigned:
                url = self.presigner.url(key, PRESIGNED_FOR, method=method, query=query)
            else:
                url, signed = self.presigner.signed(method, key, bytes(body), query)
            sent = body if body or method in ("PUT", "POST") else None
            try:
                status, answer, data = self.pool.exchange(
                    method,
                    url,
                    {**signed, **(headers or {})},
                    sent,
                    cap,
                    until,
                    cut=limit is not None,
                )
            except BadResponse as exc:
                raise BadAnswer(str(exc)) from None
            return Reply(status, answer, data)

        return self._retrying(once, until)

    def _retrying(self, once: Callable[[], Reply], until: float) -> Reply:
        """botocore's standard retry mode: connection errors, 5xx and throttling, full jitter
        doubling up to 20 s, ``attempts`` in all, never past ``until``."""
        for attempt in range(1, self.attempts + 1):
            try:
                reply = once()
            except OSError as exc:
                self._heard()
                if attempt == self.attempts or time.monotonic() >= until:
                    raise Unreachable(exc) from None
            else:
                if not _transient(reply):
                    return reply
                self._heard()
                if attempt == self.attempts:
                    return reply
            pause = botocore_delay(attempt)
            self._sleep(max(0.0, min(pause, until - time.monotonic())))
        raise AssertionError("unreachable")  # the loop always returns or raises

    def _heard(self) -> None:
        listener = self.on_transient
        if listener is not None:
            listener()

    # ----- answers ------------------------------------------------------------------------------

    def list_pages(self, prefix: str) -> Iterator[tuple[Reply, list[Listed]]]:
        """ListObjectsV2 under ``prefix`` (the full key prefix), page by page; at most
        :data:`MAX_LISTING_PAGES` pages and :data:`MAX_LISTING_KEYS` keys, within one
        operation's time limit.

        A page that is not 200 is yielded with no entries and ends the listing: the caller
        words the error."""
        token = ""
        seen: set[str] = set()
        keys = 0
        until = time.monotonic() + self.pool.limits.operation
        for _ in range(MAX_LISTING_PAGES):
            query = {"list-type": "2", "prefix": prefix, "encoding-type": "url"}
            if token:
                query["continuation-token"] = token
            reply = self.call("GET", "", query=query, limit=MAX_LISTING_PAGE, until=until)
            if reply.status != 200:
                yield reply, []
                return
            if len(reply.body) > MAX_LISTING_PAGE:
                raise BadAnswer(f"a listing page is over {MAX_LISTING_PAGE >> 20} MiB")
            entries, token = parse_listing(reply.body)
            keys += len(entries)
            if keys > MAX_LISTING_KEYS:
                raise BadAnswer(f"the listing has over {MAX_LISTING_KEYS:,} keys")
            yield reply, entries
            if not token:
                return
            if token in seen:
                raise BadAnswer("the listing repeats a continuation token")
            seen.add(token)
        raise BadAnswer(f"the listing goes on past {MAX_LISTING_PAGES:,} pages")


@dataclass(frozen=True)
class Listed:
    key: str  # the full object key, prefix included
    size: int
    modified: float
    etag: str


def _local(tag: str) -> str:
    """An element's name without its namespace (``{ns}Key`` -> ``Key``)."""
    return tag.rpartition("}")[2]


def parse_listing(body: bytes) -> tuple[list[Listed], str]:
    """(entries, next continuation token or "") from a ListObjectsV2 answer.

    Elements match on their local names: S3 sends its 2006-03-01 namespace, some compatible
    servers send it without the trailing slash or none at all. A ``Contents`` without a key, a
    size or a date is refused: read as empty, it would hide keys that are there."""
    import xml.etree.ElementTree as ET  # only listings (restore-keys, ls, prune) pay for it

    try:
        root = ET.fromstring(body)
    except ET.ParseError as exc:
        raise BadAnswer(f"a listing is not valid XML ({exc})") from None
    if _local(root.tag) != "ListBucketResult":
        raise BadAnswer(f"a listing's root is <{_local(root.tag)[:40]}>, not <ListBucketResult>")

    def fields(node: ET.Element) -> dict[str, str]:
        return {_local(child.tag): (child.text or "") for child in node}

    top = fields(root)
    encoded = top.get("EncodingType", "") == "url"
    entries: list[Listed] = []
    for item in root:
        if _local(item.tag) != "Contents":
            continue
        info = fields(item)
        key = info.get("Key", "")
        try:
            if not key:
                raise ValueError("no Key")
            size = int(info["Size"])
            modified = _iso_time(info["LastModified"])
        except (KeyError, ValueError):
            raise BadAnswer(
                f"a listing entry has no readable Key, Size or LastModified ({key[:80]!r})"
            ) from None
        entries.append(
            Listed(unquote_plus(key) if encoded else key, size, modified, info.get("ETag", ""))
        )
    truncated = top.get("IsTruncated", "").strip().lower() == "true"
    token = top.get("NextContinuationToken", "") if truncated else ""
    if truncated and not token:
        raise BadAnswer("a truncated listing names no continuation token")
    return entries, token


def _iso_time(value: str) -> float:
    """``2026-11-30T15:20:00.000Z`` as seconds since the epoch."""
    stamp = datetime.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=datetime.timezone.utc)
    return stamp.timestamp()


def http_time(value: str) -> float:
    """An HTTP date (``Last-Modified: Mon, 30 Nov 2026 15:20:00 GMT``) as epoch seconds; 0.0
    when unreadable (the caller only orders objects by it)."""
    try:
        stamp = datetime.datetime.strptime(value.strip(), "%a, %d %b %Y %H:%M:%S GMT")
    except ValueError:
        return 0.0
    return stamp.replace(tzinfo=datetime.timezone.utc).timestamp()


def _transient(reply: Reply) -> bool:
    return reply.status in _RETRY_STATUS or (reply.status >= 400 and reply.code in _RETRY_CODES)
