"""A real HTTP/1.1 server on 127.0.0.1 that misbehaves on command, for retry-fetch tests.

Each path serves a file (bytes in memory or a file on disk, via ``sendfile``) and holds a queue
of :class:`Fault` entries: every GET takes the next one, so a test scripts "drop after 1000 bytes,
then answer 503, then behave". The server counts the body bytes it really sent and logs each
request's Range headers, which is what the tests assert on. Also used by scripts/bench_fetch.py.
"""

from __future__ import annotations

import email.utils
import gzip
import hashlib
import json
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from gpuci.fetch._partial import url_key
from loopback_http import LoopbackHTTPServer

# The tests' file: a few hundred KB, several network chunks, fast everywhere. Here, not in
# conftest.py: ``from conftest import`` picks whichever folder's conftest pytest loaded last.
DATA = os.urandom(300_000)
SHA = hashlib.sha256(DATA).hexdigest()
SIZE = len(DATA)
BIG = os.urandom(2_000_000)  # for paced runs: long enough that the segments overlap in time
BIG_SHA = hashlib.sha256(BIG).hexdigest()


@dataclass
class Fault:
    """What to do wrong on one request; the defaults mean "behave"."""

    status: int | None = None  # answer this status with an empty body instead of the file
    retry_after: str | None = None  # Retry-After header value for that status
    drop_after: int | None = None  # close the connection after this many body bytes
    stall: float | None = None  # pause this long (after drop_after/stall_after bytes)
    stall_after: int = 0
    ignore_range: bool = False  # answer 200 with the whole file even to a Range request
    content_range_total: int | None = None  # a 206 that claims this total size
    shift: int = 0  # a 206 for other bytes than asked (start + shift), honestly labelled
    other_file: bytes | None = None  # answer this range from another file (its own total)
    new_data: bytes | None = None  # the file changes to these bytes from now on
    ignore_if_range: bool = False  # honour Range even when If-Range no longer matches
    etag: str | None = None  # change the file's ETag from now on (the file "changed")
    last_modified: str | None = None  # change its Last-Modified from now on
    corrupt: bool = False  # flip the first byte sent (a wrong checksum)
    redirect_to: str | None = None  # 302 to this path
    gzip: bool = False  # Content-Encoding: gzip the whole body
    bad_content_range: bool = False  # a 206 whose Content-Range starts elsewhere
    close_delimited: bool = False  # no Content-Length: the body ends when the connection does
    chunked: bool = False  # chunked framing beside Content-Length, ending cleanly at drop_after


@dataclass
class Entry:
    data: bytes | None = None
    file: Path | None = None
    etag: str | None = '"v1"'
    last_modified: str | None = None
    accept_ranges: bool = True
    faults: deque[Fault] = field(default_factory=deque)

    @property
    def size(self) -> int:
        return len(self.data) if self.data is not None else os.path.getsize(self.file or "")


@dataclass
class Request:
    method: str
    path: str
    range: str | None
    if_range: str | None
    status: int = 0
    body_bytes: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    arrived: float = field(default_factory=time.monotonic)  # for ordering, never for speed


class FaultyServer(LoopbackHTTPServer):
    """Start with ``with FaultyServer() as srv:``; ``srv.url("/f")`` names a path.

    ``rate`` (bytes per second) paces every connection on its own and ``latency`` (seconds)
    delays each answer's first byte: a remote-like link, where one connection gets a share
    of the bandwidth and speed comes from how many are busy.
    """

    def __init__(self, rate: float | None = None, latency: float = 0.0) -> None:
        self.entries: dict[str, Entry] = {}
        self.requests: list[Request] = []
        self.rate = rate
        self.latency = latency
        super().__init__(_handler_for(self))
        # Writes under way: their bytes may already be the client's before they are counted
        # (a download returns while its server's thread still waits to add the last count).
        self.writing = 0
        self.quiet = threading.Condition(self.lock)

    # ----- setup ---------------------------------------------------------------------------
    def add(self, path: str, data: bytes | None = None, file: Path | None = None, **kw) -> Entry:
        entry = Entry(data=data, file=file, **kw)
        self.entries[path] = entry
        return entry

    def faults(self, path: str, *faults: Fault) -> None:
        self.entries[path].faults.extend(faults)

    def url(self, path: str) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}{path}"

    # ----- what happened ---------------------------------------------------------------------
    def served(self, path: str | None = None) -> int:
        """Body bytes actually written to sockets (for ``path``, or in all), once no write is
        under way: a client that returned may hold bytes whose write has not been counted yet
        (on a busy machine its thread runs late). A client that hung up ends every write to it,
        so the wait is bounded; 60 s is for a write to a client still connected and idle."""
        with self.quiet:
            self.quiet.wait_for(lambda: not self.writing, timeout=60)
            return sum(r.body_bytes for r in self.requests if path in (None, r.path))

    def counted(self, req: Request, write: Callable[[], int]) -> int:
        """``write()`` (it returns the bytes it wrote), counted to ``req`` before
        :meth:`served` can read the count again."""
        with self.lock:
            self.writing += 1
        wrote = 0
        try:
            wrote = write()
        finally:
            with self.lock:
                req.body_bytes += wrote
                self.writing -= 1
                self.quiet.notify_all()
        return wrote

    def gets(self, path: str | None = None) -> list[Request]:
        with self.lock:
            return [r for r in self.requests if r.method == "GET" and path in (None, r.path)]


