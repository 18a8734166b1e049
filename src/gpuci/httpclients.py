"""Every httpx client gpu-ci opens, made here, under one policy declared once.

Why one factory: six clients each chose their own timeouts, redirect rule, TLS and user agent,
and one of them raised httpcore's read size for every client in the process. The policy, for
every client :func:`new_client` makes (downloads, the forge REST clients, RunPod, webhooks,
health and model probes):

- **Timeouts**: always set (no client waits forever); the caller names the seconds, which
  bound connect, each read, each write and the wait for a pooled connection.
- **Redirects: never followed by httpx.** httpx keeps every header but ``Authorization`` when
  a redirect changes origin, so an ``X-Api-Key`` or ``PRIVATE-TOKEN`` would go wherever a
  server points. A caller that needs redirects follows them itself, dropping the user's
  credentials once a hop leaves the first origin (:func:`gpuci.fetch._client.open_response`).
- **Proxies from the environment** (httpx's ``trust_env``): ``HTTP_PROXY``, ``HTTPS_PROXY``,
  ``ALL_PROXY`` and ``NO_PROXY``, upper or lower case, as curl and pip read them.
- **CA certificates**: certifi's bundle, or ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` when set (the
  OpenSSL convention httpx honours), loaded once per process per setting (a bundle takes tens
  of milliseconds to parse). ``AWS_CA_BUNDLE`` is the S3 store's
  (:mod:`gpuci.cache._stores.s3.network`), not a download's: a corporate AWS endpoint's CA says
  nothing about a model hub.
- **No cookies kept**: no client needs a session, and httpx's jar ignores ports, so a cookie
  from one server would reach another on the same host.
- **Connection limits**: ``connections`` pooled (and kept alive) per client, default 8.
- **User agent**: ``gpu-ci/<version>``, plus the caller's part (``gpu-ci/0.1.0 retry-fetch``),
  so a server's log tells which tool and which part of it asked.
- **Read size per client, never per process**: httpcore reads 64 KiB per ``recv`` (its class
  constant ``HTTP11Connection.READ_NUM_BYTES``). A download client asks for ``read_bytes``
  (1 MiB) instead, through a network stream of its own (:class:`_SizedStream`) on its own
  transports only; the class constant, and so every other httpx client in a library user's
  process, is left alone. A ``recv`` returns only what already arrived, so the bound on
  memory stays ours (``read_bytes`` a read), never the server's.
- **A deadline per request, on such a client** (:func:`deadline`): httpx's timeouts bound each
  read, so a server that trickles its headers (or sends ``103 Early Hints`` forever) holds a
  request open without end. While a :class:`Deadline` is set, every connect, read and write
  of that client's streams waits at most until it, then raises ``ReadTimeout`` naming it.
- **Abort** (:func:`abort`): shuts every connection of such a client and refuses new ones, so
  threads blocked in a read (a Ctrl-C's other downloads) end at once instead of finishing;
  its event (:func:`stopped`) ends their retries' waits too. The same abort, narrowed to a
  :class:`Scope` (the requests sent within it, :func:`deadline`'s ``scope``): one download's
  connections, shut when that download fails for good while others share the client.

- **Origins** (:func:`origin`): scheme, host and port with defaults filled in, the one rule
  for where a user's credentials (or a forge's token) may be sent: a redirect or a ``next``
  link to another origin never receives them.

Retries are not the client's: each caller declares a :class:`gpuci.retry.RetryPolicy`.
"""

from __future__ import annotations

import contextvars
import http.cookiejar
import socket
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpcore
import httpx

from gpuci import __version__, settings

if TYPE_CHECKING:
    import ssl
    from collections.abc import Mapping

__all__ = [
    "USER_AGENT",
    "Aborted",
    "Deadline",
    "Scope",
    "abort",
    "deadline",
    "exact_stream",
    "new_client",
    "origin",
    "stopped",
    "tls_context",
    "user_agent",
]

#: What every request says it is; :func:`user_agent` adds the part of gpu-ci that asks.
USER_AGENT = f"gpu-ci/{__version__}"
_DEFAULT_PORTS = {"http": 80, "https": 443}
_CA_SETTINGS = (settings.SSL_CERT_FILE, settings.SSL_CERT_DIR)

