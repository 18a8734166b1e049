#!/usr/bin/env python3
"""A TCP proxy on 127.0.0.1 that makes a loopback server look like a remote one (benchmarks only).

Real S3 gives each connection a bounded rate (tens of MB/s) and tens of milliseconds to the
first byte, so what wins there is keeping many connections busy; on loopback every tool is
CPU-bound instead. This proxy puts the remote regime back in front of a local server:

* each accepted connection gets ``rate`` MiB/s in each direction (paced, no burst credit);
* the first byte of every response (server-to-client bytes after client-to-server bytes) is
  forwarded no earlier than ``latency`` ms after the request's last byte passed through.

Bytes move with ``splice(2)`` through a pipe per direction (no copy into Python), one thread
per direction, so 32 connections x 16 MiB/s cost the proxy a fraction of one core
(``python scripts/wanproxy.py --check 32`` measures it). It runs in its own process
(:class:`ProxyProcess`), so a client timed in the benchmark's own process never shares a GIL
with it; :class:`ShapingProxy` is the same proxy in threads of the caller.

    python scripts/wanproxy.py --upstream 127.0.0.1:9000 --wan 16,30   # serve; prints the port
    python scripts/wanproxy.py --check 32 --wan 16,30                  # how much it can carry

Served as a child, it answers ``stats`` and ``reset`` lines on stdin with one JSON line on
stdout (connections accepted, peak concurrent connections, bytes each way); EOF stops it.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

MiB = 1 << 20
CHUNK = 128 << 10  # bytes per splice: 8 ms of a 16 MiB/s connection
PIPE_SIZE = 1 << 20


def parse_wan(text: str) -> tuple[float, float]:
    """``RATE_MIB_PER_CONN,LATENCY_MS`` -> (MiB/s, ms); a rate of 0 means unlimited."""
    try:
        rate_text, latency_text = text.split(",")
        rate, latency = float(rate_text), float(latency_text)
    except ValueError:
        raise ValueError(
            f"--wan {text!r}: expected RATE_MIB_PER_CONN,LATENCY_MS, e.g. 16,30"
        ) from None
    if rate < 0 or latency < 0:
        raise ValueError(f"--wan {text!r}: rate and latency must not be negative")
    return rate, latency


@dataclass
class Stats:
    connections: int = 0
    active: int = 0
    peak: int = 0
    up_bytes: int = 0
    down_bytes: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    # Forwards under way: their bytes may be the reader's before they are counted.
    forwarding: int = 0

    def __post_init__(self) -> None:
        self.quiet = threading.Condition(self.lock)

    def counted(self, up: bool, forward: Callable[[], int]) -> None:
        """``forward()`` (it returns the bytes it moved), counted before :meth:`snapshot` can
        read the counts again: a client that has its response reads a count that holds it."""
        with self.lock:
            self.forwarding += 1
        moved = 0
        try:
            moved = forward()
        finally:
            with self.lock:
                if up:
                    self.up_bytes += moved
                else:
                    self.down_bytes += moved
                self.forwarding -= 1
                self.quiet.notify_all()

    def snapshot(self) -> dict[str, int]:
        """The counts once no forward is under way (a hung-up peer ends one at once; 60 s is
        for a peer connected and not reading)."""
        with self.quiet:
            self.quiet.wait_for(lambda: not self.forwarding, timeout=60)
            return {
                "connections": self.connections,
                "active": self.active,
                "peak": self.peak,
                "up_bytes": self.up_bytes,
                "down_bytes": self.down_bytes,
            }

    def reset(self) -> None:
        """Start a new measurement: counters to zero, the peak to what is open now."""
        with self.lock:
            self.connections = self.up_bytes = self.down_bytes = 0
            self.peak = self.active


class _Pacer:
    """Holds a direction of one connection to ``rate`` bytes per second.

    A late wake-up (sleep overshoot, a busy machine) is made up within ``SLACK`` seconds, so the
    long-run rate is the rate asked for; each request and each response starts from no credit.
    """

    SLACK = 0.02

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.due: float | None = None

    def after(self, sent: int) -> None:
        if self.rate <= 0:
            return
        now = time.monotonic()
        start = now if self.due is None else max(self.due, now - self.SLACK)
        self.due = start + sent / self.rate
        if self.due > now:
            time.sleep(self.due - now)


class _Link:
    """One accepted connection: two threads, client-to-server and server-to-client."""

    def __init__(self, proxy: ShapingProxy, client: socket.socket) -> None:
        self.proxy = proxy
        self.client = client
        self.server = socket.create_connection(proxy.upstream)
        for sock in (client, self.server):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.request_at = 0.0
        self.pending = False  # request bytes went up and no response byte came down yet
        self.done = 0
        self.lock = threading.Lock()

    def start(self) -> None:
        for target in (self._up, self._down):
            threading.Thread(target=target, daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, up: bool) -> None:
        pacer = _Pacer(self.proxy.rate)
        latency = self.proxy.latency
        stats = self.proxy.stats
        read_end, write_end = os.pipe()
        with contextlib.suppress(OSError):
            fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
        try:
            while True:
                got = os.splice(src.fileno(), write_end, self.proxy.chunk)
                if up and got:
                    if not self.pending:  # a new request: no credit from the idle time
                        pacer.due = None
                    # before forwarding: the response cannot overtake the flag
                    self.request_at, self.pending = time.monotonic(), True
                elif got and self.pending:  # the first bytes of a response
                    self.pending = False
                    wait = self.request_at + latency - time.monotonic()
                    if wait > 0:
                        time.sleep(wait)
                    pacer.due = None
                if not got:
                    with contextlib.suppress(OSError):
                        dst.shutdown(socket.SHUT_WR)
                    return
                stats.counted(up, partial(self._forward, read_end, dst, got))
                if up:
                    self.request_at = time.monotonic()  # latency counts from the last byte
                pacer.after(got)
        except OSError:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_RDWR)
        finally:
            os.close(read_end)
            os.close(write_end)
            self._finish()

    @staticmethod
    def _forward(read_end: int, dst: socket.socket, count: int) -> int:
        """Move ``count`` bytes from the pipe into ``dst``; returns ``count``."""
        left = count
        while left:
            left -= os.splice(read_end, dst.fileno(), left)
        return count

    def _up(self) -> None:
        self._pump(self.client, self.server, up=True)

    def _down(self) -> None:
        self._pump(self.server, self.client, up=False)

    def _finish(self) -> None:
        with self.lock:
            self.done += 1
            last = self.done == 2
        if last:
            self.client.close()
            self.server.close()
            with self.proxy.stats.lock:
                self.proxy.stats.active -= 1


class ShapingProxy:
    """The proxy in threads of this process: ``with ShapingProxy((host, port), 16, 30) as p``."""

    def __init__(
        self,
        upstream: tuple[str, int],
        rate_mib: float,
        latency_ms: float,
        chunk: int = CHUNK,
    ) -> None:
        self.upstream = upstream
        self.rate = rate_mib * MiB
        self.latency = latency_ms / 1000
        self.chunk = chunk
        self.stats = Stats()
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(256)
        self.port: int = self.listener.getsockname()[1]
        self._closed = False

    def start(self) -> ShapingProxy:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                link = _Link(self, client)
            except OSError:
                client.close()
                continue
            with self.stats.lock:
                self.stats.connections += 1
                self.stats.active += 1
                self.stats.peak = max(self.stats.peak, self.stats.active)
            link.start()

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()

    def __enter__(self) -> ShapingProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


class ProxyProcess:
    """The proxy in a child process (its own GIL); ``stats()`` and ``reset()`` ask it by pipe."""

    SCRIPT = __file__  # the proxy the child runs (cpuproxy.py sets its own)
    WHAT = "the shaping proxy"

    def __init__(self, upstream: tuple[str, int], rate_mib: float, latency_ms: float) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                self.SCRIPT,
                "--upstream",
                f"{upstream[0]}:{upstream[1]}",
                "--wan",
                f"{rate_mib},{latency_ms}",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("listening "):
            self.close()
            raise RuntimeError(f"{self.WHAT} did not start: {line!r}")
        self.port = int(line.split()[1])

    def _ask(self, what: str) -> dict[str, int]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(what + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def stats(self) -> dict[str, int]:
        return self._ask("stats")

    def reset(self) -> dict[str, int]:
        return self._ask("reset")

    def cpu_seconds(self) -> float:
        """User plus system CPU the proxy has used so far (``/proc/PID/stat``)."""
        stat = Path(f"/proc/{self.proc.pid}/stat").read_text()
        fields = stat.rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def close(self) -> None:
        if self.proc.stdin:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> ProxyProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _serve(upstream: str, wan: str) -> int:
    host, port = upstream.rsplit(":", 1)
    rate, latency = parse_wan(wan)
    proxy = ShapingProxy((host, int(port)), rate, latency).start()
    print(f"listening {proxy.port}", flush=True)
    for line in sys.stdin:
        command = line.strip()
        if command == "reset":
            proxy.stats.reset()
        print(json.dumps(proxy.stats.snapshot()), flush=True)
    proxy.close()
    return 0


def check(connections: int, rate_mib: float, latency_ms: float, seconds: float) -> dict:
    """Push ``connections`` downloads through a proxy process for ``seconds``; what it carried.

    The source and the sinks run in threads of this process (1 MiB per system call, so they
    hardly touch the GIL); the proxy runs in its own process, whose CPU time is reported.
    """
    source = socket.socket()
    source.bind(("127.0.0.1", 0))
    source.listen(connections)
    block = b"\0" * MiB
    stop = threading.Event()

    def feed() -> None:
        while not stop.is_set():
            try:
                conn, _ = source.accept()
            except OSError:
                return
            threading.Thread(target=_feed_one, args=(conn,), daemon=True).start()

    def _feed_one(conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            conn.recv(16)  # the "request"
            while not stop.is_set():
                conn.sendall(block)

    received = [0] * connections
    first_byte = [0.0] * connections

    def sink(i: int, port: int, until: float) -> None:
        buf = bytearray(MiB)
        with socket.create_connection(("127.0.0.1", port)) as conn:
            asked = time.monotonic()
            conn.sendall(b"GET")
            while time.monotonic() < until:
                got = conn.recv_into(buf)
                if not got:
                    break
                if not received[i]:
                    first_byte[i] = time.monotonic() - asked
                received[i] += got

    threading.Thread(target=feed, daemon=True).start()
    with ProxyProcess(source.getsockname(), rate_mib, latency_ms) as proxy:
        cpu0, start = proxy.cpu_seconds(), time.monotonic()
        until = start + seconds
        sinks = [
            threading.Thread(target=sink, args=(i, proxy.port, until), daemon=True)
            for i in range(connections)
        ]
        for t in sinks:
            t.start()
        for t in sinks:
            t.join(seconds + 30)
        wall = time.monotonic() - start
        cpu = proxy.cpu_seconds() - cpu0
        stop.set()
    source.close()
    total = sum(received)
    return {
        "connections": connections,
        "rate_mib_per_conn": rate_mib,
        "latency_ms": latency_ms,
        "seconds": round(wall, 2),
        "aggregate_mib_s": round(total / MiB / wall, 1),
        "target_mib_s": connections * rate_mib,
        "slowest_conn_mib_s": round(min(received) / MiB / wall, 2),
        "first_byte_ms_min": round(min(first_byte) * 1000, 1),
        "proxy_cpu_seconds": round(cpu, 2),
        "proxy_cores": round(cpu / wall, 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream", help="HOST:PORT of the server to put behind the proxy")
    parser.add_argument("--wan", default="16,30", help="RATE_MIB_PER_CONN,LATENCY_MS (16,30)")
    parser.add_argument("--check", type=int, metavar="N", help="measure N connections instead")
    parser.add_argument("--seconds", type=float, default=5, help="how long --check runs")
    args = parser.parse_args()
    if args.check:
        rate, latency = parse_wan(args.wan)
        print(json.dumps(check(args.check, rate, latency, args.seconds), indent=2))
        return 0
    if not args.upstream:
        parser.error("--upstream HOST:PORT or --check N")
    return _serve(args.upstream, args.wan)


if __name__ == "__main__":
    raise SystemExit(main())
