"""The fake RunPod's wire: HTTP/1.1 with keep-alive, as RunPod's front end (Cloudflare) speaks.

Every answer carries its length (``Content-Length``; none on a 204, which RFC 9110 forbids it),
each request's body is read whole before it is answered (a chunked body, which gpu-ci never
sends, or an unreadable length is refused with 400 and the connection closed, where the real
front end would read it: a client change that sends one shows here), and a connection stays
open for the next request until it has been idle ``idle_close_s``: then the server closes it,
as a front end closes idle connections. So every pods test reuses its client's pooled
connections, and meets the server's idle close when its client pauses.

What a test can script here (:class:`Wire`), beyond the API's own answers:

- ``drop_reused``: the next request of a route that comes on a kept-alive connection is never
  read: the server closes that connection under it, as an idle close crossing the client's
  reuse does. The fake records nothing (the API never saw it).
- ``garble``: a route's next answer, made as usual (a create still creates, an action acts),
  reaches the client with an empty body (``empty``: its status and ``Content-Length: 0``), cut
  short (``cut``: its whole length announced, half the body sent, then the connection closed),
  not at all (``drop``: the connection closed after the server acted, nothing sent), or as a
  front end's ``502`` (the backend acted; the proxy lost its answer and says Bad Gateway).

A failure of the fake itself answers 500 and is kept in ``errors``: the ``fake`` fixture fails
the test that met it, rather than let a client's retry hide it.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
import traceback
from contextlib import suppress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from loopback_http import JsonAPIHandler

if TYPE_CHECKING:
    from fake_runpod import FakeRunPod

#: Seconds one request's own reads (its headers, its body) may wait for the client.
REQUEST_READ_S = 30.0
#: How an answer the server made can reach the client (module docstring).
GARBLES = frozenset({"empty", "cut", "drop", "502"})


@dataclass
class Wire:
    """The connections' side of the fake: its knobs and what it saw."""

    idle_close_s: float = 1.0
    drop_reused: list[str] = field(default_factory=list)  # "METHOD path" patterns, once each
    garbled: dict[str, list[str]] = field(default_factory=dict)  # route -> GARBLES
    connections: int = 0  # accepted
    reused: int = 0  # requests answered on a connection that had answered before
    dropped: list[str] = field(default_factory=list)  # request lines closed unread
    idle_closed: int = 0
    errors: list[str] = field(default_factory=list)  # the fake's own failures
    lock: threading.Lock = field(default_factory=threading.Lock)
    open: set[socket.socket] = field(default_factory=set)

    def garble(self, route: str, *how: str) -> None:
        """The next answers of ``route`` ("GET /v2/pods"), each one of :data:`GARBLES`."""
        assert set(how) <= GARBLES, how
        self.garbled.setdefault(route, []).extend(how)

    def _take(self, queue: list[str], route: str) -> bool:
        with self.lock:
            for i, pattern in enumerate(queue):
                if re.fullmatch(pattern, route):
                    del queue[i]
                    return True
        return False

    def _garbling(self, route: str) -> str:
        with self.lock:
            for pattern, queue in self.garbled.items():
                if queue and re.fullmatch(pattern, route):
                    return queue.pop(0)
        return ""

    def close_all(self) -> None:
        """Shut every open connection, as a server going down does (a kept-alive one would
        otherwise go on answering after the fake stopped)."""
        with self.lock:
            socks = list(self.open)
        for sock in socks:
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def _route(request_line: bytes) -> str:
    """``METHOD /path`` of a request line (the query left out), as the faults name routes."""
    parts = request_line.split(b" ")
    if len(parts) < 2:
        return ""
    return f"{parts[0].decode('latin-1')} {parts[1].decode('latin-1').split('?')[0]}"


def handler_for(fake: FakeRunPod) -> type[JsonAPIHandler]:
    """The request handler of ``fake``'s server."""
    wire = fake.wire

    class Handler(JsonAPIHandler):
        protocol_version = "HTTP/1.1"  # keep-alive unless a side says close
        timeout = REQUEST_READ_S

        def setup(self) -> None:
            super().setup()
            # An answer's head and body go out in two writes: with Nagle's algorithm on, the
            # body waits for the client's delayed ACK of the head (~40 ms on Linux) on every
            # kept-alive answer, as no real front end makes a client wait.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.answered = 0
            with wire.lock:
                wire.connections += 1
                wire.open.add(self.connection)

        def finish(self) -> None:
            with wire.lock:
                wire.open.discard(self.connection)
            super().finish()

        def handle_one_request(self) -> None:
            if self.answered and not self._next_request():
                self.close_connection = True
                return
            super().handle_one_request()

        def _next_request(self) -> bool:
            """Wait for the next request on a kept-alive connection: False (close it) when
            it stays idle ``idle_close_s`` or comes as one scripted to be dropped."""
            self.connection.settimeout(wire.idle_close_s)
            try:
                head = self.rfile.peek(1)  # what arrived, unread
            except (TimeoutError, OSError):
                with wire.lock:
                    wire.idle_closed += 1
                return False
            finally:
                with suppress(OSError):
                    self.connection.settimeout(REQUEST_READ_S)
            route = _route(head.split(b"\r\n", 1)[0])
            if head and wire._take(wire.drop_reused, route):
                with wire.lock:
                    wire.dropped.append(route)
                return False
            return bool(head)

        def _serve(self) -> None:
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                length = -1
            if length < 0 or "Transfer-Encoding" in self.headers:
                # a body the fake cannot delimit: refused, and the connection with it
                self.close_connection = True
                self._answer(400, {}, fake.problem(400, "unreadable request length"), "")
                return
            raw = self.rfile.read(length) if length else b""  # the whole body, first
            if self.command == "DELETE":
                fake.delete_started.set()
                time.sleep(fake.delete_delay)  # the pod lives until the delay is over
            try:
                status, headers, body = fake.handle(
                    self.command, self.path, raw, self.headers.get("Authorization", "")
                )
            except Exception:  # the fake's own bug: said, never hidden by a retry
                with wire.lock:
                    wire.errors.append(traceback.format_exc())
                status, headers, body = 500, {}, fake.problem(500, "the fake failed")
            if fake.create_delay and self.command == "POST" and self.path == "/v2/pods":
                time.sleep(fake.create_delay)  # the pod exists; its id isn't known yet
            with wire.lock:
                wire.reused += self.answered > 0
            self.answered += 1
            route = f"{self.command} {self.path.split('?')[0]}"
            self._answer(status, headers, body, wire._garbling(route))

        def _answer(self, status: int, headers: dict[str, str], body: Any, how: str) -> None:
            if how == "drop":  # acted, then the connection reset: no byte of the answer sent
                self.close_connection = True
                return
            if how == "502":  # the front end's, the backend's own answer lost behind it
                status, headers, body = 502, {}, fake.problem(502, "upstream connection lost")
            data = b"" if body is None or how == "empty" else json.dumps(body).encode()
            self.send_response(status)
            if data:
                ctype = "application/problem+json" if status >= 400 else "application/json"
                self.send_header("Content-Type", ctype)
            if status != 204:
                self.send_header("Content-Length", str(len(data)))
            for k, v in headers.items():
                self.send_header(k, v)
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            if how == "cut":
                data = data[: len(data) // 2]
                self.close_connection = True
            self.wfile.write(data)

        do_GET = do_POST = do_PATCH = do_DELETE = _serve

    return Handler
