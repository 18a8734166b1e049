"""The HTTP side of every download: credentials stay on their origin, bodies stay as sent.

httpx follows redirects well but keeps every header except ``Authorization`` when the origin
changes, so an ``X-Api-Key`` or ``PRIVATE-TOKEN`` went to whatever host a redirect named, and
its cookie jar (which ignores ports) carried a cookie from one server to another. Here the
client keeps no cookies at all and :func:`open_response` follows redirects itself: the user's
headers (and a ``user:pass@`` in the URL) are sent only while every hop stays on the first
URL's origin (scheme, host, port); once a redirect leaves it they are never sent again, not
even when a later hop comes back. We ask for ``Accept-Encoding: identity`` and refuse any
other encoding (:func:`check_identity`) instead of decompressing, so a gzip bomb never grows
on disk; :func:`read_capped` bounds small bodies held in memory.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit, urlunsplit

import httpx

from gpuci import httpclients
from gpuci.errors import InputError
from gpuci.fetch._policy import Refused
from gpuci.fetch._urls import check_url, shown_url
from gpuci.redact import excerpt

if TYPE_CHECKING:
    from gpuci.fetch._job import BodyWatch
    from gpuci.fetch._policy import FetchPolicy

MAX_REDIRECTS = 10
REDIRECTS = frozenset({301, 302, 303, 307, 308})
IDENTITY = {"Accept-Encoding": "identity"}
# Response extension: the user's credentials the last hop received (URL userinfo as a Basic
# header included), so later ranges of the same file send exactly those, or none.
CREDENTIALS_KEPT = "gpuci_credentials_kept"
_CONTENT_RANGE = re.compile(r"^\s*bytes\s+(\d+)-(\d+)/(\d+|\*)\s*$")


# Bytes asked of the connection per read: httpcore's 64 KiB reads each pass through h11 and
# httpx in Python, and on loopback that per-read work, not the hash, was most of retry-fetch's
# CPU (figures: docs/benchmarks.md, "1 MiB reads"). A read returns only what already
# arrived, so the bound stays ours (1 MiB a read), never the server's.
_READ_BYTES = 1 << 20


def new_client(policy: FetchPolicy, connections: int = 8) -> httpx.Client:
    """An httpx client for downloads (:func:`gpuci.httpclients.new_client`'s policy: no cookie
    jar, redirects by hand), pooling ``connections`` and reading 1 MiB at a time."""
    return httpclients.new_client(
        timeout=policy.timeout,
        agent="retry-fetch",
        connections=connections,
        read_bytes=_READ_BYTES,
    )


def split_userinfo(url: str) -> tuple[str, dict[str, str]]:
    """``http://user:pass@host/x`` -> (``http://host/x``, an ``Authorization: Basic`` header).

    So URL credentials are user headers like any other and obey the same origin rule.
    """
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, {}
    netloc = parts.netloc.rpartition("@")[2]
    pair = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
    basic = base64.b64encode(pair.encode("utf-8")).decode("ascii")
    return urlunsplit(parts._replace(netloc=netloc)), {"Authorization": f"Basic {basic}"}


@contextmanager
def open_response(
    client: httpx.Client,
    method: str,
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    credentials: Mapping[str, str] | None = None,
    timeout: httpx.Timeout | float | None = None,
    deadline: httpclients.Deadline | None = None,
    scope: httpclients.Scope | None = None,
) -> Iterator[httpx.Response]:
    """Send ``method url`` and follow redirects; yields the final response, streaming.

    ``headers`` are ours (Range, Accept-Encoding) and go to every hop; ``credentials`` are the
    user's headers and go only to hops on the first URL's origin, until a hop leaves it.
    ``timeout`` bounds each connect and read; ``deadline`` the whole exchange, read in this
    thread: every hop, its headers and interim 1xx answers, and the body read in the block
    (a server trickling its headers a byte at a time passes every read's timeout).
    ``scope``: the download whose connections these are, shut together when it fails.
    """
    with httpclients.deadline(deadline, scope):
        yield from _follow(client, method, url, headers, credentials, timeout)


def _follow(
    client: httpx.Client,
    method: str,
    url: str,
    headers: Mapping[str, str] | None,
    credentials: Mapping[str, str] | None,
    timeout: httpx.Timeout | float | None,
) -> Iterator[httpx.Response]:
    """:func:`open_response`'s hops: redirects followed by hand, credentials kept home."""
    current, from_url = split_userinfo(url)
    secret = {**from_url, **(credentials or {})}
    home = httpclients.origin(current)
    for _hop in range(MAX_REDIRECTS + 1):
        send = httpx.Headers(secret)
        for name, value in (headers or {}).items():
            send[name] = value  # ours win, whatever case the user wrote theirs in
        request = client.build_request(method, current, headers=send, timeout=timeout)
        resp = client.send(request, stream=True, follow_redirects=False)
        location = resp.headers.get("Location") if resp.status_code in REDIRECTS else None
        if location is None:
            resp.extensions[CREDENTIALS_KEPT] = dict(secret)  # so later ranges may reuse them
            try:
                yield resp
            finally:
                resp.close()
            return
        resp.close()
        current = _redirect_target(resp.url, location)
        if httpclients.origin(current) != home:
            secret = {}  # another origin chose where we go next: it never sees credentials
    raise Refused(
        f"more than {MAX_REDIRECTS} redirects starting at {shown_url(url)}",
        hint="check the URL; a redirect loop cannot be fixed by retrying",
    )


def _redirect_target(base: httpx.URL, location: str) -> str:
    try:
        joined = str(base.join(location))
    except (httpx.InvalidURL, ValueError):
        joined = location
    try:
        check_url(joined, "Location")
    except InputError as exc:
        raise Refused(
            f"refused a redirect, {exc.message}",
            hint="the server sent a Location we will not follow; use another URL or mirror",
        ) from None
    return split_userinfo(joined)[0]  # credentials a server wrote into a Location: dropped


def check_identity(resp: httpx.Response) -> None:
    """Refuse a body encoded although we asked for ``identity``: we never decompress."""
    coding = resp.headers.get("Content-Encoding", "").strip().lower()
    if coding not in ("", "identity"):
        raise Refused(
            f"the server sent Content-Encoding: {excerpt(coding, 40)} although only identity was "
            "accepted; refused the body without decompressing it",
            hint="serve the file without Content-Encoding, or use a mirror that does",
        )


def read_capped(
    resp: httpx.Response, limit: int, what: str, watch: BodyWatch | None = None
) -> bytes:
    """The whole body, or :class:`Refused` as soon as it passes ``limit`` bytes; with
    ``watch``, checked after each chunk (the slowest rate accepted: ``TooSlow``)."""
    chunks: list[bytes] = []
    size = 0
    for chunk in resp.iter_raw() if watch is None else watch.counted(resp.iter_raw()):
        size += len(chunk)
        if size > limit:
            raise Refused(
                f"{what} is larger than {limit} bytes; stopped reading",
                hint="point at the right file; this one is not what was expected",
            )
        chunks.append(chunk)
        if watch is not None:
            watch.check()
    return b"".join(chunks)


class Body:
    """A response's raw bytes, counted; for one plain body, read from its connection directly.

    Why: httpx hands a body over through h11, which copies every byte three times in Python
    (into its receive buffer, a slice of it, then httpcore's ``bytes()``): measured on loopback,
    1 GiB through ``iter_raw`` cost about three times the client CPU of the same read from the
    connection (scripts/bench_fetch.py; docs/benchmarks.md, "Where a verified GiB's CPU
    went"), and that reader was
    the one-connection path's slowest stage after the hash. So when the framing is nothing but a
    count (HTTP/1.1, ``Content-Length``, no ``Transfer-Encoding``), :meth:`chunks` takes h11's
    first event (every body byte it already buffered with the headers), then reads the rest
    from httpcore's ``network_stream`` response extension (its public handle on the
    connection, TLS and proxies included), at most ``_READ_BYTES`` a read and never past the
    announced length, with the request's read timeout. h11 never sees the end of that body,
    so httpcore closes the connection instead of reusing it: one new connection per file.
    Anything else (chunked, no length, HTTP/2, no stream) goes through ``iter_raw`` as before.
    A connection that ends early raises :class:`httpx.RemoteProtocolError`, as h11 does, and
    read failures become httpx's ``ReadTimeout`` / ``ReadError``, which the retry policy knows.
    """

    def __init__(self, resp: httpx.Response) -> None:
        self.resp = resp
        self.received = 0  # body bytes this response delivered

    def _direct(self) -> tuple[Any, int, float | None] | None:
        """(stream, length, read timeout) when the body may be read straight, else None."""
        resp = self.resp
        if resp.http_version != "HTTP/1.1" or "Transfer-Encoding" in resp.headers:
            return None
        bodiless = resp.status_code < 200 or resp.status_code in (204, 304)
        if bodiless or resp.request.method == "HEAD":
            return None  # no body whatever Content-Length says (RFC 9112 6.3): h11 knows
        length = content_length(resp)
        stream = httpclients.exact_stream(resp.extensions.get("network_stream"))
        if length is None or length < 0 or not callable(getattr(stream, "read", None)):
            return None
        timeout = resp.request.extensions.get("timeout", {}).get("read")
        return stream, length, timeout

    def chunks(self) -> Iterator[bytes]:
        direct = self._direct()
        raw = self.resp.iter_raw()
        if direct is None:
            for chunk in raw:
                self.received += len(chunk)
                yield chunk
            return
        stream, length, timeout = direct
        for chunk in raw:  # h11's first event holds every body byte it has buffered
            self.received += len(chunk)
            yield chunk
            break
        if self.received >= length:
            for chunk in raw:  # nothing is left: lets h11 see the end, the connection is reused
                self.received += len(chunk)
                yield chunk
            return
        while self.received < length:
            chunk = _read(stream, min(_READ_BYTES, length - self.received), timeout)
            if not chunk:
                raise httpx.RemoteProtocolError(
                    "peer closed connection without sending complete message body "
                    f"(received {self.received} bytes, expected {length})"
                )
            self.received += len(chunk)
            yield chunk


def _read(stream: Any, size: int, timeout: float | None) -> bytes:
    """One read from httpcore's stream, its errors as httpx's (what the retry policy knows)."""
    import httpcore

    try:
        data: bytes = stream.read(size, timeout)
    except httpcore.TimeoutException as exc:
        raise httpx.ReadTimeout(str(exc) or "timed out reading the body") from exc
    except httpcore.NetworkError as exc:
        raise httpx.ReadError(str(exc) or "the connection failed reading the body") from exc
    return data


def answered_span(
    resp: httpx.Response, start: int, end: int | None, total: int | None
) -> tuple[int, int, int | None] | None:
    """A 206's ``Content-Range`` if it answers a request for bytes ``start`` to ``end``
    (exclusive; None: to the end) of a file of ``total`` bytes (None: not known yet): it starts
    exactly at ``start``, ends inside the request and the file, names that total, and a
    ``Content-Length`` says the same length. None otherwise: nothing of the body may be
    written, since its bounds are not the ones asked for."""
    span = parse_content_range(resp.headers.get("Content-Range"))
    if span is None:
        return None
    first, last, size = span
    limit = min((x for x in (end, size) if x is not None), default=last + 1)
    length = resp.headers.get("Content-Length")
    if first != start or not first <= last < limit or (total is not None and size != total):
        return None
    if length is not None and length.strip() != str(last - first + 1):
        return None
    return span


def content_length(resp: httpx.Response) -> int | None:
    """The ``Content-Length`` announced; None when there is none or it is not a number."""
    try:
        return int(resp.headers["Content-Length"])
    except (KeyError, ValueError):
        return None


def parse_content_range(value: str | None) -> tuple[int, int, int | None] | None:
    """``bytes a-b/total`` -> (a, b, total or None for ``*``); None when malformed."""
    match = _CONTENT_RANGE.match(value or "")
    if not match:
        return None
    total = None if match.group(3) == "*" else int(match.group(3))
    return int(match.group(1)), int(match.group(2)), total
