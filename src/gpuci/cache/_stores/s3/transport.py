"""The S3 store's one HTTP client: the standard library's ``http.client``, bounded.

Both planes use it: the control plane's small exchanges (refs, manifests, listings, PUT,
DELETE, HEAD; :func:`exchange`) and the data plane's ranged GETs (:func:`open_body`). What
``http.client`` leaves open is closed here:

- time: its timeout bounds each ``recv`` only, so a server trickling a byte a second would keep
  a request alive for ever. A :class:`Watchdog` shuts a request's socket down at its deadline
  (headers within the timeout, then the body at the minimum rate, earned by the bytes that
  came: never by a length the server claims).
- memory: bodies are read in pieces up to a cap, never into a buffer sized by Content-Length;
  header lines and count are capped by ``http.client`` (64 KiB, 100), trailers here.
- interim answers: every ``1xx`` but 101 before the final answer is skipped (RFC 9110 15.2;
  ``http.client`` skips only 100).
- the network: an ``http://`` proxy (absolute-form targets; ``CONNECT`` for https) and the CA
  bundle, as :mod:`gpuci.cache._stores.s3.network` finds them.

A ranged body is read straight from the socket once ``http.client`` has parsed the headers and
its buffer is drained: ``recv_into(MSG_WAITALL)`` (one system call per 4 MiB) or ``splice`` into
a pipe (:mod:`gpuci.cache._stores.splicing`) on plain ``http://``.
"""

from __future__ import annotations

import heapq
import http.client
import itertools
import socket
import struct
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gpuci.cache._stores.s3.network import Limits, Route
from gpuci.units import cap_text

if TYPE_CHECKING:
    import ssl

    from gpuci.cache._stores.splicing import Pipe

# Answers to PUT, DELETE, HEAD and other control requests are small: a bigger one is hostile.
CONTROL_CAP = 1 << 20
_MAX_INTERIM = 16
# A splice from a socket wakes once this many body bytes are queued (SO_RCVLOWAT), not for
# every segment the server sends.
SPLICE_WAKE = 512 << 10
_MAX_TRAILERS = 64


def count(text: str, limit: int = 1 << 62) -> int:
    """A byte count or offset as a server writes it: ASCII digits only, at most ``limit``
    (``int()`` would take ``5_0``, `` 5`` and ``²``-like digits of other scripts). ValueError
    otherwise."""
    text = text.strip()
    if not (0 < len(text) <= 19 and text.isascii() and text.isdigit()):
        raise ValueError(f"{text[:40]!r} is not a byte count")
    value = int(text)
    if value > limit:
        raise ValueError(f"{text[:40]!r} is over {limit}")
    return value


def content_range(text: str) -> tuple[int, int, int | None]:
    """``bytes first-last/total`` (total ``*`` when unknown: None), strictly; ValueError else."""
    unit, _, spec = text.strip().partition(" ")
    span, slash, total = spec.partition("/")
    first, dash, last = span.partition("-")
    if unit != "bytes" or not slash or not dash:
        raise ValueError(f"Content-Range {text.strip()[:60]!r} is not 'bytes first-last/total'")
    try:
        a, b = count(first), count(last)
        size = None if total.strip() == "*" else count(total)
    except ValueError:
        raise ValueError(f"Content-Range {text.strip()[:60]!r} is not byte counts") from None
    if b < a or (size is not None and b >= size):
        raise ValueError(f"Content-Range {text.strip()[:60]!r} is not a range within the object")
    return a, b, size


class DeadlineExceeded(OSError):
    """The watchdog ended the request: no answer, or not fast enough, within its deadline."""


class BadResponse(ValueError):
    """An answer no HTTP server may send (not retried); the message says what was wrong."""


class TooLarge(BadResponse):
    """An answer over its cap (not retried: the next one will be as large)."""


# ----- the watchdog ---------------------------------------------------------------------------


class _Guard:
    __slots__ = ("conn", "deadline", "fired", "live", "owner")

    def __init__(
        self, conn: http.client.HTTPConnection, deadline: float, owner: object = None
    ) -> None:
        self.conn, self.deadline = conn, deadline
        self.fired = False
        self.live = True
        self.owner = owner  # the pool whose request it bounds (:meth:`Watchdog.fire`)


