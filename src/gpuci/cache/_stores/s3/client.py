"""S3's REST calls, signed by :mod:`gpuci.cache._stores.s3.signer`: the store's one client for every
operation, whatever the credentials.

Each call is one request signed in its ``Authorization`` header as boto3 signs its own (payload
hashed; or presigned with the payload unsigned, for bytes the save hashed already), on a
kept-alive connection of the store's bounded ``http.client`` pool
(:mod:`gpuci.cache._stores.s3.pool`); retried as botocore's standard mode retries (connection
errors, 5xx, throttling; ``AWS_MAX_ATTEMPTS``), never past the operation's deadline. A redirect to
the bucket's region is followed once, re-signed for that region on the same endpoint (on AWS: that
region's S3 host for the bucket, computed here, never a host the answer names); any other redirect
is refused. Listings are parsed by expat with DTDs and entities refused, page by page, within caps.
What the answers mean (a missing key, a missing bucket, refused credentials) is decided by
:class:`gpuci.cache._stores.s3.store.S3Store`.
"""

from __future__ import annotations

import datetime
import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from urllib.parse import unquote_plus, urlsplit

from gpuci.cache._stores.base import UNKNOWN_MODIFIED
from gpuci.cache._stores.s3.pool import Pool, StopWait
from gpuci.cache._stores.s3.signer import Address, Presigner
from gpuci.cache._stores.s3.transport import CONTROL_CAP, BadResponse, count
from gpuci.retry import BOTOCORE_STANDARD

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
_REGION_RE = re.compile(rb"<Region>([^<]{1,40})</Region>")
# Answers that name the bucket's region (S3 redirects a bucket to it, or refuses the signature's).
REDIRECT_CODES = frozenset(
    {
        "PermanentRedirect",
        "TemporaryRedirect",
        "AuthorizationHeaderMalformed",
        "IllegalLocationConstraintException",
    }
)
# A listing page holds at most 1,000 keys of at most 1 KiB: a bigger answer is hostile.
MAX_LISTING_PAGE = 8 << 20
MAX_PAGE_ENTRIES = 10_000
# Far beyond any cache's refs (a store of 1,000,000 keys is 1,000 pages): a server handing out
# fresh continuation tokens for ever ends here, and so does memory: the caller may keep every
# key, so their count and bytes are capped (64 MiB of names: about 200 MiB held).
MAX_LISTING_PAGES = 2_000
MAX_LISTING_KEYS = 1_000_000
MAX_LISTING_KEY_BYTES = 64 << 20
# How long a presigned request's URL stays good (it is used at once; retries sign anew).
PRESIGNED_FOR = 900


# What may come before an XML document's root element: whitespace, the declaration, comments.
_PROLOGUE = re.compile(rb"(?:\s|<\?xml[^>]{0,200}\?>|<!--.{0,200}?-->)*", re.S)


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

    @property
    def error_body(self) -> bool:
        """The body is an S3 ``<Error>`` document, whatever the status: CompleteMultipartUpload,
        CopyObject and UploadPartCopy may answer 200 and say they failed in the body, after
        whitespace S3 writes to keep a slow answer alive (so not only in its first bytes)."""
        start = _PROLOGUE.match(self.body)
        rest = self.body[start.end() if start else 0 :]
        return rest.startswith((b"<Error>", b"<Error "))

    @property
    def redirect(self) -> bool:
        """S3 says the bucket is elsewhere (any 3xx, or a wrong region's signature refused)."""
        return 300 <= self.status < 400 or (self.status >= 400 and self.code in REDIRECT_CODES)

    @property
    def region(self) -> str:
        """The bucket's region as the answer names it (header, else the XML body), or ""."""
        named = self.headers.get("x-amz-bucket-region", "").strip()
        if not named:
            found = _REGION_RE.search(self.body)
            named = found.group(1).decode("ascii", "replace").strip() if found else ""
        return named


class _Transient(Exception):
    """A 5xx or throttling answer, raised so the retry policy sees it; kept for the caller."""

    def __init__(self, reply: Reply) -> None:
        super().__init__(reply.status)
        self.reply = reply


class Unreachable(Exception):
    """Every attempt failed before an answer (refused, reset, timed out); carries the last."""

    def __init__(self, exc: BaseException) -> None:
        super().__init__(str(exc))
        self.name = type(exc).__name__
        self.detail = str(exc)[:300]


