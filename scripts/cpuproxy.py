#!/usr/bin/env python3
"""A second remote-like harness that costs the machine real CPU, as a busy runner does
(benchmarks only).

scripts/wanproxy.py moves bytes with ``splice(2)`` and costs a fraction of a core, so the
client has the machine to itself. A real runner also runs the job, and an in-cluster store
leaves the client CPU-bound: what such a link measures is the link and the client's CPU per
verified byte together. This proxy is that harness (issue 28): an asyncio TCP proxy on
127.0.0.1 that copies every byte through Python, and shapes like wanproxy:

* each connection gets ``rate`` MiB/s in each direction, paced by a token bucket without burst
  credit (every request and every response starts with an empty bucket);
* the first byte of every response (server-to-client bytes after client-to-server bytes) goes
  out no earlier than ``latency`` ms after the request's last byte passed through.

It runs in its own process (:class:`CpuProxyProcess`, the same child protocol as wanproxy's
:class:`wanproxy.ProxyProcess`: ``stats`` and ``reset`` lines on stdin, one JSON line back),
so ``scripts/bench_cache.py --wan 16,30 --harness cpuproxy`` reports its CPU beside each run.

    python scripts/cpuproxy.py --upstream 127.0.0.1:9000 --wan 16,30   # serve; prints the port
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import threading
import time

import wanproxy

CHUNK = 64 << 10  # bytes per read: 4 ms of a 16 MiB/s connection
MiB = 1 << 20


class _Bucket:
    """``rate`` bytes per second for one direction of one connection; no credit is kept
    across an idle gap (:meth:`empty` at the start of each request or response). A late
    wake-up of the loop is made up within ``SLACK`` seconds, as in wanproxy, so the long-run
    rate is the rate asked for."""

    SLACK = 0.02

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.due = 0.0

    def empty(self) -> None:
        self.due = time.monotonic()

    async def take(self, count: int) -> None:
        if self.rate <= 0:
            return
        now = time.monotonic()
        if self.due > now:
            await asyncio.sleep(self.due - now)
        self.due = max(self.due, now - self.SLACK) + count / self.rate


class CpuProxy:
    """The proxy's event loop (in a thread of the serving process) and its counters."""

    def __init__(self, upstream: tuple[str, int], rate_mib: float, latency_ms: float) -> None:
        self.upstream = upstream
        self.rate = rate_mib * MiB
        self.latency = latency_ms / 1000
        self.stats = wanproxy.Stats()
        self.port = 0

    async def serve(self, ready: threading.Event) -> None:
        server = await asyncio.start_server(self._link, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        ready.set()
        async with server:
            await server.serve_forever()

    async def _link(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection(*self.upstream)
        except OSError:
            client_w.close()
            return
        with self.stats.lock:
            self.stats.connections += 1
            self.stats.active += 1
            self.stats.peak = max(self.stats.peak, self.stats.active)
        state = {"request_at": 0.0, "pending": False}
        try:
            await asyncio.gather(
                self._pump(client_r, server_w, state, up=True),
                self._pump(server_r, client_w, state, up=False),
            )
        finally:
            for writer in (client_w, server_w):
                writer.close()
            with self.stats.lock:
                self.stats.active -= 1

    async def _pump(
        self,
        src: asyncio.StreamReader,
        dst: asyncio.StreamWriter,
        state: dict[str, float | bool],
        up: bool,
    ) -> None:
        bucket = _Bucket(self.rate)
        try:
            while data := await src.read(CHUNK):
                if up:
                    if not state["pending"]:  # a new request: its first bytes start empty
                        bucket.empty()
                    await bucket.take(len(data))
                    dst.write(data)
                    await dst.drain()
                    state["request_at"], state["pending"] = time.monotonic(), True
                else:
                    if state["pending"]:  # a response's first byte: the latency, then empty
                        wait = float(state["request_at"]) + self.latency - time.monotonic()
                        if wait > 0:
                            await asyncio.sleep(wait)
                        state["pending"] = False
                        bucket.empty()
                    await bucket.take(len(data))
                    dst.write(data)
                    await dst.drain()
                with self.stats.lock:
                    if up:
                        self.stats.up_bytes += len(data)
                    else:
                        self.stats.down_bytes += len(data)
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(OSError, RuntimeError):
                if dst.can_write_eof():
                    dst.write_eof()


class CpuProxyProcess(wanproxy.ProxyProcess):
    """This proxy in a child process, driven like :class:`wanproxy.ProxyProcess`."""

    SCRIPT = __file__
    WHAT = "the CPU-bound proxy"


def _serve(upstream: str, wan: str) -> int:
    host, port = upstream.rsplit(":", 1)
    rate, latency = wanproxy.parse_wan(wan)
    proxy = CpuProxy((host, int(port)), rate, latency)
    ready = threading.Event()
    loop = asyncio.new_event_loop()
    thread = threading.Thread(
        target=lambda: loop.run_until_complete(proxy.serve(ready)), daemon=True
    )
    thread.start()
    if not ready.wait(10):
        print("did not start", flush=True)
        return 1
    print(f"listening {proxy.port}", flush=True)
    for line in sys.stdin:
        if line.strip() == "reset":
            proxy.stats.reset()
        print(json.dumps(proxy.stats.snapshot()), flush=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream", required=True, help="HOST:PORT of the server")
    parser.add_argument("--wan", default="16,30", help="RATE_MIB_PER_CONN,LATENCY_MS")
    args = parser.parse_args()
    return _serve(args.upstream, args.wan)


if __name__ == "__main__":
    raise SystemExit(main())