class Watchdog:
    """One thread that shuts down the socket of every request past its deadline."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, _Guard]] = []
        self._order = itertools.count()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def guard(
        self, conn: http.client.HTTPConnection, seconds: float, owner: object = None
    ) -> _Guard:
        guard = _Guard(conn, 0.0, owner)
        self._push(guard, seconds)
        return guard

    def fire(self, owner: object) -> None:
        """End every live request of ``owner`` now, as if its deadline had come (a Ctrl-C's
        stop: :meth:`gpuci.cache._stores.s3.pool.Pool.stop_flag`)."""
        with self._cond:
            guards = {id(g): g for _, _, g in self._heap if g.live and g.owner is owner}
            for guard in guards.values():
                guard.fired = True
        for guard in guards.values():
            _shut(guard)

    def extend(self, guard: _Guard, seconds: float) -> None:
        """Move a live guard's deadline to ``seconds`` from now (the body's own budget)."""
        self._push(guard, seconds)

    def move_to(self, guard: _Guard, when: float) -> None:
        """Move a live guard's deadline to ``when`` (``time.monotonic()`` time)."""
        self._push(guard, when - time.monotonic())

    def _push(self, guard: _Guard, seconds: float) -> None:
        with self._cond:
            guard.deadline = time.monotonic() + seconds
            heapq.heappush(self._heap, (guard.deadline, next(self._order), guard))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="s3-deadline", daemon=True)
                self._thread.start()
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    # Drop entries of finished requests and stale deadlines (a guard extended).
                    while self._heap and (
                        not self._heap[0][2].live or self._heap[0][0] != self._heap[0][2].deadline
                    ):
                        heapq.heappop(self._heap)
                    if not self._heap:
                        self._cond.wait(60)
                        continue
                    wait = self._heap[0][0] - time.monotonic()
                    if wait <= 0:
                        break
                    self._cond.wait(wait)
                _, _, guard = heapq.heappop(self._heap)
                guard.fired = True
            _shut(guard)


def _shut(guard: _Guard) -> None:
    """Shut the guarded request's socket both ways: a blocked ``recv`` (or ``connect``) wakes
    with an end of file (the base method: TLS's own would drop the TLS object)."""
    sock = getattr(guard.conn, "last_sock", None)
    if sock is not None:
        try:
            socket.socket.shutdown(sock, socket.SHUT_RDWR)
        except OSError:
            pass


WATCHDOG = Watchdog()


def release(guard: _Guard) -> None:
    guard.live = False


# ----- connections --------------------------------------------------------------------------


# http.client's own line and header-count limits (private names, absent from typeshed): the
# interim answers and trailers we read ourselves get the same bounds as the headers it reads.
_MAXLINE: int = http.client._MAXLINE  # type: ignore[attr-defined]  # private, not in typeshed
_MAXHEADERS: int = http.client._MAXHEADERS  # type: ignore[attr-defined]  # private, not in typeshed


def _skip_header_block(fp, what: str, most: int = _MAXHEADERS) -> None:
    """Read past header lines (an interim answer's, a chunked body's trailers) to the blank
    line that ends them: at most ``most`` of them, each at most ``_MAXLINE`` bytes."""
    for _ in range(most + 1):
        line = fp.readline(_MAXLINE + 1)
        if len(line) > _MAXLINE:
            raise http.client.LineTooLong(f"{what} line")
        if line in (b"\r\n", b"\n", b""):
            return
    raise http.client.HTTPException(f"more than {most} {what} lines")


class BadHeader(http.client.HTTPException):
    """A header no HTTP server may send (a Content-Length that is not a byte count)."""


class _Response(http.client.HTTPResponse):
    """http.client's response, skipping every interim answer, capping trailers and refusing a
    Content-Length that is not ASCII digits (``int()`` would take ``5_0``; http.client reads
    ``abc`` as "no length" and the body up to the close)."""

    def begin(self) -> None:
        super().begin()
        raw = self.headers.get("content-length")
        if raw is not None:
            try:
                count(raw)
            except ValueError:
                raise BadHeader(
                    f"the server sent Content-Length {raw.strip()[:40]!r}, not a byte count"
                ) from None

    def _read_status(self) -> tuple[str, int, str]:
        for _ in range(_MAX_INTERIM):
            # private in http.client, absent from typeshed: the one hook for interim answers
            version, status, reason = super()._read_status()  # type: ignore[misc]
            if not 100 <= status < 200 or status == 101:
                return version, status, reason
            _skip_header_block(self.fp, "interim header")
        raise http.client.HTTPException(f"more than {_MAX_INTERIM} interim (1xx) answers")

    def _read_and_discard_trailer(self) -> None:
        _skip_header_block(self.fp, "trailer", _MAX_TRAILERS)