def _parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """``bytes=a-`` / ``bytes=a-b`` -> (start, end inclusive); None when absent or unsupported."""
    if not header or not header.startswith("bytes=") or "," in header:
        return None
    first, _, last = header[6:].partition("-")
    if not first:
        return None  # suffix ranges are not needed here
    start = int(first)
    end = int(last) if last else size - 1
    return start, min(end, size - 1)


def _handler_for(server: FaultyServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:  # quiet tests
            pass

        def handle(self) -> None:
            try:
                super().handle()
            except (ConnectionResetError, BrokenPipeError):
                pass  # a client hung up between requests (a segment done): not news

        def do_HEAD(self) -> None:
            self._serve(head=True)

        def do_GET(self) -> None:
            self._serve(head=False)

        def _serve(self, head: bool) -> None:
            path = self.path.split("?")[0]
            req = Request(
                self.command,
                path,
                self.headers.get("Range"),
                self.headers.get("If-Range"),
                headers=dict(self.headers.items()),
            )
            with server.lock:
                server.requests.append(req)
            self._answer(req, path, head)

        def _answer(self, req: Request, path: str, head: bool) -> None:
            if server.latency:
                server.stop.wait(server.latency)
            entry = server.entries.get(path)
            if entry is None:
                return self._empty(req, 404)
            fault = Fault()
            if not head and entry.faults:
                with server.lock:
                    fault = entry.faults.popleft()
            if fault.etag is not None:
                entry.etag = fault.etag
            if fault.last_modified is not None:
                entry.last_modified = fault.last_modified
            if fault.new_data is not None:
                entry.data = fault.new_data
            if fault.other_file is not None:
                entry = Entry(data=fault.other_file, etag=entry.etag)
            if fault.redirect_to:
                return self._empty(req, 302, {"Location": fault.redirect_to})
            if fault.status:
                extra = {"Retry-After": fault.retry_after} if fault.retry_after else {}
                return self._empty(req, fault.status, extra)
            self._body(req, entry, fault, head)

        def _empty(self, req: Request, status: int, headers: dict[str, str] | None = None) -> None:
            req.status = status
            self.send_response(status)
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def _body(self, req: Request, entry: Entry, fault: Fault, head: bool) -> None:
            size = entry.size
            wanted = None if (fault.ignore_range or not entry.accept_ranges) else req.range
            rng = _parse_range(wanted, size)
            stale = req.if_range is not None and req.if_range not in (
                entry.etag,
                entry.last_modified,
            )
            if rng and stale and not fault.ignore_if_range:
                rng = None  # the validator is stale: RFC 9110 says send the whole file
            if rng and rng[0] >= size:
                req.status = 416
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            start, end = rng if rng else (0, size - 1)
            if rng and fault.shift:
                start, end = start + fault.shift, min(end + fault.shift, size - 1)
            status = 206 if rng else 200
            payload: bytes | None = None
            if fault.gzip:
                payload = gzip.compress(self._read(entry, 0, size), mtime=0)
                start, end, status = 0, len(payload) - 1, 200
            req.status = status
            self.send_response(status)
            self.send_header("Content-Type", "application/octet-stream")
            if fault.close_delimited:
                self.send_header("Connection", "close")
            else:
                self.send_header("Content-Length", str(end - start + 1))
            if fault.chunked:
                self.send_header("Transfer-Encoding", "chunked")
            if entry.accept_ranges:
                self.send_header("Accept-Ranges", "bytes")
            if entry.etag:
                self.send_header("ETag", entry.etag)
            if entry.last_modified:
                self.send_header("Last-Modified", entry.last_modified)
            if fault.gzip:
                self.send_header("Content-Encoding", "gzip")
            if status == 206:
                shown = start + 1 if fault.bad_content_range else start
                claimed = fault.content_range_total or size
                self.send_header("Content-Range", f"bytes {shown}-{end}/{claimed}")
            self.end_headers()
            if head:
                return
            limit = end - start + 1
            if fault.drop_after is not None:
                limit = min(limit, fault.drop_after)
            if fault.chunked:  # one chunk, then the last: a clean end, whatever the length said
                data = self._read(entry, start, limit)
                framed = b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data)
                self._write(req, framed, counts=len(data))
                return
            self._send(req, entry, payload, start, limit, fault)
            if fault.close_delimited or (fault.drop_after is not None and limit < end - start + 1):
                try:
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass  # the client hung up first (a segment ended there)
                self.close_connection = True

        def _write(self, req: Request, data: bytes | memoryview, counts: int | None = None) -> int:
            """Send ``data``, counted to ``req`` as ``counts`` bytes (its length by default)."""

            def write() -> int:
                self.wfile.write(data)
                return len(data) if counts is None else counts

            return server.counted(req, write)

        @staticmethod
        def _read(entry: Entry, start: int, count: int) -> bytes:
            if entry.data is not None:
                return entry.data[start : start + count]
            with open(entry.file or "", "rb") as handle:
                handle.seek(start)
                return handle.read(count)

        def _send(
            self,
            req: Request,
            entry: Entry,
            payload: bytes | None,
            start: int,
            count: int,
            fault: Fault,
        ) -> None:
            if fault.stall is not None:
                first = min(count, fault.stall_after)
                self._send_span(req, entry, payload, start, first, fault.corrupt)
                self.wfile.flush()
                server.stop.wait(fault.stall)
                start, count = start + first, count - first
                fault = Fault()
            self._send_span(req, entry, payload, start, count, fault.corrupt)

        def _send_span(
            self,
            req: Request,
            entry: Entry,
            payload: bytes | None,
            start: int,
            count: int,
            corrupt: bool,
        ) -> None:
            if count <= 0:
                return
            try:
                if server.rate:
                    self._send_paced(req, entry, payload, start, count, corrupt)
                    return
                if payload is None and entry.file is not None and not corrupt:
                    self.wfile.flush()
                    with open(entry.file, "rb") as handle:
                        sent = 0
                        while sent < count:
                            out, src = self.connection.fileno(), handle.fileno()
                            send = partial(os.sendfile, out, src, start + sent, count - sent)
                            n = server.counted(req, send)
                            if n == 0:
                                break
                            sent += n
                    return
                data = payload if payload is not None else self._read(entry, start, count)
                data = data[start : start + count] if payload is not None else data
                if corrupt:
                    data = bytes([data[0] ^ 0xFF]) + data[1:]
                view = memoryview(data)
                for pos in range(0, len(view), 1 << 16):
                    chunk = view[pos : pos + (1 << 16)]
                    self._write(req, chunk)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

        def _send_paced(
            self,
            req: Request,
            entry: Entry,
            payload: bytes | None,
            start: int,
            count: int,
            corrupt: bool,
        ) -> None:
            """``server.rate`` bytes per second on this connection, in 64 KiB steps."""
            rate = server.rate or 1.0
            step = max(4096, min(1 << 16, int(rate / 100)))  # ~10 ms of the link per write
            began = time.monotonic()
            sent = 0
            while sent < count and not server.stop.is_set():
                n = min(step, count - sent)
                if payload is not None:
                    data = payload[start + sent : start + sent + n]
                else:
                    data = self._read(entry, start + sent, n)
                if corrupt and sent == 0:
                    data = bytes([data[0] ^ 0xFF]) + data[1:]
                sent += self._write(req, data, counts=n)
                ahead = began + sent / rate - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)

    return Handler