class Redirected(Exception):
    """S3 sent the request elsewhere and following it is not safe or did not help."""

    def __init__(self, reply: Reply, region: str) -> None:
        self.status, self.code = reply.status, reply.code
        self.region = region  # a valid region name, or ""
        self.host = _location_host(reply.headers.get("location", ""))[:100]
        super().__init__(f"{reply.status} {reply.code}")


def _location_host(where: str) -> str:
    """The host a redirect's ``Location`` names, or "" when it names none that can be read
    (``http://[evil/x`` makes urlsplit raise: the redirect is refused the same way)."""
    if not where.startswith(("http:", "https:")):
        return ""
    try:
        return urlsplit(where).hostname or ""
    except ValueError:
        return ""


class RestClient:
    """Presigned requests to one bucket over the store's
    :class:`~gpuci.cache._stores.s3.pool.Pool`."""

    def __init__(
        self,
        presigner: Presigner,
        attempts: int,
        pool: Pool,
        bucket: str,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        self.presigner = presigner
        self.bucket = bucket
        self.attempts = max(1, attempts)
        self.pool = pool
        self._sleep = sleep  # None: a wait on the pool's stop flag (tests pass a fake clock's)
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
        amz: Mapping[str, str] | None = None,
        unsigned: bool = False,
    ) -> Reply:
        """The final answer after retries (any status but a redirect); Unreachable when none
        came back, Redirected when S3 sent it elsewhere and that cannot be followed.

        With ``limit``, at most ``limit + 1`` bytes of the body are read (the caller words a
        longer one); without, an answer over :data:`CONTROL_CAP` is a BadResponse. The whole call,
        retries included, ends by ``until`` (default: the operation limit for the body sent).
        ``headers`` go out unsigned (``If-None-Match``), ``amz`` signed (``x-amz-copy-source``);
        ``unsigned`` sends a presigned URL with an unsigned payload, as boto3 does over HTTPS:
        a part's bytes are not hashed again to sign them (the save hashes every byte it sends)."""
        cap = CONTROL_CAP if limit is None else limit + 1
        if until is None:
            until = time.monotonic() + self.pool.limits.deadline(len(body))

        def once() -> Reply:
            signed: dict[str, str] = {}
            if unsigned:
                url = self.presigner.url(
                    key, PRESIGNED_FOR, method=method, query=query, until=until
                )
            else:
                url, signed = self.presigner.signed(
                    method, key, bytes(body), query, amz=amz, until=until
                )
            sent = body if body or method in ("PUT", "POST") else None
            status, answer, data = self.pool.exchange(
                method,
                url,
                {**signed, **(headers or {})},
                sent,
                cap,
                until,
                cut=limit is not None,
            )
            return Reply(status, answer, data)

        before = self.presigner.address
        reply = self._retrying(once, until)
        if reply.redirect:
            reply = self._follow(reply, once, until, before)
        return reply

    def _follow(
        self, reply: Reply, once: Callable[[], Reply], until: float, before: Address
    ) -> Reply:
        """Sign again for the region S3 names, once; Redirected when it names none, names one
        that is not a region or the one signed for, or the second answer redirects too.
        Threads that meet the same redirect all move the signer to the same place."""
        region = reply.region
        moved = before.moved(self.bucket, region) if region else None
        if moved is None or region == before.region:
            raise Redirected(reply, region if moved is not None else "")
        self.presigner.move(moved)
        again = self._retrying(once, until)
        if again.redirect:
            raise Redirected(again, region)
        return again

    def _retrying(self, once: Callable[[], Reply], until: float) -> Reply:
        """botocore's standard retry mode (:data:`gpuci.retry.BOTOCORE_STANDARD`): connection
        errors, 5xx and throttling, ``attempts`` in all; a wait that would end past ``until``
        shrinks to leave a second for one last attempt (``last_try``). Each wait waits on the
        pool's stop flags (:class:`~gpuci.cache._stores.s3.pool.StopWait`): once a Ctrl-C set
        one, no attempt follows (:class:`gpuci.retry.Interrupted`).
        The last transient answer is returned for the caller to word; a connection that never
        answered is :class:`Unreachable`. A first answer that is final imports no tenacity."""

        def attempt() -> Reply:
            try:
                reply = once()
            except OSError:
                self._heard()
                raise
            if _transient(reply):
                self._heard()
                raise _Transient(reply)
            return reply

        policy = replace(BOTOCORE_STANDARD, attempts=self.attempts)
        try:
            return policy.call(
                attempt,
                (OSError, _Transient),
                deadline=max(0.0, until - time.monotonic()),
                sleep=self._sleep,
                cancel=StopWait(self.pool),
            )
        except _Transient as exc:
            return exc.reply
        except OSError as exc:
            raise Unreachable(exc) from None

    def _heard(self) -> None:
        listener = self.on_transient
        if listener is not None:
            listener()

    # ----- answers ------------------------------------------------------------------------------

    def list_pages(self, prefix: str) -> Iterator[list[Listed]]:
        """ListObjectsV2 under ``prefix`` (the full key prefix), page by page, each page parsed
        and handed on before the next is asked for; at most :data:`MAX_LISTING_PAGES` pages,
        :data:`MAX_LISTING_KEYS` keys and :data:`MAX_LISTING_KEY_BYTES` of names, within one
        operation's time limit (BadResponse past a cap). A page that is not 200 is yielded as a
        Reply (no entries) and ends the listing: the caller words the error."""
        token = ""
        seen: set[str] = set()
        keys = names = 0
        until = time.monotonic() + self.pool.limits.operation
        for _ in range(MAX_LISTING_PAGES):
            query = {"list-type": "2", "prefix": prefix, "encoding-type": "url"}
            if token:
                query["continuation-token"] = token
            reply = self.call("GET", "", query=query, limit=MAX_LISTING_PAGE, until=until)
            if reply.status != 200:
                raise ListingRefused(reply)
            if len(reply.body) > MAX_LISTING_PAGE:
                raise BadResponse(f"a listing page is over {MAX_LISTING_PAGE >> 20} MiB")
            entries, token = parse_listing(reply.body)
            keys += len(entries)
            names += sum(len(e.key) for e in entries)
            if keys > MAX_LISTING_KEYS or names > MAX_LISTING_KEY_BYTES:
                raise BadResponse(
                    f"the listing has over {min(keys, MAX_LISTING_KEYS):,} keys "
                    f"({names >> 20} MiB of names; at most {MAX_LISTING_KEYS:,} keys and "
                    f"{MAX_LISTING_KEY_BYTES >> 20} MiB are read)"
                )
            yield entries
            if not token:
                return
            if token in seen:
                raise BadResponse("the listing repeats a continuation token")
            seen.add(token)
        raise BadResponse(f"the listing goes on past {MAX_LISTING_PAGES:,} pages")