_tls_lock = threading.Lock()
_tls_contexts: dict[tuple[str, ...], ssl.SSLContext] = {}


def user_agent(part: str = "") -> str:
    """``gpu-ci/<version>`` followed by ``part`` (``"retry-fetch"``) when given."""
    return f"{USER_AGENT} {part}" if part else USER_AGENT


def origin(url: str | httpx.URL) -> tuple[str, str, int | None]:
    """What credentials may be sent to: two URLs of equal origins may share them.

    Args:
        url: a URL as text (read as httpx reads what it sends) or an ``httpx.URL``.

    Returns:
        The scheme and host, lowercased (an IPv6 host without its brackets, an international
        name IDNA-encoded as sent), and the port, the scheme's default filled in (``http://h``
        and ``HTTP://H:80`` are one origin). Never raises on a URL httpx accepted.

    Raises:
        httpx.InvalidURL: text httpx cannot read (check it first:
            :func:`gpuci.fetch._urls.check_url`).
    """
    parsed = url if isinstance(url, httpx.URL) else httpx.URL(url)
    scheme = parsed.scheme.lower()
    # raw_host: the host as sent (IDNA-encoded, ASCII); ``host`` decodes it and raises on a
    # label such as ``xn--`` that a server may choose (a Link: rel=next, a Location)
    host = parsed.raw_host.decode("ascii").lower()
    return scheme, host, parsed.port or _DEFAULT_PORTS.get(scheme)


class _Client(httpx.Client):
    """httpx's client, answering a redirect whose ``Location`` it cannot resolve as any other.

    httpx builds the request a redirect would send (``next_request``) even when it does not
    follow it, and reading that URL's ``host`` decodes IDNA: ``Location: http://xn--/``, a
    server's choice, raised ``idna.IDNAError`` out of ``send``. No client here follows
    redirects, so the answer is returned as it came and its caller, which reads ``Location``
    itself, finds another origin (:func:`origin`); ``next_request`` is then the request sent.
    """

    def _build_redirect_request(
        self, request: httpx.Request, response: httpx.Response
    ) -> httpx.Request:
        try:
            return super()._build_redirect_request(request, response)
        except UnicodeError:  # idna.IDNAError among them
            return request


class _NoCookies(http.cookiejar.DefaultCookiePolicy):
    """Store nothing and send nothing: no client needs a session, and a jar leaks one."""

    def set_ok(self, cookie: http.cookiejar.Cookie, request: object) -> bool:
        return False

    def return_ok(self, cookie: http.cookiejar.Cookie, request: object) -> bool:
        return False


def new_client(
    *,
    timeout: float | httpx.Timeout,
    agent: str = "",
    base_url: str = "",
    headers: Mapping[str, str] | None = None,
    connections: int = 8,
    read_bytes: int = 1 << 16,
    transport: httpx.BaseTransport | None = None,
) -> httpx.Client:
    """An httpx client under the module's policy (no redirects, env proxies and CAs, no jar).

    Args:
        timeout: seconds for each phase (connect, read, write, pool), or an ``httpx.Timeout``.
        agent: the part of gpu-ci that asks, appended to the user agent (``"retry-fetch"``).
        base_url: prefix of relative request URLs (a REST API's root).
        headers: sent with every request (the user agent is set here; these win otherwise).
        connections: connections pooled and kept alive at most.
        read_bytes: bytes asked of the socket per read (httpcore's own 64 KiB by default;
            more for clients that move large bodies). Every client made here reads through
            these sized streams, which is also what puts it under :func:`deadline`.
        transport: a transport to send through instead (tests' fakes); then no env proxies.

    Returns:
        The client; close it (or use it as a context manager) when done.
    """
    client = _Client(
        base_url=base_url,
        headers={"User-Agent": user_agent(agent), **(headers or {})},
        timeout=timeout if isinstance(timeout, httpx.Timeout) else httpx.Timeout(timeout),
        follow_redirects=False,
        cookies=http.cookiejar.CookieJar(policy=_NoCookies()),
        limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
        verify=tls_context() if transport is None else True,
        trust_env=True,
        transport=transport,
    )
    if transport is None:
        _size_reads(client, read_bytes)
    return client


