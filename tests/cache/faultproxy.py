"""A tiny HTTP proxy on 127.0.0.1 that injects S3 faults in front of a real server.

Rules match a method and a substring of the path and fire a given number of times: answer
503 SlowDown, 429 or 500, drop the connection, cut the body short, flip bytes, delay, or trickle the
body slowly (so a test can kill a client mid-transfer).
"""

from __future__ import annotations

import http.client
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "upgrade"}


@dataclass
class Rule:
    method: str
    contains: str
    # 503 | 503-together | 429 | 500 | drop | truncate | corrupt | delay | throttle | badlength
    # | hold-until (held until a request matching ``until`` has come, or ``seconds`` have passed)
    # | hold (held until the test sets ``release``, or ``seconds`` have passed; then relayed)
    action: str
    times: int = 1
    seconds: float = 0.0  # delay, or seconds per 64 KiB when throttling
    fired: int = 0
    until: tuple[str, str] | None = None  # hold-until's (method, path part) to wait for
    released: int = 0  # hold-until: requests let go because that one came, not by the deadline
    release: threading.Event = field(default_factory=threading.Event)  # hold: let them go


class _Relays(ThreadingHTTPServer):
    """The proxy's server, which keeps each connection and its thread until they end."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.live: dict[socket.socket, threading.Thread] = {}
        self.live_lock = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(
            target=self._serve_one, args=(request, client_address), daemon=True
        )
        with self.live_lock:
            self.live[request] = thread
        thread.start()

    def _serve_one(self, request: Any, client_address: Any) -> None:
        try:
            self.process_request_thread(request, client_address)
        finally:
            with self.live_lock:
                self.live.pop(request, None)

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a relay cut by the client or by end_relays: nothing to report

    def end_relays(self, wait_s: float = 10.0) -> None:
        """Shut every live connection (its thread's reads and writes fail at once) and wait
        for the threads, each at most ``wait_s``."""
        with self.live_lock:
            live = list(self.live.items())
        for sock, _ in live:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for _, thread in live:
            thread.join(wait_s)


class FaultProxy:
    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.rules: list[Rule] = []
        self.seen: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self.together = threading.Condition()
        # Set by stop(): a delayed or held relay ends at once instead of sleeping out its rule
        # (a killed client's 30 s delays had held the test's teardown 30 s).
        self.stopping = threading.Event()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def _rule(self) -> Rule | None:
                with proxy.lock:
                    proxy.seen.append((self.command, self.path))
                    for rule in proxy.rules:
                        if (
                            rule.method in (self.command, "*")
                            and rule.contains in self.path
                            and rule.fired < rule.times
                        ):
                            rule.fired += 1
                            return rule
                return None

            def _error(self, status: int, code: str) -> None:
                body = f"<Error><Code>{code}</Code><Message>injected</Message></Error>".encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _proxy(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                rule = self._rule()
                action = rule.action if rule else ""
                if action == "503":
                    return self._error(503, "SlowDown")
                if action == "503-together":  # one burst: held until all ``times`` have come
                    assert rule is not None
                    deadline = time.monotonic() + (rule.seconds or 10.0)
                    with proxy.together:
                        proxy.together.notify_all()
                        while rule.fired < rule.times and time.monotonic() < deadline:
                            proxy.together.wait(0.05)
                    return self._error(503, "SlowDown")
                if action == "500":
                    return self._error(500, "InternalError")
                if action == "429":
                    return self._error(429, "TooManyRequests")
                if action == "403":  # read-only credentials asked to write
                    return self._error(403, "AccessDenied")
                if action == "drop":
                    self.close_connection = True
                    return
                if action == "delay" and proxy.stopping.wait(rule.seconds):
                    self.close_connection = True
                    return
                if action == "hold":
                    assert rule is not None
                    rule.release.wait(rule.seconds or 10.0)
                if action == "hold-until":
                    assert rule is not None and rule.until is not None
                    deadline = time.monotonic() + (rule.seconds or 10.0)
                    while not proxy.count(*rule.until) and time.monotonic() < deadline:
                        time.sleep(0.02)
                    if proxy.count(*rule.until):
                        rule.released += 1
                conn = http.client.HTTPConnection(*proxy.upstream, timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
                headers.pop("Expect", None)
                conn.request(self.command, self.path, body=body or None, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                conn.close()
                if action == "badlength":  # a header no HTTP server may send
                    self.send_response(resp.status)
                    self.send_header("Content-Length", "abc")
                    self.end_headers()
                    self.close_connection = True
                    return
                self.send_response(resp.status)
                for key, value in resp.getheaders():
                    if key.lower() not in HOP and key.lower() != "content-length":
                        self.send_header(key, value)
                if self.command == "HEAD":  # a HEAD's length is the GET's, as the server said
                    self.send_header("Content-Length", resp.getheader("Content-Length") or "0")
                    self.end_headers()
                    return
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if action == "truncate":
                    self.wfile.write(data[: len(data) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                if action == "corrupt":
                    data = bytes(b ^ 0xFF for b in data[:64]) + data[64:]
                if action == "throttle":
                    for start in range(0, len(data), 65536):
                        self.wfile.write(data[start : start + 65536])
                        self.wfile.flush()
                        if proxy.stopping.wait(rule.seconds):
                            break
                    return
                self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _proxy

        self.server = _Relays(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FaultProxy:
        self.thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, and end the relays still under way: a killed client's request may
        still be relaying megabytes, which a later test in this worker would count as its
        own memory (tracemalloc traces every thread)."""
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()
        self.server.end_relays()

    def add(
        self,
        method: str,
        contains: str,
        action: str,
        times: int = 1,
        seconds: float = 0.0,
        until: tuple[str, str] | None = None,
    ) -> Rule:
        rule = Rule(method, contains, action, times, seconds, until=until)
        with self.lock:
            self.rules.append(rule)
        return rule

    def count(self, method: str, contains: str) -> int:
        with self.lock:
            return sum(1 for m, p in self.seen if m == method and contains in p)