class ListingRefused(Exception):
    """A listing page answered with an error: the store words it."""

    def __init__(self, reply: Reply) -> None:
        super().__init__(reply.code)
        self.reply = reply


@dataclass(frozen=True)
class Listed:
    key: str  # the full object key, prefix included
    size: int
    modified: float
    etag: str


_FIELDS = frozenset({"Key", "Size", "LastModified", "ETag"})
_TOP = frozenset({"EncodingType", "IsTruncated", "NextContinuationToken"})


def parse_listing(body: bytes) -> tuple[list[Listed], str]:
    """(entries, next continuation token or "") from a ListObjectsV2 answer.

    Parsed by expat with every DTD and entity declaration refused (no entity expansion, no
    external fetch: a page of 8 MiB stays 8 MiB) and at most :data:`MAX_PAGE_ENTRIES` entries.
    Elements match on their local names: S3 sends its 2006-03-01 namespace, some compatible
    servers send it without the trailing slash or none at all. A ``Contents`` without a key, a
    size (ASCII digits) or a date is refused: read as empty, it would hide keys that are there."""
    page = _ListingPage()
    parse_xml(body, "a listing", page.start, page.end, page.chars)
    encoded = page.top.get("EncodingType", "") == "url"
    entries = [_listed(*fields, encoded=encoded) for fields in page.raw]
    truncated = page.top.get("IsTruncated", "").strip().lower() == "true"
    token = page.top.get("NextContinuationToken", "") if truncated else ""
    if truncated and not token:
        raise BadResponse("a truncated listing names no continuation token")
    return entries, token


