"""A minimal HTTP/1.1 ranged GET over a plain socket, for the data path on ``http://`` endpoints.

``http.client`` reads a body through a BufferedReader that returns to Python, and re-takes the
GIL, every socket-buffer's worth (about 64-256 KiB). Here the body lands in the caller's buffer
with ``recv_into(..., MSG_WAITALL)`` on a blocking socket: one system call and one GIL round
trip per 4 MiB. On a 2-core runner that shares its CPU with the S3 server this measured about
15-20% faster than ``http.client`` (see docs/benchmarks.md). TLS endpoints keep ``http.client``.

:meth:`RawConnection.exchange` serves the control plane's small requests (refs, manifests,
listings, one PUT) on ``http://`` endpoints too: a restore then never imports ``http.client``,
``email`` and ``ssl`` (30-40 ms of start-up on a busy 2-core runner).
"""

from __future__ import annotations

import os
import socket
import struct
from typing import TYPE_CHECKING

from gpuci.redact import excerpt

if TYPE_CHECKING:
    from gpuci.cache.splicing import Pipe

_TIMEOUT_S = 60
_MAX_HEADER = 64 << 10


class RawConnection:
    """One keep-alive connection; not thread-safe (each worker thread owns its own)."""

    def __init__(self, host: str, port: int, host_header: str) -> None:
        self.host, self.port = host, port
        self.host_header = host_header  # exactly as signed in the presigned URL
        self.sock: socket.socket | None = None

    def _connect(self) -> socket.socket:
        sock = socket.create_connection((self.host, self.port), timeout=10)
        sock.settimeout(None)  # blocking, so MSG_WAITALL waits for the whole buffer...
        timeout = struct.pack("ll", _TIMEOUT_S, 0)  # ...but never forever
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeout)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def get(self, target: str, headers: dict[str, str]) -> RawResponse:
        """Send a GET and read the status line and headers; the body is left on the socket."""
        return self.send("GET", target, headers)

    def send(
        self, method: str, target: str, headers: dict[str, str], body: bytes = b""
    ) -> RawResponse:
        """Send one request and read the status line and headers; the body is left on the
        socket (chunked bodies only for :meth:`exchange`, which reads them whole)."""
        response = self._send(method, target, headers, body)
        if response.chunked:
            raise ConnectionResetError("chunked responses are not used by S3 GETs")
        return response

    def exchange(
        self,
        method: str,
        target: str,
        headers: dict[str, str],
        body: bytes = b"",
        limit: int = 1 << 20,
    ) -> tuple[int, dict[str, str], bytes]:
        """One whole request: (status, headers, body), at most ``limit + 1`` bytes of body.

        For the control plane's small answers (refs, manifests, listings, errors). The
        connection stays open for the next request only when the body was read to its end."""
        response = self._send(method, target, headers, body)
        if method == "HEAD" or response.status in (204, 304) or 100 <= response.status < 200:
            response.length = 0  # no body follows, whatever Content-Length says
            if not response.keep_alive:
                self.close()  # the server may hold its end open (Werkzeug does): never reuse it
            return response.status, response.headers, b""
        if response.chunked:
            data = response.read_chunked(limit)
        elif "content-length" not in response.headers and not response.keep_alive:
            data = response.read_to_close(limit)  # HTTP/1.0 style: the body ends with the socket
        else:
            data = response.read(limit + 1)
        if response.length or response.chunked or not response.keep_alive:
            self.close()  # over the cap or closing: the rest is never read
        return response.status, response.headers, data

    def _send(self, method: str, target: str, headers: dict[str, str], body: bytes) -> RawResponse:
        if self.sock is None:
            self.sock = self._connect()
        lines = [f"{method} {target} HTTP/1.1", f"Host: {self.host_header}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        if body or method in ("PUT", "POST"):
            lines.append(f"Content-Length: {len(body)}")
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionResetError("connection closed before the response headers")
            data += chunk
            if len(data) > _MAX_HEADER:
                raise ConnectionResetError("response headers too large")
        head, _, rest = data.partition(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        parts = status_line.split(" ", 2)
        if len(parts) < 2 or not parts[1].isdigit():
            raise ConnectionResetError(f"malformed status line '{excerpt(status_line, 80)}'")
        fields: dict[str, str] = {}
        for line in header_lines:
            name, _, value = line.partition(":")
            fields[name.strip().lower()] = value.strip()
        old = parts[0] == "HTTP/1.0"  # closes after each answer unless it says keep-alive
        if "chunked" in fields.get("transfer-encoding", "").lower():
            return RawResponse(self, int(parts[1]), fields, 0, rest, chunked=True, http10=old)
        length = _content_length(fields.get("content-length", ""))
        return RawResponse(self, int(parts[1]), fields, length, rest, http10=old)


class BadResponse(ValueError):
    """An answer no HTTP server may send (a Content-Length that is not a number): not retried."""


def _content_length(value: str) -> int:
    text = value.strip()
    if not text:
        return 0
    if not text.isascii() or not text.isdigit():
        raise BadResponse(f"the server sent Content-Length {text[:40]!r}, not a byte count")
    return int(text)


class RawResponse:
    def __init__(
        self,
        conn: RawConnection,
        status: int,
        headers: dict[str, str],
        length: int,
        early: bytes,
        chunked: bool = False,
        http10: bool = False,
    ) -> None:
        self.conn, self.status, self.headers = conn, status, headers
        self.length = length  # body bytes still to read
        self.chunked = chunked
        self._raw = bytearray(early)  # chunked: what arrived with the headers, still encoded
        self._early = memoryview(early)[:length]
        connection = headers.get("connection", "").lower()
        self.keep_alive = connection == "keep-alive" if http10 else connection != "close"

    def readinto(self, buffer: memoryview) -> int:
        want = min(len(buffer), self.length)
        if want <= 0:
            return 0
        if len(self._early):
            n = min(want, len(self._early))
            buffer[:n] = self._early[:n]
            self._early = self._early[n:]
        else:
            assert self.conn.sock is not None
            n = self.conn.sock.recv_into(buffer, want, socket.MSG_WAITALL)
            if n == 0:
                raise ConnectionResetError("connection closed mid-body")
        self.length -= n
        return n

    def splice_into(self, pipe: Pipe, limit: int) -> int:
        """Move up to ``limit`` body bytes into ``pipe`` without copying them to user space.

        Bytes that came in with the headers are written into the pipe; the rest goes straight
        from the socket (``splice``), so the caller can drain them into a file in the kernel.
        """
        want = min(limit, self.length, pipe.room())
        if want <= 0:
            return 0
        if len(self._early):
            n = os.write(pipe.w, self._early[:want])
            self._early = self._early[n:]
        else:
            assert self.conn.sock is not None
            n = os.splice(self.conn.sock.fileno(), pipe.w, want)
            if n == 0:
                raise ConnectionResetError("connection closed mid-body")
        pipe.filled(n)
        self.length -= n
        return n

    def read(self, limit: int) -> bytes:
        buf = bytearray(min(limit, self.length))
        view = memoryview(buf)
        got = 0
        while got < len(buf):
            n = self.readinto(view[got:])
            got += n
        return bytes(buf)

    def read_to_close(self, limit: int) -> bytes:
        """A body without a length, up to the server's close; at most ``limit + 1`` bytes."""
        out = bytearray(self._raw)
        while len(out) <= limit:
            assert self.conn.sock is not None
            chunk = self.conn.sock.recv(1 << 20)
            if not chunk:
                break
            out += chunk
        return bytes(out[: limit + 1])

    def read_chunked(self, limit: int) -> bytes:
        """A chunked body, decoded, at most ``limit + 1`` bytes (then the rest is abandoned)."""
        out = bytearray()
        while len(out) <= limit:
            line = self._line()
            size_text = line.split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise BadResponse(f"bad chunk size {size_text[:20]!r}") from None
            if size == 0:
                while self._line():  # trailers, up to the empty line
                    pass
                self.chunked = False  # read to its end: the connection may be reused
                return bytes(out)
            want = min(size, limit + 1 - len(out))  # a hostile size is never buffered whole
            out += self._take(want)
            if want < size:
                break
            self._take(2)  # the CRLF after each chunk
        return bytes(out[: limit + 1])

    def _line(self) -> bytes:
        while b"\r\n" not in self._raw:
            if len(self._raw) > _MAX_HEADER:
                raise ConnectionResetError("chunk header too large")
            self._more()
        line, _, rest = bytes(self._raw).partition(b"\r\n")
        self._raw = bytearray(rest)
        return line

    def _take(self, size: int) -> bytes:
        while len(self._raw) < size:
            self._more()
        data = bytes(self._raw[:size])
        del self._raw[:size]
        return data

    def _more(self) -> None:
        assert self.conn.sock is not None
        chunk = self.conn.sock.recv(1 << 20)
        if not chunk:
            raise ConnectionResetError("connection closed mid-body")
        self._raw += chunk