def tls_context() -> ssl.SSLContext | bool:
    """The CA-verifying TLS context for the current ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``
    (certifi's bundle when neither is set), built once per process per setting. An httpx
    before 0.28 (no public ``create_ssl_context``) gets ``True``: it then builds the same
    context itself, per client. Shared safely: httpcore only sets ALPN on it per connection,
    to ``http/1.1`` for every client here (none is made with HTTP/2)."""
    make = getattr(httpx, "create_ssl_context", None)
    if make is None:  # pragma: no cover - httpx 0.27
        return True
    key = tuple(setting.value() for setting in _CA_SETTINGS)
    with _tls_lock:
        context = _tls_contexts.get(key)
        if context is None:
            context = _tls_contexts[key] = make(trust_env=True)
        return context


def exact_stream(stream: Any) -> Any:
    """The connection under ``stream`` that reads exactly what it is asked (no more), for a
    reader that counts a body's last bytes itself; ``stream`` itself when it is not ours.
    Its reads are the sized stream's but for their size: under the deadline, and an
    :func:`abort` (the client's, or the scope's holding the connection) ends them and makes
    what they returned :class:`Aborted`, never body bytes."""
    return _ExactStream(stream) if isinstance(stream, _SizedStream) else stream


# ----- a deadline for whole requests, and abort ------------------------------------------------
class Aborted(BaseException):
    """A connection of an aborted client was used. A BaseException, as Ctrl-C's own is: every
    retry loop and ``except Exception`` on the way lets it through, so the thread ends."""


@dataclass(frozen=True)
class Deadline:
    """An absolute end (``time.monotonic()``) and the seconds it was given, to name it."""

    at: float
    seconds: float

    @classmethod
    def after(cls, seconds: float, started: float | None = None) -> Deadline:
        """``seconds`` after ``started`` (a ``time.monotonic()``; now when None)."""
        return cls((time.monotonic() if started is None else started) + seconds, seconds)

    def passed(self) -> str:
        return f"the deadline of {self.seconds:g}s passed"


_deadline: contextvars.ContextVar[Deadline | None] = contextvars.ContextVar(
    "gpuci_http_deadline", default=None
)
_scope: contextvars.ContextVar[Scope | None] = contextvars.ContextVar(
    "gpuci_http_scope", default=None
)


@contextmanager
def deadline(limit: Deadline | None, scope: Scope | None = None) -> Iterator[None]:
    """Within the block (this thread), every connect, read and write of a client made with
    ``read_bytes`` ends by ``limit``: headers, interim 1xx answers and bodies included; with
    ``scope``, the connections it uses are that scope's, which :meth:`Scope.abort` shuts."""
    token = _deadline.set(limit)
    owner = _scope.set(scope)
    try:
        yield
    finally:
        _scope.reset(owner)
        _deadline.reset(token)


# What a body read whole no longer has: it is decoded, and its length is what was read.
_BODY_HEADERS = frozenset({"content-encoding", "content-length", "transfer-encoding"})


def read_bounded(
    client: httpx.Client, request: httpx.Request, limit: Deadline, max_bytes: int
) -> httpx.Response:
    """Send ``request`` and read its answer whole, by ``limit``: the connect, the headers,
    interim 1xx answers and the body, however they trickle (httpx's timeouts bound each read
    only), and at most ``max_bytes`` of body, whatever length the server claims.

    Returns:
        The answer, its body in memory (decoded), without the headers that described the body
        on the wire.

    Raises:
        untrusted_json.Unusable: the body passed ``max_bytes`` (the caller names it).
        httpx.TimeoutException: ``limit`` passed.
        httpx.TransportError: the connection failed.
    """
    from gpuci import untrusted_json

    with deadline(limit):
        response = client.send(request, stream=True)
        try:
            body = untrusted_json.read_chunks(response.iter_bytes(), max_bytes, limit.at)
        except TimeoutError as exc:
            raise httpx.ReadTimeout(f"{exc}: {limit.passed()}", request=request) from None
        finally:
            response.close()
    # as bytes: a value a server sent in Latin-1 (``café``) decodes to text that a new
    # response's headers refuse to encode as ASCII (UnicodeEncodeError: an internal error)
    plain = [
        (k, v) for k, v in response.headers.raw if k.decode("latin-1").lower() not in _BODY_HEADERS
    ]
    return httpx.Response(response.status_code, headers=plain, content=body, request=request)


