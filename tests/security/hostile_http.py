"""A hostile HTTP/1.1 server on 127.0.0.1 for retry-fetch's security tests.

Where ``tests/fetch/fetch_server.py`` misbehaves the way networks do (drops, stalls, 503s),
this one misbehaves the way an attacker would: a body that never ends, a Content-Length larger
than any disk, a gzip bomb sent although ``identity`` was asked for, a redirect to another
origin that records every header it receives, a cookie set for later. Each instance binds
127.0.0.1 on an ephemeral port, so two instances are two origins (same host, other port), and
``url(path, host="localhost")`` names a third one. Nothing here trusts or needs the network.

Routes are plain functions of the request handler, added with :meth:`HostileServer.route`;
the ``serve_*`` factories below build the common ones.
"""

from __future__ import annotations

import gzip
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from loopback_http import LoopbackHTTPServer

Route = Callable[["Handler"], None]
_CHUNK = 1 << 16


@dataclass
class Seen:
    """One request as the server received it."""

    method: str
    path: str
    headers: dict[str, str] = field(default_factory=dict)
    body_bytes: int = 0  # what this server wrote back (body only)

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers.items() if k.lower() == name.lower()), None)


class HostileServer(LoopbackHTTPServer):
    """``with HostileServer() as evil:``; ``evil.route("/x", serve_endless())``."""

    def __init__(self) -> None:
        self.routes: dict[str, Route] = {}
        self.seen: list[Seen] = []
        super().__init__(_handler_for(self), _QuietServer)

    def route(self, path: str, handler: Route) -> HostileServer:
        self.routes[path] = handler
        return self

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def requests(self, path: str | None = None) -> list[Seen]:
        with self.lock:
            return [s for s in self.seen if path in (None, s.path)]

    def sent(self, path: str | None = None) -> int:
        return sum(s.body_bytes for s in self.requests(path))


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client hanging up on an endless body is the defence working, not an error


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_ref: HostileServer
    record: Seen

    def log_message(self, format: str, *args: object) -> None:  # quiet tests
        pass

    def do_GET(self) -> None:
        self._dispatch()

    def do_HEAD(self) -> None:
        self._dispatch()

    def _dispatch(self) -> None:
        srv = self.server_ref
        self.record = Seen(self.command, self.path.split("?")[0], dict(self.headers.items()))
        with srv.lock:
            srv.seen.append(self.record)
        route = srv.routes.get(self.record.path)
        if route is None:
            self.reply(404, b"")
            return
        try:
            route(self)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client hung up: what a defence looks like

    # ----- helpers for routes -------------------------------------------------------------
    def reply(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.write(body)

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        for pos in range(0, len(view), _CHUNK):
            chunk = view[pos : pos + _CHUNK]
            self.wfile.write(chunk)
            with self.server_ref.lock:
                self.record.body_bytes += len(chunk)


def _handler_for(server: HostileServer) -> type[Handler]:
    return type("BoundHandler", (Handler,), {"server_ref": server})


# ----- routes ---------------------------------------------------------------------------------
def serve_bytes(data: bytes, etag: str | None = '"v1"') -> Route:
    """An honest file, with a strong ETag (so a partial of it looks resumable)."""

    def route(h: Handler) -> None:
        headers = {"Accept-Ranges": "bytes", **({"ETag": etag} if etag else {})}
        start = _range_start(h.headers.get("Range"))
        if start is not None and h.headers.get("If-Range") in (None, etag) and start < len(data):
            headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
            h.reply(206, data[start:], headers)
        else:
            h.reply(200, data, headers)

    return route


def serve_endless(announce: int | None = None) -> Route:
    """A body that never ends (until the client hangs up or the server stops).

    ``announce`` sends that Content-Length (a lie, or a size far over any cap); without it
    the body is close-delimited, the way an attacker avoids every length check.
    """

    def route(h: Handler) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "application/octet-stream")
        if announce is not None:
            h.send_header("Content-Length", str(announce))
        else:
            h.send_header("Connection", "close")
        h.end_headers()
        h.close_connection = True
        if h.command == "HEAD":
            return
        zeros = bytes(_CHUNK)
        while not h.server_ref.stop.is_set():
            h.write(zeros)

    return route


# A trickle's own end, whatever the client does: far past any deadline a test sets, so a client
# without one (the fault a test proves, run against the code before its fix) ends too.
TRICKLE_FOR = 30.0


def trickle(h: Handler, send: bytes, first: bytes = b"", every: float = 0.2) -> None:
    """Write ``first``, then ``send`` every ``every`` seconds (each write well inside a read's
    timeout) until the client hangs up, the server stops, or :data:`TRICKLE_FOR` passed."""
    h.close_connection = True
    end = time.monotonic() + TRICKLE_FOR
    try:
        h.wfile.write(first)
        h.wfile.flush()
        while not h.server_ref.stop.wait(every) and time.monotonic() < end:
            h.wfile.write(send)
            h.wfile.flush()
    except OSError:
        pass  # the client hung up: the deadline worked


def trickled_headers(every: float = 0.2) -> Route:
    """A status line, then one header a byte at a time."""
    return lambda h: trickle(h, b"a", b"HTTP/1.1 200 OK\r\nX-Slow: ", every)


def endless_early_hints(every: float = 0.2) -> Route:
    """``103 Early Hints`` answers without end: no final answer ever comes."""
    return lambda h: trickle(h, b"HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n", every=every)


def trickled_body(every: float = 0.2) -> Route:
    """A 200 announcing a megabyte, then its body a byte at a time."""
    return lambda h: trickle(h, b"a", b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n", every)


def gzip_bomb(expanded: int = 100 * 1024 * 1024) -> bytes:
    """``expanded`` zero bytes, gzip-compressed: about 1000x smaller on the wire."""
    return gzip.compress(bytes(expanded), compresslevel=9, mtime=0)


def serve_gzip(payload: bytes) -> Route:
    """``Content-Encoding: gzip`` whatever ``Accept-Encoding`` said."""

    def route(h: Handler) -> None:
        h.reply(200, payload, {"Content-Encoding": "gzip", "ETag": '"bomb"'})

    return route


def serve_redirect(location: str, status: int = 302, cookie: str | None = None) -> Route:
    """A redirect (to another origin, typically), optionally planting a cookie first."""

    def route(h: Handler) -> None:
        headers = {"Location": location}
        if cookie:
            headers["Set-Cookie"] = cookie
        h.reply(status, b"", headers)

    return route


def _range_start(value: str | None) -> int | None:
    if not value or not value.startswith("bytes=") or not value.endswith("-"):
        return None
    digits = value[len("bytes=") : -1]
    return int(digits) if digits.isdigit() else None