def _tune(sock: socket.socket, timeout: float) -> None:
    """Blocking with kernel receive/send timeouts: ``MSG_WAITALL`` and ``splice`` wait for the
    whole piece, never for ever (the watchdog bounds the whole request)."""
    sock.settimeout(None)
    whole = int(timeout)
    packed = struct.pack("ll", whole, int((timeout - whole) * 1e6))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, packed)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, packed)
    if sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _watch_from_the_start(conn: Connection | TLSConnection) -> None:
    """Make ``conn.last_sock`` the raw socket the moment it exists, so the watchdog can shut it
    while ``connect()`` is still running: a proxy that trickles its answer to CONNECT a header
    line at a time (each ``recv`` inside the timeout) is bounded by the deadline too."""

    def opened(*args: Any, **kwargs: Any) -> socket.socket:
        sock = socket.create_connection(*args, **kwargs)
        conn.last_sock = sock
        return sock

    vars(conn)["_create_connection"] = opened  # http.client's seam (set per instance, untyped)


class Connection(http.client.HTTPConnection):
    response_class = _Response

    def __init__(self, host: str, port: int | None, timeout: float, plain: bool = True) -> None:
        super().__init__(host, port, timeout=timeout)
        self.io_timeout = timeout  # self.timeout is typed float | None; this one is set
        self.plain = plain  # MSG_WAITALL and splice apply (no TLS layer)
        self.absolute = ""  # "http://host:port" when requests go to a proxy in absolute form
        self.last_sock: socket.socket | None = None  # kept after http.client lets go of it
        _watch_from_the_start(self)

    def connect(self) -> None:
        super().connect()
        _tune(self.sock, self.io_timeout)
        self.last_sock = self.sock


class TLSConnection(http.client.HTTPSConnection):
    response_class = _Response
    absolute = ""

    def __init__(
        self, host: str, port: int | None, timeout: float, context: ssl.SSLContext
    ) -> None:
        super().__init__(host, port, timeout=timeout, context=context)
        self.io_timeout = timeout  # self.timeout is typed float | None; this one is set
        self.plain = False
        self.last_sock: socket.socket | None = None
        _watch_from_the_start(self)

    def connect(self) -> None:
        super().connect()
        _tune(self.sock, self.io_timeout)
        self.last_sock = self.sock


def tls_context(cafile: str) -> ssl.SSLContext:
    """A verifying client context trusting ``cafile`` (made once per store: loading a bundle
    costs milliseconds)."""
    import ssl

    return ssl.create_default_context(cafile=cafile or None)


def connect(
    scheme: str,
    host: str,
    port: int,
    route: Route,
    limits: Limits,
    context: ssl.SSLContext | None,
) -> Connection | TLSConnection:
    """A connection to ``host:port`` (not yet opened), through the route's proxy if any."""
    if scheme == "https":
        assert context is not None
        if route.proxied:
            tls = TLSConnection(route.proxy_host, route.proxy_port, limits.timeout, context)
            tls.set_tunnel(host, port, dict(route.proxy_headers))
            return tls
        return TLSConnection(host, port, limits.timeout, context)
    if route.proxied:
        conn = Connection(route.proxy_host, route.proxy_port, limits.timeout)
        conn.absolute = f"http://{host}:{port}"
        return conn
    return Connection(host, port, limits.timeout)


def send(
    conn: Connection | TLSConnection,
    method: str,
    target: str,
    headers: Mapping[str, str],
    body: bytes | memoryview | None,
    host_header: str,
    route: Route,
) -> http.client.HTTPResponse:
    """Send one request and read the answer's status and headers (under the caller's guard)."""
    sent = {"Host": host_header, **headers}  # exactly as signed (http.client drops :80)
    if conn.absolute:
        target = conn.absolute + target
        sent.update(route.proxy_headers)
    conn.request(method, target, body, sent)
    return conn.getresponse()