def _time_left(timeout: float | None, expired: type[Exception]) -> float | None:
    """``timeout`` cut to the deadline's time left; ``expired`` (naming it) once it passed."""
    limit = _deadline.get()
    if limit is None:
        return timeout
    left = limit.at - time.monotonic()
    if left <= 0:
        raise expired(limit.passed())
    return left if timeout is None else min(timeout, left)


def _bounded(call: Any, timeout: float | None, expired: type[Exception]) -> Any:
    """``call(timeout)`` under the deadline: a timeout it caused says so."""
    try:
        return call(_time_left(timeout, expired))
    except httpcore.TimeoutException:
        _time_left(None, expired)  # raises, naming the deadline, when that was the cause
        raise


def abort(client: httpx.Client) -> None:
    """Shut every connection of ``client`` (a thread blocked reading one wakes at once) and
    make each later connect, read or write raise :class:`Aborted`. Only for a client made
    with ``read_bytes``; others are left alone."""
    for backend in _backends(client):
        if isinstance(backend, _SizedBackend):
            backend.gate.abort()


def stopped(client: httpx.Client) -> threading.Event | None:
    """The event :func:`abort` sets for ``client``: a retry's wait waits on it
    (:meth:`gpuci.retry.RetryPolicy.retrying`'s ``cancel``), so an abort ends the waits of
    every download on that client too, not only its reads. None for a client not made with
    ``read_bytes`` (nothing aborts it)."""
    for backend in _backends(client):
        if isinstance(backend, _SizedBackend):
            return backend.gate.aborted
    return None


class _Gate:
    """A client's live connections and whether it was aborted; shared by its streams."""

    def __init__(self) -> None:
        self.aborted = threading.Event()
        self._lock = threading.Lock()
        self._streams: weakref.WeakSet[Any] = weakref.WeakSet()

    def add(self, raw: Any) -> None:
        with self._lock:
            self._streams.add(raw)
        if self.aborted.is_set():
            _shut(raw)
            raise Aborted("the downloads were stopped")

    def check(self) -> None:
        if self.aborted.is_set():
            raise Aborted("the downloads were stopped")

    def abort(self) -> None:
        self.aborted.set()
        with self._lock:
            streams = list(self._streams)
        for raw in streams:
            _shut(raw)


class Scope(_Gate):
    """The abort of :func:`abort`, for the requests sent within it (:func:`deadline`): one
    download's segments, which end together when one fails for good, while other downloads
    go on over the same client.

    A connection is the scope's from the moment a request within it writes to it or reads
    from it, until a request of another scope does: the connections a download's requests
    hold (a reader on another thread included, as the first answer's is) are shut by
    :meth:`abort`; pooled ones last used by it too (the pool then drops them unused)."""

    def claim(self, stream: _SizedStream) -> None:
        """``stream`` serves this scope's request now; :class:`Aborted` once aborted."""
        stream.scope = self
        self.add(stream)

    def abort(self) -> None:
        self.aborted.set()
        with self._lock:
            streams = [s for s in self._streams if s.scope is self]
        for stream in streams:
            _shut(stream)


def _shut(raw: Any) -> None:
    """Shut the socket under ``raw`` both ways: a ``recv`` blocked on it returns now (a
    ``close`` from another thread would not wake it).

    The descriptor's own shutdown, never ``SSLSocket.shutdown``: that one drops the TLS
    object, and a later read then returns the ciphertext still queued in the socket as if it
    were the server's bytes."""
    with suppress(Exception):
        sock = raw.get_extra_info("socket")
        if isinstance(sock, socket.socket):
            socket.socket.shutdown(sock, socket.SHUT_RDWR)


# ----- the read size, per client ---------------------------------------------------------------
def _size_reads(client: httpx.Client, size: int) -> None:
    """Give this client's connection pools (direct and each proxy's) a network backend whose
    streams read ``size`` bytes at a time. httpx offers no public hook for a pool's backend,
    so this reaches into this client's own transports; a layout it does not recognise keeps
    httpcore's default read size, which is slower, never wrong."""
    gate = _Gate()
    for pool in _pools(client):
        backend = getattr(pool, "_network_backend", None)
        if backend is not None and not isinstance(backend, _SizedBackend):
            pool._network_backend = _SizedBackend(backend, size, gate)