def leftovers(dest: Path) -> list[str]:
    """What lies in ``dest``'s folder: the file, and anything a download left beside it."""
    return sorted(p.name for p in dest.parent.iterdir())


def plant_partial(
    dest: Path, data: bytes, url: str, validator: str = '"v1"', **meta: object
) -> None:
    """What an earlier run of ``url`` left: ``dest.incomplete`` holding ``data``, and its sidecar
    (the URL's hash, the validator, and any other ``meta`` fields), as a run writes them."""
    part = dest.with_name(dest.name + ".incomplete")
    part.write_bytes(data)
    part.chmod(0o644)
    record = {"url": url, "url_sha256": url_key(url), "validator": validator, **meta}
    sidecar = dest.with_name(dest.name + ".incomplete.json")
    sidecar.write_text(json.dumps(record))
    sidecar.chmod(0o600)


def http_date(seconds_from_now: float) -> str:
    return email.utils.formatdate(time.time() + seconds_from_now, usegmt=True)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def raw_server(answer: Callable[[bytes], bytes]) -> tuple[str, socket.socket]:
    """An HTTP/1.1 server on port 0 answering each connection's one request with raw bytes."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)

    def loop() -> None:
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            request = b""
            while b"\r\n\r\n" not in request:
                data = conn.recv(65536)
                if not data:
                    break
                request += data
            try:
                conn.sendall(answer(request))
            except OSError:
                pass
            conn.close()

    threading.Thread(target=loop, daemon=True).start()
    return f"http://127.0.0.1:{sock.getsockname()[1]}/f", sock