def parse_xml(
    body: bytes,
    what: str,
    start: Callable[[str, object], None],
    end: Callable[[str], None],
    chars: Callable[[str], None],
) -> None:
    """Feed a store's XML answer to the three callbacks through expat, the C parser itself (no
    ElementTree to import), with every DTD and entity declaration refused: no entity
    expansion, no external fetch, so a page of 8 MiB stays 8 MiB in memory. Element names come
    as ``namespace}local``. Raises BadResponse naming ``what`` for a declaration or bad XML."""
    from xml.parsers import expat

    parser = expat.ParserCreate(namespace_separator="}")
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    parser.StartDoctypeDeclHandler = _refuse_declarations
    parser.EntityDeclHandler = _refuse_declarations
    parser.UnparsedEntityDeclHandler = _refuse_declarations
    parser.ExternalEntityRefHandler = _refuse_declarations  # type: ignore[assignment]
    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.CharacterDataHandler = chars
    try:
        parser.Parse(body, True)
    except expat.ExpatError as exc:
        raise BadResponse(f"{what} is not valid XML ({exc})") from None


def _refuse_declarations(*_: object) -> None:
    raise BadResponse("a listing declares a DTD or entities")


class _ListingPage:
    """What expat's callbacks collect from one listing page: the top-level fields and, per
    ``Contents``, its key, size, date and ETag as text (read by :func:`_listed` after)."""

    def __init__(self) -> None:
        self.top: dict[str, str] = {}
        self.raw: list[tuple[str, str, str, str]] = []
        self._stack: list[str] = []
        self._item: dict[str, str] | None = None
        self._text: list[str] = []

    def start(self, name: str, _attrs: object) -> None:
        local = name.rpartition("}")[2]
        if not self._stack and local != "ListBucketResult":
            raise BadResponse(f"a listing's root is <{local[:40]}>, not <ListBucketResult>")
        self._stack.append(local)
        self._text.clear()
        if len(self._stack) == 2 and local == "Contents":
            if len(self.raw) >= MAX_PAGE_ENTRIES:
                raise BadResponse(f"a listing page has over {MAX_PAGE_ENTRIES:,} entries")
            self._item = {}

    def end(self, _name: str) -> None:
        local, item = self._stack.pop(), self._item
        value = "".join(self._text)
        self._text.clear()
        depth = len(self._stack)
        if depth == 2 and item is not None and local in _FIELDS:
            item[local] = value
        elif depth == 1 and local == "Contents" and item is not None:
            fields = ("Key", "Size", "LastModified", "ETag")
            key, size, modified, etag = (item.get(field, "") for field in fields)
            self.raw.append((key, size, modified, etag))
            self._item = None
        elif depth == 1 and local in _TOP:
            self.top[local] = value

    def chars(self, data: str) -> None:
        if len(self._stack) in (2, 3):
            self._text.append(data)


def _listed(key: str, size: str, modified: str, etag: str, *, encoded: bool) -> Listed:
    """One listed object, every field read strictly (an entry that cannot be read is refused)."""
    try:
        if not key:
            raise ValueError("no Key")
        return Listed(unquote_plus(key) if encoded else key, count(size), _iso_time(modified), etag)
    except ValueError:
        raise BadResponse(
            f"a listing entry has no readable Key, Size or LastModified ({key[:80]!r})"
        ) from None


def _iso_time(value: str) -> float:
    """``2026-11-30T15:20:00.000Z`` as seconds since the epoch (ASCII only)."""
    if not value.isascii() or len(value) > 40:
        raise ValueError(value[:40])
    stamp = datetime.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=datetime.timezone.utc)
    return stamp.timestamp()


def http_time(value: str) -> float:
    """A HEAD's ``Last-Modified`` as epoch seconds, in the forms botocore reads: an HTTP date
    (``Mon, 30 Nov 2026 15:20:00 GMT``, or ``UTC``) or ISO 8601 (``Z`` or an offset);
    :data:`~gpuci.cache._stores.base.UNKNOWN_MODIFIED` when missing or unreadable (a bad
    number too): never 0.0, which would make a young object look decades old to prune."""
    text = value.strip()
    if not text or not text.isascii() or len(text) > 40:
        return UNKNOWN_MODIFIED
    for zone in ("GMT", "UTC"):
        try:
            stamp = datetime.datetime.strptime(text, f"%a, %d %b %Y %H:%M:%S {zone}")
        except ValueError:
            continue
        return stamp.replace(tzinfo=datetime.timezone.utc).timestamp()
    try:
        return _iso_time(text)
    except ValueError:
        return UNKNOWN_MODIFIED


def _transient(reply: Reply) -> bool:
    return reply.status in _RETRY_STATUS or (reply.status >= 400 and reply.code in _RETRY_CODES)