def _pools(client: httpx.Client) -> list[Any]:
    """The connection pools of this client's transports (direct and each proxy's)."""
    transports = [getattr(client, "_transport", None)]
    transports += list(getattr(client, "_mounts", {}).values())
    return [pool for t in transports if (pool := getattr(t, "_pool", None)) is not None]


def _backends(client: httpx.Client) -> list[Any]:
    return [getattr(pool, "_network_backend", None) for pool in _pools(client)]


class _SizedBackend:
    """httpcore's network backend, whose streams read at least ``size`` bytes per call, and
    connect (as they read and write) under the deadline and the client's abort."""

    def __init__(self, inner: Any, size: int, gate: _Gate) -> None:
        self.inner = inner
        self.size = size
        self.gate = gate

    def connect_tcp(
        self, host: str, port: int, timeout: float | None = None, **kwargs: Any
    ) -> _SizedStream:
        return self._connect(self.inner.connect_tcp, (host, port), timeout, kwargs)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, **kwargs: Any
    ) -> _SizedStream:
        return self._connect(self.inner.connect_unix_socket, (path,), timeout, kwargs)

    def _connect(
        self, connect: Any, where: tuple[Any, ...], timeout: float | None, kwargs: dict[str, Any]
    ) -> _SizedStream:
        self.gate.check()
        if (scope := _scope.get()) is not None:
            scope.check()  # an aborted download opens no connection
        expired = httpcore.ConnectTimeout
        raw = _bounded(lambda t: connect(*where, timeout=t, **kwargs), timeout, expired)
        self.gate.add(raw)
        return _SizedStream(raw, self.size, self.gate)

    def sleep(self, seconds: float) -> None:
        self.inner.sleep(seconds)


class _SizedStream:
    """A connection whose reads by httpcore (64 KiB asked) ask the socket for ``size``.

    A read returns what already arrived, up to that size; h11 buffers whatever it is given,
    so a larger read changes how often Python runs, not what is parsed. A reader that must
    not read past a point (``gpuci.fetch._client.Body``, which counts a body's last bytes)
    reads through :meth:`read_exactly` (:func:`exact_stream`), which asks for exactly what it
    is told, under the same deadline and abort.
    """

    def __init__(self, raw: Any, size: int, gate: _Gate | None = None) -> None:
        self.raw = raw
        self.size = size
        self.gate = gate or _Gate()
        self.scope: Scope | None = None  # whose request used it last (:class:`Scope`)

    def _check(self) -> Scope | None:
        """Raise :class:`Aborted` once the client or this request's scope was aborted; the
        scope, which now holds this connection."""
        self.gate.check()
        scope = _scope.get()
        if scope is not None:
            scope.claim(self)
        return scope

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._read(max(max_bytes, self.size), timeout, self._check())

    def read_exactly(self, size: int, timeout: float | None = None) -> bytes:
        """At most ``size`` bytes, under the deadline. The scope that holds the connection is
        checked whichever thread reads (the first answer's body is read on a worker with no
        scope of its own); such a body's connection is never pooled again (h11 never sees
        its end), so no other request inherits that scope."""
        scope = self._check() or self.scope
        if scope is not None:
            scope.check()
        return self._read(size, timeout, scope)

    def _read(self, size: int, timeout: float | None, scope: Scope | None) -> bytes:
        data: bytes = _bounded(lambda t: self.raw.read(size, t), timeout, httpcore.ReadTimeout)
        self.gate.check()  # woken by an abort: what it returned is not a server's answer
        if scope is not None:
            scope.check()
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._check()
        _bounded(lambda t: self.raw.write(buffer, t), timeout, httpcore.WriteTimeout)

    def close(self) -> None:
        self.raw.close()

    def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> _SizedStream:
        self.gate.check()
        start = self.raw.start_tls
        expired = httpcore.ConnectTimeout
        raw = _bounded(lambda t: start(ssl_context, server_hostname, t), timeout, expired)
        self.gate.add(raw)
        return _SizedStream(raw, self.size, self.gate)

    def get_extra_info(self, info: str) -> Any:
        return self.raw.get_extra_info(info)


class _ExactStream:
    """:func:`exact_stream`'s reader: a sized stream's reads at exactly the size asked."""

    def __init__(self, sized: _SizedStream) -> None:
        self.sized = sized

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self.sized.read_exactly(max_bytes, timeout)
