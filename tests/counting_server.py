"""A TCP server on 127.0.0.1 that counts every connection made to it.

A dry run promises no network: pointed at this server (as a download URL, an S3 endpoint, the
RunPod API), a plan made without ``--probe`` must leave the count at zero. Each connection gets
one short HTTP answer (200, ``[]``) and is closed, so a client that does connect ends quickly.
"""

from __future__ import annotations

import socket
import threading
from types import TracebackType

ANSWER = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n"
    b"Connection: close\r\n\r\n[]"
)


class CountingServer:
    def __init__(self) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._sock.settimeout(0.1)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._count = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}"

    @property
    def connections(self) -> int:
        with self._lock:
            return self._count

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self._count += 1
            with conn:
                conn.settimeout(2)
                try:
                    conn.recv(65536)  # the request head (bounded); its content does not matter
                    conn.sendall(ANSWER)
                except OSError:
                    pass

    def __enter__(self) -> CountingServer:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._sock.close()