def read_capped(resp: http.client.HTTPResponse, cap: int, cut: bool = False) -> bytes:
    """The body, at most ``cap`` bytes, read in pieces (a length a server claims allocates
    nothing); beyond: TooLarge, or with ``cut`` the first ``cap`` bytes (the caller words the
    size; the rest is never read). IncompleteRead when the server closes before its length."""
    out = bytearray()
    while True:
        piece = resp.read1(min(1 << 20, cap + 1 - len(out)))
        if not piece:
            break
        out += piece
        if len(out) > cap:
            if cut:
                return bytes(out[:cap])
            raise TooLarge(f"an answer over {cap_text(cap)}")
    if resp.length:  # closed before Content-Length
        raise http.client.IncompleteRead(bytes(out[:0]), resp.length)
    return bytes(out)


# ----- ranged bodies --------------------------------------------------------------------------


class Body:
    """A Content-Length body: the bytes ``http.client`` buffered with the headers first, then
    straight from the socket (``recv_into(MSG_WAITALL)`` or ``splice``)."""

    def __init__(
        self, conn: Connection | TLSConnection, resp: http.client.HTTPResponse, length: int
    ) -> None:
        self.conn, self.resp = conn, resp
        self.left = length
        self._direct = False  # http.client's buffer is drained: read from the socket
        self._lowat = 1  # the socket's SO_RCVLOWAT while this body is spliced (1: the default)
        self._goal = 0  # see _lowat_goal
        self._recheck = 0  # bytes to splice before the goal is looked at again

    def _buffered(self, want: int) -> bytes:
        """Up to ``want`` bytes from http.client's buffer (one recv when it is empty); once this
        takes the last of it, later reads go to the socket directly."""
        fp = self.resp.fp
        assert fp is not None
        held = fp.peek(1)
        if not held:
            raise ConnectionResetError("connection closed mid-body")
        n = min(len(held), want)
        data = fp.read(n)
        if n == len(held):
            self._direct = True
        return data

    def readinto(self, buffer: memoryview) -> int:
        want = min(len(buffer), self.left)
        if want <= 0:
            return 0
        if not self._direct:
            data = self._buffered(want)
            n = len(data)
            buffer[:n] = data
        else:
            sock = self.conn.last_sock
            assert sock is not None
            flags = socket.MSG_WAITALL if self.conn.plain else 0
            n = sock.recv_into(buffer, want, flags)
            if n == 0:
                raise ConnectionResetError("connection closed mid-body")
        self.left -= n
        return n

    def splice_into(self, pipe: Pipe, limit: int) -> int:
        """Up to ``limit`` body bytes into ``pipe`` without copying them to user space."""
        import os

        want = min(limit, self.left, pipe.room())
        if want <= 0:
            return 0
        if not self._direct:
            data = self._buffered(want)
            n = os.write(pipe.w, data)
            if n < len(data):
                raise OSError("the pipe took part of the buffered body")
        else:
            sock = self.conn.last_sock
            assert sock is not None
            self._wake_at(sock, self._lowat_goal(sock))
            n = os.splice(sock.fileno(), pipe.w, want)
            if n == 0:
                raise ConnectionResetError("connection closed mid-body")
        pipe.filled(n)
        self.left -= n
        self._recheck -= n
        return n

    def _lowat_goal(self, sock: socket.socket) -> int:
        """How many queued bytes should wake a splice: a quarter of the socket's receive buffer
        (so setting it never grows the buffer or clamps the window), at most SPLICE_WAKE.
        The kernel grows the buffer as the body flows: looked at again every ``_recheck``."""
        if self._goal < SPLICE_WAKE and self._recheck <= 0:
            rcvbuf = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
            self._goal = max(1, min(SPLICE_WAKE, rcvbuf // 4))
            self._recheck = SPLICE_WAKE
        return self._goal

    def _wake_at(self, sock: socket.socket, lowat: int) -> None:
        """Set SO_RCVLOWAT: a splice from a TCP socket returns whatever is queued, so without it
        a worker wakes for every 64 KiB the server sends; with it, once ``lowat`` bytes wait.
        Never above the bytes still to come (the wake-up would never happen)."""
        lowat = max(1, min(lowat, self.left))
        if lowat != self._lowat:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, lowat)
            self._lowat = lowat

    def finish(self) -> None:
        """The body is read whole: let http.client send the next request on this connection."""
        if self._lowat != 1 and self.conn.last_sock is not None:
            self._wake_at(self.conn.last_sock, 1)
        self.resp.length = 0
        self.resp.close()
